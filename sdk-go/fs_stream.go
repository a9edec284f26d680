package burrow

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	iofs "io/fs"
)

// streamChunk is how much of a caller's data one call carries (FileWriter
// splits larger writes; WriteFrom reads this much at a time).
const streamChunk = 1 << 20

// FileReader is a sandbox file being read as a stream (FS.OpenRead): an
// io.ReadCloser (and io.WriterTo, so io.Copy moves whole chunks). A chunk
// (at most 256 KiB) is fetched from the sandbox only when Read needs one,
// so a reader that stops reading holds the sandbox's side, not memory.
// The context given to OpenRead bounds every read (as a request's context
// bounds its body). Close before the end abandons the read.
type FileReader struct {
	ctx context.Context
	obj *object
	buf []byte
	err error // sticky: io.EOF at the end, or the failure
}

// OpenRead opens a file to read as a stream; a missing file (or a
// directory) is the error here (an *Error of code ErrGuest whose
// Guest.Code is "not_found").
func (f *FS) OpenRead(ctx context.Context, path string) (*FileReader, error) {
	_, obj, err := f.s.do(ctx, op{"op": "fs_open_read", "path": path}, nil)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, malformed(errors.New("fs_open_read returned no object"))
	}
	return &FileReader{ctx: ctx, obj: obj}, nil
}

// next fetches the next chunk into r.buf, or sets r.err.
func (r *FileReader) next() {
	if r.obj == nil {
		r.err = iofs.ErrClosed
		return
	}
	raw, _, err := call(r.ctx, r.obj, op{"op": "next"}, nil)
	if err != nil {
		r.err = err
		return
	}
	var chunk []byte
	if err := json.Unmarshal(raw, &chunk); err != nil {
		r.err = malformed(err)
		return
	}
	if chunk == nil {
		r.err = io.EOF
		r.obj.release()
		r.obj = nil
		return
	}
	r.buf = chunk
}

// Read reads up to len(p) bytes of the file; io.EOF at its end.
func (r *FileReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.next()
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// WriteTo writes the rest of the file to w, chunk by chunk; the number of
// bytes written.
func (r *FileReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if len(r.buf) > 0 {
			n, err := w.Write(r.buf)
			total += int64(n)
			r.buf = r.buf[n:]
			if err != nil {
				return total, err
			}
			continue
		}
		if r.err == io.EOF {
			return total, nil
		}
		if r.err != nil {
			return total, r.err
		}
		r.next()
	}
}

// Close abandons what is left of the read (nothing more is read); a
// later Read fails with fs.ErrClosed.
func (r *FileReader) Close() error {
	if r.obj != nil {
		r.obj.release()
		r.obj = nil
	}
	r.buf = nil
	if r.err == nil || r.err == io.EOF {
		r.err = iofs.ErrClosed
	}
	return nil
}

// WriteOption configures OpenWrite and WriteFrom.
type WriteOption func(op)

// WithMode is the permission bits of a file the write creates (default
// 0644).
func WithMode(perm uint32) WriteOption { return func(o op) { o["mode"] = perm } }

// WithAppend appends to the file instead of truncating it.
func WithAppend() WriteOption { return func(o op) { o["append"] = true } }

// FileWriter is a sandbox file being written as a stream (FS.OpenWrite):
// an io.WriteCloser. Write returns once the sandbox has taken the previous
// MiB (flow control); Close completes the file and reports a failure of
// the guest (a missing directory, no space) at the latest. The context
// given to OpenWrite bounds every call. Dropped without Close, the write
// is abandoned (what was written stays).
type FileWriter struct {
	ctx     context.Context
	obj     *object
	written int64
	err     error // sticky
}

// OpenWrite opens a file to write as a stream: created (WithMode) or
// truncated, or appended to (WithAppend).
func (f *FS) OpenWrite(ctx context.Context, path string, opts ...WriteOption) (*FileWriter, error) {
	o := op{"op": "fs_open_write", "path": path}
	for _, opt := range opts {
		opt(o)
	}
	_, obj, err := f.s.do(ctx, o, nil)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, malformed(errors.New("fs_open_write returned no object"))
	}
	return &FileWriter{ctx: ctx, obj: obj}, nil
}

// Write appends p to the file.
func (w *FileWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.obj == nil {
		return 0, iofs.ErrClosed
	}
	done := 0
	for done < len(p) {
		end := min(done+streamChunk, len(p))
		if _, _, err := call(w.ctx, w.obj, op{"op": "write"}, p[done:end]); err != nil {
			w.err = err
			return done, err
		}
		done = end
	}
	return done, nil
}

// Close ends the file and waits until the sandbox has it. Closing again
// returns nil.
func (w *FileWriter) Close() error {
	if w.obj == nil {
		return nil
	}
	defer func() {
		w.obj.release()
		w.obj = nil
	}()
	if w.err != nil {
		return w.err
	}
	raw, _, err := call(w.ctx, w.obj, op{"op": "finish"}, nil)
	if err != nil {
		w.err = err
		return err
	}
	if err := json.Unmarshal(raw, &w.written); err != nil {
		w.err = malformed(err)
		return w.err
	}
	return nil
}

// Written is the number of bytes the sandbox has, once Close returned nil.
func (w *FileWriter) Written() int64 { return w.written }

// WriteFrom writes a file (created or truncated, or as opts say) from
// everything r reads, chunk by chunk; the number of bytes written.
func (f *FS) WriteFrom(ctx context.Context, path string, r io.Reader, opts ...WriteOption) (int64, error) {
	w, err := f.OpenWrite(ctx, path, opts...)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, streamChunk)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				_ = w.Close()
				return 0, err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			w.obj.release()
			w.obj = nil
			return 0, rerr
		}
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return w.written, nil
}
