#!/bin/bash
# Kernel half of the project's test command: toolchain -> guest kernel -> aigpu.ko -> dkms build
# and install (scripts/test-dkms.sh) -> initramfs
# -> QEMU boot running the in-guest suite (kmd_test, plus the UMD's backend conformance tests
# staged by scripts/build-guest-umd.sh unless AIGPU_SKIP_GUEST_UMD=1), then a short second boot
# without MSI for the INTx fallback's checks (GUEST_MODE=intx; skipped with GUEST_PCI=0). Prints
# the time of every step.
#
#   scripts/test-kmd.sh [debug|base]        (default: debug = KASAN, kmemleak, lockdep,
#                                            atomic-sleep; the flavour the tests are meant for)
#
# Cold (fresh machine): apt + bindgen + cbindgen ~5 min, debug kernel ~5 min, the rest < 1 min.
# Warm: a few seconds of builds plus the guest run (about 30 s under TCG with the debug kernel).
# The serial log stays in out/guest/serial-<flavor>.log. Exit status 0 only if the guest PASSes.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"
FLAVOR=${1:-debug}
case $FLAVOR in base|debug) ;; *) echo "usage: $0 [debug|base]" >&2; exit 2 ;; esac

t0=$(date +%s)
last=$t0
step() {
  local now
  now=$(date +%s)
  printf 'test-kmd: %-28s %4ss (total %ss)\n' "$1" "$((now - last))" "$((now - t0))"
  last=$now
}

"$HERE/setup-toolchain.sh"
step "toolchain"
kdir=$("$HERE/build-kernel.sh" "$FLAVOR")
step "kernel ($FLAVOR)"
ko=$("$HERE/build-module.sh" "$kdir")
step "module"
# modinfo must show the version, description, license and described parameters.
info=$(/sbin/modinfo "$ko")
for field in '^version: +0\.1\.0$' '^description: +.+' '^license: +GPL$' '^parm: +num_devices:.+\((u32|uint)\)$' \
             '^parm: +mem_mib:.+\((u32|uint)\)$' '^parm: +job_timeout_ms:.+\((u32|uint)\)$' \
             '^parm: +hang_debug:.+\(bool\)$'; do
  grep -qE "$field" <<<"$info" || { echo "test-kmd: modinfo $ko lacks /$field/:" >&2; echo "$info" >&2; exit 1; }
done
# The DKMS packaging (packaging/kmod/): dkms build + install and the Makefile's `make install`
# against the same kernel tree, in a scratch root (about 25 s: two module builds).
"$HERE/test-dkms.sh" "$kdir"
step "dkms build/install"
# The UMD's conformance tests run in the guest too (UMD_BACKEND=kmd): stage them unless told not
# to (AIGPU_SKIP_GUEST_UMD=1 runs the kernel-only suite).
if [ "${AIGPU_SKIP_GUEST_UMD:-0}" != 1 ]; then
  "$HERE/build-guest-umd.sh"
  step "umd for the guest"
else
  rm -rf "$AIGPU_ROOT/out/guest/umd"
fi
"$HERE/build-initramfs.sh" "$kdir" "$ko" >/dev/null
step "initramfs"
rc=0
"$HERE/run-guest.sh" "$kdir" "$FLAVOR" || rc=$?
step "guest run"
# The INTx fallback needs a boot of its own (MSI is off for a whole boot: `pci=nomsi`): a short
# second guest with the PCI function, checks only (docs/kmd.md, "Attachments").
if [ "${GUEST_PCI:-1}" != 0 ]; then
  GUEST_MODE=intx "$HERE/run-guest.sh" "$kdir" "$FLAVOR" || rc=1
  step "guest run (INTx, pci=nomsi)"
fi
exit $rc
