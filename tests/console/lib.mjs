// Shared by browser.mjs and bench.mjs: Debian's Chromium, headless, driven
// by playwright-core (its own browser download cannot work here), and the
// checks every page gets (axe-core, keyboard reach).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { chromium } from 'playwright-core';

const require = createRequire(import.meta.url);
const AXE = readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

/** The browser: flags that keep Chromium off the network it cannot reach. */
export async function launch() {
  const args = [
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--disable-dev-shm-usage',
  ];
  // Chromium's own sandbox needs an unprivileged user.
  if (process.getuid && process.getuid() === 0) args.push('--no-sandbox');
  return chromium.launch({
    executablePath: process.env.BURROW_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args,
  });
}

/** An environment variable the harness must set. */
export function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (core/cli/tests/console.rs sets it)`);
  return v;
}

/** Logs in through the login page with `token`. */
export async function login(page, base, token) {
  await page.goto(`${base}/ui/`);
  await page.getByLabel(/token/i).fill(token);
  await page.getByRole('button', { name: /log in/i }).click();
  await page.locator('#sandboxes').waitFor();
}

/** axe-core's violations on the page as it is now (evaluated in the page:
 * the console's Content-Security-Policy stays on). */
export async function axe(page) {
  await page.evaluate(AXE);
  return page.evaluate(async () => {
    // eslint-disable-next-line no-undef
    const r = await axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      nodes: v.nodes.map((n) => n.target.join(' ')).slice(0, 5),
    }));
  });
}

/** The visible, enabled controls that Tab never reaches (the terminal's
 * own input excepted: it takes every key, Tab included). */
export async function unreachable(page) {
  const total = await page.evaluate(() => {
    const sel = 'a[href], button, input, select, textarea, summary, [tabindex]';
    const els = [...document.querySelectorAll(sel)].filter(
      (e) =>
        !e.disabled &&
        e.getClientRects().length > 0 &&
        getComputedStyle(e).visibility !== 'hidden' &&
        !e.closest('.xterm') &&
        e.getAttribute('tabindex') !== '-1',
    );
    document.querySelectorAll('[data-kb]').forEach((e) => e.removeAttribute('data-kb'));
    els.forEach((e, i) => e.setAttribute('data-kb', String(i)));
    if (document.activeElement instanceof HTMLElement) document.activeElement.blur();
    return els.length;
  });
  const seen = new Set();
  for (let i = 0; i < total * 2 + 4 && seen.size < total; i++) {
    await page.keyboard.press('Tab');
    const kb = await page.evaluate(() => document.activeElement?.getAttribute('data-kb'));
    if (kb != null) seen.add(kb);
  }
  return page.evaluate(
    (seen) =>
      [...document.querySelectorAll('[data-kb]')]
        .filter((e) => !seen.includes(e.getAttribute('data-kb')))
        .map((e) => e.outerHTML.slice(0, 120)),
    [...seen],
  );
}
