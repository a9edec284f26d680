#!/usr/bin/env bash
# Builds, once per version, every binary of the single-node Kubernetes used by
# the tests of the Kubernetes backend (see scripts/k8s/cluster.sh), plus the
# pause and busybox OCI image tarballs, under target/k8s/<key>/:
#   bin/    kube-apiserver kube-controller-manager kube-scheduler kubelet
#           kubectl etcd containerd containerd-shim-runc-v2 ctr runsc pause
#   images/ pause.tar busybox.tar   (OCI image layouts for `ctr images import`)
# <key> hashes the pinned versions and this script, so a changed recipe
# rebuilds (older <key> directories not in use by cluster.sh are removed).
# Progress goes to stderr; the LAST line of stdout is the absolute path of
# target/k8s/<key>. Cold on 2 cores: ~16 min (2 min of it `go mod tidy`),
# Go caches ~7 GB; with warm caches ~1 min.
#   usage: scripts/k8s/build.sh
set -euo pipefail
self=$(readlink -f "$0")
cd "$(dirname "$self")/../.."
root=$PWD
export PATH=/usr/local/go/bin:$PATH CGO_ENABLED=0

# Pinned versions (the key below hashes them together with this file).
K8S=v1.34.4
K8S_STAGING=v0.34.4 # k8s.io/<staging module> versions matching $K8S
ETCD=v3.6.16
CONTAINERD=v2.2.9
GVISOR=v0.0.0-20260905035102-160fafc42237
PAUSE_TAG=3.10.1 # containerd's default sandbox image is registry.k8s.io/pause:3.10.1
STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
  cloud-provider cluster-bootstrap code-generator component-base component-helpers
  controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation
  endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy
  kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver"

key=$( { echo "$K8S $K8S_STAGING $ETCD $CONTAINERD $GVISOR $PAUSE_TAG $(go env GOVERSION)"; cat "$self" "$root/scripts/k8s/oci-image.py"; } |
  sha256sum | cut -c1-12)
out=$root/target/k8s/$key
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
src=$root/target/k8s/src
mkdir -p "$out/bin" "$out/images" "$src"
exec 8>"$root/target/k8s/build.lock" # one build at a time
flock 8
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi # built while we waited
say() { echo "==> $*" >&2; }

# mod DIR: writes DIR/go.mod from stdin and runs `go mod tidy`, unless that
# go.mod and DIR/tools.go were already tidied (DIR/.stamp).
mod() {
  local dir=$src/$1 gomod stamp
  gomod=$(cat)
  stamp=$(printf '%s\n' "$gomod" | cat - "$dir/tools.go" | sha256sum)
  if [ -f "$dir/go.sum" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ]; then return; fi
  say "resolving Go modules in target/k8s/src/$1 (cold: 1-3 min)"
  printf '%s\n' "$gomod" > "$dir/go.mod"
  (cd "$dir" && go mod tidy >&2)
  printf '%s\n' "$stamp" > "$dir/.stamp"
}

# gobuild NAME DIR EST ARGS...: `go build` ARGS in DIR to bin/NAME, unless done.
gobuild() {
  local name=$1 dir=$2 est=$3 t0
  shift 3
  [ -x "$out/bin/$name" ] && return
  say "building $name (cold: about $est)"
  t0=$(date +%s)
  (cd "$src/$dir" && go build -trimpath -o "$out/bin/$name.tmp" "$@" >&2)
  mv "$out/bin/$name.tmp" "$out/bin/$name"
  say "built $name in $(($(date +%s) - t0)) s"
}

# 1. Go modules: one per upstream project, each with a tools.go naming the
# packages to build, so that `go mod tidy` resolves exactly what they need.
# tools DIR PKG...: writes target/k8s/src/DIR/tools.go importing PKG...
tools() {
  local dir=$src/$1
  shift
  mkdir -p "$dir"
  { printf '//go:build tools\n\n// Package tools names the commands scripts/k8s/build.sh builds.\npackage tools\n\nimport (\n'
    printf '\t_ "%s"\n' "$@"
    printf ')\n'; } >"$dir/tools.go"
}
tools kubernetes k8s.io/kubernetes/cmd/{kube-apiserver,kube-controller-manager,kube-scheduler,kubectl,kubelet}
tools etcd go.etcd.io/etcd/server/v3
tools containerd github.com/containerd/containerd/v2/cmd/{containerd,containerd-shim-runc-v2,ctr}
tools gvisor gvisor.dev/gvisor/runsc
{
  printf 'module burrow.test/k8s\n\ngo 1.24.0\n\n'
  printf 'godebug default=go1.24\n\n' # as in k8s.io/kubernetes' own go.mod
  printf 'require k8s.io/kubernetes %s\n\nreplace (\n' $K8S
  for m in $STAGING; do printf '\tk8s.io/%s => k8s.io/%s %s\n' "$m" "$m" $K8S_STAGING; done
  printf ')\n'
} | mod kubernetes
printf 'module burrow.test/etcd\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' $ETCD | mod etcd
printf 'module burrow.test/containerd\n\ngo 1.25.0\n\nrequire github.com/containerd/containerd/v2 %s\n' $CONTAINERD | mod containerd
printf 'module burrow.test/gvisor\n\ngo 1.25.0\n\nrequire gvisor.dev/gvisor %s\n' $GVISOR | mod gvisor

# 2. Binaries, largest first (the others reuse much of its build cache).
kflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S"
gobuild kube-apiserver kubernetes "6-8 min" -ldflags "$kflags" k8s.io/kubernetes/cmd/kube-apiserver
gobuild kubelet kubernetes "1.5 min" -ldflags "$kflags" k8s.io/kubernetes/cmd/kubelet
gobuild kube-controller-manager kubernetes "1 min" -ldflags "$kflags" k8s.io/kubernetes/cmd/kube-controller-manager
gobuild kube-scheduler kubernetes "15 s" -ldflags "$kflags" k8s.io/kubernetes/cmd/kube-scheduler
gobuild kubectl kubernetes "1 min" -ldflags "$kflags" k8s.io/kubernetes/cmd/kubectl
gobuild etcd etcd "1 min" -ldflags "-s -w" go.etcd.io/etcd/server/v3
cflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD"
gobuild containerd containerd "1.5 min" -ldflags "$cflags" github.com/containerd/containerd/v2/cmd/containerd
for c in containerd-shim-runc-v2 ctr; do
  gobuild $c containerd "10 s" -ldflags "$cflags" github.com/containerd/containerd/v2/cmd/$c
done
gobuild runsc gvisor "1.5-3.5 min" -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$GVISOR" gvisor.dev/gvisor/runsc

# 3. The pause binary, from the pause.c shipped in the k8s.io/kubernetes module.
if [ ! -x "$out/bin/pause" ]; then
  say "building pause (gcc -static)"
  pausec=$(cd "$src/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_TAG-burrow" -o "$out/bin/pause.tmp" "$pausec"
  strip "$out/bin/pause.tmp"
  mv "$out/bin/pause.tmp" "$out/bin/pause"
fi

# 4. Every binary runs and reports the pinned version.
check() { # check NAME WANT ARGS...
  local name=$1 want=$2 v
  shift 2
  v=$("$out/bin/$name" "$@" 2>&1 | head -3) || true
  grep -qF -- "$want" <<<"$v" || { echo "$name: expected '$want' in: $v" >&2; exit 1; }
  say "ok $name: $(grep -F -- "$want" <<<"$v" | head -1 | xargs)"
}
for k in kube-apiserver kube-controller-manager kube-scheduler kubelet; do check $k "Kubernetes $K8S" --version; done
check kubectl "$K8S" version --client
check etcd "etcd Version: ${ETCD#v}" --version
check containerd "$CONTAINERD" --version
check containerd-shim-runc-v2 "$CONTAINERD" -v
check ctr "$CONTAINERD" --version
check runsc "runsc version" --version
check pause "v$PAUSE_TAG" -v

# 5. OCI image tarballs: oci-layout + index.json + blobs, one uncompressed layer.
busybox=$root/target/test-images/busybox
[ -f "$busybox/.complete" ] || {
  say "building the busybox rootfs"
  bash scripts/make-demo-rootfs.sh "$busybox" >&2 && touch "$busybox/.complete"
}
pauseroot=$(mktemp -d)
trap 'rm -rf "$pauseroot"' EXIT
cp "$out/bin/pause" "$pauseroot/pause"
ociimage() { # ociimage ROOTFS REF TAR CONFIG-JSON
  python3 "$root/scripts/k8s/oci-image.py" "$@"
}
say "writing images/pause.tar and images/busybox.tar"
ociimage "$pauseroot" "registry.k8s.io/pause:$PAUSE_TAG" "$out/images/pause.tar" \
  '{"Entrypoint":["/pause"],"User":"65535:65535","WorkingDir":"/"}'
ociimage "$busybox" "burrow.test/busybox:1" "$out/images/busybox.tar" \
  '{"Cmd":["/bin/sh"],"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"WorkingDir":"/"}'
echo "$PAUSE_TAG" > "$out/images/pause.tag"

touch "$out/.complete"
# Older builds, unless a cluster started by cluster.sh still runs from one.
inuse=$(dirname "$(cat "$root/target/k8s/run/bindir" 2>/dev/null || echo /none/bin)")
for d in "$root"/target/k8s/[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]; do
  [ -d "$d" ] && [ "$d" != "$out" ] && [ "$d" != "$inuse" ] && { say "removing old build $d"; rm -rf "$d"; }
done
say "done: $out"
echo "$out"
