#!/usr/bin/env bash
# Builds the Ruby SDK (sdk-ruby: the gem burrow over the native extension
# bindings/ruby), `gem build`s it, installs the gem file into a FRESH
# GEM_HOME (extconf.rb takes the extension that cargo built with the
# workspace) and runs its minitest suite against the installed gem, never the
# source tree. (Issue 16, in progress: not yet run by scripts/test.sh.)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
out="$root/target/ruby-sdk"

echo "==> the workspace's libraries (dev profile)"
cargo build -q --workspace --lib

echo "==> rbs validate of the signatures (sig/burrow.rbs; rbs ships with Debian's Ruby)"
rbs_exe=$(ruby -e 'print Gem::Specification.find_by_name("rbs").bin_file("rbs")')
(cd sdk-ruby && ruby "$rbs_exe" -I sig validate >/dev/null)

echo "==> gem build"
rm -rf "$out" && mkdir -p "$out"
(cd sdk-ruby && gem build -q burrow.gemspec -o "$out/burrow.gem" >/dev/null)

echo "==> gem install into a fresh GEM_HOME (the extension built by cargo)"
# The system's gems (minitest, from Debian) stay visible; burrow is only
# in the fresh GEM_HOME.
system_gems="$(env -u GEM_HOME -u GEM_PATH gem env gempath)"
export GEM_HOME="$out/gems" GEM_PATH="$out/gems:$system_gems"
# The extension cargo built above (a build from inside `gem install` does
# not see this script's compiler wrapper and would compile the workspace
# again); a user's install builds it from the gem's sources (extconf.rb).
BURROW_NATIVE_LIB="$root/target/debug/libburrow_native.so" \
  gem install -q --local --no-document "$out/burrow.gem" >/dev/null

echo "==> minitest against the installed gem"
export BURROW_BIN="${BURROW_BIN:-$root/target/debug/burrow}"
export BURROW_AGENT_BIN="${BURROW_AGENT_BIN:-$(bash scripts/build-agent.sh)}"
export BURROW_TEST_IMAGE="${BURROW_TEST_IMAGE:-$root/target/test-images/busybox}"
unset BURROW_URL
cd "$out"
for t in "$root"/sdk-ruby/test/test_*.rb; do
  ruby -w "$t"
done
