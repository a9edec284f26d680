// Forks from Node, against the installed package: a running sandbox copied
// into started sandboxes that hold its files, named in order, and the typed
// errors (a bad count, a taken name: no copy left; a stopped parent). Real
// containers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import {
  Sandbox,
  configure,
  InvalidArgumentError,
  InvalidStateError,
  SandboxAlreadyExistsError,
  SandboxNotFoundError,
} from "burrow";

const image = process.env.BURROW_TEST_IMAGE;
assert.ok(image, "BURROW_TEST_IMAGE");
configure({ home: mkdtempSync("/tmp/bnf") });

test("copies are started with the parent's files and go their own way", async () => {
  const parent = await Sandbox.builder("node-fork").image(image).create();
  await parent.exec(["sh", "-c", "echo from-node > /kept && rm /bin/false"]);
  assert.equal((await Sandbox.capabilities()).fork, true);

  const copies = await parent.fork({ count: 2 });
  assert.deepEqual(copies.map((c) => c.name), ["node-fork-fork-1", "node-fork-fork-2"]);
  assert.equal(new Set([parent.id, ...copies.map((c) => c.id)]).size, 3);
  for (const c of copies) {
    assert.equal((await c.info()).status, "running");
    const out = await c.exec(["sh", "-c", "cat /kept; test -e /bin/false || echo gone"]);
    assert.equal(out.stdout.toString(), "from-node\ngone\n");
  }
  await copies[0].exec(["sh", "-c", "echo mine > /kept"]);
  assert.equal((await parent.exec(["cat", "/kept"])).stdout.toString(), "from-node\n");

  const named = await (await Sandbox.get("node-fork")).fork({ names: ["node-fork-named"] });
  assert.deepEqual(named.map((h) => h.name), ["node-fork-named"]);

  await assert.rejects(parent.fork({ count: 0 }), InvalidArgumentError);
  await assert.rejects(parent.fork({ names: ["node-fork-free", "node-fork-named"] }), SandboxAlreadyExistsError);
  await assert.rejects(Sandbox.get("node-fork-free"), SandboxNotFoundError);
  await assert.rejects(parent.fork({ names: "one-string" }), TypeError);

  for (const c of copies) await c.destroy();
  await named[0].destroy();
  await parent.stop();
  await assert.rejects(parent.fork(), InvalidStateError);
  await parent.destroy();
});
