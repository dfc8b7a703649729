'use strict';
// Trains small tfjs models under hora and reports what each rank ended with.
// Usage: node tfjs-worker.js <scenario>
//   reference  no launcher (a world of one), plain tf.train optimizers on the full batch B: the baseline
//   equiv      every rank trains its shard (B/N per step) through DistributedOptimizer: SGD via
//              trainOnBatch, Adam via minimize, Adam with backwardPassesPerStep=2, fp16 and bf16 SGD
//   fit        model.fit + fitDataset with BroadcastWeightsCallback, MetricAverageCallback and
//              LearningRateWarmupCallback, ranks starting from different weights; then model.save
//   throw      rank $THROW_RANK throws at step 5 of its training loop; the others are inside applyGradients
// TFJS_BACKEND=wasm selects the wasm backend for any scenario.
// Each rank writes one JSON line to $HORA_TEST_RESULT_DIR/rank-<rank>.json: per run, the final weights as
// base64 of their float32 bytes (bit-exact comparison) and as numbers.
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const {
  DistributedOptimizer, BroadcastWeightsCallback, MetricAverageCallback, LearningRateWarmupCallback, shard,
} = require('../../dist/adapters/tfjs/index.js');

const { report, prng } = require('../support/worker-util');

/** Uniform in [-1, 1), seeded. */
const generator = (seed) => {
  const next = prng(seed);
  return () => next() * 2 - 1;
};

const B = 24; // global batch: divisible by 2, 3 and by 2 x 3 micro-batches
const STEPS = 12;



function buildModel(seed) {
  const model = tf.sequential({
    layers: [
      tf.layers.dense({ inputShape: [8], units: 16, activation: 'tanh' }),
      tf.layers.dense({ units: 4 }),
    ],
  });
  const rand = generator(seed);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => 0.5 * rand()), w.shape)));
  return model;
}

/** The global batch of step s: the same on every rank and in the reference. */
function globalBatch(s) {
  const rand = generator(1000 + s);
  const x = Float32Array.from({ length: B * 8 }, rand);
  const y = new Float32Array(B * 4);
  for (let i = 0; i < B; i++) for (let j = 0; j < 4; j++) y[i * 4 + j] = Math.sin(x[i * 8 + j] + 2 * x[i * 8 + j + 4]) + 0.1 * rand();
  return { x: tf.tensor2d(x, [B, 8]), y: tf.tensor2d(y, [B, 4]) };
}

function weightsOf(model) {
  const flat = [];
  for (const w of model.getWeights()) flat.push(...w.dataSync());
  const bytes = Float32Array.from(flat);
  return { base64: Buffer.from(bytes.buffer).toString('base64'), values: Array.from(bytes) };
}

const OPTIMIZERS = { sgd: () => tf.train.sgd(0.1), adam: () => tf.train.adam(0.01) };

/**
 * One training run. mode: 'trainOnBatch' or 'minimize'. With wrap, the optimizer is a DistributedOptimizer
 * and each rank uses its shard of every global batch, split into `passes` micro-batches.
 */
async function train({ opt, mode, wrap, passes = 1, compression = 'none' }) {
  const model = buildModel(7);
  const inner = OPTIMIZERS[opt]();
  const optimizer = wrap ? new DistributedOptimizer(inner, { compression, backwardPassesPerStep: passes }) : inner;
  if (mode === 'trainOnBatch') model.compile({ optimizer, loss: 'meanSquaredError' });
  for (let s = 0; s < STEPS; s++) {
    const global = globalBatch(s);
    const local = wrap ? shard(global.x, global.y) : global;
    const micro = local.x.shape[0] / passes;
    for (let p = 0; p < passes; p++) {
      const x = local.x.slice(p * micro, micro);
      const y = local.y.slice(p * micro, micro);
      if (mode === 'trainOnBatch') await model.trainOnBatch(x, y);
      else optimizer.minimize(() => tf.losses.meanSquaredError(y, model.apply(x)));
      tf.dispose([x, y]);
    }
    tf.dispose([global.x, global.y, local.x, local.y]);
  }
  const out = weightsOf(model);
  model.dispose();
  return out;
}

const RUNS = {
  'sgd/trainOnBatch': { opt: 'sgd', mode: 'trainOnBatch' },
  'adam/minimize': { opt: 'adam', mode: 'minimize' },
  'adam/trainOnBatch': { opt: 'adam', mode: 'trainOnBatch' },
  'sgd/minimize': { opt: 'sgd', mode: 'minimize' },
};

async function reference() {
  const runs = {};
  for (const [name, r] of Object.entries(RUNS)) runs[name] = await train({ ...r, wrap: false });
  report(0, { runs, backend: tf.getBackend() });
}

async function equiv() {
  const runs = {};
  for (const [name, r] of Object.entries(RUNS)) runs[name] = await train({ ...r, wrap: true });
  runs['adam/minimize k=2'] = await train({ opt: 'adam', mode: 'minimize', wrap: true, passes: 2 });
  runs['sgd/trainOnBatch k=2'] = await train({ opt: 'sgd', mode: 'trainOnBatch', wrap: true, passes: 2 });
  runs['sgd/trainOnBatch fp16'] = await train({ opt: 'sgd', mode: 'trainOnBatch', wrap: true, compression: 'fp16' });
  runs['adam/minimize fp16'] = await train({ opt: 'adam', mode: 'minimize', wrap: true, compression: 'fp16' });
  runs['sgd/trainOnBatch bf16'] = await train({ opt: 'sgd', mode: 'trainOnBatch', wrap: true, compression: 'bf16' });
  report(hora.rank(), { runs, backend: tf.getBackend() });
}

async function fit() {
  const rank = hora.rank();
  const model = buildModel(100 + rank); // different on purpose: BroadcastWeightsCallback must fix it
  const optimizer = new DistributedOptimizer(tf.train.adam(0.01));
  model.compile({ optimizer, loss: 'meanSquaredError' });
  const batches = [0, 1, 2, 3].map(globalBatch);
  const all = { x: tf.concat(batches.map((b) => b.x)), y: tf.concat(batches.map((b) => b.y)) };
  const mine = shard(all.x, all.y);
  const lrs = [];
  const history = await model.fit(mine.x, mine.y, {
    epochs: 3, batchSize: 8, shuffle: false, verbose: 0,
    callbacks: [
      new BroadcastWeightsCallback(0), new MetricAverageCallback(), new LearningRateWarmupCallback({ warmupEpochs: 2 }),
      new tf.CustomCallback({ onBatchEnd: () => { lrs.push(optimizer.learningRate); } }),
    ],
  });
  const afterFit = weightsOf(model);
  const ds = tf.data.zip({ xs: tf.data.array(tf.unstack(mine.x)), ys: tf.data.array(tf.unstack(mine.y)) }).batch(8);
  const dsHistory = await model.fitDataset(ds, { epochs: 2, verbose: 0, callbacks: [new MetricAverageCallback()] });
  const afterFitDataset = weightsOf(model);
  let saved = null;
  await model.save(tf.io.withSaveHandler(async (artifacts) => {
    saved = { className: artifacts.trainingConfig.optimizer_config.class_name, optimizerWeights: artifacts.weightSpecs.filter((w) => w.group === 'optimizer').length };
    return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: 'JSON' } };
  }), { includeOptimizer: true });
  report(rank, {
    afterFit, afterFitDataset, loss: history.history.loss, dsLoss: dsHistory.history.loss, lrs, saved, iterations: optimizer.iterations,
  });
}

async function throwing() {
  const rank = hora.rank();
  const model = buildModel(7);
  const optimizer = new DistributedOptimizer(tf.train.sgd(0.1));
  model.compile({ optimizer, loss: 'meanSquaredError' });
  for (let s = 0; s < 1000; s++) {
    if (rank === Number(process.env.THROW_RANK) && s === 5) throw new Error(`rank ${rank} failed on purpose at step ${s}`);
    const g = globalBatch(s % 10);
    const local = shard(g.x, g.y);
    await model.trainOnBatch(local.x, local.y);
    tf.dispose([g.x, g.y, local.x, local.y]);
  }
  report(rank, { finished: true });
}

async function main() {
  // TFJS_BACKEND=wasm runs the same scenario on @tensorflow/tfjs-backend-wasm (the default is cpu).
  if (process.env.TFJS_BACKEND) {
    if (process.env.TFJS_BACKEND === 'wasm') require('@tensorflow/tfjs-backend-wasm');
    await tf.setBackend(process.env.TFJS_BACKEND);
    await tf.ready();
  }
  await hora.init();
  const scenario = process.argv[2];
  if (scenario === 'reference') await reference();
  else if (scenario === 'equiv') await equiv();
  else if (scenario === 'fit') await fit();
  else if (scenario === 'throw') await throwing();
  else throw new Error(`unknown scenario ${scenario}`);
  await hora.shutdown();
}

main().catch((e) => {
  process.stderr.write(`tfjs-worker rank ${process.env.HORA_RANK}: ${e && e.stack}\n`);
  report(Number(process.env.HORA_RANK || 0), { error: { code: e && e.code, message: e && e.message, isHoraError: e instanceof hora.HoraError } });
  process.exit(1);
});
