package burrow

import (
	"context"
	"encoding/json"
	"time"
)

// SnapshotKind is what a snapshot holds.
type SnapshotKind string

const (
	// SnapshotFilesystem is the sandbox's files: its writable layer over
	// its image, as an OCI image (the default).
	SnapshotFilesystem SnapshotKind = "filesystem"
	// SnapshotFull is a running vm sandbox whole: files, memory and
	// processes.
	SnapshotFull SnapshotKind = "full"
)

// SnapshotInfo is a stored snapshot. Create sandboxes from it with
// WithImage(info.Image) ("snapshot:NAME").
type SnapshotInfo struct {
	Name string
	Kind SnapshotKind
	// Image is the image reference that creates sandboxes from it.
	Image string
	// Digest is the content digest of its OCI image manifest.
	Digest string
	// Size is the bytes it adds to the store (the base image's layers
	// are shared).
	Size uint64
	// SourceID and SourceName are the sandbox it was taken from (which
	// may be gone since).
	SourceID, SourceName string
	// BaseImage is that sandbox's image.
	BaseImage string
	Driver    Driver
	CreatedAt time.Time
}

type wireSnapshot struct {
	Name        string       `json:"name"`
	Kind        SnapshotKind `json:"kind"`
	Image       string       `json:"image"`
	Digest      string       `json:"digest"`
	Size        uint64       `json:"size"`
	SourceID    string       `json:"source_id"`
	SourceName  string       `json:"source_name"`
	BaseImage   string       `json:"base_image"`
	Driver      Driver       `json:"driver"`
	CreatedAtMs int64        `json:"created_at_ms"`
}

func (w wireSnapshot) info() SnapshotInfo {
	return SnapshotInfo{
		Name: w.Name, Kind: w.Kind, Image: w.Image, Digest: w.Digest, Size: w.Size,
		SourceID: w.SourceID, SourceName: w.SourceName, BaseImage: w.BaseImage,
		Driver: w.Driver, CreatedAt: time.UnixMilli(w.CreatedAtMs),
	}
}

// SnapshotOption changes how Snapshot saves a sandbox.
type SnapshotOption func(op)

// WithSnapshotKind saves what kind says (SnapshotFilesystem by default).
func WithSnapshotKind(kind SnapshotKind) SnapshotOption {
	return func(o op) { o["kind"] = string(kind) }
}

// Snapshot saves the sandbox under name: its files (its writable layer
// over its image, usable as the image "snapshot:NAME"), or with
// WithSnapshotKind(SnapshotFull) a running vm sandbox whole. A running
// sandbox is frozen for the copy and goes on; sandboxes made from a
// filesystem snapshot start its image's command, not its processes. A
// taken name is ErrAlreadyExists, a bad one ErrInvalidArgument.
func (t *target) Snapshot(ctx context.Context, name string, opts ...SnapshotOption) (SnapshotInfo, error) {
	o := op{"op": "snapshot", "name": name}
	for _, f := range opts {
		f(o)
	}
	w, err := get[wireSnapshot](ctx, t, o)
	return w.info(), err
}

func moduleSnapshot(ctx context.Context, o op) (SnapshotInfo, error) {
	raw, _, err := call(ctx, nil, o, nil)
	if err != nil {
		return SnapshotInfo{}, err
	}
	var w wireSnapshot
	if err := json.Unmarshal(raw, &w); err != nil {
		return SnapshotInfo{}, malformed(err)
	}
	return w.info(), nil
}

// Snapshots lists the stored snapshots, by name.
func Snapshots(ctx context.Context) ([]SnapshotInfo, error) {
	raw, _, err := call(ctx, nil, op{"op": "list_snapshots"}, nil)
	if err != nil {
		return nil, err
	}
	var ws []wireSnapshot
	if err := json.Unmarshal(raw, &ws); err != nil {
		return nil, malformed(err)
	}
	out := make([]SnapshotInfo, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.info())
	}
	return out, nil
}

// GetSnapshot reads one stored snapshot (ErrNotFound if there is none).
func GetSnapshot(ctx context.Context, name string) (SnapshotInfo, error) {
	return moduleSnapshot(ctx, op{"op": "get_snapshot", "name": name})
}

// RemoveSnapshot removes a stored snapshot: ErrSnapshotInUse (its
// Error.Sandboxes naming them) while sandboxes created from it exist. Its
// content goes at the next image prune.
func RemoveSnapshot(ctx context.Context, name string) error {
	_, _, err := call(ctx, nil, op{"op": "remove_snapshot", "name": name}, nil)
	return err
}
