#!/bin/bash
# The kernel-submission benchmark (docs/benchmarks.md, "Kernel submission"), on both backends:
#
#   bench/submit/run.sh sim            # the simulator, on this host
#   bench/submit/run.sh guest [flavor] # aigpu.ko in the QEMU guest (default flavour: base, i.e. no
#                                      # KASAN/lockdep, whose costs would distort the ratios)
#   bench/submit/run.sh                # both
#
# Each run is one invocation of umd-submit-bench (round trip vs DRM_IOCTL_VERSION, 1,000 jobs one
# per ioctl vs batched, the MLP demo's time). Extra arguments after the mode go to the benchmark
# (--iters N --repeats R). Prints numbers, asserts nothing. In the guest, GUEST_ICOUNT=1 runs it on
# QEMU's instruction-counting clock (deterministic: timings count guest instructions, not the
# shared host's load) and GUEST_SMP=1 on one vCPU (docs/benchmarks.md).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
mode=${1:-both}
[ $# -gt 0 ] && shift
flavor=base
if [ "$mode" = guest ] && [ $# -gt 0 ] && { [ "$1" = base ] || [ "$1" = debug ]; }; then
  flavor=$1
  shift
fi

run_sim() {
  cargo build --release -q -p umd -p umd-submit-bench
  ln -sf libumd.so target/release/libumd.so.1
  mkdir -p target/demo
  cc -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -o target/demo/mlp_demo examples/mlp_demo.c \
     -Ltarget/release -lumd -Wl,-rpath,"$ROOT/target/release"
  echo "== simulator (host, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
  UMD_BACKEND=sim UMD_LOG=warn target/release/umd-submit-bench --mlp-demo target/demo/mlp_demo "$@"
}

run_guest() {
  # Two guests share this host's CPUs, and then neither one's numbers mean anything: a second
  # benchmark guest waits for the first; any other QEMU guest (a test run) is reported.
  mkdir -p "$HOME/.cache/aigpu"
  exec 9>"$HOME/.cache/aigpu/bench-guest.lock"
  flock 9
  "$ROOT/scripts/setup-toolchain.sh" >/dev/null
  local kdir ko
  kdir=$("$ROOT/scripts/build-kernel.sh" "$flavor")
  ko=$("$ROOT/scripts/build-module.sh" "$kdir")
  "$ROOT/scripts/build-guest-umd.sh" >/dev/null
  "$ROOT/scripts/build-initramfs.sh" "$kdir" "$ko" >/dev/null
  clock=TCG; [ "${GUEST_ICOUNT:-0}" = 1 ] && clock="TCG, icount: 1 ns per guest instruction"
  echo "== aigpu.ko in the QEMU guest ($flavor kernel, $clock, host load $(cut -d' ' -f1-3 /proc/loadavg))"
  local others
  others=$(pgrep -c -f '^qemu-system-x86_64 ' || true)
  if [ "${others:-0}" -gt 0 ]; then
    echo "WARNING: $others other QEMU guest(s) running on this host: these numbers are not comparable"
  fi
  GUEST_MODE=bench "$ROOT/scripts/run-guest.sh" "$kdir" "$flavor"
}

case $mode in
  sim) run_sim "$@" ;;
  guest) run_guest ;;
  both) run_sim "$@"; run_guest ;;
  *) echo "usage: $0 [sim|guest [base|debug]|both] [--iters N --repeats R]" >&2; exit 2 ;;
esac
