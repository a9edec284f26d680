// Writes dist/esm/index.mjs: the ES module face of the CommonJS build, so
// that `import` and `require` share one copy of every class (instanceof
// works across both).
const fs = require("node:fs");
const path = require("node:path");
const cjs = require(path.resolve(__dirname, "../dist/cjs/index.js"));
const names = Object.keys(cjs).filter((n) => n !== "default" && n !== "__esModule");
fs.mkdirSync(path.resolve(__dirname, "../dist/esm"), { recursive: true });
const text =
  'import cjs from "../cjs/index.js";\n' +
  names.map((n) => `export const ${n} = cjs.${n};`).join("\n") +
  "\nexport default cjs;\n";
fs.writeFileSync(path.resolve(__dirname, "../dist/esm/index.mjs"), text);
