// Snapshots from Node, against the installed package: a running sandbox's
// files saved by name, a sandbox created from `snapshot:NAME`, the store
// listed and cleaned, and the typed errors (a taken name, a bad one, a
// snapshot still in use). Real containers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import {
  Sandbox,
  configure,
  InvalidArgumentError,
  SandboxAlreadyExistsError,
  SandboxNotFoundError,
  SnapshotInUseError,
} from "burrow";

const image = process.env.BURROW_TEST_IMAGE;
assert.ok(image, "BURROW_TEST_IMAGE");
configure({ home: mkdtempSync("/tmp/bns") });

test("a snapshot is an image of what the sandbox changed, kept while used", async () => {
  const src = await Sandbox.builder("node-snap-src").image(image).create();
  await src.exec(["sh", "-c", "echo from-node > /kept && rm /bin/false"]);
  const snap = await src.snapshot("node-base");
  assert.equal(snap.name, "node-base");
  assert.equal(snap.kind, "filesystem");
  assert.equal(snap.image, "snapshot:node-base");
  assert.match(snap.digest, /^sha256:[0-9a-f]{64}$/);
  assert.ok(snap.size > 0);
  assert.equal(snap.sourceId, src.id);
  assert.equal(snap.sourceName, "node-snap-src");
  assert.ok(snap.createdAt instanceof Date);
  assert.equal((await src.info()).status, "running");
  assert.equal((await Sandbox.capabilities()).snapshots, true);

  await assert.rejects(src.snapshot("node-base"), SandboxAlreadyExistsError);
  await assert.rejects(src.snapshot("no/slash/x"), InvalidArgumentError);

  const copy = await Sandbox.builder("node-snap-copy").image(snap.image).create();
  const out = await copy.exec(["sh", "-c", "cat /kept; test -e /bin/false || echo gone"]);
  assert.equal(out.stdout.toString(), "from-node\ngone\n");

  assert.deepEqual((await Sandbox.snapshots()).map((s) => s.name), ["node-base"]);
  assert.equal((await Sandbox.getSnapshot("node-base")).digest, snap.digest);
  await assert.rejects(Sandbox.removeSnapshot("node-base"), (e) => {
    assert.ok(e instanceof SnapshotInUseError);
    assert.equal(e.code, "snapshot_in_use");
    assert.deepEqual(e.sandboxes, ["node-snap-copy"]);
    return true;
  });

  await copy.destroy();
  await src.destroy();
  await Sandbox.removeSnapshot("node-base");
  await assert.rejects(Sandbox.getSnapshot("node-base"), SandboxNotFoundError);
  assert.deepEqual(await Sandbox.snapshots(), []);
});
