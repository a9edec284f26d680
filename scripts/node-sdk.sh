#!/usr/bin/env bash
# Builds the TypeScript SDK (sdk-node: the npm package `burrow` over the
# napi-rs adapter bindings/node), packs it with `npm pack`, installs the
# tarball into a FRESH directory and runs its tests (node --test) from
# there, never from the source tree. npm supplies typescript and
# @types/node (pinned in sdk-node/package.json and package-lock.json).
#
# Needs: node >= 20 with npm, a Rust toolchain, and for the tests the agent
# (BURROW_AGENT_BIN), the burrow binary and the busybox image, as
# scripts/test.sh prepares them.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
out="$root/target/node-sdk"

echo "==> the native module (bindings/node, dev profile: reuses the tests' build)"
# --workspace, not -p: the dependencies keep the features of the workspace
# build, so nothing but the module itself is compiled.
cargo build -q --workspace --lib
cp "$root/target/debug/libburrow_node.so" sdk-node/burrow.node

echo "==> the package: npm ci, tsc --strict, the ES module face"
(cd sdk-node && npm ci --no-audit --no-fund -s && npm run -s build)

echo "==> npm pack, installed into a fresh directory"
rm -rf "$out" && mkdir -p "$out/app"
(cd sdk-node && npm pack -s --pack-destination "$out" >/dev/null)
cp sdk-node/test/*.test.* "$out/app/"
(cd "$out/app" && echo '{"name": "burrow-sdk-tests", "private": true}' >package.json &&
  npm install --no-audit --no-fund -s "$out"/burrow-*.tgz)

echo "==> node --test against the installed package"
export BURROW_BIN="${BURROW_BIN:-$root/target/debug/burrow}"
export BURROW_AGENT_BIN="${BURROW_AGENT_BIN:-$(bash scripts/build-agent.sh)}"
export BURROW_TEST_IMAGE="${BURROW_TEST_IMAGE:-$root/target/test-images/busybox}"
unset BURROW_URL
(cd "$out/app" && node --test)
