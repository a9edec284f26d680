#!/usr/bin/env bash
# The per-call overhead of the TypeScript binding: `await sb.ping()` from
# Node against the same call from Rust (and through the binding core's JSON
# call from Rust), in one run, on the local backend with the container
# driver. Needs what scripts/node-sdk.sh leaves (the packed package) and
# the busybox image; run as root.
# Usage: bash scripts/bench-ping.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
n="${1:-2000}"
image="$root/target/test-images/busybox"
export BURROW_AGENT_BIN="${BURROW_AGENT_BIN:-$(bash scripts/build-agent.sh)}"
# The dev profile on both sides (what scripts/node-sdk.sh builds the
# native module with): the difference is the binding's, not the profile's.
cargo build -q -p burrow-cli --bin burrow
export BURROW_BIN="$root/target/debug/burrow"
export BURROW_HOME
BURROW_HOME=$(mktemp -d /tmp/bping.XXXXXX)
unset BURROW_URL
cargo run -q -p burrow-binding --example ping -- "$image" "$n"
app="$root/target/node-sdk/app"
[ -d "$app/node_modules/burrow" ] || { echo "run scripts/node-sdk.sh first" >&2; exit 1; }
cp sdk-node/bench/ping.mjs "$app/bench-ping.mjs"
(cd "$app" && node bench-ping.mjs "$image" "$n")
rm -rf "$BURROW_HOME"
