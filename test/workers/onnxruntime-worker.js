'use strict';
// hora/onnxruntime from inside each rank. Usage: node onnxruntime-worker.js <scenario> (under `hora run`, or
// alone: a world of one). The artifacts in ORT_ARTIFACTS (a folder; default the project's own,
// test/fixtures/onnxruntime-training), an MLP with 784 inputs and 10 classes, train on a deterministic global
// batch of 6 samples per step for ORT_STEPS steps (default 10); rank r takes samples i with i % size === r
// (stride sharding).
//   exact     DistributedTrainingSession, mode 'exact'
//   average   DistributedTrainingSession, mode 'average-parameters'
//   ort       plain onnxruntime-web TrainingSession on the whole batch, no hora (the reference ORT computes)
//   fail      rank 1 feeds a wrongly shaped batch at step 3, so ORT throws inside its runTrainStep; every
//             rank reports the error it got (ORT_LINGER=1: rank 1 then stays alive for 60 s before exiting)
//   exit      rank 1 throws in its own loop at step 3 and dies of it (uncaught)
// ORT_OPTIMIZER=adamw (default, the artifacts' adamw.onnx) or sgd (an SGDOptimizerV2 model built from it).
// ORT_FIXED_BATCH=1: every step trains on the same batch (so the loss must go down).
// Rank 0 (or the lone process) reports its final parameters as base64 float32; every rank reports their sha256.
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const hora = require('../../dist/ts/index.js');
const { DistributedTrainingSession, sgdOptimizerModel } = require('../../dist/adapters/onnxruntime/index.js');
const { report, prng } = require('../support/worker-util');

const FIXTURES = process.env.ORT_ARTIFACTS || path.join(__dirname, '..', 'fixtures', 'onnxruntime-training');
const ORT_FILE = path.join(__dirname, '..', '..', 'node_modules', 'onnxruntime-web', 'dist', 'ort.training.wasm.min.js');
const BATCH = 6;
const STEPS = Number(process.env.ORT_STEPS || 10);

const ort = require(ORT_FILE);
ort.env.wasm.numThreads = 1;

function artifacts() {
  const read = (f) => fs.readFileSync(path.join(FIXTURES, f));
  const adamw = read('adamw.onnx');
  return {
    checkpointState: read('checkpoint.ckpt'),
    trainModel: read('training_model.onnx'),
    evalModel: read('eval_model.onnx'),
    optimizerModel: process.env.ORT_OPTIMIZER === 'sgd' ? sgdOptimizerModel(adamw) : adamw,
  };
}

/** Global batch `step`: inputs in [0, 1) like scaled pixels, labels 0..9. */
function globalBatch(step) {
  const rand = prng(1000 + step);
  const x = new Float32Array(BATCH * 784);
  for (let i = 0; i < x.length; i++) x[i] = rand();
  const y = new Int32Array(BATCH);
  for (let i = 0; i < BATCH; i++) y[i] = Math.floor(rand() * 10);
  return { x, y };
}

function feeds(step, rank, size) {
  const { x, y } = globalBatch(process.env.ORT_FIXED_BATCH === '1' ? 0 : step);
  const mine = [];
  for (let i = 0; i < BATCH; i++) if (i % size === rank) mine.push(i);
  const xs = new Float32Array(mine.length * 784);
  mine.forEach((i, k) => xs.set(x.subarray(i * 784, (i + 1) * 784), k * 784));
  return {
    'input-0': new ort.Tensor('float32', xs, [mine.length, 784]),
    labels: new ort.Tensor('int32', Int32Array.from(mine.map((i) => y[i])), [mine.length]),
  };
}

const sha256 = (f32) => crypto.createHash('sha256').update(Buffer.from(f32.buffer, f32.byteOffset, f32.byteLength)).digest('hex');
const base64 = (f32) => Buffer.from(f32.buffer, f32.byteOffset, f32.byteLength).toString('base64');

async function plainOrt() {
  const session = await ort.TrainingSession.create(artifacts());
  const losses = [];
  for (let step = 0; step < STEPS; step++) {
    const out = await session.runTrainStep(feeds(step, 0, 1));
    losses.push(out[session.trainingOutputNames[0]].data[0]);
    await session.runOptimizerStep();
    await session.lazyResetGrad();
  }
  const params = new Float32Array((await session.getContiguousParameters(true)).data);
  report(0, { size: 1, losses, hash: sha256(params), params: base64(params) });
}

async function distributed(scenario) {
  await hora.init();
  const rank = hora.rank();
  const size = hora.size();
  const options = { ...artifacts(), ort, mode: scenario === 'average' ? 'average-parameters' : 'exact' };
  const started = Date.now();
  const session = await DistributedTrainingSession.create(options);
  const initial = new Float32Array((await session.getContiguousParameters()).data);
  const losses = [];
  try {
    for (let step = 0; step < STEPS; step++) {
      let f = feeds(step, rank, size);
      if (scenario === 'fail' && rank === 1 && step === 3) f = { ...f, 'input-0': new ort.Tensor('float32', new Float32Array(7), [1, 7]) };
      if (scenario === 'exit' && rank === 1 && step === 3) throw new Error('boom on rank 1 at step 3');
      const out = await session.runTrainStep(f);
      losses.push(out[Object.keys(out)[0]].data[0]);
      await session.runOptimizerStep();
      await session.lazyResetGrad();
    }
  } catch (e) {
    if (scenario === 'exit') throw e;
    report(rank, { size, ok: false, code: e.code, peer: e.peer, message: String(e.message), seconds: (Date.now() - started) / 1000 });
    if (process.env.ORT_LINGER === '1' && rank === 1) await new Promise((r) => setTimeout(r, 60000));
    await hora.shutdown().catch(() => undefined);
    process.exit(1);
  }
  const params = new Float32Array((await session.getContiguousParameters()).data);
  const evalOut = await session.runEvalStep(feeds(0, rank, size));
  report(rank, {
    ok: true, size, losses, hash: sha256(params), initialHash: sha256(initial), steps: session.optimizerSteps,
    evalLoss: evalOut[Object.keys(evalOut)[0]].data[0], ...(rank === 0 ? { params: base64(params) } : {}),
  });
  await session.release();
  await hora.shutdown();
}

const scenario = process.argv[2];
(scenario === 'ort' ? plainOrt() : distributed(scenario)).catch((e) => {
  console.error(e);
  process.exit(1);
});
