package burrow_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestLifecycle(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-basic", burrow.WithImage(testImage),
		burrow.WithMemory(256), burrow.WithEnv(map[string]string{"WHO": "go"})))
	if !strings.HasPrefix(sb.ID(), "sb_") || sb.Name() != "go-basic" || sb.Generation() != 1 {
		t.Fatalf("sandbox %s %s %d", sb.ID(), sb.Name(), sb.Generation())
	}
	out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"sh", "-c", "echo $WHO; cat"}, burrow.WithStdin(strings.NewReader("in"))))
	if string(out.Stdout) != "go\nin" || !out.Success() {
		t.Fatalf("exec: %q %+v", out.Stdout, out.ExitStatus)
	}
	fs := sb.FS()
	if err := fs.WriteFile(ctx, "/tmp/f", []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := must[[]byte](t)(fs.ReadFile(ctx, "/tmp/f")); string(got) != "data" {
		t.Fatalf("read %q", got)
	}
	if st := must[burrow.FileStat](t)(fs.Stat(ctx, "/tmp/f")); st.Mode != 0o600 || st.Kind != burrow.KindFile || st.Size != 4 {
		t.Fatalf("stat %+v", st)
	}
	if ok := must[bool](t)(fs.Exists(ctx, "/tmp/nope")); ok {
		t.Fatal("exists")
	}
	var stdout bytes.Buffer
	p := must[*burrow.Process](t)(sb.Spawn(ctx, []string{"cat"}, burrow.WithStdin(strings.NewReader("streamed")), burrow.WithStdout(&stdout)))
	st, err := p.Wait()
	if err != nil || st.ExitCode != 0 || stdout.String() != "streamed" {
		t.Fatalf("spawn: %v %+v %q", err, st, stdout.String())
	}
	if p := must[burrow.Ping](t)(sb.Ping(ctx)); p.Latency <= 0 {
		t.Fatal("ping")
	}
	info := must[burrow.SandboxInfo](t)(sb.Info(ctx))
	if info.Status != burrow.StatusRunning || info.Config.MemoryMB != 256 || info.LastRun == nil || info.LastRun.Generation != 1 {
		t.Fatalf("info %+v", info)
	}
	plan := must[burrow.ModifyPlan](t)(sb.Modify(ctx, burrow.SetMemory(192), burrow.SetEnv("MODE", "x")))
	if plan.Info.Config.MemoryMB != 192 || len(plan.Changes) != 2 {
		t.Fatalf("plan %+v", plan)
	}
	// A ModifyOptions and Set functions in one call; SetCPUs(0) unsets
	// (the host's default comes back, where the host holds one).
	plan = must[burrow.ModifyPlan](t)(sb.Modify(ctx, burrow.ModifyOptions{CPUs: 1.5, Labels: map[string]string{"tier": "web"}}))
	if plan.Info.Config.CPUs != 1.5 || plan.Info.Config.Labels["tier"] != "web" || plan.Info.Config.MemoryMB != 192 {
		t.Fatalf("plan %+v", plan)
	}
	plan = must[burrow.ModifyPlan](t)(sb.Modify(ctx, burrow.SetCPUs(0), burrow.ModifyOptions{MemoryMiB: 200}))
	if plan.Info.Config.CPUs == 1.5 || plan.Info.Config.MemoryMB != 200 {
		t.Fatalf("plan %+v", plan)
	}
	must[burrow.ModifyPlan](t)(sb.Modify(ctx, burrow.SetMemory(192)))
	m := must[burrow.Metrics](t)(sb.Metrics(ctx))
	if m.MemoryLimitBytes == nil || *m.MemoryLimitBytes != 192<<20 {
		t.Fatalf("metrics %+v", m)
	}
	if st := sb.Status(); st != burrow.StatusRunning {
		t.Fatalf("snapshot before stop: %s", st)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// The snapshot is the record's the stop answered, without a call.
	if st := sb.Status(); st != burrow.StatusStopped {
		t.Fatalf("snapshot after stop: %s", st)
	}
	stopped := must[burrow.SandboxInfo](t)(sb.Info(ctx))
	if stopped.Status != burrow.StatusStopped || stopped.LastRun.ExitReason != burrow.ExitStopped {
		t.Fatalf("stop %+v", stopped)
	}
	h := must[*burrow.SandboxHandle](t)(burrow.GetSandbox(ctx, "go-basic"))
	if st := h.Status(); st != burrow.StatusStopped {
		t.Fatalf("a stopped sandbox's handle: %s", st)
	}
	live := must[*burrow.Sandbox](t)(h.ConnectOrStart(ctx))
	if live.ID() != sb.ID() || live.Generation() != 2 {
		t.Fatalf("connect_or_start %s %d", live.ID(), live.Generation())
	}
	if err := live.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestErrorCodesAreTheCores(t *testing.T) {
	got := burrow.CoreErrorCodes()
	want := burrow.ErrorCodes()
	if len(got) != len(want) {
		t.Fatalf("core %v, package %v", got, want)
	}
	for i := range want {
		if string(want[i]) != got[i] {
			t.Fatalf("code %d: core %q, package %q", i, got[i], want[i])
		}
	}
}

func TestTypedErrors(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	_, err := burrow.GetSandbox(ctx, "go-nobody")
	var e *burrow.Error
	if !errors.Is(err, burrow.ErrNotFound) || !errors.As(err, &e) || e.Name != "go-nobody" {
		t.Fatalf("get: %v", err)
	}
	if _, err := burrow.CreateSandbox(ctx, "no/slash/x", burrow.WithImage(testImage)); !errors.Is(err, burrow.ErrInvalidName) {
		t.Fatalf("bad name: %v", err)
	}
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-dup", burrow.WithImage(testImage)))
	_, err = burrow.CreateSandbox(ctx, "go-dup", burrow.WithImage(testImage))
	if !errors.Is(err, burrow.ErrAlreadyExists) || !errors.As(err, &e) || e.SandboxID != sb.ID() {
		t.Fatalf("dup: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = sb.WaitForStatus(short, burrow.StatusStopped)
	if !errors.Is(err, burrow.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = sb.Exec(ctx, []string{"true"})
	if !errors.Is(err, burrow.ErrInvalidState) || !errors.As(err, &e) || e.Status != burrow.StatusStopped {
		t.Fatalf("exec stopped: %v", err)
	}
	// A value bound to a destroyed sandbox never acts on its successor.
	must[*burrow.Sandbox](t)(burrow.ConnectOrCreateSandbox(ctx, "go-dup", burrow.WithImage(testImage)))
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	next := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-dup", burrow.WithImage(testImage)))
	_, err = sb.Info(ctx)
	if !errors.Is(err, burrow.ErrSandboxReplaced) || !errors.As(err, &e) || e.ActualID != next.ID() {
		t.Fatalf("replaced: %v", err)
	}
	_, err = next.FS().ReadFile(ctx, "/no/such/file")
	if !errors.Is(err, burrow.ErrGuest) || !errors.As(err, &e) || e.Guest == nil || e.Guest.Code != "not_found" {
		t.Fatalf("guest: %v", err)
	}
	if _, err := next.FS().ReadFile(ctx, "relative"); !errors.Is(err, burrow.ErrInvalidArgument) {
		t.Fatalf("relative: %v", err)
	}
	if _, err := burrow.DefineSandbox(ctx, "go-cfg", burrow.WithImage(testImage), burrow.WithMemory(1)); !errors.Is(err, burrow.ErrInvalidConfig) {
		t.Fatalf("config: %v", err)
	}
	if _, err := burrow.DefineSandbox(ctx, "go-img", burrow.WithImage("/definitely/not/a/dir")); !errors.Is(err, burrow.ErrInvalidImage) {
		t.Fatalf("image: %v", err)
	}
}

func pidof(t *testing.T, ctx context.Context, sb *burrow.Sandbox, name string) bool {
	t.Helper()
	r := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"pidof", name}))
	return r.ExitCode == 0
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for i := 0; i < 300; i++ {
		if f() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("never: %s", what)
}

func TestCancellationLeavesNoOrphan(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-cancel", burrow.WithImage(testImage)))
	// Cancel.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := sb.Exec(cctx, []string{"sleep", "30"}); done <- err }()
	eventually(t, "sleep started", func() bool { return pidof(t, ctx, sb, "sleep") })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled exec: %v", err)
	}
	eventually(t, "the cancelled sleep ended", func() bool { return !pidof(t, ctx, sb, "sleep") })
	// Deadline.
	dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer dcancel()
	if _, err := sb.Exec(dctx, []string{"sleep", "30"}); !errors.Is(err, burrow.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline exec: %v", err)
	}
	eventually(t, "the timed-out sleep ended", func() bool { return !pidof(t, ctx, sb, "sleep") })
	// A spawned process dies with its context.
	sctx, scancel := context.WithCancel(ctx)
	p := must[*burrow.Process](t)(sb.Spawn(sctx, []string{"sleep", "30"}))
	eventually(t, "spawned sleep started", func() bool { return pidof(t, ctx, sb, "sleep") })
	scancel()
	st, err := p.Wait()
	if !errors.Is(err, context.Canceled) || st.Signal != 9 {
		t.Fatalf("spawn cancelled: %v %+v", err, st)
	}
	if pidof(t, ctx, sb, "sleep") {
		t.Fatal("the spawned sleep survived its context")
	}
	// A cancelled call's task is dropped by the runtime right after the
	// cancel, asynchronously.
	eventually(t, "no call in flight", func() bool { return burrow.InFlight() == 0 })
}

func TestManyGoroutines(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	var sbs []*burrow.Sandbox
	for _, name := range []string{"go-many-a", "go-many-b", "go-many-c"} {
		sbs = append(sbs, must[*burrow.Sandbox](t)(burrow.ConnectOrCreateSandbox(ctx, name, burrow.WithImage(testImage))))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sb := sbs[i%len(sbs)]
			var err error
			switch i % 4 {
			case 0:
				var r *burrow.ExecResult
				if r, err = sb.Exec(ctx, []string{"echo", "x"}); err == nil && string(r.Stdout) != "x\n" {
					err = errors.New("wrong output")
				}
			case 1:
				_, err = sb.Ping(ctx)
			case 2:
				_, err = sb.Info(ctx)
			case 3:
				var h *burrow.SandboxHandle
				if h, err = burrow.GetSandbox(ctx, sb.Name()); err == nil && h.ID() != sb.ID() {
					err = errors.New("another id")
				}
			}
			if err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestAttachedSandboxStopsWhenItsOwnerIsKilled(t *testing.T) {
	dir := home(t)
	ctx := ctxT(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BURROW_GO_CHILD=owner", "BURROW_GO_HOME="+dir, "BURROW_GO_NAME=go-owner")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("the owner did not report its sandbox: %v", err)
	}
	h := must[*burrow.SandboxHandle](t)(burrow.GetSandboxByID(ctx, strings.TrimSpace(id)))
	if st := must[burrow.SandboxInfo](t)(h.Info(ctx)).Status; st != burrow.StatusRunning {
		t.Fatalf("status %s", st)
	}
	_ = cmd.Process.Kill() // SIGKILL
	_ = cmd.Wait()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info := must[burrow.SandboxInfo](t)(h.WaitForStatus(wctx, burrow.StatusStopped, burrow.StatusCrashed))
	if info.Status != burrow.StatusStopped || info.LastRun.ExitReason != burrow.ExitOwnerExited {
		t.Fatalf("after the owner's SIGKILL: %s %s", info.Status, info.LastRun.ExitReason)
	}
}

func TestObjectsAreFreedOnce(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-leak", burrow.WithImage(testImage)))
	settle := func() int {
		for i := 0; i < 50; i++ {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		return burrow.LiveObjects()
	}
	base := settle()
	for i := 0; i < 2000; i++ {
		h := must[*burrow.SandboxHandle](t)(burrow.GetSandbox(ctx, "go-leak"))
		if h.ID() != sb.ID() {
			t.Fatal("another id")
		}
	}
	if burrow.LiveObjects() < base {
		t.Fatal("an object was freed twice")
	}
	if after := settle(); after != base {
		t.Fatalf("%d objects before, %d after 2000 dropped handles", base, after)
	}
	runtime.KeepAlive(sb)
}

func TestAPanicOfTheCoreIsAnError(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-panic", burrow.WithImage(testImage)))
	t.Setenv("BURROW_FAULT", "binding.panic")
	_, err := sb.Ping(ctx)
	var e *burrow.Error
	if !errors.Is(err, burrow.ErrIO) || !errors.As(err, &e) {
		t.Fatalf("a panicking call: %v", err)
	}
	os.Unsetenv("BURROW_FAULT")
	must[burrow.Ping](t)(sb.Ping(ctx))
}

func TestEverySentinelMatchesOnlyItsCode(t *testing.T) {
	for _, code := range burrow.CoreErrorCodes() {
		err := error(&burrow.Error{Code: burrow.ErrorCode(code), Message: "m"})
		wrapped := fmt.Errorf("context: %w", err)
		for _, sentinel := range burrow.ErrorCodes() {
			if got, want := errors.Is(wrapped, sentinel), string(sentinel) == code; got != want {
				t.Errorf("errors.Is(%s error, %s) = %v", code, sentinel, got)
			}
		}
		var e *burrow.Error
		if !errors.As(wrapped, &e) || string(e.Code) != code {
			t.Errorf("errors.As of a %s error", code)
		}
	}
}
