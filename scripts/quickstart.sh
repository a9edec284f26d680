#!/usr/bin/env bash
# Fresh machine -> running sandbox: installs the dependencies, builds burrow,
# the static guest agent and the busybox demo image, then runs the Rust
# quickstart example (examples/quickstart.rs of the burrow crate).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
echo "==> building burrow and the guest agent"
cargo build -q -p burrow-cli
agent=$(bash scripts/build-agent.sh)
[ -f demo/busybox/bin/busybox ] || bash scripts/make-demo-rootfs.sh demo/busybox
export BURROW_BIN="$PWD/target/debug/burrow"
export BURROW_AGENT_BIN="$agent"
export BURROW_HOME="${BURROW_HOME:-$HOME/.local/share/burrow}"
echo "==> running the quickstart example (home: $BURROW_HOME)"
cargo run -q -p burrow --example quickstart -- "$PWD/demo/busybox"
