/**
 * burrow for TypeScript: sandboxes that converge, sleep when idle and wake
 * on the next call. Every call goes to the Rust binding core (the native
 * module `burrow.node`); every validation, lifecycle rule and error is the
 * core's. Durations are milliseconds (a number) or duration text
 * (`"1h30m"`, `"250ms"`).
 */

// eslint-disable-next-line @typescript-eslint/no-var-requires
const native: Native = require("../../burrow.node");

interface NativeObject {
  readonly kind: "sandbox" | "process" | "logs";
  readonly id: string | null;
  readonly name: string | null;
  readonly live: boolean;
  readonly generation: number;
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
  | "start_failed";

/** A run of a sandbox. */
export interface RunInfo {
  generation: number;
  supervisor_pid?: number | null;
  started_at_ms: number;
  running_at_ms?: number | null;
  ended_at_ms?: number | null;
  exit_reason?: ExitReason | null;
  detail?: string | null;
}

/** A sandbox's record. */
export interface SandboxInfo {
  id: string;
  name: string;
  status: Status;
  config: Record<string, unknown>;
  generation: number;
  detached: boolean;
  created_at_ms: number;
  updated_at_ms: number;
  last_run?: RunInfo | null;
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

/** A log line. */
export interface LogLine {
  source: "guest" | "supervisor";
  text: string;
}

/** A duration: milliseconds, or duration text such as `"1h30m"`. */
export type Duration = number | string;

/** Options of every call. */
export interface CallOptions {
  /** Aborting cancels the call (and what it runs in the guest). */
  signal?: AbortSignal;
  /** Bound of the whole call; past it, `TimeoutError`. */
  timeout?: Duration;
}

/** Mebibytes (`memory(MiB(512))`). */
export const MiB = (n: number): number => n;
/** Gibibytes, in mebibytes. */
export const GiB = (n: number): number => n * 1024;

function toBuffer(data: Buffer | string): Buffer {
  return typeof data === "string" ? Buffer.from(data, "utf8") : data;
}

function seconds(d: Duration | undefined | null): number | string | undefined | null {
  if (d === undefined || d === null) return d;
  return typeof d === "number" ? d / 1000 : d;
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
  if (opts.timeout !== undefined) body.call_timeout = seconds(opts.timeout);
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
  /** Kill the process after this long. */
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
  list(path: string, opts?: CallOptions): Promise<Array<Record<string, unknown>>> {
    return call(this.#o, { op: "fs_list", path }, opts);
  }
  stat(path: string, opts?: CallOptions): Promise<Record<string, unknown>> {
    return call(this.#o, { op: "fs_stat", path }, opts);
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
  /** @internal */
  constructor(o: NativeObject) {
    this.#o = o;
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
  signal(signal: number, opts?: CallOptions): Promise<void> {
    return call(this.#o, { op: "signal", signal }, opts);
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
  /** @internal */
  constructor(o: NativeObject) {
    this.o = o;
  }
  get id(): string {
    return this.o.id!;
  }
  get name(): string {
    return this.o.name!;
  }
  info(opts?: CallOptions): Promise<SandboxInfo> {
    return call(this.o, { op: "info" }, opts);
  }
  status(opts?: CallOptions): Promise<Status> {
    return call(this.o, { op: "status" }, opts);
  }
  stop(opts: CallOptions & { grace?: Duration } = {}): Promise<SandboxInfo> {
    return call(this.o, { op: "stop", grace: seconds(opts.grace) }, opts);
  }
  kill(opts?: CallOptions): Promise<SandboxInfo> {
    return call(this.o, { op: "kill" }, opts);
  }
  requestDrain(opts?: CallOptions): Promise<SandboxInfo> {
    return call(this.o, { op: "request_drain" }, opts);
  }
  waitForStatus(statuses: Status | Status[], opts?: CallOptions): Promise<SandboxInfo> {
    const list = Array.isArray(statuses) ? statuses : [statuses];
    return call(this.o, { op: "wait_for_status", statuses: list }, opts);
  }
  waitUntilStopped(opts?: CallOptions): Promise<SandboxInfo> {
    return call(this.o, { op: "wait_until_stopped" }, opts);
  }
  pause(opts?: CallOptions): Promise<SandboxInfo> {
    return call(this.o, { op: "pause" }, opts);
  }
  resume(opts?: CallOptions): Promise<SandboxInfo> {
    return call(this.o, { op: "resume" }, opts);
  }
  touch(opts?: CallOptions): Promise<void> {
    return call(this.o, { op: "touch" }, opts);
  }
  modify(changes: Record<string, unknown>, opts?: CallOptions): Promise<Record<string, unknown>> {
    return call(this.o, { op: "modify", ...changes }, opts);
  }
  metrics(opts?: CallOptions): Promise<Record<string, unknown>> {
    return call(this.o, { op: "metrics" }, opts);
  }
  logs(opts: CallOptions & { tail?: number; source?: "guest" | "supervisor" } = {}): Promise<LogLine[]> {
    return call(this.o, { op: "logs", tail: opts.tail, source: opts.source }, opts);
  }
  /** Lines as they are written, until the run stops (or `signal` aborts). */
  async *followLogs(
    opts: { tail?: number; source?: "guest" | "supervisor"; signal?: AbortSignal } = {},
  ): AsyncIterable<LogLine> {
    const cursor: NativeObject = await call(this.o, {
      op: "follow_logs",
      tail: opts.tail,
      source: opts.source,
    }, opts);
    for (;;) {
      let line: LogLine | null;
      try {
        line = await call(cursor, { op: "next", call_timeout: 1 }, { signal: opts.signal });
      } catch (e) {
        if (e instanceof TimeoutError) {
          const st = await this.status().catch(() => "stopped" as Status);
          if (st === "running" || st === "draining" || st === "paused" || st === "starting") continue;
          return;
        }
        throw e;
      }
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
    return new Sandbox(await call(this.o, { op: "start" }, opts));
  }
  async connect(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(await call(this.o, { op: "connect" }, opts));
  }
  async connectOrStart(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(await call(this.o, { op: "connect_or_start" }, opts));
  }
  async restart(opts?: CallOptions): Promise<Sandbox> {
    return new Sandbox(await call(this.o, { op: "restart" }, opts));
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
  /** Records of the sandboxes matching the filter. */
  static list(
    filter: { status?: Status | Status[]; labels?: Record<string, string> } = {},
    opts?: CallOptions,
  ): Promise<SandboxInfo[]> {
    const statuses = filter.status === undefined ? [] : Array.isArray(filter.status) ? filter.status : [filter.status];
    return call(null, { op: "list", statuses, labels: filter.labels }, opts);
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
  /** Round trip to the guest in milliseconds (never activity). */
  async ping(opts?: CallOptions): Promise<number> {
    return (await call(this.o, { op: "ping" }, opts)) * 1000;
  }
  async exec(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const stdin = opts.stdin === undefined ? null : toBuffer(opts.stdin);
    const r = await call(
      this.o,
      { op: "exec", argv, env: opts.env, cwd: opts.cwd, timeout: seconds(opts.processTimeout) },
      opts,
      stdin,
    );
    return exec(r);
  }
  /** Starts `argv` with streamed output; stdin stays open without `stdin`. */
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
        timeout: seconds(opts.processTimeout),
      },
      opts,
      stdin,
    );
    return new Process(o);
  }
  restart(opts?: CallOptions): Promise<SandboxInfo> {
    return call(this.o, { op: "restart" }, opts);
  }
  detach(opts?: CallOptions): Promise<SandboxInfo> {
    return call(this.o, { op: "detach" }, opts);
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
  idleTimeout(d: Duration): this {
    this.#o.idle_timeout = seconds(d);
    return this;
  }
  maxDuration(d: Duration): this {
    this.#o.max_duration = seconds(d);
    return this;
  }
  startupTimeout(d: Duration): this {
    this.#o.startup_timeout = seconds(d);
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
