'use strict';
// hora/onnxruntime: the public-API mode ('average-parameters') keeps every rank bit-identical and trains; exact
// mode with plain SGD matches one process element by element. ORT's web TrainingSession accepts only the
// artifacts' AdamW optimizer model, so 'average-parameters' (exact for SGD only) is not compared with one process.
const t = require('tap');
const path = require('node:path');
const { runJob, runProcess, tail } = require('./support/hora-job');
const { artifactSets } = require('./support/ort-artifacts');

const WORKER = path.join(__dirname, 'workers', 'onnxruntime-worker.js');

const floats = (b64) => new Float32Array(Buffer.from(b64, 'base64').buffer.slice(0));

/** Largest |a - b| / max(|b|, 1e-3) (the floor keeps near-zero parameters from dominating). */
function maxRelativeDifference(a, b) {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]) / Math.max(Math.abs(b[i]), 1e-3));
  return worst;
}

async function solo(scenario, env) {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(HORA_|OMPI_|PMI_|SLURM_)/.test(k)));
  const r = await runProcess([WORKER, scenario], { ...clean, ...env });
  if (r.code !== 0) throw new Error(`solo ${scenario} failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

for (const set of artifactSets()) {
  const skip = set.missing ? `${set.name}: ${set.missing}` : false;
  t.test(`${set.name}: average-parameters mode (ORT's own AdamW step, then parameters averaged): ranks bit-identical, loss goes down`, { skip }, async (t) => {
    const job = await runJob(2, WORKER, { args: ['average'], env: { ...set.env, ORT_FIXED_BATCH: '1' } });
    t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
    if (!job.reports.every(Boolean)) return t.fail('every rank reported', { output: tail(job) });
    const start = floats(job.reports[0].params);
    for (const rep of job.reports) {
      t.equal(rep.hash, job.reports[0].hash, `rank ${rep.rank}'s parameters are bit-identical to rank 0's`);
      t.equal(rep.steps, 10, `rank ${rep.rank}: 10 optimizer steps`);
      const [first, last] = [rep.losses[0], rep.losses[rep.losses.length - 1]];
      t.ok(last < 0.8 * first, `rank ${rep.rank}: its loss fell from ${first.toFixed(4)} to ${last.toFixed(4)}`);
    }
    t.not(job.reports[0].hash, job.reports[0].initialHash, 'training moved the parameters');
    t.equal(start.length, set.parameters, `all ${set.parameters} parameters came back`);
  });

  t.test(`${set.name}: exact mode with plain SGD: 2 and 3 ranks = one process, element by element within 1e-5`, { skip }, async (t) => {
    const env = { ...set.env, ORT_OPTIMIZER: 'sgd' };
    const reference = await solo('exact', env);
    const ref = floats(reference.params);
    for (const np of [2, 3]) {
      const job = await runJob(np, WORKER, { args: ['exact'], env });
      t.equal(job.code, 0, `np=${np}: hora run exits 0`, { output: tail(job) });
      if (!job.reports.every(Boolean)) { t.fail(`np=${np}: every rank reported`); continue; }
      for (const rep of job.reports) t.equal(rep.hash, job.reports[0].hash, `np=${np}: rank ${rep.rank} bit-identical to rank 0`);
      const diff = maxRelativeDifference(floats(job.reports[0].params), ref);
      t.ok(diff <= 1e-5, `np=${np}: parameters within 1e-5 relative of the world of one (max ${diff.toExponential(2)})`);
      t.not(job.reports[0].hash, reference.initialHash, `np=${np}: training moved the parameters`);
    }
  });
}
