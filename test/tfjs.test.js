'use strict';
// hora/tfjs, proven against one process: N ranks training their shards of every batch through
// DistributedOptimizer end where one plain tf.train optimizer on the whole batch ends (test/workers/
// tfjs-worker.js trains; this file asserts), with every rank bit-identical; fp16/bf16 within a stated
// tolerance; model.fit with the callbacks; and a rank that throws takes the whole job down quickly.
const t = require('tap');
const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const { runJob, runProcess, tail, NODE } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'tfjs-worker.js');

/** Tolerances, as documented in docs/tfjs.md. Exact runs: per element |a-b| <= 1e-5 x max(|b|, 1e-3). */
const EXACT_REL = 1e-5;
/** Compressed runs: max |a-b| / max |b| over all weights after 12 steps. */
const COMPRESSED_REL = { fp16: 5e-4, bf16: 5e-3 };

async function reference(t, backend) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-tfjs-ref-'));
  const env = { ...process.env, HORA_TEST_RESULT_DIR: dir, TFJS_BACKEND: backend };
  for (const k of Object.keys(env)) if (k.startsWith('HORA_') && k !== 'HORA_TEST_RESULT_DIR') delete env[k];
  const run = await runProcess([WORKER, 'reference'], env);
  t.equal(run.code, 0, 'the 1-process reference ran', { stderr: run.stderr.slice(-2000) });
  const rep = JSON.parse(fs.readFileSync(path.join(dir, 'rank-0.json'), 'utf8'));
  fs.rmSync(dir, { recursive: true, force: true });
  t.equal(rep.backend, backend, `the reference ran on the ${backend} backend`);
  return rep.runs;
}

function worstElementRel(a, b) {
  let worst = 0;
  a.forEach((v, i) => { worst = Math.max(worst, Math.abs(v - b[i]) / Math.max(Math.abs(b[i]), 1e-3)); });
  return worst;
}

function normRel(a, b) {
  let d = 0, m = 0;
  a.forEach((v, i) => { d = Math.max(d, Math.abs(v - b[i])); m = Math.max(m, Math.abs(b[i])); });
  return d / m;
}

// The adapter reads tensors through tfjs's public API only, so it must hold on every backend.
for (const [backend, sizes] of [['cpu', [2, 3]], ['wasm', [2]]]) t.test(`${backend} backend: N ranks on B/N each = 1 process on B (SGD, Adam; trainOnBatch, minimize; k=2; fp16, bf16)`, async (t) => {
  const ref = await reference(t, backend);
  for (const np of sizes) {
    const job = await runJob(np, WORKER, { args: ['equiv'], env: { TFJS_BACKEND: backend }, timeoutMs: 60000 });
    t.equal(job.code, 0, `p=${np}: hora run exits 0`, { output: tail(job) });
    if (!job.reports.every(Boolean)) { t.fail(`p=${np}: every rank reported`, { output: tail(job) }); continue; }
    t.ok(job.reports.every((r) => r.backend === backend), `p=${np}: every rank trained on the ${backend} backend`);
    const runs = job.reports[0].runs;
    t.ok(Object.keys(runs).length >= 9, `p=${np}: all runs reported`);
    for (const [name, run] of Object.entries(runs)) {
      const [base, variant] = name.split(' ');
      const expected = ref[base].values;
      for (const rep of job.reports.slice(1)) {
        t.equal(rep.runs[name].base64, run.base64, `p=${np} ${name}: rank ${rep.rank} bit-identical to rank 0`);
      }
      if (variant === 'fp16' || variant === 'bf16') {
        const rel = normRel(run.values, expected);
        t.ok(rel <= COMPRESSED_REL[variant], `p=${np} ${name}: within ${COMPRESSED_REL[variant]} of the 1-process run (got ${rel.toExponential(2)})`);
        t.ok(rel > 0, `p=${np} ${name}: compression did round something`);
      } else {
        const rel = worstElementRel(run.values, expected);
        t.ok(rel <= EXACT_REL, `p=${np} ${name}: every weight within ${EXACT_REL} relative of the 1-process run (got ${rel.toExponential(2)})`);
      }
    }
    // Guards the comparison itself: SGD and Adam end far apart, so agreeing within 1e-5 says something.
    t.ok(normRel(ref['sgd/trainOnBatch'].values, ref['adam/minimize'].values) > 1e-2, 'the runs moved the weights');
  }
});

t.test('model.fit and fitDataset with BroadcastWeightsCallback, MetricAverageCallback, LearningRateWarmupCallback', async (t) => {
  const job = await runJob(2, WORKER, { args: ['fit'], timeoutMs: 60000 });
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  const [a, b] = job.reports;
  if (!a || !b) return t.fail('both ranks reported', { output: tail(job) });
  t.equal(b.afterFit.base64, a.afterFit.base64, 'ranks that started from different weights end fit identical');
  t.equal(b.afterFitDataset.base64, a.afterFitDataset.base64, 'and identical after fitDataset');
  t.same(b.loss, a.loss, 'epoch losses are averaged over ranks (the same on both)');
  t.same(b.dsLoss, a.dsLoss, 'fitDataset epoch losses too');
  t.ok(a.loss[2] < a.loss[0], 'the loss went down');
  t.equal(a.lrs[0], 0.01, 'warmup starts at the single-process rate');
  t.ok(Math.abs(a.lrs[12] - 0.02) < 1e-12, 'and reaches size x rate after warmupEpochs (2 epochs of 6 batches)');
  t.ok(a.lrs.slice(0, 13).every((lr, i) => i === 0 || lr > a.lrs[i - 1]), 'climbing linearly by batch');
  t.same(a.saved, { className: 'Adam', optimizerWeights: 9 }, 'model.save records the inner optimizer and its weights');
  t.equal(a.iterations, 30, 'iterations delegate to the inner optimizer (3 x 6 + 2 x 6 steps)');
});

for (const [np, throwRank] of [[3, 1], [2, 0]]) {
  t.test(`p=${np}: rank ${throwRank} throws inside its training loop -> every rank fails, no hang`, async (t) => {
    const job = await runJob(np, WORKER, { args: ['throw'], env: { THROW_RANK: String(throwRank), HORA_TIMEOUT_S: '10' }, timeoutMs: 40000 });
    t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
    t.not(job.signal, 'SIGKILL', 'and was not killed by the test timeout');
    t.ok(job.seconds < 20, `within a bounded time (${job.seconds.toFixed(1)} s)`);
    t.match(job.stderr + job.stdout, `rank ${throwRank} failed on purpose`, 'the thrown error is shown');
    job.reports.forEach((rep, r) => {
      t.ok(rep && rep.error, `rank ${r} failed with an error`, { output: tail(job) });
      if (rep && r !== throwRank) t.equal(rep.error.code, 'ERR_PEER_LOST', `rank ${r}: ERR_PEER_LOST from applyGradients`);
    });
  });
}
