#!/usr/bin/env bash
# Installs everything burrow's build, tests and demo need on a fresh Debian 12
# machine (run as root): the OCI runtimes, busybox for the demo image, user
# namespace and user-mode networking tools, and the Rust pieces (the musl
# target for the static guest agent, rustfmt, clippy) and the registry test
# tools (docker-registry, skopeo, htpasswd from apache2-utils), and the
# vm driver's QEMU and the guest kernel's sources and build tools
# (scripts/build-kernel.sh).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
for pkg in runc crun busybox-static uidmap passt slirp4netns sqlite3 docker-registry skopeo apache2-utils umoci; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "==> installing ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
kneed=()
for pkg in qemu-system-x86 linux-source-6.1 bc bison flex libelf-dev cpio xz-utils make gcc; do
  dpkg -s "$pkg" >/dev/null 2>&1 || kneed+=("$pkg")
done
if [ ${#kneed[@]} -gt 0 ]; then
  echo "==> installing ${kneed[*]} (QEMU and the guest kernel build)"
  apt-get update -qq
  # No recommends: linux-source would pull in linux-perf and friends.
  apt-get install -y -qq --no-install-recommends "${kneed[@]}" >/dev/null
fi
if ! rustup target list --installed | grep -qx x86_64-unknown-linux-musl; then
  echo "==> adding the x86_64-unknown-linux-musl Rust target (static guest agent)"
  rustup target add x86_64-unknown-linux-musl
fi
for comp in rustfmt clippy; do
  rustup component list --installed | grep -q "^$comp" || rustup component add "$comp"
done
