#!/bin/bash
# Builds the QEMU test guest's initramfs: out/guest/initramfs.cpio.gz
#
#   scripts/build-initramfs.sh <kernel-build-dir> [aigpu.ko]
#
# Contents: busybox-static (/bin/busybox + applet links made at boot), aigpu.ko
# (/lib/modules/aigpu.ko; default: the one scripts/build-module.sh built for that kernel), the
# static test programs (/bin/kmd_test and /bin/exec_test from tests/guest/*.c, `gcc -static -Wall
# -Wextra -Werror` against the kernel's installed UAPI headers and include/aigpu_drm.h) and PID 1
# (/init = tests/guest/init.sh), tests/guest/tools_test.sh (/bin/tools_test.sh) and a copy of
# aigpu.ko whose version magic names another kernel release of the same length
# (/lib/modules/aigpu-vermagic.ko, for the triage tools' version-mismatch case), and the module
# in its installed place for `modprobe` (/lib/modules/<release>/updates/dkms/aigpu.ko, modules.dep
# by the host's depmod) with packaging/kmod/'s /etc/modprobe.d/aigpu.conf and
# /usr/lib/udev/rules.d/70-aigpu.rules. Extra static binaries (e.g. Rust tests built with
# `-C target-feature=+crt-static`) can be added with GUEST_EXTRA_BINS="path ..." (to /bin).
# If out/guest/umd/ exists (scripts/build-guest-umd.sh), its bin/, lib/ and lib64/ go to /bin,
# /lib and /lib64 (the UMD conformance tests, run by init.sh with UMD_BACKEND=kmd).
# The PCI attachment's clients (docs/kmd.md, "Attachments"), when the host has them (Debian
# libdrm-dev, libdrm-tests, pciutils): /bin/pci_test (tests/guest/pci_test.c, static, against
# libdrm.a), Debian's /bin/drmdevice and /bin/lspci with their shared libraries in /lib.
# Rebuilt from scratch every time (about 2 s): cheaper than tracking its inputs.
set -euo pipefail
. "$(dirname "$0")/env.sh"

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 <kernel-build-dir> [aigpu.ko]" >&2; exit 2; }
KBUILD_OUT=$(cd "$1" && pwd)
KO=${2:-$AIGPU_ROOT/out/kmd/$(basename "$KBUILD_OUT")/kmd/aigpu.ko}
HDR=$KBUILD_OUT/usr/include
[ -f "$HDR/drm/drm.h" ] || { echo "build-initramfs: no UAPI headers in $HDR (run scripts/build-kernel.sh)" >&2; exit 1; }
[ -f "$KO" ] || { echo "build-initramfs: no module at $KO (run scripts/build-module.sh)" >&2; exit 1; }
[ -x /bin/busybox ] && file -L /bin/busybox | grep -q 'statically linked' ||
  { echo "build-initramfs: /bin/busybox missing or not static (apt-get install busybox-static)" >&2; exit 1; }

OUT=$AIGPU_ROOT/out/guest
mkdir -p "$OUT"

[ -f "$AIGPU_ROOT/include/aigpu_drm.h" ] || { echo "build-initramfs: include/aigpu_drm.h missing" >&2; exit 1; }
cflags=(-static -O2 -g -Wall -Wextra -Werror -I"$HDR" -I"$AIGPU_ROOT/include")
gcc "${cflags[@]}" -o "$OUT/kmd_test" "$AIGPU_ROOT/tests/guest/kmd_test.c"
gcc "${cflags[@]}" -o "$OUT/exec_test" "$AIGPU_ROOT/tests/guest/exec_test.c"
gcc "${cflags[@]}" -o "$OUT/std_interfaces_test" "$AIGPU_ROOT/tests/guest/std_interfaces_test.c"
# The process-level faults and the UAPI fuzzer (docs/kmd.md, "Fuzzing").
gcc "${cflags[@]}" -o "$OUT/procfault_test" "$AIGPU_ROOT/tests/guest/procfault_test.c" -lpthread
gcc "${cflags[@]}" -o "$OUT/aigpu_fuzz" "$AIGPU_ROOT/tests/fuzz/aigpu_fuzz.c"
# A client of known usage for the triage tools' checks (tools_test.sh).
gcc "${cflags[@]}" -o "$OUT/tools_client" "$AIGPU_ROOT/tests/guest/tools_client.c"

R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
# mktemp makes the directory 0700; it becomes the guest's /, which other users must traverse (the
# triage tool runs as nobody in tools_test.sh).
chmod 755 "$R"
mkdir -p "$R"/{bin,lib/modules,proc,sys,dev,tmp}
cp /bin/busybox "$R/bin/busybox"
ln -s busybox "$R/bin/sh"
cp "$AIGPU_ROOT/tests/guest/init.sh" "$R/init"
chmod +x "$R/init"
cp "$KO" "$R/lib/modules/aigpu.ko"
# The same module installed the way an operator's DKMS installs it (docs/kmd.md, "Installing on
# a server"): /lib/modules/<release>/updates/dkms/aigpu.ko, with the kernel's modules.order /
# modules.builtin files and a modules.dep made by the host's depmod for that tree;
# /etc/modprobe.d/aigpu.conf and /usr/lib/udev/rules.d/70-aigpu.rules from packaging/kmod/. The
# guest loads it with `modprobe aigpu` and checks the options and the udev rule (init.sh).
rel=$(cat "$KBUILD_OUT/include/config/kernel.release")
install -D -m644 "$KO" "$R/lib/modules/$rel/updates/dkms/aigpu.ko"
cp "$KBUILD_OUT"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$rel/"
/sbin/depmod -a -e -F "$KBUILD_OUT/System.map" -b "$R" "$rel"
grep -qx 'updates/dkms/aigpu.ko:' "$R/lib/modules/$rel/modules.dep" ||
  { echo "build-initramfs: depmod did not list updates/dkms/aigpu.ko" >&2; exit 1; }
install -D -m644 "$AIGPU_ROOT/packaging/kmod/aigpu.conf" "$R/etc/modprobe.d/aigpu.conf"
install -D -m644 "$AIGPU_ROOT/packaging/kmod/70-aigpu.rules" "$R/usr/lib/udev/rules.d/70-aigpu.rules"
cp "$AIGPU_ROOT/tests/guest/tools_test.sh" "$R/bin/tools_test.sh"
chmod +x "$R/bin/tools_test.sh"
# The module as if built for another kernel: the release in `vermagic=` (.modinfo) with its last
# digit changed, same length, so only the kernel's version-magic check can refuse it.
python3 - "$KO" "$R/lib/modules" <<'PY'
import re, sys
ko, out = sys.argv[1], sys.argv[2]
data = open(ko, "rb").read()
m = re.search(rb"vermagic=([0-9][^ \0]*?)([0-9])( )", data)
if not m:
    sys.exit("build-initramfs: no vermagic=<release> in " + ko)
other = m.group(1) + str((int(m.group(2)) + 1) % 10).encode()
data = data[: m.start(1)] + other + data[m.start(3):]
open(out + "/aigpu-vermagic.ko", "wb").write(data)
open(out + "/aigpu-vermagic.txt", "w").write("aigpu-vermagic.ko built for %s\n" % other.decode())
PY
cp "$OUT/kmd_test" "$R/bin/kmd_test"
cp "$OUT/exec_test" "$R/bin/exec_test"
cp "$OUT/std_interfaces_test" "$R/bin/std_interfaces_test"
cp "$OUT/procfault_test" "$OUT/aigpu_fuzz" "$OUT/tools_client" "$R/bin/"
# The PCI attachment's clients (init.sh skips their checks, saying so, when they are absent).
if pkg-config --exists libdrm && [ -f "$(pkg-config --variable=libdir libdrm)/libdrm.a" ]; then
  # shellcheck disable=SC2046
  gcc "${cflags[@]}" $(pkg-config --cflags libdrm) -o "$R/bin/pci_test" "$AIGPU_ROOT/tests/guest/pci_test.c" \
    $(pkg-config --libs --static libdrm)
fi
for b in /usr/bin/drmdevice /usr/bin/lspci; do
  [ -x "$b" ] || continue
  cp "$b" "$R/bin/"
  mkdir -p "$R/lib" "$R/lib64"
  ldd "$b" | awk '/=> \//{print $3}' | while read -r lib; do cp -L "$lib" "$R/lib/"; done
  cp -L /lib64/ld-linux-x86-64.so.2 "$R/lib64/"
done
for b in ${GUEST_EXTRA_BINS:-}; do
  cp "$b" "$R/bin/"
done
# The user-space half of the suite, when scripts/build-guest-umd.sh has staged it: the UMD's
# conformance tests, the C ABI test and the demo, with libumd.so and their shared libraries.
UMD=$AIGPU_ROOT/out/guest/umd
if [ -d "$UMD/bin" ]; then
  cp -a "$UMD/bin/." "$R/bin/"
  mkdir -p "$R/lib" "$R/lib64"
  cp -a "$UMD/lib/." "$R/lib/"
  [ -d "$UMD/lib64" ] && cp -a "$UMD/lib64/." "$R/lib64/"
fi
(cd "$R" && find . -print0 | sort -z | cpio --null -o -H newc --quiet) | gzip -1 > "$OUT/initramfs.cpio.gz.tmp"
mv "$OUT/initramfs.cpio.gz.tmp" "$OUT/initramfs.cpio.gz"
stamp "build-initramfs: $OUT/initramfs.cpio.gz ($(du -k "$OUT/initramfs.cpio.gz" | cut -f1) KiB)"
echo "$OUT/initramfs.cpio.gz"
