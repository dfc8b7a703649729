'use strict';
// hora/tfjs with the allreduce started from the backward pass (DistributedOptimizer's overlap): bit-identical
// to overlap: false and within 1e-5 of one process for Dense, Conv2D, BatchNormalization, Embedding, LSTM,
// a layer used twice and a frozen layer, on the cpu and wasm backends, with buckets smaller than one
// gradient and larger than all; ranks whose losses use different variables fail with ERR_MISMATCH naming
// them; a rank that throws inside its backward pass takes every rank down, quickly.
// test/workers/tfjs-overlap-worker.js trains; this file asserts.
const t = require('tap');
const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const { runJob, runProcess, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'tfjs-overlap-worker.js');
/** As in tfjs.test.js and docs/tfjs.md: per element |a-b| <= 1e-5 x max(|b|, 1e-3). */
const EXACT_REL = 1e-5;
const MODELS = ['dense', 'conv2d', 'batchnorm', 'embedding', 'lstm', 'shared', 'frozen'];

async function reference(t, backend) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-overlap-ref-'));
  const env = { ...process.env, HORA_TEST_RESULT_DIR: dir, TFJS_BACKEND: backend };
  for (const k of Object.keys(env)) if (k.startsWith('HORA_') && k !== 'HORA_TEST_RESULT_DIR') delete env[k];
  const run = await runProcess([WORKER, 'reference'], env, 120000);
  t.equal(run.code, 0, 'the 1-process reference ran', { stderr: run.stderr.slice(-2000) });
  const rep = JSON.parse(fs.readFileSync(path.join(dir, 'rank-0.json'), 'utf8'));
  fs.rmSync(dir, { recursive: true, force: true });
  return rep.runs;
}

function worstElementRel(a, b) {
  let worst = 0;
  a.forEach((v, i) => { worst = Math.max(worst, Math.abs(v - b[i]) / Math.max(Math.abs(b[i]), 1e-3)); });
  return worst;
}

for (const backend of ['cpu', 'wasm']) {
  t.test(`${backend} backend, 2 ranks: overlap true = overlap false bit for bit, = 1 process within ${EXACT_REL}`, async (t) => {
    const ref = await reference(t, backend);
    const job = await runJob(2, WORKER, { args: ['equiv'], env: { TFJS_BACKEND: backend }, timeoutMs: 240000 });
    t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
    const [a, b] = job.reports;
    if (!a || !b || !a.runs || !b.runs) return t.fail('both ranks reported', { output: tail(job) });
    t.equal(a.backend, backend, `ran on the ${backend} backend`);
    for (const name of Object.keys(a.runs)) {
      t.equal(b.runs[name].base64, a.runs[name].base64, `${name}: rank 1 bit-identical to rank 0`);
    }
    // tfjs-backend-wasm lacks the gradient kernels of Conv2D (Conv2DBackpropFilter) and Embedding
    // (UnsortedSegmentSum): those two train on cpu only.
    for (const model of MODELS.filter((m) => backend === 'cpu' || !['conv2d', 'embedding'].includes(m))) {
      const off = a.runs[`${model} overlap=false`];
      for (const variant of ['', ' bucket=tiny', ' bucket=huge']) {
        const on = a.runs[`${model} overlap=true${variant}`];
        t.equal(on.base64, off.base64, `${model}${variant}: overlap true gives the weights of overlap false, bit for bit`);
        t.ok(on.stats.backwardMs > 0, `${model}${variant}: stats count the backward pass`);
      }
      if (model !== 'batchnorm') {
        const rel = worstElementRel(off.values, ref[model].values);
        t.ok(rel <= EXACT_REL, `${model}: within ${EXACT_REL} of one process on the whole batch (got ${rel.toExponential(2)})`);
      }
      t.equal(off.stats.hiddenMs, 0, `${model}: nothing counted as hidden without overlap`);
      // With a bucket per gradient, the top layer's bucket goes out while lower layers are still computed.
      t.ok(a.runs[`${model} overlap=true bucket=tiny`].stats.hiddenMs > 0, `${model}: with small buckets, communication starts inside the backward pass`);
    }
    t.ok(worstElementRel(a.runs['frozen overlap=true'].values, ref.frozen.values) <= EXACT_REL, 'the frozen layer stays as one process leaves it');
    for (const variant of ['adam k=2', 'fp16']) {
      t.equal(a.runs[`dense ${variant} overlap=true`].base64, a.runs[`dense ${variant} overlap=false`].base64, `${variant}: overlap true = false, bit for bit`);
    }
    const k2 = worstElementRel(a.runs['dense adam k=2 overlap=true'].values, ref['dense adam'].values);
    t.ok(k2 <= EXACT_REL, `adam with backwardPassesPerStep 2 = one process on the whole batch (got ${k2.toExponential(2)})`);
  });
}

for (const step of [0, 2]) {
  t.test(`rank 1's loss leaves a branch out from step ${step}: ERR_MISMATCH on every rank naming its variables, nothing applied`, async (t) => {
    const job = await runJob(2, WORKER, { args: ['mismatch'], env: { MISMATCH_STEP: String(step), HORA_TIMEOUT_S: '20' }, timeoutMs: 60000 });
    t.not(job.signal, 'SIGKILL', 'no hang', { output: tail(job) });
    job.reports.forEach((rep, r) => {
      if (!rep || !rep.error) return t.fail(`rank ${r} failed`, { output: tail(job), rep });
      t.equal(rep.step, step, `rank ${r}: failed at step ${step}`);
      t.equal(rep.error.code, 'ERR_MISMATCH', `rank ${r}: ERR_MISMATCH`);
      t.ok(rep.error.isHoraError, `rank ${r}: a HoraError`);
      t.match(rep.error.message, /rank 1 has no gradient for branch_b\/kernel, branch_b\/bias|rank 1 has no gradient for branch_b\/bias, branch_b\/kernel/, `rank ${r}: the message names the variables`);
      t.ok(rep.unchanged, `rank ${r}: the failing step applied nothing`);
    });
  });
}

t.test('a rank that throws in the middle of its backward pass: every rank fails, no hang', async (t) => {
  const job = await runJob(2, WORKER, { args: ['throw'], env: { THROW_RANK: '1', HORA_TIMEOUT_S: '30' }, timeoutMs: 60000 });
  t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
  t.not(job.signal, 'SIGKILL', 'and was not killed by the test timeout');
  t.ok(job.seconds < 25, `within a bounded time, well under HORA_TIMEOUT_S (${job.seconds.toFixed(1)} s)`);
  t.match(job.stderr + job.stdout, 'rank 1 failed on purpose in its backward pass', 'the thrown error is shown');
  job.reports.forEach((rep, r) => t.ok(rep && rep.error, `rank ${r} failed with an error`, { output: tail(job), rep }));
  const other = job.reports[0];
  if (other && other.error) {
    t.ok(['ERR_INVALID_ARGUMENT', 'ERR_PEER_LOST'].includes(other.error.code), `rank 0: ${other.error.code}, from rank 1 telling it or leaving`);
  }
});

t.test("the timeline shows each bucket's allreduce starting inside the backward pass", async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-overlap-timeline-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'trace.json');
  const job = await runJob(2, WORKER, { args: ['timeline'], env: { HORA_TIMELINE: file }, timeoutMs: 60000 });
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  const parsed = JSON.parse(fs.readFileSync(file, 'utf8'));
  const events = Array.isArray(parsed) ? parsed : parsed.traceEvents;
  for (const rank of [0, 1]) {
    const mine = events.filter((e) => e.pid === rank && e.ph === 'X');
    const backward = mine.filter((e) => e.cat === 'training' && e.name === 'backward');
    t.equal(backward.length, 3, `rank ${rank}: one backward slice per step`);
    t.ok(events.some((e) => e.pid === rank && e.ph === 'M' && e.name === 'thread_name' && e.args.name === 'training'), `rank ${rank}: on a lane named training`);
    const buckets = mine.filter((e) => e.cat === 'collective' && /^allreduce tfjs bucket \d+\/\d+/.test(e.name));
    // The first step learns the buckets and sends one after the pass; the later ones send the top layer's
    // buckets while the pass still runs.
    const inside = buckets.filter((b) => backward.some((w) => b.ts >= w.ts && b.ts <= w.ts + w.dur));
    t.ok(inside.length >= 2, `rank ${rank}: bucket allreduces start inside backward slices (${inside.length} of ${buckets.length})`);
    t.ok(backward.slice(1).every((w) => typeof w.args.bucketsSent === 'number' && w.args.bucketsSent > 0), `rank ${rank}: the slices count the buckets sent during the pass`);
  }
});
