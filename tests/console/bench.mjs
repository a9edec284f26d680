// The sandboxes page with many sandboxes (core/cli/benches/console.rs makes
// them): from navigation start to every row in the table, in headless
// Chromium, ROUNDS times; the anchor, in the same page and round: the
// list's own fetch and JSON parse (what any client of the API pays).
// Prints one JSON line: {"rows", "render_ms": [...], "fetch_ms": [...]}.
import { launch, need, login } from './lib.mjs';

const base = need('BURROW_CONSOLE_URL');
const token = need('BURROW_CONSOLE_TOKEN');
const rows = Number(need('BURROW_CONSOLE_ROWS'));
const rounds = Number(process.env.BURROW_CONSOLE_ROUNDS || 5);

const browser = await launch();
try {
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  await login(page, base, token);
  const out = { rows, render_ms: [], fetch_ms: [] };
  // One warm-up round: the app's files in the cache, as for a user's
  // second visit.
  for (let round = 0; round <= rounds; round++) {
    await page.goto(`${base}/ui/`, { waitUntil: 'commit' });
    await page.waitForFunction(
      (n) => document.querySelectorAll('#sandboxes tr[data-sandbox-id]').length >= n,
      rows,
      { polling: 'raf', timeout: 60_000 },
    );
    const render = await page.evaluate(() => performance.now());
    const fetched = await page.evaluate(async () => {
      const t = performance.now();
      await (await fetch('/v1/sandboxes')).json();
      return performance.now() - t;
    });
    if (round > 0) {
      out.render_ms.push(render);
      out.fetch_ms.push(fetched);
    }
  }
  console.log(JSON.stringify(out));
} finally {
  await browser.close();
}
