// The TypeScript quickstart: a sandbox, a command, a file, a stop.
// Usage (after installing the package): node quickstart.js IMAGE
import { Sandbox, MiB, SandboxNotFoundError } from "burrow";

async function main(image: string): Promise<void> {
  const sb = await Sandbox.builder("quickstart-ts").image(image).memory(MiB(256))
    // Best effort: enforced where the host can (root, or a delegated cgroup), else run without.
    .bestEffortLimits()
    .replace();
  try {
    console.log(`${sb.name} (${sb.id}) is ${sb.status}`);
    const { latency } = await sb.ping();
    console.log(`agent reachable in ${(latency * 1000).toFixed(2)} ms`);
    const out = await sb.exec(["echo", "hello from the sandbox"]);
    process.stdout.write(out.stdout);
    await sb.fs.write("/tmp/note.txt", "some text");
    console.log(`read back: ${await sb.fs.readText("/tmp/note.txt")}`);
  } finally {
    const info = await sb.stop();
    console.log(`stopped: ${info.status} (${info.lastRun?.exitReason})`);
    await sb.destroy();
  }
  try {
    await Sandbox.get("quickstart-ts");
  } catch (e) {
    if (e instanceof SandboxNotFoundError) console.log("destroyed");
    else throw e;
  }
}

main(process.argv[2] ?? "python").catch((e) => {
  console.error(e);
  process.exit(1);
});
