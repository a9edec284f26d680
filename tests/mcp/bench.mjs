// `exec true` through `burrow mcp` (stdio) with the official TypeScript MCP
// client (the SDK of examples/mcp): one connected client, one warm-up call,
// then N calls, each to its result. Usage: node bench.mjs BURROW_BIN NAME N
// (the sandbox NAME running; the BURROW_ variables passed on). Prints one
// JSON object: {"ms": [each call's milliseconds]}
// (core/cli/benches/burrow_mcp.rs).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [burrow, name, n] = process.argv.slice(2);
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith("BURROW_")));
const client = new Client({ name: "burrow-bench", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: burrow, args: ["mcp"], env }));
const call = async () => {
  const r = await client.callTool({ name: "exec", arguments: { name, argv: ["true"] } });
  if (r.isError || r.structuredContent?.exit_code !== 0) throw new Error(`exec true: ${JSON.stringify(r)}`);
};
await call();
const ms = [];
for (let i = 0; i < Number(n); i++) {
  const t = performance.now();
  await call();
  ms.push(performance.now() - t);
}
await client.close();
console.log(JSON.stringify({ ms }));
