#!/bin/bash
# Builds (or re-uses) the QEMU guest kernel for a flavour and prints its build directory.
#
#   scripts/build-kernel.sh [base|debug|prof]   (default: debug)
#
# base  = `make tinyconfig` + kmd/kconfig/base.config (serial console, initrd, devtmpfs, debugfs,
#         modules, Rust, DRM + the Rust shmem/GPUVM helpers)
# debug = base + kmd/kconfig/debug.config (KASAN, kmemleak, lockdep, atomic-sleep checks)
# prof  = base + kmd/kconfig/prof.config (eventfd, for perf in the guest: scripts/profile-guest.sh)
#
# The whole O= build tree is the cache entry ($AIGPU_CACHE/kernel/<key>): out-of-tree modules
# need its rust/*.rmeta, Module.symvers, include/generated and scripts/. The key is a sha256 over
# every input: linux-source package version, the kernel patch series, the fragments, the rustc / clang /
# bindgen versions and KMAKE_VARS. An entry is valid only with its `.complete` marker; an
# interrupted build is thrown away and redone. A second run is a cache hit in about a second.
# Also generates the kernel's UAPI headers in <dir>/usr/include (for the guest test programs).
#
# stdout: the build directory (and nothing else); progress and errors go to stderr.
# Needs scripts/setup-toolchain.sh to have run.
set -euo pipefail
. "$(dirname "$0")/env.sh"

FLAVOR=${1:-debug}
case $FLAVOR in
  base) frags=("$AIGPU_ROOT/kmd/kconfig/base.config") ;;
  debug) frags=("$AIGPU_ROOT/kmd/kconfig/base.config" "$AIGPU_ROOT/kmd/kconfig/debug.config") ;;
  prof) frags=("$AIGPU_ROOT/kmd/kconfig/base.config" "$AIGPU_ROOT/kmd/kconfig/prof.config") ;;
  *) echo "usage: $0 [base|debug|prof]" >&2; exit 2 ;;
esac

[ -f "$KSRC/Makefile" ] || { echo "build-kernel: no kernel source at $KSRC (run scripts/setup-toolchain.sh)" >&2; exit 1; }
[ -x "$TOOLS/bin/bindgen" ] || { echo "build-kernel: no bindgen in $TOOLS (run scripts/setup-toolchain.sh)" >&2; exit 1; }
# The key names the patch series: the source tree must carry exactly that series.
[ "$(cat "$KSRC/.aigpu-patches" 2>/dev/null)" = "$(kpatch_series_sum)" ] ||
  { echo "build-kernel: $KSRC is not patched with kmd/kconfig/[0-9]*.patch as they are now (run scripts/setup-toolchain.sh)" >&2; exit 1; }

# Bump when the way the tree is built changes (not its inputs): invalidates every entry.
RECIPE=1
key=$( {
  echo "recipe=$RECIPE"
  echo "ksrc=$(dpkg-query -W -f='${Version}' "$KVER_PKG")"
  cat "$AIGPU_ROOT"/kmd/kconfig/*.patch
  for f in "${frags[@]}"; do echo "== $(basename "$f")"; cat "$f"; done
  /usr/bin/rustc --version
  clang-19 --version | head -1
  "$TOOLS/bin/bindgen" --version
  echo "${KMAKE_VARS[*]}"
} | sha256sum | cut -c1-16)

KBUILD_OUT=$AIGPU_CACHE/kernel/$FLAVOR-$key
export KBUILD_OUT
mkdir -p "$AIGPU_CACHE/kernel"

# One builder per entry; a concurrent caller waits and then sees the finished entry.
exec 9>"$KBUILD_OUT.lock"
flock 9

if [ -f "$KBUILD_OUT/.complete" ]; then
  stamp "build-kernel: cache hit ($FLAVOR): $KBUILD_OUT"
  echo "$KBUILD_OUT"
  exit 0
fi

stamp "build-kernel: cache miss ($FLAVOR), building $KBUILD_OUT (about 4-5 min on 2 cores)"
rm -rf "$KBUILD_OUT"
mkdir -p "$KBUILD_OUT"
start=$(date +%s)

# .config = tinyconfig + fragments
kmake tinyconfig >/dev/null
"$KSRC/scripts/kconfig/merge_config.sh" -m -O "$KBUILD_OUT" "$KBUILD_OUT/.config" "${frags[@]}" >/dev/null
kmake olddefconfig >/dev/null

# Every requested option must have stuck (a missing dependency silently drops a symbol).
bad=0
for f in "${frags[@]}"; do
  while IFS= read -r line; do
    sym=${line%%=*}
    val=${line#*=}
    if [ "$val" = n ]; then
      if grep -q "^$sym=" "$KBUILD_OUT/.config"; then
        echo "build-kernel: MISMATCH $line (got $(grep "^$sym=" "$KBUILD_OUT/.config"))" >&2
        bad=1
      fi
    elif ! grep -qx "$line" "$KBUILD_OUT/.config"; then
      echo "build-kernel: MISMATCH $line (got: $(grep -E "^$sym=|# $sym is not set" "$KBUILD_OUT/.config" || echo unset))" >&2
      bad=1
    fi
  done < <(grep -E '^CONFIG_' "$f")
done
[ $bad = 0 ] || { echo "build-kernel: config verification failed" >&2; exit 1; }

if ! kmake -j"$(nproc)" bzImage modules >"$KBUILD_OUT/build.log" 2>&1; then
  tail -60 "$KBUILD_OUT/build.log" >&2
  echo "build-kernel: kernel build failed, full log: $KBUILD_OUT/build.log" >&2
  exit 1
fi
# UAPI headers for the guest test programs, in <dir>/usr/include (`headers_install` would need
# rsync, which these machines lack; `headers` generates the same tree in place).
if ! kmake headers >>"$KBUILD_OUT/build.log" 2>&1; then
  tail -20 "$KBUILD_OUT/build.log" >&2
  echo "build-kernel: make headers failed" >&2
  exit 1
fi

touch "$KBUILD_OUT/.complete"
stamp "build-kernel: built $FLAVOR kernel in $(( $(date +%s) - start ))s"
echo "$KBUILD_OUT"
