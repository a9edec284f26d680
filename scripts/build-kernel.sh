#!/usr/bin/env bash
# Builds burrow's guest kernel (target/kernel/vmlinux, an ELF with a PVH entry
# for QEMU microvm) from Debian's linux-source-6.1 and prints its path.
#
# Config: `make tinyconfig` + vm/kernel/burrow.config, then `make olddefconfig`;
# every option the fragment sets must survive, or the build fails. Rebuilds
# only when the fragment, the linux-source-6.1 package version or this script
# change (key in target/kernel/vmlinux.key). A kernel built for a key is also
# kept in the user's cache (${XDG_CACHE_HOME:-~/.cache}/burrow/kernel/KEY/,
# BURROW_KERNEL_CACHE overrides, empty disables), so a fresh clone on a
# machine that built the same kernel before copies it instead of building it
# again (about 7 minutes on 2 cores). Needs the packages that
# scripts/install-deps.sh installs; installs nothing itself.
# Last line of stdout: the absolute path of the vmlinux.
set -euo pipefail
self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
cd "$(dirname "$self")/.."
root="$PWD"
fragment="$root/vm/kernel/burrow.config"
tarball=/usr/src/linux-source-6.1.tar.xz
out="$root/target/kernel"
vmlinux="$out/vmlinux"

version="$(dpkg-query -W -f='${Version}' linux-source-6.1 2>/dev/null || true)"
if [ -z "$version" ] || [ ! -f "$tarball" ]; then
  echo "error: linux-source-6.1 is not installed ($tarball); run scripts/install-deps.sh" >&2
  exit 1
fi
key="$( { cat "$fragment"; echo "linux-source-6.1=$version"; cat "$self"; } | sha256sum | cut -d' ' -f1)"
if [ -f "$vmlinux" ] && [ "$(cat "$out/vmlinux.key" 2>/dev/null)" = "$key" ]; then
  echo "$vmlinux"
  exit 0
fi
cache_root="${BURROW_KERNEL_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/burrow/kernel}"
cached="${cache_root:+$cache_root/$key/vmlinux}"
if [ -n "$cached" ] && [ -f "$cached" ]; then
  mkdir -p "$out"
  cp "$cached" "$vmlinux.tmp"
  mv "$vmlinux.tmp" "$vmlinux"
  echo "$key" >"$out/vmlinux.key"
  echo "==> guest kernel for this configuration taken from $cached" >&2
  echo "$vmlinux"
  exit 0
fi

missing=()
for tool in make gcc bc bison flex xz tar cpio; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ -f /usr/include/libelf.h ] || missing+=("libelf-dev")
if [ ${#missing[@]} -gt 0 ]; then
  echo "error: missing ${missing[*]}; run scripts/install-deps.sh" >&2
  exit 1
fi

mkdir -p "$out"
# One build at a time; a second caller waits and then takes the fast path.
exec 9>"$out/.lock"
flock 9
if [ -f "$vmlinux" ] && [ "$(cat "$out/vmlinux.key" 2>/dev/null)" = "$key" ]; then
  echo "$vmlinux"
  exit 0
fi

src="$out/src"
build="$out/build"
log="$out/build.log"
: >"$log"
fail() {
  echo "error: $1 (log: $log)" >&2
  tail -n 40 "$log" >&2
  exit 1
}

if [ "$(cat "$src/.burrow-version" 2>/dev/null)" != "$version" ]; then
  echo "==> extracting linux-source-6.1 $version"
  rm -rf "$src" "$src.tmp" "$build"
  mkdir -p "$src.tmp"
  tar -xf "$tarball" -C "$src.tmp" --strip-components=1 >>"$log" 2>&1 || fail "extracting $tarball failed"
  echo "$version" >"$src.tmp/.burrow-version"
  mv "$src.tmp" "$src"
fi

kmake() {
  make -C "$src" O="$build" ARCH=x86_64 KBUILD_BUILD_USER=burrow KBUILD_BUILD_HOST=burrow "$@"
}

echo "==> configuring (tinyconfig + vm/kernel/burrow.config)"
mkdir -p "$build"
{
  kmake tinyconfig &&
    "$src/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" "$fragment" &&
    kmake olddefconfig
} >>"$log" 2>&1 || fail "configuring failed"

# olddefconfig silently drops options whose dependencies are off: check that
# every line of the fragment ended up in .config as written.
bad=0
while IFS= read -r line; do
  case "$line" in
    CONFIG_*=*)
      opt="${line%%=*}"
      want="${line#*=}"
      got="$(grep -m1 "^$opt=" "$build/.config" | cut -d= -f2- || true)"
      if [ "$got" != "$want" ]; then
        echo "error: $opt=$want in the fragment but ${got:-not set} in .config" >&2
        bad=1
      fi
      ;;
    "# CONFIG_"*" is not set")
      opt="${line#\# }"
      opt="${opt%% *}"
      if grep -q "^$opt=" "$build/.config"; then
        echo "error: $opt off in the fragment but $(grep -m1 "^$opt=" "$build/.config") in .config" >&2
        bad=1
      fi
      ;;
  esac
done <"$fragment"
if [ "$bad" -ne 0 ]; then
  echo "error: vm/kernel/burrow.config does not apply cleanly (missing dependencies?); see $build/.config" >&2
  exit 1
fi

echo "==> building (about 7 minutes on 2 cores; log: $log)"
kmake -j"$(nproc)" vmlinux >>"$log" 2>&1 || fail "kernel build failed"

cp "$build/vmlinux" "$vmlinux.tmp"
mv "$vmlinux.tmp" "$vmlinux"
echo "$key" >"$out/vmlinux.key"
if [ -n "$cached" ]; then
  # Best effort: a cache that cannot be written only costs the next build.
  mkdir -p "${cached%/*}" 2>/dev/null && cp "$vmlinux" "$cached.tmp" 2>/dev/null &&
    mv "$cached.tmp" "$cached" 2>/dev/null || true
fi
echo "$vmlinux"
