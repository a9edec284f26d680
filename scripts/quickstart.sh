#!/usr/bin/env bash
# Fresh machine -> running sandbox: installs the dependencies, builds burrow
# (its build compiles the static guest agent and embeds it in the burrow and
# burrow-supervisor binaries, and embeds the web console built just before
# it) and the busybox demo image, runs the Rust
# quickstart example (examples/quickstart.rs of the burrow crate), then one
# command through the CLI. Neither needs an environment variable: the example
# finds target/debug/burrow beside itself, and the binaries carry the agent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
echo "==> building the web console of burrow serve (console/, npm; embedded by the next build)"
bash scripts/build-console.sh >/dev/null
echo "==> building burrow with its guest agent (the first build takes a few minutes)"
cargo build -q -p burrow-cli
[ -f demo/busybox/bin/busybox ] || bash scripts/make-demo-rootfs.sh demo/busybox
echo "==> running the quickstart example"
cargo run -q -p burrow --example quickstart -- "$PWD/demo/busybox"
echo "==> the CLI: target/debug/burrow run --name quickstart-cli ./demo/busybox -- echo ..."
target/debug/burrow rm -f quickstart-cli >/dev/null 2>&1 || true # left by an interrupted run
target/debug/burrow run --name quickstart-cli "$PWD/demo/busybox" -- echo "hello from the burrow CLI"
cat <<MSG
==> done. Try: target/debug/burrow up web --image $PWD/demo/busybox; target/debug/burrow exec web -- uname -a
    cargo install --path core/cli puts burrow on your PATH; burrow doctor checks the drivers
MSG
