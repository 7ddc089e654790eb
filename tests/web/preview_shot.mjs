// node tests/web/preview_shot.mjs PAGE.html OUT.png FRAME: open the preview page offline, hold FRAME,
// screenshot it; prints JSON (errors, blocked requests, frames rendered, loop positions at FRAME).
import { pathToFileURL } from 'node:url';
import { withPage } from './browser.mjs';

const [page_path, out, frame] = process.argv.slice(2);
const result = await withPage(async (page) => {
  await page.goto(pathToFileURL(page_path).href + `?frame=${frame}`);
  await page.waitForFunction(() => window.cyclicLoop && window.cyclicLoop.rendered > 2, null, { timeout: 60000 });
  await page.screenshot({ path: out });
  return page.evaluate(() => ({ rendered: window.cyclicLoop.rendered, frames: window.cyclicLoop.frames,
    loop: window.cyclicLoop.positions('loop'), cache: window.cyclicLoop.positions('cache') }));
});
console.log(JSON.stringify(result));
