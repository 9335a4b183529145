#!/bin/bash
# Installs libumd and the triage tools side by side (docs/tools.md):
#   <prefix>/lib/libumd.so, libumd.so.1 -> libumd.so   (soname libumd.so.1)
#   <prefix>/include/umd.h
#   <prefix>/bin/umd-smi, <prefix>/bin/umd-log
# Usage: scripts/install.sh [--no-build] [PREFIX]     (PREFIX defaults to /usr/local)
# Builds the release binaries first unless --no-build; never uses the network beyond cargo's
# registry (for a fresh checkout).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
build=1
if [ "${1:-}" = "--no-build" ]; then build=0; shift; fi
PREFIX=${1:-/usr/local}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
cd "$ROOT"
if [ "$build" = 1 ]; then
  cargo build --release -q -p umd -p aigpu-tools
fi
for f in libumd.so umd-smi umd-log; do
  [ -f "$TARGET/release/$f" ] || { echo "install: $TARGET/release/$f missing (build first, or drop --no-build)" >&2; exit 1; }
done
install -d "$PREFIX/bin" "$PREFIX/lib" "$PREFIX/include"
install -m 0755 "$TARGET/release/libumd.so" "$PREFIX/lib/libumd.so"
ln -sf libumd.so "$PREFIX/lib/libumd.so.1"
install -m 0644 include/umd.h "$PREFIX/include/umd.h"
install -m 0755 "$TARGET/release/umd-smi" "$TARGET/release/umd-log" "$PREFIX/bin/"
echo "install: $PREFIX/bin/{umd-smi,umd-log} $PREFIX/lib/libumd.so{,.1} $PREFIX/include/umd.h"
