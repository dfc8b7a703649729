'use strict';
// hora/onnxruntime, exact mode: ORT's own artifacts load and ORT's first loss is the one ORT's own test expects;
// hora's AdamW step is ORT's; and N ranks on local batch 6/N end where one process on batch 6 ends,
// bit-identical across ranks (test/workers/onnxruntime-worker.js). On every artifact set of
// test/support/ort-artifacts.js: the project's own, and ORT's from ../shared when it is there.
const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const { runJob, runProcess, tail, ROOT } = require('./support/hora-job');
const { artifactSets } = require('./support/ort-artifacts');

const WORKER = path.join(__dirname, 'workers', 'onnxruntime-worker.js');
const ORT_FILE = path.join(ROOT, 'node_modules', 'onnxruntime-web', 'dist', 'ort.training.wasm.min.js');

for (const set of artifactSets()) run(set);

/** The worker alone (no launcher variables): hora is a world of one. */
async function solo(scenario, env = {}) {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(HORA_|OMPI_|PMI_|SLURM_)/.test(k)));
  const r = await runProcess([WORKER, scenario], { ...clean, ...env });
  if (r.code !== 0) throw new Error(`solo ${scenario} failed: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

const floats = (b64) => new Float32Array(Buffer.from(b64, 'base64').buffer.slice(0));

/** ||a - b|| / ||b|| and max |a - b| / max |b|. */
function differences(a, b) {
  let num = 0, den = 0, maxDiff = 0, maxB = 0;
  for (let i = 0; i < a.length; i++) {
    const d = a[i] - b[i];
    num += d * d;
    den += b[i] * b[i];
    maxDiff = Math.max(maxDiff, Math.abs(d));
    maxB = Math.max(maxB, Math.abs(b[i]));
  }
  return { normwise: Math.sqrt(num / den), elementwise: maxDiff / maxB };
}

function run(set) {
  const FIXTURES = set.dir;
  const skip = set.missing ? `${set.name}: ${set.missing}` : false;
  // ORT's own expected losses come with ORT's artifacts only (the project's are checked against a JS reference
  // in test/onnxruntime-artifacts.test.js).
  if (!set.own) t.test(`${set.name}: the artifacts load: ORT's first and second train-step losses on input-0.in are loss_1.out and loss_2.out`, { skip }, async (t) => {
    const ort = require(ORT_FILE);
    ort.env.wasm.numThreads = 1;
    const read = (f) => fs.readFileSync(path.join(FIXTURES, f));
    const session = await ort.TrainingSession.create({
      checkpointState: read('checkpoint.ckpt'), trainModel: read('training_model.onnx'),
      evalModel: read('eval_model.onnx'), optimizerModel: read('adamw.onnx'),
    });
    const text = read('input-0.in').toString('utf8');
    const values = text.slice(text.indexOf('[') + 1, text.lastIndexOf(']')).split(',').map(Number);
    const n = values.length / 784;
    t.equal(n, 2, 'input-0.in holds 2 samples of 784');
    // ORT's test (training_api_test.cc) feeds labels all 1.
    const feeds = { 'input-0': new ort.Tensor('float32', Float32Array.from(values), [n, 784]), labels: new ort.Tensor('int32', new Int32Array(n).fill(1), [n]) };
    const expected = ['loss_1.out', 'loss_2.out'].map((f) => Number(read(f).toString('utf8').trim().split(/\s+/).pop()));
    for (let step = 0; step < 2; step++) {
      const out = await session.runTrainStep(feeds);
      const loss = out[session.trainingOutputNames[0]].data[0];
      t.ok(Math.abs(loss - expected[step]) <= 1e-5 * expected[step], `step ${step + 1}: loss ${loss} matches ${expected[step]}`);
      await session.runOptimizerStep();
      await session.lazyResetGrad();
    }
    await session.release();
  });

  t.test(`${set.name}: exact mode (AdamW from adamw.onnx): world of one = ORT's own training; 2 and 3 ranks = world of one`, { skip }, async (t) => {
    const [ortRun, reference] = [await solo('ort', set.env), await solo('exact', set.env)];
    t.equal(reference.size, 1, 'the reference ran in a world of one');
    t.equal(reference.steps, 10, '10 optimizer steps');
    const want = floats(ortRun.params);
    const initialMove = differences(floats(reference.params), want);
    // hora's AdamW is ORT's formula in float64 stored as float32; ORT computes in float32.
    t.ok(initialMove.elementwise <= 1e-4, `hora's AdamW matches ORT's runOptimizerStep: max |diff| / max |w| = ${initialMove.elementwise.toExponential(2)}`);
    for (let s = 0; s < 10; s++) {
      t.ok(Math.abs(reference.losses[s] - ortRun.losses[s]) <= 1e-5 * ortRun.losses[s], `step ${s}: loss ${reference.losses[s]} = ORT's ${ortRun.losses[s]}`);
    }
    const ref = floats(reference.params);
    for (const np of [2, 3]) {
      const job = await runJob(np, WORKER, { args: ['exact'], env: set.env });
      t.equal(job.code, 0, `np=${np}: hora run exits 0`, { output: tail(job) });
      if (!job.reports.every(Boolean)) { t.fail(`np=${np}: every rank reported`, { output: tail(job) }); continue; }
      for (const rep of job.reports) {
        t.equal(rep.size, np, `np=${np}: rank ${rep.rank} ran in a world of ${np}`);
        t.equal(rep.hash, job.reports[0].hash, `np=${np}: rank ${rep.rank}'s parameters are bit-identical to rank 0's`);
        t.equal(rep.initialHash, reference.initialHash, `np=${np}: rank ${rep.rank} started from the checkpoint's parameters`);
      }
      // AdamW divides by sqrt(m2) + 1e-6, so a near-cancelling gradient's float32 rounding (which differs between
      // a mean of 6 and a mean of N means of 6/N) is amplified up to 1e6 times: the bound is normwise.
      const d = differences(floats(job.reports[0].params), ref);
      t.ok(d.normwise <= 1e-5, `np=${np}: ||w - w_ref|| / ||w_ref|| = ${d.normwise.toExponential(2)} <= 1e-5`);
      t.ok(d.elementwise <= 1e-5, `np=${np}: max |w - w_ref| / max |w_ref| = ${d.elementwise.toExponential(2)} <= 1e-5`);
      t.ok(Math.abs(job.reports[0].evalLoss) > 0, `np=${np}: runEvalStep ran with the trained parameters`);
    }
  });
}
