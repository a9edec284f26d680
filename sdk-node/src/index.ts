/**
 * burrow for TypeScript: sandboxes that converge, sleep when idle and wake
 * on the next call. Every call goes to the Rust binding core (the native
 * module `burrow.node`); every validation, lifecycle rule and error is the
 * core's. Durations are seconds (a number, fractions allowed: `0.25`) or
 * duration text (`"1h30m"`, `"250ms"`), everywhere: options, call timeouts
 * and the durations of returned records.
 */

// eslint-disable-next-line @typescript-eslint/no-var-requires
const native: Native = require("../../burrow.node");

interface NativeObject {
  readonly kind: "sandbox" | "process" | "logs";
  readonly id: string | null;
  readonly name: string | null;
  readonly live: boolean;
  readonly generation: number;
  /** A sandbox's status as the core made the object (a lookup's, a list's, a start's). */
  readonly status: Status | null;
}

interface Native {
  call(callId: number, target: NativeObject | null, op: string, data: Buffer | null): Promise<any>;
  cancel(callId: number): boolean;
  configure(home: string | null): void;
  errorCodes(): string[];
  inFlight(): number;
}

// ---------------------------------------------------------------------------
// Types

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
export interface SandboxConfig {
  image: string;
  /** The driver the backend recorded (null only in records older than drivers). */
  driver: Driver | null;
  runtime: Runtime;
  cpus: number | null;
  /** MiB. */
  memory: number | null;
  pidsLimit: number | null;
  env: Record<string, string>;
  workdir: string | null;
  labels: Record<string, string>;
  mounts: Mount[];
  network: boolean;
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

/** A page of `Sandbox.list`: a handle of each sandbox listed. */
export interface SandboxPage {
  sandboxes: SandboxHandle[];
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
}

/** Resource usage of a running sandbox (null where the host does not expose it). */
export interface Metrics {
  cpuUsageNs: number | null;
  memoryBytes: number | null;
  memoryLimitBytes: number | null;
  ioReadBytes: number | null;
  ioWriteBytes: number | null;
  pids: number | null;
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

function toBuffer(data: Buffer | string): Buffer {
  return typeof data === "string" ? Buffer.from(data, "utf8") : data;
}

/** A record's duration (whole milliseconds in the core's JSON) in seconds. */
function recordSeconds(ms: number | null | undefined): number | null {
  return ms == null ? null : ms / 1000;
}

// ---------------------------------------------------------------------------
// Errors

/** The core's error body. */
export interface ErrorBody {
  code: string;
  message: string;
  name?: string;
  id?: string;
  actual_id?: string;
  status?: Status;
  operation?: string;
  subject?: string;
  reason?: string;
  after_ms?: number;
  guest?: { code: string; message: string };
  path?: string;
}

/**
 * An error of the burrow core; one subclass per code. `name` is the class
 * name (as for every `Error`); the sandbox's name is `sandboxName`.
 */
export class BurrowError extends Error {
  /** The code of this class. */
  static readonly CODE: string = "";
  readonly code: string;
  readonly sandboxId?: string;
  readonly sandboxName?: string;
  readonly status?: Status;
  readonly actualId?: string;
  readonly operation?: string;
  readonly subject?: string;
  readonly reason?: string;
  /** A timeout's bound, in seconds (as every duration of this API). */
  readonly after?: number;
  /** The same bound in milliseconds (the core's `after_ms`). */
  readonly afterMs?: number;
  readonly body: ErrorBody;

  constructor(body: ErrorBody) {
    super(body.message);
    this.name = new.target.name;
    this.body = body;
    this.code = body.code;
    this.sandboxId = body.id;
    this.sandboxName = body.name;
    this.status = body.status;
    this.actualId = body.actual_id;
    this.operation = body.operation;
    this.subject = body.subject;
    this.reason = body.reason;
    this.afterMs = body.after_ms;
    this.after = body.after_ms === undefined ? undefined : body.after_ms / 1000;
  }
}

function errorClass(code: string, className: string): typeof BurrowError {
  const cls = {
    [className]: class extends BurrowError {
      static readonly CODE = code;
    },
  }[className];
  return cls;
}

export const SandboxReplacedError = errorClass("sandbox_replaced", "SandboxReplacedError");
export const SandboxAlreadyExistsError = errorClass("already_exists", "SandboxAlreadyExistsError");
export const SandboxNotFoundError = errorClass("not_found", "SandboxNotFoundError");
export const InvalidStateError = errorClass("invalid_state", "InvalidStateError");
export const InvalidNameError = errorClass("invalid_name", "InvalidNameError");
export const InvalidConfigError = errorClass("invalid_config", "InvalidConfigError");
export const InvalidImageError = errorClass("invalid_image", "InvalidImageError");
export const InvalidArgumentError = errorClass("invalid_argument", "InvalidArgumentError");
export const StartingError = errorClass("starting", "StartingError");
export const StartFailedError = errorClass("start_failed", "StartFailedError");
export const TimeoutError = errorClass("timeout", "TimeoutError");
export const RuntimeUnavailableError = errorClass("runtime_unavailable", "RuntimeUnavailableError");
export const GuestError = errorClass("guest", "GuestError");
export const ProtocolError = errorClass("protocol", "ProtocolError");
export const StoreError = errorClass("store", "StoreError");
export const BurrowIOError = errorClass("io", "BurrowIOError");
export const UnauthorizedError = errorClass("unauthorized", "UnauthorizedError");
export const UnsupportedError = errorClass("unsupported", "UnsupportedError");

/** Every error class by its code (the core's list, checked by the tests). */
export const ERROR_CLASSES: Readonly<Record<string, typeof BurrowError>> = Object.freeze(
  Object.fromEntries(
    [
      SandboxReplacedError,
      SandboxAlreadyExistsError,
      SandboxNotFoundError,
      InvalidStateError,
      InvalidNameError,
      InvalidConfigError,
      InvalidImageError,
      InvalidArgumentError,
      StartingError,
      StartFailedError,
      TimeoutError,
      RuntimeUnavailableError,
      GuestError,
      ProtocolError,
      StoreError,
      BurrowIOError,
      UnauthorizedError,
      UnsupportedError,
    ].map((c) => [c.CODE, c]),
  ),
);

/** The core's error codes, in order. */
export function errorCodes(): string[] {
  return native.errorCodes();
}

function fromNative(e: unknown): unknown {
  if (!(e instanceof Error)) return e;
  let body: ErrorBody;
  try {
    body = JSON.parse(e.message) as ErrorBody;
  } catch {
    return e;
  }
  if (typeof body?.code !== "string") return e;
  const cls = ERROR_CLASSES[body.code] ?? BurrowError;
  return new cls(body);
}

// ---------------------------------------------------------------------------
// Calls

let nextCall = 0;

function call(
  target: NativeObject | null,
  op: Record<string, unknown>,
  opts: CallOptions = {},
  data?: Buffer | null,
): Promise<any> {
  opts.signal?.throwIfAborted();
  const body: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(op)) if (v !== undefined) body[k] = v;
  if (opts.timeout !== undefined) body.call_timeout = opts.timeout;
  nextCall = (nextCall % 0xffff_fffe) + 1;
  const id = nextCall;
  const pending = native.call(id, target, JSON.stringify(body), data ?? null);
  const signal = opts.signal;
  if (!signal) return pending.catch((e) => Promise.reject(fromNative(e)));
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      native.cancel(id);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    pending.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(fromNative(e));
      },
    );
  });
}

/** Sets the burrow home of the calls that follow (`null`: `$BURROW_HOME`). */
export function configure(options: { home?: string | null } = {}): void {
  native.configure(options.home ?? null);
}

/** Calls of this process still running in the core (diagnostics). */
export function inFlight(): number {
  return native.inFlight();
}

// The core's records (snake_case JSON) in the SDK's types.
const date = (ms: number): Date => new Date(ms);
const optDate = (ms: number | null | undefined): Date | null => (ms == null ? null : new Date(ms));
const opt = <T>(v: T | null | undefined): T | null => (v === undefined ? null : v);

function toConfig(c: any): SandboxConfig {
  return {
    image: c.image,
    driver: opt(c.driver),
    runtime: c.runtime,
    cpus: opt(c.cpus),
    memory: opt(c.memory_mb),
    pidsLimit: opt(c.pids_limit),
    env: c.env ?? {},
    workdir: opt(c.workdir),
    labels: c.labels ?? {},
    mounts: (c.mounts ?? []).map((m: any) => ({ source: m.source, target: m.target, readOnly: !!m.read_only })),
    network: !!c.network,
    idleTimeout: recordSeconds(c.idle_timeout),
    idleAction: c.idle_action ?? "stop",
    maxDuration: recordSeconds(c.max_duration),
    demandStart: opt(c.demand_start),
    startupTimeout: c.startup_timeout / 1000,
  };
}

function toInfo(i: any): SandboxInfo {
  const r = i.last_run;
  return {
    id: i.id,
    name: i.name,
    status: i.status,
    config: toConfig(i.config),
    generation: i.generation,
    detached: i.detached,
    createdAt: date(i.created_at_ms),
    updatedAt: date(i.updated_at_ms),
    lastRun: r
      ? {
          generation: r.generation,
          supervisorPid: opt(r.supervisor_pid),
          startedAt: date(r.started_at_ms),
          runningAt: optDate(r.running_at_ms),
          endedAt: optDate(r.ended_at_ms),
          exitReason: opt(r.exit_reason),
          detail: opt(r.detail),
        }
      : null,
  };
}

function toMetrics(m: any): Metrics {
  return {
    cpuUsageNs: opt(m.cpu_usage_ns),
    memoryBytes: opt(m.memory_bytes),
    memoryLimitBytes: opt(m.memory_limit_bytes),
    ioReadBytes: opt(m.io_read_bytes),
    ioWriteBytes: opt(m.io_write_bytes),
    pids: opt(m.pids),
  };
}

function toStat(s: any): FileStat {
  return {
    kind: s.kind,
    size: s.size,
    mode: s.mode,
    uid: s.uid,
    gid: s.gid,
    mtime: new Date(s.mtime * 1000),
    linkTarget: opt(s.link_target),
  };
}

function exec(r: any): ExecResult {
  return {
    stdout: r.stdout,
    stderr: r.stderr,
    exitCode: r.exitCode ?? null,
    signal: r.signal ?? null,
    timedOut: r.timedOut,
  };
}

// ---------------------------------------------------------------------------
// Sandboxes

/** Options of `exec` and `spawn`. */
export interface ExecOptions extends CallOptions {
  env?: Record<string, string>;
  cwd?: string;
  /** Data written to stdin, then closed. */
  stdin?: Buffer | string;
  /** Kill the process after this long (seconds, or duration text). */
  processTimeout?: Duration;
}

/** File operations in a running sandbox (absolute guest paths). */
export class Fs {
  readonly #o: NativeObject;
  /** @internal */
  constructor(o: NativeObject) {
    this.#o = o;
  }
  read(path: string, opts?: CallOptions): Promise<Buffer> {
    return call(this.#o, { op: "fs_read", path }, opts);
  }
  async readText(path: string, opts?: CallOptions): Promise<string> {
    return (await this.read(path, opts)).toString("utf8");
  }
  write(path: string, data: Buffer | string, opts: CallOptions & { mode?: number } = {}): Promise<void> {
    return call(this.#o, { op: "fs_write", path, mode: opts.mode }, opts, toBuffer(data));
  }
  /** Entries sorted by name. */
  list(path: string, opts?: CallOptions): Promise<DirEntry[]> {
    return call(this.#o, { op: "fs_list", path }, opts);
  }
  async stat(path: string, opts?: CallOptions): Promise<FileStat> {
    return toStat(await call(this.#o, { op: "fs_stat", path }, opts));
  }
  exists(path: string, opts?: CallOptions): Promise<boolean> {
    return call(this.#o, { op: "fs_exists", path }, opts);
  }
  mkdir(path: string, opts: CallOptions & { parents?: boolean } = {}): Promise<void> {
    return call(this.#o, { op: "fs_mkdir", path, parents: opts.parents }, opts);
  }
  remove(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    return call(this.#o, { op: "fs_remove", path, recursive: opts.recursive }, opts);
  }
  rename(from: string, to: string, opts?: CallOptions): Promise<void> {
    return call(this.#o, { op: "fs_rename", from, to }, opts);
  }
}

/** A process with streamed output: `for await (const ev of proc)`. */
export class Process implements AsyncIterable<ProcessEvent> {
  readonly #o: NativeObject;
  #exit: Extract<ProcessEvent, { kind: "exit" }> | null = null;
  #unlink: (() => void) | null = null;
  /** @internal */
  constructor(o: NativeObject, signal?: AbortSignal) {
    this.#o = o;
    if (signal) {
      // As child_process.spawn({ signal }): aborting kills the process.
      const kill = () => void this.kill().catch(() => {});
      if (signal.aborted) kill();
      else {
        signal.addEventListener("abort", kill, { once: true });
        this.#unlink = () => signal.removeEventListener("abort", kill);
      }
    }
  }
  /** How it ended, once the exit was seen. */
  get exitStatus(): { exitCode: number | null; signal: number | null; timedOut: boolean } | null {
    return this.#exit;
  }
  async *[Symbol.asyncIterator](): AsyncIterator<ProcessEvent> {
    for (;;) {
      const ev = await call(this.#o, { op: "next" });
      if (ev === null) return;
      if (ev.kind === "exit") {
        this.#exit = { kind: "exit", exitCode: ev.exitCode ?? null, signal: ev.signal ?? null, timedOut: !!ev.timedOut };
        this.#unlink?.();
        this.#unlink = null;
      }
      yield ev.kind === "exit" ? this.#exit! : { kind: ev.kind, data: ev.data };
    }
  }
  write(data: Buffer | string, opts?: CallOptions): Promise<void> {
    return call(this.#o, { op: "write" }, opts, toBuffer(data));
  }
  closeStdin(opts?: CallOptions): Promise<void> {
    return call(this.#o, { op: "close_stdin" }, opts);
  }
  /** Sends a signal (a number: 15 is SIGTERM). */
  signal(signal: number, opts?: CallOptions): Promise<void> {
    return call(this.#o, { op: "signal", signal }, opts);
  }
  /** Kills it (SIGKILL); its exit still arrives through the iterator. */
  kill(opts?: CallOptions): Promise<void> {
    return this.signal(9, opts);
  }
  /** Waits for the exit (output not yet read is discarded). */
  async wait(): Promise<{ exitCode: number | null; signal: number | null; timedOut: boolean }> {
    for await (const _ of this) {
      // drain
    }
    if (!this.#exit) throw new Error("the process ended without an exit status");
    return this.#exit;
  }
}

/** The lifecycle calls a sandbox and a handle share. */
abstract class Lifecycle {
  /** @internal */
  protected readonly o: NativeObject;
  #status: Status;
  /** @internal */
  constructor(o: NativeObject) {
    this.o = o;
    this.#status = o.status ?? "created";
  }
  get id(): string {
    return this.o.id!;
  }
  get name(): string {
    return this.o.name!;
  }
  /**
   * The status this object last saw, read without a call: the one it was
   * made with (a lookup's, a list's, a start's), updated by every call on
   * it that returns a fresh record (`info`, `stop`, `kill`, `modify`, ...).
   * A fresh read is `(await x.info()).status`.
   */
  get status(): Status {
    return this.#status;
  }
  /** @internal A record of this sandbox, its status kept as the snapshot. */
  protected async record(p: Promise<any>): Promise<SandboxInfo> {
    const i = toInfo(await p);
    this.#status = i.status;
    return i;
  }
  /** @internal The status of an object a call on this one returned. */
  protected saw(o: NativeObject): NativeObject {
    if (o.status) this.#status = o.status;
    return o;
  }
  /** A fresh record (its `status` is also this object's snapshot from now on). */
  info(opts?: CallOptions): Promise<SandboxInfo> {
    return this.record(call(this.o, { op: "info" }, opts));
  }
  /** A graceful stop: `grace` (seconds, or duration text) before the kill. */
  stop(opts: CallOptions & { grace?: Duration } = {}): Promise<SandboxInfo> {
    return this.record(call(this.o, { op: "stop", grace: opts.grace }, opts));
  }
  kill(opts?: CallOptions): Promise<SandboxInfo> {
    return this.record(call(this.o, { op: "kill" }, opts));
  }
  requestDrain(opts?: CallOptions): Promise<SandboxInfo> {
    return this.record(call(this.o, { op: "request_drain" }, opts));
  }
  waitForStatus(statuses: Status | Status[], opts?: CallOptions): Promise<SandboxInfo> {
    const list = Array.isArray(statuses) ? statuses : [statuses];
    return this.record(call(this.o, { op: "wait_for_status", statuses: list }, opts));
  }
  waitUntilStopped(opts?: CallOptions): Promise<SandboxInfo> {
    return this.record(call(this.o, { op: "wait_until_stopped" }, opts));
  }
  pause(opts?: CallOptions): Promise<SandboxInfo> {
    return this.record(call(this.o, { op: "pause" }, opts));
  }
  resume(opts?: CallOptions): Promise<SandboxInfo> {
    return this.record(call(this.o, { op: "resume" }, opts));
  }
  touch(opts?: CallOptions): Promise<void> {
    return call(this.o, { op: "touch" }, opts);
  }
  /**
   * Changes the configuration (`modify({ cpus: 4, memory: 4096 })`); the
   * plan says where each change lands.
   */
  async modify(changes: ModifyOptions): Promise<ModifyPlan> {
    const plan = await call(
      this.o,
      {
        op: "modify",
        cpus: changes.cpus,
        memory_mb: changes.memory,
        env_set: changes.env,
        env_unset: changes.unsetEnv,
        labels_set: changes.labels,
        labels_unset: changes.unsetLabels,
        idle_timeout: changes.idleTimeout,
        idle_action: changes.idleAction,
        max_duration: changes.maxDuration,
      },
      changes,
    );
    return {
      changes: plan.changes.map((c: any) => ({ field: c.field, applies: c.applies, note: opt(c.note) })),
      info: await this.record(Promise.resolve(plan.info)),
    };
  }
  /** Resource usage of the running sandbox. */
  async metrics(opts?: CallOptions): Promise<Metrics> {
    return toMetrics(await call(this.o, { op: "metrics" }, opts));
  }
  logs(opts: CallOptions & { tail?: number; source?: LogSource } = {}): Promise<LogLine[]> {
    return call(this.o, { op: "logs", tail: opts.tail, source: opts.source }, opts);
  }
  /**
   * Lines as they are written, until the run current when the follow
   * begins ends (the core ends the stream after that run's last lines; at
   * once after the lines already written when none runs), or `signal`
   * aborts.
   */
  async *followLogs(
    opts: { tail?: number; source?: LogSource; signal?: AbortSignal } = {},
  ): AsyncIterable<LogLine> {
    const cursor: NativeObject = await call(this.o, {
      op: "follow_logs",
      tail: opts.tail,
      source: opts.source,
    }, opts);
    for (;;) {
      const line: LogLine | null = await call(cursor, { op: "next" }, { signal: opts.signal });
      if (line === null) return;
      yield line;
    }
  }
  destroy(opts?: CallOptions): Promise<void> {
    return call(this.o, { op: "destroy" }, opts);
  }
}

/** A metadata handle bound to one sandbox id (it may be stopped). */
export class SandboxHandle extends Lifecycle {
  async start(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(this.saw(await call(this.o, { op: "start" }, opts)));
  }
  async connect(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(this.saw(await call(this.o, { op: "connect" }, opts)));
  }
  async connectOrStart(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(this.saw(await call(this.o, { op: "connect_or_start" }, opts)));
  }
  async restart(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(this.saw(await call(this.o, { op: "restart" }, opts)));
  }
  remove(opts?: CallOptions): Promise<void> {
    return call(this.o, { op: "remove" }, opts);
  }
}

/** A running sandbox, bound to one id. `await using` stops it at scope end. */
export class Sandbox extends Lifecycle implements AsyncDisposable {
  /** File operations. */
  readonly fs: Fs;
  #destroyOnDispose = false;

  /** @internal */
  constructor(o: NativeObject, destroyOnDispose = false) {
    super(o);
    this.fs = new Fs(o);
    this.#destroyOnDispose = destroyOnDispose;
  }

  /** A builder of the sandbox `name`. */
  static builder(name: string): SandboxBuilder {
    return new SandboxBuilder(name);
  }
  /** A handle of the sandbox now named `name`. */
  static async get(name: string, opts?: CallOptions): Promise<SandboxHandle> {
    return new SandboxHandle(await call(null, { op: "get", name }, opts));
  }
  /** A handle of exactly `id`. */
  static async getById(id: string, opts?: CallOptions): Promise<SandboxHandle> {
    return new SandboxHandle(await call(null, { op: "get_by_id", id }, opts));
  }
  /** Starts the sandbox now named `name` (created, stopped or crashed; else `InvalidStateError`). */
  static async start(name: string, opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(await call(null, { op: "start", name }, opts));
  }
  /**
   * The sandboxes matching the filter, as handles (`page.sandboxes`), each
   * with the `status` it was listed with.
   */
  static async list(filter: ListFilter = {}, opts?: CallOptions): Promise<SandboxPage> {
    const statuses = filter.status === undefined ? [] : Array.isArray(filter.status) ? filter.status : [filter.status];
    const records: any[] = await call(null, { op: "list", statuses, labels: filter.labels }, opts);
    const sandboxes = await Promise.all(
      records.map(
        async (r) => new SandboxHandle(await call(null, { op: "bind", id: r.id, name: r.name, status: r.status }, opts)),
      ),
    );
    return { sandboxes };
  }
  /** Removes the sandbox `name` (created, stopped or crashed only). */
  static remove(name: string, opts?: CallOptions): Promise<void> {
    return call(null, { op: "remove", name }, opts);
  }

  /** The run this object is bound to. */
  get generation(): number {
    return this.o.generation;
  }
  /** The metadata handle of the same sandbox. */
  async handle(opts?: CallOptions): Promise<SandboxHandle> {
    return new SandboxHandle(await call(this.o, { op: "handle" }, opts));
  }
  /** A round trip to the guest agent (a health check: never activity). */
  async ping(opts?: CallOptions): Promise<Ping> {
    return { latency: await call(this.o, { op: "ping" }, opts) };
  }
  async exec(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const stdin = opts.stdin === undefined ? null : toBuffer(opts.stdin);
    const r = await call(
      this.o,
      { op: "exec", argv, env: opts.env, cwd: opts.cwd, timeout: opts.processTimeout },
      opts,
      stdin,
    );
    return exec(r);
  }
  /**
   * Starts `argv` with streamed output; stdin stays open without `stdin`.
   * As with `child_process.spawn`, aborting `signal` kills the process
   * (before it started: the call is cancelled).
   */
  async spawn(argv: string[], opts: ExecOptions = {}): Promise<Process> {
    const stdin = opts.stdin === undefined ? null : toBuffer(opts.stdin);
    const o = await call(
      this.o,
      {
        op: "spawn",
        argv,
        env: opts.env,
        cwd: opts.cwd,
        keep_stdin: stdin === null,
        timeout: opts.processTimeout,
      },
      opts,
      stdin,
    );
    return new Process(o, opts.signal);
  }
  /** Stops and starts it again; this object follows the new run. */
  restart(opts?: CallOptions): Promise<SandboxInfo> {
    return this.record(call(this.o, { op: "restart" }, opts));
  }
  /** Lets it outlive this process. */
  detach(opts?: CallOptions): Promise<SandboxInfo> {
    return this.record(call(this.o, { op: "detach" }, opts));
  }
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      if (this.#destroyOnDispose) await this.destroy();
      else await this.stop();
    } catch (e) {
      if (!(e instanceof SandboxNotFoundError)) throw e;
    }
  }
}

/** Builds a sandbox: `Sandbox.builder("w").image("python").create()`. */
export class SandboxBuilder {
  readonly #name: string;
  readonly #o: Record<string, unknown> = {};
  #destroy = false;
  /** @internal */
  constructor(name: string) {
    this.#name = name;
  }
  image(image: string): this {
    this.#o.image = image;
    return this;
  }
  driver(driver: "container" | "vm"): this {
    this.#o.driver = driver;
    return this;
  }
  runtime(runtime: "runc" | "crun" | "runsc"): this {
    this.#o.runtime = runtime;
    return this;
  }
  cpus(cpus: number): this {
    this.#o.cpus = cpus;
    return this;
  }
  /** Memory limit in MiB (`MiB(512)`, `GiB(2)`). */
  memory(mb: number): this {
    this.#o.memory_mb = mb;
    return this;
  }
  pidsLimit(n: number): this {
    this.#o.pids_limit = n;
    return this;
  }
  /** Run even where `cpus`, `memory` or `pidsLimit` cannot be enforced (an
   * unprivileged user without a delegated cgroup): such a limit is left out
   * instead of the create failing with `InvalidConfigError`. */
  bestEffortLimits(yes = true): this {
    this.#o.best_effort_limits = yes;
    return this;
  }
  env(env: Record<string, string>): this {
    this.#o.env = { ...((this.#o.env as object) ?? {}), ...env };
    return this;
  }
  workdir(dir: string): this {
    this.#o.workdir = dir;
    return this;
  }
  labels(labels: Record<string, string>): this {
    this.#o.labels = { ...((this.#o.labels as object) ?? {}), ...labels };
    return this;
  }
  volume(source: string, target: string, readOnly = false): this {
    const v = (this.#o.volumes as unknown[]) ?? [];
    this.#o.volumes = [...v, { source, target, read_only: readOnly }];
    return this;
  }
  network(on = true): this {
    this.#o.network = on;
    return this;
  }
  /** Reclaim it after this long without activity (seconds: `300`, or text: `"5m"`). */
  idleTimeout(d: Duration): this {
    this.#o.idle_timeout = d;
    return this;
  }
  /** What idle reclaim does: `"stop"` (default) or `"hibernate"` (see `IdleAction`). */
  idleAction(action: IdleAction): this {
    this.#o.idle_action = action;
    return this;
  }
  /** Stop each run after this long (seconds: `3600`, or text: `"1h"`). */
  maxDuration(d: Duration): this {
    this.#o.max_duration = d;
    return this;
  }
  /** Bound of one start (seconds, or duration text). */
  startupTimeout(d: Duration): this {
    this.#o.startup_timeout = d;
    return this;
  }
  demandStart(on: boolean): this {
    this.#o.demand_start = on;
    return this;
  }
  /** Survives this process (default: stopped when it exits). */
  detached(on = true): this {
    this.#o.detached = on;
    return this;
  }
  /** `await using` destroys instead of stopping. */
  destroyOnDispose(on = true): this {
    this.#destroy = on;
    return this;
  }
  #build(mode: string, opts?: CallOptions): Promise<NativeObject> {
    return call(null, { op: "build", name: this.#name, mode, ...this.#o }, opts);
  }
  /** Creates and starts it (strict: a taken name is `SandboxAlreadyExistsError`). */
  async create(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(await this.#build("create", opts), this.#destroy);
  }
  /** Destroys any sandbox of the name, then creates and starts it. */
  async replace(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(await this.#build("replace", opts), this.#destroy);
  }
  /** Converges: many callers, one sandbox (its own configuration wins). */
  async connectOrCreate(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(await this.#build("connect_or_create", opts), this.#destroy);
  }
  /** Persists it without starting. */
  async define(opts?: CallOptions): Promise<SandboxHandle> {
    return new SandboxHandle(await this.#build("define", opts));
  }
}
