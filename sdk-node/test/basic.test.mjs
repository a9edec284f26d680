// Run against the installed package (npm pack, then installed into a fresh
// directory): never the source tree.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import {
  Sandbox, configure, errorCodes, ERROR_CLASSES, BurrowError, SandboxNotFoundError,
  SandboxAlreadyExistsError, InvalidNameError, TimeoutError, InvalidStateError, inFlight, MiB,
  ForbiddenError, QuotaExceededError, RateLimitedError,
} from "burrow";

const image = process.env.BURROW_TEST_IMAGE;
assert.ok(image, "BURROW_TEST_IMAGE");
configure({ home: mkdtempSync("/tmp/bnt") });

test("every core code has its own class and back", () => {
  assert.deepEqual(Object.keys(ERROR_CLASSES).sort(), [...errorCodes()].sort());
  for (const [code, cls] of Object.entries(ERROR_CLASSES)) {
    assert.equal(cls.CODE, code);
    assert.ok(new cls({ code, message: "m" }) instanceof BurrowError);
  }
});

test("the tenant refusals of a server carry their fields", () => {
  const body = (code, fields) => ({ code, message: "m", ...fields });
  const forbidden = new ERROR_CLASSES.forbidden(body("forbidden", { operation: "pool.create", reason: "role viewer" }));
  assert.ok(forbidden instanceof ForbiddenError && forbidden instanceof BurrowError);
  assert.deepEqual([forbidden.code, forbidden.operation, forbidden.reason], ["forbidden", "pool.create", "role viewer"]);
  const quota = new ERROR_CLASSES.quota_exceeded(body("quota_exceeded", { subject: "cpus", limit: 8, reason: "9" }));
  assert.ok(quota instanceof QuotaExceededError);
  assert.deepEqual([quota.code, quota.subject, quota.limit, quota.retryAfter], ["quota_exceeded", "cpus", 8, undefined]);
  const limited = new ERROR_CLASSES.rate_limited(body("rate_limited", { retry_after_ms: 1500 }));
  assert.ok(limited instanceof RateLimitedError && !(limited instanceof QuotaExceededError));
  assert.deepEqual([limited.code, limited.retryAfterMs, limited.retryAfter], ["rate_limited", 1500, 1.5]);
});

test("create, exec, files, processes, stop", async () => {
  // `await using` (TypeScript, Node 24+) is this try/finally on Node 20.
  const sb = await Sandbox.builder("node-basic").image(image).memory(MiB(256)).env({ WHO: "node" }).create();
  try {
  assert.match(sb.id, /^sb_/);
  const out = await sb.exec(["sh", "-c", "echo $WHO; cat"], { stdin: "in" });
  assert.equal(out.stdout.toString(), "node\nin");
  assert.equal(out.exitCode, 0);
  await sb.fs.write("/tmp/f", "data");
  assert.equal(await sb.fs.readText("/tmp/f"), "data");
  assert.equal(await sb.fs.exists("/tmp/nope"), false);
  const proc = await sb.spawn(["cat"]);
  await proc.write("streamed");
  await proc.closeStdin();
  const chunks = [];
  for await (const ev of proc) if (ev.kind === "stdout") chunks.push(ev.data);
  assert.equal(Buffer.concat(chunks).toString(), "streamed");
  assert.equal(proc.exitStatus.exitCode, 0);
  assert.equal(sb.status, "running");
  const ping = await sb.ping();
  assert.ok(ping.latency > 0 && ping.latency < 5, `latency ${ping.latency} s`);
  } finally {
    await sb[Symbol.asyncDispose]();
  }
  assert.equal(sb.status, "stopped", "the stop at scope end updated the snapshot");
  assert.equal((await sb.info()).status, "stopped");
  await sb.destroy();
});

test("typed errors", async () => {
  await assert.rejects(Sandbox.get("node-nobody"), (e) => e instanceof SandboxNotFoundError && e.code === "not_found" && e.sandboxName === "node-nobody");
  await assert.rejects(Sandbox.builder("no/slash/x").image(image).create(), InvalidNameError);
  const sb = await Sandbox.builder("node-dup").image(image).create();
  await assert.rejects(Sandbox.builder("node-dup").image(image).create(), (e) => e instanceof SandboxAlreadyExistsError && e.sandboxId === sb.id);
  await assert.rejects(sb.waitForStatus("stopped", { timeout: 0.3 }), (e) => e instanceof TimeoutError && e.afterMs === 300 && e.after === 0.3);
  await sb.stop();
  await assert.rejects(sb.exec(["true"]), (e) => e instanceof InvalidStateError && e.status === "stopped");
  await sb.destroy();
});

test("abort leaves nothing running", async () => {
  const sb = await Sandbox.builder("node-abort").image(image).create();
  const ac = new AbortController();
  const p = sb.exec(["sleep", "30"], { signal: ac.signal });
  for (let i = 0; i < 200; i++) {
    if ((await sb.exec(["pidof", "sleep"])).exitCode === 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  ac.abort();
  await assert.rejects(p, (e) => e.name === "AbortError");
  let gone = false;
  for (let i = 0; i < 300 && !gone; i++) {
    gone = (await sb.exec(["pidof", "sleep"])).exitCode !== 0;
    if (!gone) await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(gone, "the aborted sleep ended in the guest");
  await sb.destroy();
  assert.equal(inFlight(), 0);
});

test("a handle converges on the sandbox", async () => {
  const sb = await Sandbox.builder("node-handle").image(image).connectOrCreate();
  const again = await Sandbox.builder("node-handle").image(image).connectOrCreate();
  assert.equal(again.id, sb.id);
  const h = await Sandbox.get("node-handle");
  assert.equal(h.status, "running");
  await h.stop();
  assert.equal(h.status, "stopped");
  assert.equal(sb.status, "running", "a snapshot: another object's call does not change it");
  assert.equal((await sb.info()).status, "stopped");
  assert.equal(sb.status, "stopped");
  const live = await h.connectOrStart();
  assert.equal(live.id, sb.id);
  assert.equal(live.generation, 2);
  assert.equal(live.status, "running");
  assert.equal(h.status, "running");
  const started = await Sandbox.start("node-handle").catch((e) => e);
  assert.ok(started instanceof InvalidStateError && started.status === "running", "start by name of a running sandbox");
  await live.stop();
  const again2 = await Sandbox.start("node-handle");
  assert.equal(again2.id, sb.id);
  assert.equal(again2.generation, 3);
  assert.equal(again2.status, "running");
  await assert.rejects(Sandbox.start("node-nobody"), SandboxNotFoundError);
  await again2.destroy();
});

test("records, modify, metrics, logs, files, pause", async () => {
  const sb = await Sandbox.builder("node-records").image(image).labels({ team: "a" }).idleTimeout("10m").create();
  try {
    const info = await sb.info();
    assert.equal(info.status, "running");
    assert.ok(info.createdAt instanceof Date && info.lastRun.startedAt instanceof Date);
    assert.equal(info.lastRun.generation, 1);
    assert.equal(info.config.idleTimeout, 600, "seconds");
    assert.equal(info.config.startupTimeout > 1 && info.config.startupTimeout < 3600, true, "seconds");
    assert.deepEqual(info.config.labels, { team: "a" });
    // It named none: the host's default (2), where the host holds one.
    assert.ok(info.config.cpus === null || info.config.cpus === 2, `${info.config.cpus}`);

    const plan = await sb.modify({ memory: 192, env: { MODE: "x" }, unsetLabels: ["team"], idleTimeout: null, maxDuration: 7200 });
    const fields = Object.fromEntries(plan.changes.map((c) => [c.field, c.applies]));
    assert.equal(fields.memory_mb, "live");
    assert.equal(fields.env, "future_execs");
    assert.equal(fields.labels, "immediately");
    assert.equal(plan.info.config.memory, 192);
    assert.equal(plan.info.config.idleTimeout, null);
    assert.equal(plan.info.config.maxDuration, 7200, "seconds in, seconds out");
    assert.deepEqual(plan.info.config.labels, {});
    assert.equal((await sb.exec(["sh", "-c", "echo $MODE"])).stdout.toString(), "x\n");

    const m = await sb.metrics();
    assert.equal(m.memoryLimitBytes, 192 * 1024 * 1024);
    assert.ok(m.pids >= 1);

    await sb.fs.mkdir("/tmp/d/e", { parents: true });
    await sb.fs.write("/tmp/d/f", "12345", { mode: 0o600 });
    assert.deepEqual(await sb.fs.list("/tmp/d"), [
      { name: "e", kind: "dir", size: (await sb.fs.stat("/tmp/d/e")).size },
      { name: "f", kind: "file", size: 5 },
    ]);
    const st = await sb.fs.stat("/tmp/d/f");
    assert.equal(st.kind, "file");
    assert.equal(st.mode, 0o600);
    assert.ok(st.mtime instanceof Date && st.linkTarget === null);

    await sb.exec(["sh", "-c", "echo to-the-log > /proc/1/fd/2"]);
    const ac = new AbortController();
    const guard = setTimeout(() => ac.abort(), 20_000); // fails the test instead of hanging it
    const seen = [];
    for await (const line of sb.followLogs({ source: "guest", signal: ac.signal })) {
      seen.push(line);
      if (line.text.includes("to-the-log")) break;
    }
    clearTimeout(guard);
    assert.ok(seen.some((l) => l.source === "guest"));
    assert.ok((await sb.logs({ source: "guest" })).some((l) => l.text.includes("to-the-log")));

    assert.equal((await sb.pause()).status, "paused");
    assert.equal(sb.status, "paused");
    await assert.rejects(sb.exec(["true"]), (e) => e instanceof InvalidStateError && e.status === "paused");
    assert.equal((await sb.resume()).status, "running");
    const page = await Sandbox.list({ status: "running" });
    assert.deepEqual(page.sandboxes.map((h) => [h.name, h.id, h.status]), [["node-records", sb.id, "running"]]);
    assert.equal((await page.sandboxes[0].info()).id, sb.id);
    assert.deepEqual((await Sandbox.list({ labels: { team: "a" } })).sandboxes, [], "the label was removed");
  } finally {
    await sb.destroy();
  }
});
