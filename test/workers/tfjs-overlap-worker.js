'use strict';
// DistributedOptimizer with overlap (allreduce started from the backward pass) against overlap: false and
// one process. Usage: node tfjs-overlap-worker.js <scenario>
//   reference  no launcher, plain optimizer on the full batch, every model the backend can train
//   equiv      every model with overlap false, and true with buckets of the default size, smaller than
//              any gradient and larger than all of them; Adam k=2 and SGD fp16 both ways
//   mismatch   rank 1's loss leaves out a branch from step $MISMATCH_STEP on: ERR_MISMATCH expected
//   throw      rank $THROW_RANK throws in the middle of its backward pass at step 3
//   timeline   3 steps of the dense model, a bucket per gradient (run with HORA_TIMELINE)
// TFJS_BACKEND=wasm selects the wasm backend. Each rank writes one JSON line to
// $HORA_TEST_RESULT_DIR/rank-<rank>.json.
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { DistributedOptimizer, shard } = require('../../dist/adapters/tfjs/index.js');
const { report, prng } = require('../support/worker-util');

const B = 12;
const STEPS = 4;
const TINY_MB = 1e-5; // 10 bytes: smaller than every gradient, so each one is a bucket of its own
const HUGE_MB = 1024;

const generator = (seed) => {
  const next = prng(seed);
  return () => next() * 2 - 1;
};

/** Models by name: a builder and the shape of one sample (ints in [0, 10) where `ints`). */
const MODELS = {
  dense: { sample: [8], build: () => tf.sequential({ layers: [tf.layers.dense({ inputShape: [8], units: 16, activation: 'tanh' }), tf.layers.dense({ units: 4 })] }) },
  conv2d: {
    sample: [6, 6, 1],
    build: () => tf.sequential({ layers: [tf.layers.conv2d({ inputShape: [6, 6, 1], filters: 3, kernelSize: 3, activation: 'relu' }), tf.layers.flatten(), tf.layers.dense({ units: 4 })] }),
  },
  batchnorm: {
    sample: [8],
    // Batch statistics are per rank (no sync BN), so only overlap true vs false is compared, not one process.
    perRankStatistics: true,
    build: () => tf.sequential({ layers: [tf.layers.dense({ inputShape: [8], units: 16 }), tf.layers.batchNormalization(), tf.layers.dense({ units: 4 })] }),
  },
  embedding: {
    sample: [5], ints: true,
    build: () => tf.sequential({ layers: [tf.layers.embedding({ inputDim: 10, outputDim: 4, inputLength: 5 }), tf.layers.flatten(), tf.layers.dense({ units: 4 })] }),
  },
  lstm: { sample: [5, 3], build: () => tf.sequential({ layers: [tf.layers.lstm({ inputShape: [5, 3], units: 6 }), tf.layers.dense({ units: 4 })] }) },
  shared: {
    sample: [8],
    build: () => {
      const input = tf.input({ shape: [8] });
      const twice = tf.layers.dense({ units: 8, activation: 'tanh', name: 'shared_twice' });
      const out = tf.layers.dense({ units: 4 }).apply(twice.apply(twice.apply(input)));
      return tf.model({ inputs: input, outputs: out });
    },
  },
  frozen: {
    sample: [8],
    build: () => {
      const frozen = tf.layers.dense({ inputShape: [8], units: 16, activation: 'tanh', trainable: false });
      return tf.sequential({ layers: [frozen, tf.layers.dense({ units: 16, activation: 'tanh' }), tf.layers.dense({ units: 4 })] });
    },
  },
};

// Layers whose gradient needs a kernel tfjs-backend-wasm lacks (tfjs 4.22): they cannot train there at all.
const WASM_MISSING = { conv2d: 'Conv2DBackpropFilter', embedding: 'UnsortedSegmentSum' };
const TRAINABLE = (name) => !(tf.getBackend() === 'wasm' && WASM_MISSING[name]);

function buildModel(name) {
  const model = MODELS[name].build();
  const rand = generator(7);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => 0.5 * rand()), w.shape)));
  return model;
}

function globalBatch(name, s) {
  const { sample, ints } = MODELS[name];
  const rand = generator(1000 + s);
  const per = sample.reduce((a, b) => a * b, 1);
  const x = Float32Array.from({ length: B * per }, () => (ints ? Math.floor((rand() + 1) * 5) : rand()));
  const y = Float32Array.from({ length: B * 4 }, (_, i) => Math.sin(x[(i * 7) % x.length]) + 0.1 * rand());
  return { x: tf.tensor(x, [B, ...sample], ints ? 'int32' : 'float32'), y: tf.tensor2d(y, [B, 4]) };
}

/** The weights to compare: all of them, but only the trainable ones where BN keeps per-rank statistics. */
function weightsOf(model, name) {
  const ws = MODELS[name].perRankStatistics ? model.trainableWeights.map((w) => w.read()) : model.getWeights();
  const flat = [];
  for (const w of ws) flat.push(...w.dataSync());
  const bytes = Float32Array.from(flat);
  return { base64: Buffer.from(bytes.buffer).toString('base64'), values: Array.from(bytes) };
}

const OPTIMIZERS = { sgd: () => tf.train.sgd(0.1), adam: () => tf.train.adam(0.01) };

async function train(name, { wrap, opt = 'sgd', passes = 1, ...options }) {
  const model = buildModel(name);
  const inner = OPTIMIZERS[opt]();
  const optimizer = wrap ? new DistributedOptimizer(inner, { backwardPassesPerStep: passes, ...options }) : inner;
  model.compile({ optimizer, loss: 'meanSquaredError' });
  for (let s = 0; s < STEPS; s++) {
    const global = globalBatch(name, s);
    const local = wrap ? shard(global.x, global.y) : global;
    const micro = local.x.shape[0] / passes;
    for (let p = 0; p < passes; p++) {
      const x = local.x.slice(p * micro, micro);
      const y = local.y.slice(p * micro, micro);
      await model.trainOnBatch(x, y);
      tf.dispose([x, y]);
    }
    tf.dispose([global.x, global.y, local.x, local.y]);
  }
  const out = { ...weightsOf(model, name), stats: wrap ? { ...optimizer.stats } : null };
  model.dispose();
  return out;
}

async function reference() {
  const runs = {};
  for (const name of Object.keys(MODELS).filter(TRAINABLE)) runs[name] = await train(name, { wrap: false });
  runs['dense adam'] = await train('dense', { wrap: false, opt: 'adam' });
  report(0, { runs, backend: tf.getBackend() });
}

async function equiv() {
  const runs = {};
  for (const name of Object.keys(MODELS).filter(TRAINABLE)) {
    runs[`${name} overlap=false`] = await train(name, { wrap: true, overlap: false });
    runs[`${name} overlap=true`] = await train(name, { wrap: true });
    runs[`${name} overlap=true bucket=tiny`] = await train(name, { wrap: true, bucketMB: TINY_MB });
    runs[`${name} overlap=true bucket=huge`] = await train(name, { wrap: true, bucketMB: HUGE_MB });
  }
  for (const overlap of [false, true]) {
    runs[`dense adam k=2 overlap=${overlap}`] = await train('dense', { wrap: true, opt: 'adam', passes: 2, overlap, bucketMB: TINY_MB });
    runs[`dense fp16 overlap=${overlap}`] = await train('dense', { wrap: true, compression: 'fp16', overlap, bucketMB: TINY_MB });
  }
  report(hora.rank(), { runs, backend: tf.getBackend() });
}

/** Two branches; from step MISMATCH_STEP on, rank 1's loss leaves branch b out. */
async function mismatch() {
  const rank = hora.rank();
  const from = Number(process.env.MISMATCH_STEP || 0);
  const input = tf.input({ shape: [8] });
  const a = tf.layers.dense({ units: 4, name: 'branch_a' }).apply(input);
  const b = tf.layers.dense({ units: 4, name: 'branch_b' }).apply(input);
  const model = tf.model({ inputs: input, outputs: [a, b] });
  const optimizer = new DistributedOptimizer(tf.train.sgd(0.1));
  let before = null;
  for (let s = 0; s < 6; s++) {
    const { x, y } = globalBatch('dense', s);
    const local = shard(x, y);
    const skipB = rank === 1 && s >= from;
    before = weightsOf(model, 'dense').base64;
    try {
      optimizer.minimize(() => {
        const [pa, pb] = model.apply(local.x);
        const la = tf.losses.meanSquaredError(local.y, pa);
        return skipB ? la : la.add(tf.losses.meanSquaredError(local.y, pb));
      });
    } catch (e) {
      report(rank, {
        step: s, error: { code: e.code, message: e.message, isHoraError: e instanceof hora.HoraError },
        unchanged: weightsOf(model, 'dense').base64 === before,
      });
      return;
    }
  }
  report(rank, { finished: true });
}

/** rank THROW_RANK's backward pass throws between the two layers, after the top layer's bucket went out. */
async function throwing() {
  const rank = hora.rank();
  const model = buildModel('dense');
  const optimizer = new DistributedOptimizer(tf.train.sgd(0.1), { bucketMB: TINY_MB });
  let step = 0;
  const trap = tf.customGrad((x, save) => ({
    value: x.clone(),
    gradFunc: (dy) => {
      if (rank === Number(process.env.THROW_RANK) && step === 3) throw new Error(`rank ${rank} failed on purpose in its backward pass`);
      return dy.clone();
    },
  }));
  const [l1, l2] = model.layers;
  for (; step < 1000; step++) {
    const { x, y } = globalBatch('dense', step % 10);
    const local = shard(x, y);
    optimizer.minimize(() => tf.losses.meanSquaredError(local.y, l2.apply(trap(l1.apply(local.x)))));
    tf.dispose([x, y, local.x, local.y]);
  }
  report(rank, { finished: true });
}

async function timeline() {
  const model = buildModel('dense');
  model.compile({ optimizer: new DistributedOptimizer(tf.train.sgd(0.1), { bucketMB: TINY_MB }), loss: 'meanSquaredError' });
  for (let s = 0; s < 3; s++) {
    const { x, y } = globalBatch('dense', s);
    const local = shard(x, y);
    await model.trainOnBatch(local.x, local.y);
  }
  report(hora.rank(), { finished: true });
}

async function main() {
  if (process.env.TFJS_BACKEND) {
    if (process.env.TFJS_BACKEND === 'wasm') require('@tensorflow/tfjs-backend-wasm');
    await tf.setBackend(process.env.TFJS_BACKEND);
    await tf.ready();
  }
  await hora.init();
  const scenario = process.argv[2];
  if (scenario === 'reference') await reference();
  else if (scenario === 'equiv') await equiv();
  else if (scenario === 'mismatch') await mismatch();
  else if (scenario === 'throw') await throwing();
  else if (scenario === 'timeline') await timeline();
  else throw new Error(`unknown scenario ${scenario}`);
  await hora.shutdown();
}

main().catch((e) => {
  process.stderr.write(`tfjs-overlap-worker rank ${process.env.HORA_RANK}: ${e && e.stack}\n`);
  report(Number(process.env.HORA_RANK || 0), { error: { code: e && e.code, message: e && e.message, isHoraError: e instanceof hora.HoraError } });
  process.exit(1);
});
