#!/bin/bash
# Host-side test of scripts/build-module.sh's verdict, with the kernel's make replaced by a stub
# that writes a prepared build log and objects: a clean build prints the .ko; a build that
# printed a compiler or clippy warning fails, names the log and removes the crate's object and
# the .ko, so the next run builds again and fails again instead of passing on the stale object;
# a missing clippy-driver is refused before anything is built; the stub sees CLIPPY=1 and the
# driver on its command line. Run by scripts/test.sh (step 3).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

mkdir -p "$W/kbuild" "$W/root/scripts" "$W/bin"
: > "$W/kbuild/.complete"
# The script under test, in a scratch root (its objects go to <root>/out/kmd/).
cp "$ROOT/scripts/build-module.sh" "$ROOT/scripts/env.sh" "$W/root/scripts/"
printf '#!/bin/sh\necho "clippy 0.1.96"\n' > "$W/bin/clippy-driver"
chmod +x "$W/bin/clippy-driver"

# The stub make: records its arguments; writes $W/log.next (if any) as the compiler output;
# builds the object and the .ko only if they are missing (an incremental kbuild rebuilds only
# what is gone), counting the compilations.
cat > "$W/bin/make" <<EOF
#!/bin/bash
echo "\$*" > "$W/args"
mo=
for a in "\$@"; do case \$a in MO=*) mo=\${a#MO=} ;; esac; done
mkdir -p "\$mo/kmd"
if [ ! -f "\$mo/kmd/aigpu.o" ]; then
  echo \$(( \$(cat "$W/compiles" 2>/dev/null || echo 0) + 1 )) > "$W/compiles"
  echo "  CLIPPY [M] kmd/aigpu.o"
  [ -f "$W/log.next" ] && cat "$W/log.next"
  : > "\$mo/kmd/aigpu.o"
fi
[ -f "\$mo/kmd/aigpu.ko" ] || : > "\$mo/kmd/aigpu.ko"
exit 0
EOF
chmod +x "$W/bin/make"

WARN='warning: unsafe block missing a safety comment
   --> /src/kmd/hw.rs:315:29'
KO=$W/root/out/kmd/kbuild/kmd/aigpu.ko
passed=0
failed=0
# run NAME WANT_EXIT WANT_COMPILES WANT_KO(0|1) OUTPUT_MUST_CONTAIN [CLIPPY_DRIVER]
run() {
  local name=$1 want_rc=$2 want_compiles=$3 want_ko=$4 want_text=$5 driver=${6:-$W/bin/clippy-driver}
  local out rc compiles ko=0 has=no
  out=$(PATH="$W/bin:$PATH" AIGPU_ROOT="$W/root" CLIPPY_DRIVER="$driver" \
        bash "$W/root/scripts/build-module.sh" "$W/kbuild" 2>&1)
  rc=$?
  compiles=$(cat "$W/compiles" 2>/dev/null || echo 0)
  [ -f "$KO" ] && ko=1
  grep -qF -- "$want_text" <<<"$out" && has=yes
  if [ "$rc" = "$want_rc" ] && [ "$compiles" = "$want_compiles" ] && [ "$ko" = "$want_ko" ] && [ $has = yes ]; then
    echo "build_module_verdict: ok $name"
    passed=$((passed + 1))
  else
    echo "build_module_verdict: FAIL $name: exit $rc (want $want_rc), compiles $compiles (want $want_compiles)," \
         "ko $ko (want $want_ko), output has '$want_text': $has"
    sed 's/^/    | /' <<<"$out"
    failed=$((failed + 1))
  fi
}

run "a missing clippy-driver is refused" 1 0 0 "rust-web-clippy" "$W/bin/no-such-clippy-driver"
run "a clean build prints the module" 0 1 1 "$KO"
grep -q 'CLIPPY=1' "$W/args" && grep -qF "CLIPPY_DRIVER=$W/bin/clippy-driver" "$W/args" &&
  { echo "build_module_verdict: ok the build runs through clippy"; passed=$((passed + 1)); } ||
  { echo "build_module_verdict: FAIL the build runs through clippy: make got: $(cat "$W/args")"; failed=$((failed + 1)); }
run "an unchanged tree is not rebuilt" 0 1 1 "$KO"
# A source change that brings a warning.
rm -f "$W/root/out/kmd/kbuild/kmd/aigpu.o"
printf '%s\n' "$WARN" > "$W/log.next"
run "a warning fails the build" 1 2 0 "printed warnings"
run "the warning is shown" 1 3 0 "kmd/hw.rs:315:29"
run "a failed build is not passed on the next run" 1 4 0 "printed warnings"
rm -f "$W/log.next"
run "fixed, it builds again" 0 5 1 "$KO"

echo "build_module_verdict: $passed passed, $failed failed"
[ "$failed" = 0 ]
