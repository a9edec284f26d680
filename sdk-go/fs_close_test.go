package burrow_test

import (
	"context"
	"errors"
	iofs "io/fs"
	"strings"
	"testing"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// Guest-side witnesses that a stream released the guest's file (while the
// SDK's object is still referenced, so no collection did it):
//   - /tmp/p, a FIFO whose writer sends one line and then nothing until
//     /tmp/go exists (a second pull waits); then it writes a line every
//     0.1 s, which fails (SIGPIPE/EPIPE) only once no reader holds the
//     FIFO, and /tmp/gone appears.
//   - /tmp/q, a FIFO read by `cat`, which ends (and /tmp/q.done appears)
//     only once no writer holds it.
const (
	heldFIFO = "rm -f /tmp/p /tmp/go /tmp/gone; mkfifo /tmp/p; " +
		"( (echo first; until [ -e /tmp/go ]; do sleep 0.1; done; " +
		"while echo more; do sleep 0.1; done) > /tmp/p; echo $? > /tmp/gone ) " +
		"</dev/null >/dev/null 2>&1 &"
	readFIFO = "rm -f /tmp/q /tmp/q.done; mkfifo /tmp/q; " +
		"(cat /tmp/q > /tmp/q.out; echo $? > /tmp/q.done) </dev/null >/dev/null 2>&1 &"
)

// appears is whether path exists in the sandbox within 10 s.
func appears(t *testing.T, ctx context.Context, sb *burrow.Sandbox, path string) bool {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if must[bool](t)(sb.FS().Exists(ctx, path)) {
			return true
		}
	}
	return false
}

// readerReleased lets the FIFO's writer go on: whether it then finds no
// reader.
func readerReleased(t *testing.T, ctx context.Context, sb *burrow.Sandbox) bool {
	t.Helper()
	if err := sb.FS().WriteFile(ctx, "/tmp/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return appears(t, ctx, sb, "/tmp/gone")
}

func shell(t *testing.T, ctx context.Context, sb *burrow.Sandbox, script string) {
	t.Helper()
	must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"sh", "-c", script}))
}

// failingReader yields its text, then fails.
type failingReader struct {
	text string
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.text == "" {
		return 0, f.err
	}
	n := copy(p, f.text)
	f.text = f.text[n:]
	return n, nil
}

func TestFileReaderCloseEndsAWaitingRead(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-stream-close", burrow.WithImage(testImage)))
	defer func() { _ = sb.Destroy(ctx) }()

	shell(t, ctx, sb, heldFIFO)
	r := must[*burrow.FileReader](t)(sb.FS().OpenRead(ctx, "/tmp/p"))
	buf := make([]byte, 64)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "first\n" {
		t.Fatalf("first read: %q, %v", buf[:n], err)
	}
	pending := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 64))
		pending <- err
	}()
	select {
	case err := <-pending:
		t.Fatalf("the second read waits on the held FIFO, got %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := r.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-pending:
		if !errors.Is(err, iofs.ErrClosed) {
			t.Fatalf("the waiting read: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting read did not end on Close")
	}
	if _, err := r.Read(buf); !errors.Is(err, iofs.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("closing again: %v", err)
	}
	if !readerReleased(t, ctx, sb) {
		t.Fatal("the guest still holds the FIFO")
	}

	// A read whose context ends fails with it; Close then still releases
	// the file (the close is not refused for the ended context).
	shell(t, ctx, sb, heldFIFO)
	rctx, cancel := context.WithCancel(ctx)
	r = must[*burrow.FileReader](t)(sb.FS().OpenRead(rctx, "/tmp/p"))
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "first\n" {
		t.Fatalf("first read: %q, %v", buf[:n], err)
	}
	time.AfterFunc(300*time.Millisecond, cancel)
	if _, err := r.Read(buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("read with its context cancelled: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("close after the context ended: %v", err)
	}
	if !readerReleased(t, ctx, sb) {
		t.Fatal("the guest still holds the FIFO (context cancelled)")
	}
	if out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"echo", "ok"})); string(out.Stdout) != "ok\n" {
		t.Fatalf("after closed reads: %q", out.Stdout)
	}
}

func TestFileWriterAbandon(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-stream-abandon", burrow.WithImage(testImage)))
	defer func() { _ = sb.Destroy(ctx) }()
	fs := sb.FS()

	shell(t, ctx, sb, readFIFO)
	w := must[*burrow.FileWriter](t)(fs.OpenWrite(ctx, "/tmp/q"))
	must[int](t)(w.Write([]byte("kept")))
	if err := w.Abandon(); err != nil {
		t.Fatalf("abandon: %v", err)
	}
	if !appears(t, ctx, sb, "/tmp/q.done") {
		t.Fatal("the guest still holds the FIFO")
	}
	if err := w.Abandon(); err != nil {
		t.Fatalf("abandoning again: %v", err)
	}
	var e *burrow.Error
	if _, err := w.Write([]byte("more")); !errors.Is(err, burrow.ErrInvalidArgument) || !errors.As(err, &e) {
		t.Fatalf("write after abandon: %v", err)
	}
	// Not finished: Close reports it, by its code.
	if err := w.Close(); !errors.Is(err, burrow.ErrInvalidArgument) {
		t.Fatalf("close after abandon: %v", err)
	}
	if w.Written() != 0 {
		t.Fatalf("an abandoned file reports %d bytes written", w.Written())
	}

	// WriteFrom whose source fails abandons the write at once and returns
	// the source's error.
	shell(t, ctx, sb, readFIFO)
	broken := errors.New("the source failed")
	if _, err := fs.WriteFrom(ctx, "/tmp/q", &failingReader{text: "part", err: broken}); !errors.Is(err, broken) {
		t.Fatalf("WriteFrom of a failing source: %v", err)
	}
	if !appears(t, ctx, sb, "/tmp/q.done") {
		t.Fatal("the guest still holds the FIFO (WriteFrom)")
	}
	if n := must[int64](t)(fs.WriteFrom(ctx, "/tmp/whole", strings.NewReader("whole"))); n != 5 {
		t.Fatalf("WriteFrom after: %d", n)
	}
	if b := must[[]byte](t)(fs.ReadFile(ctx, "/tmp/whole")); string(b) != "whole" {
		t.Fatalf("read back %q", b)
	}
}
