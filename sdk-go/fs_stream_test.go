package burrow_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// blob is size bytes that are no repetition of a short pattern (a chunk
// dropped, doubled or swapped changes the digest).
func blob(size int) []byte {
	var out bytes.Buffer
	var n [8]byte
	for i := uint64(0); out.Len() < size; i++ {
		binary.BigEndian.PutUint64(n[:], i)
		sum := sha256.Sum256(n[:])
		out.Write(sum[:])
	}
	return out.Bytes()[:size]
}

// chunkCounter counts the writes io.Copy makes into it (WriterTo: one per
// chunk of the sandbox).
type chunkCounter struct {
	bytes.Buffer
	writes, largest int
}

func (c *chunkCounter) Write(p []byte) (int, error) {
	c.writes++
	c.largest = max(c.largest, len(p))
	return c.Buffer.Write(p)
}

func TestFileStreams(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-streams", burrow.WithImage(testImage)))
	defer func() { _ = sb.Destroy(ctx) }()
	fs := sb.FS()
	data := blob(6<<20 + 12345)

	// In from an io.Reader, out through io.Copy (chunk by chunk).
	n := must[int64](t)(fs.WriteFrom(ctx, "/tmp/a.bin", bytes.NewReader(data)))
	if n != int64(len(data)) {
		t.Fatalf("WriteFrom: %d bytes", n)
	}
	sum := sha256.Sum256(data)
	out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"sh", "-c", "sha256sum /tmp/a.bin | cut -d' ' -f1"}))
	if strings.TrimSpace(string(out.Stdout)) != hex.EncodeToString(sum[:]) {
		t.Fatalf("sha256 in the sandbox: %q", out.Stdout)
	}
	r := must[*burrow.FileReader](t)(fs.OpenRead(ctx, "/tmp/a.bin"))
	var got chunkCounter
	if _, err := io.Copy(&got, r); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), data) || got.writes < 2 || got.largest > 256<<10 {
		t.Fatalf("read back: %d bytes in %d writes (largest %d)", got.Len(), got.writes, got.largest)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, iofs.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}

	// Small reads through Read (io.ReadAll), from a local file and into one.
	dir := t.TempDir()
	src := filepath.Join(dir, "src.bin")
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f := must[*os.File](t)(os.Open(src))
	n = must[int64](t)(fs.WriteFrom(ctx, "/tmp/b.bin", f))
	f.Close()
	if n != int64(len(data)) {
		t.Fatalf("WriteFrom a file: %d", n)
	}
	r = must[*burrow.FileReader](t)(fs.OpenRead(ctx, "/tmp/b.bin"))
	all := must[[]byte](t)(io.ReadAll(io.LimitReader(struct{ io.Reader }{r}, int64(len(data)+1))))
	r.Close()
	if !bytes.Equal(all, data) {
		t.Fatalf("ReadAll: %d bytes", len(all))
	}

	// The io.WriteCloser, with a mode, then appended to.
	w := must[*burrow.FileWriter](t)(fs.OpenWrite(ctx, "/tmp/c.txt", burrow.WithMode(0o600)))
	for _, s := range []string{"one ", "two ", "three"} {
		if _, err := io.WriteString(w, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil || w.Written() != 13 {
		t.Fatalf("close: %v, %d written", err, w.Written())
	}
	if _, err := w.Write([]byte("late")); !errors.Is(err, iofs.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if n := must[int64](t)(fs.WriteFrom(ctx, "/tmp/c.txt", strings.NewReader(" four"), burrow.WithAppend())); n != 5 {
		t.Fatalf("append: %d", n)
	}
	if got := must[[]byte](t)(fs.ReadFile(ctx, "/tmp/c.txt")); string(got) != "one two three four" {
		t.Fatalf("appended: %q", got)
	}
	if st := must[burrow.FileStat](t)(fs.Stat(ctx, "/tmp/c.txt")); st.Mode != 0o600 {
		t.Fatalf("mode %o", st.Mode)
	}

	// Closing part way abandons the read; the sandbox serves on.
	r = must[*burrow.FileReader](t)(fs.OpenRead(ctx, "/tmp/a.bin"))
	head := make([]byte, 1000)
	if _, err := io.ReadFull(r, head); err != nil || !bytes.Equal(head, data[:1000]) {
		t.Fatalf("head: %v", err)
	}
	r.Close()
	if out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"echo", "ok"})); string(out.Stdout) != "ok\n" {
		t.Fatalf("after an abandoned read: %q", out.Stdout)
	}

	// Empty in, empty out.
	if n := must[int64](t)(fs.WriteFrom(ctx, "/tmp/empty", strings.NewReader(""))); n != 0 {
		t.Fatalf("empty: %d", n)
	}
	r = must[*burrow.FileReader](t)(fs.OpenRead(ctx, "/tmp/empty"))
	if b := must[[]byte](t)(io.ReadAll(r)); len(b) != 0 {
		t.Fatalf("empty read %d bytes", len(b))
	}
}

func TestFileStreamErrorsAreTyped(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-stream-errors", burrow.WithImage(testImage)))
	defer func() { _ = sb.Destroy(ctx) }()
	fs := sb.FS()
	guest := func(what string, err error) {
		t.Helper()
		var e *burrow.Error
		if !errors.Is(err, burrow.ErrGuest) || !errors.As(err, &e) || e.Guest == nil || e.Guest.Code != "not_found" {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := fs.OpenRead(ctx, "/nope")
	guest("open a missing file", err)
	_, err = fs.WriteFrom(ctx, "/no/such/dir/f", strings.NewReader("lost"))
	guest("write into a missing directory", err)
	if _, err := fs.OpenRead(ctx, "relative"); !errors.Is(err, burrow.ErrInvalidArgument) {
		t.Fatalf("relative read: %v", err)
	}
	if _, err := fs.OpenWrite(ctx, "relative"); !errors.Is(err, burrow.ErrInvalidArgument) {
		t.Fatalf("relative write: %v", err)
	}
	if out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"echo", "ok"})); string(out.Stdout) != "ok\n" {
		t.Fatalf("after the errors: %q", out.Stdout)
	}
}

func TestExecOutputLimit(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-limits", burrow.WithImage(testImage)))
	defer func() { _ = sb.Destroy(ctx) }()
	out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"sh", "-c", `head -c 3000000 /dev/zero | tr '\0' a; exit 3`},
		burrow.WithOutputLimit(1000)))
	if !bytes.Equal(out.Stdout, bytes.Repeat([]byte("a"), 1000)) || !out.Truncated || out.ExitCode != 3 {
		t.Fatalf("limited: %d bytes, truncated %v, exit %d", len(out.Stdout), out.Truncated, out.ExitCode)
	}
	out = must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"sh", "-c", "echo 0123456789 >&2; echo out"}, burrow.WithOutputLimit(4)))
	if string(out.Stdout) != "out\n" || string(out.Stderr) != "0123" || !out.Truncated {
		t.Fatalf("stderr limited: %q %q %v", out.Stdout, out.Stderr, out.Truncated)
	}
	out = must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"echo", "short"}, burrow.WithOutputLimit(1000)))
	if string(out.Stdout) != "short\n" || out.Truncated {
		t.Fatalf("short: %q %v", out.Stdout, out.Truncated)
	}
	out = must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"sh", "-c", "head -c 100000 /dev/zero"}, burrow.WithOutputLimit(0)))
	if len(out.Stdout) != 0 || !out.Truncated {
		t.Fatalf("limit 0: %d bytes, %v", len(out.Stdout), out.Truncated)
	}
	if out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"echo", "whole"})); out.Truncated {
		t.Fatal("no limit, truncated")
	}
}
