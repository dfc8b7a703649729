'use strict';
// Runs inside every rank of a `hora run` job for test/tfjs-zero3.test.js: DistributedOptimizer with
// shard: 'weights' (ZeRO stage 3) against the unsharded DistributedOptimizer on the same ranks and data.
// Usage: node tfjs-zero3-worker.js <scenario>
//   compare   for each model (Dense layers; Conv2D + Flatten + Dense), optimizer (sgd, momentum, adam,
//             rmsprop) and way in (model.fit, a minimize loop): the same initial weights trained unsharded
//             (model A) and sharded (model B); reports the largest relative difference of each weight
//             (max |a - b| / max |a|), of the optimizer state (getWeights, gathered) and of predict(), the
//             shapes model.getWeights() and model.save() give, and a hash of B's gathered weights
//   options   compare's Dense model with Adam in a loop, with compression fp16 and bf16, backwardPassesPerStep 2
//             and op 'sum'; the Dense model built with tf.model, through fit; the Conv2D model in a loop with Adamax, Adagrad and Adadelta (model.fit
//             with the unsharded optimizer and Adamax fails at the epoch's end: tfjs's Adamax has no getWeights)
//   refused   a model with a BatchNormalization layer, an LSTM, a missing model, a model given without shard, a
//             shard other than 'weights', an ElasticState of a sharded model, a model sharded twice, an
//             optimizer of another kind than tf.train's
//   memory    tensor bytes held between steps (tf.memory().numBytes less what was there before the model)
//             by an MLP trained with Adam, unsharded and sharded, and the sharded pass's peak
//   save      stage 3 with Adam: 3 steps, saveCheckpoint(CKPT_DIR) at step 3, 2 more steps; reports B's
//             gathered weights after step 3 and at the end
//   load      a fresh sharded model loads CKPT_DIR (saved at another world size) and runs the same 2 steps
//   crossload an unsharded run saves at step 3; a sharded model loads it and runs 2 steps more, as the unsharded
//             one does; then an unsharded optimizer loads the sharded one's checkpoint (refused)
//   overlap   the same sharded training with overlap: false and overlap: true (compare's models through fit and a
//             loop, with fp16, bf16 and backwardPassesPerStep 2; a 3-layer MLP whose layers run in another order on odd
//             steps, one of them twice); reports whether the weights are bit-identical, the overlap counters
//             (optimizer.weightShards.overlapStats) of each run, and, for the reordered MLP, the largest relative
//             difference from the unsharded optimizer
const crypto = require('node:crypto');
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { DistributedOptimizer, ElasticState, broadcastOptimizer, saveCheckpoint, loadCheckpoint } = require('../../dist/adapters/tfjs/index.js');
const { describeError, prng, runScenarios } = require('../support/worker-util');

tf.setBackend('cpu');

/** Global batch: divides by 2, 3 and 4 ranks. */
const B = 12;

const MODELS = {
  // Counts 7x5 = 35 and 5, 5x3 = 15 and 3: none divides by 2, 3 and 4 alike (a bias of 3 leaves rank 3 nothing).
  dense: { input: [7], output: 3, layers: () => [tf.layers.dense({ inputShape: [7], units: 5, activation: 'tanh' }), tf.layers.dense({ units: 3 })] },
  // Conv kernel 3x3x2x3 = 54, bias 3; dense 48x2 = 96, bias 2.
  conv: {
    input: [6, 6, 2], output: 2,
    layers: () => [tf.layers.conv2d({ inputShape: [6, 6, 2], filters: 3, kernelSize: 3, activation: 'relu' }), tf.layers.flatten(), tf.layers.dense({ units: 2 })],
  },
};

const OPTIMIZERS = {
  sgd: () => tf.train.sgd(0.1),
  momentum: () => tf.train.momentum(0.1, 0.9),
  adam: () => tf.train.adam(0.01),
  rmsprop: () => tf.train.rmsprop(0.01),
};
/** The other tf.train optimizers, run in 'options' only. */
const MORE_OPTIMIZERS = {
  adamax: () => tf.train.adamax(0.01),
  adagrad: () => tf.train.adagrad(0.1),
  adadelta: () => tf.train.adadelta(1),
};

function buildModel(kind, seed) {
  let model;
  if (kind === 'functional') {
    // The Dense model through the functional API (tf.model: no inner model, an InputLayer among the layers).
    const input = tf.input({ shape: [7] });
    const output = MODELS.dense.layers().reduce((x, layer) => layer.apply(x), input);
    model = tf.model({ inputs: input, outputs: output });
  } else {
    model = tf.sequential({ layers: MODELS[kind].layers() });
  }
  const rand = prng(seed);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => rand() - 0.5), w.shape)));
  return model;
}

/** The global data of a run: `steps` batches of B samples; each rank takes its B / size rows. */
function data(kind, steps, seed) {
  const { input, output } = MODELS[kind];
  const per = input.reduce((a, b) => a * b, 1);
  const rand = prng(seed);
  const n = steps * B;
  const x = Float32Array.from({ length: n * per }, () => rand() * 2 - 1);
  const y = Float32Array.from({ length: n * output }, () => rand());
  const m = B / hora.size(), r = hora.rank();
  // Rank r's rows of each batch, in order: what model.fit with batchSize m takes as its batches.
  const rows = [];
  for (let s = 0; s < steps; s++) for (let i = 0; i < m; i++) rows.push(s * B + r * m + i);
  const pick = (a, w) => Float32Array.from(rows.flatMap((row) => Array.from(a.subarray(row * w, (row + 1) * w))));
  return { x: tf.tensor(pick(x, per), [rows.length, ...input]), y: tf.tensor(pick(y, output), [rows.length, output]), m };
}

async function train(model, optimizer, way, { x, y, m }, steps) {
  if (way === 'fit') {
    model.compile({ optimizer, loss: 'meanSquaredError' });
    await model.fit(x, y, { batchSize: m, epochs: 1, shuffle: false, verbose: 0 });
    return;
  }
  for (let s = 0; s < steps; s++) {
    const xs = tf.slice(x, s * m, m), ys = tf.slice(y, s * m, m);
    optimizer.minimize(() => tf.losses.meanSquaredError(ys, model.apply(xs)));
    tf.dispose([xs, ys]);
  }
}

/** max |a - b| / max |a| (0 where a is all zeros and b equals it). */
function relative(a, b) {
  let diff = 0, scale = 0;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(a[i]));
  }
  return scale === 0 ? diff : diff / scale;
}

const hash = (arrays) => {
  const h = crypto.createHash('sha256');
  for (const a of arrays) h.update(Buffer.from(a.buffer, a.byteOffset, a.byteLength));
  return h.digest('hex');
};

/** What model.save() writes: the weights' names and shapes (through a save handler, no file). */
async function savedSpecs(model) {
  let specs = null;
  await model.save(tf.io.withSaveHandler(async (artifacts) => {
    specs = artifacts.weightSpecs.map((s) => ({ name: s.name, shape: s.shape }));
    return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: 'JSON' } };
  }));
  return specs;
}

async function compareOne(kind, optName, way, options = {}) {
  const steps = 4;
  const set = data(kind, steps, 7);
  const a = buildModel(kind, 11);
  const b = buildModel(kind, 11);
  const make = OPTIMIZERS[optName] || MORE_OPTIMIZERS[optName];
  const optA = new DistributedOptimizer(make(), options);
  const optB = new DistributedOptimizer(make(), { ...options, shard: 'weights', model: b });
  if (optName !== 'adamax') await broadcastOptimizer(optB);
  await train(a, optA, way, set, steps);
  await train(b, optB, way, set, steps);
  const wa = a.getWeights().map((w) => w.dataSync());
  const gathered = b.getWeights();
  const wb = gathered.map((w) => w.dataSync());
  // tfjs's Adamax has no getWeights(): its state is compared only through the weights it gives.
  const stateOf = async (o) => (optName === 'adamax' ? [] : (await o.getWeights()).map((w) => w.tensor.dataSync()));
  const sa = await stateOf(optA);
  const sb = await stateOf(optB);
  const probe = tf.tidy(() => tf.slice(set.x, 0, 2));
  const pa = a.predict(probe).dataSync(), pb = b.predict(probe).dataSync();
  const out = {
    weights: wa.map((w, i) => relative(w, wb[i])),
    state: sa.length === sb.length ? sa.map((s, i) => relative(s, sb[i])) : `optimizer weights: ${sa.length} unsharded, ${sb.length} sharded`,
    predict: relative(pa, pb),
    shapes: { unsharded: a.getWeights().map((w) => w.shape), sharded: gathered.map((w) => w.shape) },
    saved: { unsharded: await savedSpecs(a), sharded: await savedSpecs(b) },
    trainable: b.trainableWeights.map((w) => w.shape),
    hash: hash(wb),
  };
  // setWeights through the views: B takes A's weights, each rank its blocks.
  b.setWeights(a.getWeights());
  out.setWeights = hash(b.getWeights().map((w) => w.dataSync())) === hash(a.getWeights().map((w) => w.dataSync()));
  if (way === 'loop') for (const [m, o] of [[a, optA], [b, optB]]) m.compile({ optimizer: o, loss: 'meanSquaredError' });
  const evalA = a.evaluate(probe, tf.tidy(() => tf.slice(set.y, 0, 2))).dataSync()[0];
  const evalB = b.evaluate(probe, tf.tidy(() => tf.slice(set.y, 0, 2))).dataSync()[0];
  out.evaluate = evalA === evalB;
  tf.dispose([probe, set.x, set.y]);
  return out;
}

async function refusedOne(make) {
  try {
    make();
    return { ok: true };
  } catch (e) {
    return describeError(e);
  }
}

/** Bytes held now, past `base`. */
const bytesSince = (base) => tf.memory().numBytes - base;

async function memoryRun(shard) {
  const base = tf.memory().numBytes;
  const model = tf.sequential({ layers: [
    tf.layers.dense({ inputShape: [64], units: 301, activation: 'relu' }), tf.layers.dense({ units: 257, activation: 'relu' }), tf.layers.dense({ units: 10 }),
  ] });
  const params = model.getWeights().reduce((n, w) => n + w.size, 0);
  const optimizer = new DistributedOptimizer(tf.train.adam(0.001), shard ? { shard: 'weights', model } : {});
  const set = data('memory', 4, 3);
  const dataBytes = set.x.size * 4 + set.y.size * 4;
  const steps = async (from, to) => {
    for (let s = from; s < to; s++) {
      const xs = tf.slice(set.x, s * set.m, set.m), ys = tf.slice(set.y, s * set.m, set.m);
      optimizer.minimize(() => tf.losses.meanSquaredError(ys, model.apply(xs)));
      tf.dispose([xs, ys]);
    }
  };
  await steps(0, 2);
  const held = bytesSince(base) - dataBytes;
  const tensors = tf.memory().numTensors;
  await steps(2, 4);
  const out = {
    params, held, heldLater: bytesSince(base) - dataBytes, tensors, tensorsLater: tf.memory().numTensors,
    peak: shard ? optimizer.weightShards.peakBytes - base - dataBytes : null,
  };
  tf.dispose([set.x, set.y]);
  model.dispose();
  optimizer.dispose();
  return out;
}
/** The weights of a model trained sharded from the same start with the given options, and its overlap counters. */
async function shardedRun(kind, optName, way, options) {
  const steps = 4;
  const set = data(kind, steps, 7);
  const model = buildModel(kind, 11);
  const optimizer = new DistributedOptimizer(OPTIMIZERS[optName](), { ...options, shard: 'weights', model });
  await train(model, optimizer, way, set, steps);
  const weights = model.getWeights().map((w) => w.dataSync());
  tf.dispose([set.x, set.y]);
  return { weights, stats: { ...optimizer.weightShards.overlapStats } };
}

/**
 * Layers 0, 1, 2 of a 5-5-5-3 MLP run 0 1 2 on even steps and 2 0 0 1 on odd ones (layer 0 twice): the order
 * learnt on one step is wrong on the next. `shard`: the sharded optimizer's options, or null for unsharded.
 */
async function reorderedRun(shard) {
  const model = tf.sequential({ layers: [
    tf.layers.dense({ inputShape: [5], units: 5, activation: 'tanh' }), tf.layers.dense({ units: 5, activation: 'tanh' }), tf.layers.dense({ units: 5 }),
  ] });
  const rand = prng(13);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => rand() - 0.5), w.shape)));
  const optimizer = new DistributedOptimizer(tf.train.adam(0.01), shard ? { ...shard, shard: 'weights', model } : {});
  const m = B / hora.size();
  const drand = prng(17 + hora.rank());
  for (let s = 0; s < 6; s++) {
    const order = s % 2 === 0 ? [0, 1, 2] : [2, 0, 0, 1];
    const xs = tf.tensor(Float32Array.from({ length: m * 5 }, () => drand() * 2 - 1), [m, 5]);
    const ys = tf.tensor(Float32Array.from({ length: m * 5 }, () => drand()), [m, 5]);
    optimizer.minimize(() => tf.losses.meanSquaredError(ys, order.reduce((h, i) => model.layers[i].apply(h), xs)));
    tf.dispose([xs, ys]);
  }
  const weights = model.getWeights().map((w) => w.dataSync());
  return { weights, stats: shard ? { ...optimizer.weightShards.overlapStats } : null };
}

MODELS.memory = { input: [64], output: 10 };
MODELS.functional = { input: [7], output: 3 };

runScenarios(hora, {
  async compare() {
    const out = {};
    const only = process.env.ZERO3_ONLY ? process.env.ZERO3_ONLY.split(',') : null;
    for (const kind of ['dense', 'conv']) {
      for (const optName of Object.keys(OPTIMIZERS)) {
        for (const way of ['fit', 'loop']) {
          const key = `${kind} ${optName} ${way}`;
          if (only && !only.includes(key)) continue;
          out[key] = await compareOne(kind, optName, way);
        }
      }
    }
    return out;
  },

  async options() {
    const out = {};
    for (const [name, options] of Object.entries({ fp16: { compression: 'fp16' }, bf16: { compression: 'bf16' }, 'backwardPassesPerStep 2': { backwardPassesPerStep: 2 }, 'op sum': { op: 'sum' } })) {
      out[name] = await compareOne('dense', 'adam', 'loop', options);
    }
    for (const name of Object.keys(MORE_OPTIMIZERS)) out[name] = await compareOne('conv', name, 'loop');
    out.functional = await compareOne('functional', 'adam', 'fit');
    return out;
  },

  async overlap() {
    const out = {};
    const runs = [['dense', 'adam', 'fit', {}], ['dense', 'sgd', 'loop', {}], ['conv', 'momentum', 'fit', {}], ['conv', 'rmsprop', 'loop', {}],
      ['dense', 'adam', 'loop', { compression: 'fp16' }], ['dense', 'adam', 'loop', { compression: 'bf16' }],
      ['dense', 'adam', 'loop', { backwardPassesPerStep: 2 }], ['conv', 'adam', 'fit', { bucketMB: 1e-4 }]];
    for (const [kind, optName, way, options] of runs) {
      const key = `${kind} ${optName} ${way}${Object.entries(options).map(([k, v]) => ` ${k} ${v}`).join('')}`;
      const off = await shardedRun(kind, optName, way, { ...options, overlap: false });
      const on = await shardedRun(kind, optName, way, { ...options, overlap: true });
      out[key] = { identical: hash(off.weights) === hash(on.weights), off: off.stats, on: on.stats, hash: hash(on.weights) };
    }
    const unsharded = await reorderedRun(null);
    const off = await reorderedRun({ overlap: false });
    const on = await reorderedRun({ overlap: true });
    out.reordered = {
      identical: hash(off.weights) === hash(on.weights), off: off.stats, on: on.stats, hash: hash(on.weights),
      relative: unsharded.weights.map((w, i) => relative(w, on.weights[i])),
    };
    return out;
  },

  async refused() {
    const bn = tf.sequential({ layers: [tf.layers.dense({ inputShape: [4], units: 3 }), tf.layers.batchNormalization({ name: 'bn_refused' }), tf.layers.dense({ units: 2 })] });
    const before = bn.getWeights().map((w) => Array.from(w.dataSync()));
    const out = {
      batchNorm: await refusedOne(() => new DistributedOptimizer(tf.train.sgd(0.1), { shard: 'weights', model: bn })),
      lstm: await refusedOne(() => new DistributedOptimizer(tf.train.sgd(0.1), {
        shard: 'weights', model: tf.sequential({ layers: [tf.layers.lstm({ inputShape: [3, 2], units: 2, name: 'lstm_refused' })] }),
      })),
      noModel: await refusedOne(() => new DistributedOptimizer(tf.train.sgd(0.1), { shard: 'weights' })),
      notAModel: await refusedOne(() => new DistributedOptimizer(tf.train.sgd(0.1), { shard: 'weights', model: 42 })),
      modelAlone: await refusedOne(() => new DistributedOptimizer(tf.train.sgd(0.1), { model: bn })),
      badShard: await refusedOne(() => new DistributedOptimizer(tf.train.sgd(0.1), { shard: 'everything', model: bn })),
    };
    const elastic = buildModel('dense', 3);
    const elasticOptimizer = new DistributedOptimizer(tf.train.sgd(0.1), { shard: 'weights', model: elastic });
    out.elastic = await refusedOne(() => new ElasticState(elastic));
    out.elasticNoCheckpoint = await refusedOne(() => new ElasticState(elastic, elasticOptimizer));
    out.twice = await refusedOne(() => new DistributedOptimizer(tf.train.sgd(0.1), { shard: 'weights', model: elastic }));
    class Lamb extends tf.Optimizer {
      applyGradients() {}
      getClassName() { return 'Lamb'; }
    }
    out.lamb = await refusedOne(() => new DistributedOptimizer(new Lamb(), { shard: 'weights', model: bn }));
    out.unchanged = JSON.stringify(bn.getWeights().map((w) => Array.from(w.dataSync()))) === JSON.stringify(before) &&
      bn.trainableWeights.every((w, i) => w.shape.join() === bn.getWeights()[i].shape.join());
    return out;
  },

  async memory() {
    const unsharded = await memoryRun(false);
    const sharded = await memoryRun(true);
    return { unsharded, sharded };
  },

  async save() {
    const set = data('dense', 5, 21);
    const model = buildModel('dense', 5);
    const optimizer = new DistributedOptimizer(tf.train.adam(0.01), { shard: 'weights', model });
    const step = async (s) => {
      const xs = tf.slice(set.x, s * set.m, set.m), ys = tf.slice(set.y, s * set.m, set.m);
      optimizer.minimize(() => tf.losses.meanSquaredError(ys, model.apply(xs)));
      tf.dispose([xs, ys]);
    };
    for (let s = 0; s < 3; s++) await step(s);
    await saveCheckpoint(process.env.CKPT_DIR, { model, optimizer }, { step: 3 });
    const atSave = model.getWeights().map((w) => Array.from(w.dataSync()));
    for (let s = 3; s < 5; s++) await step(s);
    return { atSave, end: model.getWeights().map((w) => Array.from(w.dataSync())) };
  },

  async crossload() {
    const dir = process.env.CKPT_DIR;
    const set = data('dense', 5, 21);
    const steps = (model, optimizer, from, to) => {
      for (let s = from; s < to; s++) {
        const xs = tf.slice(set.x, s * set.m, set.m), ys = tf.slice(set.y, s * set.m, set.m);
        optimizer.minimize(() => tf.losses.meanSquaredError(ys, model.apply(xs)));
        tf.dispose([xs, ys]);
      }
    };
    const weightsOf = (model) => model.getWeights().map((w) => Array.from(w.dataSync()));
    // Unsharded run: 3 steps, saved, 2 more.
    const u = buildModel('dense', 5);
    const optU = new DistributedOptimizer(tf.train.adam(0.01));
    steps(u, optU, 0, 3);
    await saveCheckpoint(`${dir}/unsharded`, { model: u, optimizer: optU }, { step: 3 });
    steps(u, optU, 3, 5);
    // A sharded model loads the unsharded checkpoint and runs the same 2 steps.
    const s = buildModel('dense', 99);
    const optS = new DistributedOptimizer(tf.train.adam(0.01), { shard: 'weights', model: s });
    await loadCheckpoint(`${dir}/unsharded`, { model: s, optimizer: optS });
    steps(s, optS, 3, 5);
    // An unsharded optimizer refuses a checkpoint of a sharded one.
    await saveCheckpoint(`${dir}/sharded`, { model: s, optimizer: optS }, { step: 5 });
    const v = buildModel('dense', 98);
    const before = weightsOf(v);
    let refused = null;
    try {
      await loadCheckpoint(`${dir}/sharded`, { model: v, optimizer: new DistributedOptimizer(tf.train.adam(0.01)) });
    } catch (e) {
      refused = describeError(e);
    }
    return { unsharded: weightsOf(u), sharded: weightsOf(s), iterations: optS.iterations, refused, unchanged: JSON.stringify(weightsOf(v)) === JSON.stringify(before) };
  },

  async load() {
    // Other initial weights: everything must come from the checkpoint.
    const model = buildModel('dense', 99);
    const optimizer = new DistributedOptimizer(tf.train.adam(0.01), { shard: 'weights', model });
    const step = await loadCheckpoint(process.env.CKPT_DIR, { model, optimizer });
    const loaded = model.getWeights().map((w) => Array.from(w.dataSync()));
    const set = data('dense', 5, 21);
    for (let s = 3; s < 5; s++) {
      const xs = tf.slice(set.x, s * set.m, set.m), ys = tf.slice(set.y, s * set.m, set.m);
      optimizer.minimize(() => tf.losses.meanSquaredError(ys, model.apply(xs)));
      tf.dispose([xs, ys]);
    }
    return { step, loaded, iterations: optimizer.iterations, end: model.getWeights().map((w) => Array.from(w.dataSync())) };
  },
});
