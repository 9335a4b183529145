#!/bin/bash
# The DKMS packaging of aigpu.ko, built and installed against a kernel build tree made by
# scripts/build-kernel.sh, all in a scratch directory (this machine's /var/lib/dkms and
# /lib/modules are never touched):
#   1. scripts/install-kmod.sh --destdir=<root>: the DKMS source tree /usr/src/aigpu-<version>,
#      /etc/modprobe.d/aigpu.conf, /usr/lib/udev/rules.d/70-aigpu.rules;
#   2. `dkms add`, `dkms build -k <release> --kernelsourcedir <tree>`, `dkms install
#      --no-depmod`, with --dkmstree/--sourcetree/--installtree in the scratch directory; then
#      `depmod -b <root>` (DKMS' own depmod is `depmod -a <release>` on the running system's
#      /lib/modules, which cannot be pointed at <root>);
#   3. the Makefile's own `make install` (kbuild's modules_install and the kernel's depmod.sh)
#      into a second root;
# and checks that each root has updates/dkms/aigpu.ko in modules.dep and that `modinfo -b`
# resolves `aigpu` to it with the module's version. About 25 s on 2 cores (two module builds).
#
#   scripts/test-dkms.sh <kernel-build-dir>
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 1 ] || { echo "usage: $0 <kernel-build-dir>" >&2; exit 2; }
KDIR=$(cd "$1" && pwd)
fail() { echo "test-dkms: FAIL: $*" >&2; exit 1; }
command -v dkms >/dev/null || fail "no dkms (scripts/setup-toolchain.sh installs it)"
[ -f "$KDIR/System.map" ] || fail "$KDIR is not a built kernel tree"
rel=$(cat "$KDIR/include/config/kernel.release")
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$ROOT/scripts/install-kmod.sh" --destdir="$T/root" >/dev/null
# What the kernel's package installs in /lib/modules/<release> (its modules_install does).
for r in root make-root; do
  mkdir -p "$T/$r/lib/modules/$rel"
  cp "$KDIR"/modules.{order,builtin,builtin.modinfo} "$T/$r/lib/modules/$rel/"
done
D=(--dkmstree "$T/dkms" --sourcetree "$T/root/usr/src" --installtree "$T/root/lib/modules")
mkdir -p "$T/dkms"
log=$T/dkms.log
run() { "$@" >>"$log" 2>&1 || { cat "$log" >&2; find "$T/dkms" -name make.log -exec cat {} + >&2; fail "$*"; }; }
run dkms add -m aigpu -v "$version" "${D[@]}"
run dkms build -m aigpu -v "$version" -k "$rel" --kernelsourcedir "$KDIR" "${D[@]}"
run dkms install -m aigpu -v "$version" -k "$rel" --kernelsourcedir "$KDIR" --no-depmod "${D[@]}"
run depmod -ae -F "$KDIR/System.map" -b "$T/root" "$rel"
status=$(dkms status -m aigpu -v "$version" "${D[@]}")
[ "$status" = "aigpu/$version, $rel, $(uname -m): installed" ] || fail "dkms status: $status"

# The Makefile without DKMS, from a copy of the staged source tree.
cp -r "$T/root/usr/src/aigpu-$version" "$T/make-src"
run make -C "$T/make-src" KDIR="$KDIR" DESTDIR="$T/make-root" install

for r in root make-root; do
  grep -qx 'updates/dkms/aigpu.ko:' "$T/$r/lib/modules/$rel/modules.dep" ||
    fail "$r: modules.dep lacks updates/dkms/aigpu.ko: $(cat "$T/$r/lib/modules/$rel/modules.dep")"
  path=$(/sbin/modinfo -b "$T/$r" -k "$rel" -n aigpu)
  [ "$path" = "$T/$r/lib/modules/$rel/updates/dkms/aigpu.ko" ] || fail "$r: modinfo -n aigpu: $path"
  v=$(/sbin/modinfo -b "$T/$r" -k "$rel" -F version aigpu)
  [ "$v" = "$version" ] || fail "$r: modinfo -F version aigpu: $v"
done
echo "test-dkms: dkms build/install and make install for $rel: $status;" \
  "modules.dep: updates/dkms/aigpu.ko (version $version)"
