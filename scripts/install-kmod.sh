#!/bin/bash
# Installs aigpu.ko's operator files: the DKMS source tree, the modprobe.d file and the udev
# rule (docs/kmd.md, "Installing on a server"):
#   <destdir>/usr/src/aigpu-<version>/         packaging/kmod/dkms.conf, packaging/kmod/Makefile
#                                              (as Makefile), Kbuild, kmd/, uapi/src/v1/,
#                                              vgpu/src/model/, rules/src/rules/ (the sources
#                                              kmd/aigpu.rs includes)
#   <destdir>/etc/modprobe.d/aigpu.conf        packaging/kmod/aigpu.conf
#   <destdir>/usr/lib/udev/rules.d/70-aigpu.rules   packaging/kmod/70-aigpu.rules
#
#   scripts/install-kmod.sh [--destdir=DIR] [--dkms[=<release>]] [--kernelsourcedir=DIR]
#
# --dkms: then `dkms add`, `dkms build` and `dkms install` for <release> (default `uname -r`),
# which puts aigpu.ko in /lib/modules/<release>/updates/dkms/ and runs depmod; only without
# --destdir (DKMS works on the running system's /var/lib/dkms and /lib/modules).
# --kernelsourcedir: the kernel build tree DKMS builds against, when it is not
# /lib/modules/<release>/build (e.g. this project's tree: scripts/build-kernel.sh).
# The version is the workspace's (Cargo.toml), as in dkms.conf's PACKAGE_VERSION.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "install-kmod: $*" >&2; exit 1; }

destdir=
dkms_rel=
ksrc=
while [ $# -gt 0 ]; do
  case "$1" in
    --destdir=*) destdir=${1#*=} ;;
    --dkms) dkms_rel=$(uname -r) ;;
    --dkms=*) dkms_rel=${1#*=} ;;
    --kernelsourcedir=*) ksrc=${1#*=} ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done
[ -z "$dkms_rel" ] || [ -z "$destdir" ] || die "--dkms installs on this system: not with --destdir"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
grep -qx "PACKAGE_VERSION=\"$version\"" "$ROOT/packaging/kmod/dkms.conf" ||
  die "packaging/kmod/dkms.conf's PACKAGE_VERSION is not the workspace version $version"

src=$destdir/usr/src/aigpu-$version
rm -rf "$src"
mkdir -p "$src/uapi/src" "$src/vgpu/src"
install -m644 "$ROOT/packaging/kmod/dkms.conf" "$src/dkms.conf"
install -m644 "$ROOT/packaging/kmod/Makefile" "$src/Makefile"
install -m644 "$ROOT/Kbuild" "$src/Kbuild"
# Sources only: never objects of an in-tree build.
cp -r --no-preserve=mode "$ROOT/kmd" "$src/kmd"
rm -rf "$src/kmd/kconfig"
find "$src/kmd" -type f ! -name '*.rs' ! -name Kbuild -delete
cp -r --no-preserve=mode "$ROOT/uapi/src/v1" "$src/uapi/src/v1"
cp -r --no-preserve=mode "$ROOT/vgpu/src/model" "$src/vgpu/src/model"
mkdir -p "$src/rules/src"
cp -r --no-preserve=mode "$ROOT/rules/src/rules" "$src/rules/src/rules"
install -D -m644 "$ROOT/packaging/kmod/aigpu.conf" "$destdir/etc/modprobe.d/aigpu.conf"
install -D -m644 "$ROOT/packaging/kmod/70-aigpu.rules" "$destdir/usr/lib/udev/rules.d/70-aigpu.rules"
echo "install-kmod: DKMS source tree $src, $destdir/etc/modprobe.d/aigpu.conf, $destdir/usr/lib/udev/rules.d/70-aigpu.rules"

if [ -n "$dkms_rel" ]; then
  command -v dkms >/dev/null || die "no dkms (apt-get install dkms)"
  kopt=()
  [ -z "$ksrc" ] || kopt=(--kernelsourcedir "$ksrc")
  # A previous registration of this version is replaced.
  dkms remove -m aigpu -v "$version" --all >/dev/null 2>&1 || true
  dkms add -m aigpu -v "$version"
  dkms build -m aigpu -v "$version" -k "$dkms_rel" "${kopt[@]}"
  dkms install -m aigpu -v "$version" -k "$dkms_rel" "${kopt[@]}"
fi
