package burrow

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// ExecOption configures Exec and Spawn.
type ExecOption func(*execConfig)

type execConfig struct {
	env     map[string]string
	dir     string
	timeout time.Duration
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	// limit is the output limit of Exec; -1: none.
	limit int
}

// WithExecEnv adds environment variables of the command.
func WithExecEnv(env map[string]string) ExecOption {
	return func(c *execConfig) {
		if c.env == nil {
			c.env = map[string]string{}
		}
		for k, v := range env {
			c.env[k] = v
		}
	}
}

// WithDir is the command's working directory (absolute).
func WithDir(dir string) ExecOption { return func(c *execConfig) { c.dir = dir } }

// WithTimeout kills the command after d (ExitStatus.TimedOut is then set).
func WithTimeout(d time.Duration) ExecOption { return func(c *execConfig) { c.timeout = d } }

// WithStdin is the command's standard input, read to its end.
func WithStdin(r io.Reader) ExecOption { return func(c *execConfig) { c.stdin = r } }

// WithStdout receives the command's standard output as it is written
// (Spawn).
func WithStdout(w io.Writer) ExecOption { return func(c *execConfig) { c.stdout = w } }

// WithStderr receives the command's standard error as it is written
// (Spawn).
func WithStderr(w io.Writer) ExecOption { return func(c *execConfig) { c.stderr = w } }

// WithOutputLimit keeps at most n bytes of each of stdout and stderr in
// the result of Exec (the rest is read and dropped; the command runs to its
// end); ExecResult.Truncated says whether any was dropped. Exec only.
func WithOutputLimit(n int) ExecOption { return func(c *execConfig) { c.limit = n } }

func execOp(name string, argv []string, c *execConfig) op {
	o := op{"op": name, "argv": argv}
	if c.env != nil {
		o["env"] = c.env
	}
	if c.dir != "" {
		o["cwd"] = c.dir
	}
	if c.timeout > 0 {
		o["timeout"] = c.timeout.Seconds()
	}
	return o
}

func execConfigOf(opts []ExecOption) *execConfig {
	c := &execConfig{limit: -1}
	for _, f := range opts {
		f(c)
	}
	return c
}

// Exec runs argv in the sandbox and returns its output once it ends.
// Cancelling ctx kills the command in the guest.
func (s *Sandbox) Exec(ctx context.Context, argv []string, opts ...ExecOption) (*ExecResult, error) {
	c := execConfigOf(opts)
	var data []byte
	if c.stdin != nil {
		var err error
		if data, err = io.ReadAll(c.stdin); err != nil {
			return nil, err
		}
	}
	o := execOp("exec", argv, c)
	if c.limit >= 0 {
		o["output_limit"] = c.limit
	}
	raw, _, err := s.do(ctx, o, data)
	if err != nil {
		return nil, err
	}
	var w struct {
		Stdout    []byte `json:"stdout"`
		Stderr    []byte `json:"stderr"`
		Truncated bool   `json:"truncated"`
		wireExit
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, malformed(err)
	}
	return &ExecResult{Stdout: w.Stdout, Stderr: w.Stderr, Truncated: w.Truncated, ExitStatus: w.status()}, nil
}

// Process is a command started by Spawn. Its output goes to the writers
// given to Spawn as it is written; Wait returns how it ended.
type Process struct {
	obj    *object
	done   chan struct{}
	status ExitStatus
	err    error
	stdin  sync.WaitGroup
}

// Spawn starts argv in the sandbox with streamed output (WithStdout,
// WithStderr; output without a writer is discarded) and input
// (WithStdin: copied until its end, then the command's stdin is closed;
// without it, stdin is closed at once). As with exec.CommandContext,
// cancelling ctx kills the command.
func (s *Sandbox) Spawn(ctx context.Context, argv []string, opts ...ExecOption) (*Process, error) {
	c := execConfigOf(opts)
	o := execOp("spawn", argv, c)
	o["keep_stdin"] = c.stdin != nil
	_, obj, err := s.do(ctx, o, nil)
	if err != nil {
		return nil, err
	}
	p := &Process{obj: obj, done: make(chan struct{})}
	if c.stdin != nil {
		p.stdin.Add(1)
		go p.feed(ctx, c.stdin)
	}
	go p.pump(ctx, c.stdout, c.stderr)
	return p, nil
}

// feed copies r to the command's stdin, then closes it.
func (p *Process) feed(ctx context.Context, r io.Reader) {
	defer p.stdin.Done()
	buf := make([]byte, 64*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, _, werr := call(ctx, p.obj, op{"op": "write"}, buf[:n]); werr != nil {
				return // the process has ended, or ctx
			}
		}
		if err != nil {
			break
		}
	}
	_, _, _ = call(context.WithoutCancel(ctx), p.obj, op{"op": "close_stdin"}, nil)
}

// pump reads the process's events until its exit.
func (p *Process) pump(ctx context.Context, stdout, stderr io.Writer) {
	defer close(p.done)
	killed := false
	for {
		next := ctx
		if killed {
			next = context.WithoutCancel(ctx) // collect the exit of the kill
		}
		raw, _, err := call(next, p.obj, op{"op": "next"}, nil)
		if err != nil {
			if ctx.Err() != nil && !killed {
				// As exec.CommandContext: the context's end kills it.
				killed = true
				_, _, _ = call(context.WithoutCancel(ctx), p.obj, op{"op": "signal", "signal": 9}, nil)
				continue
			}
			p.err = err
			return
		}
		if string(raw) == "null" {
			return
		}
		var ev struct {
			Kind string `json:"kind"`
			Data []byte `json:"data"`
			wireExit
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			p.err = malformed(err)
			return
		}
		switch ev.Kind {
		case "stdout":
			if stdout != nil {
				_, _ = stdout.Write(ev.Data)
			}
		case "stderr":
			if stderr != nil {
				_, _ = stderr.Write(ev.Data)
			}
		case "exit":
			p.status = ev.status()
			if killed && p.err == nil {
				p.err = context.Cause(ctx)
			}
		}
	}
}

// Wait waits for the command to end and returns how it ended. If the
// context given to Spawn ended first, the command was killed and the
// error is the context's.
func (p *Process) Wait() (ExitStatus, error) {
	<-p.done
	p.stdin.Wait()
	return p.status, p.err
}

// Signal sends a signal to the command (9 is SIGKILL, 15 SIGTERM).
func (p *Process) Signal(ctx context.Context, sig int) error {
	_, _, err := call(ctx, p.obj, op{"op": "signal", "signal": sig}, nil)
	return err
}

// Kill kills the command (SIGKILL).
func (p *Process) Kill(ctx context.Context) error { return p.Signal(ctx, 9) }
