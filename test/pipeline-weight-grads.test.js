'use strict';
// deferWeightGradients, one stage in one process (no hora): a stage whose Dense kernels' gradients are
// computed once per batch gives the gradients of a stage that computes them per micro-batch, through
// every backward it has (kept record, recomputed, the last stage's loss), with and without biases, with
// a regularizer that reaches a kernel another way, beside layers that are not Dense; what it keeps is
// counted and freed.
const t = require('tap');
const tf = require('@tensorflow/tfjs');
const { Stage } = require('../dist/adapters/tfjs/pipeline/stage.js');

const REL = 1e-5;

function rand(seed) {
  let a = seed >>> 0;
  return () => { a = (a * 1664525 + 1013904223) >>> 0; return a / 4294967296 - 0.5; };
}

function tensor(shape, seed) {
  const r = rand(seed);
  return tf.tensor(Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, r), shape);
}

/** Layers of a small model, seeded: Dense layers of `activation`, a LayerNormalization in the middle. */
function layers({ activation = 'tanh', useBias = true, l2 = false } = {}) {
  const model = tf.sequential({
    layers: [
      tf.layers.dense({ units: 7, activation, useBias, inputShape: [5], kernelRegularizer: l2 ? tf.regularizers.l2({ l2: 0.05 }) : undefined }),
      tf.layers.layerNormalization(),
      tf.layers.dense({ units: 6, activation, useBias }),
      tf.layers.dense({ units: 3, useBias }),
    ],
  });
  const r = rand(3);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => 0.8 * r()), w.shape)));
  return model.layers;
}

function worst(a, b) {
  let w = 0;
  a.forEach((u, i) => u.forEach((x, j) => { w = Math.max(w, Math.abs(x - b[i][j]) / Math.max(Math.abs(b[i][j]), 1e-3)); }));
  return w;
}

const SIZES = [4, 3, 5];

/** Gradients of one batch through `stage` as the pipeline runs it on a first, middle or last stage. */
function batchGrads(stage, kind) {
  const dxs = [];
  let peak = 0;
  SIZES.forEach((n, k) => {
    const x = tensor([n, 5], 10 + k);
    if (kind === 'last') {
      const y = tensor([n, 3], 20 + k);
      const r = stage.lossAndBackward(x, y, n / 12, k + 1);
      if (r.dx) { dxs.push(Array.from(r.dx.dataSync())); r.dx.dispose(); }
      y.dispose();
    } else {
      const dy = tensor([n, 3], 30 + k);
      const dx = kind === 'recompute' ? stage.backward(x, dy, k + 1) : stage.backwardRecorded(stage.forwardRecorded(x, k + 1), x, dy);
      if (dx) { dxs.push(Array.from(dx.dataSync())); dx.dispose(); }
      dy.dispose();
    }
    peak = Math.max(peak, stage.deferredBytes);
    x.dispose();
  });
  const grads = stage.gradientArrays().map((g) => Array.from(g));
  // The update changes every variable's data: the next batch must find the kernels again.
  stage.update(stage.sgd, null);
  return { grads, dxs, peak };
}

function build(opts, first, last, defer) {
  const stage = new Stage(layers(opts), [null, 5], first, last, defer);
  stage.sgd = tf.train.sgd(0.1);
  stage.compile({ optimizer: stage.sgd, loss: 'meanSquaredError' });
  return stage;
}

t.before(async () => { await tf.setBackend('cpu'); });

for (const opts of [{ activation: 'tanh' }, { activation: 'relu' }, { activation: 'linear' }, { activation: 'relu', useBias: false }, { activation: 'linear', useBias: false }, { activation: 'tanh', l2: true }]) {
  const label = `${opts.activation}${opts.useBias === false ? ', no bias' : ''}${opts.l2 ? ', an L2 regularizer on a kernel' : ''}`;
  for (const [kind, first, last] of [['record', false, false], ['record', true, false], ['recompute', false, false], ['last', false, true], ['last', true, true]]) {
    t.test(`${label}, ${kind === 'last' ? 'the last stage' : kind === 'record' ? 'backward from the kept record' : 'recomputing backward'}${first ? ', first stage' : ''}: the same gradients`, async (t) => {
      const plain = build(opts, first, last, false);
      const deferred = build(opts, first, last, true);
      t.equal(plain.deferredKernels, 0, 'without the option nothing is deferred');
      t.equal(deferred.deferredKernels, 3, 'the 3 Dense kernels are deferred; the LayerNormalization is not');
      for (const batch of [1, 2]) {
        // The same weights again (their sums' order differs by 1e-7); setWeights changes their data too.
        if (batch === 2) deferred.model.setWeights(plain.model.getWeights());
        const before = tf.memory().numTensors;
        const a = batchGrads(plain, kind);
        const b = batchGrads(deferred, kind);
        t.equal(tf.memory().numTensors, before, `batch ${batch}: no tensor left behind`);
        t.equal(b.grads.length, a.grads.length, `batch ${batch}: a gradient for every variable`);
        t.ok(a.grads.every((g) => g.some((v) => v !== 0)), `batch ${batch}: every variable has a gradient (the comparison says something)`);
        const w = worst(b.grads, a.grads);
        t.ok(w <= REL, `batch ${batch}: every weight's gradient within ${REL} (got ${w.toExponential(2)})`);
        t.same(b.dxs, a.dxs, first ? `batch ${batch}: no input gradient on a first stage` : `batch ${batch}: the same input gradients, bit for bit`);
        // The kernels' inputs and output gradients, for the 12 samples, are what was kept.
        t.equal(b.peak, 4 * 12 * (5 + 7 + 7 + 6 + 6 + 3), `batch ${batch}: kept each Dense layer's input and output gradient for the batch`);
        t.equal(deferred.deferredBytes, 0, `batch ${batch}: and freed once the gradients were computed`);
      }
    });
  }
}

t.test('a batch that stops half-way frees what it kept', async (t) => {
  const stage = build({}, false, false, true);
  const before = tf.memory().numTensors;
  const x = tensor([4, 5], 1);
  const dy = tensor([4, 3], 2);
  stage.backwardRecorded(stage.forwardRecorded(x, 1), x, dy).dispose();
  t.equal(stage.deferredBytes, 4 * 4 * 34, 'one micro-batch kept');
  stage.resetGradients();
  t.equal(stage.deferredBytes, 0, 'nothing kept after resetGradients');
  tf.dispose([x, dy]);
  t.equal(tf.memory().numTensors, before, 'no tensor left behind');
});
