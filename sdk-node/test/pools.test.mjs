// Warm pools from Node, against the installed package: a pool defined with
// a builder's options, a create of its configuration claiming one of its
// running sandboxes (the creator's name, labels and env), the counts, a
// scale and a removal, and the typed errors. Real containers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import {
  Sandbox,
  configure,
  InvalidArgumentError,
  InvalidConfigError,
  InvalidNameError,
  SandboxAlreadyExistsError,
  SandboxNotFoundError,
} from "burrow";

const image = process.env.BURROW_TEST_IMAGE;
assert.ok(image, "BURROW_TEST_IMAGE");
configure({ home: mkdtempSync("/tmp/bnp") });

test("a create claims a running sandbox of a pool, a define never does", async () => {
  assert.equal((await Sandbox.capabilities()).pools, true);
  const pool = await Sandbox.builder("node-pool").image(image).env({ POOLED: "yes" }).createPool(1);
  assert.deepEqual(
    [pool.name, pool.size, pool.warm, pool.starting, pool.claims, pool.misses],
    ["node-pool", 1, 1, 0, 0, 0],
  );
  assert.deepEqual(pool.config.env, { POOLED: "yes" });
  assert.equal(typeof pool.config.startupTimeout, "number");
  assert.ok(pool.lastRefill !== null && pool.lastRefill >= 0);
  assert.ok(pool.createdAt instanceof Date);
  // Warm sandboxes are nobody's: not listed.
  assert.deepEqual((await Sandbox.list()).sandboxes, []);

  const sb = await Sandbox.builder("node-claimed")
    .image(image)
    .env({ POOLED: "yes", TASK: "7" })
    .labels({ team: "node" })
    .create();
  const info = await sb.info();
  assert.deepEqual([info.name, info.status], ["node-claimed", "running"]);
  assert.deepEqual(info.config.labels, { team: "node" });
  const out = await sb.exec(["sh", "-c", "echo $POOLED $TASK"]);
  assert.equal(out.stdout.toString(), "yes 7\n");
  const claimed = await Sandbox.getPool("node-pool");
  assert.deepEqual([claimed.claims, claimed.misses], [1, 0]);
  assert.deepEqual((await Sandbox.list()).sandboxes.map((h) => h.name), ["node-claimed"]);

  const defined = await Sandbox.builder("node-defined").image(image).env({ POOLED: "yes" }).define();
  assert.equal((await defined.info()).status, "created");
  assert.equal((await Sandbox.getPool("node-pool")).claims, 1);

  await assert.rejects(Sandbox.builder("node-pool").image(image).createPool(1), (e) => {
    assert.ok(e instanceof SandboxAlreadyExistsError);
    assert.equal(e.code, "already_exists");
    return true;
  });
  await assert.rejects(Sandbox.builder("no/slash/x").image(image).createPool(1), InvalidNameError);
  await assert.rejects(Sandbox.builder("node-big").image(image).createPool(65), InvalidArgumentError);
  await assert.rejects(
    Sandbox.builder("node-labelled").image(image).labels({ k: "v" }).createPool(1),
    InvalidConfigError,
  );
  await assert.rejects(Sandbox.scalePool("node-pool", 65), InvalidArgumentError);
  await assert.rejects(Sandbox.scalePool("node-nope", 1), SandboxNotFoundError);
  assert.deepEqual((await Sandbox.listPools()).map((p) => p.name), ["node-pool"]);

  const scaled = await Sandbox.scalePool("node-pool", 0);
  assert.deepEqual([scaled.size, scaled.warm, scaled.starting], [0, 0, 0]);
  await Sandbox.removePool("node-pool");
  await assert.rejects(Sandbox.getPool("node-pool"), SandboxNotFoundError);
  assert.deepEqual(await Sandbox.listPools(), []);
  // The claimed sandbox is an ordinary one now.
  assert.equal((await sb.info()).status, "running");
  await sb.destroy();
  await defined.destroy();
});
