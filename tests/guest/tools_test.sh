#!/bin/sh
# The triage tools against the real module in the guest (issue 7; docs/tools.md, "In the
# guest"): umd-smi and umd-smi triage on a machine broken in each of the ways an operator meets,
# staged here one after the other, with the verdict line each must print.
#
#   tools_test.sh pre   before aigpu.ko was ever loaded: module not loaded; a module whose
#                       version magic names another kernel (/lib/modules/aigpu-vermagic.ko, made
#                       by build-initramfs.sh), which insmod refuses
#   tools_test.sh post  with the module loaded by this script (two devices of 128 MiB: the
#                       checks below name renderD129 and the memory size, so the parameters are
#                       this script's own):
#                       umd-smi text and JSON, a clean triage, a page fault (exec_test --stage
#                       fault), triage as an unprivileged user, a lost device (exec_test --stage
#                       lost); unloads the module at the end
#
# Each check prints `tools_test: ok NAME` or `tools_test: FAIL NAME: why` with the tool's output;
# the last line is `tools_test(<phase>): N passed, M failed` (scripts/run-guest.sh needs both
# phases with 0 failed). Exit status 1 when a check failed.
PHASE=$1
PARAMS="num_devices=2 mem_mib=128 hang_debug=1 job_timeout_ms=2000"
OUT=/tmp/tools-test
mkdir -p "$OUT"
# No HOME in the guest: the tools and libumd are told where the logs are.
export UMD_LOG_DIR=/tmp/umd-logs
mkdir -p "$UMD_LOG_DIR"
pass=0
failed=0

ok() { pass=$((pass + 1)); echo "tools_test: ok $1"; }
bad() {
  failed=$((failed + 1))
  echo "tools_test: FAIL $1: $2"
  [ -n "$3" ] && [ -f "$3" ] && sed 's/^/    | /' "$3"
}
# rc NAME GOT WANT OUTFILE
rc() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1" "exit status $2, want $3" "$4"; fi; }
# has NAME FILE TEXT: some line of FILE contains TEXT (a fixed string)
has() { if grep -qF -- "$3" "$2"; then ok "$1"; else bad "$1" "no line containing '$3'" "$2"; fi; }
# hasline NAME FILE LINE: FILE has exactly this line
hasline() { if grep -qxF -- "$3" "$2"; then ok "$1"; else bad "$1" "no line '$3'" "$2"; fi; }
# triage NAME DIR [su ... -c]: runs umd-smi triage -o DIR (through su when given); its screen
# output in $OUT/NAME.out, its exit status in $trc
triage() {
  name=$1 dir=$2
  shift 2
  if [ $# -gt 0 ]; then
    # as another user: `su ... -c` takes the command as one string
    "$@" "umd-smi triage -o $dir --log-dir $UMD_LOG_DIR" >"$OUT/$name.out" 2>&1
  else
    umd-smi triage -o "$dir" --log-dir "$UMD_LOG_DIR" >"$OUT/$name.out" 2>&1
  fi
  trc=$?
  echo "tools_test: umd-smi triage -o $dir: exit $trc"
  sed -n '/^verdict/,$p' "$OUT/$name.out"
}
release=$(uname -r)

case "$PHASE" in
pre)
  umd-smi >"$OUT/smi0.out" 2>&1
  rc "smi-not-loaded-exit" $? 1 "$OUT/smi0.out"
  hasline "smi-not-loaded-diagnosis" "$OUT/smi0.out" \
    "no aigpu device: kernel module aigpu is not loaded (/sys/module/aigpu missing; try 'modprobe aigpu') [UMD_ERR_INIT_BACKEND_UNAVAILABLE]"

  triage triage-not-loaded /tmp/t0
  rc "triage-not-loaded-exit" $trc 0 "$OUT/triage-not-loaded.out"
  hasline "triage-not-loaded-verdict" "$OUT/triage-not-loaded.out" \
    "  kernel module: kernel module aigpu is not loaded (/sys/module/aigpu missing; try 'modprobe aigpu')"
  hasline "triage-not-loaded-hardware" "$OUT/triage-not-loaded.out" \
    "  hardware: not checked — the aigpu devices are created by the kernel module, which is not loaded"
  [ -f "$(ls /tmp/t0/aigpu-triage-*.tar.gz 2>/dev/null | head -1)" ]
  rc "triage-not-loaded-tarball" $? 0 "$OUT/triage-not-loaded.out"

  # A module built for another kernel: insmod refuses it and says why in dmesg.
  other=$(sed -n 's/^aigpu-vermagic.ko built for //p' /lib/modules/aigpu-vermagic.txt)
  insmod /lib/modules/aigpu-vermagic.ko >"$OUT/insmod-vermagic.out" 2>&1
  irc=$?
  if [ $irc != 0 ]; then ok "insmod-vermagic-refused"; else bad "insmod-vermagic-refused" "insmod succeeded"; rmmod aigpu; fi
  triage triage-vermagic /tmp/t1
  rc "triage-vermagic-exit" $trc 0 "$OUT/triage-vermagic.out"
  hasline "triage-vermagic-verdict" "$OUT/triage-vermagic.out" \
    "  kernel module: aigpu.ko built for $other but running kernel is $release — version magic mismatch"
  has "triage-vermagic-evidence" "$OUT/triage-vermagic.out" "aigpu: version magic '$other "
  ;;
post)
  rmmod aigpu 2>/dev/null
  if insmod /lib/modules/aigpu.ko $PARAMS; then ok "insmod"; else bad "insmod" "insmod aigpu.ko $PARAMS failed"; fi

  umd-smi >"$OUT/smi1.out" 2>&1
  rc "smi-exit" $? 0 "$OUT/smi1.out"
  cat "$OUT/smi1.out"
  has "smi-gpu0" "$OUT/smi1.out" "GPU 0: aigpu0  /dev/dri/renderD128  state ok"
  has "smi-gpu1" "$OUT/smi1.out" "GPU 1: aigpu1  /dev/dri/renderD129  state ok"
  umd-smi --json >"$OUT/smi1.json" 2>&1
  rc "smi-json-exit" $? 0 "$OUT/smi1.json"
  has "smi-json-gpu0" "$OUT/smi1.json" '"name": "aigpu0",'
  has "smi-json-gpu1" "$OUT/smi1.json" '"name": "aigpu1",'
  has "smi-json-state" "$OUT/smi1.json" '"state": "ok",'
  has "smi-json-mem-total" "$OUT/smi1.json" '"mem_total": 134217728,'

  triage triage-clean /tmp/t2a
  rc "triage-clean-exit" $trc 0 "$OUT/triage-clean.out"
  if grep -q '/sys/kernel/debug' "$OUT/triage-clean.out"; then
    bad "triage-clean-debugfs-read" "root could not read part of debugfs" "$OUT/triage-clean.out"
  else
    ok "triage-clean-debugfs-read"
  fi
  has "triage-clean-module" "$OUT/triage-clean.out" "  kernel module: OK"
  has "triage-clean-application" "$OUT/triage-clean.out" "  application: OK"

  # A page fault in one context.
  exec_test --stage fault >"$OUT/stage-fault.out" 2>&1
  rc "stage-fault" $? 0 "$OUT/stage-fault.out"
  cat "$OUT/stage-fault.out"
  fpid=$(sed -n 's/^stage fault: pid=\([0-9]*\) .*/\1/p' "$OUT/stage-fault.out")
  fctx=$(sed -n 's/^stage fault: .* ctx=\([0-9]*\) .*/\1/p' "$OUT/stage-fault.out")
  triage triage-fault /tmp/t2
  rc "triage-fault-exit" $trc 0 "$OUT/triage-fault.out"
  has "triage-fault-verdict" "$OUT/triage-fault.out" \
    "  application: a page fault at 0x7f0010000 in context $fctx (pid $fpid, exec_test) on aigpu0 at "

  # Unprivileged: debugfs (mode 0700) and dmesg (dmesg_restrict) are closed to it.
  restrict=$(cat /proc/sys/kernel/dmesg_restrict)
  echo 1 >/proc/sys/kernel/dmesg_restrict
  mkdir -p /tmp/t4 && chmod 1777 /tmp/t4
  mkdir -p /etc
  grep -q '^nobody:' /etc/passwd 2>/dev/null || echo 'nobody:x:65534:65534:nobody:/tmp:/bin/sh' >>/etc/passwd
  grep -q '^nogroup:' /etc/group 2>/dev/null || echo 'nogroup:x:65534:' >>/etc/group
  triage triage-unprivileged /tmp/t4 su -s /bin/sh nobody -c
  echo "$restrict" >/proc/sys/kernel/dmesg_restrict
  rc "triage-unprivileged-exit" $trc 0 "$OUT/triage-unprivileged.out"
  has "triage-unprivileged-could-not-read" "$OUT/triage-unprivileged.out" "could not read ("
  has "triage-unprivileged-debugfs" "$OUT/triage-unprivileged.out" "  /sys/kernel/debug"
  has "triage-unprivileged-verdict" "$OUT/triage-unprivileged.out" "verdict (bottom up"
  has "triage-unprivileged-node" "$OUT/triage-unprivileged.out" \
    "  user-space driver: permission denied opening /dev/dri/renderD12"
  has "triage-unprivileged-says-what-it-saw" "$OUT/triage-unprivileged.out" \
    "(as far as visible: dmesg not read, debugfs not read)"

  # A lost device: the reset after a hang fails. First while the application still holds it.
  exec_test --stage lost --hold >"$OUT/stage-lost.out" 2>&1 &
  holder=$!
  # Until it has reported (the hang takes the job timeout), it died, or 60 s passed.
  i=0
  while ! grep -qs '^stage lost:' "$OUT/stage-lost.out" && kill -0 "$holder" 2>/dev/null && [ $i -lt 600 ]; do
    usleep 100000
    i=$((i + 1))
  done
  cat "$OUT/stage-lost.out"
  if [ $i -ge 600 ]; then
    bad "stage-lost" "no 'stage lost:' line after 60 s" "$OUT/stage-lost.out"
  else
    has "stage-lost" "$OUT/stage-lost.out" " inject=0 submit=0 wait=-19 reason=26; holding"
  fi
  lpid=$(sed -n 's/^stage lost: pid=\([0-9]*\) .*/\1/p' "$OUT/stage-lost.out")
  lctx=$(sed -n 's/^stage lost: .* ctx=\([0-9]*\) .*/\1/p' "$OUT/stage-lost.out")
  cause="after a job timeout (GPU hang) in context $lctx (pid $lpid, exec_test)"
  triage triage-lost /tmp/t3
  rc "triage-lost-exit" $trc 0 "$OUT/triage-lost.out"
  hasline "triage-lost-hardware" "$OUT/triage-lost.out" \
    "  hardware: aigpu0 is lost: the engine did not come back from a reset (every ioctl fails with ENODEV; the next open after the last context is gone power-cycles it)"
  has "triage-lost-application" "$OUT/triage-lost.out" "  application: device lost at "
  has "triage-lost-application-cause" "$OUT/triage-lost.out" "$cause"
  umd-smi >"$OUT/smi-lost.out" 2>&1
  cat "$OUT/smi-lost.out"
  has "smi-lost-state" "$OUT/smi-lost.out" "GPU 0: aigpu0  /dev/dri/renderD128  state lost"
  has "smi-lost-access" "$OUT/smi-lost.out" "  access     libumd cannot use it: /dev/dri/renderD128: the aigpu device is lost"
  has "smi-lost-queues" "$OUT/smi-lost.out" "no answer  0%    0         0     - (reads all ones)"
  has "smi-lost-context" "$OUT/smi-lost.out" "guilty  hung (job timeout)"

  # Then after it exited: the next open power-cycles the device, and the verdict still tells
  # what happened.
  kill $holder
  wait $holder 2>/dev/null
  umd-smi >"$OUT/smi-after.out" 2>&1
  has "smi-after-lost-reinitialised" "$OUT/smi-after.out" "GPU 0: aigpu0  /dev/dri/renderD128  state ok"
  triage triage-lost-after /tmp/t3b
  rc "triage-lost-after-exit" $trc 0 "$OUT/triage-lost-after.out"
  hasline "triage-lost-after-hardware" "$OUT/triage-lost-after.out" \
    "  hardware: aigpu0 was lost (an engine reset failed) and has been re-initialised since"
  has "triage-lost-after-application" "$OUT/triage-lost-after.out" "$cause (re-initialised since)"

  if rmmod aigpu; then ok "rmmod-after-lost"; else bad "rmmod-after-lost" "rmmod aigpu failed"; fi
  ;;
*)
  echo "usage: $0 pre|post" >&2
  exit 2
  ;;
esac
echo "tools_test($PHASE): $pass passed, $failed failed"
[ $failed = 0 ]
