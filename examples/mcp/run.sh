#!/usr/bin/env bash
# The MCP example end to end on this machine (as root, like every local
# sandbox): builds the image, starts `burrow serve` on a home of its own,
# defines the MCP server's sandbox and registers it as a gateway target,
# then calls it with the MCP client through the gateway: cold (the sandbox
# starts on the first call), warm, a long call that streams progress, idle
# until the reaper stops it, and woken again by the next call.
#   usage: examples/mcp/run.sh        (BURROW=path/to/burrow to pick the binary)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
burrow=${BURROW:-$(command -v burrow || echo "$root/target/debug/burrow")}
[ -x "$burrow" ] || { echo "no burrow binary: cargo build -p burrow-cli, or set BURROW" >&2; exit 1; }
say() { printf '\n==> %s\n' "$*"; }

say "building the image (Node.js and the MCP SDK on busybox; cached under target/mcp)"
image=$(bash "$here/build-image.sh" | tail -n 1)/rootfs

home=$(mktemp -d /tmp/burrow-mcp.XXXXXX)
export BURROW_HOME=$home
# Idle after 5 s, checked every second: short, to watch it happen.
export BURROW_SERVE_IDLE_TIMEOUT=5s BURROW_SERVE_SWEEP_INTERVAL=1s BURROW_SERVE_LISTEN=127.0.0.1:0
token=$("$burrow" serve token create example --role operator)
"$burrow" serve >"$home/serve.out" 2>"$home/serve.log" &
serve=$!
cleanup() {
  [ -n "${id:-}" ] && curl -fsS -X POST -H "authorization: Bearer $token" "$url/v1/sandboxes/$id/destroy" >/dev/null 2>&1 || true
  kill "$serve" 2>/dev/null || true
  wait "$serve" 2>/dev/null || true
  rm -rf "$home"
}
trap cleanup EXIT
for _ in $(seq 100); do grep -q '^listening on' "$home/serve.out" 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$home/serve.out" | head -n 1)
[ -n "$url" ] || { cat "$home/serve.log" >&2; exit 1; }
api() { curl -fsS -H "authorization: Bearer $token" -H 'content-type: application/json' "$@"; }
say "burrow serve on $url"

say "defining the MCP server's sandbox (not started) and registering it as a gateway target"
id=$(api -X POST "$url/v1/sandboxes" -d "{\"name\":\"mcp\",\"config\":{\"image\":\"$image\"},\"detached\":true}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
api -X PUT "$url/v1/gateway/targets/$id" -d '{"port":8000,"command":["/bin/sh","-c","/usr/bin/node /app/server.mjs >/tmp/mcp-server.log 2>&1 &"]}' >/dev/null
endpoint=$url/gw/$id/mcp
echo "MCP endpoint: $endpoint"
client() { BURROW_TOKEN=$token node "$image/app/client.mjs" "$endpoint" "$@"; }
status() { "$burrow" serve status; }
status

say "cold: the first call starts the sandbox"
client tools
status
say "warm"
client call add '{"a":2,"b":3}'
say "a long call, streaming progress (its lease keeps the sandbox up)"
client call countdown '{"seconds":3}'
say "idle: the reaper stops the sandbox after 5 s (its target and config stay)"
for _ in $(seq 60); do status | grep -q dormant && break; sleep 0.5; done
status
say "the next call wakes it: a new process"
client call whoami
status
