#!/usr/bin/env bash
# Builds the sandbox image of the MCP example: a busybox root filesystem
# with this machine's Node.js (the binary and the shared libraries it
# loads), and /app holding server.mjs, client.mjs and their node_modules
# (`npm ci` of package-lock.json).
#
#   usage: examples/mcp/build-image.sh [OUT]
#
# OUT (default target/mcp/<key>, the key a hash of everything that goes
# in) receives
#   rootfs/   the image as a directory: `--image <OUT>/rootfs` for the local backend
#   mcp.tar   the same as an OCI image layout, named burrow.example/mcp:<key>
#             (`ctr -n k8s.io images import` it for the Kubernetes backend)
#   ref       that name
# An OUT that is complete is reused. The last line printed is OUT.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
say() { echo "==> $*" >&2; }
node=$(readlink -f "$(command -v node)") || { echo "node not found: install Node.js 18 or newer" >&2; exit 1; }
key=$( { "$node" --version; sha256sum "$node" | cut -c1-64; cat "$here/package.json" "$here/package-lock.json" \
  "$here/server.mjs" "$here/client.mjs" "$0" "$root/scripts/make-demo-rootfs.sh" "$root/scripts/k8s/oci-image.py"; } |
  sha256sum | cut -c1-12)
out=${1:-$root/target/mcp/$key}
if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi
rm -rf "$out"
mkdir -p "$out"
rootfs=$out/rootfs
say "building the busybox base"
bash "$root/scripts/make-demo-rootfs.sh" "$rootfs" >&2
say "adding $node ($("$node" --version)) and the libraries it loads"
cp "$node" "$rootfs/usr/bin/node"
# Each library at the path the dynamic loader finds it on this machine.
ldd "$node" | grep -o '/[^ ]*' | while read -r lib; do
  real=$(readlink -f "$lib")
  dest=$rootfs${lib#/usr}
  mkdir -p "$(dirname "$dest")"
  cp "$real" "$dest"
done
say "npm ci into /app"
mkdir -p "$rootfs/app"
cp "$here/package.json" "$here/package-lock.json" "$here/server.mjs" "$here/client.mjs" "$rootfs/app/"
(cd "$rootfs/app" && npm ci --omit=dev --no-audit --no-fund --loglevel=error >&2)
# The image must run on its own: check it does, in a chroot.
if [ "$(id -u)" = 0 ]; then
  chroot "$rootfs" /bin/env -i PATH=/usr/bin:/bin /bin/sh -c 'cd /app && node --input-type=module -e "await import(\"@modelcontextprotocol/sdk/server/streamableHttp.js\")"' \
    || { echo "the image's node cannot load the MCP server" >&2; exit 1; }
fi
ref="burrow.example/mcp:$key"
say "writing the OCI image $ref"
python3 "$root/scripts/k8s/oci-image.py" "$rootfs" "$ref" "$out/mcp.tar" \
  '{"Cmd":["node","/app/server.mjs"],"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","HOST=127.0.0.1","PORT=8000"],"WorkingDir":"/app"}'
echo "$ref" > "$out/ref"
touch "$rootfs/.complete" "$out/.complete"
say "done: $out ($(du -sh "$rootfs" | cut -f1))"
echo "$out"
