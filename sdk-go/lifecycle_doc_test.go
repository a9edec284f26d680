package burrow_test

// The lifecycle document's Go samples (../shared/seeds/001_...txt,
// "Lifecycle"; `m` is the import alias of this module), each exactly as
// written and in the document's order, against real sandboxes of a fresh
// local home whose image `python` is the busybox test image imported under
// that name. Each sample is a block of its own (a Go sample is a fragment of
// a function); what comes between the samples is glue: the destroy of the
// previous `worker`, a sandbox for a sample that needs one, and the checks
// of what the text says happens. gofmt sets the samples' indentation in
// tabs; nothing else of them differs from the document.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	m "github.com/burrow-dev/burrow/sdk-go"
)

// The document's `handle, err := m.GetSandbox(...)` then `sb, err :=
// handle.ConnectOrStart(ctx)` overwrites the first error unread; the sample
// stays as written.
//
//lint:file-ignore SA4006 the document's samples, as written

func TestEveryGoSampleOfTheLifecycleDocument(t *testing.T) {
	dir := home(t)
	if err := os.MkdirAll(filepath.Join(dir, "images", "named"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testImage, filepath.Join(dir, "images", "named", "python")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// gone destroys whatever `worker` is now.
	gone := func() {
		t.Helper()
		h, err := m.GetSandbox(ctx, "worker")
		if errors.Is(err, m.ErrNotFound) {
			return
		}
		ok("get worker", err)
		ok("destroy worker", h.Destroy(ctx))
	}
	worker := func() *m.Sandbox {
		t.Helper()
		h, err := m.GetSandbox(ctx, "worker")
		ok("get worker", err)
		sb, err := h.Connect(ctx)
		ok("connect worker", err)
		return sb
	}

	// ---- Create a sandbox
	{
		// Local attached handle: sandbox stops when your process exits
		sb, err := m.CreateSandbox(ctx, "worker", m.WithImage("python"))

		ok("create attached", err)
		info, err := sb.Info(ctx)
		ok("info", err)
		if info.Status != m.StatusRunning || info.Detached || sb.Status() != m.StatusRunning {
			t.Fatalf("attached: %s detached=%v snapshot %s", info.Status, info.Detached, sb.Status())
		}
	}
	gone()
	var detachedID string
	var createdMemory uint64
	{
		// Detached: sandbox survives after your process exits
		detached, err := m.CreateSandbox(ctx, "worker",
			m.WithImage("python"),
			m.WithDetached(),
		)

		ok("create detached", err)
		info, err := detached.Info(ctx)
		ok("info", err)
		if info.Status != m.StatusRunning || !info.Detached {
			t.Fatalf("detached: %s detached=%v", info.Status, info.Detached)
		}
		detachedID = detached.ID()
		// It named no memory: the host's default where the host holds one.
		createdMemory = info.Config.MemoryMB
	}

	// ---- Converge on a named sandbox: the running detached `worker` is
	// connected to, its own configuration winning over WithMemory(1024).
	{
		sb, err := m.ConnectOrCreateSandbox(ctx, "worker",
			m.WithImage("python"),
			m.WithMemory(1024),
		)

		ok("connect_or_create on the existing worker", err)
		info, err := sb.Info(ctx)
		ok("info", err)
		if sb.ID() != detachedID || info.Config.MemoryMB != createdMemory || info.Config.MemoryMB == 1024 || !info.Detached {
			t.Fatalf("connect_or_create reused %s (want %s), memory %d MiB, detached=%v",
				sb.ID(), detachedID, info.Config.MemoryMB, info.Detached)
		}
	}
	{
		handle, err := m.GetSandbox(ctx, "worker")
		sb, err := handle.ConnectOrStart(ctx)

		ok("connect_or_start", err)
		if handle.ID() != detachedID || sb.ID() != detachedID || handle.Name() != "worker" {
			t.Fatalf("connect_or_start: handle %s, sandbox %s, want %s", handle.ID(), sb.ID(), detachedID)
		}
	}
	// When the name is missing, the same sample creates, with the memory.
	gone()
	{
		sb, err := m.ConnectOrCreateSandbox(ctx, "worker",
			m.WithImage("python"),
			m.WithMemory(1024),
		)

		ok("connect_or_create on a missing name", err)
		info, err := sb.Info(ctx)
		ok("info", err)
		if info.Config.MemoryMB != 1024 {
			t.Fatalf("memory %d MiB, want 1024", info.Config.MemoryMB)
		}
	}

	// ---- Stop and restart
	sb := worker()
	id := sb.ID()
	{
		_ = sb.Stop(ctx)

		// Later, resume where you left off
		sb, err := m.StartSandbox(ctx, "worker")

		ok("start by name", err)
		if sb.ID() != id || sb.Status() != m.StatusRunning {
			t.Fatalf("started %s (%s), want %s running", sb.ID(), sb.Status(), id)
		}
	}
	// The stopped value's status reads "stopped", without a call.
	if st := sb.Status(); st != m.StatusStopped {
		t.Fatalf("the stopped sandbox's Status() is %q", st)
	}
	// Starting a running sandbox is refused (ConnectOrStart converges).
	if _, err := m.StartSandbox(ctx, "worker"); !errors.Is(err, m.ErrInvalidState) {
		t.Fatalf("start of a running sandbox: %v", err)
	}
	sb = worker()

	// ---- Configuration
	{
		plan, err := sb.Modify(ctx, m.ModifyOptions{CPUs: 4, MemoryMiB: 4096})

		ok("modify", err)
		fields := map[string]bool{}
		for _, c := range plan.Changes {
			fields[c.Field] = true
		}
		if !fields["cpus"] || !fields["memory_mb"] || plan.Info.Config.CPUs != 4 || plan.Info.Config.MemoryMB != 4096 {
			t.Fatalf("plan %+v", plan)
		}
	}

	// ---- Kill immediately
	{
		err := sb.Kill(ctx)

		ok("kill", err)
		info, err := sb.Info(ctx)
		ok("info", err)
		if sb.Status() != m.StatusStopped || info.LastRun == nil || info.LastRun.ExitReason != m.ExitKilled {
			t.Fatalf("after kill: snapshot %s, record %+v", sb.Status(), info.LastRun)
		}
	}
	sb, err := m.StartSandbox(ctx, "worker")
	ok("start", err)

	// ---- Detach
	{
		err := sb.Detach(ctx)

		ok("detach", err)
		info, err := sb.Info(ctx)
		ok("info", err)
		if !info.Detached {
			t.Fatal("not detached")
		}
	}

	// ---- Request drain, then wait until stopped
	{
		err := sb.RequestDrain(ctx)

		ok("request_drain", err)
	}
	{
		result, err := sb.WaitUntilStopped(ctx)

		ok("wait_until_stopped", err)
		if result.Status != m.StatusStopped || result.LastRun == nil || result.LastRun.ExitReason != m.ExitDrain {
			t.Fatalf("wait_until_stopped: %s %+v", result.Status, result.LastRun)
		}
	}

	// ---- Destroy
	sb, err = m.StartSandbox(ctx, "worker")
	ok("start", err)
	{
		err := sb.Destroy(ctx)

		ok("destroy", err)
	}
	if _, err := m.GetSandbox(ctx, "worker"); !errors.Is(err, m.ErrNotFound) {
		t.Fatalf("after destroy: %v", err)
	}

	// ---- Remove (a stopped sandbox)
	sb, err = m.CreateSandbox(ctx, "worker", m.WithImage("python"))
	ok("create", err)
	ok("stop", sb.Stop(ctx))
	{
		err := m.RemoveSandbox(ctx, "worker")

		ok("remove", err)
	}
	if _, err := m.GetSandbox(ctx, "worker"); !errors.Is(err, m.ErrNotFound) {
		t.Fatalf("after remove: %v", err)
	}

	// ---- List and inspect: one running, one stopped.
	_, err = m.CreateSandbox(ctx, "worker", m.WithImage("python"))
	ok("create worker", err)
	idle, err := m.CreateSandbox(ctx, "idle", m.WithImage("python"))
	ok("create idle", err)
	ok("stop idle", idle.Stop(ctx))
	{
		page, err := m.ListSandboxes(ctx)
		for _, handle := range page.Sandboxes {
			fmt.Printf("%s: %s\n", handle.Name(), handle.Status())
		}

		ok("list", err)
		listed := map[string]m.Status{}
		for _, handle := range page.Sandboxes {
			listed[handle.Name()] = handle.Status()
		}
		if len(listed) != 2 || listed["worker"] != m.StatusRunning || listed["idle"] != m.StatusStopped {
			t.Fatalf("listed %v", listed)
		}
	}
	// The filters stay.
	page, err := m.ListSandboxes(ctx, m.WithStatus(m.StatusStopped))
	ok("list stopped", err)
	if len(page.Sandboxes) != 1 || page.Sandboxes[0].Name() != "idle" || page.Sandboxes[0].ID() != idle.ID() {
		t.Fatalf("stopped ones: %d", len(page.Sandboxes))
	}
	{
		handle, err := m.GetSandbox(ctx, "worker")
		fmt.Println(handle.Status()) // "running" | "stopped" | ...

		ok("get", err)
		if handle.Status() != m.StatusRunning {
			t.Fatalf("worker's handle: %s", handle.Status())
		}
	}
	// The same sample on the stopped sandbox reads "stopped".
	ok("stop worker", worker().Stop(ctx))
	{
		handle, err := m.GetSandbox(ctx, "worker")
		fmt.Println(handle.Status()) // "running" | "stopped" | ...

		ok("get", err)
		if handle.Status() != m.StatusStopped {
			t.Fatalf("the stopped worker's handle: %s", handle.Status())
		}
		// Info is the fresh read, and the snapshot follows it.
		info, err := handle.Info(ctx)
		ok("info", err)
		if info.Status != m.StatusStopped || handle.Status() != m.StatusStopped {
			t.Fatalf("info %s, snapshot %s", info.Status, handle.Status())
		}
	}
	gone()

	// ---- Sandbox process policies
	{
		sb, err := m.CreateSandbox(ctx, "worker",
			m.WithImage("python"),
			m.WithMaxDuration(time.Hour),
			m.WithIdleTimeout(5*time.Minute),
		)

		ok("create with policies", err)
		info, err := sb.Info(ctx)
		ok("info", err)
		if info.Config.MaxDuration != time.Hour || info.Config.IdleTimeout != 5*time.Minute {
			t.Fatalf("max duration %s, idle timeout %s", info.Config.MaxDuration, info.Config.IdleTimeout)
		}
	}
}
