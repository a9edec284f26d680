// Interpreter of the language-neutral lifecycle cases
// (tests/conformance/cases.json) on top of the installed `burrow` package.
// The step vocabulary is documented in tests/conformance/README.md; this is
// the TypeScript twin of sdk-python/tests/conformance_runner.py.
//
// `race` steps with `"processes": true` run each caller in its own Node
// process (race-caller.mjs, started with child_process.fork), all released
// together by a barrier over the IPC channel.

import { fork, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import {
  BurrowError,
  ERROR_CLASSES,
  Process,
  Sandbox,
  SandboxHandle,
  SandboxNotFoundError,
  type ModifyOptions,
  type ModifyPlan,
  type SandboxConfig,
  type SandboxInfo,
  type SnapshotInfo,
  type Status,
} from "burrow";

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Step = { op: string; [k: string]: any };
export interface Case {
  id: string;
  title: string;
  reference: string;
  steps: Step[];
  tags?: string[];
  timeout?: number;
  notes?: string;
}
export interface Document {
  format: string;
  cases: Case[];
}

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
};

const NAME_OPS = [
  "create", "connect_or_create", "define", "get", "get_by_id", "list", "get_snapshot", "list_snapshots",
  "remove_snapshot",
];
const TARGET_OPS = [
  "handle", "info", "status", "config", "start", "connect_or_start", "connect",
  "restart", "stop", "kill", "request_drain", "pause", "resume", "touch", "modify",
  "wait_for_status", "wait_until_stopped", "destroy", "detach", "ping", "exec",
  "spawn", "fs_write", "fs_read", "fs_exists", "fs_mkdir", "fs_list", "fs_write_stream",
  "fs_read_stream", "follow_logs", "snapshot", "fork",
];
const CONTROL_OPS = ["wait", "await", "sleep", "repeat", "race", "remove"];
const KNOWN_OPS = new Set([...NAME_OPS, ...TARGET_OPS, ...CONTROL_OPS]);
const PROCESS_RACE_OPS = new Set(["create", "connect_or_create", "connect_or_start"]);
const COMMON_KEYS = ["op", "as", "save", "expect", "tolerate", "within", "background"];
const OP_KEYS: Record<string, string[]> = {
  create: ["name", "options"],
  connect_or_create: ["name", "options"],
  define: ["name", "options"],
  get: ["name"],
  get_by_id: ["id"],
  list: ["status", "labels"],
  remove: ["name", "sandbox"],
  stop: ["sandbox", "grace"],
  modify: ["sandbox", "changes"],
  wait_for_status: ["sandbox", "statuses", "timeout"],
  exec: ["sandbox", "argv", "stdin", "env", "cwd", "timeout", "output_limit"],
  spawn: ["sandbox", "argv", "env", "cwd", "timeout"],
  fs_write: ["sandbox", "path", "data"],
  fs_read: ["sandbox", "path"],
  fs_write_stream: ["sandbox", "path", "data", "chunks"],
  fs_read_stream: ["sandbox", "path"],
  fs_exists: ["sandbox", "path"],
  fs_mkdir: ["sandbox", "path", "parents"],
  fs_list: ["sandbox", "path"],
  follow_logs: ["sandbox", "source", "timeout"],
  snapshot: ["sandbox", "snapshot", "kind"],
  fork: ["sandbox", "count", "names"],
  get_snapshot: ["snapshot"],
  remove_snapshot: ["snapshot"],
  list_snapshots: [],
  wait: ["process"],
  await: ["job"],
  sleep: ["seconds"],
  repeat: ["seconds", "interval", "do"],
  race: ["callers", "processes", "do"],
  connect_or_start: ["sandbox", "name"],
};
const CREATE_OPTIONS = new Set([
  "image", "cpus", "memory_mb", "pids_limit", "best_effort_limits", "env", "workdir", "labels", "network", "ports",
  "secrets", "idle_timeout", "idle_action", "max_duration", "startup_timeout", "demand_start", "detached", "replace",
]);
/** The changes a `modify` step may name (durations in seconds; null clears cpus, memory_mb, idle_timeout, max_duration). */
const MODIFY_CHANGES = new Set([
  "cpus", "memory_mb", "env_set", "env_unset", "labels_set", "labels_unset",
  "idle_timeout", "idle_action", "max_duration", "network",
]);
const RACE_EXPECT_KEYS = new Set(["outcomes", "same_id", "starts", "each"]);
const CAPABILITY_TAGS = new Set([
  "pause", "modify_live", "metrics", "logs", "idle_reclaim", "attached", "persistent_layer",
  "network_policy", "published_ports", "secrets", "snapshots", "full_snapshots",
  "fork",
]);
const VALUE_OPERATORS = new Set(["var", "str_repeat"]);
const MATCH_OPERATORS = new Set(["ne", "one_of", "present"]);
const OPERATOR_MODIFIERS = new Set(["add", "times"]);

/** How long a follow_logs step waits for its stream to end (seconds, scaled) unless the step says. */
const FOLLOW_TIMEOUT = 60;

/** A field that is not there (unlike `null`, a value). */
const MISSING: unique symbol = Symbol("missing");
type Value = Json | typeof MISSING | undefined;

/** A step's outcome did not meet its expectation. */
export class ConformanceFailure extends Error {
  override name = "ConformanceFailure";
}

// ---------------------------------------------------------------------------
// The cases file

export function casesPath(): string {
  return (
    process.env.BURROW_CONFORMANCE_CASES ||
    fileURLToPath(new URL("../../../tests/conformance/cases.json", import.meta.url))
  );
}

export function loadDocument(path: string = casesPath()): Document {
  return JSON.parse(readFileSync(path, "utf8")) as Document;
}

/** A snapshot as the cases see it: the core's field names and values. */
function snapshotValue(s: SnapshotInfo): Record<string, unknown> {
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

/** The capability a step needs by itself (as the Rust kit's step_capability). */
export function stepCapability(step: Step): string | null {
  const options = step.options ?? {};
  if (step.op === "pause" || step.op === "resume") return "pause";
  if (step.op === "modify") return "modify_live";
  if (step.op === "follow_logs") return "logs";
  if (step.op === "detach") return "attached";
  if (step.op === "snapshot" && step.kind === "full") return "full_snapshots";
  if (["snapshot", "get_snapshot", "list_snapshots", "remove_snapshot"].includes(step.op)) return "snapshots";
  if (step.op === "fork") return "fork";
  if (step.op === "race" && step.processes) {
    const d = step.do ?? {};
    const owns = (d.op === "create" || d.op === "connect_or_create") && !(d.options ?? {}).detached;
    return owns ? "attached" : null;
  }
  if (options.network !== null && typeof options.network === "object") return "network_policy";
  if ("ports" in options) return "published_ports";
  if ("secrets" in options) return "secrets";
  if ("idle_timeout" in options || "idle_action" in options || "demand_start" in options) return "idle_reclaim";
  return null;
}

/** Structural problems of a cases document (empty when it is well formed). */
export function validateCases(doc: Document, repoRoot: string): string[] {
  const problems: string[] = [];
  if (doc.format !== "burrow-conformance/1") problems.push(`unknown format ${JSON.stringify(doc.format)}`);
  const seen = new Set<string>();
  doc.cases.forEach((c, i) => {
    const where = c.id ?? `case #${i}`;
    for (const key of ["id", "title", "reference", "steps"]) {
      if (!(key in c)) problems.push(`${where}: missing ${key}`);
    }
    const extra = Object.keys(c).filter((k) => !["id", "title", "reference", "steps", "tags", "timeout", "notes"].includes(k));
    if (extra.length) problems.push(`${where}: unknown keys ${extra}`);
    if (seen.has(where)) problems.push(`${where}: duplicate id`);
    seen.add(where);
    const [file, fn] = (c.reference ?? "").split("::");
    let text = "";
    try {
      text = readFileSync(`${repoRoot}/${file}`, "utf8");
    } catch {
      problems.push(`${where}: reference ${c.reference} is not path::function`);
    }
    if (text && !(fn && text.includes(`fn ${fn}(`))) problems.push(`${where}: ${file} has no fn ${fn}`);
    for (const t of c.tags ?? []) {
      if (t !== "processes" && t !== "idle" && !CAPABILITY_TAGS.has(t)) problems.push(`${where}: unknown tag ${t}`);
    }
    const bound = new Set<string>();
    c.steps.forEach((s, j) => {
      problems.push(...validateStep(s, `${where} step ${j + 1}`, bound, true));
      problems.push(...checkCapabilityTags(s, `${where} step ${j + 1}`, c.tags ?? []));
    });
  });
  return problems;
}

function checkCapabilityTags(step: Step, where: string, tags: string[]): string[] {
  const out: string[] = [];
  const cap = stepCapability(step);
  if (cap && !(step.tolerate ?? []).includes("unsupported") && !tags.includes(cap)) {
    out.push(`${where}: ${step.op} needs the capability tag ${cap} on its case`);
  }
  if (step.do && typeof step.do === "object") out.push(...checkCapabilityTags(step.do, `${where} do`, tags));
  return out;
}

function validateStep(step: Step, where: string, bound: Set<string>, top: boolean): string[] {
  const out: string[] = [];
  const op = step.op;
  if (!KNOWN_OPS.has(op)) return [`${where}: unknown op ${op}`];
  const allowed = new Set([...COMMON_KEYS, ...(OP_KEYS[op] ?? ["sandbox"])]);
  const extra = Object.keys(step).filter((k) => !allowed.has(k));
  if (extra.length) out.push(`${where}: ${op}: unknown keys ${extra}`);
  if (TARGET_OPS.includes(op) && op !== "connect_or_start" && !("sandbox" in step)) out.push(`${where}: ${op} needs 'sandbox'`);
  if (op === "connect_or_start" && ("sandbox" in step) === ("name" in step)) {
    out.push(`${where}: connect_or_start needs exactly one of 'sandbox', 'name'`);
  }
  if ("sandbox" in step && top && !bound.has(step.sandbox)) out.push(`${where}: variable ${step.sandbox} is not bound by an earlier step`);
  if (step.options) {
    const bad = Object.keys(step.options).filter((k) => !CREATE_OPTIONS.has(k));
    if (bad.length) out.push(`${where}: unknown options ${bad}`);
  }
  if ("changes" in step) {
    if (!isObject(step.changes)) out.push(`${where}: changes must be an object`);
    else {
      const bad = Object.keys(step.changes).filter((k) => !MODIFY_CHANGES.has(k));
      if (bad.length) out.push(`${where}: unknown changes ${bad}`);
    }
  }
  if ("within" in step && "background" in step) out.push(`${where}: 'within' and 'background' do not combine`);
  if (op === "repeat" || op === "race") {
    if (!step.do || typeof step.do !== "object") out.push(`${where}: ${op} needs a 'do' step`);
    else {
      out.push(...validateStep(step.do, `${where} do`, bound, false));
      if ("as" in step.do) out.push(`${where}: the 'do' of a ${op} cannot bind with 'as'`);
    }
  }
  if (op === "race") {
    const bad = Object.keys(step.expect ?? {}).filter((k) => !RACE_EXPECT_KEYS.has(k));
    if (bad.length) out.push(`${where}: race: unknown expect keys ${bad}`);
    if (step.processes && (!PROCESS_RACE_OPS.has(step.do?.op) || !("name" in (step.do ?? {})))) {
      out.push(`${where}: a race in processes runs only ${[...PROCESS_RACE_OPS]} by name`);
    }
  }
  if ("as" in step) bound.add(step.as);
  return out;
}

// ---------------------------------------------------------------------------
// Values and matching

function isObject(v: unknown): v is Record<string, any> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !Buffer.isBuffer(v) && !(v instanceof Date);
}

function isOperator(obj: unknown): obj is Record<string, any> {
  if (!isObject(obj)) return false;
  const keys = Object.keys(obj);
  if (!keys.length) return false;
  const main = keys.filter((k) => VALUE_OPERATORS.has(k) || MATCH_OPERATORS.has(k));
  return main.length === 1 && keys.every((k) => VALUE_OPERATORS.has(k) || MATCH_OPERATORS.has(k) || OPERATOR_MODIFIERS.has(k));
}

/** The language-neutral form of an SDK value: bytes as text, dates as ISO text. */
function norm(v: unknown): Value {
  if (v === MISSING) return MISSING;
  if (v === undefined) return undefined;
  if (Buffer.isBuffer(v)) return v.toString("utf8");
  if (v instanceof Date) return v.toISOString();
  if (Array.isArray(v)) return v.map((x) => norm(x) as Json);
  if (isObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, norm(x) as Json]));
  return v as Json;
}

function equal(expected: Value, actual: Value): boolean {
  if (actual === MISSING) return false;
  if (typeof expected === "boolean" || typeof actual === "boolean") return expected === actual;
  if (typeof expected === "number" && typeof actual === "number") return Math.abs(expected - actual) < 1e-9;
  return JSON.stringify(sorted(norm(expected))) === JSON.stringify(sorted(norm(actual)));
}

function sorted(v: Value): Value {
  if (Array.isArray(v)) return v.map((x) => sorted(x) as Json);
  if (isObject(v)) return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k]) as Json]));
  return v;
}

function show(v: Value): string {
  return v === MISSING ? "<absent>" : JSON.stringify(v);
}

// The SDK's records in the cases' neutral vocabulary (snake_case; durations
// are seconds in both).
function neutralConfig(c: SandboxConfig): Record<string, Json> {
  return {
    image: c.image,
    driver: c.driver,
    runtime: c.runtime,
    cpus: c.cpus,
    memory_mb: c.memory,
    pids_limit: c.pidsLimit,
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

function infoField(info: SandboxInfo, key: string): Value {
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
interface Collected {
  stdout: Buffer;
  stderr: Buffer;
  exitCode: number | null;
  signal: number | null;
  timedOut: boolean;
  truncated?: boolean;
}

type Kind = "sandbox" | "handle" | "info" | "plan" | "exec" | "value" | "list" | "process" | "none";
type Target = Sandbox | SandboxHandle;

/** A step's result with its kind. */
interface R {
  kind: Kind;
  obj?: any;
}

interface Outcome {
  result: R | null;
  error: unknown;
}

function codeOf(e: unknown): string | null {
  return e instanceof Error && typeof (e as any).code === "string" ? (e as any).code : null;
}

function describe(e: unknown): string {
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

function errorField(e: unknown, key: string): Value {
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

const sleep = (s: number) => new Promise<void>((r) => setTimeout(r, s * 1000));

/** What a race caller reports (plain data: it crosses the IPC channel). */
export interface RaceReport {
  ok: boolean;
  code: string | null;
  error?: string;
  classOk?: boolean;
  fields?: Record<string, Json>;
  pid?: number;
}

// ---------------------------------------------------------------------------
// The interpreter

export interface RunnerOptions {
  image: string;
  /** The burrow home of the case (handed to race callers). */
  home: string | null;
  timeScale?: number;
  cleanup?: boolean;
}

/** Runs cases against the burrow home the process is configured for. */
export class Runner {
  readonly image: string;
  readonly home: string | null;
  readonly scale: number;
  readonly cleanup: boolean;
  values = new Map<string, Json>();
  objects = new Map<string, any>();
  jobs = new Map<string, Promise<Outcome>>();
  trace: string[] = [];

  constructor(o: RunnerOptions) {
    this.image = o.image;
    this.home = o.home;
    this.scale = o.timeScale ?? Number(process.env.BURROW_CONFORMANCE_TIME_SCALE || 1);
    this.cleanup = o.cleanup ?? true;
  }

  async runCase(c: Case): Promise<void> {
    const limit = (c.timeout ?? 180) * this.scale;
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new ConformanceFailure(`case ${c.id} did not finish within ${limit} s\n${this.traceText()}`)),
        limit * 1000,
      );
    });
    try {
      await Promise.race([this.runSteps(c), bound]);
    } finally {
      clearTimeout(timer);
      await this.cleanUp();
    }
  }

  private async runSteps(c: Case): Promise<void> {
    for (const [i, step] of c.steps.entries()) {
      const where = `${c.id} step ${i + 1} (${step.op})`;
      this.trace.push(`${where}: ${JSON.stringify(step)}`);
      try {
        await this.runStep(step, where);
      } catch (e) {
        if (e instanceof ConformanceFailure) {
          throw new ConformanceFailure(`${e.message}\n--- steps so far ---\n${this.traceText()}`);
        }
        throw e;
      }
    }
  }

  private traceText(): string {
    return this.trace.slice(-40).join("\n");
  }

  private async cleanUp(): Promise<void> {
    await Promise.allSettled(this.jobs.values());
    this.jobs.clear();
    if (!this.cleanup) return;
    let handles: SandboxHandle[];
    try {
      handles = (await Sandbox.list({}, { timeout: 30 })).sandboxes;
    } catch {
      return;
    }
    for (const handle of handles) {
      try {
        await handle.destroy({ timeout: 60 });
      } catch {
        // cleanup only
      }
    }
  }

  // -- steps ----------------------------------------------------------------

  async runStep(step: Step, where: string): Promise<void> {
    const op = step.op;
    if ("background" in step) {
      const job: string = step.background;
      if (this.jobs.has(job)) throw new ConformanceFailure(`${where}: job ${job} already running`);
      this.jobs.set(job, this.invoke(step));
      return;
    }
    if (op === "sleep") return sleep(Number(step.seconds));
    if (op === "repeat") return this.repeat(step, where);
    if (op === "race") return this.race(step, where);
    if (op === "await") {
      const job = this.jobs.get(step.job);
      if (!job) throw new ConformanceFailure(`${where}: no background job ${step.job}`);
      this.jobs.delete(step.job);
      return this.conclude(step, await job, where);
    }
    const within = step.within;
    const deadline = within === undefined ? null : Date.now() + Number(within) * this.scale * 1000;
    for (;;) {
      const outcome = await this.invoke(step);
      try {
        await this.conclude(step, outcome, where);
        return;
      } catch (e) {
        if (!(e instanceof ConformanceFailure) || deadline === null || Date.now() >= deadline) throw e;
      }
      await sleep(0.2);
    }
  }

  private async repeat(step: Step, where: string): Promise<void> {
    const end = Date.now() + Number(step.seconds) * 1000;
    const interval = Number(step.interval ?? 0.5);
    for (let n = 1; Date.now() < end; n++) {
      await this.runStep(step.do, `${where} run ${n}`);
      await sleep(interval);
    }
  }

  /** Checks the outcome against the step's expectation, then binds and saves. */
  private async conclude(step: Step, outcome: Outcome, where: string): Promise<void> {
    const tolerate: string[] = step.tolerate ?? [];
    if (outcome.error !== null && tolerate.includes(codeOf(outcome.error) ?? "")) {
      this.checkErrorClass(outcome.error, where);
      return;
    }
    await this.check(step.expect ?? {}, outcome, where);
    if (outcome.error !== null) return;
    const result = outcome.result!;
    if ("as" in step) this.objects.set(step.as, result.obj);
    for (const [name, field] of Object.entries<string>(step.save ?? {})) {
      const v = await this.field(result, field, new Map());
      if (v === MISSING) throw new ConformanceFailure(`${where}: cannot save ${name}: no field ${field}`);
      this.values.set(name, (v ?? null) as Json);
    }
  }

  private async check(expect: Record<string, any>, outcome: Outcome, where: string): Promise<void> {
    const want = expect.error;
    if (want !== undefined) {
      if (outcome.error === null) {
        throw new ConformanceFailure(`${where}: expected error ${want}, but the step succeeded (${this.summary(outcome.result)})`);
      }
      if (codeOf(outcome.error) !== want) {
        throw new ConformanceFailure(`${where}: expected error ${want}, got ${describe(outcome.error)}`);
      }
      this.checkErrorClass(outcome.error, where);
      for (const [key, expected] of Object.entries(expect)) {
        if (key !== "error") this.match(expected, norm(errorField(outcome.error, key)), `${where}: error field ${key}`);
      }
      return;
    }
    if (outcome.error !== null) throw new ConformanceFailure(`${where}: unexpected error ${describe(outcome.error)}`);
    const cache = new Map<unknown, SandboxInfo>();
    for (const [key, expected] of Object.entries(expect)) {
      this.match(expected, await this.field(outcome.result!, key, cache), `${where}: field ${key}`);
    }
  }

  private checkErrorClass(e: unknown, where: string): void {
    const code = codeOf(e);
    if (code === null || !(code in CODE_CLASSES)) throw new ConformanceFailure(`${where}: error with unknown code: ${describe(e)}`);
    if (!classOk(e)) {
      throw new ConformanceFailure(`${where}: code ${code} must be thrown as ${CODE_CLASSES[code]}, got ${describe(e)}`);
    }
  }

  /** Resolves value forms ({"var"}, {"str_repeat"}) recursively. */
  value(spec: any): any {
    if (isOperator(spec) && "var" in spec) {
      if (!this.values.has(spec.var)) throw new ConformanceFailure(`no saved value ${spec.var}`);
      let v: any = this.values.get(spec.var);
      if ("add" in spec) v = v + spec.add;
      return v;
    }
    if (isOperator(spec) && "str_repeat" in spec) return String(spec.str_repeat).repeat(Number(spec.times));
    if (Array.isArray(spec)) return spec.map((x) => this.value(x));
    if (isObject(spec)) return Object.fromEntries(Object.entries(spec).map(([k, x]) => [k, this.value(x)]));
    return spec;
  }

  match(expected: any, actual: Value, what: string): void {
    const fail = (reason: string): never => {
      throw new ConformanceFailure(`${what}: ${reason}; actual ${show(actual)}`);
    };
    if (isOperator(expected) && Object.keys(expected).some((k) => MATCH_OPERATORS.has(k))) {
      if ("ne" in expected) {
        const other = this.value(expected.ne);
        if (actual === MISSING || equal(other, actual)) fail(`expected anything but ${JSON.stringify(other)}`);
      } else if ("one_of" in expected) {
        const options = (expected.one_of as any[]).map((x) => this.value(x));
        if (!options.some((o) => equal(o, actual))) fail(`expected one of ${JSON.stringify(options)}`);
      } else {
        const present = actual !== MISSING && actual !== null && actual !== undefined;
        if (present !== Boolean(expected.present)) fail(expected.present ? "expected a value" : "expected no value");
      }
      return;
    }
    if (isOperator(expected)) {
      const want = this.value(expected);
      if (!equal(want, actual)) fail(`expected ${JSON.stringify(want)}`);
      return;
    }
    if (expected === null) {
      if (actual !== null && actual !== MISSING && actual !== undefined) fail("expected null or absent");
      return;
    }
    if (isObject(expected)) {
      if (!isObject(actual)) return fail(`expected an object with ${Object.keys(expected)}`);
      for (const [k, v] of Object.entries(expected)) {
        this.match(v, k in actual ? (actual as Record<string, Value>)[k] : MISSING, `${what}.${k}`);
      }
      return;
    }
    if (Array.isArray(expected)) {
      if (!Array.isArray(actual) || actual.length !== expected.length) return fail(`expected ${JSON.stringify(expected)}`);
      expected.forEach((e, i) => this.match(e, actual[i], `${what}[${i}]`));
      return;
    }
    if (!equal(expected, actual)) fail(`expected ${JSON.stringify(expected)}`);
  }

  // -- fields ---------------------------------------------------------------

  async field(result: R, path: string, cache: Map<unknown, SandboxInfo>): Promise<Value> {
    const [head, ...rest] = path.split(".");
    let v: Value = norm(await this.topField(result, head!, cache));
    for (const part of rest) {
      if (isObject(v)) v = part in v ? (v as Record<string, Value>)[part] : MISSING;
      else return MISSING;
    }
    return v;
  }

  private async infoOf(obj: Target, cache: Map<unknown, SandboxInfo>): Promise<SandboxInfo> {
    let info = cache.get(obj);
    if (!info) {
      info = await obj.info();
      cache.set(obj, info);
    }
    return info;
  }

  private async topField(result: R, key: string, cache: Map<unknown, SandboxInfo>): Promise<unknown> {
    const { kind, obj } = result;
    switch (kind) {
      case "sandbox":
        if (key === "id" || key === "name" || key === "generation") return (obj as Sandbox)[key];
        return infoField(await this.infoOf(obj, cache), key);
      case "handle":
        if (key === "id" || key === "name") return (obj as SandboxHandle)[key];
        return infoField(await this.infoOf(obj, cache), key);
      case "info":
        return infoField(obj, key);
      case "plan": {
        const p = obj as ModifyPlan;
        return key === "changes" ? p.changes : infoField(p.info, key);
      }
      case "exec": {
        const e = obj as Collected;
        switch (key) {
          case "stdout":
            return e.stdout;
          case "stderr":
            return e.stderr;
          case "exit_code":
            return e.exitCode;
          case "signal":
            return e.signal;
          case "timed_out":
            return e.timedOut;
          case "truncated":
            return e.truncated ?? false;
          case "ok":
            return e.exitCode === 0 && !e.timedOut;
        }
        return MISSING;
      }
      case "value":
        return key === "value" ? obj : MISSING;
      case "list":
        if (key === "count") return obj.length;
        if (key === "names") return (obj as Array<{ name: string }>).map((x) => x.name).sort();
        return MISSING;
      default:
        return MISSING;
    }
  }

  private summary(r: R | null): string {
    if (!r) return "no result";
    if (r.kind === "sandbox" || r.kind === "handle") return `${r.kind} ${r.obj.id}`;
    if (r.kind === "exec") return `exit ${r.obj.exitCode}, stdout ${JSON.stringify(norm(r.obj.stdout))}`;
    return `${r.kind} ${JSON.stringify(norm(r.obj)) ?? ""}`.slice(0, 300);
  }

  // -- operations -----------------------------------------------------------

  async invoke(step: Step): Promise<Outcome> {
    try {
      return { result: await this.dispatch(step), error: null };
    } catch (e) {
      if (e instanceof ConformanceFailure) throw e;
      return { result: null, error: e };
    }
  }

  private build(step: Step) {
    const o = { image: this.image, ...this.value(step.options ?? {}) };
    const b = Sandbox.builder(this.value(step.name));
    b.image(o.image);
    if (o.cpus !== undefined) b.cpus(o.cpus);
    if (o.memory_mb !== undefined) b.memory(o.memory_mb);
    if (o.pids_limit !== undefined) b.pidsLimit(o.pids_limit);
    if (o.best_effort_limits !== undefined) b.bestEffortLimits(o.best_effort_limits);
    if (o.env !== undefined) b.env(o.env);
    if (o.workdir !== undefined) b.workdir(o.workdir);
    if (o.labels !== undefined) b.labels(o.labels);
    if (o.network !== undefined) b.network(o.network);
    for (const p of o.ports ?? []) b.port(p);
    for (const s of o.secrets ?? []) b.secret(s.name, s.value, s.hosts);
    if (o.idle_timeout !== undefined) b.idleTimeout(o.idle_timeout);
    if (o.idle_action !== undefined) b.idleAction(o.idle_action);
    if (o.max_duration !== undefined) b.maxDuration(o.max_duration);
    if (o.startup_timeout !== undefined) b.startupTimeout(o.startup_timeout);
    if (o.demand_start !== undefined) b.demandStart(o.demand_start);
    if (o.detached !== undefined) b.detached(o.detached);
    return { b, replace: o.replace === true };
  }

  /** The SDK's ModifyOptions of a `modify` step's changes (durations in seconds, null clears). */
  private modifyOptions(step: Step): ModifyOptions {
    const c: Record<string, any> = this.value(step.changes ?? {});
    const o: ModifyOptions = {};
    if ("cpus" in c) o.cpus = c.cpus;
    if ("memory_mb" in c) o.memory = c.memory_mb;
    if ("env_set" in c) o.env = c.env_set;
    if ("env_unset" in c) o.unsetEnv = c.env_unset;
    if ("labels_set" in c) o.labels = c.labels_set;
    if ("labels_unset" in c) o.unsetLabels = c.labels_unset;
    if ("idle_timeout" in c) o.idleTimeout = c.idle_timeout;
    if ("idle_action" in c) o.idleAction = c.idle_action;
    if ("max_duration" in c) o.maxDuration = c.max_duration;
    if ("network" in c) o.network = c.network;
    return o;
  }

  private target(step: Step): any {
    if (!this.objects.has(step.sandbox)) throw new ConformanceFailure(`no variable ${step.sandbox}`);
    return this.objects.get(step.sandbox);
  }

  private async asHandle(obj: Target): Promise<SandboxHandle> {
    return obj instanceof Sandbox ? obj.handle() : obj;
  }

  private live(step: Step): Sandbox {
    const obj = this.target(step);
    if (!(obj instanceof Sandbox)) throw new ConformanceFailure(`${step.op} needs a live sandbox, ${step.sandbox} is a handle`);
    return obj;
  }

  private async dispatch(step: Step): Promise<R> {
    const op = step.op;
    switch (op) {
      case "create": {
        const { b, replace } = this.build(step);
        return { kind: "sandbox", obj: await (replace ? b.replace() : b.create()) };
      }
      case "connect_or_create":
        return { kind: "sandbox", obj: await this.build(step).b.connectOrCreate() };
      case "define":
        return { kind: "handle", obj: await this.build(step).b.define() };
      case "get":
        return { kind: "handle", obj: await Sandbox.get(this.value(step.name)) };
      case "get_by_id":
        return { kind: "handle", obj: await Sandbox.getById(this.value(step.id)) };
      case "list": {
        const filter: { status?: Status[]; labels?: Record<string, string> } = {};
        if ("status" in step) filter.status = step.status;
        if ("labels" in step) filter.labels = this.value(step.labels);
        return { kind: "list", obj: (await Sandbox.list(filter)).sandboxes };
      }
      case "remove":
        if ("name" in step) await Sandbox.remove(this.value(step.name));
        else await (await this.asHandle(this.target(step))).remove();
        return { kind: "none" };
      case "wait":
        return { kind: "exec", obj: await collect(this.objects.get(step.process)) };
      case "get_snapshot":
        return { kind: "value", obj: snapshotValue(await Sandbox.getSnapshot(this.value(step.snapshot))) };
      case "list_snapshots":
        return { kind: "value", obj: (await Sandbox.snapshots()).map((s) => s.name) };
      case "remove_snapshot":
        await Sandbox.removeSnapshot(this.value(step.snapshot));
        return { kind: "none" };
    }
    if (op === "connect_or_start" && "name" in step) {
      const h = await Sandbox.get(this.value(step.name));
      return { kind: "sandbox", obj: await h.connectOrStart() };
    }

    const target: Target = this.target(step);
    switch (op) {
      case "handle":
        return { kind: "handle", obj: await this.asHandle(target) };
      case "info":
        return { kind: "info", obj: await target.info() };
      case "status":
        // A fresh read (`status` itself is the object's snapshot).
        return { kind: "value", obj: (await target.info()).status };
      case "config":
        return { kind: "value", obj: neutralConfig((await target.info()).config) };
      case "start":
        return { kind: "sandbox", obj: await (await this.asHandle(target)).start() };
      case "connect_or_start":
        return { kind: "sandbox", obj: await (await this.asHandle(target)).connectOrStart() };
      case "connect":
        return { kind: "sandbox", obj: await (await this.asHandle(target)).connect() };
      case "restart":
        return target instanceof Sandbox
          ? { kind: "info", obj: await target.restart() }
          : { kind: "sandbox", obj: await target.restart() };
      case "stop":
        return { kind: "info", obj: await target.stop("grace" in step ? { grace: Number(step.grace) } : {}) };
      case "kill":
        return { kind: "info", obj: await target.kill() };
      case "request_drain":
        return { kind: "info", obj: await target.requestDrain() };
      case "pause":
        return { kind: "info", obj: await target.pause() };
      case "resume":
        return { kind: "info", obj: await target.resume() };
      case "wait_until_stopped":
        return { kind: "info", obj: await target.waitUntilStopped() };
      case "touch":
        await target.touch();
        return { kind: "none" };
      case "modify":
        return { kind: "plan", obj: await target.modify(this.modifyOptions(step)) };
      case "wait_for_status": {
        const opts = "timeout" in step ? { timeout: Number(step.timeout) * this.scale } : {};
        return { kind: "info", obj: await target.waitForStatus(step.statuses, opts) };
      }
      case "destroy":
        await target.destroy();
        return { kind: "none" };
      case "snapshot":
        return {
          kind: "value",
          obj: snapshotValue(await target.snapshot(this.value(step.snapshot), { kind: step.kind })),
        };
      case "fork": {
        // The copies' names, in order (bound by connect_or_start by name).
        const copies = await target.fork({ count: step.count, names: step.names });
        return { kind: "value", obj: copies.map((c: { name: string }) => c.name) };
      }
      case "follow_logs": {
        // The stream ends by itself when the followed run ends.
        const limit = Number(step.timeout ?? FOLLOW_TIMEOUT) * this.scale;
        const ac = new AbortController();
        const timer = setTimeout(() => ac.abort(), limit * 1000);
        const texts: string[] = [];
        try {
          for await (const line of target.followLogs({ source: step.source, signal: ac.signal })) {
            texts.push(line.text);
          }
        } catch (e) {
          if (!ac.signal.aborted) throw e;
          throw new ERROR_CLASSES.timeout({
            code: "timeout",
            message: `follow_logs did not end within ${limit} s`,
          });
        } finally {
          clearTimeout(timer);
        }
        return { kind: "value", obj: texts };
      }
    }

    const sb = this.live(step);
    switch (op) {
      case "detach":
        return { kind: "info", obj: await sb.detach() };
      case "ping":
        return { kind: "value", obj: (await sb.ping()).latency };
      case "exec":
      case "spawn": {
        const argv = this.value(step.argv);
        const full: string[] = typeof argv === "string" ? ["sh", "-c", argv] : argv;
        const opts: Record<string, any> = {};
        for (const k of ["env", "cwd", "stdin"]) if (k in step) opts[k] = this.value(step[k]);
        if ("timeout" in step) opts.processTimeout = Number(step.timeout);
        if ("output_limit" in step) opts.outputLimit = Number(this.value(step.output_limit));
        if (op === "exec") return { kind: "exec", obj: await sb.exec(full, opts) };
        return { kind: "process", obj: await sb.spawn(full, opts) };
      }
    }
    const path: string = this.value(step.path);
    switch (op) {
      case "fs_write":
        await sb.fs.write(path, this.value(step.data));
        return { kind: "none" };
      case "fs_read":
        return { kind: "value", obj: await sb.fs.read(path) };
      case "fs_write_stream": {
        const data = Buffer.from(String(this.value(step.data)), "utf8");
        const chunks = splitChunks(data, Number(this.value(step.chunks ?? 1)));
        return { kind: "value", obj: await sb.fs.writeStream(path, chunks) };
      }
      case "fs_read_stream": {
        const parts: Uint8Array[] = [];
        for await (const chunk of await sb.fs.readStream(path)) parts.push(chunk);
        return { kind: "value", obj: Buffer.concat(parts) };
      }
      case "fs_exists":
        return { kind: "value", obj: await sb.fs.exists(path) };
      case "fs_mkdir":
        await sb.fs.mkdir(path, { parents: Boolean(step.parents) });
        return { kind: "none" };
      case "fs_list":
        return { kind: "list", obj: await sb.fs.list(path) };
    }
    throw new ConformanceFailure(`unknown op ${op}`);
  }

  // -- race -----------------------------------------------------------------

  private async generation(d: Step): Promise<number> {
    try {
      const info = "name" in d ? await (await Sandbox.get(this.value(d.name))).info() : await this.target(d).info();
      return info.generation;
    } catch (e) {
      if (e instanceof SandboxNotFoundError) return 0;
      throw e;
    }
  }

  /** Runs one caller's step; reports plain data. */
  async raceCall(d: Step, keys: string[]): Promise<RaceReport> {
    const outcome = await this.invoke(d);
    if (outcome.error !== null) {
      return { ok: false, code: codeOf(outcome.error), error: describe(outcome.error), classOk: classOk(outcome.error) };
    }
    const fields: Record<string, Json> = {};
    const cache = new Map<unknown, SandboxInfo>();
    for (const key of keys) {
      const v = await this.field(outcome.result!, key, cache);
      fields[key] = v === MISSING || v === undefined ? null : v;
    }
    if ("sandbox" in d && keys.includes("id") && fields.id === null) fields.id = this.target(d).id;
    return { ok: true, code: null, fields };
  }

  private async race(step: Step, where: string): Promise<void> {
    const d: Step = step.do;
    const n = Number(step.callers);
    const expect = step.expect ?? {};
    const keys = [...new Set(["id", "generation", ...Object.keys(expect.each ?? {}), ...Object.values<string>(step.save ?? {})])].sort();
    const before = await this.generation(d);
    const limit = 120 * this.scale;
    let reports: RaceReport[];
    if (step.processes) {
      const resolved = this.value(d);
      if (resolved.op === "create" || resolved.op === "connect_or_create") {
        resolved.options = { image: this.image, ...(resolved.options ?? {}) };
      }
      reports = await raceInProcesses(n, { do: resolved, keys, image: this.image, home: this.home }, limit);
      const pids = new Set(reports.map((r) => r.pid));
      if (pids.size !== n || pids.has(process.pid)) {
        throw new ConformanceFailure(`${where}: the callers did not run in ${n} other processes: ${[...pids]}`);
      }
    } else {
      reports = await Promise.all(Array.from({ length: n }, () => this.raceCall(d, keys)));
    }
    const after = await this.generation(d);
    const shown = JSON.stringify(reports).slice(0, 3000);

    const counts: Record<string, number> = {};
    for (const r of reports) {
      const k = r.ok ? "ok" : r.code ?? "unexpected_exception";
      counts[k] = (counts[k] ?? 0) + 1;
      if (!r.ok && r.classOk === false) throw new ConformanceFailure(`${where}: an error of the wrong class: ${r.error}`);
    }
    const want: Record<string, number> = expect.outcomes ?? { ok: n };
    const nonzero = (o: Record<string, number>) => Object.fromEntries(Object.entries(o).filter(([, v]) => v));
    if (!equal(nonzero(want), nonzero(counts))) {
      throw new ConformanceFailure(`${where}: outcomes ${JSON.stringify(counts)}, expected ${JSON.stringify(want)}: ${shown}`);
    }
    const oks = reports.filter((r) => r.ok).map((r) => r.fields!);
    if (expect.same_id) {
      const ids = new Set(oks.map((f) => f.id));
      if (ids.size !== 1) throw new ConformanceFailure(`${where}: callers got different ids ${[...ids]}: ${shown}`);
      if ("name" in d) {
        const holder = (await Sandbox.get(this.value(d.name))).id;
        if (!ids.has(holder)) throw new ConformanceFailure(`${where}: callers got ${[...ids]}, the name is held by ${holder}`);
      }
    }
    if ("starts" in expect && after - before !== Number(expect.starts)) {
      throw new ConformanceFailure(
        `${where}: ${after - before} starts (generation ${before} -> ${after}), expected ${expect.starts}: ${shown}`,
      );
    }
    oks.forEach((fields, i) => {
      for (const [key, expected] of Object.entries(expect.each ?? {})) {
        this.match(expected, key in fields ? fields[key] : MISSING, `${where}: caller ${i} field ${key}`);
      }
    });
    for (const [name, field] of Object.entries<string>(step.save ?? {})) {
      if (!oks.length) throw new ConformanceFailure(`${where}: nothing to save ${name} from: no caller succeeded`);
      this.values.set(name, oks[0]![field] ?? null);
    }
  }
}

/** Collects a spawned process: all of its output, then its exit. */
/**
 * `data` cut into `chunks` pieces of `ceil(len / chunks)` bytes (the last
 * one shorter; none for empty data), as every interpreter cuts an
 * `fs_write_stream`'s data.
 */
function splitChunks(data: Buffer, chunks: number): Buffer[] {
  const size = Math.max(1, Math.ceil(data.length / Math.max(1, chunks)));
  const out: Buffer[] = [];
  for (let i = 0; i < data.length; i += size) out.push(data.subarray(i, i + size));
  return out;
}

async function collect(proc: Process): Promise<Collected> {
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

// ---------------------------------------------------------------------------
// Races across OS processes

/** What the parent hands every race caller. */
export interface RaceTask {
  do: Step;
  keys: string[];
  image: string;
  home: string | null;
}

/**
 * Calls `then` once the child has exited and every message it sent has been
 * delivered. Its "exit" can come before the last IPC message is read (the
 * child sends its report and ends at once; on a loaded machine the exit is
 * seen first), so this waits for the channel to close, then one more turn.
 */
function afterExit(c: ChildProcess, then: (code: number | null) => void): void {
  c.once("exit", (code) => {
    const fire = () => setImmediate(() => then(code));
    if (c.connected) c.once("disconnect", fire);
    else fire();
  });
}

/**
 * Runs the task in `n` fresh Node processes (race-caller.mjs), released
 * together once every one of them has loaded the package; their reports.
 */
export async function raceInProcesses(n: number, task: RaceTask, limitSeconds: number): Promise<RaceReport[]> {
  const script = fileURLToPath(new URL("./race-caller.mjs", import.meta.url));
  const children = Array.from({ length: n }, () => fork(script, [], { stdio: ["ignore", "inherit", "inherit", "ipc"] }));
  const exited = children.map((c) => new Promise<void>((r) => c.once("exit", () => r())));
  let timer: NodeJS.Timeout | undefined;
  try {
    const ready = children.map(
      (c) =>
        new Promise<void>((resolve, reject) => {
          c.once("message", () => resolve());
          afterExit(c, (code) => reject(new Error(`a race caller exited (${code}) before it was ready`)));
        }),
    );
    const reports = children.map(
      (c) =>
        new Promise<RaceReport>((resolve, reject) => {
          c.on("message", (m: any) => {
            if (m && m.report) resolve(m.report as RaceReport);
          });
          afterExit(c, (code) => reject(new Error(`a race caller exited (${code}) without a report`)));
        }),
    );
    // Promise.all below attaches its own handlers; these keep a caller that
    // dies early from being an unhandled rejection too.
    for (const p of [...ready, ...reports]) p.catch(() => {});
    const bound = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ConformanceFailure(`the race callers did not finish within ${limitSeconds} s`)), limitSeconds * 1000);
    });
    children.forEach((c) => c.send({ task }));
    await Promise.race([Promise.all(ready), bound]);
    children.forEach((c) => c.send({ go: true })); // the barrier
    return await Promise.race([Promise.all(reports), bound]);
  } finally {
    clearTimeout(timer);
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
    await Promise.all(exited);
  }
}
