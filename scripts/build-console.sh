#!/usr/bin/env bash
# Builds the web console: console/ (npm ci, then `npm run build`: a type
# check and Vite's build into console/dist, which burrow-server embeds when
# it is compiled, so run this before cargo builds it), and installs the
# browser tests' packages (tests/console: playwright-core, axe-core). What
# is up to date is left alone. Prints console/dist.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "build-console.sh: $*" >&2; }

# The sources' digest: a build of the same sources is not made again.
digest=$(find console -path console/node_modules -prune -o -path console/dist -prune \
  -o -type f -print | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
stamp=console/node_modules/.burrow-console-build
if [ -f console/dist/index.html ] && [ "$(cat "$stamp" 2>/dev/null)" = "$digest" ]; then
  say "console/dist is up to date"
else
  say "npm ci (console/)"
  (cd console && npm ci --no-audit --no-fund --loglevel=error >&2)
  say "npm run build (console/)"
  (cd console && npm run --silent build >&2)
  echo "$digest" >"$stamp"
fi

if [ ! -f tests/console/node_modules/.package-lock.json ] ||
  [ tests/console/package-lock.json -nt tests/console/node_modules/.package-lock.json ]; then
  say "npm ci (tests/console/)"
  (cd tests/console && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
echo "$PWD/console/dist"
