#!/usr/bin/env bash
# Installs everything burrow's build, tests and demo need on a fresh Debian 12
# machine (run as root): the OCI runtimes, busybox for the demo image, user
# namespace and user-mode networking tools, and the Rust pieces (the musl
# target for the static guest agent, rustfmt, clippy) and the registry test
# tools (docker-registry, skopeo, htpasswd from apache2-utils), and the
# vm driver's QEMU and the guest kernel's sources and build tools
# (scripts/build-kernel.sh), and PostgreSQL for `burrow serve`'s tests (they
# run their own throwaway servers on free ports, see
# core/test-support/src/pg.rs, so the package's default cluster is not
# created), and Ruby with its headers and libclang for the Ruby binding,
# and the host tools of the Kubernetes test cluster (CNI plugins, openssl,
# iptables/nftables, curl; gcc and libc6-dev build its static pause binary;
# the cluster itself is built from the Go module proxy by scripts/k8s/build.sh),
# and sccache, the compiler cache scripts/test.sh compiles through (its
# cache, in its default place, makes a warm machine's build minutes shorter;
# an empty one costs a cold machine about 10% more).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
# The system packages need root; an ordinary user's run installs them
# through sudo (the one step that does) and the Rust pieces as itself.
as_root=()
if [ "$(id -u)" != 0 ]; then
  as_root=(sudo DEBIAN_FRONTEND=noninteractive)
fi
apt_install() {
  if [ ${#as_root[@]} -gt 0 ] && ! command -v sudo >/dev/null; then
    echo "install-deps: installing $* needs root: run this script as root once (sudo is not installed)" >&2
    exit 1
  fi
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq "$@" >/dev/null
}
need=()
# ruby, ruby-dev and libclang-dev: the Ruby binding (bindings/ruby, magnus
# and rb-sys, whose build script generates Ruby's bindings with libclang);
# ruby-minitest: its tests (the gem registry is not reachable).
# chromium: the web console's browser tests (tests/console, driven by
# playwright-core; its own browser download cannot work here).
# stress-ng: the CPU hog the attack suite's rootless run is made under.
for pkg in runc crun busybox-static uidmap passt slirp4netns sqlite3 docker-registry skopeo apache2-utils umoci \
  ruby ruby-dev libclang-dev ruby-minitest chromium \
  containernetworking-plugins openssl iptables nftables curl gcc libc6-dev sccache stress-ng; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "==> installing ${need[*]}"
  apt_install "${need[@]}"
fi
# Debian's postgresql creates and starts a default cluster (15/main on port
# 5432) when first installed; starting it can fail where there is no systemd
# (and with it the install). The tests never use it, so tell
# postgresql-common not to create it. Clusters that already exist are left
# alone (pg_lsclusters lists them).
cc_dropin=/etc/postgresql-common/createcluster.d/burrow.conf
if ! grep -qsx 'create_main_cluster = false' "$cc_dropin"; then
  "${as_root[@]}" mkdir -p "${cc_dropin%/*}"
  printf '%s\n' '# Written by burrow scripts/install-deps.sh: tests run their own clusters.' \
    'create_main_cluster = false' | "${as_root[@]}" tee "$cc_dropin" >/dev/null
fi
kneed=()
for pkg in qemu-system-x86 linux-source-6.1 bc bison flex libelf-dev cpio xz-utils make gcc \
  postgresql postgresql-client; do
  dpkg -s "$pkg" >/dev/null 2>&1 || kneed+=("$pkg")
done
if [ ${#kneed[@]} -gt 0 ]; then
  echo "==> installing ${kneed[*]} (QEMU, the guest kernel build, PostgreSQL)"
  # No recommends: linux-source would pull in linux-perf and friends.
  apt_install --no-install-recommends "${kneed[@]}"
fi
if ! rustup target list --installed | grep -qx x86_64-unknown-linux-musl; then
  echo "==> adding the x86_64-unknown-linux-musl Rust target (static guest agent)"
  rustup target add x86_64-unknown-linux-musl
fi
for comp in rustfmt clippy; do
  rustup component list --installed | grep -q "^$comp" || rustup component add "$comp"
done
# Fuzzing (scripts/fuzz.sh, which checks the same): libFuzzer through
# cargo-fuzz needs the nightly toolchain; schemathesis (the OpenAPI fuzzer)
# needs python3's venv, installed from PyPI by scripts/schemathesis.sh.
nightly=$(sed -n 's/^channel = "\(.*\)"/\1/p' fuzz/rust-toolchain.toml)
if ! rustup run "$nightly" rustc --version >/dev/null 2>&1; then
  echo "==> adding the $nightly Rust toolchain (cargo-fuzz; fuzz/rust-toolchain.toml)"
  rustup toolchain install "$nightly" --profile minimal
fi
# cargo deny (deny.toml: licenses, bans, sources), run by `cargo xtask lint`.
if [ "$(cargo deny --version 2>/dev/null || true)" != "cargo-deny 0.20.2" ]; then
  echo "==> installing cargo-deny 0.20.2"
  cargo install -q cargo-deny --locked --version 0.20.2
fi
if [ "$(cargo fuzz --version 2>/dev/null || true)" != "cargo-fuzz 0.13.2" ]; then
  echo "==> installing cargo-fuzz 0.13.2"
  cargo install -q cargo-fuzz --locked --version 0.13.2
fi
python3 -c 'import venv, ensurepip' 2>/dev/null || {
  echo "==> installing python3-venv (schemathesis)"
  apt_install --no-install-recommends python3-venv; }
