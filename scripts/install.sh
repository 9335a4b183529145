#!/bin/bash
# Installs (or uninstalls) libumd like a system library, laid out the way libdrm's and HIP's
# installs are (docs/install.md):
#   <libdir>/libumd.so.1.<minor>.<patch>            the library (soname libumd.so.1)
#   <libdir>/libumd.so.1 -> libumd.so.1.<minor>.<patch>   what the loader opens
#   <libdir>/libumd.so   -> libumd.so.1             what the linker's -lumd finds
#   <libdir>/pkgconfig/umd.pc                        pkg-config --cflags --libs umd
#   <libdir>/cmake/umd/umdConfig{,Version}.cmake     find_package(umd CONFIG) -> umd::umd
#   <includedir>/umd.h, <includedir>/aigpu_drm.h
#   <bindir>/umd-smi, <bindir>/umd-log, <mandir>/man1/umd-{smi,log}.1
#   <pythondir>/aigpu/                               the Python package (python/)
#   <docdir>/                                        README.md and docs/*.md
# The version comes from the workspace (Cargo.toml); the soname's 1 is the C ABI's major
# (umd/build.rs), the file name's <minor>.<patch> are the crate's.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)

usage() {
  cat <<'EOF'
Usage: scripts/install.sh [install|uninstall] [options] [PREFIX]

Installs libumd (library, headers, pkg-config and CMake files), the triage tools, their man
pages, the Python package and the docs; `uninstall` removes exactly those files again (pass
the same options). Nothing is built for --help or uninstall.

Options (an option wins over its environment variable):
  --prefix=DIR     install prefix (env PREFIX; default /usr/local)
  --libdir=DIR     library directory, absolute or relative to the prefix
                   (env LIBDIR; default lib/<multiarch>, e.g. lib/x86_64-linux-gnu)
  --destdir=DIR    staging root prepended to every path, for packaging (env DESTDIR); the
                   files still refer to PREFIX
  --pythondir=DIR  where the aigpu package goes, absolute or relative to the prefix
                   (default lib/python3/dist-packages for /usr, else
                   lib/python<X.Y>/dist-packages of PYTHON, default python3)
  --no-python      do not install the Python package
  --no-build       install what is in target/release (CARGO_TARGET_DIR) without building
  -n, --dry-run    print what would be done
  -h, --help       this text

Examples:
  scripts/install.sh                                # /usr/local, builds first
  sudo scripts/install.sh --prefix=/usr --no-build
  scripts/install.sh --destdir="$PWD/stage" --prefix=/usr
  scripts/install.sh uninstall --prefix=/usr
EOF
}

die() { echo "install.sh: $*" >&2; exit 1; }

action=install
build=1
python=1
dry=0
prefix=${PREFIX:-}
libdir=${LIBDIR:-}
destdir=${DESTDIR:-}
pythondir=""
while [ $# -gt 0 ]; do
  case "$1" in
    install|uninstall) action=$1 ;;
    -h|--help) usage; exit 0 ;;
    --prefix=*) prefix=${1#*=} ;;
    --libdir=*) libdir=${1#*=} ;;
    --destdir=*) destdir=${1#*=} ;;
    --pythondir=*) pythondir=${1#*=} ;;
    --prefix|--libdir|--destdir|--pythondir)
      [ $# -ge 2 ] || die "$1 needs a value (see --help)"
      case "$1" in
        --prefix) prefix=$2 ;; --libdir) libdir=$2 ;;
        --destdir) destdir=$2 ;; --pythondir) pythondir=$2 ;;
      esac
      shift ;;
    --no-python) python=0 ;;
    --no-build) build=0 ;;
    -n|--dry-run) dry=1 ;;
    /*) prefix=$1 ;;   # the older positional form: scripts/install.sh /usr/local
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

prefix=${prefix:-/usr/local}
case "$prefix" in /*) ;; *) die "--prefix must be absolute, not '$prefix'" ;; esac
prefix=${prefix%/}; [ -n "$prefix" ] || prefix=/
case "$destdir" in ""|/*) ;; *) destdir="$(pwd)/$destdir" ;; esac
destdir=${destdir%/}

# Paths relative to the prefix become absolute; `//` collapses for the prefix /.
under_prefix() { case "$1" in /*) echo "$1" ;; *) echo "${prefix%/}/$1" ;; esac; }

if [ -z "$libdir" ]; then
  multiarch=$( (gcc -print-multiarch || dpkg-architecture -qDEB_HOST_MULTIARCH) 2>/dev/null | head -1 || true)
  libdir=lib${multiarch:+/$multiarch}
fi
libdir=$(under_prefix "$libdir")
includedir=$(under_prefix include)
bindir=$(under_prefix bin)
mandir=$(under_prefix share/man)
docdir=$(under_prefix share/doc/umd)
pkgconfigdir=$libdir/pkgconfig
cmakedir=$libdir/cmake/umd
if [ "$python" = 1 ]; then
  if [ -z "$pythondir" ]; then
    if [ "$prefix" = /usr ]; then
      pythondir=lib/python3/dist-packages
    else
      pyver=$("${PYTHON:-python3}" -c 'import sys; print("%d.%d" % sys.version_info[:2])') ||
        die "cannot run ${PYTHON:-python3} to pick the Python directory (give --pythondir or --no-python)"
      pythondir=lib/python$pyver/dist-packages
    fi
  fi
  pythondir=$(under_prefix "$pythondir")
fi

# The version: the workspace's (umd/Cargo.toml inherits it).
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\([0-9][0-9.]*\)".*/\1/p' "$ROOT/Cargo.toml")
[[ "$version" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]] || die "no x.y.z version in $ROOT/Cargo.toml's [workspace.package]"
grep -q '^version.workspace = true' "$ROOT/umd/Cargo.toml" || die "umd/Cargo.toml no longer takes the workspace version: teach install.sh"
vminor=${BASH_REMATCH[2]}; vpatch=${BASH_REMATCH[3]}
soname=libumd.so.1
realname=$soname.$vminor.$vpatch

run() { if [ "$dry" = 1 ]; then echo "+ $*"; else "$@"; fi; }

# Every file the install creates, relative to the root (uninstall removes these).
files=(
  "$libdir/$realname" "$libdir/$soname" "$libdir/libumd.so"
  "$pkgconfigdir/umd.pc" "$cmakedir/umdConfig.cmake" "$cmakedir/umdConfigVersion.cmake"
  "$includedir/umd.h" "$includedir/aigpu_drm.h"
  "$bindir/umd-smi" "$bindir/umd-log" "$mandir/man1/umd-smi.1" "$mandir/man1/umd-log.1"
  "$docdir/README.md"
)
for d in "$ROOT"/docs/*.md; do files+=("$docdir/$(basename "$d")"); done
pyfiles=()
if [ "$python" = 1 ]; then
  while IFS= read -r f; do pyfiles+=("$f"); done < <(cd "$ROOT/python" && find aigpu -name '*.py' | LC_ALL=C sort)
  for f in "${pyfiles[@]}" aigpu/_install.py; do files+=("$pythondir/$f"); done
fi
# Directories only this install owns: removed on uninstall if empty.
owned_dirs=("$cmakedir" "$docdir")
[ "$python" = 1 ] && owned_dirs=("$pythondir/aigpu/__pycache__" "$pythondir/aigpu" "${owned_dirs[@]}")

if [ "$action" = uninstall ]; then
  removed=0
  for f in "${files[@]}"; do
    p="$destdir$f"
    if [ -e "$p" ] || [ -L "$p" ]; then run rm -f "$p"; removed=$((removed + 1)); fi
  done
  # Older versions' library files (libumd.so.1.<minor>.<patch>) are ours too.
  for p in "$destdir$libdir"/libumd.so.1.*; do
    if [ -e "$p" ] || [ -L "$p" ]; then run rm -f "$p"; removed=$((removed + 1)); fi
  done
  for d in "${owned_dirs[@]}"; do
    if [ -d "$destdir$d" ]; then
      [ "$d" = "$pythondir/aigpu/__pycache__" ] && run rm -f "$destdir$d"/*.pyc
      run rmdir --ignore-fail-on-non-empty "$destdir$d"
    fi
  done
  # A staging tree holds nothing else: its directories the install made go too, when empty.
  # (Without DESTDIR the shared ones, /usr/local/bin and the like, stay.)
  if [ -n "$destdir" ] && [ "$dry" = 0 ]; then
    for d in "$pkgconfigdir" "$libdir/cmake" "$mandir/man1" "$mandir" "$(dirname "$docdir")" \
             ${pythondir:+"$pythondir"} "$includedir" "$bindir" "$libdir"; do
      while [ "${#d}" -gt "${#prefix}" ] && [ -d "$destdir$d" ] && rmdir "$destdir$d" 2>/dev/null; do
        d=$(dirname "$d")
      done
    done
    d=$prefix
    while [ "$d" != / ] && rmdir "$destdir$d" 2>/dev/null; do d=$(dirname "$d"); done
  fi
  echo "install.sh: removed $removed files under $destdir$prefix"
  exit 0
fi

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
if [ "$build" = 1 ]; then
  (cd "$ROOT" && cargo build --release -q -p umd -p aigpu-tools)
fi
for f in libumd.so umd-smi umd-log; do
  [ -f "$TARGET/release/$f" ] || die "$TARGET/release/$f missing (build first, or drop --no-build)"
done
[ "$(readelf -d "$TARGET/release/libumd.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')" = "$soname" ] ||
  die "$TARGET/release/libumd.so does not carry the soname $soname (umd/build.rs)"

# Paths the CMake package computes from its own location, so a DESTDIR tree or a moved
# prefix still works (as CMake's own generated packages do).
rel_include=$(realpath -m --relative-to="$cmakedir" "$includedir")
rel_lib=$(realpath -m --relative-to="$cmakedir" "$libdir")
subst() {
  sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@INCLUDEDIR@|$includedir|g" \
      -e "s|@VERSION@|$version|g" -e "s|@SONAME@|$soname|g" -e "s|@REALNAME@|$realname|g" \
      -e "s|@REL_INCLUDEDIR@|$rel_include|g" -e "s|@REL_LIBDIR@|$rel_lib|g" "$1"
}
staged() {  # staged SRC DEST MODE: writes a generated file
  if [ "$dry" = 1 ]; then echo "+ generate $2 from $1"; return; fi
  local tmp; tmp=$(mktemp)
  subst "$1" > "$tmp"
  install -m "$3" "$tmp" "$2"
  rm -f "$tmp"
}

D=$destdir
run install -d "$D$libdir" "$D$pkgconfigdir" "$D$cmakedir" "$D$includedir" "$D$bindir" \
               "$D$mandir/man1" "$D$docdir"
run install -m 0755 "$TARGET/release/libumd.so" "$D$libdir/$realname"
run ln -sfn "$realname" "$D$libdir/$soname"
run ln -sfn "$soname" "$D$libdir/libumd.so"
run install -m 0644 "$ROOT/include/umd.h" "$ROOT/include/aigpu_drm.h" "$D$includedir/"
staged "$ROOT/packaging/umd.pc.in" "$D$pkgconfigdir/umd.pc" 0644
staged "$ROOT/packaging/umdConfig.cmake.in" "$D$cmakedir/umdConfig.cmake" 0644
staged "$ROOT/packaging/umdConfigVersion.cmake.in" "$D$cmakedir/umdConfigVersion.cmake" 0644
run install -m 0755 "$TARGET/release/umd-smi" "$TARGET/release/umd-log" "$D$bindir/"
run install -m 0644 "$ROOT/packaging/man/umd-smi.1" "$ROOT/packaging/man/umd-log.1" "$D$mandir/man1/"
run install -m 0644 "$ROOT/README.md" "$ROOT"/docs/*.md "$D$docdir/"
if [ "$python" = 1 ]; then
  for f in "${pyfiles[@]}"; do
    run install -D -m 0644 "$ROOT/python/$f" "$D$pythondir/$f"
  done
  # Where this install put the library: the package tries it after the loader's own search.
  staged "$ROOT/packaging/aigpu_install.py.in" "$D$pythondir/aigpu/_install.py" 0644
fi
if [ -z "$D" ] && [ "$dry" = 0 ] && [ -w /etc/ld.so.cache ] && command -v ldconfig >/dev/null; then
  ldconfig
fi
echo "install.sh: libumd $version into $D$prefix (libdir $libdir, python package ${pythondir:-not installed})"
