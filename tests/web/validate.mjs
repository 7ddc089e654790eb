// node tests/web/validate.mjs FILE.glb ...: the Khronos glTF validator's report of each file, as JSON.
import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(join(process.cwd(), 'web', 'package.json'));
const validator = require('gltf-validator');
const reports = [];
for (const path of process.argv.slice(2)) {
  const report = await validator.validateBytes(new Uint8Array(await readFile(path)), { uri: basename(path) });
  reports.push({ path, issues: report.issues, info: report.info });
}
console.log(JSON.stringify(reports));
