// Networks and published ports from Node, against the installed package: a
// policy kept in the configuration and changed live, a bad rule rejected
// with its typed error, a taken host port rejected with its own, and a
// published port reaching a server in the sandbox. Loopback only.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import net from "node:net";
import { Sandbox, configure, InvalidConfigError, PortUnavailableError, SandboxNotFoundError } from "burrow";

const image = process.env.BURROW_TEST_IMAGE;
assert.ok(image, "BURROW_TEST_IMAGE");
configure({ home: mkdtempSync("/tmp/bnn") });

test("a policy is kept in the configuration and changed live", async () => {
  const policy = { allow: ["pypi.org", "tcp:*.github.com:443"], deny: ["udp:*"] };
  const sb = await Sandbox.builder("node-net").image(image).network(policy).create();
  try {
    assert.deepEqual((await sb.info()).config.network, policy);
    const plan = await sb.modify({ network: { allow: ["files.pythonhosted.org"] } });
    assert.equal(plan.changes.find((c) => c.field === "network").applies, "live");
    assert.deepEqual((await sb.info()).config.network, { allow: ["files.pythonhosted.org"], deny: [] });
    await assert.rejects(sb.modify({ network: { allow: ["a..b"] } }), InvalidConfigError);
    await sb.modify({ network: false });
    assert.equal((await sb.info()).config.network, false);
  } finally {
    await sb.destroy();
  }
});

test("bad rules and ports are typed and create nothing", async () => {
  await assert.rejects(Sandbox.builder("node-bad").image(image).network({ allow: ["pypi.org:9-8"] }).create(), InvalidConfigError);
  await assert.rejects(Sandbox.builder("node-bad").image(image).port("80").define(), InvalidConfigError);
  await assert.rejects(Sandbox.get("node-bad"), SandboxNotFoundError);
});

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function fetchOnce(port) {
  return new Promise((resolve) => {
    const chunks = [];
    const c = net.connect(port, "127.0.0.1");
    c.on("data", (d) => chunks.push(d));
    c.on("close", () => resolve(Buffer.concat(chunks).toString()));
    c.on("error", () => resolve(""));
  });
}

test("a published port reaches the sandbox; a taken one is PortUnavailableError", async () => {
  const port = await freePort();
  const sb = await Sandbox.builder("node-port").image(image).port(`${port}:8000`).create();
  try {
    assert.deepEqual((await sb.info()).config.ports, [`127.0.0.1:${port}:8000`]);
    await sb.exec(["sh", "-c", "setsid nc -ll -p 8000 -e echo hi </dev/null >/dev/null 2>&1 &"]);
    let got = "";
    for (let i = 0; i < 100 && !got; i++) {
      got = await fetchOnce(port);
      if (!got) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(got, "hi\n");
    // A second sandbox on the same host port: its start is refused.
    const clash = await Sandbox.builder("node-clash").image(image).port(`${port}:8000`).define();
    await assert.rejects(clash.start(), PortUnavailableError);
    await clash.destroy();
  } finally {
    await sb.destroy();
  }
});

test("a secret reaches its host and never the sandbox", async () => {
  const { default: http } = await import("node:http");
  const value = "node_secret_value_41b7";
  const heads = [];
  const server = http.createServer((req, res) => {
    heads.push(req.headers);
    res.end("ok");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const port = server.address().port;
  try {
    assert.equal((await Sandbox.capabilities()).secrets, true);
    const sb = await Sandbox.builder("node-secret")
      .image(image)
      .network({ allow: ["127.0.0.1"] })
      .secret("TOKEN", value, ["127.0.0.1"])
      .create();
    try {
      const [got] = (await sb.info()).config.secrets;
      assert.equal(got.name, "TOKEN");
      assert.deepEqual(got.hosts, ["127.0.0.1"]);
      assert.match(got.placeholder, /^BURROW_SECRET_[0-9a-f]{32}$/);
      assert.ok(!JSON.stringify(await sb.info()).includes(value));
      const out = await sb.exec([
        "sh",
        "-c",
        `echo $TOKEN; wget -q -O - --header "Authorization: Bearer $TOKEN" http://10.0.2.2:${port}/`,
      ]);
      assert.equal(out.stdout.toString(), `${got.placeholder}\nok`);
      assert.equal(heads[0].authorization, `Bearer ${value}`);
    } finally {
      await sb.destroy();
    }
  } finally {
    server.close();
  }
  // No network: nowhere to send it; a bad host: typed too.
  await assert.rejects(Sandbox.builder("node-secret-bad").image(image).secret("TOKEN", value, ["127.0.0.1"]).create(), InvalidConfigError);
  await assert.rejects(
    Sandbox.builder("node-secret-bad").image(image).network(true).secret("TOKEN", value, ["bad host"]).create(),
    InvalidConfigError,
  );
  await assert.rejects(Sandbox.get("node-secret-bad"), SandboxNotFoundError);
});

test("a secret's headers round-trip and get the value, in them only", async () => {
  const { default: http } = await import("node:http");
  const value = "node_header_value_c3e9";
  const heads = [];
  const server = http.createServer((req, res) => {
    heads.push(req.headers);
    res.end("ok");
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const port = server.address().port;
  try {
    const sb = await Sandbox.builder("node-secret-headers")
      .image(image)
      .network({ allow: ["127.0.0.1"] })
      .secret("KEY", value, ["127.0.0.1"], { headers: ["X-Api-Key"] })
      .secret("TOKEN", "node_default_value_c3ea", ["127.0.0.1"])
      .create();
    try {
      const [key, token] = (await sb.info()).config.secrets;
      assert.deepEqual(key.headers, ["X-Api-Key"]);
      assert.deepEqual(token.headers, []);
      assert.ok(!JSON.stringify(await sb.info()).includes(value));
      const get = (header, path) =>
        sb.exec(["sh", "-c", `wget -q -O - --header "${header}: $KEY" http://10.0.2.2:${port}/${path}`]);
      assert.equal((await get("X-Api-Key", "named")).stdout.toString(), "ok");
      assert.equal(heads.length, 1);
      assert.equal(heads[0]["x-api-key"], value);
      // Authorization is not one of its headers now: refused, and nothing
      // of that request leaves.
      assert.notEqual((await get("Authorization", "unnamed")).stdout.toString(), "ok");
      assert.equal(heads.length, 1);
    } finally {
      await sb.destroy();
    }
  } finally {
    server.close();
  }
  // The core checks the headers: one that routes the request, too many.
  for (const headers of [["Host"], Array.from({ length: 17 }, (_, i) => `X-${i}`)]) {
    await assert.rejects(
      Sandbox.builder("node-secret-bad").image(image).network(true).secret("KEY", value, ["127.0.0.1"], { headers }).create(),
      InvalidConfigError,
    );
  }
  assert.throws(() => Sandbox.builder("node-secret-bad").secret("KEY", value, ["a.b"], { headers: "X-Api-Key" }), TypeError);
  await assert.rejects(Sandbox.get("node-secret-bad"), SandboxNotFoundError);
});
