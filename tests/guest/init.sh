#!/bin/sh
# PID 1 of the QEMU test guest (busybox): loads aigpu.ko, runs the in-guest suite, scans for
# leaks with kmemleak when the kernel has it (the debug flavour), then powers off.
# scripts/run-guest.sh judges the serial log: it needs `GUEST: DONE` and the `kmd_test: N passed,
# 0 failed` line, and fails on any kernel splat.
/bin/busybox mkdir -p /proc /sys /dev /tmp
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
/bin/busybox mount -t debugfs debugfs /sys/kernel/debug
/bin/busybox --install -s /bin
export PATH=/bin
echo "GUEST: kernel $(uname -r), uptime $(cut -d' ' -f1 /proc/uptime)s"

PARAMS="num_devices=2 mem_mib=64"
rc=1
if insmod /lib/modules/aigpu.ko $PARAMS; then
  echo "GUEST: insmod aigpu.ko $PARAMS ok"
  ls -l /dev/dri
  /bin/kmd_test --module /lib/modules/aigpu.ko --params "$PARAMS" --mem-mib 64 --devices 2
  rc=$?
  echo "GUEST: kmd_test exit $rc"
  # The UMD's backend conformance tests (the same source the host runs on the simulator), when
  # staged: only the areas this module implements (no ring yet: no submit_ / wait_ cases).
  if [ -x /bin/backend_conformance ]; then
    UMD_BACKEND=kmd /bin/backend_conformance --test-threads=1 query_ gem_ vm_ ctx_
    urc=$?
    echo "GUEST: umd backend_conformance exit $urc"
    [ $urc = 0 ] || rc=1
  fi
  if rmmod aigpu; then echo "GUEST: rmmod aigpu ok"; else echo "GUEST: FAIL rmmod aigpu"; rc=1; fi
else
  echo "GUEST: FAIL insmod aigpu.ko"
fi

if [ -e /sys/kernel/debug/kmemleak ]; then
  # kmemleak only reports objects older than 5 s; scan twice (the second scan confirms).
  sleep 6
  echo scan > /sys/kernel/debug/kmemleak
  sleep 1
  echo scan > /sys/kernel/debug/kmemleak
  leaks=$(cat /sys/kernel/debug/kmemleak)
  if [ -n "$leaks" ]; then
    echo "GUEST: kmemleak report:"
    echo "$leaks"
    rc=1
  else
    echo "GUEST: kmemleak clean"
  fi
fi
echo "GUEST: TEST_RC=$rc"
echo "GUEST: uptime at end $(cut -d' ' -f1 /proc/uptime)s"
echo "GUEST: DONE"
poweroff -f
