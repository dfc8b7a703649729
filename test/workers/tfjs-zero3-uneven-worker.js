'use strict';
// Runs inside every rank of a `hora run` job for test/tfjs-zero3-uneven.test.js and test/tfjs-zero-uneven.test.js:
// DistributedOptimizer with shard: 'weights' (ZeRO stage 3; env SHARD 'optimizer' or 'gradients': stages 1 and 2) on uneven data, against the unsharded DistributedOptimizer (which averages an
// uneven step over samples and joins at the epoch's end) on the same ranks and data. The data set of N samples
// (env N) is split by shard(..., {remainder: 'keep'}), batch B per rank (env B), 2 epochs, shuffle false.
// Usage: node tfjs-zero3-uneven-worker.js uneven
//   fit-sgd, fit-adam   model.fit
//   fit-k2              model.fit, SGD, backwardPassesPerStep: 2 (a step's two passes weigh their samples)
//   dataset             model.fitDataset over a tf.data generator of this rank's samples (no length known)
//   loop                a minimize loop: setSampleCount before each pass, joinEpoch after each epoch's data
//   loop-nocount        the same without setSampleCount (a pass averages over the ranks that have data)
// Usage: node tfjs-zero3-uneven-worker.js misuse (2 ranks)
//   mixed     rank 0 gives its pass a count (setSampleCount), rank 1 does not: both refuse the pass
//   early     joinEpoch between setSampleCount and the pass: refused; the pass then runs
// Reports, per variant: the largest relative difference of each weight (max |a - b| / max |a|, a the unsharded
// run's), a hash of the sharded run's gathered weights, the steps each took, joinEpoch's results; and what
// joinEpoch without the optimizer does with a sharded model (shard: 'weights' only).
const crypto = require('node:crypto');
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { DistributedOptimizer, joinEpoch, shard } = require('../../dist/adapters/tfjs/index.js');
const { describeError, prng, runScenarios } = require('../support/worker-util');

tf.setBackend('cpu');

const EPOCHS = 2;
const SHARD = process.env.SHARD || 'weights';
const OPTIMIZERS = { sgd: () => tf.train.sgd(0.1), adam: () => tf.train.adam(0.02) };

function dataSet(n) {
  const next = prng(7);
  const x = Float32Array.from({ length: n * 4 }, () => next() * 2 - 1);
  const y = new Float32Array(n * 3);
  for (let i = 0; i < n; i++) {
    y[3 * i] = Math.sin(x[4 * i] + x[4 * i + 1]);
    y[3 * i + 1] = x[4 * i + 2] * x[4 * i + 3] + 0.5;
    y[3 * i + 2] = x[4 * i] - x[4 * i + 3];
  }
  return { x: tf.tensor2d(x, [n, 4]), y: tf.tensor2d(y, [n, 3]) };
}

/** Kernel 4x5 = 20, bias 5, kernel 5x3 = 15, bias 3: none divides by 2 and 3 alike. */
function buildModel() {
  const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [4], units: 5, activation: 'tanh' }), tf.layers.dense({ units: 3 })] });
  const next = prng(11);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => next() - 0.5), w.shape)));
  return model;
}

async function train(variant, sharded, mine, b) {
  const model = buildModel();
  const options = variant === 'fit-k2' ? { backwardPassesPerStep: 2 } : {};
  const opt = new DistributedOptimizer(OPTIMIZERS[variant === 'fit-adam' ? 'adam' : 'sgd'](), sharded ? { ...options, shard: SHARD, ...(SHARD === 'weights' ? { model } : {}) } : options);
  model.compile({ optimizer: opt, loss: 'meanSquaredError' });
  const joined = [];
  if (variant === 'dataset') {
    // A generator: the data set's length is unknown to tfjs and to hora.
    const n = mine.x.shape[0];
    const ds = tf.data.generator(function* samples() {
      for (let i = 0; i < n; i++) yield { xs: mine.x.slice(i, 1).reshape([4]), ys: mine.y.slice(i, 1).reshape([3]) };
    }).batch(b);
    await model.fitDataset(ds, { epochs: EPOCHS, verbose: 0 });
  } else if (variant.startsWith('loop')) {
    const n = mine.x.shape[0];
    for (let e = 0; e < EPOCHS; e++) {
      for (let at = 0; at < n; at += b) {
        const size = Math.min(b, n - at);
        const xb = mine.x.slice(at, size), yb = mine.y.slice(at, size);
        if (variant === 'loop') opt.setSampleCount(size);
        opt.minimize(() => tf.losses.meanSquaredError(yb, model.predict(xb)));
        xb.dispose();
        yb.dispose();
      }
      // The rank whose data ends last took every step.
      joined.push(await joinEpoch(model, opt));
    }
  } else {
    await model.fit(mine.x, mine.y, { batchSize: b, epochs: EPOCHS, shuffle: false, verbose: 0 });
  }
  const weights = model.getWeights().map((w) => Float32Array.from(w.dataSync()));
  return { model, opt, weights, steps: opt.stats.steps, joined };
}

function relative(a, b) {
  return a.map((w, i) => {
    const scale = Math.max(...w.map(Math.abs));
    return Math.max(...w.map((v, j) => Math.abs(v - b[i][j]))) / scale;
  });
}

async function uneven() {
  const n = Number(process.env.N), b = Number(process.env.B);
  const variants = (process.env.VARIANTS || 'fit-sgd').split(',');
  const data = dataSet(n);
  const mine = shard(data.x, data.y, { remainder: 'keep' });
  const out = { samples: mine.x.shape[0], variants: {} };
  for (const variant of variants) {
    const a = await train(variant, false, mine, b);
    const s = await train(variant, true, mine, b);
    const initial = buildModel().getWeights().map((w) => Array.from(w.dataSync()));
    out.variants[variant] = {
      relative: relative(a.weights, s.weights),
      moved: Math.max(...relative(initial, a.weights)),
      hash: crypto.createHash('sha256').update(Buffer.concat(s.weights.map((w) => Buffer.from(w.buffer)))).digest('hex'),
      steps: { unsharded: a.steps, sharded: s.steps },
      joined: s.joined,
    };
    if (variant === variants[variants.length - 1] && SHARD === 'weights') {
      // joinEpoch of a sharded model without its optimizer: it cannot serve the others' passes.
      try {
        await joinEpoch(s.model);
        out.noOptimizer = { ok: true };
      } catch (e) {
        out.noOptimizer = describeError(e);
      }
    }
  }
  await hora.barrier();
  return out;
}

async function misuse(r) {
  const data = dataSet(8);
  const mine = shard(data.x, data.y);
  const model = buildModel();
  const opt = new DistributedOptimizer(tf.train.sgd(0.1), { shard: SHARD, ...(SHARD === 'weights' ? { model } : {}) });
  const pass = () => opt.minimize(() => tf.losses.meanSquaredError(mine.y, model.predict(mine.x)));
  const out = {};
  try {
    if (r === 0) opt.setSampleCount(4);
    pass();
    out.mixed = { ok: true };
  } catch (e) {
    out.mixed = describeError(e);
  }
  opt.setSampleCount(4);
  try {
    await joinEpoch(model, opt);
    out.early = { ok: true };
  } catch (e) {
    out.early = describeError(e);
  }
  pass();
  out.steps = opt.stats.steps;
  out.joined = await joinEpoch(model, opt);
  return out;
}

runScenarios(hora, { uneven, misuse });
