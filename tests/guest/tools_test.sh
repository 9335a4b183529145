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
#                       fault) and its devcoredump, triage as an unprivileged user, an
#                       unprivileged user's own clients from fdinfo (tools_client work), a lost
#                       device (exec_test --stage lost) with a hang on the other device
#                       (tools_client hang) and their devcoredumps; unloads the module at the end
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
# hasre NAME FILE ERE: some line of FILE matches the extended regular expression ERE as a whole
hasre() { if grep -qxE -- "$3" "$2"; then ok "$1"; else bad "$1" "no line matching /$3/" "$2"; fi; }
# jhas NAME TEXT ERE: the (one-line) TEXT matches ERE
jhas() {
  if printf '%s\n' "$2" | grep -qE -- "$3"; then ok "$1"; else
    printf '%s\n' "$2" >"$OUT/$1.txt"
    bad "$1" "no match for /$3/" "$OUT/$1.txt"
  fi
}
# flat FILE: FILE's JSON on one line without blanks (no value the checks look for has one)
flat() { tr -d ' \t\n' <"$1"; }
# fdclients: the `fdinfo_clients` arrays of a flat umd-smi JSON text on stdin, one a line
fdclients() {
  awk '{ s = $0
    while ((i = index(s, "\"fdinfo_clients\":[")) > 0) {
      s = substr(s, i + 18); d = 1
      for (j = 1; j <= length(s) && d > 0; j++) { c = substr(s, j, 1); if (c == "[") d++; else if (c == "]") d-- }
      print "[" substr(s, 1, j - 1); s = substr(s, j)
    } }'
}
# report DIR: the report directory triage wrote into DIR
report() { for r in "$1"/aigpu-triage-*; do [ -d "$r" ] && echo "$r" && return; done; }
# devcd_file REPORT DEVICE: the report's copy of DEVICE's devcoredump (by its `device=` field)
devcd_file() { grep -l -- "^kernel=.* device=$2\$" "$1"/devcoredump/devcd*.txt 2>/dev/null | head -1; }
# devcd_common NAME FILE DEVICE: the lines every dump has (docs/kmd.md, "Device coredump"): its
# number, the versions (kernel release; driver and UAPI as debugfs status says), the time, `end`
# last; the same text as the device's debugfs crash-<n>, and as the pending devcoredump itself
# after triage (triage copies it without dismissing it). Sets $devcd to its name (devcd<N>).
devcd_common() {
  f=$2
  devcd=
  if [ -z "$f" ] || [ ! -f "$f" ]; then bad "$1" "no devcoredump of $3 in the report"; return; fi
  devcd=$(basename "$f" .txt)
  echo "tools_test: $1: $f"
  sed 's/^/    | /' "$f"
  num=$(sed -n '1s/^aigpu crash dump \([0-9][0-9]*\)$/\1/p' "$f")
  if [ -n "$num" ]; then ok "$1-number"; else bad "$1-number" "first line is not 'aigpu crash dump <n>'" "$f"; fi
  hasline "$1-versions" "$f" "kernel=$release driver=$drv uapi=$uapi device=$3"
  hasre "$1-time" "$f" 'time_wall=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z time_mono_ns=[0-9]+'
  if [ "$(tail -n 1 "$f")" = end ]; then ok "$1-end"; else bad "$1-end" "the last line is not 'end'" "$f"; fi
  dd=
  for st in /sys/kernel/debug/dri/*/status; do grep -q "^device=$3 " "$st" && dd=${st%/status} && break; done
  if [ -n "$dd" ] && cmp -s "$f" "$dd/crashdumps/crash-$num"; then ok "$1-same-as-debugfs"; else
    bad "$1-same-as-debugfs" "not the text of $dd/crashdumps/crash-$num" "$f"; fi
  if cmp -s "$f" "/sys/class/devcoredump/$devcd/data"; then ok "$1-kept"; else
    bad "$1-kept" "/sys/class/devcoredump/$devcd/data is gone or differs after triage" "$f"; fi
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
  # The versions a devcoredump names: the driver's and the UAPI as debugfs status has them.
  st0=$(cat /sys/kernel/debug/dri/128/status)
  drv=$(echo "$st0" | sed -n 's/.* driver=\([^ ]*\).*/\1/p')
  uapi=$(echo "$st0" | sed -n 's/.* uapi=\([^ ]*\).*/\1/p')

  triage triage-clean /tmp/t2a
  rc "triage-clean-exit" $trc 0 "$OUT/triage-clean.out"
  if grep -q '/sys/kernel/debug' "$OUT/triage-clean.out"; then
    bad "triage-clean-debugfs-read" "root could not read part of debugfs" "$OUT/triage-clean.out"
  else
    ok "triage-clean-debugfs-read"
  fi
  has "triage-clean-module" "$OUT/triage-clean.out" "  kernel module: OK"
  has "triage-clean-application" "$OUT/triage-clean.out" "  application: OK"
  # A freshly loaded module has no pending devcoredump (the last unload removed them).
  if [ -d "$(report /tmp/t2a)/devcoredump" ]; then
    bad "triage-clean-no-devcoredump" "a devcoredump before any incident: $(ls "$(report /tmp/t2a)/devcoredump")"
  else ok "triage-clean-no-devcoredump"; fi

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
  # Its devcoredump, collected into the report and left pending (docs/kmd.md, "Device coredump").
  rep=$(report /tmp/t2)
  n=$(ls "$rep/devcoredump" 2>/dev/null | wc -l)
  if [ "$n" = 1 ]; then ok "triage-fault-devcd-collected"; else
    bad "triage-fault-devcd-collected" "$n devcoredumps in $rep/devcoredump, want 1"; fi
  f=$(devcd_file "$rep" aigpu0)
  devcd_common triage-fault-devcd "$f" aigpu0
  fdevcd=$devcd
  if [ -n "$f" ]; then
    hasline "triage-fault-devcd-kind" "$f" "kind=page_fault"
    hasre "triage-fault-devcd-process" "$f" "process pid=$fpid comm=exec_test client=[0-9]+"
    hasre "triage-fault-devcd-context" "$f" "context ctx=$fctx queue=[0-9]+ prio=normal submitted=1 completed=0"
    hasre "triage-fault-devcd-fault" "$f" "fault type=unmapped access=read va=0x7f0010000 offset=24 job=[0-9]+"
    hasre "triage-fault-devcd-packet" "$f" " +\+[0-9]+ COPY src=0x7f0010000 .* <- fault"
    has "triage-fault-devcd-listed" "$rep/summary.txt" "  devcoredump/$fdevcd.txt"
  fi

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
  # The pending devcoredump is root's: listed as not read, not in the report.
  has "triage-unprivileged-devcd-not-read" "$OUT/triage-unprivileged.out" \
    "  /sys/class/devcoredump/$fdevcd/data: permission denied (devcoredumps are root-only)"
  if [ -d "$(report /tmp/t4)/devcoredump" ]; then
    bad "triage-unprivileged-no-devcd" "an unprivileged report has devcoredump/"
  else ok "triage-unprivileged-no-devcd"; fi

  # Per-process usage from fdinfo (docs/kmd.md, "fdinfo"), as a user to whom debugfs is closed
  # sees it: a client of uid 65534 with known work on the render node (tools_client work:
  # objects of 1 MiB and 256 KiB bound in its VM and 64 KiB not, 2 contexts, 5 jobs completed)
  # and the device's primary node open with nothing on it, and one of root's on the same device.
  # `umd-smi` as uid 65534 shows its own two files with exactly those numbers, the same ones
  # debugfs `clients` has for them, says they are from fdinfo, and leaves root's out. The nodes
  # are opened to everyone meanwhile (as a desktop's uaccess rule opens them to its user).
  card=
  for c in /sys/class/drm/card[0-9]*; do
    [ "$(readlink -f "$c/device")" = "$(readlink -f /sys/class/drm/renderD128/device)" ] && card=/dev/dri/${c##*/}
  done
  modes=$(stat -c '%a %n' /dev/dri/renderD* /dev/dri/card*)
  chmod 0666 /dev/dri/renderD* "$card"
  su -s /bin/sh nobody -c "exec tools_client work /dev/dri/renderD128 $card" >"$OUT/client-nobody.out" 2>&1 &
  nsu=$!
  tools_client work /dev/dri/renderD128 >"$OUT/client-root.out" 2>&1 &
  rpid=$!
  i=0
  while ! { grep -qs 'holding$' "$OUT/client-nobody.out" && grep -qs 'holding$' "$OUT/client-root.out"; } &&
    kill -0 $nsu 2>/dev/null && kill -0 $rpid 2>/dev/null && [ $i -lt 300 ]; do
    usleep 100000
    i=$((i + 1))
  done
  cat "$OUT/client-nobody.out" "$OUT/client-root.out"
  npid=$(sed -n 's/^tools_client work: pid=\([0-9]*\) .*/\1/p' "$OUT/client-nobody.out")
  hasre "fdinfo-client-nobody-uid" "/proc/${npid:-0}/status" "Uid:.65534.65534.65534.65534"
  has "fdinfo-client-nobody" "$OUT/client-nobody.out" \
    "tools_client work: pid=$npid node=/dev/dri/renderD128 objects=3 total=1376256 resident=1310720 mappings=2 contexts=2 jobs=5 completed=5; holding"
  has "fdinfo-client-root" "$OUT/client-root.out" "tools_client work: pid=$rpid "
  nfd= cfd=
  for fdl in /proc/$npid/fd/*; do
    [ "$(readlink "$fdl")" = /dev/dri/renderD128 ] && nfd=${fdl##*/}
    [ "$(readlink "$fdl")" = "$card" ] && cfd=${fdl##*/}
  done
  echo "tools_test: pid $npid holds /dev/dri/renderD128 as fd $nfd, $card as fd $cfd"
  # debugfs (root) has both clients: leaving root's out below is the fdinfo path's doing. (One
  # line per file: the client's render node file is the one with objects.)
  nline=$(grep " pid=$npid " /sys/kernel/debug/dri/128/clients | grep -v ' objects=0 ')
  rline=$(grep " pid=$rpid " /sys/kernel/debug/dri/128/clients)
  echo "tools_test: debugfs clients: $nline / $rline"
  if [ -n "$nline" ] && [ -n "$rline" ]; then ok "fdinfo-debugfs-has-both"; else
    bad "fdinfo-debugfs-has-both" "debugfs clients lacks pid $npid or $rpid" /sys/kernel/debug/dri/128/clients; fi
  dclient=$(echo "$nline" | sed -n 's/^client=\([0-9]*\) .*/\1/p')
  dbusy=$(echo "$nline" | sed -n 's/.* busy_ns=\([0-9]*\).*/\1/p')
  su -s /bin/sh nobody -c "umd-smi" >"$OUT/smi-fdinfo.out" 2>&1
  rc "smi-fdinfo-exit" $? 0 "$OUT/smi-fdinfo.out"
  cat "$OUT/smi-fdinfo.out"
  has "smi-fdinfo-debugfs-closed" "$OUT/smi-fdinfo.out" "  queues, clients, contexts: not shown: "
  hasline "smi-fdinfo-source" "$OUT/smi-fdinfo.out" "  clients (this user's, from /proc/<pid>/fdinfo):"
  # pid comm fd busy memory contexts jobs faults lost
  hasre "smi-fdinfo-row" "$OUT/smi-fdinfo.out" " +$npid +tools_client +$nfd +[0-9.]+ ms +1\.3 MiB +2 +5 +0 +0 *"
  hasre "smi-fdinfo-row-primary" "$OUT/smi-fdinfo.out" " +$npid +tools_client +$cfd +[0-9.]+ ms +0 B +0 +0 +0 +0 *"
  n=$(grep -cE '^    [0-9]+ ' "$OUT/smi-fdinfo.out")
  if [ "$n" = 2 ]; then ok "smi-fdinfo-own-clients-only"; else
    bad "smi-fdinfo-own-clients-only" "$n client rows, want 2 (pid $npid's; not root's $rpid)" "$OUT/smi-fdinfo.out"; fi
  su -s /bin/sh nobody -c "umd-smi --json" >"$OUT/smi-fdinfo.json" 2>&1
  rc "smi-fdinfo-json-exit" $? 0 "$OUT/smi-fdinfo.json"
  fc=$(flat "$OUT/smi-fdinfo.json" | fdclients)
  echo "tools_test: fdinfo_clients $fc"
  n=$(printf '%s\n' "$fc" | grep -o '"client_id":' | wc -l)
  if [ "$n" = 2 ]; then ok "smi-fdinfo-json-own-clients-only"; else
    bad "smi-fdinfo-json-own-clients-only" "$n fdinfo clients, want 2 (pid $npid's; not root's $rpid)" "$OUT/smi-fdinfo.json"; fi
  jhas "smi-fdinfo-json-primary" "$fc" "\"pid\":$npid,\"comm\":\"tools_client\",\"fd\":\"$cfd\","
  # The render node's file: the first one the client opened (fds in order: the render node's first).
  fc=$(printf '%s\n' "$fc" | sed "s/,{\"pid\":$npid,\"comm\":\"tools_client\",\"fd\":\"$cfd\".*/]/")
  jhas "smi-fdinfo-json-pid" "$fc" "\"pid\":$npid,\"comm\":\"tools_client\",\"fd\":\"$nfd\","
  jhas "smi-fdinfo-json-total" "$fc" '\{"stat":"total","region":"memory","bytes":1376256\}'
  jhas "smi-fdinfo-json-resident" "$fc" '\{"stat":"resident","region":"memory","bytes":1310720\}'
  jhas "smi-fdinfo-json-shared" "$fc" '\{"stat":"shared","region":"memory","bytes":0\}'
  jhas "smi-fdinfo-json-active" "$fc" '\{"stat":"active","region":"memory","bytes":0\}'
  for kv in client:$dclient contexts:2 jobs-submitted:5 jobs-inflight:0 jobs-completed:5 objects:3 mappings:2 \
    faults:0 hangs:0 resets:0 lost:0; do
    jhas "smi-fdinfo-json-${kv%%:*}" "$fc" "\"${kv%%:*}\":${kv#*:}[,}]"
  done
  jhas "smi-fdinfo-json-busy" "$fc" "\\{\"engine\":\"compute\",\"busy_ns\":$dbusy\\}"
  [ "${dbusy:-0}" -gt 0 ] && ok "fdinfo-busy-nonzero" || bad "fdinfo-busy-nonzero" "busy_ns '$dbusy'"
  kill $npid $nsu $rpid 2>/dev/null
  wait $nsu $rpid 2>/dev/null
  echo "$modes" | while read -r m node; do chmod "$m" "$node"; done

  # The fault's devcoredump dismissed (a write to its data), so the device's next one is
  # published.
  echo 1 >"/sys/class/devcoredump/$fdevcd/data"
  i=0
  while [ -e "/sys/class/devcoredump/$fdevcd" ] && [ $i -lt 50 ]; do usleep 100000; i=$((i + 1)); done
  if [ ! -e "/sys/class/devcoredump/$fdevcd" ]; then ok "devcd-fault-dismissed"; else
    bad "devcd-fault-dismissed" "/sys/class/devcoredump/$fdevcd still there 5 s after the write"; fi

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
  # Meanwhile a hang on the other device, whose reset works: later than the lost device's hang,
  # and not its cause.
  tools_client hang /dev/dri/renderD129 >"$OUT/stage-hang.out" 2>&1
  rc "stage-hang" $? 0 "$OUT/stage-hang.out"
  cat "$OUT/stage-hang.out"
  hpid=$(sed -n 's/^tools_client hang: pid=\([0-9]*\) .*/\1/p' "$OUT/stage-hang.out")
  hctx=$(sed -n 's/^tools_client hang: .* ctx=\([0-9]*\) .*/\1/p' "$OUT/stage-hang.out")
  triage triage-lost /tmp/t3
  rc "triage-lost-exit" $trc 0 "$OUT/triage-lost.out"
  hasline "triage-lost-hardware" "$OUT/triage-lost.out" \
    "  hardware: aigpu0 is lost: the engine did not come back from a reset, injected through debugfs inject_reset_failure (every ioctl fails with ENODEV; the next open after the last context is gone power-cycles it)"
  has "triage-lost-application" "$OUT/triage-lost.out" "  application: device lost at "
  has "triage-lost-application-cause" "$OUT/triage-lost.out" "$cause"
  # Both devices' devcoredumps: aigpu0's is the loss's (published before its hang's dump, which
  # then stays in debugfs only), aigpu1's the hang's.
  rep=$(report /tmp/t3)
  n=$(ls "$rep/devcoredump" 2>/dev/null | wc -l)
  if [ "$n" = 2 ]; then ok "triage-lost-devcd-collected"; else
    bad "triage-lost-devcd-collected" "$n devcoredumps in $rep/devcoredump, want 2"; fi
  f=$(devcd_file "$rep" aigpu0)
  devcd_common triage-lost-devcd "$f" aigpu0
  if [ -n "$f" ]; then
    hasline "triage-lost-devcd-kind" "$f" "kind=lost"
    hasre "triage-lost-devcd-process" "$f" "process pid=$lpid comm=exec_test client=[0-9]+"
    hasre "triage-lost-devcd-context" "$f" "context ctx=$lctx queue=[0-9]+ prio=normal submitted=1 completed=0"
    hasline "triage-lost-devcd-lost" "$f" "lost id=0xffffffff expected=0x41494750"
  fi
  f=$(devcd_file "$rep" aigpu1)
  devcd_common triage-hang-devcd "$f" aigpu1
  if [ -n "$f" ]; then
    hasline "triage-hang-devcd-kind" "$f" "kind=hang"
    hasre "triage-hang-devcd-process" "$f" "process pid=$hpid comm=tools_client client=[0-9]+"
    hasre "triage-hang-devcd-context" "$f" "context ctx=$hctx queue=[0-9]+ prio=normal submitted=1 completed=0"
    hasre "triage-hang-devcd-hang" "$f" "hang job=[0-9]+ ran_ms=[0-9]+ state=hung offset=0 timeout_ms=2000 timeout_source=default recent_ms=none"
    hasre "triage-hang-devcd-packet" "$f" " +\+0+ HANG +<- executing"
  fi
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
    "  hardware: aigpu0 was lost (an engine reset failed, injected through debugfs inject_reset_failure) and has been re-initialised since"
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
