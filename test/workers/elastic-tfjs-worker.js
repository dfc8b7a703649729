'use strict';
// ElasticState and ElasticCallback of hora/tfjs under hora run: each scenario reports what it saw, tensors
// as base64 of their bytes so that the test compares them bit for bit.
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { DistributedOptimizer, ElasticState, ElasticCallback, shard } = require('../../dist/adapters/tfjs/index.js');
const { runScenarios, prng, describeError } = require('../support/worker-util');

const B = 12; // global batch of the trainOnBatch scenarios: divisible by 2 and 3
const PER_RANK_BATCH = 2; // fit scenarios: per-rank batch; 10 batches per epoch
const BATCHES = 10;

const uniform = (seed) => {
  const next = prng(seed);
  return () => next() * 2 - 1;
};

function buildModel(seed, optimizer) {
  const model = tf.sequential({
    layers: [tf.layers.dense({ inputShape: [6], units: 8, activation: 'tanh' }), tf.layers.dense({ units: 3 })],
  });
  const rand = uniform(seed);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => 0.5 * rand()), w.shape)));
  model.compile({ optimizer, loss: 'meanSquaredError' });
  return model;
}

/** n samples, the same in every process. */
function data(n, seed) {
  const rand = uniform(seed);
  const x = Float32Array.from({ length: n * 6 }, rand);
  const y = new Float32Array(n * 3);
  for (let i = 0; i < n; i++) for (let j = 0; j < 3; j++) y[i * 3 + j] = Math.sin(x[i * 6 + j] + x[i * 6 + j + 3]);
  return { x: tf.tensor2d(x, [n, 6]), y: tf.tensor2d(y, [n, 3]) };
}

const b64 = (a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');

/** Everything a commit should keep, as bytes: weights, optimizer slots, iteration count, Adam's beta powers. */
async function snapshot(model, optimizer) {
  const inner = DistributedOptimizer.prototype.isPrototypeOf(optimizer) ? optimizer.optimizer : optimizer;
  const named = await optimizer.getWeights();
  const slots = named.slice(1).map((w) => b64(w.tensor.dataSync()));
  named[0].tensor.dispose();
  const hidden = Object.keys(inner).sort().filter((k) => inner[k] instanceof tf.Variable).map((k) => `${k}:${b64(inner[k].dataSync())}`);
  return { weights: model.weights.map((w) => b64(w.read().dataSync())), slots, hidden, iterations: optimizer.iterations };
}

/** Global step s of the trainOnBatch scenarios: this rank's shard of a global batch of B samples. */
async function step(model, s) {
  const g = data(B, 500 + s);
  const mine = shard(g.x, g.y);
  await model.trainOnBatch(mine.x, mine.y);
  tf.dispose([g.x, g.y, mine.x, mine.y]);
}

runScenarios(hora, {
  // Commit after some steps, step on, restore: weights, slots, iterations and beta powers are back bit for
  // bit, no tensor leaks, and the steps redone from there give what they gave the first time.
  async commitRestore() {
    const optimizer = new DistributedOptimizer(tf.train.adam(0.02));
    const model = buildModel(3, optimizer);
    const state = new ElasticState(model, null, { step: 0 });
    const fresh = await snapshot(model, optimizer);
    const tensorsFresh = tf.memory().numTensors;
    for (let s = 0; s < 3; s++) await step(model, s);
    state.step = 3;
    const tensorsBeforeCommit = tf.memory().numTensors;
    await state.commit();
    const tensorsAfterCommit = tf.memory().numTensors;
    const committed = await snapshot(model, optimizer);
    for (let s = 3; s < 7; s++) await step(model, s);
    const firstTime = await snapshot(model, optimizer);
    state.step = 7;
    state.restore();
    await state.restored();
    const tensorsAfterRestore = tf.memory().numTensors;
    const restored = await snapshot(model, optimizer);
    const stepRestored = state.step;
    for (let s = 3; s < 7; s++) await step(model, s);
    const secondTime = await snapshot(model, optimizer);

    // Back to the first rollback point, taken before the first step: the optimizer had no slots then.
    const state0 = new ElasticState(buildModel(4, tf.train.adam(0.02)));
    const m0 = state0.model;
    const fresh0 = await snapshot(m0, m0.optimizer);
    const tensors0 = tf.memory().numTensors;
    for (let s = 0; s < 2; s++) await step(m0, s);
    state0.restore();
    await state0.restored();
    const back0 = await snapshot(m0, m0.optimizer);
    const tensorsBack0 = tf.memory().numTensors;
    return {
      fresh, committed, restored, firstTime, secondTime, stepRestored, fresh0, back0,
      tensors: { tensorsFresh, tensorsBeforeCommit, tensorsAfterCommit, tensorsAfterRestore, tensors0, tensorsBack0 },
    };
  },

  // Ranks start from different weights; rank 1 has stepped (Adam slots, iterations), the others never
  // stepped. After sync(1) every rank holds rank 1's, and they then train on identically.
  async sync(r) {
    const root = 1;
    const optimizer = new DistributedOptimizer(tf.train.adam(0.02));
    const model = buildModel(10 + r, optimizer);
    const state = new ElasticState(model, null, { epoch: r, note: `rank ${r}` });
    if (r === root) {
      // Steps taken alone (no allreduce), as a survivor holding its own progress.
      const lone = tf.train.adam(0.02);
      const m = model;
      m.compile({ optimizer: lone, loss: 'meanSquaredError' });
      const g = data(4, 77);
      for (let s = 0; s < 3; s++) await m.trainOnBatch(g.x, g.y);
      tf.dispose([g.x, g.y]);
      // Put the stepped state into the DistributedOptimizer's inner Adam, then compile with it again.
      await optimizer.setWeights(await lone.getWeights());
      m.compile({ optimizer, loss: 'meanSquaredError' });
    }
    const before = await snapshot(model, optimizer);
    await state.sync(root);
    const tensorsAfterSync = tf.memory().numTensors;
    const after = await snapshot(model, optimizer);
    const fields = { epoch: state.epoch, batch: state.batch, note: state.note };
    model.weights[0].write(tf.zerosLike(model.weights[0].read()));
    state.restore();
    await state.restored();
    const restored = await snapshot(model, optimizer);
    for (let s = 0; s < 2; s++) await step(model, s);
    const trained = await snapshot(model, optimizer);
    const tensorsBeforeSecondSync = tf.memory().numTensors;
    await state.sync(root);
    const tensorsAfterSecondSync = tf.memory().numTensors;
    return { before, after, fields, restored, trained, tensorsAfterSync, tensorsBeforeSecondSync, tensorsAfterSecondSync };
  },

  // ElasticCallback commits after every commitEvery-th batch of an epoch and at each epoch's end.
  async callback(r, p) {
    const model = buildModel(5, new DistributedOptimizer(tf.train.sgd(0.05)));
    const state = new ElasticState(model);
    const points = [];
    const commit = state.commit.bind(state);
    state.commit = async () => { points.push([state.epoch, state.batch]); await commit(); };
    const g = data(PER_RANK_BATCH * BATCHES * p, 9);
    const mine = shard(g.x, g.y);
    const cb = new ElasticCallback(state, { commitEvery: 3 });
    await state.fit(mine.x, mine.y, { epochs: 2, batchSize: PER_RANK_BATCH, shuffle: false, verbose: 0, callbacks: [cb] });
    return { points, commits: cb.commits, epoch: state.epoch, batch: state.batch, defaultEvery: new ElasticCallback(state).commitEvery };
  },

  // An uninterrupted fit, and the same fit interrupted at epoch 1 after batch 5 (last commit: batch 3),
  // restored and resumed through ElasticState.fit: the same weights, slots and iterations, bit for bit.
  async resume(r, p) {
    const g = data(PER_RANK_BATCH * BATCHES * p, 11);
    const mine = shard(g.x, g.y);
    const args = { epochs: 3, batchSize: PER_RANK_BATCH, shuffle: false, verbose: 0 };

    const optA = new DistributedOptimizer(tf.train.adam(0.01));
    const modelA = buildModel(6, optA);
    const stateA = new ElasticState(modelA);
    let stepsA = 0;
    const countA = new tf.CustomCallback({ onBatchEnd: () => { stepsA++; } });
    await stateA.fit(mine.x, mine.y, { ...args, callbacks: [new ElasticCallback(stateA, { commitEvery: 3 }), countA] });
    const uninterrupted = await snapshot(modelA, optA);

    const optB = new DistributedOptimizer(tf.train.adam(0.01));
    const modelB = buildModel(6, optB);
    const stateB = new ElasticState(modelB);
    let stepsB = 0;
    const cbB = new ElasticCallback(stateB, { commitEvery: 3 });
    const interrupt = new tf.CustomCallback({
      onBatchEnd: (batch) => {
        stepsB++;
        if (stateB.epoch === 1 && batch === 4 && !interrupt.done) {
          interrupt.done = true;
          throw new hora.HoraError('ERR_PEER_LOST', 'simulated loss of a peer');
        }
      },
    });
    let caught = null;
    try {
      await stateB.fit(mine.x, mine.y, { ...args, callbacks: [cbB, interrupt] });
    } catch (e) {
      caught = e.code;
    }
    const at = { epoch: stateB.epoch, batch: stateB.batch };
    stateB.restore();
    const resumedFrom = { epoch: stateB.epoch, batch: stateB.batch };
    const tensorsBeforeResume = tf.memory().numTensors;
    await stateB.fit(mine.x, mine.y, { ...args, callbacks: [cbB, interrupt] });
    const resumed = await snapshot(modelB, optB);
    tf.dispose([g.x, g.y, mine.x, mine.y]);
    return { uninterrupted, resumed, stepsA, stepsB, caught, at, resumedFrom, tensorsBeforeResume, final: { epoch: stateB.epoch, batch: stateB.batch } };
  },

  // backwardPassesPerStep = 2: a pass summed after the commit is lost work, and restore forgets it.
  async accumulation() {
    const run = async (interrupt) => {
      const optimizer = new DistributedOptimizer(tf.train.sgd(0.1), { backwardPassesPerStep: 2 });
      const model = buildModel(8, optimizer);
      const state = new ElasticState(model);
      await step(model, 0);
      await step(model, 1);
      await state.commit();
      if (interrupt) {
        await step(model, 2);
        state.restore();
        await state.restored();
      }
      await step(model, 2);
      await step(model, 3);
      return snapshot(model, optimizer);
    };
    const straight = await run(false);
    const restored = await run(true);
    let refused = null;
    const optimizer = new DistributedOptimizer(tf.train.sgd(0.1), { backwardPassesPerStep: 2 });
    const model = buildModel(8, optimizer);
    const state = new ElasticState(model);
    const g = data(8, 1);
    try {
      await state.fit(g.x, g.y, { batchSize: 2, verbose: 0, callbacks: [new ElasticCallback(state, { commitEvery: 3 })] });
    } catch (e) {
      refused = describeError(e);
    }
    tf.dispose([g.x, g.y]);
    return { straight, restored, refused };
  },

  // Bad arguments: ERR_INVALID_ARGUMENT naming the argument.
  async badOptions() {
    const model = buildModel(1, tf.train.sgd(0.1));
    const state = new ElasticState(model);
    const out = {};
    const attempt = async (name, fn) => {
      try {
        await fn();
        out[name] = { ok: true };
      } catch (e) {
        out[name] = describeError(e);
      }
    };
    await attempt('commitEvery0', () => new ElasticCallback(state, { commitEvery: 0 }));
    await attempt('commitEvery1.5', () => new ElasticCallback(state, { commitEvery: 1.5 }));
    await attempt('commitEveryString', () => new ElasticCallback(state, { commitEvery: '3' }));
    await attempt('callbackState', () => new ElasticCallback({ epoch: 0 }));
    await attempt('stateModel', () => new ElasticState(null));
    await attempt('stateOptimizer', () => new ElasticState(model, 'adam'));
    await attempt('stateEpoch', () => new ElasticState(model, null, { epoch: -1 }));
    await attempt('stateReserved', () => new ElasticState(model, null, { model: 1 }));
    await attempt('stateField', () => new ElasticState(model, null, { f: () => 1 }));
    const g = data(4, 1);
    await attempt('fitNoCallback', () => state.fit(g.x, g.y, { epochs: 1 }));
    await attempt('fitSplit', () => state.fit(g.x, g.y, { validationSplit: 0.2, callbacks: [new ElasticCallback(state)] }));
    await attempt('fitInitialEpoch', () => state.fit(g.x, g.y, { initialEpoch: 1, callbacks: [new ElasticCallback(state)] }));
    tf.dispose([g.x, g.y]);
    return out;
  },
});
