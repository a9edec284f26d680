// The language-neutral lifecycle cases (tests/conformance/cases.json), one
// test per case id, run by the TypeScript interpreter against real
// sandboxes through the installed package.
//
//   BURROW_DRIVER=vm BURROW_CONFORMANCE_TIME_SCALE=3   the vm driver
//   BURROW_TEST_REMOTE=1                                a `burrow serve` per case
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, openSync, rmSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Sandbox, UnsupportedError, configure, errorCodes } from "burrow";
import { loadDocument, validateCases, type Case } from "./conformance-cases.mjs";
import { ConformanceFailure, Runner } from "./conformance-runner.mjs";
import { CODE_CLASSES } from "./conformance-values.mjs";

const image = process.env.BURROW_TEST_IMAGE;
assert.ok(image, "BURROW_TEST_IMAGE names the busybox image");
const doc = loadDocument();
const repoRoot = process.env.BURROW_REPO_ROOT || fileURLToPath(new URL("../../..", import.meta.url));
const remote = process.env.BURROW_TEST_REMOTE === "1";

test("the cases file is well formed", () => {
  assert.deepEqual(validateCases(doc, repoRoot), []);
  const areas = new Set(doc.cases.map((c) => c.id.split(".")[0]));
  for (const a of ["convergence", "identity", "restart", "destroy", "config", "create", "input", "wait", "drain", "idle"]) {
    assert.ok(areas.has(a), `a case of ${a}`);
  }
  assert.ok(doc.cases.some((c) => c.steps.some((s) => s.op === "race" && s.processes)), "a race across processes");
});

test("the runner knows the class of every core code", () => {
  assert.deepEqual(Object.keys(CODE_CLASSES).sort(), [...errorCodes()].sort());
});

/** The capabilities `c` needs that the backend lacks, as the package reports them. */
async function lacking(c: Case): Promise<string[]> {
  const caps: Record<string, boolean> = { ...(await Sandbox.capabilities()) };
  const camel = (t: string) => t.replace(/_([a-z])/g, (_, ch: string) => ch.toUpperCase());
  return (c.tags ?? []).filter((t) => camel(t) in caps && !caps[camel(t)]);
}

/**
 * Runs `c` on a fresh home (and, remote, a fresh server); with `onLacking`,
 * a case needing a capability the backend lacks is not run: `onLacking`
 * gets what it lacks (as the Rust kit reports such a case unsupported).
 */
async function runOnFreshHome(c: Case, onLacking?: (missing: string[]) => void): Promise<void> {
  const home = mkdtempSync("/tmp/bnc");
  let stopServer: (() => Promise<void>) | null = null;
  try {
    if (remote) stopServer = await serve(home);
    else configure({ home });
    const missing = onLacking ? await lacking(c) : [];
    if (missing.length > 0) {
      onLacking!(missing);
      return;
    }
    await new Runner({ image: image!, home: remote ? null : home }).runCase(c);
  } finally {
    if (stopServer) await stopServer();
    configure({});
    try {
      rmSync(home, { recursive: true, force: true });
    } catch {
      // a leftover the next run's mkdtemp does not collide with
    }
  }
}

test("the runner fails a case whose expectation is wrong", async () => {
  const find = (id: string): Case => structuredClone(doc.cases.find((c) => c.id === id)!);
  const wrong: Array<[string, Case]> = [];
  // A race across processes expecting one start too many.
  const race = find("convergence.many_callers_one_sandbox");
  race.steps[0]!.expect.starts = 2;
  wrong.push(["race starts", race]);
  // An expected error code that is not the one the core gives.
  const strict = find("create.strict_on_existing_name_is_already_exists");
  const errStep = strict.steps.find((s) => s.expect?.error === "already_exists")!;
  errStep.expect.error = "not_found";
  wrong.push(["error code", strict]);
  // A field of a result.
  const life = find("lifecycle.exec_fs_stop");
  const outStep = life.steps.find((s) => typeof s.expect?.stdout === "string")!;
  outStep.expect.stdout += "?";
  wrong.push(["stdout", life]);
  for (const [what, c] of wrong) {
    await assert.rejects(runOnFreshHome(c), ConformanceFailure, what);
  }
});

/** A `burrow serve` on a fresh home; this process and its children use it. */
async function serve(home: string): Promise<() => Promise<void>> {
  const bin = process.env.BURROW_BIN!;
  const env: NodeJS.ProcessEnv = { ...process.env, BURROW_HOME: home, BURROW_SERVE_LISTEN: "127.0.0.1:0", BURROW_SERVE_IDLE_TIMEOUT: "0" };
  delete env.BURROW_URL;
  delete env.BURROW_TOKEN;
  const token = execFileSync(bin, ["serve", "token", "create", "tests", "--role", "admin"], { env }).toString().trim();
  const log = openSync(`${home}/serve.log`, "w");
  const proc = spawn(bin, ["serve"], { env, stdio: ["ignore", "pipe", log] });
  const first: string = await new Promise((resolve) => {
    createInterface({ input: proc.stdout! }).once("line", resolve);
    proc.once("exit", () => resolve(""));
  });
  assert.match(first, /^listening on /, "burrow serve started");
  const url = first.slice("listening on ".length);
  process.env.BURROW_URL = url;
  process.env.BURROW_TOKEN = token;
  return async () => {
    try {
      // The case really went through the server.
      const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${token}` } });
      const served = Number(/^burrow_api_requests_total (\d+)/m.exec(await res.text())?.[1] ?? 0);
      assert.ok(served > 0, "the server answered the case's requests");
    } finally {
      delete process.env.BURROW_URL;
      delete process.env.BURROW_TOKEN;
      const gone = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      await gone;
    }
  };
}

for (const c of doc.cases) {
  test(c.id, (t) => runOnFreshHome(c, (missing) => t.skip(`unsupported by the backend (lacks ${missing.join(", ")})`)));
}

test("the package reports the backend's capabilities, and an operation it lacks is unsupported", async () => {
  const home = mkdtempSync("/tmp/bnc");
  configure({ home });
  try {
    const caps = await Sandbox.capabilities();
    assert.deepEqual(Object.keys(caps).sort(), ["attached", "fork", "fullSnapshots", "idleReclaim", "logs", "metrics", "modifyLive", "networkPolicy", "pause", "persistentLayer", "pools", "publishedPorts", "secrets", "snapshots"]);
    // The local engine run by root has every capability; full snapshots
    // (memory and processes) are the vm driver's alone.
    if (!remote && process.getuid!() === 0) {
      const { fullSnapshots, ...rest } = caps;
      assert.ok(!fullSnapshots || process.env.BURROW_DRIVER === "vm", JSON.stringify(caps));
      assert.ok(Object.values(rest).every((v) => v), JSON.stringify(caps));
    }
    if (remote) return;
    const sb = await Sandbox.builder("caps").image(image!).create();
    try {
      if (caps.pause) {
        await sb.pause();
        await sb.resume();
      } else {
        await assert.rejects(sb.pause(), UnsupportedError);
      }
      const info = await sb.info();
      assert.deepEqual([info.status, info.generation], ["running", 1]);
    } finally {
      await sb.destroy();
    }
  } finally {
    configure({});
    rmSync(home, { recursive: true, force: true });
  }
});
