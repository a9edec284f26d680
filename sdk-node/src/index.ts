/**
 * burrow for TypeScript: sandboxes that converge, sleep when idle and wake
 * on the next call. Every call goes to the Rust binding core (the native
 * module `burrow.node`); every validation, lifecycle rule and error is the
 * core's. Durations are seconds (a number, fractions allowed: `0.25`) or
 * duration text (`"1h30m"`, `"250ms"`), everywhere: options, call timeouts
 * and the durations of returned records.
 */

export * from "./types";
export * from "./errors";

import type {
  Capabilities,
  CallOptions,
  DirEntry,
  Duration,
  ExecResult,
  FileStat,
  ForkOptions,
  IdleAction,
  ListFilter,
  LogLine,
  LogSource,
  Metrics,
  ModifyOptions,
  ModifyPlan,
  NetworkPolicy,
  Ping,
  PoolInfo,
  ProcessEvent,
  SandboxInfo,
  SecretOptions,
  SnapshotInfo,
  SnapshotKind,
  Status,
} from "./types";
import {
  InvalidConfigError,
  InvalidStateError,
  SandboxAlreadyExistsError,
  SandboxNotFoundError,
} from "./errors";
import { native, NativeObject, call } from "./native";
import { toBuffer, opt, toCapabilities, toInfo, toMetrics, toPool, toSnapshot, toStat, exec } from "./records";
import { FileWriter, openRead, openWrite, writeStream } from "./files";
import type { ByteSource, WriteStreamOptions } from "./files";
import type { ReadableStream } from "node:stream/web";

export { FileWriter } from "./files";
export type { ByteSource, WriteStreamOptions } from "./files";

/** The core's error codes, in order. */
export function errorCodes(): string[] {
  return native.errorCodes();
}

/** Sets the burrow home of the calls that follow (`null`: `$BURROW_HOME`). */
export function configure(options: { home?: string | null } = {}): void {
  native.configure(options.home ?? null);
}

/** Calls of this process still running in the core (diagnostics). */
export function inFlight(): number {
  return native.inFlight();
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
  /**
   * `exec` only: keep at most this many bytes of each of stdout and stderr
   * (the rest is read and dropped; the process runs to its end);
   * `ExecResult.truncated` says whether any was dropped.
   */
  outputLimit?: number;
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
  /**
   * Opens a file to read as a stream of chunks (at most 256 KiB each): a
   * web `ReadableStream`, so `for await (const chunk of stream)`,
   * `stream.pipeTo(...)` or `Readable.fromWeb(stream)`. A chunk is read
   * from the sandbox only when asked for (memory stays flat);
   * `stream.cancel()` (or a `for await` left early) abandons the rest at
   * once: a pending read ends (`done`) and the guest's file is released;
   * a pull that fails or whose `signal` aborts releases it too. A missing
   * file rejects here.
   */
  readStream(path: string, opts?: CallOptions): Promise<ReadableStream<Uint8Array>> {
    return openRead(this.#o, path, opts);
  }
  /**
   * Writes a file (created with `mode`, default 0o644, or truncated; or
   * appended to) from `source`, chunk by chunk: an async iterable (a Node
   * `Readable`, a generator), a web `ReadableStream`, an iterable of
   * chunks, or bytes. Resolves to the number of bytes written; a source
   * that throws (or the `signal` aborting) abandons the write and rejects
   * with that error.
   */
  writeStream(path: string, source: ByteSource, opts?: WriteStreamOptions): Promise<number> {
    return writeStream(this.#o, path, source, opts);
  }
  /**
   * Opens a file to write chunk by chunk: `write`, then `finish` (or
   * `abandon`, which closes the guest's file at once).
   */
  openWrite(path: string, opts?: WriteStreamOptions): Promise<FileWriter> {
    return openWrite(this.#o, path, opts);
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
        network: changes.network,
      },
      changes,
    );
    return {
      changes: plan.changes.map((c: any) => ({ field: c.field, applies: c.applies, note: opt(c.note) })),
      info: await this.record(Promise.resolve(plan.info)),
    };
  }
  /**
   * Saves the sandbox under `name`: its files (its writable layer over its
   * image, usable as the image `snapshot:NAME`), or with `kind: "full"` a
   * running vm sandbox whole. A running sandbox is frozen for the copy and
   * goes on; sandboxes made from a filesystem snapshot start its image's
   * command, not its processes. A taken name is `SandboxAlreadyExistsError`
   * (code `already_exists`).
   */
  async snapshot(name: string, opts: CallOptions & { kind?: SnapshotKind } = {}): Promise<SnapshotInfo> {
    return toSnapshot(await call(this.o, { op: "snapshot", name, kind: opts.kind }, opts));
  }
  /** @internal The copies of a fork (see `Sandbox.fork`), as handles. */
  protected async forkHandles(opts: ForkOptions): Promise<SandboxHandle[]> {
    if (typeof opts.names === "string") throw new TypeError("names is an array of names, not one string");
    const records: any[] = await call(
      this.o,
      { op: "fork", count: opts.count, names: opts.names ?? [], detached: !!opts.detached },
      opts,
    );
    return Promise.all(
      records.map(
        async (r) => new SandboxHandle(await call(null, { op: "bind", id: r.id, name: r.name, status: r.status }, opts)),
      ),
    );
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

/** A page of `Sandbox.list`: a handle of each sandbox listed. */
export interface SandboxPage {
  sandboxes: SandboxHandle[];
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
  /** Forks the running sandbox (see `Sandbox.fork`); the copies' handles. */
  fork(opts: ForkOptions = {}): Promise<SandboxHandle[]> {
    return this.forkHandles(opts);
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

  /**
   * Copies the running sandbox into new sandboxes, each started, in order:
   * `count` copies (default 1, or one per name) named `names` (default
   * `<name>-fork-<n>`). A vm sandbox is copied whole (memory, processes and
   * files; each copy has its own id, hostname, machine id and random state)
   * and stops only for the save; a container is copied by its files (its
   * processes are not copied: each copy runs its image's command afresh).
   * All or nothing: a taken name is `SandboxAlreadyExistsError` and no copy
   * is left; a sandbox that is not running, `InvalidStateError`.
   */
  async fork(opts: ForkOptions = {}): Promise<Sandbox[]> {
    const handles = await this.forkHandles(opts);
    return Promise.all(handles.map((h) => h.connect(opts)));
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
  /** What the backend can do beyond the lifecycle every backend has (`pause`, live `modify`, ...). */
  static async capabilities(opts?: CallOptions): Promise<Capabilities> {
    return toCapabilities(await call(null, { op: "capabilities" }, opts));
  }
  /** The stored snapshots, by name. */
  static async snapshots(opts?: CallOptions): Promise<SnapshotInfo[]> {
    return (await call(null, { op: "list_snapshots" }, opts)).map(toSnapshot);
  }
  /** One stored snapshot (`SandboxNotFoundError` if there is none). */
  static async getSnapshot(name: string, opts?: CallOptions): Promise<SnapshotInfo> {
    return toSnapshot(await call(null, { op: "get_snapshot", name }, opts));
  }
  /**
   * Removes a stored snapshot: `SnapshotInUseError` (naming them in
   * `sandboxes`) while sandboxes created from it exist. Its content goes at
   * the next image prune.
   */
  static removeSnapshot(name: string, opts?: CallOptions): Promise<void> {
    return call(null, { op: "remove_snapshot", name }, opts);
  }
  /** One warm pool, its sandboxes counted (`SandboxNotFoundError` if there is none). */
  static async getPool(name: string, opts?: CallOptions): Promise<PoolInfo> {
    return toPool(await call(null, { op: "get_pool", name }, opts));
  }
  /** Every warm pool, by name (see `SandboxBuilder.createPool`). */
  static async listPools(opts?: CallOptions): Promise<PoolInfo[]> {
    return (await call(null, { op: "list_pools" }, opts)).map(toPool);
  }
  /**
   * Sets how many warm sandboxes the pool keeps (0 to 64) and answers once
   * it has started or removed sandboxes to match.
   */
  static async scalePool(name: string, size: number, opts?: CallOptions): Promise<PoolInfo> {
    return toPool(await call(null, { op: "scale_pool", name, size }, opts));
  }
  /** Removes the pool and its warm sandboxes; sandboxes claimed from it stay. */
  static removePool(name: string, opts?: CallOptions): Promise<void> {
    return call(null, { op: "remove_pool", name }, opts);
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
      {
        op: "exec",
        argv,
        env: opts.env,
        cwd: opts.cwd,
        timeout: opts.processTimeout,
        output_limit: opts.outputLimit,
      },
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
  /**
   * Disk limit in MiB of the writable layer (`GiB(8)`; 32 MiB to 16 TiB,
   * else `InvalidConfigError`): past it the guest gets `ENOSPC`. The vm
   * driver and containers run as root hold it; where the host cannot (an
   * unprivileged user's container) it rejects with `InvalidConfigError`
   * unless `bestEffortLimits()`.
   */
  diskMb(mb: number): this {
    this.#o.disk_mb = mb;
    return this;
  }
  /** Run even where `cpus`, `memory`, `pidsLimit` or `diskMb` cannot be
   * enforced (an unprivileged user without a delegated cgroup, whose
   * containers hold no disk limit): such a limit is left out instead of the
   * create failing with `InvalidConfigError`. */
  bestEffortLimits(yes = true): this {
    this.#o.best_effort_limits = yes;
    return this;
  }
  /**
   * Whether the limits left out take the backend's defaults (on unless
   * this says `false`); off, they stay unlimited (`config.defaultLimits`
   * is then `false`). `burrow serve` allows off to its default tenant only.
   */
  defaultLimits(yes = true): this {
    this.#o.default_limits = yes;
    return this;
  }
  /**
   * Allows syscalls that burrow's seccomp profile denies, by their x86-64
   * names (`allowSyscall("io_uring_setup")`; repeatable). A name that is
   * not one rejects with `InvalidConfigError`. A microVM has no such
   * filter (its guest kernel is the boundary): there it changes nothing.
   * `burrow serve` allows it to its default tenant only.
   */
  allowSyscall(...names: string[]): this {
    for (const n of names) {
      if (typeof n !== "string") throw new TypeError("a syscall name is a string");
    }
    const l = (this.#o.seccomp_allow as string[]) ?? [];
    this.#o.seccomp_allow = [...l, ...names];
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
  /**
   * The sandbox's network: `true` (anything public), `false` (none), or a
   * policy (`network({ allow: ["pypi.org"] })`; docs/networking.md).
   */
  network(on: boolean | "all" | "none" | NetworkPolicy = true): this {
    this.#o.network = on;
    return this;
  }
  /**
   * Publishes a port while the sandbox runs
   * (`"[HOST_IP:]HOST_PORT:GUEST_PORT[/udp]"`, 127.0.0.1 by default):
   * `port("8080:80")`. A host address that is taken rejects the start with
   * `PortUnavailableError`.
   */
  port(mapping: string): this {
    const p = (this.#o.ports as string[]) ?? [];
    this.#o.ports = [...p, mapping];
    return this;
  }
  /**
   * A secret the sandbox never holds: its variable `name` holds a
   * placeholder, which the sandbox's network stack replaces with `value`
   * in the values of the `Authorization` and `Proxy-Authorization`
   * headers, or of the `headers` named instead, of HTTP requests (HTTPS
   * included) to `hosts` only (`"api.github.com"`, `"*.example.com"`, an
   * IPv4 address); a placeholder in the request line or another header,
   * or sent anywhere else, closes the connection. Needs a network. The
   * value is never read back (`config.secrets` has each name, hosts,
   * headers and placeholder).
   * `secret("GITHUB_TOKEN", token, ["api.github.com"])`,
   * `secret("KEY", key, ["api.example.com"], { headers: ["X-Api-Key"] })`.
   */
  secret(name: string, value: string, hosts: string[], options: SecretOptions = {}): this {
    if (!Array.isArray(hosts)) throw new TypeError("a secret's hosts are an array of strings");
    const headers = options.headers ?? [];
    if (!Array.isArray(headers)) throw new TypeError("a secret's headers are an array of strings");
    const s = (this.#o.secrets as unknown[]) ?? [];
    this.#o.secrets = [...s, { name, value, hosts, headers }];
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
  /**
   * Defines the warm pool of this name: `size` sandboxes (0 to 64) of this
   * configuration kept started and unclaimed; answers once they run. A
   * `create()` or `connectOrCreate()` of that configuration (but for its
   * labels, env, idle timeout and action, max duration, demand start and
   * startup timeout) then claims one of them, running, under its own name,
   * labels and env; the pool refills in the background; `define()` never
   * claims. `detached` and `destroyOnDispose` do not apply (warm sandboxes
   * belong to no process). A taken name is `SandboxAlreadyExistsError`, a
   * size over 64 `InvalidArgumentError`, labels, ports or secrets (each
   * sandbox's own) `InvalidConfigError`; a refused definition changes nothing.
   */
  async createPool(size: number, opts?: CallOptions): Promise<PoolInfo> {
    const { detached: _detached, ...options } = this.#o;
    return toPool(await call(null, { op: "create_pool", name: this.#name, size, ...options }, opts));
  }
}

