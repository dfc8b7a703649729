'use strict';
// DistributedOptimizer with gradients that ranks hand over in different orders, or that differ between ranks.
// Usage: node tfjs-order-worker.js <scenario>
//   order      w1 and w2 (lengths equal, and 2 and 3), given as {w1, w2} on even ranks and {w2, w1} on odd
//              ones, through every way in: applyGradients with a map and an array, overlap off and on;
//              computeGradients then replaced gradients; minimize with the varList reversed on odd ranks.
//              Gradient of w1 is 1 + rank, of w2 100 x (1 + rank), SGD with learning rate 1 from zeros.
//   different  rank 0 has gradients for a and b, rank 1 for a and c (the same lengths)
//   shape      a Dense layer of 8 units on rank 0 and 9 on rank 1, trained with minimize
// Each variant reports its weights or the error it got; the ranks go on to the next variant after an error.
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { DistributedOptimizer } = require('../../dist/adapters/tfjs/index.js');
const { runScenarios } = require('../support/worker-util');

tf.setBackend('cpu');

const fill = (n, v) => tf.fill([n], v);
const values = (v) => Array.from(v.dataSync());
const errorOf = (e) => ({ code: e.code, message: e.message, isHoraError: e instanceof hora.HoraError });

/** One variant of 'order': its final w1 and w2, or its error. */
function orderVariant(rank, name, mode, lengths) {
  const w1 = tf.variable(tf.zeros([lengths[0]]), true, `${name}/w1`);
  const w2 = tf.variable(tf.zeros([lengths[1]]), true, `${name}/w2`);
  const c1 = 1 + rank, c2 = 100 * (1 + rank);
  const flip = rank % 2 === 1;
  const ordered = (a, b) => (flip ? [b, a] : [a, b]);
  const opt = new DistributedOptimizer(tf.train.sgd(1), { overlap: mode !== 'apply overlap=false' && mode !== 'array overlap=false' });
  try {
    if (mode.startsWith('apply')) {
      const map = {};
      for (const [w, c, n] of ordered([w1, c1, lengths[0]], [w2, c2, lengths[1]])) map[w.name] = fill(n, c);
      opt.applyGradients(map);
    } else if (mode.startsWith('array')) {
      opt.applyGradients(ordered([w1, c1, lengths[0]], [w2, c2, lengths[1]]).map(([w, c, n]) => ({ name: w.name, tensor: fill(n, c) })));
    } else if (mode === 'computeGradients, replaced') {
      const { grads } = opt.computeGradients(() => tf.add(tf.sum(tf.mul(w1, c1)), tf.sum(tf.mul(w2, c2))));
      const map = {};
      for (const w of ordered(w1, w2)) map[w.name] = tf.mul(grads[w.name], 1);
      opt.applyGradients(map);
    } else if (mode === 'minimize, varList reversed') {
      for (let s = 0; s < 2; s++) opt.minimize(() => tf.add(tf.sum(tf.mul(w1, c1)), tf.sum(tf.mul(w2, c2))), false, ordered(w1, w2));
    }
    return { w1: values(w1), w2: values(w2) };
  } catch (e) {
    return { error: errorOf(e) };
  }
}

const MODES = ['apply overlap=false', 'apply overlap=true', 'array overlap=false', 'array overlap=true', 'computeGradients, replaced', 'minimize, varList reversed'];

runScenarios(hora, {
  order(rank) {
    const out = {};
    for (const lengths of [[2, 2], [2, 3]]) {
      for (const [i, mode] of MODES.entries()) out[`${mode} lengths ${lengths}`] = orderVariant(rank, `v${i}_${lengths.join('_')}`, mode, lengths);
    }
    return out;
  },

  different(rank) {
    const out = {};
    for (const overlap of [false, true]) {
      const a = tf.variable(tf.zeros([3]), true, `d${overlap}/a`);
      const b = tf.variable(tf.zeros([3]), true, `d${overlap}/b`);
      const c = tf.variable(tf.zeros([3]), true, `d${overlap}/c`);
      const other = rank === 0 ? b : c;
      const opt = new DistributedOptimizer(tf.train.sgd(1), { overlap });
      try {
        opt.applyGradients({ [a.name]: fill(3, 1), [other.name]: fill(3, 2) });
        out[`overlap=${overlap}`] = { applied: true };
      } catch (e) {
        out[`overlap=${overlap}`] = { error: errorOf(e), unchanged: [a, b, c].every((v) => values(v).every((x) => x === 0)) };
      }
    }
    return out;
  },

  shape(rank) {
    const out = {};
    // The same sizes, other shapes: a [2, 3] variable on rank 0 where rank 1 has [3, 2].
    for (const overlap of [false, true]) {
      const w = tf.variable(tf.ones(rank === 0 ? [2, 3] : [3, 2]), true, `transposed_${overlap}`);
      const before = values(w);
      const opt = new DistributedOptimizer(tf.train.sgd(0.1), { overlap });
      try {
        opt.minimize(() => tf.sum(tf.square(w)), false, [w]);
        out[`transposed, overlap=${overlap}`] = { applied: true };
      } catch (e) {
        out[`transposed, overlap=${overlap}`] = { error: errorOf(e), unchanged: JSON.stringify(values(w)) === JSON.stringify(before) };
      }
    }
    for (const overlap of [false, true]) {
      const layer = tf.layers.dense({ inputShape: [4], units: rank === 0 ? 8 : 9, name: `shape_${overlap}` });
      const model = tf.sequential({ layers: [layer] });
      const before = model.getWeights().map(values);
      const opt = new DistributedOptimizer(tf.train.sgd(0.1), { overlap });
      const x = tf.ones([2, 4]);
      try {
        opt.minimize(() => tf.mean(tf.square(model.apply(x))));
        out[`overlap=${overlap}`] = { applied: true };
      } catch (e) {
        const after = model.getWeights().map(values);
        out[`overlap=${overlap}`] = { error: errorOf(e), unchanged: JSON.stringify(after) === JSON.stringify(before) };
      }
    }
    return out;
  },
});
