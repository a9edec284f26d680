// Many processes, one sandbox: N child processes call connectOrCreate on
// the same name at once and all get the same id.
// Usage: node convergence.js IMAGE [N]
import { fork } from "node:child_process";
import { Sandbox } from "burrow";

async function child(image: string): Promise<void> {
  const sb = await Sandbox.builder("converge-ts").image(image).detached(true).connectOrCreate();
  process.send?.({ id: sb.id, generation: sb.generation });
}

async function parent(image: string, n: number): Promise<void> {
  const answers = await Promise.all(
    Array.from({ length: n }, () =>
      new Promise<{ id: string; generation: number }>((resolve, reject) => {
        const c = fork(__filename, [image, "--child"]);
        c.once("message", (m) => resolve(m as { id: string; generation: number }));
        c.once("exit", (code) => (code === 0 ? undefined : reject(new Error(`child exited ${code}`))));
      }),
    ),
  );
  const ids = [...new Set(answers.map((a) => a.id))];
  const generations = [...new Set(answers.map((a) => a.generation))];
  console.log(`${n} processes converged on ${JSON.stringify(ids)} (generation ${JSON.stringify(generations)})`);
  await (await Sandbox.get("converge-ts")).destroy();
  if (ids.length !== 1) process.exit(1);
}

const [image = "python", second] = process.argv.slice(2);
(second === "--child" ? child(image) : parent(image, Number(second ?? 8))).catch((e) => {
  console.error(e);
  process.exit(1);
});
