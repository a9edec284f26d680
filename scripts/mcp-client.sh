#!/usr/bin/env bash
# The official Python MCP SDK (PyPI `mcp`, its client) in its own
# virtualenv, once per version under target/mcp-client/VERSION; prints the
# path of its python on the last line. core/cli/tests/mcp_server.rs drives
# `burrow mcp` with it (tests/mcp/client.py).
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.3.0
venv="target/mcp-client/$version"
if [ ! -f "$venv/.complete" ]; then
  echo "==> mcp $version into $venv" >&2
  rm -rf "$venv"
  # The system's python where there is one: a venv's interpreter is a
  # link to it, and the rootless test runs (an unprivileged user) must
  # reach it (not one under root's home, as pyenv's).
  py=python3
  [ -x /usr/bin/python3 ] && py=/usr/bin/python3
  "$py" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "mcp==$version" >&2
  touch "$venv/.complete"
fi
echo "$PWD/$venv/bin/python"
