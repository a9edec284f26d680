// Attached sandboxes stop with the Node process that owns them (a normal
// exit, an uncaught exception, SIGKILL); worker threads share the process's
// one runtime; a call's timeout leaves nothing running. Run against the
// installed package.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fork } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { Worker } from "node:worker_threads";
import { Sandbox, configure, inFlight, TimeoutError } from "burrow";

const image = process.env.BURROW_TEST_IMAGE;
assert.ok(image, "BURROW_TEST_IMAGE");
const home = mkdtempSync("/tmp/bno");
configure({ home });

// The owner: creates an attached sandbox, reports its id, then ends as told.
const OWNER = `
const { Sandbox, configure } = require("burrow");
const [home, image, name, how] = process.argv.slice(2);
configure({ home });
Sandbox.builder(name).image(image).create().then((sb) => {
  process.send({ id: sb.id }, () => {
    if (how === "exit") process.disconnect();
    else if (how === "throw") setImmediate(() => { throw new Error("uncaught, on purpose"); });
    else setInterval(() => {}, 1000); // "kill": lives until SIGKILL
  });
});
`;
const ownerScript = `${home}/owner.cjs`;
writeFileSync(ownerScript, OWNER);

for (const how of ["exit", "throw", "kill"]) {
  test(`an attached sandbox stops when its owner ends (${how})`, async () => {
    const name = `owner-${how}`;
    const child = fork(ownerScript, [home, image, name, how], {
      stdio: ["ignore", "ignore", "pipe", "ipc"],
      // the child resolves `burrow` from this directory's node_modules
      cwd: process.cwd(),
      env: { ...process.env, NODE_PATH: `${process.cwd()}/node_modules` },
    });
    const exited = new Promise((r) => child.once("exit", (code, signal) => r({ code, signal })));
    const { id } = await new Promise((resolve, reject) => {
      child.once("message", resolve);
      child.once("exit", (code) => reject(new Error(`the owner exited (${code}) before creating`)));
    });
    const sb = await Sandbox.getById(id);
    if (how === "kill") {
      assert.equal((await sb.info()).status, "running");
      child.kill("SIGKILL");
    }
    const ended = await exited;
    if (how === "throw") assert.notEqual(ended.code, 0, "the uncaught exception ended the owner");
    if (how === "kill") assert.equal(ended.signal, "SIGKILL");
    const info = await sb.waitForStatus(["stopped", "crashed"], { timeout: 30 });
    assert.equal(info.status, "stopped");
    assert.equal(info.lastRun.exitReason, "owner_exited");
    await sb.destroy();
  });
}

function runtimeThreads() {
  return readdirSync("/proc/self/task").filter(
    (t) => readFileSync(`/proc/self/task/${t}/comm`, "utf8").trim() === "burrow-binding",
  ).length;
}

test("worker threads share the process's one runtime", async () => {
  const sb = await Sandbox.builder("node-workers").image(image).create();
  try {
    assert.equal((await sb.exec(["true"])).exitCode, 0);
    const threads = runtimeThreads();
    assert.ok(threads > 0, "the runtime's threads are named burrow-binding");
    const src = `
      const { parentPort, workerData } = require("node:worker_threads");
      const { Sandbox, configure } = require("burrow");
      configure({ home: workerData.home });
      (async () => {
        const h = await Sandbox.get("node-workers");
        const sb = await h.connect();
        const out = await sb.exec(["sh", "-c", "echo worker " + workerData.n]);
        parentPort.postMessage({ id: sb.id, stdout: out.stdout.toString() });
      })().catch((e) => parentPort.postMessage({ error: String(e) }));
    `;
    const results = await Promise.all(
      [1, 2, 3].map(
        (n) =>
          new Promise((resolve, reject) => {
            const w = new Worker(src, { eval: true, workerData: { home, n } });
            w.once("message", (m) => w.terminate().then(() => resolve(m)));
            w.once("error", reject);
          }),
      ),
    );
    results.forEach((r, i) => {
      assert.equal(r.error, undefined);
      assert.equal(r.id, sb.id);
      assert.equal(r.stdout, `worker ${i + 1}\n`);
    });
    assert.equal(runtimeThreads(), threads, "no worker started a runtime of its own");
    assert.equal((await sb.exec(["echo", "main"])).stdout.toString(), "main\n");
  } finally {
    await sb.destroy();
  }
});

test("a call's timeout leaves no process in the guest and no task in the core", async () => {
  const sb = await Sandbox.builder("node-timeout").image(image).create();
  try {
    await assert.rejects(sb.exec(["sleep", "30"], { timeout: 0.5 }), (e) => e instanceof TimeoutError && e.afterMs === 500 && e.after === 0.5);
    let gone = false;
    for (let i = 0; i < 300 && !gone; i++) {
      gone = (await sb.exec(["pidof", "sleep"])).exitCode !== 0;
      if (!gone) await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(gone, "the timed-out sleep ended in the guest");
    // As child_process.spawn({ signal }): aborting kills the process.
    const ac = new AbortController();
    const proc = await sb.spawn(["sleep", "30"], { signal: ac.signal });
    // The spawn answers once the process is forked; it is `sleep` once it
    // has exec'd.
    let running = false;
    for (let i = 0; i < 300 && !running; i++) {
      running = (await sb.exec(["pidof", "sleep"])).exitCode === 0;
      if (!running) await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(running, "the spawned sleep runs in the guest");
    ac.abort();
    const status = await proc.wait();
    assert.equal(status.signal, 9);
    assert.notEqual((await sb.exec(["pidof", "sleep"])).exitCode, 0, "nothing left in the guest");
    assert.equal(inFlight(), 0);
  } finally {
    await sb.destroy();
  }
});
