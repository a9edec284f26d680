#!/usr/bin/env bash
# Every check and test of the workspace, against real runc containers, real
# QEMU microVMs (KVM if a probe boot works, else TCG), real supervisor
# processes and real SQLite files. Run as root (the container
# driver needs it today).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { echo; echo "==> $* ($(( $(date +%s) - start ))s)"; }
step "format"
cargo fmt --all -- --check
step "static guest agent"
# Built once: the tests run it (BURROW_AGENT_BIN), and the burrow and
# burrow-supervisor binaries embed this same file (BURROW_EMBED_AGENT)
# instead of compiling the agent again in core/cli/build.rs.
BURROW_AGENT_BIN=$(bash scripts/build-agent.sh)
BURROW_EMBED_AGENT=$BURROW_AGENT_BIN
export BURROW_AGENT_BIN BURROW_EMBED_AGENT
step "clippy, and the build of every test, bench and example (one compilation)"
# (--all-targets: the examples are built here; a separate `cargo build
# --examples` resolved the features without the dev-dependencies and
# compiled the workspace again, 2 min for nothing.)
# clippy-driver wraps rustc for the workspace's own crates (what `cargo
# clippy` does), so one build both lints them with -D warnings and compiles
# them for the tests; dependencies are compiled once, not checked and then
# built again. Exported: every later cargo call (tests, examples, the wheel)
# then reuses this build instead of rebuilding the workspace crates.
RUSTC_WORKSPACE_WRAPPER="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver)"
CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
# Compiled through sccache where it is installed (scripts/install-deps.sh
# installs it): the registry crates' objects come from its cache, in its
# default place, when an earlier run on this machine compiled them (a warm
# machine's build: about 5 minutes instead of 15). Nothing depends on the
# cache: an empty one is filled. No incremental compilation: CI builds
# once from scratch, and incremental artifacts cannot be cached.
if [ -z "${RUSTC_WRAPPER:-}" ] && command -v sccache >/dev/null; then
  RUSTC_WRAPPER=sccache
  CARGO_INCREMENTAL=0
  export RUSTC_WRAPPER CARGO_INCREMENTAL
  sccache --zero-stats >/dev/null 2>&1 || true
  trap 'sccache --stop-server >/dev/null 2>&1 || true' EXIT
fi
cargo test -q --workspace --all-targets --no-run
if [ "${RUSTC_WRAPPER:-}" = sccache ]; then
  sccache --show-stats | grep -E '^(Compile requests|Cache hits|Cache misses) ' || true
fi
step "burrow without its default features (the bare contract, remote only, local only), and the conformance kit over the bare contract"
# Checked (and linted: the clippy wrapper above is still exported); the
# bare crate must not pull in the engine's or the client's dependencies.
for features in "" remote local; do
  cargo check -q -p burrow --lib --no-default-features --features "$features"
done
cargo check -q -p burrow-conformance --lib --no-default-features
for crate in burrow burrow-conformance; do
  if cargo tree -q -p "$crate" --no-default-features -e normal --prefix none \
      | grep -E '^(sqlx|oci-client|hyper|tar|flate2|zstd) '; then
    echo "$crate --no-default-features depends on the engine's or the client's crates" >&2
    exit 1
  fi
done
step "fuzzing: every cargo-fuzz target of fuzz/ from its committed seeds, 20 s each (scripts/fuzz.sh; its own build, on nightly)"
BURROW_FUZZ_SECONDS=${BURROW_FUZZ_SECONDS:-20} bash scripts/fuzz.sh
step "demo image"
[ -f target/test-images/busybox/.complete ] || {
  bash scripts/make-demo-rootfs.sh target/test-images/busybox && touch target/test-images/busybox/.complete; }
step "the MCP example's image (Node.js and the MCP SDK on busybox; once per content under target/mcp) and helm (from the Go module proxy, once per version under target/helm)"
bash examples/mcp/build-image.sh >/dev/null
BURROW_HELM=$(bash scripts/build-helm.sh | tail -n 1)
export BURROW_HELM
step "guest kernel (first build about 7 minutes on 2 cores)"
BURROW_VM_KERNEL=$(bash scripts/build-kernel.sh | tail -n 1)
export BURROW_VM_KERNEL
step "Kubernetes test cluster: etcd, kube-apiserver, controller-manager, scheduler, kubelet, containerd with runc and gVisor (built once per version under target/k8s, first build about 15 minutes on 2 cores; state in target/k8s/run, host restored at the end)"
bash scripts/k8s/build.sh >/dev/null
eval "$(bash scripts/k8s/cluster.sh start)"
trap 'bash scripts/k8s/cluster.sh stop || true; sccache --stop-server >/dev/null 2>&1 || true' EXIT
# The agent image of the pods' init containers: the static agent alone.
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
agentroot=$(mktemp -d)
cp "$BURROW_AGENT_BIN" "$agentroot/burrow-agent"
python3 scripts/k8s/oci-image.py "$agentroot" "burrow.dev/agent:$version" target/k8s/agent.tar \
  '{"Entrypoint":["/burrow-agent"],"WorkingDir":"/"}'
rm -rf "$agentroot"
"$BURROW_K8S_BIN/ctr" images import target/k8s/agent.tar >/dev/null
BURROW_TEST_KUBECONFIG=$KUBECONFIG
export BURROW_TEST_KUBECONFIG
step "tests (container driver; core/cli/tests/schemathesis.rs: the API against its OpenAPI document, every schemathesis phase and check; core/cli/tests/soak.rs: 8 processes of random lifecycle operations with kill -9 injected, then the invariants; the vm-only tests in core/cli/tests/vm.rs; core/cli/tests/install.rs: cargo install into an empty prefix runs a sandbox; core/kube/tests: the Kubernetes backend and the conformance kit on the cluster; core/cli/tests/mcp.rs and kube_serverless.rs: serverless MCP locally, on the cluster, and behind the Helm chart installed on the cluster)"
# The test binaries three at a time (scripts/test-parallel.sh): they mostly
# wait on sandboxes, servers and timeouts.
bash scripts/test-parallel.sh --no-fail-fast
step "Python SDK: wheel (maturin), fresh venv, mypy --strict, pytest + the conformance list (locally, through a server, and through a server on the cluster)"
bash scripts/python-sdk.sh
# The cluster is only for the tests above: stopped now (and by the trap on
# any earlier exit), the host restored.
bash scripts/k8s/cluster.sh stop
# The shared lifecycle suites (burrow-cli's tests); --workspace, not -p, so
# the features of the dependencies stay those of the build above and
# nothing is compiled again.
suites="--test lifecycle --test policies --test processes --test logs --test registry_sandbox"
step "the shared lifecycle suites again, against the vm driver (QEMU microVMs)"
# shellcheck disable=SC2086
BURROW_DRIVER=vm bash scripts/test-parallel.sh --no-fail-fast $suites
step "the shared lifecycle suites a third time, the container driver under runsc (gVisor, built with the cluster above)"
# shellcheck disable=SC2086
BURROW_RUNTIME=runsc BURROW_RUNSC="$BURROW_K8S_BIN/runsc" bash scripts/test-parallel.sh --no-fail-fast $suites
step "the conformance kit (tests/conformance/cases.json) against the local backend with the vm driver"
# --workspace, not -p: the features of the dependencies (sqlx) stay those
# of the build above, so nothing is compiled again.
BURROW_DRIVER=vm BURROW_CONFORMANCE_TIME_SCALE=3 cargo test -q --workspace --test local_container --no-fail-fast
step "TypeScript SDK: native module (napi-rs), npm pack, installed into a fresh directory, node --test"
bash scripts/node-sdk.sh
step "Go SDK: libburrow.a, the module from a file-based proxy, go vet + staticcheck, go test -race"
bash scripts/go-sdk.sh
step "Ruby SDK: the gem (with its Rust sources), installed into a fresh GEM_HOME, minitest + the conformance list, a second install compiling from the gem"
bash scripts/ruby-sdk.sh
step "done"
