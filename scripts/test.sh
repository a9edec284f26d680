#!/usr/bin/env bash
# Every check and test of the workspace (what CI runs), as the developer
# commands of `cargo xtask` in a row: real runc containers, real QEMU
# microVMs (KVM if a probe boot works, else TCG), gVisor, a real
# single-node Kubernetes, real supervisor processes, real SQLite files and
# PostgreSQL servers, and every SDK from its installed package. Run as
# root. One part alone: `cargo xtask help` (CONTRIBUTING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() {
  echo; echo "==> $* ($(( $(date +%s) - start ))s)"
  # In a lane (below), also a progress line on the run's own output.
  if [ -n "${LANE:-}" ]; then echo "==> [$LANE] ${*%%:*} ($(( $(date +%s) - start ))s)" >&3; fi
}

# The compiler wrappers every cargo call of the run shares (xtask keeps
# them when set): clippy-driver compiles the workspace's own crates (what
# `cargo clippy` does), so one build both lints them with -D warnings and
# compiles them for the tests; dependencies are compiled once, not checked
# and then built again. sccache where it is installed
# (scripts/install-deps.sh installs it): the registry crates' objects come
# from its cache, in its default place, when an earlier run on this
# machine compiled them. No incremental compilation: CI builds once from
# scratch, and incremental artifacts cannot be cached.
RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)"
CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
if [ -z "${RUSTC_WRAPPER:-}" ] && command -v sccache >/dev/null; then
  RUSTC_WRAPPER=sccache
  CARGO_INCREMENTAL=0
  export RUSTC_WRAPPER CARGO_INCREMENTAL
  sccache --zero-stats >/dev/null 2>&1 || true
fi
# A run that stops early (a failed step, ^C) leaves no cluster running and
# the host as it was (cluster.sh stop is idempotent).
trap 'bash scripts/k8s/cluster.sh stop >/dev/null 2>&1 || true; sccache --stop-server >/dev/null 2>&1 || true' EXIT

step "format"
cargo xtask fmt
step "clippy, and the build of every test, bench and example (one compilation); the bare contract without the engine's dependencies; cargo deny (licenses, bans, sources)"
cargo xtask lint
step "fuzzing: every cargo-fuzz target of fuzz/ from its committed seeds, 20 s each (scripts/fuzz.sh; its own build, on the dated nightly of fuzz/rust-toolchain.toml)"
cargo xtask fuzz "${BURROW_FUZZ_SECONDS:-20}"
step "tests (container driver; the demo image, the MCP example's image, helm, the guest kernel (first build about 7 minutes) and the Kubernetes test cluster (first build about 15 minutes) are built once under target/; core/cli/tests/schemathesis.rs: the API against its OpenAPI document; soak.rs: 8 processes of random lifecycle operations with kill -9 injected; vm.rs: the vm-only tests; install.rs: cargo install into an empty prefix runs a sandbox; core/kube/tests: the Kubernetes backend and the conformance kit on the cluster; mcp.rs and kube_serverless.rs: serverless MCP locally, on the cluster and behind the Helm chart; console.rs: the web console in headless Chromium against a server on PostgreSQL)"
# The test binaries three at a time (scripts/test-parallel.sh): they mostly
# wait on sandboxes, servers and timeouts.
cargo xtask all
# The rest in two lanes at once, each in order: the Python, TypeScript
# and Go SDKs (mostly builds and interpreters), and the engine's other
# drivers and users (mostly waiting on sandboxes and VMs), then the Ruby
# SDK. Each lane writes its own log, printed
# whole when it ends; the run fails if either does. The rootless user both
# use is made first, once.
bash scripts/rootless-user.sh >/dev/null
lanes=target/ci-lanes
rm -rf "$lanes"
mkdir -p "$lanes"
# A lane's exit status goes to a file, not through `wait PID`: with
# pid_max at 32768 the run's thousands of processes wrap the pids, and a
# fork of this shell that reuses a finished lane's pid makes bash forget
# that lane's status (`wait` then answers 127 for a lane that passed).
# Run in the background only (`lane NAME FN &`): its `set +e` is its own
# shell's, and the lane's commands still stop at the first failure (no
# `||` around them, which would switch that off inside).
# Runs a command while one stress-ng worker keeps a core busy (race
# windows and timeouts of the attack suite hold under load); the hog ends
# with the command, whatever its status.
under_cpu_hog() {
  stress-ng --cpu 1 --timeout 900 >/dev/null 2>&1 &
  local hog=$! rc=0
  set +e
  "$@"
  rc=$?
  set -e
  kill "$hog" 2>/dev/null || true
  wait "$hog" 2>/dev/null || true
  return "$rc"
}
lane() {
  local name=$1
  shift
  set +e
  ( set -euo pipefail; LANE=$name; "$@" ) 3>&1 >"$lanes/$name.log" 2>&1
  echo "$?" >"$lanes/$name.rc"
}
sdks() {
  step "Python SDK: wheel (maturin), fresh venv, mypy --strict, pytest + the conformance list (locally, through a server, and through a server on the cluster)"
  cargo xtask sdk python
  step "TypeScript SDK: native module (napi-rs), npm pack, installed into a fresh directory, node --test"
  cargo xtask sdk node
  step "Go SDK: libburrow.a, the module from a file-based proxy, go vet + staticcheck, go test -race"
  cargo xtask sdk go
}
drivers() {
  # Two test binaries at a time in this lane: the other lane builds.
  export BURROW_TEST_JOBS=2
  step "as an unprivileged user (scripts/rootless-user.sh): the shared lifecycle suites and the conformance kit with rootless containers (the user's own user namespace), the web console in Chromium (with its own sandbox), and the lifecycle suites against the vm driver"
  cargo xtask e2e container --rootless
  cargo xtask conformance container --rootless
  cargo xtask test --rootless --test console
  step "the attack suite (core/cli/tests/attacks.rs; as root it ran with every test binary) as the unprivileged user, under a CPU hog (stress-ng, one worker): each hole of the security review, attacked"
  under_cpu_hog cargo xtask test --rootless --test attacks
  cargo xtask e2e vm --rootless
  step "the shared lifecycle suites again, against the vm driver (QEMU microVMs)"
  cargo xtask e2e vm
  step "the shared lifecycle suites a third time, the container driver under runsc (gVisor, built with the cluster), as root and rootless"
  cargo xtask e2e runsc
  cargo xtask e2e runsc --rootless
  step "the conformance kit (tests/conformance/cases.json) against the local backend with the vm driver"
  cargo xtask conformance vm
  # Last here, not in the SDK lane: the lanes end about together.
  step "Ruby SDK: the gem (with its Rust sources), installed into a fresh GEM_HOME, minitest + the conformance list, a second install compiling from the gem"
  cargo xtask sdk ruby
}
step "two lanes at once: the SDKs, and the other drivers and the rootless runs (logs: $lanes/)"
lane sdks sdks &
lane drivers drivers &
wait
failed=()
for name in drivers sdks; do
  cat "$lanes/$name.log"
  [ "$(cat "$lanes/$name.rc" 2>/dev/null)" = 0 ] || failed+=("$name")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "failed lanes: ${failed[*]} (their logs are above, and in $lanes/)" >&2
  exit 1
fi
step "done"
