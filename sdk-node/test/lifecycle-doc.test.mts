// The lifecycle document's TypeScript samples (the "Lifecycle" page,
// /work/shared/seeds/001_...txt, with `microsandbox` read as `burrow`),
// each exactly as written, in the document's order, against real sandboxes
// of the local backend on a fresh burrow home, with checks of what the text
// says happens. The image `python` is the busybox demo rootfs
// ($BURROW_TEST_IMAGE), linked under that name as `images/named/python`.
//
// The samples are separate snippets of one page, so the glue between them
// (a destroy of the previous `worker`, a start where a sample needs a
// running sandbox, the block or function a sample needs to be valid code)
// is the test's, never an edit of a sample. Run against the installed
// package (compiled with tsc --strict by scripts/node-sdk.sh).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { Sandbox, MiB } from "burrow";
import {
  configure,
  InvalidArgumentError,
  InvalidStateError,
  SandboxHandle,
  SandboxNotFoundError,
  SandboxReplacedError,
} from "burrow";

const image = process.env.BURROW_TEST_IMAGE;
assert.ok(image, "BURROW_TEST_IMAGE names the busybox rootfs");
const home = mkdtempSync("/tmp/bnd");
mkdirSync(`${home}/images/named`, { recursive: true });
symlinkSync(image, `${home}/images/named/python`);
configure({ home });

/** Destroys whatever `name` is now (glue between samples). */
async function gone(name: string): Promise<void> {
  try {
    await (await Sandbox.get(name)).destroy();
  } catch (e) {
    if (!(e instanceof SandboxNotFoundError)) throw e;
  }
}

/** The lines `f` prints with console.log (still printed). */
async function logged(f: () => Promise<void>): Promise<string[]> {
  const lines: string[] = [];
  const print = console.log;
  console.log = (...args: unknown[]) => {
    lines.push(args.map(String).join(" "));
    print(...args);
  };
  try {
    await f();
  } finally {
    console.log = print;
  }
  return lines;
}

/** A live `Sandbox` of the running `name` (glue: the samples' `sb`). */
async function live(name: string): Promise<Sandbox> {
  return (await Sandbox.get(name)).connect();
}

test("every TypeScript sample of the lifecycle document runs as written", async (t) => {
  let detachedId = "";
  let createdMemory: number | null = null;
  let destroyed: SandboxHandle | null = null;
  try {
    await t.test("Create a sandbox", async () => {
      let attached: Sandbox | null = null;
      {
        // Local attached handle: sandbox stops when your process exits
        await using sb = await Sandbox.builder("worker").image("python").create();

        assert.equal(sb.status, "running");
        assert.equal((await sb.info()).detached, false);
        attached = sb;
      }
      // `await using` stopped it at the end of its scope.
      assert.equal(attached.status, "stopped");
      assert.equal((await Sandbox.get("worker")).status, "stopped");
      await gone("worker");
      {
        // Detached: sandbox survives after your process exits
        const detached = await Sandbox.builder("worker")
          .image("python")
          .detached(true)
          .create();

        assert.equal(detached.status, "running");
        const info = await detached.info();
        assert.equal(info.detached, true);
        detachedId = detached.id;
        // It named no memory: the host's default where the host holds one.
        createdMemory = info.config.memory;
      }
    });

    await t.test("Converge on a named sandbox", async () => {
      // The sample, as a function: run on the existing `worker`, then on the missing name.
      const converge = async () => {
        const sb = await Sandbox.builder("worker")
          .image("python")
          .memory(MiB(1024))
          .connectOrCreate();

        return sb;
      };
      // An existing sandbox keeps its persisted configuration.
      const existing = await converge();
      assert.equal(existing.id, detachedId, "connected to the running detached worker");
      const kept = await existing.info();
      assert.equal(kept.config.memory, createdMemory, "the existing configuration wins over .memory(MiB(1024))");
      assert.notEqual(kept.config.memory, 1024);
      assert.equal(kept.detached, true);

      const connectOrStart = async () => {
        const handle = await Sandbox.get("worker");
        const sb = await handle.connectOrStart();

        return { handle, sb };
      };
      // Running: connects.
      {
        const { handle, sb } = await connectOrStart();
        assert.equal(handle.id, detachedId);
        assert.equal(handle.status, "running");
        assert.equal(sb.id, detachedId);
        assert.equal(sb.generation, 1);
      }
      // Stopped: starts the exact persisted sandbox.
      await (await Sandbox.get("worker")).stop();
      {
        const { handle, sb } = await connectOrStart();
        assert.equal(sb.id, detachedId);
        assert.equal(sb.generation, 2, "started again");
        assert.equal(sb.status, "running");
        assert.equal(handle.status, "running", "the handle saw the start");
        destroyed = handle;
      }

      // A missing name: created, with the builder's options.
      await gone("worker");
      const created = await converge();
      assert.notEqual(created.id, detachedId, "recreating the name makes a different id");
      assert.equal((await created.info()).config.memory, 1024);
      // A stale receiver never reaches the replacement.
      await assert.rejects(
        destroyed!.info(),
        (e) => e instanceof SandboxReplacedError && e.code === "sandbox_replaced" && e.sandboxId === detachedId,
      );
    });

    await t.test("Stop and restart", async () => {
      const sb = await live("worker");
      const id = sb.id;
      {
        await sb.stop()
      }
      assert.equal(sb.status, "stopped", "the stop's record updated the snapshot");
      assert.equal((await Sandbox.get("worker")).status, "stopped");
      {
        // Later, resume where you left off
        const sb = await Sandbox.start("worker")

        assert.equal(sb.id, id, "the same sandbox, started again");
        assert.equal(sb.status, "running");
        assert.equal(sb.generation, 2);
        assert.equal((await sb.info()).config.memory, 1024, "its configuration preserved");
      }
      // Only a created, stopped or crashed sandbox starts.
      await assert.rejects(Sandbox.start("worker"), (e) => e instanceof InvalidStateError && e.status === "running");
      await assert.rejects(Sandbox.start("nobody"), SandboxNotFoundError);
    });

    await t.test("Configuration", async () => {
      const sandbox = await live("worker");
      {
        const plan = await sandbox.modify({ cpus: 4, memory: 4096 });

        const fields = plan.changes.map((c) => c.field);
        assert.ok(fields.includes("cpus") && fields.includes("memory_mb"), `${fields}`);
        assert.equal(plan.info.config.cpus, 4);
        assert.equal(plan.info.config.memory, 4096);
      }
      assert.equal((await sandbox.info()).config.memory, 4096);
    });

    await t.test("Ping and touch (no TypeScript sample: the same calls)", async () => {
      const sb = await live("worker");
      const ping = await sb.ping();
      assert.ok(ping.latency > 0 && ping.latency < 10, `latency ${ping.latency} s`);
      await sb.touch();
    });

    await t.test("Kill immediately", async () => {
      const sb = await live("worker");
      {
        await sb.kill()
      }
      const info = await Sandbox.get("worker").then((h) => h.info());
      assert.ok(info.status === "stopped" || info.status === "crashed", info.status);
      assert.equal(sb.status, info.status, "the kill's record updated the snapshot");
      assert.equal(info.lastRun?.exitReason, "killed");
    });

    await t.test("Detach", async () => {
      const sb = await Sandbox.start("worker");
      assert.equal((await sb.info()).detached, false);
      {
        await sb.detach()
      }
      assert.equal((await sb.info()).detached, true);
    });

    await t.test("Request drain, wait until stopped", async () => {
      const sb = await live("worker");
      // A command in flight when the drain begins runs to completion.
      const running = sb.exec(["sh", "-c", "sleep 2; echo done"]);
      for (let i = 0; i < 200 && (await sb.exec(["pidof", "sleep"])).exitCode !== 0; i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      {
        await sb.requestDrain()
      }
      // New execs are rejected (draining, or stopped once the command ended).
      await assert.rejects(sb.exec(["true"]), InvalidStateError);
      const out = await running;
      assert.equal(out.stdout.toString(), "done\n");
      assert.equal(out.exitCode, 0);
      {
        const result = await sb.waitUntilStopped()

        assert.equal(result.status, "stopped");
        assert.equal(result.lastRun?.exitReason, "drain");
      }
      assert.equal(sb.status, "stopped");
    });

    await t.test("Destroy", async () => {
      const sb = await Sandbox.start("worker");
      destroyed = await Sandbox.get("worker");
      {
        await sb.destroy();
      }
      await assert.rejects(Sandbox.get("worker"), SandboxNotFoundError);
    });

    await t.test("Remove", async () => {
      const sb = await Sandbox.builder("worker").image("python").create();
      // A stale receiver refuses the replacement of its name.
      await assert.rejects(destroyed!.info(), SandboxReplacedError);
      await assert.rejects(destroyed!.stop(), SandboxReplacedError);
      assert.equal(sb.status, "running");
      // Only a stopped sandbox is removed.
      await assert.rejects(Sandbox.remove("worker"), InvalidStateError);
      await sb.stop();
      {
        await Sandbox.remove("worker")
      }
      await assert.rejects(Sandbox.get("worker"), SandboxNotFoundError);
    });

    await t.test("List and inspect", async () => {
      await Sandbox.builder("worker").image("python").create();
      await (await Sandbox.builder("idle").image("python").create()).stop();
      const listed = await logged(async () => {
        const page = await Sandbox.list();
        for (const handle of page.sandboxes) {
            console.log(`${handle.name}: ${handle.status}`);
        }
      });
      assert.deepEqual(listed.sort(), ["idle: stopped", "worker: running"]);
      const page = await Sandbox.list();
      for (const h of page.sandboxes) {
        assert.ok(h instanceof SandboxHandle);
        assert.equal((await h.info()).id, h.id, "a listed handle is bound to its sandbox");
      }
      assert.deepEqual((await Sandbox.list({ status: "stopped" })).sandboxes.map((h) => h.name), ["idle"]);

      const shown = await logged(async () => {
        const handle = await Sandbox.get("worker");
        console.log(handle.status); // "running" | "stopped" | ...
      });
      assert.deepEqual(shown, ["running"]);
      await gone("idle");
    });

    await t.test("Sandbox process policies", async () => {
      await gone("worker");
      let made: Sandbox | null = null;
      {
        await using sb = await Sandbox.builder("worker")
            .image("python")
            .maxDuration(3600)   // maximum sandbox lifetime in seconds
            .idleTimeout(300)    // auto-drain after 5 minutes of inactivity
            .create();

        const config = (await sb.info()).config;
        assert.equal(config.maxDuration, 3600, "seconds");
        assert.equal(config.idleTimeout, 300, "seconds");
        made = sb;
      }
      assert.equal(made.status, "stopped", "stopped at the end of its scope");
      // Duration text is the same duration.
      const texts = await Sandbox.builder("texts").image("python").maxDuration("1h").idleTimeout("5m").define();
      assert.equal(texts.status, "created");
      const config = (await texts.info()).config;
      assert.equal(config.maxDuration, 3600);
      assert.equal(config.idleTimeout, 300);
      // A negative number of seconds is a typed error, and nothing is made
      // (the binding core refuses the argument before any configuration:
      // invalid_argument, where Rust's builder answers invalid_config).
      await gone("worker");
      await assert.rejects(
        Sandbox.builder("worker").image("python").idleTimeout(-5).create(),
        (e) => e instanceof InvalidArgumentError && e.code === "invalid_argument",
      );
      await assert.rejects(Sandbox.get("worker"), SandboxNotFoundError);
    });
  } finally {
    try {
      for (const h of (await Sandbox.list()).sandboxes) await h.destroy().catch(() => {});
    } finally {
      configure({});
      try {
        rmSync(home, { recursive: true, force: true });
      } catch {
        // a leftover the next mkdtemp does not collide with
      }
    }
  }
});
