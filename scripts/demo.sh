#!/bin/bash
# The main job: builds libumd.so (release) and the C MLP demo against include/umd.h, then runs
# it on the default backend (UMD_BACKEND=auto: the kernel driver if present, else the simulator).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
cargo build --release -q -p umd
ln -sf libumd.so target/release/libumd.so.1   # the soname programs record

mkdir -p target/demo
cc -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -o target/demo/mlp_demo examples/mlp_demo.c \
   -Ltarget/release -lumd -Wl,-rpath,"$ROOT/target/release"
exec target/demo/mlp_demo "$@"
