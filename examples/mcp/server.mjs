// An MCP server (the official TypeScript SDK, streamable HTTP transport) as
// a serverless workload: stateless, so any process of it can answer any
// call, and a client connected before the sandbox went dormant keeps
// calling after it wakes.
//
//   node server.mjs [PORT]        (default 8000, or $PORT; host $HOST, default 127.0.0.1)
//
// Tools:
//   add {a, b}          the sum, as text
//   whoami {}           this process: pid and start time (a new process after each wake)
//   countdown {seconds} a long-running tool: one progress notification a
//                       second (streamed to the caller as server-sent events), then "done"
import http from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

const port = Number(process.argv[2] ?? process.env.PORT ?? 8000);
const host = process.env.HOST ?? "127.0.0.1";
const startedAt = new Date().toISOString();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (t) => ({ content: [{ type: "text", text: t }] });

function mcpServer() {
  const server = new McpServer({ name: "burrow-mcp-example", version: "0.1.0" });
  server.registerTool(
    "add",
    { description: "Adds two numbers", inputSchema: { a: z.number(), b: z.number() } },
    async ({ a, b }) => text(String(a + b)),
  );
  server.registerTool(
    "whoami",
    { description: "The server process: its pid and when it started" },
    async () => text(JSON.stringify({ pid: process.pid, startedAt })),
  );
  server.registerTool(
    "countdown",
    {
      description: "Runs for `seconds`, reporting progress every second",
      inputSchema: { seconds: z.number().int().min(0).max(3600) },
    },
    async ({ seconds }, extra) => {
      const token = extra._meta?.progressToken;
      for (let i = 1; i <= seconds; i++) {
        await sleep(1000);
        if (token !== undefined) {
          await extra.sendNotification({
            method: "notifications/progress",
            params: { progressToken: token, progress: i, total: seconds, message: `${seconds - i} left` },
          });
        }
      }
      return text("done");
    },
  );
  return server;
}

function refuse(res, status, message) {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message }, id: null }));
}

const httpServer = http.createServer(async (req, res) => {
  if (new URL(req.url, "http://x").pathname !== "/mcp") return refuse(res, 404, "not found: the MCP endpoint is /mcp");
  // Stateless: no sessions, so no server-initiated stream (GET) and
  // nothing to end (DELETE).
  if (req.method !== "POST") return refuse(res, 405, "method not allowed");
  const server = mcpServer();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on("close", () => {
    transport.close();
    server.close();
  });
  try {
    await server.connect(transport);
    await transport.handleRequest(req, res);
  } catch (e) {
    console.error("handling an MCP request failed:", e);
    if (!res.headersSent) refuse(res, 500, "internal server error");
  }
});
httpServer.listen(port, host, () => console.log(`mcp server listening on ${host}:${port}`));
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => httpServer.close(() => process.exit(0)));
