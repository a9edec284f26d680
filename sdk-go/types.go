package burrow

import (
	"encoding/json"
	"time"
)

// Status is a sandbox's status.
type Status string

// The statuses of a sandbox (docs/lifecycle.md).
const (
	StatusCreated  Status = "created"
	StatusStarting Status = "starting"
	StatusRunning  Status = "running"
	StatusDraining Status = "draining"
	StatusPaused   Status = "paused"
	StatusStopped  Status = "stopped"
	StatusCrashed  Status = "crashed"
)

// ExitReason is why a run ended.
type ExitReason string

// The reasons a run ends.
const (
	ExitStopped     ExitReason = "stopped"
	ExitKilled      ExitReason = "killed"
	ExitDrain       ExitReason = "drain"
	ExitIdleTimeout ExitReason = "idle_timeout"
	ExitMaxDuration ExitReason = "max_duration"
	ExitOwnerExited ExitReason = "owner_exited"
	ExitCompleted   ExitReason = "completed"
	ExitCrashed     ExitReason = "crashed"
	ExitStartFailed ExitReason = "start_failed"
	// ExitHibernated: reclaimed after being idle, its whole guest saved
	// (IdleHibernate); the next start resumes it.
	ExitHibernated ExitReason = "hibernated"
)

// Driver is an isolation driver.
type Driver string

// The drivers.
const (
	DriverContainer Driver = "container"
	DriverVM        Driver = "vm"
)

// IdleAction is what idle reclaim does with a sandbox.
type IdleAction string

// The idle actions.
const (
	// IdleStop stops the sandbox (the default): the next start boots it again.
	IdleStop IdleAction = "stop"
	// IdleHibernate saves the whole running guest (memory, processes,
	// device state; the vm driver) and the next start, a demand start
	// included, resumes it (exit reason ExitHibernated). Where the guest
	// cannot be saved (the container driver, the Kubernetes backend, a VM
	// with a host directory mounted, a cold-booted VM) idle reclaim stops it
	// as IdleStop does.
	IdleHibernate IdleAction = "hibernate"
)

// Runtime is an OCI runtime of the container driver.
type Runtime string

// The OCI runtimes.
const (
	RuntimeRunc  Runtime = "runc"
	RuntimeCrun  Runtime = "crun"
	RuntimeRunsc Runtime = "runsc"
)

// SandboxInfo is a sandbox's record.
type SandboxInfo struct {
	ID         string
	Name       string
	Status     Status
	Config     SandboxConfig
	Generation uint64
	Detached   bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// LastRun is the last (or current) run; nil before the first start.
	LastRun *RunInfo
}

// RunInfo is one run of a sandbox.
type RunInfo struct {
	Generation    uint64
	SupervisorPID int
	StartedAt     time.Time
	// RunningAt and EndedAt are zero until they happen.
	RunningAt time.Time
	EndedAt   time.Time
	// ExitReason is empty while the run goes on.
	ExitReason ExitReason
	Detail     string
}

// SandboxConfig is a sandbox's persisted configuration (its creator's: an
// existing configuration always wins on reuse). Zero values are unset.
type SandboxConfig struct {
	Image   string
	Driver  Driver
	Runtime Runtime
	CPUs    float64
	// MemoryMB is the memory limit in MiB.
	MemoryMB  uint64
	PidsLimit uint64
	// DiskMB is the disk limit of the writable layer in MiB.
	DiskMB uint64
	// NoDefaultLimits is true when the sandbox was created
	// WithoutDefaultLimits: the limits it left out stay unlimited. False
	// (the zero value) is the default: those took the backend's defaults.
	NoDefaultLimits bool
	// SeccompAllow are the syscalls its seccomp filter allows beyond
	// burrow's profile (WithAllowSyscall).
	SeccompAllow []string
	Env          map[string]string
	Workdir      string
	Labels       map[string]string
	Mounts       []Mount
	// Network is true when the sandbox has a network: anything public,
	// or what NetworkPolicy allows when that is set.
	Network bool
	// NetworkPolicy is the sandbox's policy (nil: none, or anything
	// public).
	NetworkPolicy *NetworkPolicy
	// Ports are the published ports, canonical ("127.0.0.1:8080:80",
	// "0.0.0.0:5353:53/udp").
	Ports []string
	// Secrets are the sandbox's secrets: each name, hosts, headers and
	// placeholder (never the value).
	Secrets     []Secret
	IdleTimeout time.Duration
	// IdleAction is what idle reclaim does (IdleStop when the record
	// leaves it out).
	IdleAction  IdleAction
	MaxDuration time.Duration
	// DemandStart is nil when it follows the idle timeout (on when set).
	DemandStart    *bool
	StartupTimeout time.Duration
}

// Mount is a host directory or a named volume made visible in the sandbox.
type Mount struct {
	// HostPath or Volume is the source.
	HostPath string
	Volume   string
	Target   string
	ReadOnly bool
}

// ExecResult is how a command ended, with its output.
type ExecResult struct {
	Stdout []byte
	Stderr []byte
	// Truncated: output went past WithOutputLimit, Stdout or Stderr holds
	// only its first bytes.
	Truncated bool
	ExitStatus
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	// ExitCode is -1 when a signal ended the process.
	ExitCode int
	// Signal is the signal that ended it, 0 if none.
	Signal int
	// TimedOut is set when the command's own timeout killed it.
	TimedOut bool
}

// Success reports whether the process exited with code 0 in time.
func (s ExitStatus) Success() bool { return s.ExitCode == 0 && !s.TimedOut }

// Metrics is the resource usage of a running sandbox; nil where the host
// does not expose a value.
type Metrics struct {
	CPUUsageNs       *uint64 `json:"cpu_usage_ns"`
	MemoryBytes      *uint64 `json:"memory_bytes"`
	MemoryLimitBytes *uint64 `json:"memory_limit_bytes"`
	IOReadBytes      *uint64 `json:"io_read_bytes"`
	IOWriteBytes     *uint64 `json:"io_write_bytes"`
	Pids             *uint64 `json:"pids"`
	// DiskBytes is what the writable layer takes on the host's disk.
	DiskBytes *uint64 `json:"disk_bytes"`
	// DiskLimitBytes is the writable layer's limit.
	DiskLimitBytes *uint64 `json:"disk_limit_bytes"`
}

// Capabilities is what a backend can do beyond the lifecycle every backend
// has (BackendCapabilities).
type Capabilities struct {
	// Pause: Pause and Resume.
	Pause bool `json:"pause"`
	// ModifyLive: live changes of a running sandbox's limits and environment.
	ModifyLive bool `json:"modify_live"`
	// Metrics: Metrics.
	Metrics bool `json:"metrics"`
	// Logs: Logs, including following.
	Logs bool `json:"logs"`
	// IdleReclaim: idle timeouts and demand start.
	IdleReclaim bool `json:"idle_reclaim"`
	// Attached: sandboxes attached to (and stopped with) their creating process.
	Attached bool `json:"attached"`
	// PersistentLayer: files written outside volumes survive a stop.
	PersistentLayer bool `json:"persistent_layer"`
	// NetworkPolicy: network policies are enforced.
	NetworkPolicy bool `json:"network_policy"`
	// PublishedPorts: published ports are served.
	PublishedPorts bool `json:"published_ports"`
	// Secrets: secrets go into the sandboxes' requests to their hosts.
	Secrets bool `json:"secrets"`
	// Snapshots: filesystem snapshots (Snapshot, "snapshot:NAME" images).
	Snapshots bool `json:"snapshots"`
	// FullSnapshots: full snapshots (memory and processes too) of running
	// sandboxes.
	FullSnapshots bool `json:"full_snapshots"`
	// Fork: forks of running sandboxes (Fork).
	Fork bool `json:"fork"`
	// Pools: warm pools (CreatePool): a create of a pool's configuration
	// claims one of its running sandboxes.
	Pools bool `json:"pools"`
}

// Secret is a secret as a configuration reads it back: never its value.
type Secret struct {
	// Name is the guest's environment variable.
	Name string `json:"name"`
	// Hosts are where its HTTP(S) requests get the value.
	Hosts []string `json:"hosts"`
	// Headers are the request headers whose values get it, as named at
	// create (empty: Authorization and Proxy-Authorization).
	Headers []string `json:"headers"`
	// Placeholder is what the guest's variable holds.
	Placeholder string `json:"placeholder"`
}

// NetworkPolicy is a sandbox's network policy: what Allow rules match and
// no Deny rule does. A rule is "[tcp:|udp:]HOST[:PORTS]" ("pypi.org",
// "*.github.com", "tcp:10.0.0.0/8:5432"); one that does not parse fails
// with ErrInvalidConfig. See docs/networking.md.
type NetworkPolicy struct {
	Allow []string `json:"allow"`
	Deny  []string `json:"deny"`
}

// wireNetwork reads the core's network: false, true, or a policy.
type wireNetwork struct {
	on     bool
	policy *NetworkPolicy
}

func (n *wireNetwork) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &n.on); err == nil {
		return nil
	}
	var p NetworkPolicy
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	n.on, n.policy = true, &p
	return nil
}

// FileKind is the kind of a path in the sandbox.
type FileKind string

// The kinds of paths.
const (
	KindFile    FileKind = "file"
	KindDir     FileKind = "dir"
	KindSymlink FileKind = "symlink"
	KindOther   FileKind = "other"
)

// DirEntry is one directory entry.
type DirEntry struct {
	Name string   `json:"name"`
	Kind FileKind `json:"kind"`
	Size uint64   `json:"size"`
}

// FileStat is the metadata of a path (symlinks not followed).
type FileStat struct {
	Kind       FileKind
	Size       uint64
	Mode       uint32
	UID, GID   uint32
	ModTime    time.Time
	LinkTarget string
}

// LogSource is where a log line comes from.
type LogSource string

// The log sources.
const (
	LogStdout     LogSource = "stdout"
	LogStderr     LogSource = "stderr"
	LogGuest      LogSource = "guest"
	LogSupervisor LogSource = "supervisor"
)

// LogLine is one line of a sandbox's log. TimeMs is when it was written,
// in milliseconds since the Unix epoch (nil for the guest's log).
type LogLine struct {
	Source LogSource `json:"source"`
	Text   string    `json:"text"`
	TimeMs *int64    `json:"time_ms,omitempty"`
}

// Applies is where a changed field lands.
type Applies string

// Where changes land.
const (
	AppliesLive        Applies = "live"
	AppliesFutureExecs Applies = "future_execs"
	AppliesNextStart   Applies = "next_start"
	AppliesImmediately Applies = "immediately"
)

// FieldChange is one field's change in a ModifyPlan.
type FieldChange struct {
	Field   string  `json:"field"`
	Applies Applies `json:"applies"`
	Note    string  `json:"note"`
}

// ModifyPlan is the outcome of Modify: where each change lands, and the
// record after it.
type ModifyPlan struct {
	Changes []FieldChange
	Info    SandboxInfo
}

// The core's JSON records.

type wireInfo struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Status      Status     `json:"status"`
	Config      wireConfig `json:"config"`
	Generation  uint64     `json:"generation"`
	Detached    bool       `json:"detached"`
	CreatedAtMs int64      `json:"created_at_ms"`
	UpdatedAtMs int64      `json:"updated_at_ms"`
	LastRun     *wireRun   `json:"last_run"`
}

type wireRun struct {
	Generation    uint64     `json:"generation"`
	SupervisorPID *int       `json:"supervisor_pid"`
	StartedAtMs   int64      `json:"started_at_ms"`
	RunningAtMs   *int64     `json:"running_at_ms"`
	EndedAtMs     *int64     `json:"ended_at_ms"`
	ExitReason    ExitReason `json:"exit_reason"`
	Detail        string     `json:"detail"`
}

type wireConfig struct {
	Image          string            `json:"image"`
	Driver         Driver            `json:"driver"`
	Runtime        Runtime           `json:"runtime"`
	CPUs           float64           `json:"cpus"`
	MemoryMB       uint64            `json:"memory_mb"`
	PidsLimit      uint64            `json:"pids_limit"`
	DiskMB         uint64            `json:"disk_mb"`
	DefaultLimits  *bool             `json:"default_limits"`
	SeccompAllow   []string          `json:"seccomp_allow"`
	Env            map[string]string `json:"env"`
	Workdir        string            `json:"workdir"`
	Labels         map[string]string `json:"labels"`
	Mounts         []wireMount       `json:"mounts"`
	Network        wireNetwork       `json:"network"`
	Ports          []string          `json:"ports"`
	Secrets        []Secret          `json:"secrets"`
	IdleTimeoutMs  int64             `json:"idle_timeout"`
	IdleAction     IdleAction        `json:"idle_action"`
	MaxDurationMs  int64             `json:"max_duration"`
	DemandStart    *bool             `json:"demand_start"`
	StartupTimeout int64             `json:"startup_timeout"`
}

type wireMount struct {
	Source struct {
		Host   string `json:"host"`
		Volume string `json:"volume"`
	} `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms) }

func optTime(ms *int64) time.Time {
	if ms == nil {
		return time.Time{}
	}
	return time.UnixMilli(*ms)
}

func (c *wireConfig) config() SandboxConfig {
	mounts := make([]Mount, 0, len(c.Mounts))
	for _, m := range c.Mounts {
		mounts = append(mounts, Mount{HostPath: m.Source.Host, Volume: m.Source.Volume, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	idleAction := c.IdleAction
	if idleAction == "" {
		idleAction = IdleStop
	}
	return SandboxConfig{
		Image: c.Image, Driver: c.Driver, Runtime: c.Runtime, CPUs: c.CPUs,
		MemoryMB: c.MemoryMB, PidsLimit: c.PidsLimit, DiskMB: c.DiskMB,
		NoDefaultLimits: c.DefaultLimits != nil && !*c.DefaultLimits, SeccompAllow: c.SeccompAllow,
		Env: c.Env, Workdir: c.Workdir,
		Labels: c.Labels, Mounts: mounts, Network: c.Network.on,
		NetworkPolicy: c.Network.policy, Ports: c.Ports, Secrets: c.Secrets,
		IdleTimeout:    time.Duration(c.IdleTimeoutMs) * time.Millisecond,
		IdleAction:     idleAction,
		MaxDuration:    time.Duration(c.MaxDurationMs) * time.Millisecond,
		DemandStart:    c.DemandStart,
		StartupTimeout: time.Duration(c.StartupTimeout) * time.Millisecond,
	}
}

func (w *wireInfo) info() SandboxInfo {
	info := SandboxInfo{
		ID:         w.ID,
		Name:       w.Name,
		Status:     w.Status,
		Generation: w.Generation,
		Detached:   w.Detached,
		CreatedAt:  msTime(w.CreatedAtMs),
		UpdatedAt:  msTime(w.UpdatedAtMs),
		Config:     w.Config.config(),
	}
	if r := w.LastRun; r != nil {
		run := &RunInfo{
			Generation: r.Generation,
			StartedAt:  msTime(r.StartedAtMs),
			RunningAt:  optTime(r.RunningAtMs),
			EndedAt:    optTime(r.EndedAtMs),
			ExitReason: r.ExitReason,
			Detail:     r.Detail,
		}
		if r.SupervisorPID != nil {
			run.SupervisorPID = *r.SupervisorPID
		}
		info.LastRun = run
	}
	return info
}

func decodeInfo(raw json.RawMessage) (SandboxInfo, error) {
	var w wireInfo
	if err := json.Unmarshal(raw, &w); err != nil {
		return SandboxInfo{}, malformed(err)
	}
	return w.info(), nil
}

type wireExit struct {
	ExitCode *int `json:"exit_code"`
	Signal   *int `json:"signal"`
	TimedOut bool `json:"timed_out"`
}

func (w wireExit) status() ExitStatus {
	s := ExitStatus{ExitCode: -1, TimedOut: w.TimedOut}
	if w.ExitCode != nil {
		s.ExitCode = *w.ExitCode
	}
	if w.Signal != nil {
		s.Signal = *w.Signal
	}
	return s
}
