#!/bin/bash
# Profiles aigpu.ko in the QEMU guest with perf: where the time of one half of the 1,000-job
# submission benchmark goes (docs/benchmarks.md, "Kernel submission"; how this was used there).
#
#   scripts/profile-guest.sh [single|batched|roundtrip] [repeats]     (default: batched 20)
#
# Builds (or re-uses) the `prof` kernel (base + kmd/kconfig/prof.config: eventfd, which perf
# record needs; a cold build takes 10-15 min on 2 cores), the module and the guest user space,
# adds the host's perf binary and its shared libraries to the initramfs, boots with
# `aigpu.profile=<mode>` (the profile mode of tests/guest/init.sh), and writes the report to
# out/guest/profile-<mode>.txt (also printed). Under TCG there is no PMU: samples are cpu-clock
# (2 kHz), so read shares, not absolute times. Needs `perf` on the host (Debian: linux-perf).
set -euo pipefail
. "$(dirname "$0")/env.sh"
MODE=${1:-batched}
REPEATS=${2:-20}
case $MODE in single|batched|roundtrip) ;; *) echo "usage: $0 [single|batched|roundtrip] [repeats]" >&2; exit 2 ;; esac
PERF=$(command -v perf) || { echo "profile-guest: no perf on this host (apt install linux-perf)" >&2; exit 1; }

"$AIGPU_ROOT/scripts/setup-toolchain.sh" >/dev/null
KDIR=$("$AIGPU_ROOT/scripts/build-kernel.sh" prof)
KO=$("$AIGPU_ROOT/scripts/build-module.sh" "$KDIR")
"$AIGPU_ROOT/scripts/build-guest-umd.sh" >/dev/null
"$AIGPU_ROOT/scripts/build-initramfs.sh" "$KDIR" "$KO" >/dev/null

OUT=$AIGPU_ROOT/out/guest
R=$(mktemp -d)
trap 'rm -rf "$R"' EXIT
(cd "$R" && zcat "$OUT/initramfs.cpio.gz" | cpio -id --quiet)
cp "$PERF" "$R/bin/perf"
for lib in $(ldd "$PERF" | awk '$3 ~ /^\// {print $3}') /lib64/ld-linux-x86-64.so.2; do
  mkdir -p "$R$(dirname "$lib")"
  cp -L "$lib" "$R$lib"
done
(cd "$R" && find . -print0 | sort -z | cpio --null -o -H newc --quiet) | gzip -1 > "$OUT/initramfs-profile.cpio.gz"

LOG=$OUT/profile-$MODE.log
# GUEST_ICOUNT=1: QEMU's instruction-counting clock (as in run-guest.sh), where cpu-clock samples
# count guest instructions; PROFILE_HZ sets the sampling rate (default 2000); PROFILE_CALLGRAPH=1
# records call chains too and adds who calls each symbol above 2 % to the report.
ICOUNT=()
[ "${GUEST_ICOUNT:-0}" = 1 ] && ICOUNT=(-icount shift=0,sleep=off)
timeout --kill-after=10 900 qemu-system-x86_64 -accel tcg "${ICOUNT[@]}" -cpu max -m 1024 -smp "${GUEST_SMP:-2}" \
  -nographic -no-reboot -kernel "$KDIR/arch/x86/boot/bzImage" -initrd "$OUT/initramfs-profile.cpio.gz" \
  -append "console=ttyS0 panic=-1 loglevel=4 aigpu.profile=$MODE aigpu.profile_repeats=$REPEATS aigpu.profile_hz=${PROFILE_HZ:-2000} aigpu.profile_g=${PROFILE_CALLGRAPH:-0}" \
  </dev/null >"$LOG" 2>&1 || true
if ! grep -q 'PROFILE: END' "$LOG"; then
  echo "profile-guest: no report (serial log: $LOG)" >&2
  tail -20 "$LOG" >&2
  exit 1
fi
grep -a -E 'jobs/s|round trips' "$LOG" | tr -d '\r' || true
sed -n '/PROFILE: BEGIN/,/PROFILE: END/p' "$LOG" | tr -d '\r' | grep -v 'PROFILE:' > "$OUT/profile-$MODE.txt"
cat "$OUT/profile-$MODE.txt"
echo "profile-guest: report in $OUT/profile-$MODE.txt"
