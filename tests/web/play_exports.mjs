// node tests/web/play_exports.mjs OUT_DIR GLB[,GLB...] VAT_JSON STEPS: serve the repository and OUT_DIR on
// 127.0.0.1, open tests/web/player.html in headless Chromium, print its result (positions per played frame) as
// JSON. The GLBs are named relative to OUT_DIR.
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { extname, join, resolve } from 'node:path';
import { withPage } from './browser.mjs';

const [outDir, glb, vat, steps] = process.argv.slice(2);
const roots = { repo: resolve('.'), out: resolve(outDir) };
const types = { '.html': 'text/html', '.js': 'text/javascript', '.json': 'application/json',
                '.glb': 'model/gltf-binary', '.exr': 'image/x-exr', '.png': 'image/png' };
const server = createServer(async (req, res) => {
  const [, mount, ...rest] = decodeURIComponent(new URL(req.url, 'http://x').pathname).split('/');
  const root = roots[mount], path = root && resolve(join(root, ...rest));
  try {
    if (!path || !path.startsWith(root)) throw new Error('outside');
    const body = await readFile(path);
    res.writeHead(200, { 'Content-Type': types[extname(path)] || 'application/octet-stream' }).end(body);
  } catch {
    res.writeHead(404).end();
  }
});
await new Promise((done) => server.listen(0, '127.0.0.1', done));
const base = `http://127.0.0.1:${server.address().port}`;
try {
  const result = await withPage(async (page) => {
    await page.goto(`${base}/repo/tests/web/player.html?glb=${glb}&vat=/out/${vat}&steps=${steps}`);
    await page.waitForFunction(() => window.result !== undefined, null, { timeout: 120000 });
    return page.evaluate(() => window.result);
  });
  console.log(JSON.stringify(result));
} finally {
  server.close();
}
