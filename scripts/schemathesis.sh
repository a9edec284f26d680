#!/usr/bin/env bash
# schemathesis (the OpenAPI fuzzer, from PyPI) in its own virtualenv, once
# per version under target/schemathesis/VERSION; prints the path of its
# command on the last line. core/cli/tests/schemathesis.rs runs it against a
# real `burrow serve` (with the hooks of tests/schemathesis/hooks.py).
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.32.5
venv="target/schemathesis/$version"
# A virtualenv's scripts name its interpreter by path, so it is made in
# place; `.complete` marks one whose install finished.
if [ ! -f "$venv/.complete" ]; then
  echo "==> schemathesis $version into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$version" >&2
  touch "$venv/.complete"
fi
echo "$PWD/$venv/bin/schemathesis"
