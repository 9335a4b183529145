#!/bin/bash
# Host-side test of scripts/run-guest.sh's verdict on serial logs, with QEMU replaced by a stub
# that prints prepared logs: a clean run passes; an error line before PID 1 (a kernel boot splat,
# nothing of aigpu loaded yet) keeps that log as serial-<flavor>.log.boot-splat, says so and
# boots once more, whose verdict then counts; a second splatted boot fails; an error after PID 1
# started is never retried; a test's FAIL line fails the run. Run by scripts/test.sh (step 3).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# A fake kernel build dir and repository root (run-guest.sh only checks that the files exist).
mkdir -p "$W/kbuild/arch/x86/boot" "$W/root/out/guest" "$W/bin" "$W/logs"
: > "$W/kbuild/arch/x86/boot/bzImage"
# Built with the kernel crate's doctests (kmd/kconfig/debug.config): the verdict wants their
# KUnit summary.
echo 'CONFIG_RUST_KERNEL_DOCTESTS=y' > "$W/kbuild/.config"
: > "$W/root/out/guest/initramfs.cpio.gz"

# The stub: the N-th boot prints $W/logs/N (counted in $W/boots).
cat > "$W/bin/qemu-system-x86_64" <<EOF
#!/bin/bash
n=\$(( \$(cat "$W/boots" 2>/dev/null || echo 0) + 1 ))
echo \$n > "$W/boots"
cat "$W/logs/\$n"
EOF
chmod +x "$W/bin/qemu-system-x86_64"

SPLAT='[    0.004000] BUG: KASAN: slab-out-of-bounds in handle_edge_irq+0x41/0x2c0'
pass_log() {
  printf '%s\n' '[    0.000000] Linux version 7.3.4' "$KUNIT_OK" 'GUEST: kernel 7.3.4, uptime 2.3s' \
    'kmd_test: 125 passed, 0 failed' 'exec_test: 66 passed, 0 failed' 'procfault_test: 15 passed, 0 failed' \
    'GUEST: fuzz seed 1 for 20 s' "$FUZZ_OK" 'GUEST: TEST_RC=0' 'GUEST: DONE'
}
KUNIT_OK='[   13.400061] # rust_doctests_kernel: pass:363 fail:0 skip:0 total:363'
FUZZ_OK='fuzz: seed=1 iters=4232 ioctls=4641 query=160 submit=918 uid=65534 findings=0'


passed=0
failed=0
# case NAME WANT_EXIT WANT_BOOTS WANT_SPLAT_KEPT(0|1) OUTPUT_MUST_CONTAIN LOG1 [LOG2]
case_() {
  local name=$1 want_rc=$2 want_boots=$3 want_kept=$4 want_text=$5
  shift 5
  rm -f "$W/boots" "$W/logs/"* "$W/root/out/guest/"serial-*
  local i=1
  for log in "$@"; do
    printf '%s\n' "$log" > "$W/logs/$i"
    i=$((i + 1))
  done
  local out rc boots kept=0 has=no
  out=$(PATH="$W/bin:$PATH" AIGPU_ROOT="$W/root" bash "$ROOT/scripts/run-guest.sh" "$W/kbuild" debug 2>&1)
  rc=$?
  boots=$(cat "$W/boots" 2>/dev/null || echo 0)
  [ -f "$W/root/out/guest/serial-debug.log.boot-splat" ] && kept=1
  grep -qF -- "$want_text" <<<"$out" && has=yes
  if [ "$rc" = "$want_rc" ] && [ "$boots" = "$want_boots" ] && [ "$kept" = "$want_kept" ] && [ $has = yes ]; then
    echo "run_guest_verdict: ok $name"
    passed=$((passed + 1))
  else
    echo "run_guest_verdict: FAIL $name: exit $rc (want $want_rc), boots $boots (want $want_boots)," \
      "splat log kept $kept (want $want_kept), '$want_text' in the output: $has (want yes); output:"
    sed 's/^/    /' <<<"$out"
    failed=$((failed + 1))
  fi
}

case_ clean-pass 0 1 0 "run-guest: PASS (debug)" "$(pass_log)"
case_ boot-splat-then-pass 0 2 1 "run-guest: NOTE: the kernel reported an error while booting" \
  "$(printf '%s\n' '[    0.000000] Linux version 7.3.4' "$SPLAT" 'Call Trace:')" "$(pass_log)"
case_ boot-splat-named 0 2 1 "  $SPLAT" "$(printf '%s\n' "$SPLAT")" "$(pass_log)"
case_ boot-splat-twice-fails 1 2 1 "run-guest: FAIL (debug)" \
  "$(printf '%s\n' "$SPLAT")" "$(printf '%s\n' "$SPLAT" 'kmd_test: 1 passed, 0 failed')"
case_ splat-after-pid1-not-retried 1 1 0 "run-guest: FAIL (debug): kernel or test error lines in the log" \
  "$(pass_log | sed 's/^GUEST: TEST_RC=0$/[   31.000000] WARNING: CPU: 1 PID: 77 at kmd\/gpu.rs:100\nGUEST: TEST_RC=0/')"
case_ test-fail-line-fails 1 1 0 "exec_test: FAIL as-slots-busy-eagain" \
  "$(pass_log | sed 's/^GUEST: TEST_RC=0$/exec_test: FAIL as-slots-busy-eagain: rc=-11 reason=25\nGUEST: TEST_RC=0/')"
case_ unfinished-guest-fails 1 1 0 "no 'GUEST: DONE'" "$(pass_log | grep -v 'GUEST: DONE')"
case_ doctest-failure-fails 1 1 0 "run-guest: FAIL (debug): no 'rust_doctests_kernel: pass:N fail:0' KUnit line" \
  "$(pass_log | sed 's/fail:0 skip:0 total:363/fail:1 skip:0 total:363/')"
case_ doctests-missing-fail 1 1 0 "the kernel's doctests did not run or failed" "$(pass_log | grep -v rust_doctests_kernel)"
case_ fuzz-finding-fails 1 1 0 "run-guest: FAIL (debug): fuzz: 0 summary lines with findings=0 for 1 seeds run" \
  "$(pass_log | sed 's/findings=0/findings=1/')"
case_ fuzz-seed-without-summary-fails 1 1 0 "fuzz: 0 summary lines with findings=0 for 1 seeds run" \
  "$(pass_log | grep -v '^fuzz: seed=')"

echo "run_guest_verdict: $passed passed, $failed failed"
[ "$failed" = 0 ]
