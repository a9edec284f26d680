#!/usr/bin/env bash
# Fuzzes the parsers that read untrusted input (protocol frames, names and
# configurations, durations and image references, OCI manifests and
# layouts, the layer unpacker): builds every target of fuzz/ once with
# cargo-fuzz on the nightly toolchain, runs each for a bounded time from
# its committed seeds (fuzz/seeds/<target>), prints the executions of each,
# and fails if any target crashed, naming the input that did it.
#
#   BURROW_FUZZ_SECONDS    seconds per target (default 25)
#   BURROW_FUZZ_TARGETS    targets to run (default: all of them)
#   BURROW_FUZZ_SANITIZER  cargo-fuzz sanitizer (default none: the targets
#                          look for panics and escapes, not memory errors,
#                          and run several times faster without ASan)
#
# Installs the dated nightly of fuzz/rust-toolchain.toml (minimal profile)
# and cargo-fuzz (pinned) when they are missing. New inputs go to fuzz/work/<target>, crashes to
# fuzz/artifacts/<target> (both ignored by git). Longer runs by hand:
# fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO_FUZZ_VERSION=0.13.2
seconds=${BURROW_FUZZ_SECONDS:-25}
targets=${BURROW_FUZZ_TARGETS:-protocol config text net oci_manifest unpack}
sanitizer=${BURROW_FUZZ_SANITIZER:-none}
start=$(date +%s)
step() { echo; echo "==> $* ($(( $(date +%s) - start ))s)"; }

nightly=$(sed -n 's/^channel = "\(.*\)"/\1/p' fuzz/rust-toolchain.toml)
step "$nightly toolchain and cargo-fuzz $CARGO_FUZZ_VERSION"
if ! rustup run "$nightly" rustc --version >/dev/null 2>&1; then
  rustup toolchain install "$nightly" --profile minimal
fi
if [ "$(cargo fuzz --version 2>/dev/null || true)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
# Through sccache where it is installed (scripts/install-deps.sh installs
# it): a second run on the same machine takes the dependencies from it.
if [ -z "${RUSTC_WRAPPER:-}" ] && command -v sccache >/dev/null; then
  export RUSTC_WRAPPER=sccache CARGO_INCREMENTAL=0
fi
# Not the workspace's clippy wrapper (scripts/test.sh exports it): the
# fuzz crate is linted by nobody and must not be linted as a member.
unset RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS

step "build of every target (one build)"
# 16 codegen units instead of cargo-fuzz's 1: on 2 cores the build is
# what costs, not the few percent of fuzzing speed.
cargo "+$nightly" fuzz build --sanitizer "$sanitizer" --codegen-units 16
bin=fuzz/target/x86_64-unknown-linux-gnu/release

# The unpack targets' scratch directories, on tmpfs when there is one.
scratch=$(mktemp -d -p "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")" burrow-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

# One target: its log in the scratch directory, its outcome in
# $scratch/<target>.result (a summary line; `CRASH` when it crashed).
fuzz_one() {
  local t=$1 work=fuzz/work/$1 artifacts=fuzz/artifacts/$1 log=$scratch/$1.log rc=0
  mkdir -p "$work" "$artifacts" "$scratch/$t"
  BURROW_FUZZ_TMPDIR=$scratch/$t TMPDIR=$scratch/$t \
    "$bin/$t" "$work" "fuzz/seeds/$t" \
      -max_total_time="$seconds" -timeout=20 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" >"$log" 2>&1 || rc=$?
  local execs artifact
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ "$rc" -eq 0 ]; then
    echo "$t: ${execs:-?} executions" >"$scratch/$t.result"
  else
    artifact=$(sed -n 's/.*Test unit written to //p' "$log" | tail -n 1)
    echo "$t: CRASH after ${execs:-?} executions (exit $rc); input: ${artifact:-see its log}; reproduce: $bin/$t ${artifact:-<input>}" >"$scratch/$t.result"
  fi
}

# The targets one per core at a time (each is single-threaded).
jobs=$(nproc 2>/dev/null || echo 1)
step "fuzz ${targets// /, } for ${seconds}s each, $jobs at a time"
running=0
for t in $targets; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait

failed=()
summary=()
for t in $targets; do
  line=$(cat "$scratch/$t.result" 2>/dev/null || echo "$t: CRASH (no result)")
  summary+=("$line")
  case "$line" in
    *CRASH*) tail -n 60 "$scratch/$t.log" 2>/dev/null || true; echo "$line" >&2; failed+=("$t") ;;
  esac
done

step "summary"
printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzzing found crashes in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzzing: no crash in ${seconds}s per target"
