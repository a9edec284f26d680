package burrow

import (
	"context"
	"encoding/json"
	"time"
)

// Sandbox is a running sandbox, bound to one id and to the run it was
// connected to. It never acts on another sandbox: if the name now holds a
// new one, calls fail with ErrSandboxReplaced (or ErrNotFound).
//
// An attached sandbox (created without WithDetached) stops when this
// process exits, however it exits.
type Sandbox struct {
	target
	generation uint64
}

// SandboxHandle is a metadata handle of one sandbox id; the sandbox may be
// stopped. Its calls act on the sandbox's current run.
type SandboxHandle struct {
	target
}

// Handle is the former name of SandboxHandle.
//
// Deprecated: use SandboxHandle.
type Handle = SandboxHandle

// ID is the sandbox's id.
func (t *target) ID() string { return t.id }

// Name is the sandbox's name.
func (t *target) Name() string { return t.name }

// Generation is the run this value is bound to.
func (s *Sandbox) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// Info reads the sandbox's record (a fresh read; Status() becomes its
// status).
func (t *target) Info(ctx context.Context) (SandboxInfo, error) {
	return t.info(ctx, op{"op": "info"})
}

// Status is the status this value last saw, without a call: the one it
// was made with (by a lookup, a list, a start), updated by every call of
// this value that reads the record (Info, Stop, Kill, RequestDrain,
// Detach, Pause, Resume, the waits, Modify, Restart). Info(ctx).Status is
// a fresh read.
func (t *target) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status
}

// Stop stops the sandbox gracefully (a no-op when it is not running).
// Status() is then the status it stopped in; Info reads the record.
func (t *target) Stop(ctx context.Context, opts ...StopOption) error {
	return t.stop(ctx, opts)
}

// Kill stops the sandbox at once.
func (t *target) Kill(ctx context.Context) error {
	_, err := t.info(ctx, op{"op": "kill"})
	return err
}

// RequestDrain refuses new work and stops the sandbox once its in-flight
// work has finished (Status() is then StatusDraining, or StatusStopped
// when nothing was in flight).
func (t *target) RequestDrain(ctx context.Context) error {
	_, err := t.info(ctx, op{"op": "request_drain"})
	return err
}

// WaitForStatus waits until the sandbox is in one of the statuses (bound
// it with the context's deadline).
func (t *target) WaitForStatus(ctx context.Context, statuses ...Status) (SandboxInfo, error) {
	return t.waitForStatus(ctx, statuses)
}

// WaitUntilStopped waits until the current run ends.
func (t *target) WaitUntilStopped(ctx context.Context) (SandboxInfo, error) {
	return t.info(ctx, op{"op": "wait_until_stopped"})
}

// Pause freezes the sandbox; work is refused until Resume.
func (t *target) Pause(ctx context.Context) (SandboxInfo, error) {
	return t.info(ctx, op{"op": "pause"})
}

// Resume thaws a paused sandbox.
func (t *target) Resume(ctx context.Context) (SandboxInfo, error) {
	return t.info(ctx, op{"op": "resume"})
}

// Touch counts as activity (it resets the idle clock).
func (t *target) Touch(ctx context.Context) error { return t.unit(ctx, op{"op": "touch"}) }

// Modify changes the configuration; the plan says where each change
// lands. A change is a ModifyOptions or a Set/Unset function:
//
//	plan, err := sb.Modify(ctx, burrow.ModifyOptions{CPUs: 4, MemoryMiB: 4096})
//	plan, err = sb.Modify(ctx, burrow.SetEnv("MODE", "x"), burrow.SetCPUs(0))
func (t *target) Modify(ctx context.Context, changes ...Change) (ModifyPlan, error) {
	return t.modify(ctx, changes)
}

// Metrics reads the resource usage of the running sandbox.
func (t *target) Metrics(ctx context.Context) (Metrics, error) { return t.metrics(ctx) }

// Logs reads the sandbox's log lines.
func (t *target) Logs(ctx context.Context, opts ...LogOption) ([]LogLine, error) {
	return t.logs(ctx, opts)
}

// Destroy stops the sandbox if needed and removes it for good.
func (t *target) Destroy(ctx context.Context) error { return t.unit(ctx, op{"op": "destroy"}) }

// FollowLogs calls fn with each log line as it is written, until the run
// current when the follow begins ends (the core ends the stream after that
// run's last lines; at once after the lines already written when none
// runs), fn returns false, or ctx ends (then it returns ctx's error).
func (t *target) FollowLogs(ctx context.Context, fn func(LogLine) bool, opts ...LogOption) error {
	o := op{"op": "follow_logs"}
	for _, f := range opts {
		f(o)
	}
	_, cursor, err := t.do(ctx, o, nil)
	if err != nil {
		return err
	}
	for {
		raw, _, err := call(ctx, cursor, op{"op": "next"}, nil)
		if err != nil {
			return err
		}
		if string(raw) == "null" {
			return nil
		}
		var line LogLine
		if err := json.Unmarshal(raw, &line); err != nil {
			return malformed(err)
		}
		if !fn(line) {
			return nil
		}
	}
}

// Start starts the stopped sandbox (ErrInvalidState when it runs).
func (h *SandboxHandle) Start(ctx context.Context) (*Sandbox, error) { return h.sandbox(ctx, "start") }

// Connect connects to the running sandbox (ErrInvalidState when it does
// not run).
func (h *SandboxHandle) Connect(ctx context.Context) (*Sandbox, error) {
	return h.sandbox(ctx, "connect")
}

// ConnectOrStart connects to the sandbox, starting it if it is not
// running; concurrent callers converge on one start.
func (h *SandboxHandle) ConnectOrStart(ctx context.Context) (*Sandbox, error) {
	return h.sandbox(ctx, "connect_or_start")
}

// Restart stops the sandbox if it runs and starts it again: same id, next
// generation.
func (h *SandboxHandle) Restart(ctx context.Context) (*Sandbox, error) {
	return h.sandbox(ctx, "restart")
}

// Remove removes the sandbox; it must be created, stopped or crashed.
func (h *SandboxHandle) Remove(ctx context.Context) error { return h.unit(ctx, op{"op": "remove"}) }

// Handle is the metadata handle of the same sandbox.
func (s *Sandbox) Handle(ctx context.Context) (*SandboxHandle, error) {
	_, obj, err := s.do(ctx, op{"op": "handle"}, nil)
	return handleOf(obj, err)
}

// Restart stops and starts the sandbox again; this value follows the new
// run.
func (s *Sandbox) Restart(ctx context.Context) (SandboxInfo, error) {
	info, err := s.info(ctx, op{"op": "restart"})
	if err == nil {
		s.mu.Lock()
		s.generation = info.Generation
		s.mu.Unlock()
	}
	return info, err
}

// Detach lets the sandbox outlive this process.
func (s *Sandbox) Detach(ctx context.Context) error {
	_, err := s.info(ctx, op{"op": "detach"})
	return err
}

// Ping is the outcome of a ping.
type Ping struct {
	// Latency is the round trip to the guest agent.
	Latency time.Duration
}

// Ping checks that the guest agent answers: a round trip, never counted
// as activity (Touch is).
func (s *Sandbox) Ping(ctx context.Context) (Ping, error) {
	secs, err := get[float64](ctx, &s.target, op{"op": "ping"})
	if err != nil {
		return Ping{}, err
	}
	return Ping{Latency: time.Duration(secs * float64(time.Second))}, nil
}

// FS is the file operations of the running sandbox.
func (s *Sandbox) FS() *FS { return &FS{s: s} }
