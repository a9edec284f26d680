package burrow

import "context"

// ForkOption changes a Fork.
type ForkOption func(op)

// WithForkCount makes n copies (default 1, or one per name).
func WithForkCount(n int) ForkOption {
	return func(o op) { o["count"] = n }
}

// WithForkNames names the copies (default "<name>-fork-<n>").
func WithForkNames(names ...string) ForkOption {
	return func(o op) { o["names"] = names }
}

// WithForkDetached lets the copies survive this process (as a detached
// create's).
func WithForkDetached() ForkOption {
	return func(o op) { o["detached"] = true }
}

// forkHandles forks the running sandbox; the copies' handles, in order.
func (t *target) forkHandles(ctx context.Context, opts []ForkOption) ([]*SandboxHandle, error) {
	o := op{"op": "fork"}
	for _, f := range opts {
		f(o)
	}
	ws, err := get[[]wireInfo](ctx, t, o)
	if err != nil {
		return nil, err
	}
	out := make([]*SandboxHandle, 0, len(ws))
	for _, w := range ws {
		_, obj, err := call(ctx, nil, op{"op": "bind", "id": w.ID, "name": w.Name, "status": w.Status}, nil)
		h, err := handleOf(obj, err)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// Fork copies the running sandbox into new sandboxes, each started, and
// returns them in order: WithForkCount copies (default 1, or one per name)
// named WithForkNames (default "<name>-fork-<n>"). A vm sandbox is copied
// whole (memory, processes and files; each copy has its own id, hostname,
// machine id and random state) and stops only for the save; a container
// is copied by its files (its processes are not copied: each copy runs
// its image's command afresh). All or nothing: a taken name is
// ErrAlreadyExists and no copy is left; a sandbox that is not running,
// ErrInvalidState.
func (s *Sandbox) Fork(ctx context.Context, opts ...ForkOption) ([]*Sandbox, error) {
	handles, err := s.forkHandles(ctx, opts)
	if err != nil {
		return nil, err
	}
	out := make([]*Sandbox, 0, len(handles))
	for _, h := range handles {
		sb, err := h.Connect(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, nil
}

// Fork forks the running sandbox (see Sandbox.Fork); the copies' handles.
func (h *SandboxHandle) Fork(ctx context.Context, opts ...ForkOption) ([]*SandboxHandle, error) {
	return h.forkHandles(ctx, opts)
}
