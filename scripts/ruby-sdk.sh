#!/usr/bin/env bash
# Builds the Ruby SDK (sdk-ruby: the gem burrow over the native extension
# bindings/ruby), `gem build`s it with the Rust sources of the extension
# and the supervisor inside (rust/, put there by its gemspec), installs the gem file into a
# FRESH GEM_HOME and runs its minitest suites against the installed gem,
# never the source tree: the basics, ownership/fork/interrupts, and the
# shared conformance list (tests/conformance/cases.json), locally and
# through a `burrow serve` per case. Then the examples (examples/ruby), and
# a second install that compiles the extension from the gem's own sources
# (what a user's `gem install burrow-*.gem` does).
#
# Run by scripts/test.sh after the workspace's build (it reuses it).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
out="$root/target/ruby-sdk"

echo "==> the workspace's libraries (dev profile; the native library carries the supervisor, built once)"
cargo build -q -p burrow-cli --bin burrow-supervisor
BURROW_EMBED_SUPERVISOR="${BURROW_EMBED_SUPERVISOR:-$root/target/debug/burrow-supervisor}" \
  cargo build -q --workspace --lib

echo "==> rbs validate of the signatures (sig/*.rbs; rbs ships with Debian's Ruby)"
rbs_exe=$(ruby -e 'print Gem::Specification.find_by_name("rbs").bin_file("rbs")')
(cd sdk-ruby && ruby "$rbs_exe" -I sig validate >/dev/null)

echo "==> gem build in sdk-ruby/ (its gemspec puts the extension's Rust sources and the supervisor above in rust/)"
rm -rf "$out" && mkdir -p "$out"
(cd sdk-ruby && BURROW_EMBED_SUPERVISOR="$root/target/debug/burrow-supervisor" \
  gem build -q burrow.gemspec -o "$out/burrow.gem" >/dev/null)

# The system's gems (minitest, from Debian) stay visible; burrow is only in
# the fresh GEM_HOME.
system_gems="$(env -u GEM_HOME -u GEM_PATH gem env gempath)"

echo "==> gem install into a fresh GEM_HOME (the extension cargo built above)"
export GEM_HOME="$out/gems" GEM_PATH="$out/gems:$system_gems"
BURROW_NATIVE_LIB="$root/target/debug/libburrow_native.so" \
  gem install -q --local --no-document "$out/burrow.gem" >/dev/null

image="${BURROW_TEST_IMAGE:-$root/target/test-images/busybox}"
echo "==> the gem alone runs a sandbox: no burrow on PATH, no BURROW_ variables$( [ "$(id -u)" = 0 ] && echo ', as an unprivileged user (rootless)')"
run_as=()
alone=$(mktemp -d /tmp/brb-alone.XXXXXX)
chmod 755 "$alone"
cp sdk-ruby/checks/self_contained.rb "$alone/"
if [ "$(id -u)" = 0 ]; then
  user=$(bash scripts/rootless-user.sh)
  run_as=(runuser -u "$user" --)
  chown -R "$user" "$alone"
fi
# The user's own view of the system's gems, and the fresh GEM_HOME.
user_gems=$(cd "$alone" && "${run_as[@]}" env -i HOME="$alone" PATH=/usr/bin:/bin gem env gempath)
(cd "$alone" && "${run_as[@]}" env -i HOME="$alone" PATH=/usr/bin:/bin GEM_HOME="$GEM_HOME" GEM_PATH="$GEM_HOME:$user_gems" \
  ruby -w self_contained.rb "$image")
rm -rf "$alone"

export BURROW_BIN="${BURROW_BIN:-$root/target/debug/burrow}"
export BURROW_AGENT_BIN="${BURROW_AGENT_BIN:-$(bash scripts/build-agent.sh)}"
export BURROW_TEST_IMAGE="$image"
export BURROW_REPO_ROOT="$root"
unset BURROW_URL BURROW_TOKEN BURROW_HOME
cd "$out"

echo "==> minitest against the installed gem (basics, lifecycle, the conformance list), and the conformance list again through a burrow serve per case"
# The remote run goes on beside the local ones (each case has a home and a
# server of its own; the cases mostly wait on sandboxes), its report after.
BURROW_TEST_REMOTE=1 ruby -w "$root/sdk-ruby/test/test_conformance.rb" -n /^test_/ \
  >"$out/remote-conformance.log" 2>&1 &
remote=$!
status=0
for t in "$root"/sdk-ruby/test/test_*.rb; do
  ruby -w "$t" || status=1
done
wait "$remote" || status=1
echo "-- the conformance list through burrow serve:"
cat "$out/remote-conformance.log"
[ "$status" = 0 ] || exit 1

if [ "$(id -u)" = 0 ]; then
  echo "==> the conformance list again as an unprivileged user (rootless), the gem alone: no burrow on PATH, no BURROW_BIN or BURROW_AGENT_BIN"
  # The other suites ask for limits (memory: ...), which an unprivileged
  # user's host refuses without a delegated cgroup.
  (cd /tmp && runuser -u "$user" -- env -u BURROW_BIN -u BURROW_AGENT_BIN -u XDG_RUNTIME_DIR \
    HOME="$(getent passwd "$user" | cut -d: -f6)" PATH=/usr/bin:/bin GEM_PATH="$GEM_HOME:$user_gems" \
    ruby -w "$root/sdk-ruby/test/test_conformance.rb")
fi

echo "==> the examples (examples/ruby) against the installed gem"
home=$(mktemp -d /tmp/bre.XXXXXX)
BURROW_HOME="$home" BURROW_IMAGE="$BURROW_TEST_IMAGE" ruby -w "$root/examples/ruby/quickstart.rb"
BURROW_HOME="$home" BURROW_IMAGE="$BURROW_TEST_IMAGE" ruby -w "$root/examples/ruby/convergence.rb" 8
rm -rf "$home"

echo "==> gem install compiling the extension from the gem's rust/ (a user's install)"
# The dev profile and a target directory of its own: the gem's rust/ has the
# workspace's layout, so its crates would get the workspace's fingerprints
# in the shared one, and a later workspace build would take the gem's
# (older) artifacts as fresh. The compiler cache serves the registry crates.
export GEM_HOME="$out/gems-from-source" GEM_PATH="$out/gems-from-source:$system_gems"
BURROW_CARGO_PROFILE=dev CARGO_TARGET_DIR="$root/target/gem-from-source" \
  gem install --local --no-document "$out/burrow.gem" >"$out/install-from-source.log" 2>&1 || {
  cat "$out/install-from-source.log" >&2
  exit 1
}
ruby -w "$root/sdk-ruby/test/test_basic.rb"
