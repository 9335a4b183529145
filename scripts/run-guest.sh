#!/bin/bash
# Boots the test guest under QEMU (TCG: KVM does not work on these machines), keeps the serial
# log and judges it.
#
#   scripts/run-guest.sh <kernel-build-dir> [base|debug]
#
# Kernel: <kernel-build-dir>/arch/x86/boot/bzImage; initramfs: out/guest/initramfs.cpio.gz
# (scripts/build-initramfs.sh). The flavour (default: taken from the build dir's name) names the
# log, out/guest/serial-<flavor>.log, and turns kmemleak on for debug kernels.
# Env: GUEST_TIMEOUT (seconds, default 1200: the whole UMD suite runs in the guest), GUEST_MEM (MiB, default 1024), GUEST_SMP (default 2),
# GUEST_MODE=bench (run the kernel-submission benchmark instead of the tests: log
# out/guest/bench-<flavor>.log; the verdict then only needs `GUEST: BENCH DONE` and no splat),
# GUEST_BENCH_ARGS="--iters N --repeats R" (passed to the submission benchmark in bench mode),
# GUEST_ICOUNT=1 (QEMU's deterministic instruction-counting clock, for benchmarks),
# GUEST_MODE=tools (only the triage tools' checks, tests/guest/tools_test.sh: log
# out/guest/tools-<flavor>.log),
# GUEST_MODE=fuzz (only the UAPI fuzzer, docs/kmd.md "Fuzzing": log out/guest/fuzz-<flavor>.log;
# GUEST_FUZZ_SEEDS="S1 S2 ..." and GUEST_FUZZ_SECS (per seed) go to the kernel command line),
# GUEST_MODE=intx (only the INTx fallback's checks: the guest boots with `pci=nomsi`,
# so aigpu.ko takes the edu function's INTx line; docs/kmd.md "Attachments"; log
# out/guest/intx-<flavor>.log),
# GUEST_PCI (default 1): 1 gives the guest QEMU's `edu` PCI function (1234:11e8), which aigpu.ko
# binds as its first virtual GPU (docs/kmd.md, "Attachments"); 0 boots without it (every GPU on
# a faux device).
#
# PASS needs: `GUEST: DONE`, `GUEST: TEST_RC=0`, `kmd_test: N passed, 0 failed` and `exec_test: N
# passed, 0 failed` in the log (and `procfault_test: N passed, 0 failed` and, in test and fuzz
# mode, a `fuzz: seed=S ... findings=0` summary line for every `GUEST: fuzz seed` run: docs/kmd.md,
# "Fuzzing"), and none of: a test FAIL line (kmd_test, exec_test, abi_test, procfault_test, a
# `fuzz: FINDING` or `fuzz: FAIL` line), `BUG:`, `WARNING:`, `Oops`, `Kernel panic`, `KASAN`, a lockdep
# report (`possible circular locking`, `possible recursive locking`, `inconsistent lock state`,
# `lockdep is turned off`, `suspicious RCU usage`), a kmemleak
# report (`unreferenced object`), the driver's own `LEAK:` report, `Call Trace:`. Prints the
# guest's test summary line; exit status 0 on PASS, 1 on FAIL.
set -uo pipefail
. "$(dirname "$0")/env.sh"

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 <kernel-build-dir> [base|debug]" >&2; exit 2; }
KBUILD_OUT=$(cd "$1" && pwd) || exit 2
FLAVOR=${2:-$(basename "$KBUILD_OUT" | cut -d- -f1)}
KERNEL=$KBUILD_OUT/arch/x86/boot/bzImage
INITRD=$AIGPU_ROOT/out/guest/initramfs.cpio.gz
LOG=$AIGPU_ROOT/out/guest/serial-$FLAVOR.log
MODE=${GUEST_MODE:-test}
[ "$MODE" = bench ] && LOG=$AIGPU_ROOT/out/guest/bench-$FLAVOR.log
[ "$MODE" = tools ] && LOG=$AIGPU_ROOT/out/guest/tools-$FLAVOR.log
[ "$MODE" = fuzz ] && LOG=$AIGPU_ROOT/out/guest/fuzz-$FLAVOR.log
[ "$MODE" = intx ] && LOG=$AIGPU_ROOT/out/guest/intx-$FLAVOR.log
TMO=${GUEST_TIMEOUT:-1200}
[ -f "$KERNEL" ] || { echo "run-guest: no kernel at $KERNEL" >&2; exit 2; }
[ -f "$INITRD" ] || { echo "run-guest: no initramfs at $INITRD (run scripts/build-initramfs.sh)" >&2; exit 2; }
mkdir -p "$(dirname "$LOG")"

cmdline="console=ttyS0 panic=-1 oops=panic loglevel=7"
# no5lvl: 4-level paging for the KASAN kernel. With 5-level paging (QEMU's `-cpu max` has LA57),
# an interrupt that lands while identify_cpu() rebuilds the boot CPU's feature bits sees LA57
# cleared, and KASAN reports the interrupt's own direct-map access as wild (docs/kmd.md, Verdict).
# The boot decompressor reads it; the kernel proper then calls it unknown (expected).
[ "$FLAVOR" = debug ] && cmdline+=" kmemleak=on no5lvl"
[ "$MODE" = bench ] && cmdline+=" aigpu.bench=1${GUEST_BENCH_ARGS:+ aigpu.bench_args=$(echo "$GUEST_BENCH_ARGS" | tr ' ' ,)}"
[ "$MODE" = tools ] && cmdline+=" aigpu.tools=1"
# acpi=noirq (with the PCI function): legacy PCI interrupts are routed by the firmware's MP table
# instead of ACPI, whose _PRT method does not finish within ACPICA's 30 s loop timeout in the
# KASAN guest under TCG: every bind of the function (each module load) waited 30 s for it and
# then had no INTx line ("can't derive routing for PCI INT A"). MSI does not use the route.
[ "${GUEST_PCI:-1}" = 1 ] && cmdline+=" acpi=noirq"
# pci=nomsi: no MSI, so the driver falls back to INTx.
[ "$MODE" = intx ] && cmdline+=" pci=nomsi aigpu.intx=1"
[ "$MODE" = fuzz ] && cmdline+=" aigpu.fuzz=1 aigpu.fuzz_seeds=$(echo "${GUEST_FUZZ_SEEDS:-1}" | tr ' ' ,) aigpu.fuzz_secs=${GUEST_FUZZ_SECS:-60}"

# Lockdep: its reports are headed `WARNING: ...` (circular / recursive locking, inconsistent lock
# state, suspicious RCU usage); `lockdep is turned off` means an earlier report disabled it. A bare
# `lockdep` would match the harmless boot line `RCU lockdep checking is enabled.`
BAD='procfault_test: FAIL|fuzz: FINDING|fuzz: FAIL|kmd_test: FAIL|exec_test: FAIL|pci_test: FAIL|tools_test: FAIL|abi_test: FAIL|GUEST: FAIL|BUG:|WARNING:|Oops|Kernel panic|KASAN|possible circular locking|possible recursive locking|inconsistent lock state|lockdep is turned off|suspicious RCU usage|unreferenced object|LEAK:|Call Trace:'

# GUEST_ICOUNT=1: deterministic virtual time (docs/benchmarks.md): the guest's clock advances 1 ns
# per executed instruction and skips idle time, so its timings count instructions, not the host's
# load; the vCPUs then run in turn, not in parallel.
ICOUNT_OPT=
[ "${GUEST_ICOUNT:-0}" = 1 ] && ICOUNT_OPT="-icount shift=0,sleep=off"
# The PCI function for aigpu (docs/kmd.md, "Attachments"): QEMU's `edu` device, in every QEMU
# build: BAR 0 with an interrupt-raise register and MSI.
PCI_OPT=
case ${GUEST_PCI:-1} in
  1) PCI_OPT="-device edu" ;;
  0) ;;
  *) echo "run-guest: GUEST_PCI must be 0 or 1" >&2; exit 2 ;;
esac

boot() {
  start=$(date +%s.%N)
  timeout --kill-after=10 "$TMO" qemu-system-x86_64 -accel tcg ${ICOUNT_OPT} -cpu max -m "${GUEST_MEM:-1024}" \
    -smp "${GUEST_SMP:-2}" ${PCI_OPT} -nographic -no-reboot -kernel "$KERNEL" -initrd "$INITRD" \
    -append "$cmdline" </dev/null >"$LOG" 2>&1
  qrc=$?
  secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
  echo "run-guest: $FLAVOR guest ran ${secs}s (qemu exit $qrc), serial log: $LOG"
}

# The first error line the kernel printed while booting, before PID 1 (init.sh) printed anything:
# nothing of aigpu was loaded yet.
boot_splat() {
  awk -v bad="$BAD" '/GUEST: /{exit} $0 ~ bad {print; exit}' "$LOG"
}

boot
# Seen once under TCG on the debug kernel: a KASAN report in the timer interrupt's irq_desc lock
# while the boot CPU was still being identified (0.004 s into boot), not reproduced since. That
# is the kernel's or the emulator's, not aigpu's, so the guest is booted once more and the report
# is kept and shown; a second boot with an error line before user space fails the run as usual.
first=$(boot_splat)
if [ -n "$first" ]; then
  mv "$LOG" "$LOG.boot-splat"
  echo "run-guest: NOTE: the kernel reported an error while booting, before aigpu.ko was loaded:"
  echo "  $first"
  echo "run-guest: its log is $LOG.boot-splat; booting the guest once more"
  boot
fi

reasons=()
[ $qrc = 124 ] || [ $qrc = 137 ] && reasons+=("timed out after ${TMO}s")
if [ "$MODE" = bench ]; then
  grep 'GUEST: clockevent' "$LOG" || true
  sed -n '/^umd-submit-bench:/,/GUEST: bench exit/p; /^memory pool benchmark:/,/GUEST: pool bench exit/p' "$LOG"
  grep -q 'GUEST: BENCH DONE' "$LOG" || reasons+=("no 'GUEST: BENCH DONE'")
  if grep -qE 'BUG:|WARNING:|Oops|Kernel panic|Call Trace:' "$LOG"; then reasons+=("kernel splat"); fi
  [ ${#reasons[@]} -eq 0 ] && { echo "run-guest: bench done ($FLAVOR)"; exit 0; }
  echo "run-guest: bench FAIL ($FLAVOR): ${reasons[*]}"; tail -40 "$LOG"; exit 1
fi
grep -q 'GUEST: DONE' "$LOG" || reasons+=("no 'GUEST: DONE' (guest did not finish)")
grep -q 'GUEST: TEST_RC=0' "$LOG" || reasons+=("guest test status not 0")
if [ "$MODE" = test ]; then
  grep -qE 'kmd_test: [0-9]+ passed, 0 failed' "$LOG" || reasons+=("no 'kmd_test: N passed, 0 failed' line")
  grep -qE 'exec_test: [0-9]+ passed, 0 failed' "$LOG" || reasons+=("no 'exec_test: N passed, 0 failed' line")
  grep -qE 'procfault_test: [0-9]+ passed, 0 failed' "$LOG" || reasons+=("no 'procfault_test: N passed, 0 failed' line")
fi
# The fuzzer (docs/kmd.md, "Fuzzing"): every seed run must print its summary line with 0
# findings (a `fuzz: FINDING` line fails the run through BAD above).
if [ "$MODE" = test ] || [ "$MODE" = fuzz ]; then
  nseeds=$(grep -c 'GUEST: fuzz seed [0-9]* for' "$LOG")
  nsum=$(grep -cE '^fuzz: seed=[0-9]+ iters=[0-9]+ ioctls=[0-9]+ .* findings=0[[:space:]]*$' "$LOG")
  { [ "$nseeds" -gt 0 ] && [ "$nsum" = "$nseeds" ]; } ||
    reasons+=("fuzz: $nsum summary lines with findings=0 for $nseeds seeds run")
  grep -E '^fuzz: seed=|^procfault_test: [0-9]+ passed' "$LOG" | sed 's/^/run-guest: /'
fi
# The triage tools' checks, when the tools are staged (they are whenever the UMD suite is).
if [ "$MODE" = tools ] || grep -q 'GUEST: umd backend_conformance' "$LOG"; then
  for ph in pre post; do
    grep -qE "tools_test\($ph\): [0-9]+ passed, 0 failed" "$LOG" || reasons+=("no 'tools_test($ph): N passed, 0 failed' line")
  done
fi
if grep -qE "$BAD" "$LOG"; then
  reasons+=("kernel or test error lines in the log")
fi
# The kernel crate's doctests (the abstractions of kmd/kconfig/*.patch among them) run as the
# KUnit suite rust_doctests_kernel at boot when the kernel was built with them (debug.config).
if grep -qsx 'CONFIG_RUST_KERNEL_DOCTESTS=y' "$KBUILD_OUT/.config"; then
  kunit=$(grep -oE '# rust_doctests_kernel: pass:[0-9]+ fail:[0-9]+ skip:[0-9]+ total:[0-9]+' "$LOG" | head -1)
  echo "run-guest: kernel doctests: ${kunit:-no summary line}"
  case $kunit in
    *' fail:0 '*) grep -q 'not ok [0-9]* rust_doctest' "$LOG" && reasons+=("a kernel doctest failed") ;;
    *) reasons+=("no 'rust_doctests_kernel: pass:N fail:0' KUnit line (the kernel's doctests did not run or failed)") ;;
  esac
fi

if [ "$MODE" = intx ]; then
  grep -E '^pci_test: [0-9]+ (passed|jobs)|GUEST: intx (probe line|/proc/interrupts)' "$LOG" | sed 's/^/run-guest: /'
  grep -qE '^pci_test: [0-9]+ passed, 0 failed' "$LOG" || reasons+=("no 'pci_test: N passed, 0 failed' line")
fi
grep -E '(kmd|exec)_test: [0-9]+ passed, [0-9]+ failed|tools_test\((pre|post)\): [0-9]+ passed' "$LOG" || echo "run-guest: (no test summary line)"
if grep -q 'GUEST: umd backend_conformance' "$LOG"; then
  grep -E '^test result:|^abi_test: [0-9]+ passed|^mlp_demo: |GUEST: umd .* exit' "$LOG" | sed 's/^/umd (kmd): /'
fi
if [ ${#reasons[@]} -eq 0 ]; then
  echo "run-guest: PASS ($FLAVOR)"
  exit 0
fi
echo "run-guest: FAIL ($FLAVOR): ${reasons[*]}"
echo "---- offending lines ----"
grep -nE "$BAD" "$LOG" | head -40
echo "---- last 40 lines of $LOG ----"
tail -40 "$LOG"
exit 1
