// Headless Debian Chromium through playwright-core, offline: a fresh profile, every request that is not
// file:// or 127.0.0.1 aborted and recorded.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(join(process.cwd(), 'web', 'package.json'));
const { chromium } = require('playwright-core');

export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export async function withPage(fn, { width = 1280, height = 640 } = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'cyclic-loop-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, args: CHROMIUM_ARGS,
    viewport: { width, height },
  });
  const report = { errors: [], blocked: [] };
  try {
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith('file://') || url.startsWith('data:') || url.startsWith('http://127.0.0.1')) return route.continue();
      report.blocked.push(url);
      return route.abort();
    });
    const page = context.pages()[0] || await context.newPage();
    page.on('pageerror', (e) => report.errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error') report.errors.push(m.text()); });
    return { ...report, ...(await fn(page)) };
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}
