#!/bin/bash
# Stages the user-space half of the in-guest suite into out/guest/umd/ (copied into the
# initramfs by build-initramfs.sh):
#   bin/backend_conformance   the UAPI conformance tests (umd/tests/backend_conformance.rs), run
#                             in the guest with UMD_BACKEND=kmd against the real module
#   bin/driver_rules          the driver's rules through the UAPI (umd/tests/driver_rules.rs)
#   bin/pt_budget             a file's VM limits (umd/tests/pt_budget.rs): page-table budget,
#                             mapping limit, the close of 16384 mappings
#   bin/pool_*                the memory-pool tests (umd/tests/pool_*.rs; they honour
#                             UMD_BACKEND=kmd too)
#   bin/abi_test              the C ABI test program (tests/c/abi_test.c)
#   bin/short_process         short-lived program shapes (tests/c/short_process.c); the guest
#                             runs its fork contract on the kernel backend
#   bin/mlp_demo              the demo
#   bin/umd-submit-bench      the kernel-submission benchmark (bench/submit; run by init.sh when
#                             the kernel command line says aigpu.bench=1)
#   bin/umd-pool-bench        the memory-pool benchmark (umd/benches/pool.rs), its alloc+free
#                             table against the real module in bench mode
#   bin/umd-smi, bin/umd-log  the triage tools (tools/), run against the real module by
#                             tests/guest/tools_test.sh
#   bin/staged_failures       the staged failures' checks (tools/tests/staged_failures.rs), run
#   bin/staged-<name>         with STAGED_BIN_DIR=/bin STAGED_LIVE=1: the programs of
#                             tests/triage, their verdicts on the real module and machine
#   lib/                      libumd.so(.1) and every shared library those programs load, with
#                             the dynamic loader, so the guest needs no distribution
# The binaries are the same ones the host runs on the simulator: one source, two backends.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=out/guest/umd
rm -rf "$OUT"; mkdir -p "$OUT/bin" "$OUT/lib"

cargo build --release -q -p umd -p umd-submit-bench -p aigpu-tools
cp target/release/umd-submit-bench target/release/umd-smi target/release/umd-log "$OUT/bin/"
ln -sf libumd.so target/release/libumd.so.1
tests=(backend_conformance driver_rules pt_budget teardown)
for t in umd/tests/pool_*.rs; do
  t=$(basename "$t" .rs)
  [ "$t" = pool_util ] || tests+=("$t")
done
args=()
for t in "${tests[@]}"; do args+=(--test "$t"); done
cargo test --release -q -p umd "${args[@]}" --no-run --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]:
        print(m["target"]["name"], m["executable"])' > "$OUT/tests.txt"
for t in "${tests[@]}"; do
  exe=$(awk -v t="$t" '$1==t {print $2}' "$OUT/tests.txt")
  [ -x "$exe" ] || { echo "build-guest-umd: $t test binary not found" >&2; exit 1; }
  cp "$exe" "$OUT/bin/$t"
done
rm -f "$OUT/tests.txt"
staged=$(cargo test --release -q -p aigpu-tools --test staged_failures --no-run --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="staged_failures":
        print(m["executable"])')
[ -x "$staged" ] || { echo "build-guest-umd: staged_failures test binary not found" >&2; exit 1; }
cp "$staged" "$OUT/bin/staged_failures"
bench=$(cargo bench -q -p umd --bench pool --no-run --message-format=json \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="pool":
        print(m["executable"])')
[ -x "$bench" ] || { echo "build-guest-umd: pool benchmark binary not found" >&2; exit 1; }
cp "$bench" "$OUT/bin/umd-pool-bench"
# The guest needs no debug info (it only grows the initramfs the guest unpacks into RAM).
strip --strip-debug "$OUT"/bin/* 2>/dev/null || true
for prog in tests/c/abi_test.c tests/c/short_process.c tests/c/dependency.c tests/c/batch.c tests/c/interrupt.c examples/mlp_demo.c; do
  name=$(basename "$prog" .c)
  cc -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -o "$OUT/bin/$name" "$prog" \
     -Ltarget/release -lumd -ldl -lpthread -Wl,-rpath,/lib
done
for prog in tests/triage/*.c; do
  cc -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -o "$OUT/bin/staged-$(basename "$prog" .c)" "$prog" \
     -Ltarget/release -lumd -Wl,-rpath,/lib
done
cp target/release/libumd.so "$OUT/lib/libumd.so"
ln -sf libumd.so "$OUT/lib/libumd.so.1"
# The loader and every library the binaries need, as resolved on this host.
for f in "$OUT"/bin/* "$OUT/lib/libumd.so"; do
  LD_LIBRARY_PATH="$OUT/lib" ldd "$f" | awk '/=> \//{print $3} /^\s*\/lib.*ld-linux/{print $1}'
done | sort -u | while read -r lib; do
  cp -L "$lib" "$OUT/lib/$(basename "$lib")"
done
mkdir -p "$OUT/lib64"
cp -L /lib64/ld-linux-x86-64.so.2 "$OUT/lib64/"
du -sh "$OUT" | awk '{print "build-guest-umd: " $1 " in '"$OUT"'"}'
