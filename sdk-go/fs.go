package burrow

import (
	"context"
	"time"
)

// FS is the file operations of a running sandbox; paths are absolute
// paths in the guest.
type FS struct {
	s *Sandbox
}

// ReadFile reads a whole file.
func (f *FS) ReadFile(ctx context.Context, path string) ([]byte, error) {
	return get[[]byte](ctx, &f.s.target, op{"op": "fs_read", "path": path})
}

// WriteFile writes a whole file (created or truncated) with mode perm
// (0: the default, 0644).
func (f *FS) WriteFile(ctx context.Context, path string, data []byte, perm uint32) error {
	o := op{"op": "fs_write", "path": path}
	if perm != 0 {
		o["mode"] = perm
	}
	if data == nil {
		data = []byte{}
	}
	_, _, err := f.s.do(ctx, o, data)
	return err
}

// ReadDir lists a directory, sorted by name.
func (f *FS) ReadDir(ctx context.Context, path string) ([]DirEntry, error) {
	return get[[]DirEntry](ctx, &f.s.target, op{"op": "fs_list", "path": path})
}

// Stat reads the metadata of a path (symlinks not followed).
func (f *FS) Stat(ctx context.Context, path string) (FileStat, error) {
	type wireStat struct {
		Kind       FileKind `json:"kind"`
		Size       uint64   `json:"size"`
		Mode       uint32   `json:"mode"`
		UID        uint32   `json:"uid"`
		GID        uint32   `json:"gid"`
		Mtime      int64    `json:"mtime"`
		LinkTarget string   `json:"link_target"`
	}
	w, err := get[wireStat](ctx, &f.s.target, op{"op": "fs_stat", "path": path})
	if err != nil {
		return FileStat{}, err
	}
	return FileStat{Kind: w.Kind, Size: w.Size, Mode: w.Mode, UID: w.UID, GID: w.GID,
		ModTime: time.Unix(w.Mtime, 0), LinkTarget: w.LinkTarget}, nil
}

// Exists reports whether the path exists.
func (f *FS) Exists(ctx context.Context, path string) (bool, error) {
	return get[bool](ctx, &f.s.target, op{"op": "fs_exists", "path": path})
}

// Mkdir makes a directory (MkdirAll: with its parents).
func (f *FS) Mkdir(ctx context.Context, path string) error {
	return f.s.unit(ctx, op{"op": "fs_mkdir", "path": path})
}

// MkdirAll makes a directory and its missing parents.
func (f *FS) MkdirAll(ctx context.Context, path string) error {
	return f.s.unit(ctx, op{"op": "fs_mkdir", "path": path, "parents": true})
}

// Remove removes a file or an empty directory.
func (f *FS) Remove(ctx context.Context, path string) error {
	return f.s.unit(ctx, op{"op": "fs_remove", "path": path})
}

// RemoveAll removes a path and everything under it.
func (f *FS) RemoveAll(ctx context.Context, path string) error {
	return f.s.unit(ctx, op{"op": "fs_remove", "path": path, "recursive": true})
}

// Rename renames a path.
func (f *FS) Rename(ctx context.Context, from, to string) error {
	return f.s.unit(ctx, op{"op": "fs_rename", "from": from, "to": to})
}
