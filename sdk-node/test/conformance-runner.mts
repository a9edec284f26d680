// Interpreter of the language-neutral lifecycle cases
// (tests/conformance/cases.json) on top of the installed `burrow` package.
// The step vocabulary is documented in tests/conformance/README.md; the
// cases document and its structural check are conformance-cases.mts, the
// values and outcomes the runner compares conformance-values.mts. This is
// the TypeScript twin of sdk-python/tests/conformance_runner.py.
//
// `race` steps with `"processes": true` run each caller in its own Node
// process (race-caller.mjs, started with child_process.fork), all released
// together by a barrier over the IPC channel.

import { fork, type ChildProcess } from "node:child_process";
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
  type SandboxInfo,
  type Status,
} from "burrow";
import { MATCH_OPERATORS, isObject, type Case, type Json, type Step } from "./conformance-cases.mjs";
import {
  CODE_CLASSES,
  MISSING,
  classOk,
  codeOf,
  collect,
  describe,
  equal,
  errorField,
  infoField,
  isOperator,
  neutralConfig,
  norm,
  poolValue,
  show,
  sleep,
  snapshotValue,
  splitChunks,
  type Collected,
  type Outcome,
  type R,
  type RaceReport,
  type Target,
  type Value,
} from "./conformance-values.mjs";

export type { RaceReport } from "./conformance-values.mjs";

/** How long a follow_logs step waits for its stream to end (seconds, scaled) unless the step says. */
const FOLLOW_TIMEOUT = 60;

/** A step's outcome did not meet its expectation. */
export class ConformanceFailure extends Error {
  override name = "ConformanceFailure";
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
    // The pools first (their warm sandboxes are never listed), where the
    // backend has them.
    const pools = await Sandbox.listPools({ timeout: 30 }).catch(() => []);
    for (const pool of pools) await Sandbox.removePool(pool.name, { timeout: 60 }).catch(() => {});
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

  /** A builder of the step's options, named by its `name` (a pool's: its `pool`). */
  private build(step: Step) {
    const o = { image: this.image, ...this.value(step.options ?? {}) };
    const b = Sandbox.builder(this.value(step.op === "create_pool" ? step.pool : step.name));
    b.image(o.image);
    if (o.cpus !== undefined) b.cpus(o.cpus);
    if (o.memory_mb !== undefined) b.memory(o.memory_mb);
    if (o.pids_limit !== undefined) b.pidsLimit(o.pids_limit);
    if (o.disk_mb !== undefined) b.diskMb(o.disk_mb);
    if (o.best_effort_limits !== undefined) b.bestEffortLimits(o.best_effort_limits);
    if (o.default_limits !== undefined) b.defaultLimits(o.default_limits);
    if (o.seccomp_allow !== undefined) b.allowSyscall(...o.seccomp_allow);
    if (o.env !== undefined) b.env(o.env);
    if (o.workdir !== undefined) b.workdir(o.workdir);
    if (o.labels !== undefined) b.labels(o.labels);
    if (o.network !== undefined) b.network(o.network);
    for (const p of o.ports ?? []) b.port(p);
    for (const s of o.secrets ?? []) b.secret(s.name, s.value, s.hosts, s.headers === undefined ? {} : { headers: s.headers });
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
      case "create_pool":
        return { kind: "value", obj: poolValue(await this.build(step).b.createPool(this.value(step.size))) };
      case "get_pool":
        return { kind: "value", obj: poolValue(await Sandbox.getPool(this.value(step.pool))) };
      case "list_pools":
        return { kind: "value", obj: (await Sandbox.listPools()).map((p) => p.name) };
      case "scale_pool":
        return { kind: "value", obj: poolValue(await Sandbox.scalePool(this.value(step.pool), this.value(step.size))) };
      case "remove_pool":
        await Sandbox.removePool(this.value(step.pool));
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
