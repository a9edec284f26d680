package burrow

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Option configures a sandbox being created (CreateSandbox,
// ConnectOrCreateSandbox, ReplaceSandbox, DefineSandbox).
type Option func(op)

func set(key string, v any) Option { return func(o op) { o[key] = v } }

// WithImage is the image: a rootfs directory, an OCI layout, or an imported name.
func WithImage(image string) Option { return set("image", image) }

// WithDriver picks the isolation driver (default: the backend's).
func WithDriver(d Driver) Option { return set("driver", d) }

// WithRuntime picks the OCI runtime of the container driver.
func WithRuntime(r Runtime) Option { return set("runtime", r) }

// WithCPUs limits the CPUs (fractions allowed).
func WithCPUs(cpus float64) Option { return set("cpus", cpus) }

// WithMemory limits the memory, in MiB.
func WithMemory(mib uint64) Option { return set("memory_mb", mib) }

// WithPidsLimit limits the number of processes.
func WithPidsLimit(n uint64) Option { return set("pids_limit", n) }

// WithDiskMB limits the sandbox's writable layer (what it changes of its
// root filesystem), in MiB: 32 to 16 TiB, else ErrInvalidConfig. Past it
// the guest gets ENOSPC. The vm driver and containers run as root hold
// it; where the host cannot (an unprivileged user's container) it fails
// with ErrInvalidConfig unless WithBestEffortLimits.
func WithDiskMB(mib uint64) Option { return set("disk_mb", mib) }

// WithBestEffortLimits runs the sandbox even where its CPU, memory,
// process or disk limit cannot be enforced for this user (an unprivileged
// user without a delegated cgroup, whose containers hold no disk limit):
// such a limit is left out, instead of the create failing with
// ErrInvalidConfig.
func WithBestEffortLimits() Option { return set("best_effort_limits", true) }

// WithoutDefaultLimits leaves the limits the sandbox does not name
// unlimited, instead of giving them the backend's defaults (which every
// sandbox gets unless it says this; SandboxConfig.NoDefaultLimits then
// reads true). burrow serve allows it to its default tenant only.
func WithoutDefaultLimits() Option { return set("default_limits", false) }

// WithAllowSyscall lets the sandbox's seccomp filter allow these syscalls
// beyond burrow's profile, by their x86-64 names ("io_uring_setup"). A
// name that is not one fails with ErrInvalidConfig. A microVM has no such
// filter (its guest kernel is the boundary): there it changes nothing.
// burrow serve allows it to its default tenant only. Repeatable.
func WithAllowSyscall(names ...string) Option {
	return func(o op) {
		if len(names) > 0 {
			extend(o, "seccomp_allow", names)
		}
	}
}

// merge adds kv to the string map under key.
func merge(o op, key string, kv map[string]string) {
	m, _ := o[key].(map[string]string)
	if m == nil {
		m = map[string]string{}
	}
	for k, v := range kv {
		m[k] = v
	}
	o[key] = m
}

// extend appends items to the string list under key.
func extend(o op, key string, items []string) {
	l, _ := o[key].([]string)
	o[key] = append(l, items...)
}

// WithEnv adds environment variables of every process in the sandbox.
func WithEnv(env map[string]string) Option { return func(o op) { merge(o, "env", env) } }

// WithWorkdir is the default working directory (absolute).
func WithWorkdir(dir string) Option { return set("workdir", dir) }

// WithLabels adds labels, for listing and filtering.
func WithLabels(labels map[string]string) Option { return func(o op) { merge(o, "labels", labels) } }

// WithVolume mounts a named volume (no '/') or an absolute host directory
// at target.
func WithVolume(source, target string, readOnly bool) Option {
	return func(o op) {
		v, _ := o["volumes"].([]map[string]any)
		o["volumes"] = append(v, map[string]any{"source": source, "target": target, "read_only": readOnly})
	}
}

// WithNetwork turns outbound network access on (anything public).
func WithNetwork() Option { return set("network", true) }

// WithNetworkPolicy gives the sandbox a network limited to what the policy
// allows (see NetworkPolicy).
func WithNetworkPolicy(p NetworkPolicy) Option { return set("network", p.wire()) }

// WithPort publishes a port while the sandbox runs:
// "[HOST_IP:]HOST_PORT:GUEST_PORT[/udp]" ("8080:80", 127.0.0.1 by
// default). A host address that is taken fails the start with
// ErrPortUnavailable. Repeatable.
func WithPort(mapping string) Option {
	return func(o op) {
		p, _ := o["ports"].([]string)
		o["ports"] = append(p, mapping)
	}
}

// WithSecret gives the sandbox a secret it never holds: its variable name
// holds a placeholder, which the sandbox's network stack replaces with
// value in the values of the Authorization and Proxy-Authorization
// headers of HTTP requests (HTTPS included) to hosts only
// ("api.github.com", "*.example.com", an IPv4 address); a placeholder in
// the request line or another header, or sent anywhere else, closes the
// connection. The sandbox needs a network (WithNetwork or
// WithNetworkPolicy). The value is never read back (SandboxConfig.Secrets
// has each name, hosts, headers and placeholder); a bad name, host or
// value fails with ErrInvalidConfig. Repeatable; WithSecretInHeaders
// names other headers.
func WithSecret(name, value string, hosts ...string) Option {
	return WithSecretInHeaders(name, value, hosts, nil)
}

// WithSecretInHeaders is WithSecret whose value goes in the values of the
// request headers named instead of Authorization and Proxy-Authorization:
// WithSecretInHeaders("KEY", key, []string{"api.example.com"},
// []string{"X-Api-Key"}). At most 16, each once (any case), never one
// that routes or frames a request (Host, Content-Length, ...): else
// ErrInvalidConfig. No headers: WithSecret's two. Repeatable.
func WithSecretInHeaders(name, value string, hosts, headers []string) Option {
	return func(o op) {
		s, _ := o["secrets"].([]map[string]any)
		if hosts == nil {
			hosts = []string{}
		}
		if headers == nil {
			headers = []string{}
		}
		o["secrets"] = append(s, map[string]any{"name": name, "value": value, "hosts": hosts, "headers": headers})
	}
}

func (p NetworkPolicy) wire() map[string]any {
	allow, deny := p.Allow, p.Deny
	if allow == nil {
		allow = []string{}
	}
	if deny == nil {
		deny = []string{}
	}
	return map[string]any{"allow": allow, "deny": deny}
}

// WithIdleTimeout reclaims the sandbox after this long without activity.
func WithIdleTimeout(d time.Duration) Option { return set("idle_timeout", d.Seconds()) }

// WithIdleAction is what idle reclaim does: IdleStop (the default) or
// IdleHibernate (the vm driver saves the whole guest and the next start
// resumes it; where it cannot, the sandbox is stopped).
func WithIdleAction(a IdleAction) Option { return set("idle_action", a) }

// WithMaxDuration stops each run after this long.
func WithMaxDuration(d time.Duration) Option { return set("max_duration", d.Seconds()) }

// WithStartupTimeout bounds one start.
func WithStartupTimeout(d time.Duration) Option { return set("startup_timeout", d.Seconds()) }

// WithDemandStart starts the sandbox again on the next command after an
// idle reclaim (default: on when an idle timeout is set).
func WithDemandStart(on bool) Option { return set("demand_start", on) }

// WithDetached lets the sandbox outlive this process (by default it stops
// when the process exits, however it exits).
func WithDetached() Option { return set("detached", true) }

func build(ctx context.Context, mode, name string, opts []Option) (*object, error) {
	o := op{"op": "build", "mode": mode, "name": name}
	for _, f := range opts {
		f(o)
	}
	_, obj, err := call(ctx, nil, o, nil)
	if err == nil && obj == nil {
		err = malformed(fmt.Errorf("no object"))
	}
	return obj, err
}

// CreateSandbox creates the sandbox name and starts it. It is strict: a
// taken name is ErrAlreadyExists.
func CreateSandbox(ctx context.Context, name string, opts ...Option) (*Sandbox, error) {
	return liveSandbox(build(ctx, "create", name, opts))
}

// ConnectOrCreateSandbox converges: every caller, in any process, gets the
// one sandbox of that name, started once. An existing sandbox keeps its
// own configuration.
func ConnectOrCreateSandbox(ctx context.Context, name string, opts ...Option) (*Sandbox, error) {
	return liveSandbox(build(ctx, "connect_or_create", name, opts))
}

// ReplaceSandbox destroys any sandbox of that name, then creates and
// starts a new one.
func ReplaceSandbox(ctx context.Context, name string, opts ...Option) (*Sandbox, error) {
	return liveSandbox(build(ctx, "replace", name, opts))
}

// DefineSandbox persists the sandbox without starting it.
func DefineSandbox(ctx context.Context, name string, opts ...Option) (*SandboxHandle, error) {
	return handleOf(build(ctx, "define", name, opts))
}

// StartSandbox starts the sandbox now named name, with its persisted
// configuration: it must be created, stopped or crashed (ErrInvalidState
// otherwise; ConnectOrStart of its handle converges instead).
func StartSandbox(ctx context.Context, name string) (*Sandbox, error) {
	_, obj, err := call(ctx, nil, op{"op": "start", "name": name}, nil)
	return liveSandbox(obj, err)
}

// GetSandbox is a handle of the sandbox now named name.
func GetSandbox(ctx context.Context, name string) (*SandboxHandle, error) {
	_, obj, err := call(ctx, nil, op{"op": "get", "name": name}, nil)
	return handleOf(obj, err)
}

// GetSandboxByID is a handle of exactly that sandbox.
func GetSandboxByID(ctx context.Context, id string) (*SandboxHandle, error) {
	_, obj, err := call(ctx, nil, op{"op": "get_by_id", "id": id}, nil)
	return handleOf(obj, err)
}

// ListOption filters ListSandboxes.
type ListOption func(op)

// WithStatus keeps the sandboxes in one of these statuses.
func WithStatus(statuses ...Status) ListOption {
	return func(o op) { o["statuses"] = statuses }
}

// WithLabel keeps the sandboxes carrying this label.
func WithLabel(key, value string) ListOption {
	return func(o op) { merge(o, "labels", map[string]string{key: value}) }
}

// SandboxPage is what ListSandboxes found: a handle of each sandbox, its
// Status() the one it was listed with.
type SandboxPage struct {
	Sandboxes []*SandboxHandle
}

// ListSandboxes lists the sandboxes that match (every one without a
// filter), a handle of each. A handle's Status() is the listed status;
// Info reads a fresh record.
func ListSandboxes(ctx context.Context, filters ...ListOption) (SandboxPage, error) {
	o := op{"op": "list"}
	for _, f := range filters {
		f(o)
	}
	raw, _, err := call(ctx, nil, o, nil)
	if err != nil {
		return SandboxPage{}, err
	}
	var ws []wireInfo
	if err := json.Unmarshal(raw, &ws); err != nil {
		return SandboxPage{}, malformed(err)
	}
	page := SandboxPage{Sandboxes: make([]*SandboxHandle, 0, len(ws))}
	for _, w := range ws {
		// A handle made from the record, without a lookup (each call on it
		// checks the identity).
		_, obj, err := call(ctx, nil, op{"op": "bind", "id": w.ID, "name": w.Name, "status": w.Status}, nil)
		h, err := handleOf(obj, err)
		if err != nil {
			return SandboxPage{}, err
		}
		page.Sandboxes = append(page.Sandboxes, h)
	}
	return page, nil
}

// RemoveSandbox removes the sandbox name; it must be created, stopped or
// crashed (Destroy removes a running one).
func RemoveSandbox(ctx context.Context, name string) error {
	_, _, err := call(ctx, nil, op{"op": "remove", "name": name}, nil)
	return err
}

// BackendCapabilities says what the backend can do beyond the lifecycle
// every backend has (pause, live Modify, Metrics, ...); an operation it
// lacks fails with ErrUnsupported. The local backend of an unprivileged
// user without a delegated cgroup lacks Pause.
func BackendCapabilities(ctx context.Context) (Capabilities, error) {
	var caps Capabilities
	raw, _, err := call(ctx, nil, op{"op": "capabilities"}, nil)
	if err != nil {
		return caps, err
	}
	if err := json.Unmarshal(raw, &caps); err != nil {
		return caps, malformed(err)
	}
	return caps, nil
}

// A described object of the core.
type described struct {
	Kind       string `json:"kind"`
	ID         string `json:"id"`
	Name       string `json:"name"`
	Live       bool   `json:"live"`
	Generation uint64 `json:"generation"`
	Status     Status `json:"status"`
}

func describe(obj *object) described {
	s := cDescribe(obj)
	var d described
	_ = json.Unmarshal([]byte(s), &d)
	return d
}

func liveSandbox(obj *object, err error) (*Sandbox, error) {
	if err != nil {
		return nil, err
	}
	d := describe(obj)
	return &Sandbox{target: target{obj: obj, id: d.ID, name: d.Name, status: d.Status}, generation: d.Generation}, nil
}

func handleOf(obj *object, err error) (*SandboxHandle, error) {
	if err != nil {
		return nil, err
	}
	d := describe(obj)
	return &SandboxHandle{target: target{obj: obj, id: d.ID, name: d.Name, status: d.Status}}, nil
}

func malformed(err error) error {
	return &Error{Code: ErrProtocol, Message: "a malformed answer of the core: " + err.Error()}
}

// target holds what a Sandbox and a SandboxHandle share: an object of the
// core bound to one sandbox id, and the status it was last seen in.
type target struct {
	obj      *object
	id, name string

	mu     sync.Mutex
	status Status // the snapshot: the status made with, or of the last record
}

// seen makes a fresh record's status the snapshot.
func (t *target) seen(info SandboxInfo) {
	t.mu.Lock()
	t.status = info.Status
	t.mu.Unlock()
}

func (t *target) do(ctx context.Context, o op, data []byte) (json.RawMessage, *object, error) {
	return call(ctx, t.obj, o, data)
}

func (t *target) info(ctx context.Context, o op) (SandboxInfo, error) {
	raw, _, err := t.do(ctx, o, nil)
	if err != nil {
		return SandboxInfo{}, err
	}
	info, err := decodeInfo(raw)
	if err == nil {
		t.seen(info)
	}
	return info, err
}

// get runs o and decodes its value as a T.
func get[T any](ctx context.Context, t *target, o op) (T, error) {
	var v T
	raw, _, err := t.do(ctx, o, nil)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, malformed(err)
	}
	return v, nil
}

func (t *target) unit(ctx context.Context, o op) error {
	_, _, err := t.do(ctx, o, nil)
	return err
}

func (t *target) stop(ctx context.Context, opts []StopOption) error {
	o := op{"op": "stop"}
	for _, f := range opts {
		f(o)
	}
	_, err := t.info(ctx, o)
	return err
}

func (t *target) waitForStatus(ctx context.Context, statuses []Status) (SandboxInfo, error) {
	return t.info(ctx, op{"op": "wait_for_status", "statuses": statuses})
}

func (t *target) modify(ctx context.Context, changes []Change) (ModifyPlan, error) {
	o := op{"op": "modify"}
	for _, c := range changes {
		if c != nil {
			c.change(o)
		}
	}
	raw, _, err := t.do(ctx, o, nil)
	if err != nil {
		return ModifyPlan{}, err
	}
	var w struct {
		Changes []FieldChange `json:"changes"`
		Info    wireInfo      `json:"info"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return ModifyPlan{}, malformed(err)
	}
	plan := ModifyPlan{Changes: w.Changes, Info: w.Info.info()}
	t.seen(plan.Info)
	return plan, nil
}

func (t *target) metrics(ctx context.Context) (Metrics, error) {
	return get[Metrics](ctx, t, op{"op": "metrics"})
}

func (t *target) logs(ctx context.Context, opts []LogOption) ([]LogLine, error) {
	o := op{"op": "logs"}
	for _, f := range opts {
		f(o)
	}
	return get[[]LogLine](ctx, t, o)
}

func (t *target) sandbox(ctx context.Context, name string) (*Sandbox, error) {
	_, obj, err := t.do(ctx, op{"op": name}, nil)
	return liveSandbox(obj, err)
}

// StopOption configures Stop.
type StopOption func(op)

// WithGrace is how long the guest gets between SIGTERM and SIGKILL.
func WithGrace(d time.Duration) StopOption { return func(o op) { o["grace"] = d.Seconds() } }

// Change is one change of Modify: a ModifyOptions, or one of the Set and
// Unset functions (these can also unset a limit). A field not changed
// stays as it is.
type Change interface {
	change(op)
}

// changeFunc is a Change of the Set and Unset functions.
type changeFunc func(op)

func (f changeFunc) change(o op) { f(o) }

// ModifyOptions is a Change of several fields at once, as in
//
//	plan, err := sb.Modify(ctx, burrow.ModifyOptions{CPUs: 4, MemoryMiB: 4096})
//
// A zero field leaves its value as it is (SetCPUs(0), SetMemory(0),
// SetIdleTimeout(0), SetMaxDuration(0) unset a limit).
type ModifyOptions struct {
	// CPUs is the CPU limit (fractions allowed).
	CPUs float64
	// MemoryMiB is the memory limit in MiB.
	MemoryMiB uint64
	// Env sets environment variables of the commands started from now on.
	Env map[string]string
	// Labels sets labels.
	Labels map[string]string
	// IdleTimeout is the idle timeout.
	IdleTimeout time.Duration
	// IdleAction is what idle reclaim does.
	IdleAction IdleAction
	// MaxDuration is the maximum duration of a run.
	MaxDuration time.Duration
}

func (m ModifyOptions) change(o op) {
	if m.CPUs != 0 {
		o["cpus"] = m.CPUs
	}
	if m.MemoryMiB != 0 {
		o["memory_mb"] = m.MemoryMiB
	}
	if len(m.Env) > 0 {
		merge(o, "env_set", m.Env)
	}
	if len(m.Labels) > 0 {
		merge(o, "labels_set", m.Labels)
	}
	if m.IdleTimeout != 0 {
		o["idle_timeout"] = m.IdleTimeout.Seconds()
	}
	if m.IdleAction != "" {
		o["idle_action"] = m.IdleAction
	}
	if m.MaxDuration != 0 {
		o["max_duration"] = m.MaxDuration.Seconds()
	}
}

// SetCPUs changes the CPU limit (0: unset, which gives the sandbox the
// host's default back where the host holds one).
func SetCPUs(cpus float64) Change { return changeFunc(func(o op) { o["cpus"] = nullIfZero(cpus) }) }

// SetMemory changes the memory limit in MiB (0: unset, which gives the
// sandbox the host's default back where the host holds one).
func SetMemory(mib uint64) Change {
	return changeFunc(func(o op) { o["memory_mb"] = nullIfZero(mib) })
}

// SetEnv sets an environment variable of the commands started from now on.
func SetEnv(key, value string) Change {
	return changeFunc(func(o op) { merge(o, "env_set", map[string]string{key: value}) })
}

// UnsetEnv removes environment variables.
func UnsetEnv(keys ...string) Change {
	return changeFunc(func(o op) { extend(o, "env_unset", keys) })
}

// SetLabel sets a label.
func SetLabel(key, value string) Change {
	return changeFunc(func(o op) { merge(o, "labels_set", map[string]string{key: value}) })
}

// UnsetLabels removes labels.
func UnsetLabels(keys ...string) Change {
	return changeFunc(func(o op) { extend(o, "labels_unset", keys) })
}

// SetIdleTimeout changes the idle timeout (0: none).
func SetIdleTimeout(d time.Duration) Change {
	return changeFunc(func(o op) { o["idle_timeout"] = nullIfZero(d.Seconds()) })
}

// SetNetwork changes the network to anything public (true) or none
// (false); a running sandbox's changes at once.
func SetNetwork(on bool) Change { return changeFunc(func(o op) { o["network"] = on }) }

// SetNetworkPolicy changes the network to a policy; a running sandbox's
// changes at once (connections it forbids are closed).
func SetNetworkPolicy(p NetworkPolicy) Change {
	return changeFunc(func(o op) { o["network"] = p.wire() })
}

// SetIdleAction changes what idle reclaim does (IdleStop is the default).
func SetIdleAction(a IdleAction) Change { return changeFunc(func(o op) { o["idle_action"] = a }) }

// SetMaxDuration changes the maximum duration of a run (0: none).
func SetMaxDuration(d time.Duration) Change {
	return changeFunc(func(o op) { o["max_duration"] = nullIfZero(d.Seconds()) })
}

func nullIfZero[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// LogOption configures Logs and FollowLogs.
type LogOption func(op)

// WithTail starts from the last n lines.
func WithTail(n int) LogOption { return func(o op) { o["tail"] = n } }

// WithSource keeps the lines of one source.
func WithSource(s LogSource) LogOption { return func(o op) { o["source"] = s } }
