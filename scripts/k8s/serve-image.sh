#!/usr/bin/env bash
# Writes the container image of `burrow serve` (what deploy/helm/burrow
# runs) as an OCI image layout tar: the burrow binary, the shared libraries
# it loads (as this machine has them), CA certificates, and a writable
# /tmp and home. No base image is pulled.
#   usage: scripts/k8s/serve-image.sh [BURROW-BIN] [OUT-TAR]
#   (default: target/debug/burrow, target/k8s/burrow.tar); prints the
#   image's name, burrow.dev/burrow:<workspace version>.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/target/debug/burrow}
out=${2:-$root/target/k8s/burrow.tar}
[ -x "$bin" ] || { echo "no burrow binary at $bin: cargo build -p burrow-cli" >&2; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
ref="burrow.dev/burrow:$version"
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$rootfs"/{usr/bin,etc/ssl/certs,tmp,var/lib/burrow,root}
chmod 1777 "$rootfs/tmp"
cp "$bin" "$rootfs/usr/bin/burrow"
ldd "$bin" | grep -o '/[^ ]*' | while read -r lib; do
  dest=$rootfs${lib#/usr}
  mkdir -p "$(dirname "$dest")"
  cp "$(readlink -f "$lib")" "$dest"
done
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/usr/bin/burrow\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$rootfs/etc/group"
mkdir -p "$(dirname "$out")"
python3 "$root/scripts/k8s/oci-image.py" "$rootfs" "$ref" "$out" \
  '{"Entrypoint":["/usr/bin/burrow"],"Cmd":["serve"],"Env":["PATH=/usr/bin","BURROW_HOME=/var/lib/burrow"],"WorkingDir":"/var/lib/burrow"}'
echo "$ref"
