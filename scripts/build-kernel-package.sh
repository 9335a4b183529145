#!/bin/bash
# Builds installable Debian packages of a kernel that can load aigpu.ko, from the configuration
# the tests use: the kernel's own `make bindeb-pkg` on a copy of scripts/build-kernel.sh's
# build tree (same .config, same compilers: scripts/env.sh's KMAKE_VARS). In the copy kbuild
# rebuilds objtool and the Rust crates and relinks vmlinux with the package's build number; the
# cached tree itself is never touched. Measured: about 3 min on 2 cores (docs/kmd.md).
#
#   scripts/build-kernel-package.sh [debug|base|prof]    (default: debug, the tests' flavour)
#
# Output in out/kernel-pkg/<flavor>/: linux-image-<release>_<version>_amd64.deb (bzImage,
# System.map, config, the in-tree modules), linux-headers-<release>_..., linux-libc-dev_...,
# and contents.txt (`dpkg-deb -I` and `dpkg-deb -c` of each). Then checks what an operator's
# DKMS would do with the headers package: it is unpacked and aigpu.ko built against it
# (packaging/kmod/Makefile), then once more with the kernel crate's metadata (rust/*.rmeta,
# rust/*.so) added to it; both results are printed, the logs kept in out/kernel-pkg/<flavor>/
# (headers-build.log, headers-rust-build.log).
# Not part of the test command (docs/kmd.md, "Installing on a server": the measured time).
# Installs the kernel's package build dependencies when missing (debhelper: its debian/rules
# runs dh_* commands; rsync, libdw-dev).
# The copy of the build tree (about 700 MB) is deleted at the end unless KEEP_BUILD=1.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"
FLAVOR=${1:-debug}
case $FLAVOR in base|debug|prof) ;; *) echo "usage: $0 [debug|base|prof]" >&2; exit 2 ;; esac

# The Build-Depends of the kernel's debian/control (scripts/package/mkdebian) that
# scripts/setup-toolchain.sh does not install: dpkg-buildpackage checks them.
missing=()
for p in debhelper rsync libdw-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  stamp "build-kernel-package: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

t0=$(date +%s)
kdir=$("$HERE/build-kernel.sh" "$FLAVOR")
rel=$(cat "$kdir/include/config/kernel.release")
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$AIGPU_ROOT/Cargo.toml" | head -1)
OUT=$AIGPU_ROOT/out/kernel-pkg/$FLAVOR
rm -rf "$OUT"
mkdir -p "$OUT"
# dpkg-buildpackage writes the packages into the parent of the build tree (debian/ is made in
# the build tree): the copy goes to $OUT/build.
stamp "build-kernel-package: copying $kdir to $OUT/build"
cp -a "$kdir" "$OUT/build"
rm -f "$OUT/build/.complete"
KBUILD_OUT=$OUT/build
t1=$(date +%s)
stamp "build-kernel-package: make bindeb-pkg ($FLAVOR, $rel), log $OUT/bindeb-pkg.log"
if ! kmake -j"$(nproc)" KDEB_CHANGELOG_DIST=bookworm DEB_BUILD_OPTIONS=terse bindeb-pkg >"$OUT/bindeb-pkg.log" 2>&1; then
  tail -40 "$OUT/bindeb-pkg.log" >&2
  echo "build-kernel-package: make bindeb-pkg failed (log $OUT/bindeb-pkg.log)" >&2
  exit 1
fi
t2=$(date +%s)

debs=("$OUT"/*.deb)
[ -e "${debs[0]}" ] || { echo "build-kernel-package: no .deb in $OUT" >&2; exit 1; }
: > "$OUT/contents.txt"
for d in "${debs[@]}"; do
  { echo "==== $(basename "$d")"; dpkg-deb -I "$d"; dpkg-deb -c "$d"; } >> "$OUT/contents.txt"
done

# What DKMS on a machine with these packages installed builds against: the headers package's
# /usr/src/linux-headers-<release> (its /lib/modules/<release>/build link points there).
H=$OUT/headers-root
mkdir -p "$H"
dpkg-deb -x "$OUT"/linux-headers-"$rel"_*.deb "$H"
hdir=$H/usr/src/linux-headers-$rel
nrust=$(find "$hdir" -path '*/rust/*' \( -name '*.rmeta' -o -name '*.so' \) | wc -l)
"$HERE/install-kmod.sh" --destdir="$H/stage" >/dev/null
hrc=0
make -C "$H/stage/usr/src/aigpu-$version" KDIR="$hdir" modules >"$OUT/headers-build.log" 2>&1 || hrc=$?
# Again with what the headers package lacks added from this package build's tree: the kernel
# crate's metadata and proc macros (rust/*.rmeta, rust/*.so), the change docs/kmd.md asks of
# the kernel's scripts/package/install-extmod-build.
(cd "$OUT/build" && cp --parents rust/*.rmeta rust/*.so "$hdir/")
nadded=$(cd "$OUT/build" && ls rust/*.rmeta rust/*.so | wc -l)
"$HERE/install-kmod.sh" --destdir="$H/stage2" >/dev/null
h2rc=0
make -C "$H/stage2/usr/src/aigpu-$version" KDIR="$hdir" modules >"$OUT/headers-rust-build.log" 2>&1 || h2rc=$?
rm -rf "$H"
[ "${KEEP_BUILD:-0}" = 1 ] || rm -rf "$OUT/build"

stamp "build-kernel-package: copy $((t1 - t0))s, bindeb-pkg $((t2 - t1))s, total $(( $(date +%s) - t0 ))s"
for d in "${debs[@]}"; do
  echo "$(basename "$d") $(du -k "$d" | cut -f1) KiB"
done
echo "linux-headers-$rel: $nrust kernel-crate metadata files (rust/*.rmeta, rust/*.so)"
if [ $hrc = 0 ]; then
  echo "aigpu.ko against the installed headers package: built"
else
  echo "aigpu.ko against the installed headers package: fails (make exit $hrc):"
  grep -m3 -E 'error|Error|No such file' "$OUT/headers-build.log" | sed 's/^/  /'
fi
if [ $h2rc = 0 ]; then
  echo "aigpu.ko against the headers package plus the build tree's $nadded rust/*.rmeta, rust/*.so: built"
else
  echo "aigpu.ko against the headers package plus the build tree's $nadded rust/*.rmeta, rust/*.so: fails (make exit $h2rc, log $OUT/headers-rust-build.log)"
fi
echo "$OUT"
