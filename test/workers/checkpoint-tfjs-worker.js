'use strict';
// Runs inside every rank of a `hora run` job for test/checkpoint.test.js: hora/tfjs saveCheckpoint and
// loadCheckpoint of a model and a DistributedOptimizer (Adam or momentum, CKPT_OPTIMIZER). CKPT_DIR is the
// checkpoint directory.
//
//   save      3 steps, saveCheckpoint at step 3, 2 more steps; then a fresh model and optimizer load step 3
//             and run the same 2 steps: reports the state at step 3 and both end weights
//   load      a fresh model and optimizer (other initial weights) load the latest step: reports their state
//   wrong     a model with another layer width loads: reports the outcome, and that its weights did not change
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { DistributedOptimizer, saveCheckpoint, loadCheckpoint } = require('../../dist/adapters/tfjs/index.js');
const { describeError, prng, runScenarios } = require('../support/worker-util');

const B = 12;

function buildModel(seed, units = 16) {
  const model = tf.sequential({ layers: [tf.layers.dense({ inputShape: [8], units, activation: 'tanh' }), tf.layers.dense({ units: 4 })] });
  const rand = prng(seed);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => rand() - 0.5), w.shape)));
  return model;
}

const makeOptimizer = () => new DistributedOptimizer(process.env.CKPT_OPTIMIZER === 'momentum' ? tf.train.momentum(0.05, 0.9) : tf.train.adam(0.01));

/** This rank's part of the global batch of step s (B samples, the same on every world size that divides B). */
function batch(s) {
  const rand = prng(1000 + s);
  const x = Float32Array.from({ length: B * 8 }, () => rand() * 2 - 1);
  const y = Float32Array.from({ length: B * 4 }, () => rand());
  const m = B / hora.size(), r = hora.rank();
  return { x: tf.tensor2d(x.slice(r * m * 8, (r + 1) * m * 8), [m, 8]), y: tf.tensor2d(y.slice(r * m * 4, (r + 1) * m * 4), [m, 4]) };
}

function train(model, optimizer, from, to) {
  for (let s = from; s < to; s++) {
    const { x, y } = batch(s);
    optimizer.minimize(() => tf.losses.meanSquaredError(y, model.apply(x)));
    tf.dispose([x, y]);
  }
}

const b64 = (arrays) => Buffer.concat(arrays.map((a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength))).toString('base64');

/** The model's weights and the optimizer's state, as base64 of their bytes. */
async function stateOf(model, optimizer) {
  const named = await optimizer.getWeights();
  const hidden = Object.keys(optimizer.optimizer).sort().filter((k) => optimizer.optimizer[k] instanceof tf.Variable).map((k) => optimizer.optimizer[k].dataSync());
  return {
    weights: b64(model.getWeights().map((w) => w.dataSync())),
    slots: b64(named.slice(1).map((w) => w.tensor.dataSync())),
    slotNames: named.map((w) => w.name),
    iterations: optimizer.iterations,
    hidden: b64(hidden),
  };
}

runScenarios(hora, {
  async save() {
    const dir = process.env.CKPT_DIR;
    const model = buildModel(1);
    const optimizer = makeOptimizer();
    train(model, optimizer, 0, 3);
    await saveCheckpoint(dir, { model, optimizer }, { step: 3, keep: 2 });
    const atSave = await stateOf(model, optimizer);
    train(model, optimizer, 3, 5);
    const end = b64(model.getWeights().map((w) => w.dataSync()));

    const model2 = buildModel(2);
    const optimizer2 = makeOptimizer();
    const step = await loadCheckpoint(dir, { model: model2, optimizer: optimizer2 });
    const loaded = await stateOf(model2, optimizer2);
    train(model2, optimizer2, 3, 5);
    return { ok: true, step, atSave, loaded, end, resumedEnd: b64(model2.getWeights().map((w) => w.dataSync())) };
  },

  async load() {
    const model = buildModel(3);
    const optimizer = makeOptimizer();
    const step = await loadCheckpoint(process.env.CKPT_DIR, { model, optimizer });
    return { ok: true, step, loaded: await stateOf(model, optimizer) };
  },

  async oneRankWrong() {
    const dir = process.env.CKPT_DIR;
    const one = hora.rank() === 1;
    const model = buildModel(5, one ? 17 : 16);
    const optimizer = makeOptimizer();
    const settle = async (call) => {
      try {
        return { ok: true, value: await call() };
      } catch (e) {
        return describeError(e);
      }
    };
    const before = b64(model.getWeights().map((w) => w.dataSync()));
    return {
      ok: true,
      save: await settle(() => saveCheckpoint(dir, one ? { model: null } : { model, optimizer }, { step: 9 })),
      saveOption: await settle(() => saveCheckpoint(dir, { model, optimizer }, one ? { step: 9, kep: 1 } : { step: 9 })),
      load: await settle(() => loadCheckpoint(dir, { model, optimizer })),
      unchanged: before === b64(model.getWeights().map((w) => w.dataSync())),
    };
  },

  async wrong() {
    const model = buildModel(4, 17);
    const optimizer = makeOptimizer();
    const before = b64(model.getWeights().map((w) => w.dataSync()));
    let outcome;
    try {
      outcome = { ok: true, step: await loadCheckpoint(process.env.CKPT_DIR, { model, optimizer }) };
    } catch (e) {
      outcome = describeError(e);
    }
    return { ok: true, outcome, unchanged: before === b64(model.getWeights().map((w) => w.dataSync())) };
  },
});
