// The CommonJS face of the installed package shares the classes of the ES
// module face.
const { test } = require("node:test");
const assert = require("node:assert/strict");

test("require and import give the same classes", async () => {
  const cjs = require("burrow");
  const esm = await import("burrow");
  assert.equal(cjs.Sandbox, esm.Sandbox);
  assert.equal(cjs.SandboxNotFoundError, esm.SandboxNotFoundError);
  assert.deepEqual(Object.keys(cjs.ERROR_CLASSES).sort(), cjs.errorCodes().sort());
});
