#!/usr/bin/env bash
# Builds the Go SDK (sdk-go: the module github.com/burrow-dev/burrow/sdk-go,
# cgo over libburrow, the C ABI of the binding core), publishes it as a
# module version in a file-based module proxy (target/go-sdk/proxy), and
# tests it from there, as a Go user gets it: `go get` into a fresh module,
# then `go vet`, staticcheck and `go test -race` of the downloaded module,
# never of the source tree. The static library comes from cargo
# (target/debug/libburrow.a), linked by go through CGO_LDFLAGS.
#
# Needs: go, a Rust toolchain, and for the tests the agent
# (BURROW_AGENT_BIN), the burrow binary and the busybox image, as
# scripts/test.sh prepares them.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
out="$root/target/go-sdk"
module=github.com/burrow-dev/burrow/sdk-go
# A version per content: go caches what a module version holds (its module
# index, in GOCACHE) by version, so one version must never change content.
version="v0.1.0-dev.$(cd sdk-go && find . -type f | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)"
staticcheck_version=v0.8.2

echo "==> libburrow.a (bindings/c, dev profile: reuses the tests' build; it carries the supervisor, built once)"
cargo build -q -p burrow-cli --bin burrow-supervisor
BURROW_EMBED_SUPERVISOR="${BURROW_EMBED_SUPERVISOR:-$root/target/debug/burrow-supervisor}" \
  cargo build -q --workspace --lib
rm -rf "$out" && mkdir -p "$out/lib" "$out/app"
cp target/debug/libburrow.a "$out/lib/"
cmp bindings/c/include/burrow.h sdk-go/include/burrow.h || {
  echo "sdk-go/include/burrow.h is not bindings/c/include/burrow.h: copy it" >&2
  exit 1
}

echo "==> staticcheck $staticcheck_version"
gobin="$(go env GOPATH)/bin"
if [ "$("$gobin/staticcheck" -version 2>/dev/null | awk '{print $2}')" != "${staticcheck_version#v}" ]; then
  go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"
fi

echo "==> $module@$version in a file-based module proxy"
python3 - "$root/sdk-go" "$out/proxy" "$module" "$version" <<'PY'
import json, os, sys, zipfile
src, proxy, module, version = sys.argv[1:]
d = os.path.join(proxy, module, "@v")
os.makedirs(d, exist_ok=True)
with open(os.path.join(d, "list"), "w") as f:
    f.write(version + "\n")
with open(os.path.join(d, version + ".info"), "w") as f:
    json.dump({"Version": version, "Time": "2026-12-01T00:00:00Z"}, f)
with open(os.path.join(src, "go.mod")) as f, open(os.path.join(d, version + ".mod"), "w") as g:
    g.write(f.read())
with zipfile.ZipFile(os.path.join(d, version + ".zip"), "w", zipfile.ZIP_DEFLATED) as z:
    for base, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(base, name)
            z.write(path, f"{module}@{version}/" + os.path.relpath(path, src))
PY

export GOPROXY="file://$out/proxy" GONOSUMDB="$module" GONOSUMCHECK=1 GOFLAGS=-mod=mod GOSUMDB=off
export GOMODCACHE="$out/modcache"
export CGO_ENABLED=1
export CGO_LDFLAGS="-L$out/lib"
cd "$out/app"
cat >go.mod <<MOD
module burrow-sdk-tests

go 1.24

require $module $version
MOD
go mod download "$module"

echo "==> go vet and staticcheck of the downloaded module"
go vet "$module/..."
"$gobin/staticcheck" "$module/..."

echo "==> the examples (examples/go) build against it"
# The example programs, without their own go.mod (a user's copy would
# require the module the same way this one does).
mkdir -p examples && cp -r "$root"/examples/go/*/ examples/
go build -o /dev/null ./examples/...

image="${BURROW_TEST_IMAGE:-$root/target/test-images/busybox}"
echo "==> a program built on the module alone runs a sandbox: no burrow on PATH, no BURROW_ variables$( [ "$(id -u)" = 0 ] && echo ', as an unprivileged user (rootless)')"
mkdir -p alone
cat >alone/main.go <<'GO'
// A program of a user's: the module, and nothing else of burrow's.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

func main() {
	if p, err := exec.LookPath("burrow"); err == nil {
		log.Fatalf("a burrow binary is on PATH: %s", p)
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "BURROW_") {
			log.Fatalf("a BURROW_ variable is set: %s", kv)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := burrow.CreateSandbox(ctx, "self-contained", burrow.WithImage(os.Args[1]))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = sb.Destroy(ctx) }()
	out, err := sb.Exec(ctx, []string{"sh", "-c", "echo hello from $(id -u)"})
	if err != nil {
		log.Fatal(err)
	}
	if string(out.Stdout) != "hello from 0\n" {
		log.Fatalf("unexpected output %q", out.Stdout)
	}
	fmt.Printf("ok: %s (as uid %d)\n", strings.TrimSpace(string(out.Stdout)), os.Getuid())
}
GO
go build -o alone/self-contained ./alone
run_as=()
alone=$(mktemp -d /tmp/bgo-alone.XXXXXX)
chmod 755 "$alone"
cp alone/self-contained "$alone/"
if [ "$(id -u)" = 0 ]; then
  user=$(bash "$root/scripts/rootless-user.sh")
  run_as=(runuser -u "$user" --)
  chown -R "$user" "$alone"
fi
(cd "$alone" && "${run_as[@]}" env -i HOME="$alone" PATH=/usr/bin:/bin ./self-contained "$image")
rm -rf "$alone"

echo "==> go test -race of the downloaded module"
export BURROW_BIN="${BURROW_BIN:-$root/target/debug/burrow}"
export BURROW_AGENT_BIN="${BURROW_AGENT_BIN:-$(bash "$root/scripts/build-agent.sh")}"
export BURROW_TEST_IMAGE="${BURROW_TEST_IMAGE:-$root/target/test-images/busybox}"
export BURROW_CONFORMANCE_CASES="$root/tests/conformance/cases.json"
unset BURROW_URL
go test -race -count=1 -timeout 30m "$module/..."

if [ "$(id -u)" = 0 ]; then
  echo "==> the conformance list again as an unprivileged user (rootless), the module alone: no burrow on PATH, no BURROW_BIN or BURROW_AGENT_BIN"
  # The other tests ask for limits (WithMemory, ...), which an
  # unprivileged user's host refuses without a delegated cgroup.
  user=$(bash "$root/scripts/rootless-user.sh")
  tdir=$(mktemp -d /tmp/bgo-test.XXXXXX)
  chmod 755 "$tdir"
  go test -c -o "$tdir/burrow.test" "$module"
  (cd "$tdir" && runuser -u "$user" -- env -u BURROW_BIN -u BURROW_AGENT_BIN -u XDG_RUNTIME_DIR \
    HOME="$(getent passwd "$user" | cut -d: -f6)" PATH=/usr/bin:/bin \
    ./burrow.test -test.count=1 -test.timeout 20m -test.run 'TestConformance|TestBackendCapabilities')
  rm -rf "$tdir"
fi

echo "==> the calls again with cgocheck2 (every pointer passed to C checked)"
GOEXPERIMENT=cgocheck2 go test -count=1 -timeout 10m \
  -run 'TestLifecycle|TestTypedErrors|TestCancellation|TestObjectsAreFreed|TestManyGoroutines|Example' "$module"
