#!/usr/bin/env bash
# Every check and test of the workspace, against real runc containers, real
# supervisor processes and real SQLite files. Run as root (the container
# driver needs it today).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { echo; echo "==> $* ($(( $(date +%s) - start ))s)"; }
step "format"
cargo fmt --all -- --check
step "clippy"
cargo clippy -q --workspace --all-targets -- -D warnings
step "static guest agent"
BURROW_AGENT_BIN=$(bash scripts/build-agent.sh)
export BURROW_AGENT_BIN
step "demo image"
[ -f target/test-images/busybox/.complete ] || {
  bash scripts/make-demo-rootfs.sh target/test-images/busybox && touch target/test-images/busybox/.complete; }
step "tests"
cargo test -q --workspace --no-fail-fast
step "examples build"
cargo build -q -p burrow --examples
step "done"
