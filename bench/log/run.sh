#!/bin/bash
# Builds and runs the logging benchmark (docs/benchmarks.md, "Logging"): libumd's pipeline (Rust,
# release profile) and the spdlog reference (C++, g++ -O2 against Debian's libspdlog-dev, which
# scripts/setup-toolchain.sh installs), side by side in one invocation. Extra arguments go to
# umd-log-bench: --records N --repeats R --per-thread M --queue Q --dir DIR --keep.
# RT=1 runs both sides under SCHED_FIFO (`chrt -f 50`, needs root; spdlog's process inherits
# it): on a shared machine other jobs then cannot preempt the measured threads, which leaves
# interrupts and the other core's load (docs/benchmarks.md, "Logging").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${CARGO_TARGET_DIR:-$ROOT/target}
mkdir -p "$OUT/bench-log"
# shellcheck disable=SC2046 # pkg-config prints several words on purpose
g++ -O2 -std=c++17 "$ROOT/bench/log/spdlog_bench.cpp" $(pkg-config --cflags --libs spdlog) \
    -o "$OUT/bench-log/spdlog_bench"
cargo build --quiet --release -p umd-log-bench --manifest-path "$ROOT/Cargo.toml"
rt=()
[ "${RT:-0}" = 1 ] && rt=(chrt -f 50)
exec "${rt[@]}" "$OUT/release/umd-log-bench" --spdlog "$OUT/bench-log/spdlog_bench" "$@"
