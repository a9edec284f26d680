// Drives `burrow mcp` with the official TypeScript MCP client (the SDK of
// examples/mcp). Usage: node client.mjs stdio|http:URL BURROW_BIN IMAGE
// [server args...]. Prints one JSON object: what each step saw
// (core/cli/tests/mcp_server.rs asserts on it).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [transportArg, burrow, image, ...serverArgs] = process.argv.slice(2);
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith("BURROW_")));
const transport =
  transportArg === "stdio"
    ? new StdioClientTransport({ command: burrow, args: ["mcp", ...serverArgs], env })
    : new StreamableHTTPClientTransport(new URL(transportArg.slice("http:".length)));

const client = new Client({ name: "burrow-test", version: "1.0.0" });
await client.connect(transport);
const out = {};
const result = (r) => ({ is_error: Boolean(r.isError), structured: r.structuredContent ?? null });

const tools = await client.listTools();
out.tools = tools.tools.map((t) => t.name).sort();
out.refused = result(await client.callTool({ name: "create", arguments: { name: "no", image: "not-allowed:1" } }));
out.created = result(await client.callTool({ name: "create", arguments: { name: "ts", image } }));
const progress = [];
out.exec = result(
  await client.callTool(
    { name: "exec", arguments: { name: "ts", argv: ["sh", "-c", "echo one; sleep 0.2; echo two"] } },
    undefined,
    { onprogress: (p) => progress.push(p.message ?? "") },
  ),
);
out.progress = progress;
// Cancelled by the client: an AbortSignal sends notifications/cancelled.
const abort = new AbortController();
const long = client
  .callTool(
    { name: "exec", arguments: { name: "ts", argv: ["sh", "-c", "echo started; exec sleep 30"] } },
    undefined,
    {
      signal: abort.signal,
      onprogress: (p) => {
        if ((p.message ?? "").includes("started")) abort.abort();
      },
    },
  )
  .catch((e) => ({ aborted: String(e) }));
out.cancelled = await long;
let ps = "";
for (let i = 0; i < 50; i++) {
  ps = (await client.callTool({ name: "exec", arguments: { name: "ts", argv: ["ps"] } })).structuredContent.stdout;
  if (!ps.includes("sleep 30")) break;
  await new Promise((r) => setTimeout(r, 100));
}
out.after_cancel_ps = ps;
await client.callTool({ name: "fs_write", arguments: { name: "ts", path: "/tmp/b.bin", content: "AAEC/w==", base64: true } });
out.read_binary = result(await client.callTool({ name: "fs_read", arguments: { name: "ts", path: "/tmp/b.bin" } }));
out.destroy = result(await client.callTool({ name: "destroy", arguments: { name: "ts" } }));
await client.close();
console.log(JSON.stringify(out));
