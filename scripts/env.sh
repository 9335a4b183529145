# Source me. Shared locations and toolchain variables for every script in scripts/.
# Expensive artefacts (kernel source, kernel build trees, bindgen) live outside the repo in
# $AIGPU_CACHE so a clean clone re-uses them; each entry is keyed by its inputs.
AIGPU_ROOT=${AIGPU_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
export AIGPU_ROOT
export AIGPU_CACHE=${AIGPU_CACHE:-$HOME/.cache/aigpu}
export KVER_PKG=linux-source-7.3
export KSRC=${KSRC:-$AIGPU_CACHE/linux-source-7.3}
export TOOLS=$AIGPU_CACHE/tools
export LIBCLANG_PATH=/usr/lib/llvm-19/lib
# Pinned tool versions (the kernel toolchain note in shared/ measured these).
export BINDGEN_VER=0.72.1
export CBINDGEN_VER=0.29.4
# The kernel is built with Debian's rustc-web (it ships rust-src); rustup's rustc comes first
# in PATH, so RUSTC is always passed explicitly.
KMAKE_VARS=(LLVM=-19 RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
            BINDGEN="$TOOLS/bin/bindgen"
            RUST_LIB_SRC="/usr/src/rustc-$( (/usr/bin/rustc --version 2>/dev/null || true) | cut -d' ' -f2)/library")
kmake() { make -C "$KSRC" O="$KBUILD_OUT" "${KMAKE_VARS[@]}" "$@"; }
stamp() { echo "[$(date +%H:%M:%S)] $*" >&2; }
# The kernel patch series (applied in order by setup-toolchain.sh) and its checksum, which the
# patched source tree records in .aigpu-patches.
kpatch_series() { ls "$AIGPU_ROOT"/kmd/kconfig/[0-9]*.patch; }
kpatch_series_sum() { kpatch_series | xargs cat | sha256sum | cut -c1-16; }
