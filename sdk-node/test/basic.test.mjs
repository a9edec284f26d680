// Run against the installed package (npm pack, then installed into a fresh
// directory): never the source tree.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import {
  Sandbox, configure, errorCodes, ERROR_CLASSES, BurrowError, SandboxNotFoundError,
  SandboxAlreadyExistsError, InvalidNameError, TimeoutError, InvalidStateError, inFlight, MiB,
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
  assert.equal(await sb.status(), "running");
  assert.ok((await sb.ping()) > 0);
  } finally {
    await sb[Symbol.asyncDispose]();
  }
  assert.equal((await sb.info()).status, "stopped");
  await sb.destroy();
});

test("typed errors", async () => {
  await assert.rejects(Sandbox.get("node-nobody"), (e) => e instanceof SandboxNotFoundError && e.code === "not_found" && e.sandboxName === "node-nobody");
  await assert.rejects(Sandbox.builder("no/slash").image(image).create(), InvalidNameError);
  const sb = await Sandbox.builder("node-dup").image(image).create();
  await assert.rejects(Sandbox.builder("node-dup").image(image).create(), (e) => e instanceof SandboxAlreadyExistsError && e.sandboxId === sb.id);
  await assert.rejects(sb.waitForStatus("stopped", { timeout: 300 }), (e) => e instanceof TimeoutError && e.afterMs === 300);
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
  await h.stop();
  const live = await h.connectOrStart();
  assert.equal(live.id, sb.id);
  assert.equal(live.generation, 2);
  await live.destroy();
});
