// The cases document of the conformance list (tests/conformance/cases.json):
// loading it, the step vocabulary this interpreter knows (kept equal to the
// Rust kit's tables, core/conformance/src/cases.rs) and the structural check
// of a document. Needs nothing but Node.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

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

export const NAME_OPS = [
  "create", "connect_or_create", "define", "get", "get_by_id", "list", "get_snapshot", "list_snapshots",
  "remove_snapshot", "create_pool", "get_pool", "list_pools", "scale_pool", "remove_pool",
];
export const TARGET_OPS = [
  "handle", "info", "status", "config", "start", "connect_or_start", "connect",
  "restart", "stop", "kill", "request_drain", "pause", "resume", "touch", "modify",
  "wait_for_status", "wait_until_stopped", "destroy", "detach", "ping", "exec",
  "spawn", "fs_write", "fs_read", "fs_exists", "fs_mkdir", "fs_list", "fs_write_stream",
  "fs_read_stream", "follow_logs", "snapshot", "fork",
];
export const CONTROL_OPS = ["wait", "await", "sleep", "repeat", "race", "remove"];
export const KNOWN_OPS = new Set([...NAME_OPS, ...TARGET_OPS, ...CONTROL_OPS]);
export const PROCESS_RACE_OPS = new Set(["create", "connect_or_create", "connect_or_start"]);
export const COMMON_KEYS = ["op", "as", "save", "expect", "tolerate", "within", "background"];
export const OP_KEYS: Record<string, string[]> = {
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
  create_pool: ["pool", "size", "options"],
  get_pool: ["pool"],
  list_pools: [],
  scale_pool: ["pool", "size"],
  remove_pool: ["pool"],
  wait: ["process"],
  await: ["job"],
  sleep: ["seconds"],
  repeat: ["seconds", "interval", "do"],
  race: ["callers", "processes", "do"],
  connect_or_start: ["sandbox", "name"],
};
export const CREATE_OPTIONS = new Set([
  "image", "cpus", "memory_mb", "pids_limit", "disk_mb", "best_effort_limits", "default_limits", "seccomp_allow",
  "env", "workdir", "labels", "network", "ports",
  "secrets", "idle_timeout", "idle_action", "max_duration", "startup_timeout", "demand_start", "detached", "replace",
]);
/** The changes a `modify` step may name (durations in seconds; null clears cpus, memory_mb, idle_timeout, max_duration). */
export const MODIFY_CHANGES = new Set([
  "cpus", "memory_mb", "env_set", "env_unset", "labels_set", "labels_unset",
  "idle_timeout", "idle_action", "max_duration", "network",
]);
export const RACE_EXPECT_KEYS = new Set(["outcomes", "same_id", "starts", "each"]);
export const CAPABILITY_TAGS = new Set([
  "pause", "modify_live", "metrics", "logs", "idle_reclaim", "attached", "persistent_layer",
  "network_policy", "published_ports", "secrets", "snapshots", "full_snapshots",
  "fork", "pools",
]);
export const VALUE_OPERATORS = new Set(["var", "str_repeat"]);
export const MATCH_OPERATORS = new Set(["ne", "one_of", "present"]);
export const OPERATOR_MODIFIERS = new Set(["add", "times"]);


/** A plain object (not an array, bytes or a date). */
export function isObject(v: unknown): v is Record<string, any> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !Buffer.isBuffer(v) && !(v instanceof Date);
}

export function casesPath(): string {
  return (
    process.env.BURROW_CONFORMANCE_CASES ||
    fileURLToPath(new URL("../../../tests/conformance/cases.json", import.meta.url))
  );
}

export function loadDocument(path: string = casesPath()): Document {
  return JSON.parse(readFileSync(path, "utf8")) as Document;
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
  if (["create_pool", "get_pool", "list_pools", "scale_pool", "remove_pool"].includes(step.op)) return "pools";
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

export function checkCapabilityTags(step: Step, where: string, tags: string[]): string[] {
  const out: string[] = [];
  const cap = stepCapability(step);
  if (cap && !(step.tolerate ?? []).includes("unsupported") && !tags.includes(cap)) {
    out.push(`${where}: ${step.op} needs the capability tag ${cap} on its case`);
  }
  if (step.do && typeof step.do === "object") out.push(...checkCapabilityTags(step.do, `${where} do`, tags));
  return out;
}

export function validateStep(step: Step, where: string, bound: Set<string>, top: boolean): string[] {
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
