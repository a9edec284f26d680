// An MCP client (the official TypeScript SDK, streamable HTTP transport)
// for a server behind burrow's demand gateway.
//
// The one thing it adds to the SDK is a fetch that understands the
// gateway's cold start: while the sandbox starts, the gateway answers
// `503` with `Retry-After` (the call never reached the server, so sending
// it again is safe); this fetch waits and sends it again.
//
//   node client.mjs URL tools                      the tool names
//   node client.mjs URL call TOOL [JSON-ARGS]      call a tool (progress shown as it streams)
//   node client.mjs URL bench N TOOL [JSON-ARGS]   N calls after one warm-up, their milliseconds
//   node client.mjs URL session                    one session, driven by JSON lines on stdin:
//       {"call": TOOL, "args": {...}, "via": URL?}      a call (through another endpoint, e.g.
//                                                       another replica, if "via" is given)
//       {"concurrent": [{"call": ..., "via": ..., "after": FILE?}, ...]}
//                                                       calls at once, each sent once the one
//                                                       before it went out (and FILE exists)
//       {"end": true}                                   ends the session (DELETE) and exits
//     and one JSON line out per line in: {result, sessionId (the client's), retries}
//
// URL is the MCP endpoint, e.g. http://127.0.0.1:7777/gw/sb_.../mcp; the
// API token is $BURROW_TOKEN. Each command prints one JSON line:
// `retries` counts the 503s waited out, `firstMs` is the time from the
// first request to the first answer of the command.
import { existsSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A fetch that waits out `503 + Retry-After` answers (at most
 * `maxRetryWaitMs` each, and for `deadlineMs` in all) and counts them in
 * `stats.retries`.
 */
export function gatewayFetch(stats, { maxRetryWaitMs = Infinity, deadlineMs = 300_000, via } = {}) {
  return async (url, init) => {
    const end = Date.now() + deadlineMs;
    // Another endpoint for this request (`via()`: its origin and path).
    const to = via?.() ?? url;
    stats.sent = (stats.sent ?? 0) + 1;
    for (;;) {
      const res = await fetch(to, init);
      const after = Number(res.headers.get("retry-after"));
      if (res.status !== 503 || !Number.isFinite(after) || Date.now() > end) return res;
      stats.retries += 1;
      await res.body?.cancel();
      await sleep(Math.min(after * 1000, maxRetryWaitMs));
    }
  };
}

/** Connects (the MCP initialize exchange) to the endpoint `url`. */
export async function connect(url, { token, maxRetryWaitMs, deadlineMs, via } = {}) {
  const stats = { retries: 0 };
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: gatewayFetch(stats, { maxRetryWaitMs, deadlineMs, via }),
    requestInit: token ? { headers: { authorization: `Bearer ${token}` } } : undefined,
  });
  const client = new Client({ name: "burrow-mcp-example-client", version: "0.1.0" });
  await client.connect(transport);
  return { client, stats, transport };
}

/** The text of a tool result. */
export const resultText = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");

async function main(argv) {
  const [url, command, ...rest] = argv;
  if (!url || !command) {
    console.error("usage: node client.mjs URL tools | call TOOL [JSON-ARGS] | bench N TOOL [JSON-ARGS]");
    return 2;
  }
  const t0 = performance.now();
  const maxRetryWaitMs = process.env.MCP_MAX_RETRY_WAIT_MS ? Number(process.env.MCP_MAX_RETRY_WAIT_MS) : undefined;
  let via;
  const { client, stats, transport } = await connect(url, {
    token: process.env.BURROW_TOKEN,
    maxRetryWaitMs,
    via: () => via,
  });
  if (command === "session") return session(client, stats, transport, (v) => (via = v));
  const out = { command };
  if (command === "tools") {
    out.tools = (await client.listTools()).tools.map((t) => t.name);
    out.firstMs = performance.now() - t0;
  } else if (command === "call") {
    const [tool, args] = rest;
    const progress = [];
    const r = await client.callTool({ name: tool, arguments: JSON.parse(args ?? "{}") }, undefined, {
      // Progress notifications arrive while the call runs; they also
      // keep the call from timing out.
      onprogress: (p) => {
        progress.push({ progress: p.progress, atMs: Math.round(performance.now() - t0) });
        console.error(`progress ${p.progress}/${p.total ?? "?"}${p.message ? `: ${p.message}` : ""}`);
      },
      resetTimeoutOnProgress: true,
    });
    out.firstMs = performance.now() - t0;
    out.result = resultText(r);
    out.isError = r.isError ?? false;
    out.progress = progress;
  } else if (command === "bench") {
    const [n, tool, args] = rest;
    const call = () => client.callTool({ name: tool, arguments: JSON.parse(args ?? "{}") });
    out.result = resultText(await call());
    out.firstMs = performance.now() - t0;
    out.ms = [];
    for (let i = 0; i < Number(n); i++) {
      const s = performance.now();
      await call();
      out.ms.push(performance.now() - s);
    }
  } else {
    console.error(`unknown command ${command}`);
    return 2;
  }
  out.retries = stats.retries;
  await client.close();
  console.log(JSON.stringify(out));
  return 0;
}

/** The `session` command: calls read from stdin on one session. */
async function session(client, stats, transport, setVia) {
  const call = async (c) => {
    const r = await client.callTool({ name: c.call, arguments: c.args ?? {} });
    return { result: resultText(r), isError: r.isError ?? false };
  };
  const lines = (await import("node:readline")).createInterface({ input: process.stdin });
  for await (const line of lines) {
    const c = JSON.parse(line);
    const retries = stats.retries;
    let out;
    if (c.end) {
      await transport.terminateSession();
      out = { ended: true };
    } else if (c.concurrent) {
      const running = [];
      for (const one of c.concurrent) {
        while (one.after && !existsSync(one.after)) await sleep(20);
        const sent = stats.sent;
        setVia(one.via);
        running.push(call(one));
        while (stats.sent === sent) await new Promise((r) => setImmediate(r));
      }
      out = { results: await Promise.all(running) };
    } else {
      setVia(c.via);
      out = await call(c);
    }
    setVia(undefined);
    console.log(JSON.stringify({ ...out, sessionId: transport.sessionId, retries: stats.retries - retries }));
    if (c.end) break;
  }
  await client.close();
  return 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (e) => {
      console.error(`mcp client: ${e?.stack ?? e}`);
      process.exit(1);
    },
  );
}
