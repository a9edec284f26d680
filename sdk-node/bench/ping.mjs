// `await sb.ping()` from Node, N times (median), for scripts/bench-ping.sh.
import { Sandbox } from "burrow";
const [image, n = "2000"] = process.argv.slice(2);
const sb = await Sandbox.builder("bench-ping-node").image(image).replace();
for (let i = 0; i < 50; i++) await sb.ping();
const t = [];
for (let i = 0; i < Number(n); i++) {
  const s = process.hrtime.bigint();
  await sb.ping();
  t.push(Number(process.hrtime.bigint() - s) / 1000);
}
t.sort((a, b) => a - b);
console.log(`ping from Node (await sb.ping())            median ${t[t.length >> 1].toFixed(1)} us`);
await sb.destroy();
