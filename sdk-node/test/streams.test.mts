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

// Guest-side witnesses that a stream released the guest's file (while the
// SDK's object is still referenced, so no collection did it):
// - /tmp/p, a FIFO whose writer sends one line and then nothing until
//   /tmp/go exists (a second pull waits); then it writes a line every
//   0.1 s, which fails (SIGPIPE/EPIPE) only once no reader holds the FIFO,
//   and /tmp/gone appears.
// - /tmp/q, a FIFO read by `cat`, which ends (and /tmp/q.done appears) only
//   once no writer holds it.
const HELD_FIFO =
  "rm -f /tmp/p /tmp/go /tmp/gone; mkfifo /tmp/p; " +
  "( (echo first; until [ -e /tmp/go ]; do sleep 0.1; done; " +
  "while echo more; do sleep 0.1; done) > /tmp/p; echo $? > /tmp/gone ) " +
  "</dev/null >/dev/null 2>&1 &";
const READ_FIFO =
  "rm -f /tmp/q /tmp/q.done; mkfifo /tmp/q; " +
  "(cat /tmp/q > /tmp/q.out; echo $? > /tmp/q.done) </dev/null >/dev/null 2>&1 &";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Whether `path` exists in the sandbox within `ms`. */
async function appears(sb: Sandbox, path: string, ms = 10_000): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(100)) {
    if (await sb.fs.exists(path)) return true;
  }
  return false;
}

/** Lets the FIFO's writer go on, and whether it then finds no reader. */
async function readerReleased(sb: Sandbox): Promise<boolean> {
  await sb.fs.write("/tmp/go", "");
  return appears(sb, "/tmp/gone");
}

const invalidArgument = (e: unknown) => e instanceof InvalidArgumentError && e.code === "invalid_argument";

test("cancelling a read stream ends a pending pull at once and releases the guest's file", async () => {
  const sb = await Sandbox.builder("node-stream-cancel").image(image).create();
  try {
    await sb.exec(["sh", "-c", HELD_FIFO]);
    const reader = (await sb.fs.readStream("/tmp/p")).getReader();
    const first = await reader.read();
    assert.equal(Buffer.from(first.value!).toString(), "first\n");
    const pending = reader.read();
    let settled = false;
    void pending.then(() => (settled = true));
    await sleep(300);
    assert.equal(settled, false, "the second pull waits on the held FIFO");
    const started = Date.now();
    await reader.cancel();
    assert.equal((await pending).done, true);
    assert.ok(Date.now() - started < 5000);
    assert.ok(await readerReleased(sb), "the guest still holds the FIFO");
    assert.equal((await sb.exec(["echo", "ok"])).stdout.toString(), "ok\n");
  } finally {
    await sb.destroy();
  }
});

test("a read stream left early or aborted releases the guest's file", async () => {
  const sb = await Sandbox.builder("node-stream-early").image(image).create();
  try {
    // A `for await` left early cancels the stream.
    await sb.exec(["sh", "-c", HELD_FIFO]);
    const stream = await sb.fs.readStream("/tmp/p");
    for await (const chunk of stream) {
      assert.equal(Buffer.from(chunk).toString(), "first\n");
      break;
    }
    assert.ok(await readerReleased(sb), "the guest still holds the FIFO (for await)");

    // The call's signal aborting a pending pull errors the stream with the
    // abort, and the file is released with it.
    await sb.exec(["sh", "-c", HELD_FIFO]);
    const ac = new AbortController();
    const reader = (await sb.fs.readStream("/tmp/p", { signal: ac.signal })).getReader();
    assert.equal(Buffer.from((await reader.read()).value!).toString(), "first\n");
    const pending = reader.read();
    await sleep(300);
    ac.abort();
    await assert.rejects(pending, { name: "AbortError" });
    assert.ok(await readerReleased(sb), "the guest still holds the FIFO (abort)");
  } finally {
    await sb.destroy();
  }
});

test("an abandoned writer closes the guest's file and refuses later calls", async () => {
  const sb = await Sandbox.builder("node-stream-abandon").image(image).create();
  try {
    await sb.exec(["sh", "-c", READ_FIFO]);
    const w = await sb.fs.openWrite("/tmp/q");
    await w.write("kept");
    await w.abandon();
    assert.ok(await appears(sb, "/tmp/q.done"), "the guest still holds the FIFO");
    await assert.rejects(w.write("more"), invalidArgument);
    // Not finished: finish is refused too, by its class.
    await assert.rejects(w.finish(), invalidArgument);
    await w.abandon(); // abandoning twice is harmless
    assert.equal((await sb.exec(["echo", "ok"])).stdout.toString(), "ok\n");
  } finally {
    await sb.destroy();
  }
});

test("writeStream abandons the write when its source throws or its signal aborts", async () => {
  const sb = await Sandbox.builder("node-stream-source").image(image).create();
  try {
    await sb.exec(["sh", "-c", READ_FIFO]);
    async function* failing() {
      yield "half";
      throw new RangeError("the source failed");
    }
    await assert.rejects(sb.fs.writeStream("/tmp/q", failing()), RangeError);
    assert.ok(await appears(sb, "/tmp/q.done"), "the guest still holds the FIFO (source)");

    // The signal aborts between two chunks: the abandon is not refused for
    // the aborted signal.
    await sb.exec(["sh", "-c", READ_FIFO]);
    const ac = new AbortController();
    async function* aborting() {
      yield "part";
      ac.abort();
      yield "more";
    }
    await assert.rejects(sb.fs.writeStream("/tmp/q", aborting(), { signal: ac.signal }), { name: "AbortError" });
    assert.ok(await appears(sb, "/tmp/q.done"), "the guest still holds the FIFO (abort)");
  } finally {
    await sb.destroy();
  }
});
