'use strict';
// Runs inside every rank of a `hora run` job for test/tfjs-zero.test.js: DistributedOptimizer with
// shard 'none', 'optimizer' and 'gradients' on the same model, data and steps; reports each run's weights
// and optimizer state so the test compares the sharded runs with the unsharded one.
//
//   equiv       every tf.train optimizer (custom loop, overlap on), then Adam with overlap off, fp16, bf16,
//               backwardPassesPerStep 2, uneven sample counts (setSampleCount), and model.fit; getWeights,
//               broadcastOptimizer and model.save (includeOptimizer) in each mode
//   save        4 ranks: 3 steps with shard 'optimizer', saveCheckpoint at step 3 (ZERO_DIR)
//   load        any world size: a fresh model and optimizer (ZERO_SHARD) load step 3 and train 2 more steps;
//               an unsharded run of all 5 steps at this world size is the reference
//   joined      rank 1's data ends a step early: the others' step fails, on every rank, with the reason
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { DistributedOptimizer, broadcastOptimizer, saveCheckpoint, loadCheckpoint } = require('../../dist/adapters/tfjs/index.js');
const { prng, runScenarios } = require('../support/worker-util');

// 7 -> 5 -> 3: weights of 35, 5, 15 and 3 values (58 in all): none divides by 3 or 4, and at 4 ranks the
// last bias leaves rank 3 an empty block.
const IN = 7, HID = 5, OUT = 3;
const B = 12; // global batch: divides by 2, 3 and 4
const STEPS = 4;

function buildModel(seed) {
  const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [IN], units: HID, activation: 'tanh' }), tf.layers.dense({ units: OUT })] });
  const rand = prng(seed);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => rand() - 0.5), w.shape)));
  return model;
}

const OPTIMIZERS = {
  sgd: () => tf.train.sgd(0.1),
  momentum: () => tf.train.momentum(0.05, 0.9),
  adam: () => tf.train.adam(0.01),
  adamax: () => tf.train.adamax(0.01),
  rmsprop: () => tf.train.rmsprop(0.01),
  'rmsprop-centered': () => tf.train.rmsprop(0.01, 0.9, 0.5, 1e-7, true),
  adagrad: () => tf.train.adagrad(0.1),
  adadelta: () => tf.train.adadelta(1.0),
};

/** Step s's global batch; this rank's part of it (counts: the samples of each rank, default even). */
function batch(s, counts) {
  const rand = prng(1000 + s);
  const x = Float32Array.from({ length: B * IN }, () => rand() * 2 - 1);
  const y = Float32Array.from({ length: B * OUT }, () => rand());
  const p = hora.size(), r = hora.rank();
  const c = counts || Array.from({ length: p }, () => B / p);
  const from = c.slice(0, r).reduce((a, b) => a + b, 0), m = c[r];
  return { x: tf.tensor2d(x.slice(from * IN, (from + m) * IN), [m, IN]), y: tf.tensor2d(y.slice(from * OUT, (from + m) * OUT), [m, OUT]), m };
}

function train(model, optimizer, from, to, counts) {
  for (let s = from; s < to; s++) {
    const { x, y, m } = batch(s, counts);
    if (counts) optimizer.setSampleCount(m);
    optimizer.minimize(() => tf.losses.meanSquaredError(y, model.apply(x)));
    tf.dispose([x, y]);
  }
}

const floats = (arrays) => arrays.flatMap((a) => Array.from(a));
const b64 = (arrays) => Buffer.concat(arrays.map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength))).toString('base64');

/** Optimizer-state values this rank holds (the wrapped optimizer's slots), in floats. */
async function heldState(optimizer) {
  const named = await optimizer.optimizer.getWeights();
  const n = named.slice(1).reduce((sum, w) => sum + w.tensor.size, 0);
  named[0].tensor.dispose();
  return n;
}

/** One run: model, optimizer, steps; what it ends with. */
async function run(kind, shard, options = {}, how = {}) {
  const tensorsBefore = tf.memory().numTensors;
  const model = buildModel(1);
  const optimizer = new DistributedOptimizer(OPTIMIZERS[kind](), { shard, ...options });
  let fitReads = null;
  if (how.fit) {
    model.compile({ optimizer, loss: 'meanSquaredError' });
    // The global batches of the custom loop, one per step: each rank fits its part, batch B / size, in order.
    const xs = [], ys = [];
    for (let s = 0; s < STEPS; s++) {
      const { x, y } = batch(s);
      xs.push(x);
      ys.push(y);
    }
    const x = tf.concat(xs), y = tf.concat(ys);
    // How often fit (its epoch's end: joinEpoch) reads the optimizer's whole state.
    let reads = 0;
    const getWeights = optimizer.getWeights;
    optimizer.getWeights = function () { reads++; return getWeights.call(this); };
    await model.fit(x, y, { batchSize: B / hora.size(), epochs: 1, shuffle: false, verbose: 0 });
    delete optimizer.getWeights;
    fitReads = reads;
    tf.dispose([x, y, ...xs, ...ys]);
  } else {
    train(model, optimizer, 0, STEPS, how.counts);
  }
  const weights = model.getWeights().map((w) => w.dataSync());
  // tfjs's Adamax has no getWeights ('not implemented'), sharded or not: its state is neither read nor broadcast.
  const readable = kind !== 'adamax';
  const held = readable ? await heldState(optimizer) : null;
  let state = null;
  if (readable) {
    const full = await optimizer.getWeights();
    state = { names: full.map((w) => w.name.replace(/^dense_Dense\d+/, 'dense')), values: floats(full.slice(1).map((w) => w.tensor.dataSync())), iter: full[0].tensor.dataSync()[0] };
    // broadcastOptimizer (getWeights, broadcast, setWeights) then two more steps: the state went through whole.
    await broadcastOptimizer(optimizer, 0);
  }
  if (!how.fit) train(model, optimizer, STEPS, STEPS + 2, how.counts);
  const after = model.getWeights().map((w) => w.dataSync());
  let saved = null;
  if (how.save) {
    await model.save(tf.io.withSaveHandler(async (artifacts) => {
      saved = { names: artifacts.weightSpecs.map((s) => s.name.replace(/^dense_Dense\d+/, 'dense')), values: Array.from(new Float32Array(artifacts.weightData)) };
      return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: 'JSON' } };
    }), { includeOptimizer: true });
  }
  const out = { weights: floats(weights), base64: b64(weights), after: floats(after), afterBase64: b64(after), state, held, saved, iterations: optimizer.iterations, fitReads };
  optimizer.dispose();
  model.layers.forEach((l) => l.dispose());
  out.leaked = tf.memory().numTensors - tensorsBefore;
  return out;
}

runScenarios(hora, {
  async equiv() {
    const runs = {};
    const modes = ['none', 'optimizer', 'gradients'];
    for (const kind of Object.keys(OPTIMIZERS)) {
      for (const shard of modes) runs[`${kind} ${shard}`] = await run(kind, shard, {}, { save: kind === 'adam' });
    }
    const variants = {
      'overlap=false': [{ overlap: false }, {}],
      fp16: [{ compression: 'fp16' }, {}],
      bf16: [{ compression: 'bf16', overlap: false }, {}],
      'k=2': [{ backwardPassesPerStep: 2 }, {}],
      'k=2 overlap=false': [{ backwardPassesPerStep: 2, overlap: false }, {}],
      'bucket=tiny': [{ bucketMB: 1e-6 }, {}],
      uneven: [{}, { counts: hora.size() === 2 ? [7, 5] : hora.size() === 3 ? [5, 4, 3] : [4, 3, 3, 2] }],
      fit: [{}, { fit: true }],
    };
    for (const [name, [options, how]] of Object.entries(variants)) {
      for (const shard of modes) runs[`adam ${name} ${shard}`] = await run('adam', shard, options, how);
    }
    return { ok: true, runs, tensors: tf.memory().numTensors };
  },

  async save() {
    const model = buildModel(1);
    const optimizer = new DistributedOptimizer(tf.train.adam(0.01), { shard: 'optimizer' });
    train(model, optimizer, 0, 3);
    await saveCheckpoint(process.env.ZERO_DIR, { model, optimizer }, { step: 3 });
    return { ok: true };
  },

  async load() {
    // Reference: the unsharded optimizer, all 5 steps, at this world size.
    const ref = buildModel(1);
    const refOptimizer = new DistributedOptimizer(tf.train.adam(0.01));
    train(ref, refOptimizer, 0, 5);
    const model = buildModel(2);
    const optimizer = new DistributedOptimizer(tf.train.adam(0.01), { shard: process.env.ZERO_SHARD });
    const step = await loadCheckpoint(process.env.ZERO_DIR, { model, optimizer });
    train(model, optimizer, step, 5);
    const weights = model.getWeights().map((w) => w.dataSync());
    return { ok: true, step, weights: floats(weights), base64: b64(weights), ref: floats(ref.getWeights().map((w) => w.dataSync())), iterations: optimizer.iterations };
  },

  async joined() {
    const model = buildModel(1);
    const optimizer = new DistributedOptimizer(tf.train.adam(0.01), { shard: process.env.ZERO_SHARD });
    const steps = hora.rank() === 1 ? 1 : 2;
    try {
      train(model, optimizer, 0, steps);
      await hora.join();
      return { ok: true };
    } catch (e) {
      return { ok: false, code: e.code, message: e.message };
    }
  },
});
