// Files as streams (Fs.readStream / writeStream / openWrite) and the exec
// output limit, against the installed package: several MiB in and out with
// the content checked, a missing file by its error class and code,
// truncation by outputLimit.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, writeFileSync, createReadStream, createWriteStream, readFileSync, rmSync } from "node:fs";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { Sandbox, configure, GuestError, InvalidArgumentError, type BurrowError } from "burrow";

const image = process.env.BURROW_TEST_IMAGE;
assert.ok(image, "BURROW_TEST_IMAGE");
const home = mkdtempSync("/tmp/bns");
configure({ home });

const MIB = 1024 * 1024;

/** `size` bytes that are no repetition of a short pattern. */
function blob(size: number): Buffer {
  const parts: Buffer[] = [];
  let n = 0;
  for (let i = 0; i < size; i += 32) parts.push(createHash("sha256").update(String(n++)).digest());
  return Buffer.concat(parts).subarray(0, size);
}

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

test("several MiB in and out as streams", async () => {
  const data = blob(6 * MIB + 12345);
  const sb = await Sandbox.builder("node-streams").image(image).create();
  try {
    async function* pieces() {
      for (let i = 0; i < data.length; i += 300_000) yield data.subarray(i, i + 300_000);
    }
    assert.equal(await sb.fs.writeStream("/tmp/a.bin", pieces()), data.length);
    const sum = await sb.exec(["sh", "-c", "sha256sum /tmp/a.bin | cut -d' ' -f1"]);
    assert.equal(sum.stdout.toString().trim(), sha(data));

    // A web ReadableStream that is async-iterable: several chunks, none above 256 KiB.
    const stream = await sb.fs.readStream("/tmp/a.bin");
    const chunks: Uint8Array[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.ok(chunks.length > 1);
    assert.ok(chunks.every((c) => c.length <= 256 * 1024));
    assert.ok(Buffer.concat(chunks).equals(data));

    // A Node Readable (a local file) in; out through Readable.fromWeb into a local file.
    const dir = mkdtempSync("/tmp/bns-files");
    try {
      writeFileSync(`${dir}/src.bin`, data);
      assert.equal(await sb.fs.writeStream("/tmp/b.bin", createReadStream(`${dir}/src.bin`)), data.length);
      await pipeline(Readable.fromWeb(await sb.fs.readStream("/tmp/b.bin")), createWriteStream(`${dir}/dst.bin`));
      assert.ok(readFileSync(`${dir}/dst.bin`).equals(data));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }

    // A web ReadableStream in, plain iterables, strings, append and mode.
    const web = await sb.fs.readStream("/tmp/a.bin");
    assert.equal(await sb.fs.writeStream("/tmp/c.bin", web), data.length);
    assert.equal(sha(await sb.fs.read("/tmp/c.bin")), sha(data));
    assert.equal(await sb.fs.writeStream("/tmp/d.txt", ["one ", Buffer.from("two ")], { mode: 0o600 }), 8);
    assert.equal(await sb.fs.writeStream("/tmp/d.txt", "three", { append: true }), 5);
    assert.equal(await sb.fs.readText("/tmp/d.txt"), "one two three");
    assert.equal((await sb.fs.stat("/tmp/d.txt")).mode & 0o777, 0o600);

    // The writer object: write, then finish with the count.
    const w = await sb.fs.openWrite("/tmp/e.txt");
    await w.write("x".repeat(10));
    await w.write(new Uint8Array([121]));
    assert.equal(await w.finish(), 11);
    assert.equal(await sb.fs.readText("/tmp/e.txt"), "xxxxxxxxxxy");

    // Cancelling a read part way leaves the sandbox serving.
    const partial = await sb.fs.readStream("/tmp/a.bin");
    const reader = partial.getReader();
    const first = await reader.read();
    assert.ok(!first.done && data.subarray(0, first.value.length).equals(first.value));
    await reader.cancel();
    assert.equal((await sb.exec(["echo", "ok"])).stdout.toString(), "ok\n");

    // Empty in, empty out.
    assert.equal(await sb.fs.writeStream("/tmp/empty", []), 0);
    const none: Uint8Array[] = [];
    for await (const c of await sb.fs.readStream("/tmp/empty")) none.push(c);
    assert.deepEqual(none, []);
  } finally {
    await sb.destroy();
  }
});

test("stream errors are typed", async () => {
  const sb = await Sandbox.builder("node-stream-errors").image(image).create();
  try {
    const guest = (e: unknown, code: string) => {
      assert.ok(e instanceof GuestError);
      assert.equal((e as BurrowError).code, "guest");
      assert.equal((e as BurrowError).body.guest?.code, code);
      return true;
    };
    await assert.rejects(sb.fs.readStream("/nope"), (e) => guest(e, "not_found"));
    await assert.rejects(sb.fs.writeStream("/no/such/dir/f", ["a", "b"]), (e) => guest(e, "not_found"));
    await assert.rejects(sb.fs.readStream("relative"), InvalidArgumentError);
    await assert.rejects(sb.fs.writeStream("relative", "x"), InvalidArgumentError);
    await assert.rejects(sb.fs.writeStream("/tmp/x", 42 as any), TypeError);
    assert.equal((await sb.exec(["echo", "ok"])).stdout.toString(), "ok\n");
  } finally {
    await sb.destroy();
  }
});

test("exec outputLimit truncates each stream", async () => {
  const sb = await Sandbox.builder("node-limits").image(image).create();
  try {
    let out = await sb.exec(["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' a; exit 3"], { outputLimit: 1000 });
    assert.ok(out.stdout.equals(Buffer.alloc(1000, "a")));
    assert.equal(out.truncated, true);
    assert.equal(out.exitCode, 3);
    out = await sb.exec(["sh", "-c", "echo 0123456789 >&2; echo out"], { outputLimit: 4 });
    assert.deepEqual([out.stdout.toString(), out.stderr.toString(), out.truncated], ["out\n", "0123", true]);
    out = await sb.exec(["echo", "short"], { outputLimit: 1000 });
    assert.deepEqual([out.stdout.toString(), out.truncated], ["short\n", false]);
    assert.equal((await sb.exec(["echo", "whole"])).truncated, false);
  } finally {
    await sb.destroy();
  }
});

test("cancelling a read ends a pending pull at once; an abandoned writer refuses writes", async () => {
  const sb = await Sandbox.builder("node-stream-close").image(image).create();
  try {
    // A FIFO whose writer sends one line, then holds it open for 30 s.
    await sb.exec(["sh", "-c", "rm -f /tmp/p; mkfifo /tmp/p; (echo first; sleep 30) > /tmp/p &"]);
    const reader = (await sb.fs.readStream("/tmp/p")).getReader();
    const first = await reader.read();
    assert.equal(Buffer.from(first.value!).toString(), "first\n");
    const pending = reader.read();
    let settled = false;
    void pending.then(() => (settled = true));
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(settled, false, "the second pull waits on the held FIFO");
    const started = Date.now();
    await reader.cancel();
    assert.equal((await pending).done, true);
    assert.ok(Date.now() - started < 5000);
    assert.equal((await sb.exec(["echo", "ok"])).stdout.toString(), "ok\n");

    const w = await sb.fs.openWrite("/tmp/w.txt");
    await w.write("kept");
    await w.abandon();
    await assert.rejects(w.write("more"), (e: BurrowError) => e instanceof InvalidArgumentError && e.code === "invalid_argument");

    // A source that fails abandons the write and rejects with its error.
    async function* failing() {
      yield "half";
      throw new RangeError("the source failed");
    }
    await assert.rejects(sb.fs.writeStream("/tmp/x.txt", failing()), RangeError);
  } finally {
    await sb.destroy();
  }
});
