#!/bin/bash
# The framework engineer's first hour, as a test (docs/install.md):
#   1. the README's in-place build: its C snippet compiles with -Wall -Wextra -Werror under gcc
#      and clang against target/release and runs with the README's run-path line;
#   2. scripts/install.sh --help and uninstall build nothing; install into a temporary DESTDIR
#      lays out the soname chain, headers, umd.pc, the CMake package, tools, man pages, python;
#   3. C and C++ consumers (the README snippet, examples/error_handling.c, examples/pipeline.c,
#      examples/cpp/raii_gemm.cpp) build with pkg-config and with CMake against that tree and
#      run with exact output; find_package refuses an incompatible version;
#   4. python -c 'import aigpu' from the installed tree loads the installed library; the pytest
#      suite (python/tests) passes against it; `pip install` of python/ works offline in a venv
#      and the README's Python snippet runs;
#   5. uninstall leaves nothing behind.
# Needs: cargo, gcc, g++, clang(-19), cmake, pkg-config, python3 with numpy and pytest
# (scripts/setup-toolchain.sh installs them). Runs on the simulator backend.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

fail() { echo "test_install: FAIL: $*" >&2; exit 1; }
step() { echo "test_install: $*"; }
expect_eq() {  # expect_eq WHAT GOT WANT
  [ "$2" = "$3" ] || fail "$1: got
---
$2
---
want
---
$3
---"
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/aigpu-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export UMD_BACKEND=sim
export UMD_LOG_DIR="$tmp/logs"
mkdir -p "$UMD_LOG_DIR"
unset UMD_SIM_MEM_MIB UMD_SIM_DEVICES UMD_SIM_JOB_TIMEOUT_MS UMD_SIM_HANG_DEBUG AIGPU_UMD_LIBRARY

# Debian's python3 carries the apt numpy and pytest; another python3 may come first in PATH.
PY=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || command -v python3 )}
CLANG=$(command -v clang || command -v clang-19) || fail "no clang (scripts/setup-toolchain.sh)"
CLANGXX=$(command -v clang++ || command -v clang++-19) || fail "no clang++"
for t in gcc g++ cmake pkg-config readelf; do command -v "$t" >/dev/null || fail "$t missing"; done
"$PY" -c 'import numpy, pytest' || fail "$PY lacks numpy or pytest (apt: python3-numpy python3-pytest)"

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml)
IFS=. read -r _ vminor vpatch <<<"$version"
realname=libumd.so.1.$vminor.$vpatch
multiarch=$(gcc -print-multiarch)
prefix=/usr/local
libdir=$prefix/lib${multiarch:+/$multiarch}
pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')   # install.sh's default
pythondir=$prefix/lib/python$pyver/dist-packages
stage=$tmp/stage

# The README's C snippet and its commands.
awk '/^## Using libumd from C/{f=1} f&&/^```c$/{c=1;next} c&&/^```$/{exit} c' README.md > "$tmp/hello.c"
[ -s "$tmp/hello.c" ] || fail "no C snippet under README's 'Using libumd from C'"
readme_sh=$(awk '/^## Using libumd from C/{f=1} f&&/^```sh$/{c=1;next} c&&/^```$/{exit} c' README.md)
build_line=$(sed -n 1p <<<"$readme_sh")
cc_line=$(grep -m1 '^cc ' <<<"$readme_sh") || fail "no cc line in the README's build block"
run_line=$(grep -m1 '^\./hello' <<<"$readme_sh") || fail "no ./hello line in the README's build block"
hello_want=$(sed -n 's/.*# \(hello: [^ ]*\).*/\1/p' <<<"$run_line")
[ -n "$hello_want" ] || fail "the README's run line does not say what ./hello prints"

step "1. README in place: $build_line"
eval "$build_line" || fail "the README's build line failed"
for cc in gcc "$CLANG"; do
  line=${cc_line/#cc /$cc }
  line=${line/ hello.c / $tmp/hello.c }
  line=${line/%-o hello/-o $tmp/hello-inplace}
  eval "$line" || fail "the README snippet does not compile with $cc: $line"
  expect_eq "README hello ($cc, in place)" "$("$tmp/hello-inplace")" "$hello_want"
done
# The documented alternative: no run path, LD_LIBRARY_PATH.
gcc -Wall -Wextra -Werror -Iinclude "$tmp/hello.c" -Ltarget/release -lumd -o "$tmp/hello-norpath"
expect_eq "README hello (LD_LIBRARY_PATH)" "$(LD_LIBRARY_PATH=target/release "$tmp/hello-norpath")" "$hello_want"

step "2. install.sh: --help and uninstall build nothing; install into DESTDIR"
cargo build --release -q -p umd -p aigpu-tools
mkdir -p "$tmp/fakebin"
printf '#!/bin/sh\necho "cargo must not run" >&2\nexit 99\n' > "$tmp/fakebin/cargo"
chmod +x "$tmp/fakebin/cargo"
help=$(PATH="$tmp/fakebin:$PATH" bash scripts/install.sh --help)
grep -q '^Usage: scripts/install.sh' <<<"$help" || fail "--help: no usage"
for o in --prefix= --libdir= --destdir= uninstall; do grep -q -- "$o" <<<"$help" || fail "--help does not mention $o"; done
rc=0; bash scripts/install.sh --no-such-option 2>"$tmp/err" || rc=$?
[ "$rc" = 1 ] && grep -q "unknown argument '--no-such-option'" "$tmp/err" || fail "a bad option: exit $rc, $(cat "$tmp/err")"
PATH="$tmp/fakebin:$PATH" bash scripts/install.sh --no-build --destdir="$stage" > "$tmp/install.out"
grep -q "into $stage$prefix (libdir $libdir" "$tmp/install.out" || fail "install.sh said: $(cat "$tmp/install.out")"

L=$stage$libdir
expect_eq "libumd.so ->" "$(readlink "$L/libumd.so")" libumd.so.1
expect_eq "libumd.so.1 ->" "$(readlink "$L/libumd.so.1")" "$realname"
[ -f "$L/$realname" ] && [ ! -L "$L/$realname" ] || fail "$L/$realname is not a regular file"
readelf -d "$L/$realname" | grep -q 'Library soname: \[libumd.so.1\]' || fail "$realname: soname"
for h in umd.h aigpu_drm.h; do cmp -s "include/$h" "$stage$prefix/include/$h" || fail "include/$h not installed as is"; done
for f in bin/umd-smi bin/umd-log; do [ -x "$stage$prefix/$f" ] || fail "$f missing"; done
for m in umd-smi umd-log; do
  page=$stage$prefix/share/man/man1/$m.1
  grep -q "^\.TH ${m^^} 1 " "$page" && grep -q '^\.SH SYNOPSIS' "$page" || fail "man page $m.1"
  if command -v man >/dev/null; then
    man -l "$page" 2>/dev/null | grep -q "^NAME" || fail "man page $m.1 does not render"
  fi
done
[ -f "$stage$prefix/share/doc/umd/install.md" ] && [ -f "$stage$prefix/share/doc/umd/libumd.md" ] || fail "docs not installed"
"$stage$prefix/bin/umd-smi" --help >/dev/null || fail "installed umd-smi --help"
[ -f "$stage$pythondir/aigpu/__init__.py" ] || fail "python package not in $pythondir"

step "3a. consumers with pkg-config"
export PKG_CONFIG_SYSROOT_DIR=$stage PKG_CONFIG_LIBDIR=$L/pkgconfig
expect_eq "pkg-config --modversion umd" "$(pkg-config --modversion umd)" "$version"
expect_eq "pkg-config --cflags umd" "$(pkg-config --cflags umd | sed "s/ *$//")" "-I$stage$prefix/include"
expect_eq "pkg-config --libs umd" "$(pkg-config --libs umd | sed "s/ *$//")" "-L$L -lumd"
read -r -a PC <<<"$(pkg-config --cflags --libs umd)"
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR

eh_want='error_handling: out of memory: dropped 7 cached buffers, retrying
error_handling: 32 MiB allocated after the retry
error_handling: UMD_ERR_SYNC_TIMEOUT is retryable: waiting again
error_handling: the job finished after the retry
error_handling: context lost (reset status 1, fault type 1 at 0x7f0000000): recreating it
error_handling: the new context runs
error_handling: device lost: closing and reopening it
error_handling: the reopened device runs
error_handling: ok'
pl_want='pipeline: 6 batches on 3 contexts ok'
raii_want='raii_gemm: 32x48x64 ok, checksum 29005683'
check_runs() {  # check_runs DIR LABEL: the three examples (and hello when built) in DIR
  local d=$1 what=$2 err
  for exe in error_handling pipeline raii_gemm; do
    readelf -d "$d/$exe" | grep -q 'NEEDED.*\[libumd.so.1\]' || fail "$what $exe does not record libumd.so.1"
  done
  expect_eq "$what error_handling" "$(UMD_SIM_MEM_MIB=64 "$d/error_handling" 2>"$tmp/eh.err")" "$eh_want"
  # Its stderr is the detail of each provoked failure, with the action.
  for e in UMD_ERR_MEM_OUT_OF_MEMORY UMD_ERR_SYNC_TIMEOUT UMD_ERR_CTX_LOST UMD_ERR_DEVICE_LOST; do
    grep -q "^error_handling: .* -> $e (.*Action: " "$tmp/eh.err" || fail "$what error_handling: no detail for $e"
  done
  expect_eq "$what pipeline" "$("$d/pipeline")" "$pl_want"
  expect_eq "$what raii_gemm" "$("$d/raii_gemm")" "$raii_want"
}
mkdir -p "$tmp/pc-gcc" "$tmp/pc-clang"
RP=(-Wl,-rpath,"$L")
for pair in "gcc g++ $tmp/pc-gcc" "$CLANG $CLANGXX $tmp/pc-clang"; do
  read -r cc cxx out <<<"$pair"
  W=(-Wall -Wextra -Werror)
  $cc -std=c11 "${W[@]}" examples/error_handling.c "${PC[@]}" "${RP[@]}" -o "$out/error_handling"
  $cc -std=c11 "${W[@]}" examples/pipeline.c "${PC[@]}" "${RP[@]}" -o "$out/pipeline"
  $cc "${W[@]}" "$tmp/hello.c" "${PC[@]}" "${RP[@]}" -o "$out/hello"
  $cxx -std=c++17 "${W[@]}" -Iexamples/cpp examples/cpp/raii_gemm.cpp "${PC[@]}" "${RP[@]}" -o "$out/raii_gemm"
  check_runs "$out" "pkg-config/$(basename "$cc")"
  expect_eq "pkg-config/$(basename "$cc") hello" "$("$out/hello")" "$hello_want"
done

step "3b. consumers with CMake (find_package(umd CONFIG) -> umd::umd)"
for pair in "gcc g++ gcc" "$CLANG $CLANGXX clang"; do
  read -r cc cxx tag <<<"$pair"
  b=$tmp/cmake-$tag
  cmake -S examples -B "$b" -DCMAKE_PREFIX_PATH="$stage$prefix" -DCMAKE_C_COMPILER="$cc" \
        -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release > "$tmp/cmake-$tag.log" ||
    { cat "$tmp/cmake-$tag.log"; fail "cmake configure ($tag)"; }
  grep -q "umd $version: $stage$prefix/include" "$tmp/cmake-$tag.log" || fail "cmake ($tag) found another umd: $(grep umd "$tmp/cmake-$tag.log")"
  cmake --build "$b" -j2 > "$tmp/cmake-build-$tag.log" || { cat "$tmp/cmake-build-$tag.log"; fail "cmake build ($tag)"; }
  check_runs "$b" "cmake/$tag"
done
# The version file: 0.<minor> is compatible, another minor or major is not; the target's
# include directory and location point into the staged tree.
mkdir -p "$tmp/probe"
cat > "$tmp/probe/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.13)
project(probe C)   # a language: CMake then searches lib/<multiarch>/cmake too
find_package(umd ${WANT} CONFIG)
if(umd_FOUND)
  get_target_property(inc umd::umd INTERFACE_INCLUDE_DIRECTORIES)
  get_target_property(loc umd::umd IMPORTED_LOCATION)
  message(STATUS "probe: found ${umd_VERSION} inc=${inc} loc=${loc}")
else()
  message(STATUS "probe: not found")
endif()
EOF
probe() { cmake -S "$tmp/probe" -B "$tmp/probe/b-$1" -DWANT="$1" -DCMAKE_PREFIX_PATH="$stage$prefix" 2>/dev/null | sed -n 's/^-- probe: //p'; }
expect_eq "find_package(umd 0.$vminor)" "$(probe "0.$vminor")" "found $version inc=$stage$prefix/include loc=$L/$realname"
expect_eq "find_package(umd 0.$((vminor + 1)))" "$(probe "0.$((vminor + 1))")" "not found"
expect_eq "find_package(umd 1.0)" "$(probe 1.0)" "not found"

step "4. python: import from the installed tree, the pytest suite, pip install offline"
PYENV=(env PYTHONPATH="$stage$pythondir" LD_LIBRARY_PATH="$L")
got=$("${PYENV[@]}" "$PY" -c 'import aigpu, os; print(aigpu.__version__, os.path.realpath(aigpu.__file__), aigpu.library_path())')
expect_eq "python -c 'import aigpu'" "$got" "$version $stage$pythondir/aigpu/__init__.py $L/$realname"
# The library path install.sh recorded is the real prefix's, not the staging tree's.
grep -qx "LIBDIR = \"$libdir\"" "$stage$pythondir/aigpu/_install.py" || fail "_install.py: $(cat "$stage$pythondir/aigpu/_install.py")"
"${PYENV[@]}" AIGPU_TEST_INSTALLED=1 AIGPU_INCLUDE_DIR="$stage$prefix/include" "$PY" -m pytest -q -p no:cacheprovider python/tests > "$tmp/pytest.log" 2>&1 ||
  { cat "$tmp/pytest.log"; fail "pytest against the installed package"; }
tail -1 "$tmp/pytest.log"
grep -qE '^[0-9]+ passed in ' <(tail -1 "$tmp/pytest.log") || fail "pytest: $(tail -1 "$tmp/pytest.log")"
find python -name __pycache__ -prune -exec rm -rf {} +

cp -r python "$tmp/pysrc"
"$PY" -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/pip" install -q --no-index --no-build-isolation "$tmp/pysrc" > "$tmp/pip.log" 2>&1 ||
  { cat "$tmp/pip.log"; fail "pip install ./python (offline)"; }
got=$(cd "$tmp" && LD_LIBRARY_PATH="$L" "$tmp/venv/bin/python" -c 'import aigpu; print(aigpu.__version__, aigpu.__file__.startswith("'"$tmp/venv"'"))')
expect_eq "pip-installed aigpu" "$got" "$version True"
awk '/^## Using libumd from C/{f=1} f&&/^```python$/{c=1;next} c&&/^```$/{exit} c' README.md > "$tmp/readme.py"
[ -s "$tmp/readme.py" ] || fail "no Python snippet in the README"
got=$(cd "$tmp" && LD_LIBRARY_PATH="$L" "$tmp/venv/bin/python" readme.py 2>"$tmp/readme.err")
[ ! -s "$tmp/readme.err" ] || fail "README Python snippet wrote to stderr (a leak?): $(cat "$tmp/readme.err")"
expect_eq "README Python snippet" "$got" "[[7 7 7 7]
 [7 7 7 7]
 [7 7 7 7]
 [7 7 7 7]]"

step "5. uninstall leaves nothing"
PATH="$tmp/fakebin:$PATH" bash scripts/install.sh uninstall --destdir="$stage" > "$tmp/uninstall.out"
left=$(cd "$stage" 2>/dev/null && find . -mindepth 1 | LC_ALL=C sort || true)
expect_eq "files left after uninstall" "$left" ""
[ ! -e "$stage" ] || [ -z "$(ls -A "$stage")" ] || fail "$stage not empty"
step "ok"
