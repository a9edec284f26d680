#!/usr/bin/env bash
# `cargo test --workspace --no-fail-fast [ARGS]`, with the test binaries run
# several at a time (BURROW_TEST_JOBS, default 3) instead of one after the
# other: most of a test's time is spent waiting on sandboxes, servers and
# timeouts, not on the CPU, so on 2 cores three binaries at a time finish
# in about half the time. Every test has a home (and servers, namespaces)
# of its own, so binaries do not share state.
#
# Binaries that change what every other one relies on run alone, after
# the others: core/kube/tests/crd.rs deletes the cluster's Sandbox
# resource definition (and with it every record of the other kube tests).
#
# Each binary runs as `cargo test` runs it: from its package's directory,
# with CARGO and CARGO_MANIFEST_DIR set; its output goes to
# target/test-logs/<binary>.log and is printed when it fails. The longest
# binaries of the previous run (target/test-logs/durations) start first.
# Doc tests run afterwards unless ARGS select test targets (--test ...).
# With BURROW_TEST_USER set (root only), each binary runs as that
# unprivileged user (scripts/rootless-user.sh), with its own HOME and no
# XDG directories of root's: the rootless runs.
# A binary still running after BURROW_TEST_BINARY_TIMEOUT seconds (default
# 1200) is killed and fails: a hung test ends the run with its log.
# Exits non-zero if any binary (or the doc tests) failed.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${BURROW_TEST_JOBS:-3}"
logs=target/test-logs
mkdir -p "$logs"
durations="$logs/durations"
touch "$durations"

# One line per test binary: name, package directory, executable.
list=$(cargo test -q --workspace --no-run --message-format=json "$@" | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("profile", {}).get("test"):
        continue
    if not m.get("executable"):
        continue
    exe = m["executable"]
    print(os.path.basename(exe), os.path.dirname(m["manifest_path"]), exe, sep="\t")
')
# Longest first (by the last run), then the rest in cargo's order.
ordered=$(python3 - "$durations" "$list" <<'EOF'
import sys
known = {}
for line in open(sys.argv[1]):
    name, _, secs = line.strip().partition(" ")
    if secs:
        known[name.rsplit("-", 1)[0]] = float(secs)
rows = [r for r in sys.argv[2].splitlines() if r]
rows.sort(key=lambda r: -known.get(r.split("\t")[0].rsplit("-", 1)[0], 0.0))
print("\n".join(rows))
EOF
)
cargo_bin=$(command -v cargo)
export cargo_bin logs
# shellcheck disable=SC2317 # run by xargs, through bash -c
run_one() {
  local name=$1 dir=$2 exe=$3 start status ms
  start=$(date +%s%N)
  status=0
  local as=()
  if [ -n "${BURROW_TEST_USER:-}" ]; then
    as=(runuser -u "$BURROW_TEST_USER" -- env -u XDG_RUNTIME_DIR -u XDG_DATA_HOME -u XDG_CACHE_HOME
      HOME="$(getent passwd "$BURROW_TEST_USER" | cut -d: -f6)" TMPDIR=/tmp)
  fi
  # A hung test fails its binary after the limit (its log names the tests
  # still running), instead of holding the whole run until CI's own limit.
  local limit=${BURROW_TEST_BINARY_TIMEOUT:-1200}
  (cd "$dir" && CARGO="$cargo_bin" CARGO_MANIFEST_DIR="$dir" \
    timeout --kill-after=30 "$limit" "${as[@]}" "$exe" -q) \
    >"$logs/$name.log" 2>&1 || status=$?
  if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "==> $name was still running after ${limit}s and was killed (a hung test?)" >>"$logs/$name.log"
  fi
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '%s %s %d.%d\n' "$status" "$name" $((ms / 1000)) $((ms % 1000 / 100))
}
export -f run_one
alone='^crd-'
together=$(printf '%s\n' "$ordered" | grep -Ev "$alone" || true)
by_itself=$(printf '%s\n' "$ordered" | grep -E "$alone" || true)
results=$(printf '%s\n' "$together" | tr '\t' '\n' | xargs -r -d '\n' -n 3 -P "$jobs" bash -c 'run_one "$@"' _)
if [ -n "$by_itself" ]; then
  results+=$'\n'$(printf '%s\n' "$by_itself" | tr '\t' '\n' | xargs -r -d '\n' -n 3 -P 1 bash -c 'run_one "$@"' _)
fi
failed=0
while read -r status name secs; do
  [ -n "$name" ] || continue
  if [ "$status" != 0 ]; then
    failed=1
    echo "---- $name FAILED (exit $status, ${secs}s); its output:"
    cat "$logs/$name.log"
  fi
done <<<"$results"
# Summary: the slowest binaries, and the durations for the next run.
printf '%s\n' "$results" | awk '{print $2, $3}' >"$durations"
echo "test binaries: $(printf '%s\n' "$results" | grep -c .) run, $jobs at a time; slowest:"
sort -k3 -rn <<<"$results" | head -n 5 | awk '{printf "  %6.1fs %s%s\n", $3, $2, ($1 == 0 ? "" : " (FAILED)")}'
selects_targets=0
for a in "$@"; do
  case $a in --test|--lib|--bins|--bin|--tests|--examples|--benches) selects_targets=1 ;; esac
done
if [ "$selects_targets" = 0 ]; then
  cargo test -q --workspace --doc "$@" || failed=1
fi
exit "$failed"
