// The installed npm package alone runs a sandbox: run with no burrow on
// PATH and no BURROW_* variables (scripts/node-sdk.sh runs it as an
// unprivileged user, from a fresh directory). Exits non-zero, saying why,
// if anything fails. Usage: node self_contained.mjs IMAGE
import { execFileSync } from "node:child_process";
import { Sandbox } from "burrow";

const image = process.argv[2];
let onPath = "";
try {
  onPath = execFileSync("sh", ["-c", "command -v burrow || true"]).toString().trim();
} catch {}
if (onPath) throw new Error(`a burrow binary is on PATH: ${onPath}`);
const leftover = Object.keys(process.env).filter((k) => k.startsWith("BURROW_"));
if (leftover.length) throw new Error(`BURROW_ variables are set: ${leftover}`);
const sb = await Sandbox.builder("self-contained").image(image).create();
try {
  const out = await sb.exec(["sh", "-c", "echo hello from $(id -u)"]);
  const text = Buffer.from(out.stdout).toString();
  if (out.exitCode !== 0 || text !== "hello from 0\n") {
    throw new Error(`unexpected: ${out.exitCode} ${JSON.stringify(text)}`);
  }
  console.log(`ok: ${text.trim()} (as uid ${process.getuid()})`);
} finally {
  await sb.destroy();
}
