'use strict';
// Collectives called in a different order, or split differently, by different ranks, with fusion on or
// off. Usage: node fusion-agreement-worker.js all
// Each case returns what this rank saw (values, or the error's code and message, and whether its in-place
// arrays still hold what they held) and the outcome of a collective after it; the test
// (test/fusion-agreement.test.js) asserts on every rank's report. The cases are the reproductions
// and Horovod's collective tests (horovod/test/parallel: the [17 + rank]^3 shape test), as a user runs them.
const hora = require('../../dist/ts/index.js');
const { runScenarios, describeError } = require('../support/worker-util');

/** What a Work settled to: {ok, value: numbers} or the HoraError's fields. */
async function settled(work) {
  try {
    const v = await work;
    return { ok: true, value: v == null ? null : Array.from(v, Number) };
  } catch (e) {
    return describeError(e);
  }
}

/** A collective every rank can run afterwards: the sum of rank + 1 over ranks. */
async function followUp() {
  return settled(hora.allreduce(new Int32Array([hora.rank() + 1]), { op: 'sum' }));
}

/** Calls fns in this order (in one synchronous run: one batch); their outcomes in fns' own order. */
async function inOrder(fns, order) {
  const works = new Array(fns.length);
  for (const i of order) works[i] = fns[i]();
  return Promise.all(works.map(settled));
}

const range = (n) => Array.from({ length: n }, (_, i) => i);
/** Rank r's order of n calls: rotated by r, so that every pair of neighbouring ranks differs. */
const rotated = (n, r) => range(n).map((i) => (i + r) % n);

/** Values of rank r for tensor `seed`: distinct per rank, tensor and element, exact in float64. */
const values = (n, seed, r) => Float64Array.from({ length: n }, (_, i) => seed + 10 * i + 1000 * r);

function cases(r, p) {
  const odd = r % 2 === 1;
  const fusionMB = process.env.HORA_FUSION_MB === undefined ? 64 : Number(process.env.HORA_FUSION_MB);
  // Past the fusion buffer when it is small: the batch would have been cut by size at a different call
  // on each rank. Capped so the case stays quick with the default buffer.
  const bigCount = Math.min(fusionMB > 0 ? Math.ceil((fusionMB * 1024 * 1024) / 8) : 32768, 262144);
  return {
    // The reproduction: the same two named tensors, in the other order on odd ranks.
    'order, equal lengths': () => {
      const fns = [() => hora.allreduce(values(2, 1, r), { name: 'grad_a', op: 'sum' }), () => hora.allreduce(values(2, 5, r), { name: 'grad_b', op: 'sum' })];
      return inOrder(fns, odd ? [1, 0] : [0, 1]);
    },
    'order, lengths 2 and 3': () => {
      const fns = [() => hora.allreduce(values(2, 1, r), { name: 'grad_a', op: 'sum' }), () => hora.allreduce(values(3, 5, r), { name: 'grad_b', op: 'sum' })];
      return inOrder(fns, odd ? [1, 0] : [0, 1]);
    },
    // Every kind of collective may be named; rank r calls them rotated by r.
    'order, four kinds': () => {
      const fns = [
        () => hora.allreduce(values(3, 1, r), { name: 'k_allreduce', op: 'sum' }),
        () => hora.broadcast(values(4, 2, r), { name: 'k_broadcast', root: p - 1 }),
        () => hora.allgather(values(r + 1, 3, r), { name: 'k_allgather' }),
        () => hora.reduceScatter(values(2 * p, 4, r), { name: 'k_reduceScatter', op: 'max' }),
      ];
      return inOrder(fns, rotated(fns.length, r));
    },
    // Cut at a wait(): each rank waits for its own first call, a different one on odd ranks.
    'order, waited': () => {
      const out = [];
      const fns = [() => hora.allreduce(values(2, 1, r), { name: 'w_a', op: 'sum', inplace: true }), () => hora.allreduce(values(3, 5, r), { name: 'w_b', op: 'sum' })];
      const order = odd ? [1, 0] : [0, 1];
      const works = [];
      for (const i of order) works[i] = fns[i]();
      try {
        works[order[0]].wait();
      } catch { /* reported below */ }
      for (const w of works) out.push(settled(w));
      return Promise.all(out);
    },
    // A message in the batch keeps its place and does not stop the ordering.
    'order, a message in the batch': () => {
      const peer = r ^ 1;
      const fns = [() => hora.allreduce(values(2, 1, r), { name: 'm_a', op: 'sum' }), () => hora.allreduce(values(3, 5, r), { name: 'm_b', op: 'sum' })];
      const works = [];
      let message = null;
      if (!odd) works[0] = fns[0]();
      if (peer < p) message = odd ? hora.recv(new Float64Array(2), { from: peer, tag: 7 }) : hora.send(values(2, 9, r), { to: peer, tag: 7 });
      works[1] = fns[1]();
      if (odd) works[0] = fns[0]();
      return Promise.all([...works, message].map(settled));
    },
    // The size cut: one tensor fills the fusion buffer; even ranks call it first, odd ranks last.
    'order, across the size cut': () => {
      const fns = [
        () => hora.allreduce(values(bigCount, 1, r), { name: 'cut_big', op: 'sum' }),
        () => hora.allreduce(values(2, 5, r), { name: 'cut_small_a', op: 'sum' }),
        () => hora.allreduce(values(3, 7, r), { name: 'cut_small_b', op: 'sum' }),
      ];
      return inOrder(fns, odd ? [2, 1, 0] : [0, 1, 2]).then((outs) => {
        const big = outs[0];
        // The big result as its length, first and last elements (the test computes them).
        if (big.ok) outs[0] = { ok: true, length: big.value.length, first: big.value[0], last: big.value[big.value.length - 1] };
        return outs;
      });
    },
    // The same total split differently: even ranks [2, 3] elements, odd ranks [3, 2]. In place, so that
    // the test can see the arrays untouched.
    'split, named': () => splitCase(r, ['s_a', 's_b'], odd ? [3, 2] : [2, 3]),
    'split, unnamed': () => splitCase(r, ['', ''], odd ? [3, 2] : [2, 3]),
    // One tensor against two: even ranks [5], odd ranks [2, 3]; then even ranks call a 3-element one,
    // which meets the odd ranks' second (the ranks fail the first call only and stay in step).
    'split, one against two': async () => {
      const arrays = odd ? [values(2, 1, r), values(3, 2, r)] : [values(5, 1, r)];
      const before = arrays.map((a) => Array.from(a));
      const works = arrays.map((a) => hora.allreduce(a, { op: 'sum', inplace: true }));
      const outs = await Promise.all(works.map(settled));
      const untouched = outs[0].ok ? null : before[0].every((v, i) => v === arrays[0][i]);
      if (!odd) outs.push(await settled(hora.allreduce(values(3, 2, r), { op: 'sum' })));
      return { outs, untouched };
    },
    // Horovod's shape test: a tensor of [17 + rank]^3 elements, and a second one that makes every rank's
    // total the same, so that only the tensor-by-tensor check can see the difference.
    'shape, named': () => shapeCase(r, p, ['shape_x', 'shape_y']),
    'shape, unnamed': () => shapeCase(r, p, ['', '']),
    // A name twice in one batch: refused on every rank, at the second one's place.
    'duplicate, every rank': () => inOrder([
      () => hora.allreduce(values(2, 1, r), { name: 'dup', op: 'sum' }),
      () => hora.allreduce(values(2, 5, r), { name: 'dup', op: 'sum' }),
      () => hora.allreduce(values(2, 7, r), { name: 'dup_z', op: 'sum' }),
    ], [0, 1, 2]),
    // The same in a batch that also holds an unnamed call (not ordered by name).
    'duplicate, with an unnamed call': () => inOrder([
      () => hora.allreduce(values(2, 1, r), { op: 'sum' }),
      () => hora.allreduce(values(2, 5, r), { name: 'dup_u', op: 'sum' }),
      () => hora.allreduce(values(2, 7, r), { name: 'dup_u', op: 'sum' }),
    ], [0, 1, 2]),
    'duplicate, rank 0 only': () => inOrder([
      () => hora.allreduce(values(2, 1, r), { name: 'once', op: 'sum' }),
      () => hora.allreduce(values(2, 5, r), { name: r === 0 ? 'once' : 'once_more', op: 'sum' }),
    ], [0, 1]),
    // A call that fails validation on rank 0, called first there, keeps its name and so its place in the
    // ordered batch: the valid call before it (by name) runs on every rank.
    'invalid call keeps its place': () => inOrder([
      () => hora.allreduce(values(2, 1, r), { name: 'v_a', op: 'sum' }),
      () => hora.allreduce(values(2, 5, r), { name: 'v_b', op: r === 0 ? 'median' : 'sum' }),
    ], r === 0 ? [1, 0] : [0, 1]),
    // Across batches the order still matters: each call awaited on its own.
    'order across batches': async () => {
      const fns = [() => hora.allreduce(values(2, 1, r), { name: 'x_a', op: 'sum' }), () => hora.allreduce(values(2, 5, r), { name: 'x_b', op: 'sum' })];
      const outs = [];
      for (const i of odd ? [1, 0] : [0, 1]) outs[i] = await settled(fns[i]());
      return outs;
    },
  };
}

async function splitCase(r, names, counts) {
  const arrays = counts.map((n, i) => values(n, 1 + 4 * i, r));
  const before = arrays.map((a) => Array.from(a));
  const works = arrays.map((a, i) => hora.allreduce(a, { name: names[i] || undefined, op: 'sum', inplace: true }));
  const outs = await Promise.all(works.map(settled));
  return { outs, untouched: arrays.every((a, i) => outs[i].ok || before[i].every((v, k) => v === a[k])) };
}

async function shapeCase(r, p, names) {
  const side = 17 + r;
  const total = (17 + p - 1) ** 3 + 1;
  const arrays = [new Float32Array(side ** 3).fill(r + 1), new Float32Array(total - side ** 3).fill(r + 1)];
  const works = arrays.map((a, i) => hora.allreduce(a, { name: names[i] || undefined, inplace: true }));
  const outs = await Promise.all(works.map(settled));
  return { outs, untouched: arrays.every((a, i) => outs[i].ok || a.every((v) => v === r + 1)), counts: arrays.map((a) => a.length) };
}

runScenarios(hora, {
  all: async (r, p) => {
    const results = {};
    for (const [name, run] of Object.entries(cases(r, p))) {
      results[name] = { got: await run(), after: await followUp() };
    }
    return results;
  },
});
