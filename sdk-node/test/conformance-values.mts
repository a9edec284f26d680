// What the conformance runner compares: step results and outcomes, the
// language-neutral form of the package's values, the error class of every
// code, and how fields are read from records.

import {
  BurrowError,
  ERROR_CLASSES,
  Process,
  Sandbox,
  SandboxHandle,
  type PoolInfo,
  type SandboxConfig,
  type SandboxInfo,
  type SnapshotInfo,
} from "burrow";
import { MATCH_OPERATORS, OPERATOR_MODIFIERS, VALUE_OPERATORS, isObject, type Json } from "./conformance-cases.mjs";

/** The TypeScript class of every core code (sdk-node/API.md, "Errors"). */
export const CODE_CLASSES: Record<string, string> = {
  sandbox_replaced: "SandboxReplacedError",
  already_exists: "SandboxAlreadyExistsError",
  not_found: "SandboxNotFoundError",
  invalid_state: "InvalidStateError",
  invalid_name: "InvalidNameError",
  invalid_config: "InvalidConfigError",
  invalid_image: "InvalidImageError",
  invalid_argument: "InvalidArgumentError",
  starting: "StartingError",
  start_failed: "StartFailedError",
  timeout: "TimeoutError",
  runtime_unavailable: "RuntimeUnavailableError",
  guest: "GuestError",
  protocol: "ProtocolError",
  store: "StoreError",
  io: "BurrowIOError",
  unauthorized: "UnauthorizedError",
  unsupported: "UnsupportedError",
  port_unavailable: "PortUnavailableError",
  snapshot_in_use: "SnapshotInUseError",
  forbidden: "ForbiddenError",
  quota_exceeded: "QuotaExceededError",
  rate_limited: "RateLimitedError",
};

/** A field that is not there (unlike `null`, a value). */
export const MISSING: unique symbol = Symbol("missing");
export type Value = Json | typeof MISSING | undefined;

export function isOperator(obj: unknown): obj is Record<string, any> {
  if (!isObject(obj)) return false;
  const keys = Object.keys(obj);
  if (!keys.length) return false;
  const main = keys.filter((k) => VALUE_OPERATORS.has(k) || MATCH_OPERATORS.has(k));
  return main.length === 1 && keys.every((k) => VALUE_OPERATORS.has(k) || MATCH_OPERATORS.has(k) || OPERATOR_MODIFIERS.has(k));
}

/** The language-neutral form of an SDK value: bytes as text, dates as ISO text. */
export function norm(v: unknown): Value {
  if (v === MISSING) return MISSING;
  if (v === undefined) return undefined;
  if (Buffer.isBuffer(v)) return v.toString("utf8");
  if (v instanceof Date) return v.toISOString();
  if (Array.isArray(v)) return v.map((x) => norm(x) as Json);
  if (isObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, norm(x) as Json]));
  return v as Json;
}

export function equal(expected: Value, actual: Value): boolean {
  if (actual === MISSING) return false;
  if (typeof expected === "boolean" || typeof actual === "boolean") return expected === actual;
  if (typeof expected === "number" && typeof actual === "number") return Math.abs(expected - actual) < 1e-9;
  return JSON.stringify(sorted(norm(expected))) === JSON.stringify(sorted(norm(actual)));
}

export function sorted(v: Value): Value {
  if (Array.isArray(v)) return v.map((x) => sorted(x) as Json);
  if (isObject(v)) return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k]) as Json]));
  return v;
}

export function show(v: Value): string {
  return v === MISSING ? "<absent>" : JSON.stringify(v);
}

// The SDK's records in the cases' neutral vocabulary (snake_case; durations
// are seconds in both).
export function neutralConfig(c: SandboxConfig): Record<string, Json> {
  return {
    image: c.image,
    driver: c.driver,
    runtime: c.runtime,
    cpus: c.cpus,
    memory_mb: c.memory,
    pids_limit: c.pidsLimit,
    disk_mb: c.diskMb,
    default_limits: c.defaultLimits,
    seccomp_allow: c.seccompAllow,
    env: c.env,
    workdir: c.workdir,
    labels: c.labels,
    network: c.network as Json,
    ports: c.ports,
    secrets: c.secrets as unknown as Json,
    idle_timeout: c.idleTimeout,
    idle_action: c.idleAction,
    max_duration: c.maxDuration,
    demand_start: c.demandStart,
    startup_timeout: c.startupTimeout,
  };
}

export function infoField(info: SandboxInfo, key: string): Value {
  switch (key) {
    case "id":
    case "name":
    case "status":
    case "generation":
    case "detached":
      return info[key];
    case "config":
      return neutralConfig(info.config);
    case "exit_reason":
      return info.lastRun?.exitReason ?? null;
    case "detail":
      return info.lastRun?.detail ?? null;
    default:
      return MISSING;
  }
}

/** An exec's outcome (exec, or a spawned process collected by `wait`). */
export interface Collected {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  truncated?: boolean;
}

export type Kind = "sandbox" | "handle" | "info" | "plan" | "exec" | "value" | "list" | "process" | "none";
export type Target = Sandbox | SandboxHandle;

/** A step's result with its kind. */
export interface R {
  kind: Kind;
  obj?: any;
}

export interface Outcome {
  result: R | null;
  error: unknown;
}

export function codeOf(e: unknown): string | null {
  return e instanceof Error && typeof (e as any).code === "string" ? (e as any).code : null;
}

export function describe(e: unknown): string {
  if (e instanceof Error) return `${e.constructor.name}(code=${codeOf(e)}): ${e.message}`;
  return String(e);
}

/** Whether `e` is an instance of the class of its code (and of BurrowError). */
export function classOk(e: unknown): boolean {
  const code = codeOf(e);
  const cls = code === null ? undefined : ERROR_CLASSES[code];
  return (
    cls !== undefined &&
    e instanceof cls &&
    e instanceof BurrowError &&
    (e as Error).constructor.name === CODE_CLASSES[code!]
  );
}

export function errorField(e: unknown, key: string): Value {
  if (!(e instanceof BurrowError)) return MISSING;
  switch (key) {
    case "code":
      return e.code;
    case "sandbox_id":
      return e.sandboxId ?? null;
    case "name":
      return e.sandboxName ?? null;
    case "status":
      return e.status ?? null;
    case "guest_code":
      return e.body.guest?.code ?? null;
    default:
      return MISSING;
  }
}

export const sleep = (s: number) => new Promise<void>((r) => setTimeout(r, s * 1000));

/** What a race caller reports (plain data: it crosses the IPC channel). */
export interface RaceReport {
  ok: boolean;
  code: string | null;
  error?: string;
  classOk?: boolean;
  fields?: Record<string, Json>;
  pid?: number;
}

/** A snapshot as the cases see it: the core's field names and values. */
export function snapshotValue(s: SnapshotInfo): Record<string, unknown> {
  return {
    name: s.name,
    kind: s.kind,
    image: s.image,
    digest: s.digest,
    size: s.size,
    source_id: s.sourceId,
    source_name: s.sourceName,
    base_image: s.baseImage,
    driver: s.driver,
    created_at_ms: s.createdAt.getTime(),
  };
}

/** A pool as the cases see it: the core's field names and values (its configuration as an info's). */
export function poolValue(p: PoolInfo): Record<string, unknown> {
  return {
    name: p.name,
    config: neutralConfig(p.config),
    size: p.size,
    warm: p.warm,
    starting: p.starting,
    claims: p.claims,
    misses: p.misses,
    last_refill_ms: p.lastRefill === null ? null : Math.round(p.lastRefill * 1000),
    created_at_ms: p.createdAt.getTime(),
  };
}

/**
 * `data` cut into `chunks` pieces of `ceil(len / chunks)` bytes (the last
 * one shorter; none for empty data), as every interpreter cuts an
 * `fs_write_stream`'s data.
 */
export function splitChunks(data: Buffer, chunks: number): Buffer[] {
  const size = Math.max(1, Math.ceil(data.length / Math.max(1, chunks)));
  const out: Buffer[] = [];
  for (let i = 0; i < data.length; i += size) out.push(data.subarray(i, i + size));
  return out;
}

export async function collect(proc: Process): Promise<Collected> {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  for await (const ev of proc) {
    if (ev.kind === "stdout") out.push(ev.data);
    else if (ev.kind === "stderr") err.push(ev.data);
  }
  const st = proc.exitStatus;
  if (!st) throw new Error("the process ended without an exit status");
  return { stdout: Buffer.concat(out), stderr: Buffer.concat(err), exitCode: st.exitCode, signal: st.signal, timedOut: st.timedOut };
}
