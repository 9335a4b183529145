#!/bin/bash
# Installs everything the build and the tests need on a fresh Debian 12 machine; skips what is
# already there, so a second run costs a few seconds.
#   host: apt packages (clang-19, Debian's rustc-web + rust-src + clippy for the kernel, QEMU, busybox,
#         dkms for scripts/test-dkms.sh)
#   kernel source: linux-source-7.3 from trixie-backports, unpacked into $AIGPU_CACHE and patched
#                  with the series kmd/kconfig/[0-9]*.patch
#   tools: bindgen-cli (kernel Rust bindings) and cbindgen (include/umd.h), pinned versions
set -euo pipefail
. "$(dirname "$0")/env.sh"
export DEBIAN_FRONTEND=noninteractive

# libdrm-dev, libdrm-tests, pciutils: the guest's PCI checks (scripts/build-initramfs.sh stages
# pci_test against libdrm.a, Debian's drmdevice and lspci).
APT_PKGS=(build-essential bc flex bison cpio libelf-dev libssl-dev dwarves python3 kmod
          rustc-web rust-web-src cargo-web rust-web-clippy clang-19 lld-19 llvm-19 libclang-19-dev
          busybox-static g++ libspdlog-dev prometheus dkms
          cmake pkg-config python3-numpy python3-pytest python3-venv
          libdrm-dev libdrm-tests pciutils)
missing=()
for p in "${APT_PKGS[@]}" qemu-system-x86 "$KVER_PKG"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  stamp "apt: installing ${missing[*]}"
  # linux-source-7.3 comes only from trixie-backports (default priority 100: nothing else is
  # taken from it). The mirror is the one this machine already uses for Debian.
  if ! grep -rqs trixie-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
    mirror=$(grep -rhoE '^URIs: *[^ ]+/debian$' /etc/apt/sources.list.d/ 2>/dev/null | head -1 | awk '{print $2}')
    [ -n "$mirror" ] || mirror=$(grep -hoE '^deb +[^ ]+/debian ' /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}')
    [ -n "$mirror" ] || { echo "setup-toolchain: cannot find the Debian mirror in the apt sources" >&2; exit 1; }
    printf 'Types: deb\nURIs: %s\nSuites: trixie-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$mirror" > /etc/apt/sources.list.d/trixie-backports.sources
  fi
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${APT_PKGS[@]}" >/dev/null
  # qemu-system-x86 7.2 conflicts with the preinstalled qemu-utils 10.0 (bookworm-backports):
  # nothing here needs the newer one, so take bookworm's alongside.
  # One transaction, so apt can resolve the downgrade.
  apt-get install -y -q --no-install-recommends --allow-downgrades qemu-system-x86 qemu-utils/bookworm >/dev/null
  # pkg/release form: takes only this package from trixie-backports (`-t` would drag in a
  # newer linux-libc-dev through Recommends).
  apt-get install -y -q --no-install-recommends "$KVER_PKG/trixie-backports" >/dev/null
fi

# The kernel source is the package's tarball with the patch series kmd/kconfig/[0-9]*.patch
# applied in order. The tree records what it was made from (.aigpu-pkg-version, .aigpu-patches:
# the sha256 of the series); when either differs, a pristine tree is unpacked and patched beside
# it and then swapped in, so that module builds against the old tree (its cached build trees use
# it through their `source` link) see it change at one instant, not half-patched.
mkdir -p "$AIGPU_CACHE"
kver=$(dpkg-query -W -f='${Version}' "$KVER_PKG")
mapfile -t series < <(kpatch_series)
series_sum=$(kpatch_series_sum)
if [ "$(cat "$KSRC/.aigpu-pkg-version" 2>/dev/null)" != "$kver" ] ||
   [ "$(cat "$KSRC/.aigpu-patches" 2>/dev/null)" != "$series_sum" ]; then
  stamp "unpacking $KVER_PKG $kver with ${#series[@]} patches (series $series_sum)"
  new=$AIGPU_CACHE/linux-source-new.$$
  rm -rf "$new"
  mkdir -p "$new"
  tar -C "$new" -xf /usr/src/linux-source-7.3.tar.xz
  for p in "${series[@]}"; do
    patch -s -d "$new/linux-source-7.3" -p1 --no-backup-if-mismatch < "$p" ||
      { echo "setup-toolchain: $(basename "$p") does not apply to $KVER_PKG $kver" >&2; rm -rf "$new"; exit 1; }
  done
  echo "$kver" > "$new/linux-source-7.3/.aigpu-pkg-version"
  echo "$series_sum" > "$new/linux-source-7.3/.aigpu-patches"
  old=$AIGPU_CACHE/linux-source-old.$$
  [ -e "$KSRC" ] && mv "$KSRC" "$old"
  mv "$new/linux-source-7.3" "$KSRC"
  rm -rf "$old" "$new"
fi

if ! "$TOOLS/bin/bindgen" --version 2>/dev/null | grep -q "$BINDGEN_VER"; then
  stamp "building bindgen-cli $BINDGEN_VER"
  # Debian's cargo/rustc: the kernel's bindgen must match the kernel's rustc, not rustup's.
  CARGO_HOME=$AIGPU_CACHE/cargo-home RUSTC=/usr/bin/rustc \
    /usr/bin/cargo install -q --locked bindgen-cli --version "$BINDGEN_VER" --root "$TOOLS"
fi
if ! "$TOOLS/bin/cbindgen" --version 2>/dev/null | grep -q "$CBINDGEN_VER"; then
  stamp "building cbindgen $CBINDGEN_VER"
  cargo install -q --locked cbindgen --version "$CBINDGEN_VER" --root "$TOOLS"
fi
stamp "toolchain ready"
