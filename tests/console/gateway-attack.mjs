// The review's sandbox-page attacks in a real browser (issue 56, class
// 1): core/cli/tests/attacks/gateway_origin.rs starts `burrow serve` with
// a gateway listener and a sandbox target serving attack.html, a page
// that tries to act as the console's viewer. Prints one JSON report on its
// last line: what the page could run and what its requests got. The Rust
// side checks the server's side (no sandbox the page tried to make).
import { launch, need, login } from './lib.mjs';

const base = need('BURROW_CONSOLE_URL');
const token = need('BURROW_CONSOLE_TOKEN');
const id = need('BURROW_ATTACK_TARGET');

const report = {};
const browser = await launch();
try {
  // 1. The console's viewer opens the sandbox's page on the API's origin.
  const viewer = await browser.newContext();
  const page = await viewer.newPage();
  await login(page, base, token);
  const attack = `/gw/${id}/attack.html?api=${encodeURIComponent(base)}`;
  let res = await page.goto(`${base}${attack}`);
  await page.waitForTimeout(1500);
  report.api_cookie = { status: res.status(), title: await page.title() };

  // 2. A program-shaped call (a bearer token on every request of the
  // context, so the page could act with it) rendered by a browser: the
  // answer is inert.
  const program = await browser.newContext({
    extraHTTPHeaders: { Authorization: `Bearer ${token}` },
  });
  const p2 = await program.newPage();
  res = await p2.goto(`${base}${attack}`);
  await p2.waitForTimeout(1500);
  report.api_bearer = {
    status: res.status(),
    csp: res.headers()['content-security-policy'] || null,
    title: await p2.title(),
  };

  // 3. The target's own origin, through a preview link made on the
  // console's targets page, in the browser that is logged in to the
  // console: the page runs, and gets nothing of the console.
  await page.goto(`${base}/ui/targets`);
  await page.getByRole('button', { name: `Make a preview link of ${id}` }).click();
  const link = page.locator(`#targets tr[data-target-id="${id}"] a[data-preview-id]`);
  await link.waitFor();
  const preview = await link.getAttribute('href');
  report.preview_link = preview;
  const p3 = await viewer.newPage();
  res = await p3.goto(preview);
  report.preview = { status: res.status(), url: p3.url(), body: (await p3.content()).slice(0, 200) };
  const origin = new URL(p3.url()).origin;
  await p3.goto(`${origin}/attack.html?api=${encodeURIComponent(base)}`);
  await p3.waitForFunction(() => document.title.startsWith('ran:'), null, { timeout: 20000 });
  report.own = JSON.parse((await p3.title()).slice(4));
  report.own.origin = origin;
  report.ok = true;
} catch (e) {
  report.failed = String(e?.stack || e);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
