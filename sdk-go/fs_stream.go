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
// bounds its body). Close before the end abandons the read at once and
// releases the guest's file; as with an os.File or a net.Conn, Close may
// be called from another goroutine while a Read waits, which then ends
// with fs.ErrClosed.
type FileReader struct {
	ctx context.Context
	s   stream
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
	return &FileReader{ctx: ctx, s: stream{obj: obj}}, nil
}

// next fetches the next chunk into r.buf, or sets r.err.
func (r *FileReader) next() {
	obj := r.s.acquire()
	if obj == nil {
		r.err = iofs.ErrClosed
		return
	}
	raw, _, err := call(r.ctx, obj, op{"op": "next"}, nil)
	if r.s.isClosed() {
		// Closed meanwhile (the core ended the call at once).
		r.s.put(false)
		r.err = iofs.ErrClosed
		return
	}
	if err != nil {
		r.s.put(false)
		r.err = err
		return
	}
	var chunk []byte
	if err := json.Unmarshal(raw, &chunk); err != nil {
		r.s.put(false)
		r.err = malformed(err)
		return
	}
	if chunk == nil {
		r.s.put(true) // the end: the object is freed
		r.err = io.EOF
		return
	}
	r.s.put(false)
	r.buf = chunk
}

// Read reads up to len(p) bytes of the file; io.EOF at its end.
func (r *FileReader) Read(p []byte) (int, error) {
	if r.s.isClosed() {
		return 0, iofs.ErrClosed
	}
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
		if r.s.isClosed() {
			return total, iofs.ErrClosed
		}
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

// Close abandons what is left of the read at once (nothing more is
// read) and releases the guest's file, whatever the context given to
// OpenRead; a Read waiting in another goroutine ends, it and later Reads
// fail with fs.ErrClosed. Closing again (or after the end) returns nil.
func (r *FileReader) Close() error {
	return r.s.close(true)
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
// given to OpenWrite bounds every call. Abandon (or dropping it without
// Close, once it is collected) abandons the write (what was written
// stays).
type FileWriter struct {
	ctx     context.Context
	s       stream
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
	return &FileWriter{ctx: ctx, s: stream{obj: obj}}, nil
}

// Write appends p to the file.
func (w *FileWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	obj := w.s.acquire()
	if obj == nil {
		return 0, iofs.ErrClosed
	}
	defer w.s.put(false)
	done := 0
	for done < len(p) {
		end := min(done+streamChunk, len(p))
		if _, _, err := call(w.ctx, obj, op{"op": "write"}, p[done:end]); err != nil {
			w.err = err
			return done, err
		}
		done = end
	}
	return done, nil
}

// Close ends the file and waits until the sandbox has it. Closing again
// returns nil. After Abandon, the file is not finished: Close returns an
// error of code ErrInvalidArgument.
func (w *FileWriter) Close() error {
	obj := w.s.acquire()
	if obj == nil {
		return nil
	}
	defer w.s.put(true)
	if w.err != nil {
		return w.err
	}
	raw, _, err := call(w.ctx, obj, op{"op": "finish"}, nil)
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

// Abandon abandons the write at once, whatever the context given to
// OpenWrite: the guest's file is closed with what was written, a Write
// waiting in another goroutine ends, and a later Write or Close fails
// with an error of code ErrInvalidArgument (the file is not finished).
// Abandoning again, or after Close, returns nil.
func (w *FileWriter) Abandon() error {
	return w.s.close(false)
}

// drop abandons the write and frees its object (a WriteFrom that failed).
func (w *FileWriter) drop() {
	_ = w.s.close(true)
}

// WriteFrom writes a file (created or truncated, or as opts say) from
// everything r reads, chunk by chunk; the number of bytes written. If r
// (or a write) fails, the write is abandoned at once (what was written
// stays) and that error is returned.
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
				w.drop()
				return 0, err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			w.drop()
			return 0, rerr
		}
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return w.written, nil
}
