'use strict';
// The CUDA build of the addon (scripts/build-cuda.sh; .ci/run builds it into build-cuda/ and sets
// HORA_CUDA_ADDON): it loads where there is no GPU, carries the CUDA runtime inside it instead of needing
// libcudart.so, and runs CPU collectives like the CPU build. Skipped when there is no CUDA build.
const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const { runJob, runProcess, tail, ROOT } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'addon-allreduce-worker.js');
const DEFAULT_ADDON = path.join(ROOT, 'build-cuda', 'Release', 'hora.node');
const addon = process.env.HORA_CUDA_ADDON || (fs.existsSync(DEFAULT_ADDON) ? DEFAULT_ADDON : '');
const skip = addon
  ? false
  : 'no CUDA build: HORA_CUDA_ADDON is unset and build-cuda/Release/hora.node is missing (`bash scripts/build-cuda.sh build-cuda` makes one; needs nvcc)';

t.test('CUDA build of the addon', { skip }, async (t) => {
  const exists = fs.existsSync(addon);
  t.ok(exists, `the CUDA addon exists at ${addon}`);
  if (!exists) return;

  t.ok(fs.readFileSync(addon).includes('_ZN4hora4cuda13reduceSources'), 'it is a CUDA build: it has cuda::reduceSources');

  const ldd = spawnSync('ldd', [addon], { encoding: 'utf8' });
  if (ldd.error) {
    t.comment(`ldd is not available (${ldd.error.code}): dependencies not listed`);
  } else {
    t.equal(ldd.status, 0, 'ldd reads it', { output: ldd.stderr });
    t.notMatch(ldd.stdout, /libcudart/, 'it does not depend on libcudart.so (the runtime is linked statically)', { ldd: ldd.stdout });
    t.notMatch(ldd.stdout, /not found/, 'every library it depends on is found', { ldd: ldd.stdout });
  }

  // Loaded alone, in a process that then lists what it mapped.
  const probe = `
    const addon = require(${JSON.stringify(addon)});
    const maps = require('fs').readFileSync('/proc/self/maps', 'utf8');
    console.log(JSON.stringify({ exports: Object.keys(addon), cudart: /libcudart/.test(maps) }));`;
  const loaded = await runProcess(['-e', probe], process.env);
  t.equal(loaded.code, 0, 'require() loads it on this machine', { stderr: loaded.stderr });
  if (loaded.code === 0) {
    const { exports, cudart } = JSON.parse(loaded.stdout.trim().split('\n').pop());
    t.ok(exports.includes('Communicator'), 'it exports the Communicator', { exports });
    t.notOk(cudart, 'loading it mapped no libcudart.so');
  }

  // Through the public API: a CUDA build that finds no usable GPU says so and why, and refuses device memory.
  const api = `
    const hora = require(${JSON.stringify(ROOT)});
    let error = null;
    try { hora.cuda.DeviceBuffer.alloc('float32', 4); } catch (e) { error = { code: e.code, message: e.message }; }
    console.log(JSON.stringify({ built: hora.cuda.built(), available: hora.cuda.available(), count: hora.cuda.deviceCount(),
      reason: hora.cuda.unavailableReason(), error }));`;
  const seen = await runProcess(['-e', api], { ...process.env, HORA_ADDON: addon });
  t.equal(seen.code, 0, 'hora.cuda answers with the CUDA build loaded', { stderr: seen.stderr });
  if (seen.code === 0) {
    const r = JSON.parse(seen.stdout.trim().split('\n').pop());
    t.equal(r.built, true, 'hora.cuda.built() is true');
    if (r.available) {
      t.comment(`a GPU is usable here (${r.count} device(s)): the no-GPU answers are not checked`);
    } else {
      t.equal(r.count, 0, 'deviceCount() is 0 without a usable GPU');
      t.match(r.reason, /driver|device/, 'unavailableReason() gives the runtime\'s reason', { reason: r.reason });
      t.notMatch(r.reason, /build:cuda/, 'and does not ask for a CUDA build it already is');
      t.equal(r.error && r.error.code, 'ERR_INVALID_ARGUMENT', 'DeviceBuffer.alloc throws a HoraError');
      t.ok(r.error && r.error.message.includes(r.reason), 'quoting that reason', { error: r.error });
    }
  }

  const job = await runJob(2, WORKER, { env: { HORA_ADDON: addon } });
  t.equal(job.code, 0, 'hora run -np 2 with HORA_ADDON set to it exits 0', { output: tail(job) });
  const reports = job.reports.filter(Boolean);
  t.equal(reports.length, 2, 'both ranks reported', { output: tail(job) });
  const count = 1001;
  for (const rep of reports) {
    const where = `rank ${rep.rank}`;
    t.same(rep.addons, [fs.realpathSync(addon)], `${where}: loaded the CUDA build and no other addon`);
    t.same(rep.sum, Array.from({ length: count }, (_, i) => 3 * i), `${where}: float32 sum`);
    t.same(rep.avg, new Array(count).fill(1.5), `${where}: float64 avg`);
    t.same(rep.max, new Array(count).fill(-6), `${where}: int32 max`);
  }
});
