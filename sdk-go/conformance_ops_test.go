package burrow_test

// The conformance runner's operations: each step's call on this package.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

func (r *runner) invoke(ctx context.Context, s step) (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			if cf, ok := p.(*conformanceFailure); ok {
				o = outcome{err: cf}
				return
			}
			panic(p)
		}
	}()
	res, err := r.dispatch(ctx, s)
	return outcome{res: res, err: err}
}

func (r *runner) options(s step) []burrow.Option {
	o := map[string]any{"image": r.image}
	if opts, ok := r.value(s["options"]).(map[string]any); ok {
		for k, v := range opts {
			o[k] = v
		}
	}
	strs := func(v any) map[string]string {
		m := map[string]string{}
		for k, x := range v.(map[string]any) {
			m[k] = x.(string)
		}
		return m
	}
	out := []burrow.Option{burrow.WithImage(o["image"].(string))}
	for k, v := range o {
		switch k {
		case "cpus":
			out = append(out, burrow.WithCPUs(num(v)))
		case "memory_mb":
			out = append(out, burrow.WithMemory(uint64(num(v))))
		case "pids_limit":
			out = append(out, burrow.WithPidsLimit(uint64(num(v))))
		case "disk_mb":
			out = append(out, burrow.WithDiskMB(uint64(num(v))))
		case "best_effort_limits":
			if v.(bool) {
				out = append(out, burrow.WithBestEffortLimits())
			}
		case "default_limits":
			if !v.(bool) {
				out = append(out, burrow.WithoutDefaultLimits())
			}
		case "seccomp_allow":
			out = append(out, burrow.WithAllowSyscall(strList(v)...))
		case "env":
			out = append(out, burrow.WithEnv(strs(v)))
		case "workdir":
			out = append(out, burrow.WithWorkdir(v.(string)))
		case "labels":
			out = append(out, burrow.WithLabels(strs(v)))
		case "network":
			switch n := v.(type) {
			case bool:
				if n {
					out = append(out, burrow.WithNetwork())
				}
			case map[string]any:
				out = append(out, burrow.WithNetworkPolicy(policyOf(n)))
			}
		case "ports":
			for _, p := range v.([]any) {
				out = append(out, burrow.WithPort(p.(string)))
			}
		case "secrets":
			for _, s := range v.([]any) {
				s := s.(map[string]any)
				var headers []string
				if h, ok := s["headers"]; ok {
					headers = strList(h)
				}
				out = append(out, burrow.WithSecretInHeaders(s["name"].(string), s["value"].(string), strList(s["hosts"]), headers))
			}
		case "idle_timeout":
			out = append(out, burrow.WithIdleTimeout(secs(v)))
		case "idle_action":
			out = append(out, burrow.WithIdleAction(burrow.IdleAction(v.(string))))
		case "max_duration":
			out = append(out, burrow.WithMaxDuration(secs(v)))
		case "startup_timeout":
			out = append(out, burrow.WithStartupTimeout(secs(v)))
		case "demand_start":
			out = append(out, burrow.WithDemandStart(v.(bool)))
		case "detached":
			if v.(bool) {
				out = append(out, burrow.WithDetached())
			}
		}
	}
	return out
}

// changes are the Modify changes of a `modify` step (durations in seconds;
// null clears, as the zero value of the SDK's Set* changes does).
func (r *runner) changes(s step) []burrow.Change {
	c, _ := r.value(s["changes"]).(map[string]any)
	orZero := func(v any) float64 {
		if v == nil {
			return 0
		}
		return num(v)
	}
	strs := func(v any) []string {
		var l []string
		for _, x := range v.([]any) {
			l = append(l, x.(string))
		}
		return l
	}
	var out []burrow.Change
	for k, v := range c {
		switch k {
		case "cpus":
			out = append(out, burrow.SetCPUs(orZero(v)))
		case "memory_mb":
			out = append(out, burrow.SetMemory(uint64(orZero(v))))
		case "env_set":
			for name, x := range v.(map[string]any) {
				out = append(out, burrow.SetEnv(name, x.(string)))
			}
		case "env_unset":
			out = append(out, burrow.UnsetEnv(strs(v)...))
		case "labels_set":
			for name, x := range v.(map[string]any) {
				out = append(out, burrow.SetLabel(name, x.(string)))
			}
		case "labels_unset":
			out = append(out, burrow.UnsetLabels(strs(v)...))
		case "idle_timeout":
			out = append(out, burrow.SetIdleTimeout(time.Duration(orZero(v)*float64(time.Second))))
		case "idle_action":
			out = append(out, burrow.SetIdleAction(burrow.IdleAction(v.(string))))
		case "max_duration":
			out = append(out, burrow.SetMaxDuration(time.Duration(orZero(v)*float64(time.Second))))
		case "network":
			switch n := v.(type) {
			case bool:
				out = append(out, burrow.SetNetwork(n))
			case map[string]any:
				out = append(out, burrow.SetNetworkPolicy(policyOf(n)))
			}
		default:
			panic(failf("unknown change %s", k))
		}
	}
	return out
}

// policyOf is a case's network policy as the SDK's type.
func policyOf(m map[string]any) burrow.NetworkPolicy {
	list := func(k string) []string {
		var l []string
		for _, x := range asList(m[k]) {
			l = append(l, x.(string))
		}
		return l
	}
	return burrow.NetworkPolicy{Allow: list("allow"), Deny: list("deny")}
}

func strList(v any) []string {
	l := []string{}
	for _, x := range asList(v) {
		l = append(l, x.(string))
	}
	return l
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func (r *runner) target(s step) any {
	name, _ := s["sandbox"].(string)
	obj, ok := r.objects[name]
	if !ok {
		panic(failf("no variable %s", name))
	}
	return obj
}

func asHandle(ctx context.Context, obj any) (*burrow.SandboxHandle, error) {
	if sb, ok := obj.(*burrow.Sandbox); ok {
		return sb.Handle(ctx)
	}
	return obj.(*burrow.SandboxHandle), nil
}

func (r *runner) dispatch(ctx context.Context, s step) (*result, error) {
	op := s["op"].(string)
	name, _ := r.value(s["name"]).(string)
	sandbox := func(sb *burrow.Sandbox, err error) (*result, error) { return &result{"sandbox", sb}, err }
	handle := func(h *burrow.SandboxHandle, err error) (*result, error) { return &result{"handle", h}, err }
	info := func(i burrow.SandboxInfo, err error) (*result, error) { return &result{"info", i}, err }
	none := func(err error) (*result, error) { return &result{kind: "none"}, err }
	switch op {
	case "create":
		if opts, _ := s["options"].(map[string]any); opts != nil && opts["replace"] == true {
			return sandbox(burrow.ReplaceSandbox(ctx, name, r.options(s)...))
		}
		return sandbox(burrow.CreateSandbox(ctx, name, r.options(s)...))
	case "connect_or_create":
		return sandbox(burrow.ConnectOrCreateSandbox(ctx, name, r.options(s)...))
	case "define":
		return handle(burrow.DefineSandbox(ctx, name, r.options(s)...))
	case "get":
		return handle(burrow.GetSandbox(ctx, name))
	case "get_by_id":
		return handle(burrow.GetSandboxByID(ctx, r.value(s["id"]).(string)))
	case "list":
		var filters []burrow.ListOption
		if st, ok := s["status"].([]any); ok {
			var ss []burrow.Status
			for _, x := range st {
				ss = append(ss, burrow.Status(x.(string)))
			}
			filters = append(filters, burrow.WithStatus(ss...))
		}
		if l, ok := r.value(s["labels"]).(map[string]any); ok {
			for k, v := range l {
				filters = append(filters, burrow.WithLabel(k, v.(string)))
			}
		}
		page, err := burrow.ListSandboxes(ctx, filters...)
		return &result{"list", page.Sandboxes}, err
	case "remove":
		if _, ok := s["name"]; ok {
			return none(burrow.RemoveSandbox(ctx, name))
		}
		h, err := asHandle(ctx, r.target(s))
		if err != nil {
			return nil, err
		}
		return none(h.Remove(ctx))
	case "get_snapshot":
		snap, err := burrow.GetSnapshot(ctx, r.value(s["snapshot"]).(string))
		return &result{"value", snapshotValue(snap)}, err
	case "list_snapshots":
		all, err := burrow.Snapshots(ctx)
		names := []any{}
		for _, x := range all {
			names = append(names, x.Name)
		}
		return &result{"value", names}, err
	case "remove_snapshot":
		return none(burrow.RemoveSnapshot(ctx, r.value(s["snapshot"]).(string)))
	case "create_pool":
		pool, err := burrow.CreatePool(ctx, r.value(s["pool"]).(string), r.size(s), r.options(s)...)
		return &result{"value", poolValue(pool)}, err
	case "get_pool":
		pool, err := burrow.GetPool(ctx, r.value(s["pool"]).(string))
		return &result{"value", poolValue(pool)}, err
	case "list_pools":
		all, err := burrow.ListPools(ctx)
		names := []any{}
		for _, x := range all {
			names = append(names, x.Name)
		}
		return &result{"value", names}, err
	case "scale_pool":
		pool, err := burrow.ScalePool(ctx, r.value(s["pool"]).(string), r.size(s))
		return &result{"value", poolValue(pool)}, err
	case "remove_pool":
		return none(burrow.RemovePool(ctx, r.value(s["pool"]).(string)))
	case "wait":
		p := r.objects[s["process"].(string)].(*spawned)
		st, err := p.proc.Wait()
		return &result{"exec", collected{p.stdout.Bytes(), p.stderr.Bytes(), st, false}}, err
	case "connect_or_start":
		if _, ok := s["name"]; ok {
			h, err := burrow.GetSandbox(ctx, name)
			if err != nil {
				return nil, err
			}
			return sandbox(h.ConnectOrStart(ctx))
		}
	}

	t := r.target(s)
	l := t.(interface {
		lifecycle
		Status() burrow.Status
		Stop(context.Context, ...burrow.StopOption) error
		Kill(context.Context) error
		RequestDrain(context.Context) error
		Pause(context.Context) (burrow.SandboxInfo, error)
		Resume(context.Context) (burrow.SandboxInfo, error)
		WaitUntilStopped(context.Context) (burrow.SandboxInfo, error)
		WaitForStatus(context.Context, ...burrow.Status) (burrow.SandboxInfo, error)
		Touch(context.Context) error
		Modify(context.Context, ...burrow.Change) (burrow.ModifyPlan, error)
		Destroy(context.Context) error
		FollowLogs(context.Context, func(burrow.LogLine) bool, ...burrow.LogOption) error
		Snapshot(context.Context, string, ...burrow.SnapshotOption) (burrow.SnapshotInfo, error)
	})
	// Stop, Kill, RequestDrain and Detach answer only an error: the record
	// a case checks is read after them.
	then := func(err error) (*result, error) {
		if err != nil {
			return nil, err
		}
		return info(l.Info(ctx))
	}
	withHandle := func(f func(*burrow.SandboxHandle) (*burrow.Sandbox, error)) (*result, error) {
		h, err := asHandle(ctx, t)
		if err != nil {
			return nil, err
		}
		return sandbox(f(h))
	}
	switch op {
	case "handle":
		return handle(asHandle(ctx, t))
	case "info":
		return info(l.Info(ctx))
	case "status":
		// A fresh read (Status() is the snapshot of the last record seen).
		i, err := l.Info(ctx)
		return &result{"value", string(i.Status)}, err
	case "config":
		i, err := l.Info(ctx)
		return &result{"value", neutralConfig(i.Config)}, err
	case "start":
		return withHandle(func(h *burrow.SandboxHandle) (*burrow.Sandbox, error) { return h.Start(ctx) })
	case "connect":
		return withHandle(func(h *burrow.SandboxHandle) (*burrow.Sandbox, error) { return h.Connect(ctx) })
	case "connect_or_start":
		return withHandle(func(h *burrow.SandboxHandle) (*burrow.Sandbox, error) { return h.ConnectOrStart(ctx) })
	case "restart":
		if sb, ok := t.(*burrow.Sandbox); ok {
			return info(sb.Restart(ctx))
		}
		return sandbox(t.(*burrow.SandboxHandle).Restart(ctx))
	case "stop":
		var opts []burrow.StopOption
		if g, ok := s["grace"]; ok {
			opts = append(opts, burrow.WithGrace(secs(g)))
		}
		return then(l.Stop(ctx, opts...))
	case "kill":
		return then(l.Kill(ctx))
	case "request_drain":
		return then(l.RequestDrain(ctx))
	case "pause":
		return info(l.Pause(ctx))
	case "resume":
		return info(l.Resume(ctx))
	case "wait_until_stopped":
		return info(l.WaitUntilStopped(ctx))
	case "touch":
		return none(l.Touch(ctx))
	case "modify":
		p, err := l.Modify(ctx, r.changes(s)...)
		return &result{"plan", p}, err
	case "wait_for_status":
		var ss []burrow.Status
		for _, x := range s["statuses"].([]any) {
			ss = append(ss, burrow.Status(x.(string)))
		}
		wctx := ctx
		if to, ok := s["timeout"]; ok {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, secs(num(to)*r.scale))
			defer cancel()
		}
		return info(l.WaitForStatus(wctx, ss...))
	case "destroy":
		return none(l.Destroy(ctx))
	case "snapshot":
		var opts []burrow.SnapshotOption
		if k, ok := s["kind"].(string); ok {
			opts = append(opts, burrow.WithSnapshotKind(burrow.SnapshotKind(k)))
		}
		snap, err := l.Snapshot(ctx, r.value(s["snapshot"]).(string), opts...)
		return &result{"value", snapshotValue(snap)}, err
	case "fork":
		// The copies' names, in order (bound by connect_or_start by name).
		var opts []burrow.ForkOption
		if n, ok := s["count"]; ok {
			opts = append(opts, burrow.WithForkCount(int(num(n))))
		}
		if ns, ok := s["names"].([]any); ok {
			var names []string
			for _, n := range ns {
				names = append(names, n.(string))
			}
			opts = append(opts, burrow.WithForkNames(names...))
		}
		names := []any{}
		var err error
		switch x := t.(type) {
		case *burrow.Sandbox:
			var copies []*burrow.Sandbox
			copies, err = x.Fork(ctx, opts...)
			for _, c := range copies {
				names = append(names, c.Name())
			}
		case *burrow.SandboxHandle:
			var copies []*burrow.SandboxHandle
			copies, err = x.Fork(ctx, opts...)
			for _, c := range copies {
				names = append(names, c.Name())
			}
		default:
			return nil, fmt.Errorf("fork of a %T", t)
		}
		return &result{"value", names}, err
	case "follow_logs":
		// The stream ends by itself when the followed run ends; past the
		// step's bound the context ends it (a timeout error).
		limit := followTimeout
		if to, ok := s["timeout"]; ok {
			limit = num(to)
		}
		fctx, cancel := context.WithTimeout(ctx, secs(limit*r.scale))
		defer cancel()
		var opts []burrow.LogOption
		if src, ok := s["source"].(string); ok {
			opts = append(opts, burrow.WithSource(burrow.LogSource(src)))
		}
		texts := []any{}
		err := l.FollowLogs(fctx, func(line burrow.LogLine) bool {
			texts = append(texts, line.Text)
			return true
		}, opts...)
		return &result{"value", texts}, err
	}

	sb, ok := t.(*burrow.Sandbox)
	if !ok {
		return nil, failf("%s needs a live sandbox, %v is a handle", op, s["sandbox"])
	}
	path, _ := r.value(s["path"]).(string)
	fs := sb.FS()
	switch op {
	case "detach":
		if err := sb.Detach(ctx); err != nil {
			return nil, err
		}
		return info(sb.Info(ctx))
	case "ping":
		p, err := sb.Ping(ctx)
		return &result{"value", p.Latency.Seconds()}, err
	case "exec", "spawn":
		var argv []string
		switch a := r.value(s["argv"]).(type) {
		case string:
			argv = []string{"sh", "-c", a}
		case []any:
			argv = []string{}
			for _, x := range a {
				argv = append(argv, x.(string))
			}
		}
		var opts []burrow.ExecOption
		if env, ok := r.value(s["env"]).(map[string]any); ok {
			m := map[string]string{}
			for k, v := range env {
				m[k] = v.(string)
			}
			opts = append(opts, burrow.WithExecEnv(m))
		}
		if cwd, ok := r.value(s["cwd"]).(string); ok {
			opts = append(opts, burrow.WithDir(cwd))
		}
		if to, ok := s["timeout"]; ok {
			opts = append(opts, burrow.WithTimeout(secs(to)))
		}
		if op == "exec" {
			if in, ok := r.value(s["stdin"]).(string); ok {
				opts = append(opts, burrow.WithStdin(strings.NewReader(in)))
			}
			if limit, ok := r.value(s["output_limit"]).(float64); ok {
				opts = append(opts, burrow.WithOutputLimit(int(limit)))
			}
			out, err := sb.Exec(ctx, argv, opts...)
			if err != nil {
				return nil, err
			}
			return &result{"exec", collected{out.Stdout, out.Stderr, out.ExitStatus, out.Truncated}}, nil
		}
		p := &spawned{}
		opts = append(opts, burrow.WithStdout(&p.stdout), burrow.WithStderr(&p.stderr))
		// The process outlives this step: its context is the case's.
		proc, err := sb.Spawn(ctx, argv, opts...)
		p.proc = proc
		return &result{"process", p}, err
	case "fs_write":
		return none(fs.WriteFile(ctx, path, []byte(r.value(s["data"]).(string)), 0))
	case "fs_read":
		b, err := fs.ReadFile(ctx, path)
		return &result{"value", string(b)}, err
	case "fs_write_stream":
		chunks := 1
		if n, ok := r.value(s["chunks"]).(float64); ok {
			chunks = int(n)
		}
		w, err := fs.OpenWrite(ctx, path)
		if err != nil {
			return nil, err
		}
		for _, piece := range splitChunks([]byte(r.value(s["data"]).(string)), chunks) {
			if _, err := w.Write(piece); err != nil {
				_ = w.Close()
				return nil, err
			}
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return &result{"value", float64(w.Written())}, nil
	case "fs_read_stream":
		rd, err := fs.OpenRead(ctx, path)
		if err != nil {
			return nil, err
		}
		defer rd.Close()
		var b strings.Builder
		_, err = io.Copy(&b, rd)
		return &result{"value", b.String()}, err
	case "fs_exists":
		b, err := fs.Exists(ctx, path)
		return &result{"value", b}, err
	case "fs_mkdir":
		if s["parents"] == true {
			return none(fs.MkdirAll(ctx, path))
		}
		return none(fs.Mkdir(ctx, path))
	case "fs_list":
		entries, err := fs.ReadDir(ctx, path)
		return &result{"list", entries}, err
	}
	return nil, failf("unknown op %s", op)
}

// splitChunks cuts data into chunks pieces of ceil(len / chunks) bytes
// (the last one shorter; none for empty data), as every interpreter cuts
// an fs_write_stream's data.
func splitChunks(data []byte, chunks int) [][]byte {
	size := max(1, (len(data)+max(1, chunks)-1)/max(1, chunks))
	var out [][]byte
	for i := 0; i < len(data); i += size {
		out = append(out, data[i:min(i+size, len(data))])
	}
	return out
}

// snapshotValue is a snapshot as the cases see it: the core's field names.
func snapshotValue(s burrow.SnapshotInfo) map[string]any {
	return map[string]any{
		"name": s.Name, "kind": string(s.Kind), "image": s.Image, "digest": s.Digest,
		"size": float64(s.Size), "source_id": s.SourceID, "source_name": s.SourceName,
		"base_image": s.BaseImage, "driver": string(s.Driver),
		"created_at_ms": float64(s.CreatedAt.UnixMilli()),
	}
}

// size is a pool step's size (a JSON number).
func (r *runner) size(s step) int {
	return int(r.value(s["size"]).(float64))
}

// poolValue is a pool as the cases see it: the core's field names (its
// configuration as an info's).
func poolValue(p burrow.PoolInfo) map[string]any {
	var refill any
	if p.LastRefill != nil {
		refill = float64(p.LastRefill.Milliseconds())
	}
	return map[string]any{
		"name": p.Name, "config": neutralConfig(p.Config), "size": float64(p.Size),
		"warm": float64(p.Warm), "starting": float64(p.Starting), "claims": float64(p.Claims),
		"misses": float64(p.Misses), "last_refill_ms": refill,
		"created_at_ms": float64(p.CreatedAt.UnixMilli()),
	}
}
