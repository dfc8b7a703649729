'use strict';
// hora/brain ElasticState under hora run: rollback and resume of distributed training, sync from a root.
// BRAIN_MODULE picks the brain.js package ('brain.js' 1.6, the default, or 'brain.js-2').
const brain = require(process.env.BRAIN_MODULE || 'brain.js');
const hora = require('../../dist/ts/index.js');
const { distributed, ElasticState } = require('../../dist/adapters/brain/index.js');
const { runScenarios, prng, describeError } = require('../support/worker-util');

function clusters(n, seed) {
  const rand = prng(seed);
  const centers = [[0.2, 0.7, 0.3, 0.2], [0.5, 0.4, 0.6, 0.5], [0.8, 0.5, 0.8, 0.8]];
  return Array.from({ length: n }, (_, i) => {
    const c = i % 3;
    const output = [0, 0, 0];
    output[c] = 1;
    return { input: centers[c].map((m) => m + (rand() + rand() - 1) * 0.2), output };
  });
}

function newNet(seed) {
  const net = new brain.NeuralNetwork({ hiddenLayers: [6, 5] });
  net.sizes = [4, 6, 5, 3];
  net.initialize();
  const rand = prng(seed);
  for (let l = 1; l < net.sizes.length; l++) {
    for (const row of net.weights[l]) for (let k = 0; k < row.length; k++) row[k] = rand() * 0.8 - 0.4;
    for (let k = 0; k < net.biases[l].length; k++) net.biases[l][k] = rand() * 0.8 - 0.4;
  }
  return net;
}

/** Weights, biases, momentum and Adam's arrays as base64 of their bytes, and Adam's step count. */
function snapshot(net) {
  const out = [];
  const b64 = (a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');
  for (let l = 1; l <= net.outputLayer; l++) {
    out.push(...net.weights[l].map(b64), b64(net.biases[l]), ...net.changes[l].map(b64));
    if (net.changesLow && net.changesLow[l]) out.push(...net.changesLow[l].map(b64), ...net.changesHigh[l].map(b64), b64(net.biasChangesLow[l]), b64(net.biasChangesHigh[l]));
  }
  return { arrays: out, iterations: net.iterations ?? null };
}

const praxis = process.env.BRAIN_PRAXIS === 'adam' ? 'adam' : null;
const data = clusters(60, 3);

/** One pass over the data through distributed(net), then the pass is counted and committed. */
async function pass(state, commit = true) {
  await distributed(state.net, { batchSize: 12 }).trainAsync(data, { iterations: 1, praxis, learningRate: 0.2 });
  state.iterations++;
  if (commit) await state.commit();
}

runScenarios(hora, {
  // 4 passes straight, and 2 passes + commit + 1 pass lost + restore + 2 passes: bit-identical nets.
  async rollback() {
    const a = new ElasticState(newNet(1));
    while (a.iterations < 4) await pass(a);
    const b = new ElasticState(newNet(1), { note: 'b' });
    let passes = 0;
    while (b.iterations < 2) { await pass(b); passes++; }
    const committed = snapshot(b.net);
    await pass(b, false);
    passes++;
    const lost = snapshot(b.net);
    b.restore();
    const restored = snapshot(b.net);
    const iterationsAfterRestore = b.iterations;
    while (b.iterations < 4) { await pass(b); passes++; }
    return { straight: snapshot(a.net), resumed: snapshot(b.net), committed, lost, restored, iterationsAfterRestore, passes, iterations: b.iterations };
  },

  // Rank 1 holds trained weights with Adam state; the others hold other weights and no Adam state.
  // After sync(1) every rank holds rank 1's, and one more distributed pass keeps them equal.
  async sync(r) {
    const root = 1;
    const net = newNet(20 + r);
    const state = new ElasticState(net, { iterations: r * 3 });
    if (r === root) {
      // A net that has trained with Adam: moments and a step count of its own.
      const rand = prng(99);
      const fill = (a) => { for (let k = 0; k < a.length; k++) a[k] = rand() * 0.01; };
      for (const k of ['changesLow', 'changesHigh', 'biasChangesLow', 'biasChangesHigh']) net[k] = [];
      for (let l = 1; l < net.sizes.length; l++) {
        net.changesLow[l] = net.weights[l].map((w) => new Float32Array(w.length));
        net.changesHigh[l] = net.weights[l].map((w) => new Float32Array(w.length));
        net.biasChangesLow[l] = new Float32Array(net.sizes[l]);
        net.biasChangesHigh[l] = new Float32Array(net.sizes[l]);
        [...net.changesLow[l], ...net.changesHigh[l], net.biasChangesLow[l], net.biasChangesHigh[l], ...net.weights[l]].forEach(fill);
      }
      net.iterations = 5;
    }
    const before = snapshot(net);
    await state.sync(root);
    const after = snapshot(net);
    for (const row of net.weights[1]) row.fill(0);
    state.restore();
    const restored = snapshot(net);
    await distributed(net, { batchSize: 12 }).trainAsync(data, { iterations: 1, praxis: 'adam', learningRate: 0.05 });
    return { before, after, restored, iterations: state.iterations, trained: snapshot(net) };
  },

  async badArguments() {
    const out = {};
    const attempt = (name, fn) => {
      try { fn(); out[name] = { ok: true }; } catch (e) { out[name] = describeError(e); }
    };
    attempt('uninitialized', () => new ElasticState(new brain.NeuralNetwork()));
    attempt('notNet', () => new ElasticState(7));
    attempt('iterations', () => new ElasticState(newNet(1), { iterations: -1 }));
    attempt('reserved', () => new ElasticState(newNet(1), { net: 1 }));
    return out;
  },
});
