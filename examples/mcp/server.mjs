// An MCP server (the official TypeScript SDK, streamable HTTP transport) as
// a serverless workload. By default stateless, so any process of it can
// answer any call, and a client connected before the sandbox went dormant
// keeps calling after it wakes. With MCP_STATEFUL=1 it keeps sessions
// (`Mcp-Session-Id`), which end with its process: behind burrow's gateway
// a client's session still outlives a reclaim, because the gateway
// re-establishes it on the next process (docs/serve.md, "MCP sessions
// through the gateway").
//
//   node server.mjs [PORT]        (default 8000, or $PORT; host $HOST, default 127.0.0.1)
//
// Tools:
//   add {a, b}          the sum, as text
//   whoami {}           this process: pid and start time (a new process after each wake)
//   countdown {seconds} a long-running tool: one progress notification a
//                       second (streamed to the caller as server-sent events), then "done"
//   count {}            (stateful only) this session's id as the server knows it, and
//                       the calls of `count` in it so far: state kept in the session
import http from "node:http";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

const port = Number(process.argv[2] ?? process.env.PORT ?? 8000);
const stateful = process.env.MCP_STATEFUL === "1";
const host = process.env.HOST ?? "127.0.0.1";
const startedAt = new Date().toISOString();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const text = (t) => ({ content: [{ type: "text", text: t }] });

function mcpServer() {
  const server = new McpServer({ name: "burrow-mcp-example", version: "0.1.0" });
  if (stateful) {
    let calls = 0;
    server.registerTool(
      "count",
      { description: "This session's id and how many times count was called in it" },
      async (extra) => text(JSON.stringify({ sessionId: extra.sessionId, calls: ++calls, startedAt })),
    );
  }
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

// Stateful: a transport (and a server) per session, by id.
const sessions = new Map();

async function serveSession(req, res) {
  const id = req.headers["mcp-session-id"];
  let transport = id === undefined ? undefined : sessions.get(id);
  if (id !== undefined && transport === undefined) return refuse(res, 404, "session not found");
  if (transport === undefined) {
    // A new session: the transport answers an initialize, and refuses
    // anything else without a session id.
    transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sid) => sessions.set(sid, transport),
    });
    transport.onclose = () => sessions.delete(transport.sessionId);
    await mcpServer().connect(transport);
  }
  await transport.handleRequest(req, res);
}

const httpServer = http.createServer(async (req, res) => {
  if (new URL(req.url, "http://x").pathname !== "/mcp") return refuse(res, 404, "not found: the MCP endpoint is /mcp");
  if (stateful) {
    try {
      return await serveSession(req, res);
    } catch (e) {
      console.error("handling an MCP request failed:", e);
      if (!res.headersSent) return refuse(res, 500, "internal server error");
      return;
    }
  }
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
