'use strict';
// Runs inside every rank of a `hora run` job for test/tfjs-uneven.test.js: a data set of N samples (argv[2])
// that does not divide by the world size, split by shard(..., {remainder: 'keep'}), trained with batch B
// (argv[3]) per rank, shuffle false. Every rank takes the same number of steps; the last global batch is
// uneven. Each variant's final weights are compared, on every rank, with one process (no hora) training on
// the same sequence of global batches: the ranks' j-th batches together, in rank order.
//
//   fit           model.fit, DistributedOptimizer with overlap (the default)
//   fit-plain     model.fit, overlap: false
//   fit-k2        model.fit, backwardPassesPerStep: 2 (a step is two batches of every rank)
//   fit-bf16      model.fit, compression: 'bf16' (rounded: the test allows more)
//   dataset       model.fitDataset over the rank's part
//   loop          a custom loop: setSampleCount(the batch's samples) before each minimize
// Reports {variants: {name: {maxDiff, moved, steps, carried, separate}}}: carried, the steps whose last bucket
// carried the sample count (its name ends ' +1'); separate, those that sent it as a collective of its own.
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const core = require('../../dist/ts/hora.js');
const { DistributedOptimizer, joinEpoch, shard } = require('../../dist/adapters/tfjs/index.js');
const { prng, runScenarios } = require('../support/worker-util');

const EPOCHS = 3;
const LR = 0.1;

function dataSet(n) {
  const next = prng(7);
  const x = Float32Array.from({ length: n * 4 }, () => next() * 2 - 1);
  const y = new Float32Array(n * 2);
  for (let i = 0; i < n; i++) {
    y[2 * i] = Math.sin(x[4 * i] + x[4 * i + 1]);
    y[2 * i + 1] = x[4 * i + 2] * x[4 * i + 3] + 0.5;
  }
  return { x: tf.tensor2d(x, [n, 4]), y: tf.tensor2d(y, [n, 2]) };
}

function buildModel() {
  const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [4], units: 6, activation: 'tanh' }), tf.layers.dense({ units: 2 })] });
  const next = prng(11);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => next() - 0.5), w.shape)));
  return model;
}

function flatWeights(model) {
  return Float32Array.from(model.getWeights().flatMap((w) => Array.from(w.dataSync())));
}

/**
 * The reference: one process, plain SGD, on the samples reordered so that consecutive runs of p*b*k are
 * the global steps (rank 0's batches of the step, then rank 1's...), fit with that batch size.
 */
async function reference(data, n, b, p, k) {
  const parts = Array.from({ length: p }, (_, r) => Array.from(shard(data.x, tf.range(0, n), { rank: r, size: p, remainder: 'keep' }).y.dataSync()));
  const perStep = b * k;
  const steps = Math.ceil(parts[0].length / perStep);
  const order = [];
  for (let s = 0; s < steps; s++) for (const part of parts) order.push(...part.slice(s * perStep, (s + 1) * perStep));
  const idx = tf.tensor1d(order, 'int32');
  const model = buildModel();
  model.compile({ optimizer: tf.train.sgd(LR), loss: 'meanSquaredError' });
  await model.fit(tf.gather(data.x, idx), tf.gather(data.y, idx), { batchSize: p * perStep, epochs: EPOCHS, shuffle: false, verbose: 0 });
  return flatWeights(model);
}

/** Runs fn with the dispatcher's communicator watched: the names of the collectives handed to the engine. */
async function watchingNames(fn) {
  const dispatcher = core.current('test').dispatcher;
  const comm = dispatcher.comm;
  const names = [];
  dispatcher.comm = new Proxy(comm, {
    get(target, key) {
      if (key === 'submit') return (items, willWait) => (names.push(...items.map((it) => it.name)), target.submit(items, willWait));
      if (key === 'collective') return (...args) => (names.push(args[5]), target.collective(...args));
      const v = target[key];
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  try {
    return { result: await fn(), names };
  } finally {
    dispatcher.comm = comm;
  }
}

async function trainVariant(variant, mine, b) {
  const options = { 'fit-plain': { overlap: false }, 'fit-k2': { backwardPassesPerStep: 2 }, 'fit-bf16': { compression: 'bf16' } }[variant] ?? {};
  const opt = new DistributedOptimizer(tf.train.sgd(LR), options);
  const model = buildModel();
  model.compile({ optimizer: opt, loss: 'meanSquaredError' });
  if (variant === 'dataset') {
    const ds = tf.data.zip({ xs: tf.data.array(tf.unstack(mine.x)), ys: tf.data.array(tf.unstack(mine.y)) }).batch(b);
    await model.fitDataset(ds, { epochs: EPOCHS, verbose: 0 });
  } else if (variant === 'loop') {
    const n = mine.x.shape[0];
    for (let e = 0; e < EPOCHS; e++) {
      for (let at = 0; at < n; at += b) {
        const size = Math.min(b, n - at);
        const xb = mine.x.slice(at, size), yb = mine.y.slice(at, size);
        opt.setSampleCount(size);
        opt.minimize(() => tf.losses.meanSquaredError(yb, model.predict(xb)));
      }
      // A rank whose data ends first serves the others' remaining steps with zeros and a count of 0, then
      // takes the weights and optimizer state of the rank that took every step.
      await joinEpoch(model, opt);
    }
  } else {
    await model.fit(mine.x, mine.y, { batchSize: b, epochs: EPOCHS, shuffle: false, verbose: 0 });
  }
  return { weights: flatWeights(model), steps: opt.stats.steps };
}

async function uneven(r, p) {
  const n = Number(process.argv[3]), b = Number(process.argv[4]);
  const variants = (process.argv[5] || 'fit').split(',');
  const data = dataSet(n);
  const mine = shard(data.x, data.y, { remainder: 'keep' });
  const out = { samples: mine.x.shape[0], variants: {} };
  for (const variant of variants) {
    const { result: { weights, steps }, names } = await watchingNames(() => trainVariant(variant, mine, b));
    const want = await reference(data, n, b, p, variant === 'fit-k2' ? 2 : 1);
    let maxDiff = 0;
    for (let i = 0; i < want.length; i++) maxDiff = Math.max(maxDiff, Math.abs(weights[i] - want[i]));
    const initial = flatWeights(buildModel());
    let moved = 0;
    for (let i = 0; i < want.length; i++) moved = Math.max(moved, Math.abs(want[i] - initial[i]));
    const carried = names.filter((n) => typeof n === 'string' && n.startsWith('tfjs bucket') && n.endsWith(' +1')).length;
    const separate = names.filter((n) => n === 'tfjs samples').length;
    out.variants[variant] = { maxDiff, moved, steps, carried, separate };
  }
  await hora.barrier();
  return out;
}

runScenarios(hora, { uneven });
