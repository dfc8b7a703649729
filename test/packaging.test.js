'use strict';
// Packaging: the loader's failure report, and the published tarball working
// with no compiler (scripts/pack-test.sh). Needs `npm run build:ts` (dist/).
const t = require('tap');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnAndCollect } = require('./support/spawn');

const root = path.resolve(__dirname, '..');
const loaderJs = path.join(root, 'dist', 'ts', 'loader.js');

// Runs loadNative() in a fresh process so the module cache holds nothing.
async function loadWith(env) {
  const code =
    'try { require(' + JSON.stringify(loaderJs) + ').loadNative(); console.log("loaded"); }' +
    ' catch (e) { console.log(JSON.stringify({ code: e.code, message: e.message })); }';
  const r = await spawnAndCollect(process.execPath, ['-e', code], { env: { ...process.env, ...env } });
  const out = r.stdout.trim();
  return out === 'loaded' ? { loaded: true } : JSON.parse(out);
}

t.test('loader', { skip: !fs.existsSync(loaderJs) && 'dist/ts/loader.js missing: run npm run build:ts' }, async (t) => {
  t.test('names a missing HORA_ADDON path and the fixes', async (t) => {
    const missing = path.join(os.tmpdir(), 'hora-no-such-dir', 'hora.node');
    const err = await loadWith({ HORA_ADDON: missing });
    t.equal(err.code, 'ERR_INTERNAL');
    t.match(err.message, missing + ': not found');
    t.match(err.message, 'npx node-gyp rebuild');
    t.match(err.message, 'npm install-scripts approve hora && npm rebuild hora');
    t.notMatch(err.message, 'build/Release', 'HORA_ADDON is the only path tried');
  });

  t.test('reports the dlopen error of a file that is no addon', async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-loader-'));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const bogus = path.join(dir, 'hora.node');
    fs.writeFileSync(bogus, 'not a shared object\n');
    const err = await loadWith({ HORA_ADDON: bogus });
    t.equal(err.code, 'ERR_INTERNAL');
    t.match(err.message, new RegExp(bogus.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + ': .*(ELF|invalid|too short)', 'i'));
  });
});

t.test('tarball installs and loads without a compiler', async (t) => {
  const r = await spawnAndCollect('bash', [path.join(root, 'scripts', 'pack-test.sh')], { cwd: root, detached: true, timeoutMs: 540e3 });
  const log = r.stdout + r.stderr;
  t.equal(r.code, 0, 'scripts/pack-test.sh exits 0', { log: r.code === 0 ? undefined : log.slice(-6000) });
  t.match(r.stdout, 'pack-test: require/import ok');
});
