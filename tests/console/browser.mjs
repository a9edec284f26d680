// The web console in a real browser against a real `burrow serve`
// (core/cli/tests/console.rs starts it, makes the sandboxes and tokens, and
// checks the server's side of each step afterwards). Prints one JSON report
// on its last line; exits 1 at the first failed step, with a screenshot of
// the page as it was.
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { launch, need, login, axe, unreachable } from './lib.mjs';

const base = need('BURROW_CONSOLE_URL');
const token = need('BURROW_CONSOLE_TOKEN');
const readOnly = need('BURROW_CONSOLE_READONLY_TOKEN');
const id = need('BURROW_CONSOLE_SANDBOX');
const name = need('BURROW_CONSOLE_SANDBOX_NAME');
const logLine = need('BURROW_CONSOLE_LOG_LINE');
const shots = need('BURROW_CONSOLE_SHOTS');
mkdirSync(shots, { recursive: true });

const report = { steps: [], axe: {}, unreachable: {}, shots: [] };
let page;
/** Fetches of the whole list (`GET /v1/sandboxes`) the page made. */
let listFetches = 0;

async function step(title, fn) {
  const t0 = Date.now();
  try {
    await fn();
    report.steps.push({ step: title, ms: Date.now() - t0 });
  } catch (e) {
    report.failed = { step: title, error: String(e?.stack || e) };
    if (page) await shot('failure').catch(() => {});
    throw e;
  }
}

async function shot(file) {
  const path = join(shots, `${file}.png`);
  await page.screenshot({ path, fullPage: true });
  report.shots.push(path);
}

/** axe and keyboard reach of the page now, kept in the report by `key`
 * (the harness asserts there are none). */
async function audit(key) {
  report.axe[key] = await axe(page);
  report.unreachable[key] = await unreachable(page);
}

const row = () => page.locator(`#sandboxes tr[data-sandbox-id="${id}"]`);
const statusIn = (scope, status, timeout = 60_000) =>
  scope.locator('[data-field="status"]').filter({ hasText: new RegExp(`^${status}$`) }).waitFor({ timeout });

/** Clicks the row's (or the page's) action button, then the dialog's
 * confirmation. */
async function act(scope, action) {
  await scope.getByRole('button', { name: `${action} ${name}`, exact: true }).click();
  const dialog = page.locator('dialog[open]');
  await dialog.getByRole('button', { name: action, exact: true }).click();
}

const browser = await launch();
try {
  const context = await browser.newContext({ acceptDownloads: true, viewport: { width: 1280, height: 900 } });
  page = await context.newPage();
  page.on('request', (r) => {
    if (new URL(r.url()).pathname === '/v1/sandboxes') listFetches++;
  });

  await step('the login page', async () => {
    await page.goto(`${base}/ui/`);
    await page.getByLabel(/token/i).waitFor();
    await audit('login');
    await shot('login');
  });

  await step('a wrong token is refused on the page', async () => {
    await page.getByLabel(/token/i).fill('bw_not_a_token');
    await page.getByRole('button', { name: /log in/i }).click();
    await page.locator('[role="alert"][data-error-code="unauthorized"]').waitFor();
  });

  await step('log in and list', async () => {
    await login(page, base, token);
    await row().waitFor();
    await statusIn(row(), 'running');
    await audit('sandboxes');
    await shot('sandboxes');
  });

  await step('a change made elsewhere shows up live (the event stream)', async () => {
    // Through the API, not the page: only the page's event stream can
    // tell it.
    const call = async (op, body) => {
      const r = await fetch(`${base}/v1/sandboxes/${id}/${op}`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
      });
      if (!r.ok) throw new Error(`${op}: ${r.status} ${await r.text()}`);
    };
    // The page also refetches the whole list every 15 s: a round during
    // which it did proves nothing, and is made again.
    for (let round = 1; ; round++) {
      const before = listFetches;
      await call('stop', { grace_ms: 1000 });
      await statusIn(row(), 'stopped', 10_000);
      await call('start', {});
      await statusIn(row(), 'running', 10_000);
      if (listFetches === before) break;
      if (round === 3) throw new Error('the list was refetched during every round');
    }
  });

  await step('stop from the table, the status changes', async () => {
    await act(row(), 'Stop');
    await statusIn(row(), 'stopped');
  });

  await step('start from the table', async () => {
    await act(row(), 'Start');
    await statusIn(row(), 'running');
  });

  await step('the sandbox page', async () => {
    await row().getByRole('link', { name, exact: true }).click();
    await page.waitForURL(`**/ui/sandboxes/${id}`);
    await statusIn(page, 'running');
    await page.getByRole('heading', { level: 1 }).waitFor();
  });

  await step('follow its logs, filter by source', async () => {
    const logs = page.locator('#logs');
    await logs.filter({ hasText: logLine }).waitFor({ timeout: 30_000 });
    await page.getByLabel('stdout', { exact: true }).uncheck();
    await page.waitForFunction(
      (line) => !document.querySelector('#logs').innerText.includes(line),
      logLine,
      { timeout: 10_000 },
    );
    await page.getByLabel('stdout', { exact: true }).check();
    await logs.filter({ hasText: logLine }).waitFor({ timeout: 30_000 });
  });

  await step('a terminal: echo hi', async () => {
    await page.getByRole('button', { name: /open terminal/i }).click();
    await page.waitForFunction(() => window.__burrowTerm !== undefined);
    await page.locator('#terminal').click();
    // The prompt first: keys typed before the shell reads are echoed twice.
    await page.waitForFunction(() => {
      const b = window.__burrowTerm.buffer.active;
      for (let i = 0; i < b.length; i++) if (b.getLine(i)?.translateToString(true).trim()) return true;
      return false;
    });
    await page.keyboard.type('echo hi');
    await page.keyboard.press('Enter');
    await page.waitForFunction(
      () => {
        const b = window.__burrowTerm.buffer.active;
        for (let i = 0; i < b.length; i++) {
          if (b.getLine(i)?.translateToString(true).trim() === 'hi') return true;
        }
        return false;
      },
      undefined,
      { timeout: 20_000 },
    );
    report.terminal = 'hi';
  });

  await step('upload a file, list it, download it', async () => {
    const path = page.getByLabel('Path', { exact: true });
    await path.fill('/tmp');
    await path.press('Enter');
    const content = `uploaded from the console ${Date.now()}\n`;
    await page.getByLabel('Upload file').setInputFiles({
      name: 'console-upload.txt',
      mimeType: 'text/plain',
      buffer: Buffer.from(content),
    });
    await page.getByRole('button', { name: 'Upload', exact: true }).click();
    const file = page.locator('#files tr[data-file-name="console-upload.txt"]');
    await file.waitFor();
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      file.getByRole('link').first().click(),
    ]);
    const saved = await download.path();
    if (readFileSync(saved, 'utf8') !== content) throw new Error('the download differs from the upload');
    report.uploaded = content;
    await audit('sandbox');
    await shot('sandbox');
  });

  for (const [link, key] of [
    ['Gateway targets', 'targets'],
    ['Pools', 'pools'],
    ['Snapshots', 'snapshots'],
  ]) {
    await step(`the ${key} page`, async () => {
      await page.getByRole('navigation').getByRole('link', { name: link }).click();
      await page.waitForURL(`**/ui/${key}`);
      await page.getByRole('heading', { level: 1 }).waitFor();
      if (key === 'targets') {
        // The sandbox's target, with its cold start plotted.
        await page.locator(`#targets tr[data-target-id="${id}"] svg`).first().waitFor();
      }
      await page.waitForLoadState('networkidle');
      await audit(key);
      await shot(key);
    });
  }

  await step('log out', async () => {
    await page.getByRole('button', { name: /log out/i }).click();
    await page.getByLabel(/token/i).waitFor();
    const status = await page.evaluate(async () => (await fetch('/v1/sandboxes')).status);
    if (status !== 401) throw new Error(`after logout /v1/sandboxes answered ${status}`);
  });

  await step('a read-only login is refused an action', async () => {
    await login(page, base, readOnly);
    await row().waitFor();
    await act(row(), 'Stop');
    await page.locator('[role="alert"][data-error-code="forbidden"]').waitFor();
    await statusIn(row(), 'running', 5_000);
    await shot('read-only-refused');
  });
} finally {
  await browser.close();
  console.log(JSON.stringify(report));
}
