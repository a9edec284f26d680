#!/usr/bin/env bash
# The per-call overhead of the bindings: `await sb.ping()` from Node,
# `sb.Ping(ctx)` from Go and `sb.ping` from Ruby against the same call from Rust (and through the
# binding core's JSON call from Rust), in one run, on the local backend
# with the container driver. Needs what scripts/node-sdk.sh and
# scripts/go-sdk.sh leave (the packed package, the downloaded module) and
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
goapp="$root/target/go-sdk/app"
[ -f "$goapp/go.mod" ] || { echo "run scripts/go-sdk.sh first" >&2; exit 1; }
(cd "$goapp" &&
  GOPROXY="file://$root/target/go-sdk/proxy" GOFLAGS=-mod=mod GOSUMDB=off \
  GOMODCACHE="$root/target/go-sdk/modcache" CGO_LDFLAGS="-L$root/target/go-sdk/lib" \
  BURROW_TEST_IMAGE="$image" go test -run '^$' -bench BenchmarkPing -benchtime "${n}x" \
    github.com/burrow-dev/burrow/sdk-go | grep -E '^BenchmarkPing' |
  awk '{for (i = 1; i <= NF; i++) if ($i == "median-us/op") printf "ping from Go (sb.Ping(ctx))                 median %s us\n", $(i-1)}')
gems="$root/target/ruby-sdk/gems"
[ -d "$gems/gems" ] || { echo "run scripts/ruby-sdk.sh first" >&2; exit 1; }
GEM_HOME="$gems" GEM_PATH="$gems:$(env -u GEM_HOME -u GEM_PATH gem env gempath)" \
  ruby sdk-ruby/bench/ping.rb "$image" "$n"
rm -rf "$BURROW_HOME"
