// Puts the native module (bindings/node, which carries the supervisor: see
// bindings/core/build.rs) at burrow.node before `npm pack` packs it (the
// package's prepack script):
// - $BURROW_NODE_MODULE, when set: a libburrow_node.so already built
//   (scripts/node-sdk.sh passes the workspace's);
// - else a release build from the checkout this package sits in
//   (`cargo build --release -p burrow-node`), stripped.
const { execFileSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");

const pkg = path.resolve(__dirname, "..");
const dest = path.join(pkg, "burrow.node");
let from = process.env.BURROW_NODE_MODULE;
if (!from) {
  const repo = path.resolve(pkg, "..");
  const manifest = path.join(repo, "bindings/node/Cargo.toml");
  if (!fs.existsSync(manifest)) {
    console.error(`${manifest} is missing: pack from a burrow checkout, or set BURROW_NODE_MODULE to a built libburrow_node.so`);
    process.exit(1);
  }
  const target = process.env.CARGO_TARGET_DIR || path.join(repo, "target");
  console.error("==> cargo build --release -p burrow-node (the native module, with the supervisor; minutes on a cold checkout)");
  execFileSync("cargo", ["build", "--release", "-p", "burrow-node", "--manifest-path", path.join(repo, "Cargo.toml")], {
    stdio: "inherit",
    env: { ...process.env, CARGO_TARGET_DIR: target },
  });
  from = path.join(target, "release/libburrow_node.so");
}
fs.copyFileSync(from, dest);
if (!process.env.BURROW_NODE_MODULE) {
  // The release profile keeps line tables; the package needs none.
  execFileSync("strip", ["--strip-debug", dest], { stdio: "inherit" });
}
