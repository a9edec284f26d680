#!/usr/bin/env bash
# Builds the static guest agent (musl) into target/agent and prints its path.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p burrow-agent --release --target x86_64-unknown-linux-musl --target-dir target/agent
echo "$PWD/target/agent/x86_64-unknown-linux-musl/release/burrow-agent"
