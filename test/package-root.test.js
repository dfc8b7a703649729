'use strict';
// findPackageRoot (ts/package-root.ts): the one walk up to a package's folder, used by the loader (hora's
// build/ and prebuilds/), `hora --version` and the adapters' framework-copy errors. Needs `npm run build:ts`.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnAndCollect } = require('./support/spawn');

const ROOT = path.resolve(__dirname, '..');
const { findPackageRoot } = require(path.join(ROOT, 'dist', 'ts', 'package-root.js'));

t.test('the nearest package.json at or above the start that names the package', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-package-root-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const outer = path.join(dir, 'outer');
  const inner = path.join(outer, 'node_modules', 'inner');
  const broken = path.join(inner, 'broken');
  const deep = path.join(broken, 'lib', 'deep');
  fs.mkdirSync(deep, { recursive: true });
  fs.writeFileSync(path.join(outer, 'package.json'), JSON.stringify({ name: 'outer-pkg' }));
  fs.writeFileSync(path.join(inner, 'package.json'), JSON.stringify({ name: 'inner-pkg' }));
  fs.writeFileSync(path.join(broken, 'package.json'), '{ not json');
  t.equal(findPackageRoot(deep, 'inner-pkg'), inner, 'an unreadable package.json on the way is passed over');
  t.equal(findPackageRoot(deep, 'outer-pkg'), outer, 'a package.json naming another package is passed over');
  t.equal(findPackageRoot(inner, 'inner-pkg'), inner, 'the start folder itself counts');
  t.equal(findPackageRoot(path.relative(process.cwd(), deep), 'inner-pkg'), inner, 'a relative start is resolved');
  t.equal(findPackageRoot(deep, 'hora-no-such-package'), null, 'none up to the root: null');
});

t.test('hora finds itself: the loader, hora --version', async (t) => {
  t.equal(findPackageRoot(path.join(ROOT, 'dist', 'ts', 'cli'), 'hora'), ROOT);
  const { version } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  const r = await spawnAndCollect(process.execPath, [path.join(ROOT, 'dist', 'ts', 'cli', 'main.js'), '--version']);
  t.equal(r.stdout.trim(), version);
  const { packageVersion } = require(path.join(ROOT, 'dist', 'ts', 'cli', 'main.js'));
  t.equal(packageVersion(os.tmpdir()), 'unknown', 'no hora package.json above: unknown');
});
