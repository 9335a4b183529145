#!/bin/sh
# PID 1 of the profiling guest (scripts/profile-guest.sh): loads aigpu.ko with the benchmark's
# parameters, runs one half of the kernel-submission benchmark once to warm up, then again under
# `perf record -a` (cpu-clock sampling: TCG has no PMU), and prints the report (by task and
# symbol, then by task and object) between `PROFILE: BEGIN` and `PROFILE: END`.
/bin/busybox mkdir -p /proc /sys /dev /tmp
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox mount -t debugfs debugfs /sys/kernel/debug
/bin/busybox mount -t tmpfs tmpfs /tmp
/bin/busybox --install -s /bin
export PATH=/bin
# Kernel and module symbols for perf report.
echo 0 > /proc/sys/kernel/kptr_restrict
echo -1 > /proc/sys/kernel/perf_event_paranoid
insmod /lib/modules/aigpu.ko num_devices=2 mem_mib=128 hang_debug=1 job_timeout_ms=2000 ||
  echo "PROFILE: insmod failed"
MODE=$(sed -n 's/.*aigpu.profile=\([a-z]*\).*/\1/p' /proc/cmdline)
REPEATS=$(sed -n 's/.*aigpu.profile_repeats=\([0-9]*\).*/\1/p' /proc/cmdline)
cd /tmp
UMD_BACKEND=kmd /bin/umd-submit-bench --only "$MODE" --repeats 3
UMD_BACKEND=kmd /bin/perf record -q -a -F 2000 -o /tmp/perf.data -- \
  /bin/umd-submit-bench --only "$MODE" --repeats "${REPEATS:-20}"
echo "PROFILE: BEGIN"
/bin/perf report -i /tmp/perf.data --no-children --stdio --sort comm,sym 2>/dev/null | grep -v '^$' | sed 's/ *$//' | head -100
/bin/perf report -i /tmp/perf.data --no-children --stdio --sort comm,dso 2>/dev/null | grep -v '^$' | grep '%'
echo "PROFILE: END"
poweroff -f
