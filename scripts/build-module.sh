#!/bin/bash
# Builds aigpu.ko against a kernel build tree made by scripts/build-kernel.sh and prints the path
# of the .ko on stdout.
#
#   scripts/build-module.sh <kernel-build-dir>
#
# Uses the top-level Kbuild (`make -C $KSRC O=<kernel-build-dir> M=$AIGPU_ROOT modules`). All
# objects go to out/kmd/<kernel-build-dir name>/ via MO= (kbuild's external-module output
# directory), never into the source tree; out/ is ignored by git. One output directory per
# kernel flavour, so switching flavours never mixes objects. Incremental: a second run with no
# source change is a no-op rebuild in about a second.
#
# The driver is compiled through the kernel's clippy (`make CLIPPY=1`, Debian's clippy-driver of
# the same rustc-web release: rustup's clippy is another compiler version and cannot read the
# kernel crate's metadata), with the lints the kernel enables for its own Rust (Makefile
# `rust_common_flags`: unsafe blocks need `// SAFETY:`, unsafe fns a `# Safety` section, ...).
# Any compiler or clippy warning fails the build: the module is warning-free (docs/kmd.md,
# "Building").
#
# Never run `make M=$AIGPU_ROOT clean`: kbuild's external-module clean runs `find .` over M= and
# deletes every *.o / *.a / *.s / *.ko below it (that would include cargo's target/).
set -euo pipefail
. "$(dirname "$0")/env.sh"

[ $# -eq 1 ] || { echo "usage: $0 <kernel-build-dir>" >&2; exit 2; }
KBUILD_OUT=$(cd "$1" && pwd)
[ -f "$KBUILD_OUT/.complete" ] || { echo "build-module: $KBUILD_OUT is not a complete kernel build (run scripts/build-kernel.sh)" >&2; exit 1; }
export KBUILD_OUT

MO=$AIGPU_ROOT/out/kmd/$(basename "$KBUILD_OUT")
mkdir -p "$MO"
start=$(date +%s.%N)
CLIPPY_DRIVER=${CLIPPY_DRIVER:-/usr/bin/clippy-driver}
[ -x "$CLIPPY_DRIVER" ] || { echo "build-module: $CLIPPY_DRIVER missing (apt-get install rust-web-clippy; scripts/setup-toolchain.sh does)" >&2; exit 1; }
if ! kmake M="$AIGPU_ROOT" MO="$MO" CLIPPY=1 CLIPPY_DRIVER="$CLIPPY_DRIVER" -j"$(nproc)" modules >"$MO/build.log" 2>&1; then
  cat "$MO/build.log" >&2
  echo "build-module: module build failed (log: $MO/build.log)" >&2
  exit 1
fi
KO=$MO/kmd/aigpu.ko
# A warning fails the build (the log is otherwise quiet). The crate's object goes too, so that
# the next run compiles it again and shows the warnings again instead of passing on the old one.
if grep -qE '^(warning|error)' "$MO/build.log"; then
  grep -E -A12 '^(warning|error)' "$MO/build.log" >&2 || true
  rm -f "$MO/kmd/aigpu.o" "$KO"
  echo "build-module: the module build printed warnings (log: $MO/build.log)" >&2
  exit 1
fi
[ -f "$KO" ] || { echo "build-module: $KO missing after build" >&2; exit 1; }
stamp "build-module: $KO ($(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")s)"
echo "$KO"
