'use strict';
// The native core's own unit tests (native/test): built with native/test/build.sh, then run one by one.
// Each binary prints TAP (native/test/tap.h): an "ok" line per passing check and a "not ok" line per failing
// one, and exits non-zero when any failed.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { spawnAndCollect } = require('./support/spawn');

const ROOT = path.join(__dirname, '..');

// The fewest "ok" lines a complete run prints: fewer means a binary stopped early or lost checks.
const TESTS = [
  { name: 'reduce_test', minOk: 600, timeoutMs: 120000 },
  { name: 'algorithms_test', minOk: 190, timeoutMs: 300000 },
  { name: 'sha256_test', minOk: 18, timeoutMs: 60000 },
  { name: 'hash_test', minOk: 3, timeoutMs: 60000 },
  { name: 'crc32c_test', minOk: 16, timeoutMs: 60000 },
  { name: 'connect_test', minOk: 36, timeoutMs: 120000 },
  { name: 'p2p_test', minOk: 39, timeoutMs: 120000 },
  { name: 'tcp_pair_test', minOk: 8, timeoutMs: 60000 },
  { name: 'shm_pair_test', minOk: 5, timeoutMs: 60000 },
  { name: 'single_copy_test', minOk: 8, timeoutMs: 60000 },
  { name: 'takeover_test', minOk: 43, timeoutMs: 120000 },
  { name: 'liveness_test', minOk: 14, timeoutMs: 60000 },
  { name: 'progress_test', minOk: 21, timeoutMs: 60000 },
  { name: 'cuda_elements_test', minOk: 44, timeoutMs: 60000 },
];

// Resolves {code, signal, output, ...} with stdout and stderr interleaved as they arrived.
function run(cmd, args, { timeoutMs, env = {} }) {
  return spawnAndCollect(cmd, args, { cwd: ROOT, env: { ...process.env, ...env }, timeoutMs });
}

const cxx = process.env.CXX || 'g++';
const probe = spawnSync(cxx, ['--version'], { encoding: 'utf8' });
const skip = probe.error || probe.status !== 0
  ? `${cxx} is not available (${probe.error ? probe.error.code : `exit ${probe.status}`}); set CXX to a C++17 compiler`
  : false;

t.test('native tests', { skip }, async (t) => {
  const outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-native-tests-'));
  t.teardown(() => fs.rmSync(outDir, { recursive: true, force: true }));
  const build = await run('bash', ['native/test/build.sh', outDir], { timeoutMs: 300000 });
  t.equal(build.code, 0, 'native/test/build.sh builds the tests', { output: build.output.slice(-4000) });
  if (build.code !== 0) return;

  for (const { name, minOk, timeoutMs } of TESTS) {
    await t.test(name, async (t) => {
      const started = Date.now();
      const r = await run(path.join(outDir, name), [], { timeoutMs });
      const lines = r.output.split('\n');
      const failing = lines.filter((l) => /^not ok\b/.test(l));
      const okCount = lines.filter((l) => /^ok \d+/.test(l)).length;
      t.comment(`${name}: ${okCount} ok, ${failing.length} failing, ${((Date.now() - started) / 1000).toFixed(1)} s`);
      // As comments: a raw "not ok" line on stdout would be parsed as this file's own TAP.
      const shown = failing.length > 0 ? failing : r.code !== 0 ? r.output.slice(-4000).split('\n') : [];
      for (const line of shown) t.comment(`${name}: ${line}`);
      t.equal(r.signal, null, `${name} was not killed`);
      t.equal(r.code, 0, `${name} exits 0`);
      t.same(failing, [], `${name} reports no failing check`);
      t.ok(okCount >= minOk, `${name} reports at least ${minOk} passing checks (got ${okCount})`);
    });
  }
});
