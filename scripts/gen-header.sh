#!/bin/bash
# Regenerates include/umd.h from umd/src/abi with the pinned cbindgen (installed by
# setup-toolchain.sh). `--verify` fails instead when the checked-in header is stale.
set -euo pipefail
. "$(dirname "$0")/env.sh"
CBINDGEN="$TOOLS/bin/cbindgen"
if [ ! -x "$CBINDGEN" ]; then
  echo "gen-header: cbindgen $CBINDGEN_VER not found; run scripts/setup-toolchain.sh" >&2; exit 1
fi
cd "$AIGPU_ROOT"
"$CBINDGEN" --quiet --config umd/cbindgen.toml --crate umd --output include/umd.h ${1:-} umd
