// The SDK's types: the records, options and units of the API (re-exported
// by index.ts).

/** A sandbox's status. */
export type Status =
  | "created"
  | "starting"
  | "running"
  | "draining"
  | "paused"
  | "stopped"
  | "crashed";

/** Why a run ended. */
export type ExitReason =
  | "stopped"
  | "killed"
  | "drain"
  | "idle_timeout"
  | "max_duration"
  | "owner_exited"
  | "completed"
  | "crashed"
  | "start_failed"
  /** Reclaimed after being idle, its whole guest saved (`idleAction("hibernate")`): the next start resumes it. */
  | "hibernated";

/** An isolation driver. */
export type Driver = "container" | "vm";

/**
 * What idle reclaim does: `"stop"` (the default; the next start boots it
 * again) or `"hibernate"` (the vm driver saves the whole running guest,
 * memory, processes and device state, and the next start, a demand start
 * included, resumes it; where the guest cannot be saved, as under the
 * container driver, on the Kubernetes backend, for a VM with a host
 * directory mounted or a cold-booted VM, idle reclaim stops it as with
 * `"stop"`).
 */
export type IdleAction = "stop" | "hibernate";

/** An OCI runtime of the container driver. */
export type Runtime = "runc" | "crun" | "runsc";

/** A directory made visible inside the sandbox. */
export interface Mount {
  /** A host directory, or a named volume under the burrow home. */
  source: { host: string } | { volume: string };
  target: string;
  readOnly: boolean;
}

/**
 * A sandbox's persisted configuration (the creator's: an existing
 * configuration always wins on reuse). Durations are seconds; `null` is
 * unset.
 */
/** A secret as a configuration reads back: never its value. */
export interface SecretRecord {
  /** The guest's variable. */
  name: string;
  /** The hosts whose HTTP(S) requests get the value. */
  hosts: string[];
  /**
   * The request headers whose values get it, as named at create (empty:
   * `Authorization` and `Proxy-Authorization`).
   */
  headers: string[];
  /** What the guest's variable holds. */
  placeholder: string | null;
}

/** Options of a builder's `secret(name, value, hosts, options)`. */
export interface SecretOptions {
  /**
   * The request headers whose values get the value, in place of
   * `Authorization` and `Proxy-Authorization` (`["X-Api-Key"]`): at most
   * 16, each once (any case), never one that routes or frames a request
   * (`Host`, `Content-Length`, ...: `InvalidConfigError` at create).
   */
  headers?: string[];
}

export interface SandboxConfig {
  image: string;
  /** The driver the backend recorded (null only in records older than drivers). */
  driver: Driver | null;
  runtime: Runtime;
  cpus: number | null;
  /** MiB. */
  memory: number | null;
  pidsLimit: number | null;
  /** Disk limit of the writable layer, MiB. */
  diskMb: number | null;
  /** Whether the limits left out took the backend's defaults (`true` unless the creator said otherwise). */
  defaultLimits: boolean;
  /** Syscalls the seccomp filter allows beyond burrow's profile. */
  seccompAllow: string[];
  env: Record<string, string>;
  workdir: string | null;
  labels: Record<string, string>;
  mounts: Mount[];
  /** `false`, `true` (anything public) or the policy. */
  network: boolean | NetworkPolicy;
  /** Published ports, canonical (`"127.0.0.1:8080:80"`, `"0.0.0.0:5353:53/udp"`). */
  ports: string[];
  /** Secrets: each name, hosts, headers and placeholder (never the value). */
  secrets: SecretRecord[];
  /** Seconds. */
  idleTimeout: number | null;
  /** What idle reclaim does (`"stop"` when the record leaves it out). */
  idleAction: IdleAction;
  /** Seconds. */
  maxDuration: number | null;
  /** Null: on when an idle timeout is set. */
  demandStart: boolean | null;
  /** Seconds. */
  startupTimeout: number;
}

/** A run of a sandbox. */
export interface RunInfo {
  generation: number;
  supervisorPid: number | null;
  startedAt: Date;
  runningAt: Date | null;
  endedAt: Date | null;
  exitReason: ExitReason | null;
  detail: string | null;
}

/** A sandbox's record. */
export interface SandboxInfo {
  id: string;
  name: string;
  status: Status;
  config: SandboxConfig;
  generation: number;
  detached: boolean;
  createdAt: Date;
  updatedAt: Date;
  /** The last (or current) run; null before the first start. */
  lastRun: RunInfo | null;
}

/** The filter of `Sandbox.list` (every field optional). */
export interface ListFilter {
  /** Only these statuses. */
  status?: Status | Status[];
  /** Only sandboxes with all of these labels. */
  labels?: Record<string, string>;
}

/** The answer of `ping`. */
export interface Ping {
  /** The round trip, in seconds. */
  latency: number;
}

/** Where a changed field lands. */
export type Applies = "live" | "future_execs" | "next_start" | "immediately";

/** The outcome of `modify`: where each change lands, and the new record. */
export interface ModifyPlan {
  changes: Array<{ field: string; applies: Applies; note: string | null }>;
  info: SandboxInfo;
}

/** Changes of `modify`: a field left out is unchanged, `null` clears it. */
export interface ModifyOptions extends CallOptions {
  cpus?: number | null;
  /** MiB (`memory: 4096` is 4 GiB). */
  memory?: number | null;
  /** Environment entries to set. */
  env?: Record<string, string>;
  /** Environment names to remove. */
  unsetEnv?: string[];
  /** Labels to set. */
  labels?: Record<string, string>;
  /** Label names to remove. */
  unsetLabels?: string[];
  /** Seconds, or duration text. */
  idleTimeout?: Duration | null;
  /** What idle reclaim does from now on (there is nothing to clear: `"stop"` is the default). */
  idleAction?: IdleAction;
  /** Seconds, or duration text. */
  maxDuration?: Duration | null;
  /** The network from now on (a running sandbox's changes at once). */
  network?: boolean | "all" | "none" | NetworkPolicy;
}

/**
 * A network policy: what `allow` rules match and no `deny` rule does
 * (`{ allow: ["pypi.org", "*.github.com"], deny: ["tcp:*:25"] }`). A rule
 * is `[tcp:|udp:]HOST[:PORTS]`; a bad one rejects with `InvalidConfigError`.
 */
export interface NetworkPolicy {
  allow?: string[];
  deny?: string[];
}

/** Resource usage of a running sandbox (null where the host does not expose it). */
export interface Metrics {
  cpuUsageNs: number | null;
  memoryBytes: number | null;
  memoryLimitBytes: number | null;
  ioReadBytes: number | null;
  ioWriteBytes: number | null;
  pids: number | null;
  /** Bytes the writable layer takes on the host's disk. */
  diskBytes: number | null;
  /** The writable layer's limit in bytes. */
  diskLimitBytes: number | null;
}

/** The kind of a path in the sandbox. */
export type FileKind = "file" | "dir" | "symlink" | "other";

/** One directory entry. */
export interface DirEntry {
  name: string;
  kind: FileKind;
  size: number;
}

/** Metadata of a path in the sandbox (symlinks not followed). */
export interface FileStat {
  kind: FileKind;
  size: number;
  /** Permission bits. */
  mode: number;
  uid: number;
  gid: number;
  mtime: Date;
  linkTarget: string | null;
}

/** How an exec ended, with its output. */
export interface ExecResult {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  /** Output went past `outputLimit`: stdout or stderr holds only its first bytes. */
  truncated: boolean;
}

/** A process event. */
export type ProcessEvent =
  | { kind: "stdout" | "stderr"; data: Buffer }
  | { kind: "exit"; exitCode: number | null; signal: number | null; timedOut: boolean };

/** Which log: the programs' output (stdout, stderr), the guest's log, the supervisor's events. */
export type LogSource = "stdout" | "stderr" | "guest" | "supervisor";

/** A log line. */
export interface LogLine {
  source: LogSource;
  /** When it was written, in milliseconds since the Unix epoch (absent for the guest's log). */
  time_ms?: number;
  text: string;
}

/**
 * A duration: seconds (`300` is five minutes, `0.5` half a second), or
 * duration text such as `"1h30m"` or `"250ms"`.
 */
export type Duration = number | string;

/** Options of every call. */
export interface CallOptions {
  /** Aborting cancels the call (and what it runs in the guest). */
  signal?: AbortSignal;
  /** Bound of the whole call (seconds, or duration text); past it, `TimeoutError`. */
  timeout?: Duration;
}

/** Mebibytes (`memory(MiB(512))`). */
export const MiB = (n: number): number => n;
/** Gibibytes, in mebibytes. */
export const GiB = (n: number): number => n * 1024;

/**
 * What the backend can do beyond the lifecycle every backend has; an
 * operation it lacks rejects with `UnsupportedError`. The local backend of
 * an unprivileged user without a delegated cgroup lacks `pause`.
 */
export interface Capabilities {
  /** `pause` and `resume`. */
  pause: boolean;
  /** Live changes of a running sandbox's limits and environment (`modify`). */
  modifyLive: boolean;
  /** `metrics`. */
  metrics: boolean;
  /** `logs`, including following. */
  logs: boolean;
  /** Idle timeouts and demand start. */
  idleReclaim: boolean;
  /** Sandboxes attached to (and stopped with) their creating process. */
  attached: boolean;
  /** Files written outside volumes survive a stop. */
  persistentLayer: boolean;
  /** Network policies are enforced. */
  networkPolicy: boolean;
  /** Published ports are served. */
  publishedPorts: boolean;
  /** Secrets go into the sandboxes' requests to their hosts. */
  secrets: boolean;
  /** Filesystem snapshots (`snapshot()`, `snapshot:NAME` images). */
  snapshots: boolean;
  /** Full snapshots (memory and processes too) of running sandboxes. */
  fullSnapshots: boolean;
  /** Forks of running sandboxes (`fork()`). */
  fork: boolean;
  /** Warm pools (`createPool()`): a create of a pool's configuration claims one of its running sandboxes. */
  pools: boolean;
}

/** How to fork a running sandbox. */
export interface ForkOptions extends CallOptions {
  /** How many copies (default 1, or one per name). */
  count?: number;
  /** Their names (default `<name>-fork-<n>`). */
  names?: string[];
  /** The copies survive this process (as a detached create's). */
  detached?: boolean;
}

/** What a snapshot holds: the sandbox's files, or a running vm sandbox whole. */
export type SnapshotKind = "filesystem" | "full";

/** A stored snapshot. Create sandboxes from it with `image: info.image` (`snapshot:NAME`). */
export interface SnapshotInfo {
  name: string;
  kind: SnapshotKind;
  /** The image reference that creates sandboxes from it. */
  image: string;
  /** The content digest of its OCI image manifest (`sha256:...`). */
  digest: string;
  /** Bytes it adds to the store (the base image's layers are shared). */
  size: number;
  /** The sandbox it was taken from (which may be gone since). */
  sourceId: string;
  sourceName: string;
  /** That sandbox's image. */
  baseImage: string;
  driver: Driver;
  createdAt: Date;
}

/**
 * A warm pool as it stands (`SandboxBuilder.createPool`): sandboxes of one
 * configuration kept started and unclaimed. A create of that configuration
 * (but for its labels, environment, timeouts, idle action and demand start)
 * claims one of them instead of starting; a `define` never does.
 */
export interface PoolInfo {
  name: string;
  /** What its sandboxes run. */
  config: SandboxConfig;
  /** How many warm sandboxes it keeps. */
  size: number;
  /** Warm sandboxes running and unclaimed now. */
  warm: number;
  /** Warm sandboxes still starting. */
  starting: number;
  /** Creates that claimed one of its sandboxes. */
  claims: number;
  /** Creates of its configuration that found none warm and started cold. */
  misses: number;
  /** How long its last refill took to start its sandboxes, in seconds (null before the first). */
  lastRefill: number | null;
  createdAt: Date;
}
