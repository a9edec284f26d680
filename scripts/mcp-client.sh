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
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "mcp==$version" >&2
  touch "$venv/.complete"
fi
echo "$PWD/$venv/bin/python"
