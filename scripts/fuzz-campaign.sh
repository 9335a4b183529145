#!/bin/bash
# The long fuzz campaign (docs/kmd.md, "Fuzzing"): boots the debug guest again and again in fuzz
# mode (scripts/run-guest.sh with GUEST_MODE=fuzz: only tests/fuzz/aigpu_fuzz, as uid 65534,
# then kmemleak), each boot ("round") with its own seeds, until the time or round budget is used.
# A round that fails (a fuzz finding, an oops / BUG / WARNING / KASAN / lockdep / kmemleak report,
# a hung guest) keeps its serial log and a reproducer; the next round boots a fresh guest.
#
#   scripts/fuzz-campaign.sh [--hours H] [--rounds N] [--ioctls N] [--seeds K] [--secs S] [--seed0 S] [debug|base]
#
# --hours: wall-clock budget (default 4); --rounds: at most N rounds (default: no limit);
# --ioctls: stop once the rounds so far issued at least N ioctls in all (default: no target);
# --seeds: seeds per round (default 4); --secs: guest seconds per seed (default 300);
# --seed0: the first seed (default: random, printed); round r uses seeds seed0 + r*K ... + K-1.
# Output in out/fuzz/: round-<r>.log (serial log of every round), finding-<r>.txt (the FINDING
# lines, each with the seed, the sequence and the replay command, and the kernel's report lines),
# summary.txt (one line per round, then the totals: rounds, seeds, duration, ioctls per type,
# rounds failed). Each round takes the guest lock (AIGPU_GUEST_LOCK, default
# /tmp/aigpu-guest.lock) only while its guest runs, so other users of the machine interleave.
# Exit status: 0 if every round passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/env.sh"

HOURS=4 ROUNDS=0 IOCTLS=0 K=4 SECS=300 SEED0= FLAVOR=debug
while [ $# -gt 0 ]; do
  case $1 in
    --hours) HOURS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --ioctls) IOCTLS=$2; shift 2 ;;
    --seeds) K=$2; shift 2 ;;
    --secs) SECS=$2; shift 2 ;;
    --seed0) SEED0=$2; shift 2 ;;
    debug|base) FLAVOR=$1; shift ;;
    *) echo "usage: $0 [--hours H] [--rounds N] [--ioctls N] [--seeds K] [--secs S] [--seed0 S] [debug|base]" >&2; exit 2 ;;
  esac
done
[ -n "$SEED0" ] || SEED0=$(( $(od -An -N3 -tu4 /dev/urandom | tr -d ' ') * 1000 ))
LOCK=${AIGPU_GUEST_LOCK:-/tmp/aigpu-guest.lock}
OUT=$AIGPU_ROOT/out/fuzz
mkdir -p "$OUT"

kdir=$("$HERE/build-kernel.sh" "$FLAVOR") || exit 1
ko=$("$HERE/build-module.sh" "$kdir") || exit 1
"$HERE/build-initramfs.sh" "$kdir" "$ko" >/dev/null || exit 1

t0=$(date +%s)
end=$(( t0 + $(printf '%.0f' "$(echo "$HOURS * 3600" | bc)") ))
# A round: the fuzzing itself, the boot (~1 min under TCG) and the kmemleak scan.
tmo=$(( K * (SECS + 30) + 300 ))
echo "fuzz-campaign: seed0=$SEED0 seeds/round=$K secs/seed=$SECS hours=$HOURS rounds=${ROUNDS:-0} ioctls=$IOCTLS flavor=$FLAVOR out=$OUT"
SUM=$OUT/summary.txt
echo "# fuzz-campaign started $(date -u +%FT%TZ) seed0=$SEED0 seeds/round=$K secs/seed=$SECS flavor=$FLAVOR" >"$SUM"
r=0 failed=0 total=0
while :; do
  [ "$ROUNDS" -gt 0 ] && [ $r -ge "$ROUNDS" ] && break
  [ "$IOCTLS" -gt 0 ] && [ "$total" -ge "$IOCTLS" ] && break
  [ "$(date +%s)" -ge "$end" ] && break
  seeds=
  for i in $(seq 0 $((K - 1))); do seeds="$seeds $((SEED0 + r * K + i))"; done
  seeds=${seeds# }
  rs=$(date +%s)
  GUEST_MODE=fuzz GUEST_FUZZ_SEEDS="$seeds" GUEST_FUZZ_SECS=$SECS GUEST_TIMEOUT=$tmo \
    flock "$LOCK" "$HERE/run-guest.sh" "$kdir" "$FLAVOR" >"$OUT/round-$r.verdict" 2>&1
  grc=$?
  cp "$AIGPU_ROOT/out/guest/fuzz-$FLAVOR.log" "$OUT/round-$r.log"
  verdict=$(grep -E '^run-guest: (PASS|FAIL)' "$OUT/round-$r.verdict" | tail -1)
  ioctls=$(grep -aoE '^fuzz: seed=[0-9]+ iters=[0-9]+ ioctls=[0-9]+' "$OUT/round-$r.log" |
           sed 's/.*ioctls=//' | paste -sd+ | bc)
  total=$((total + ${ioctls:-0}))
  echo "round $r seeds=$(echo "$seeds" | tr ' ' ,) secs=$(( $(date +%s) - rs )) ioctls=${ioctls:-0} rc=$grc $verdict" | tee -a "$SUM"
  if [ $grc != 0 ]; then
    failed=$((failed + 1))
    {
      echo "# round $r, seeds $seeds, $SECS s each: $verdict"
      echo "# replay one seed in a guest: GUEST_MODE=fuzz GUEST_FUZZ_SEEDS=<seed> GUEST_FUZZ_SECS=$SECS scripts/run-guest.sh <kdir> $FLAVOR"
      grep -a -E 'fuzz: FINDING|GUEST: fuzz seed|^fuzz: seed=' "$OUT/round-$r.log"
      echo "# kernel reports:"
      grep -a -n -E -A30 'BUG:|WARNING:|Oops|KASAN|possible circular locking|possible recursive locking|inconsistent lock state|suspicious RCU usage|unreferenced object|LEAK:' \
        "$OUT/round-$r.log" | head -400
      echo "# last 60 lines:"
      tail -60 "$OUT/round-$r.log"
    } >"$OUT/finding-$r.txt"
    echo "fuzz-campaign: round $r FAILED: $OUT/finding-$r.txt"
  fi
  r=$((r + 1))
done
secs=$(( $(date +%s) - t0 ))
# Totals: the summary lines of every round's log, summed per key.
cat "$OUT"/round-*.log 2>/dev/null | grep -a -E '^fuzz: seed=[0-9]+ iters=' | tr -d '\r' | awk -v rounds=$r \
  -v failed=$failed -v secs=$secs -v seed0="$SEED0" -v k="$K" '
  { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] != "seed" && kv[1] != "uid") { tot[kv[1]] += kv[2]; if (!(kv[1] in seen)) { seen[kv[1]] = 1; order[n++] = kv[1] } } } seeds++ }
  END { printf "fuzz-campaign: rounds=%d seeds=%d (from %s, %d per round) duration=%ds failed_rounds=%d", rounds, seeds, seed0, k, secs, failed
        for (i = 0; i < n; i++) printf " %s=%d", order[i], tot[order[i]]; printf "\n" }' | tee -a "$SUM"
[ $failed = 0 ]
