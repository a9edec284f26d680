package burrow_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// A snapshot of a running sandbox is an image of what it changed, kept
// while a sandbox uses it, with typed errors for taken and bad names.
func TestSnapshots(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	src := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-snap-src", burrow.WithImage(testImage)))
	must[*burrow.ExecResult](t)(src.Exec(ctx, []string{"sh", "-c", "echo from-go > /kept && rm /bin/false"}))
	snap := must[burrow.SnapshotInfo](t)(src.Snapshot(ctx, "go-base"))
	if snap.Name != "go-base" || snap.Kind != burrow.SnapshotFilesystem || snap.Image != "snapshot:go-base" ||
		!strings.HasPrefix(snap.Digest, "sha256:") || snap.Size == 0 || snap.SourceID != src.ID() ||
		snap.SourceName != "go-snap-src" || snap.CreatedAt.IsZero() {
		t.Fatalf("snapshot %+v", snap)
	}
	if _, err := src.Snapshot(ctx, "go-base"); !errors.Is(err, burrow.ErrAlreadyExists) {
		t.Fatalf("a taken name: %v", err)
	}
	if _, err := src.Snapshot(ctx, "no/slash/x"); !errors.Is(err, burrow.ErrInvalidArgument) {
		t.Fatalf("a bad name: %v", err)
	}

	copy := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-snap-copy", burrow.WithImage(snap.Image)))
	out := must[*burrow.ExecResult](t)(copy.Exec(ctx, []string{"sh", "-c", "cat /kept; test -e /bin/false || echo gone"}))
	if string(out.Stdout) != "from-go\ngone\n" {
		t.Fatalf("the copy: %q", out.Stdout)
	}
	all := must[[]burrow.SnapshotInfo](t)(burrow.Snapshots(ctx))
	if len(all) != 1 || all[0].Digest != snap.Digest {
		t.Fatalf("listed %+v", all)
	}
	err := burrow.RemoveSnapshot(ctx, "go-base")
	var e *burrow.Error
	if !errors.Is(err, burrow.ErrSnapshotInUse) || !errors.As(err, &e) ||
		!reflect.DeepEqual(e.Sandboxes, []string{"go-snap-copy"}) {
		t.Fatalf("removing a snapshot in use: %v", err)
	}
	if err := copy.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := src.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := burrow.RemoveSnapshot(ctx, "go-base"); err != nil {
		t.Fatal(err)
	}
	if _, err := burrow.GetSnapshot(ctx, "go-base"); !errors.Is(err, burrow.ErrNotFound) {
		t.Fatalf("a removed snapshot: %v", err)
	}
}
