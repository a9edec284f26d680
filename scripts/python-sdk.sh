#!/usr/bin/env bash
# Builds the Python SDK wheel (maturin, abi3) from sdk-python/, installs it
# into a FRESH virtual environment, and runs the Python tests (pytest, the
# conformance list) and mypy --strict on the package and the examples
# against that installed wheel. Everything lives under target/ in the
# checkout; PyPI supplies maturin, pytest, pytest-asyncio and mypy.
#
# Usage: bash scripts/python-sdk.sh [build|test]   (default: test = build + test)
# Needs: python3 with venv, a Rust toolchain, and for the tests the agent
# (BURROW_AGENT_BIN), the burrow binary and the busybox image, as
# scripts/test.sh prepares them.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
mode="${1:-test}"
tools="$root/target/py-tools"
venv="$root/target/py-test-venv"
wheels="$root/target/wheels"

if [ ! -x "$tools/bin/maturin" ]; then
  echo "==> python build tools (maturin) into target/py-tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q --upgrade pip
  "$tools/bin/pip" install -q "maturin>=1.5,<2"
fi

echo "==> burrow.sync is generated from the async API (scripts/gen-python-sync.py)"
python3 scripts/gen-python-sync.py --check

# The tests build with the dev profile: it reuses what `cargo test` already
# compiled (a release build of the whole core would add minutes to CI).
# BURROW_WHEEL_PROFILE=release builds the wheel you would ship.
profile="${BURROW_WHEEL_PROFILE:-dev}"
# The wheel carries the supervisor (bindings/core/build.rs): a release
# build compiles one itself; this one embeds the workspace's, built once.
if [ "$profile" = dev ] && [ -z "${BURROW_EMBED_SUPERVISOR:-}" ]; then
  cargo build -q -p burrow-cli --bin burrow-supervisor
  export BURROW_EMBED_SUPERVISOR="$root/target/debug/burrow-supervisor"
fi
echo "==> building the wheel (maturin, $profile profile)"
rm -rf "$wheels"
(cd sdk-python && "$tools/bin/maturin" build -q --profile "$profile" --out "$wheels")
wheel=$(ls "$wheels"/burrow-*.whl)
echo "$wheel"
[ "$mode" = build ] && exit 0

echo "==> a fresh venv with the wheel installed (target/py-test-venv)"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q "$wheel" pytest pytest-asyncio pytest-xdist mypy

echo "==> mypy --strict on the installed package and the examples"
# From outside the checkout, so mypy checks the installed package.
(cd /tmp && "$venv/bin/python" -m mypy --strict --no-incremental -p burrow)
"$venv/bin/python" -m mypy --strict --no-incremental examples/python

image="${BURROW_TEST_IMAGE:-$root/target/test-images/busybox}"
echo "==> the wheel alone runs a sandbox: a fresh venv, no burrow on PATH, no BURROW_ variables$( [ "$(id -u)" = 0 ] && echo ', as an unprivileged user (rootless)')"
run_as=()
if [ "$(id -u)" = 0 ]; then
  user=$(bash scripts/rootless-user.sh)
  run_as=(runuser -u "$user" --)
fi
alone=$(mktemp -d /tmp/bpy-alone.XXXXXX)
chmod 755 "$alone"
cp "$wheel" sdk-python/checks/self_contained.py "$alone/"
[ ${#run_as[@]} = 0 ] || chown -R "$user" "$alone"
(cd "$alone" && "${run_as[@]}" env -i HOME="$alone" PATH=/usr/local/bin:/usr/bin:/bin bash -c '
  set -e
  python3 -m venv venv
  venv/bin/pip install -q --no-index ./burrow-*.whl
  venv/bin/python self_contained.py "$1"' _ "$image")
"${run_as[@]}" rm -rf "$alone" 2>/dev/null || true
rm -rf "$alone"

export BURROW_BIN="${BURROW_BIN:-$root/target/debug/burrow}"
export BURROW_AGENT_BIN="${BURROW_AGENT_BIN:-$(bash scripts/build-agent.sh)}"

echo "==> the Python examples (quickstart, 8-process convergence)"
home=$(mktemp -d /tmp/bpx.XXXXXX)
BURROW_HOME="$home" "$venv/bin/python" examples/python/quickstart.py "$image"
BURROW_HOME="$home" "$venv/bin/python" examples/python/convergence.py "$image" 8
rm -rf "$home"

echo "==> pytest (sdk-python/tests, against the installed wheel)"
# Run from a directory without the package sources, so `import burrow`
# can only find the installed wheel.
# Two workers (pytest-xdist): every test has a home (and, remotely, a
# server) of its own, and most of a test's time is spent waiting on
# sandboxes, not on the CPU.
cd "$root/sdk-python/tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 .

if [ "$(id -u)" = 0 ]; then
  echo "==> pytest again as an unprivileged user (rootless), the package alone: no burrow on PATH, no BURROW_BIN or BURROW_AGENT_BIN"
  # The lifecycle document's samples ask for limits (memory=1024, ...),
  # which an unprivileged user's host refuses without a delegated cgroup:
  # they run as root above; test_conformance's limits case asks for
  # best-effort limits and runs here.
  # The user's own venv, of the system's python3 (root's may live where
  # the user cannot reach), with the same wheel.
  user=$(bash "$root/scripts/rootless-user.sh")
  uvenv=$(mktemp -d /tmp/bpy-user.XXXXXX)
  cp "$wheel" "$uvenv/"
  chmod 755 "$uvenv" && chown -R "$user" "$uvenv"
  as_user=(runuser -u "$user" -- env -i HOME="$(getent passwd "$user" | cut -d: -f6)" PATH=/usr/bin:/bin)
  "${as_user[@]}" bash -c 'python3 -m venv "$1/venv" &&
    "$1/venv/bin/pip" install -q "$1"/burrow-*.whl pytest pytest-asyncio pytest-xdist' _ "$uvenv"
  "${as_user[@]}" BURROW_TEST_SELF_CONTAINED=1 BURROW_TEST_IMAGE="$image" \
    "$uvenv/venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 --ignore=test_lifecycle_doc.py .
  rm -rf "$uvenv"
fi

echo "==> the conformance list again, against the remote backend (a burrow serve per test)"
BURROW_TEST_REMOTE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 test_conformance.py

echo "==> the conformance list a third time, through a burrow serve whose backend is the Kubernetes test cluster"
# The cluster of scripts/k8s/cluster.sh (scripts/test.sh starts it before
# this step): each test's server keeps its sandboxes as pods in a namespace
# of its own. Cases needing a capability the backend lacks are reported
# skipped (unsupported), as the Rust kit reports them.
if [ -z "${BURROW_TEST_KUBECONFIG:-}" ] || [ -z "${BURROW_K8S_BIN:-}" ]; then
  echo "BURROW_TEST_KUBECONFIG and BURROW_K8S_BIN are not set: start the test cluster first" >&2
  # shellcheck disable=SC2016 # printed as it is to be typed
  echo '  (eval "$(bash scripts/k8s/cluster.sh start)"; export BURROW_TEST_KUBECONFIG=$KUBECONFIG)' >&2
  exit 1
fi
BURROW_TEST_REMOTE=1 BURROW_TEST_REMOTE_BACKEND=kubernetes \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 -rs test_conformance.py
