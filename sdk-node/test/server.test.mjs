// The package against a `burrow serve` ($BURROW_URL): calls go through the
// server, and a wrong token is an UnauthorizedError. Run against the
// installed package.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, openSync } from "node:fs";
import { createInterface } from "node:readline";
import { Sandbox, UnauthorizedError, BurrowError } from "burrow";

const image = process.env.BURROW_TEST_IMAGE;
const bin = process.env.BURROW_BIN;
assert.ok(image && bin, "BURROW_TEST_IMAGE and BURROW_BIN");
const home = mkdtempSync("/tmp/bns");
const env = { ...process.env, BURROW_HOME: home, BURROW_SERVE_LISTEN: "127.0.0.1:0" };
delete env.BURROW_URL;
delete env.BURROW_TOKEN;
const token = execFileSync(bin, ["serve", "token", "create", "tests", "--role", "admin"], { env }).toString().trim();
const server = spawn(bin, ["serve"], { env, stdio: ["ignore", "pipe", openSync(`${home}/serve.log`, "w")] });
const url = await new Promise((resolve, reject) => {
  createInterface({ input: server.stdout }).once("line", (l) => resolve(l.replace(/^listening on /, "")));
  server.once("exit", (code) => reject(new Error(`burrow serve exited (${code})`)));
});
after(() => server.kill("SIGTERM"));

test("a wrong token is an UnauthorizedError", async () => {
  process.env.BURROW_URL = url;
  process.env.BURROW_TOKEN = "not-the-token";
  await assert.rejects(Sandbox.list(), (e) => e instanceof UnauthorizedError && e instanceof BurrowError && e.code === "unauthorized");
});

test("with the token, a sandbox lives on the server", async () => {
  process.env.BURROW_URL = url;
  process.env.BURROW_TOKEN = token;
  const sb = await Sandbox.builder("node-remote").image(image).create();
  try {
    assert.equal((await sb.exec(["echo", "remote"])).stdout.toString(), "remote\n");
    assert.deepEqual((await Sandbox.list()).sandboxes.map((h) => [h.name, h.id, h.status]), [["node-remote", sb.id, "running"]]);
    // The server's own home holds it.
    const listed = JSON.parse(execFileSync(bin, ["ls", "--json"], { env }).toString());
    assert.deepEqual(listed.map((i) => i.id), [sb.id]);
  } finally {
    await sb.destroy();
  }
});
