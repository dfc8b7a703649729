'use strict';
// Runs inside every rank of a `hora run` job for test/grouped.test.js: hora.grouped.allreduce, allgather and
// reduceScatter, one scenario (argv[2]) per run.
//
//   values       mixed sizes (1 element to 300 000) and dtypes, awaited and wait()ed, named and unnamed, two
//                unnamed groups and single calls in one batch, inplace, scaling; every result compared with the
//                one every rank can compute (expected values are exact: small integers)
//   whole        HORA_FUSION_MB set small by the test: an unnamed single call and then a group of 40 tensors
//                several times the fusion buffer in one run; comm.submit is watched: the group's items must
//                reach the engine in one batch
//   bad          the last rank's tensors[2] is a plain Array (and, next, an unknown option)
//   counts       rank 1's second tensor is one element longer (a fused run, then large tensors)
//   length       rank 0's group has 3 tensors, rank 1's 2; rank 1 then makes one more call (it takes the place
//                of rank 0's third tensor), then every rank one more
//   groups       a process group of the last and first ranks: values, and a bad element on group rank 1
//   one          a world of one: copies, the same checks
// After each failing call every rank runs one more allreduce, which must succeed: nothing was lost.
const hora = require('../../dist/ts/index.js');
const core = require('../../dist/ts/hora.js');
const { outcome, runScenarios } = require('../support/worker-util');

/** Rank q's i-th tensor of the values scenario: small integers, so that every sum is exact. */
function tensorOf(Ctor, length, q, i) {
  const a = new Ctor(length);
  for (let j = 0; j < length; j++) a[j] = Ctor === BigInt64Array ? BigInt((q + 1) * (j % 7) + i) : ((q + 1) * (j % 7) + i) % 50;
  return a;
}

const SHAPES = [[Float32Array, 1], [Float64Array, 300000], [Int32Array, 17], [Float32Array, 1000], [BigInt64Array, 5], [Int8Array, 9], [Float32Array, 70000]];

function sumOver(p, Ctor, length, i) {
  const out = new Ctor(length);
  for (let q = 0; q < p; q++) {
    const t = tensorOf(Ctor, length, q, i);
    for (let j = 0; j < length; j++) out[j] += t[j];
  }
  return out;
}

function equal(a, b) {
  return a.constructor === b.constructor && a.length === b.length && a.every((v, j) => v === b[j]);
}

/** Each result against its expected array: true, or the first index that differs. */
function check(got, want) {
  if (!Array.isArray(got) || got.length !== want.length) return `got ${Array.isArray(got) ? got.length : typeof got} results, want ${want.length}`;
  const bad = want.findIndex((w, i) => !equal(got[i], w));
  return bad < 0 ? true : `result ${bad} differs`;
}

/** One allreduce after a failure: the ranks are still in step. */
async function after(p) {
  return outcome(() => hora.allreduce(new Float32Array([1, 2]), { op: 'sum' })).then((o) => ({ ...o, right: o.ok && o.value.join() === `${p},${2 * p}` }));
}

function gatherOf(p, Ctor, i) {
  const parts = Array.from({ length: p }, (_, q) => tensorOf(Ctor, 3 + q + i, q, i));
  const out = new Ctor(parts.reduce((n, t) => n + t.length, 0));
  let at = 0;
  for (const t of parts) {
    out.set(t, at);
    at += t.length;
  }
  return out;
}

function blockOf(full, p, r) {
  const base = Math.floor(full.length / p), extra = full.length % p;
  const start = (b) => b * base + Math.min(b, extra);
  return full.slice(start(r), start(r + 1));
}

async function valuesIn(api, r, p) {
  const checks = {};
  const mine = SHAPES.map(([C, n], i) => tensorOf(C, n, r, i));
  const sums = SHAPES.map(([C, n], i) => sumOver(p, C, n, i));
  checks['allreduce sum'] = check(await api.grouped.allreduce(mine, { op: 'sum' }), sums);
  checks['allreduce sum wait()'] = check(api.grouped.allreduce(mine, { op: 'sum', name: 'grads' }).wait(), sums);
  const floats = [0, 1, 3, 6].map((i) => tensorOf(SHAPES[i][0], SHAPES[i][1], r, i));
  const avgs = [0, 1, 3, 6].map((i) => sumOver(p, SHAPES[i][0], SHAPES[i][1], i).map((v) => v / p));
  checks['allreduce avg'] = check(await api.grouped.allreduce(floats), avgs);
  const copies = floats.map((t) => t.slice());
  const inplace = await api.grouped.allreduce(copies, { op: 'sum', inplace: true, postscaleFactor: 0.5 });
  checks['allreduce inplace, postscaled'] = check(inplace, [0, 1, 3, 6].map((i) => sumOver(p, SHAPES[i][0], SHAPES[i][1], i).map((v) => v * 0.5)));
  checks['inplace: the same arrays'] = inplace.every((t, i) => t === copies[i]);
  const gathers = [Float32Array, Int32Array, Float64Array, Uint8Array].map((C, i) => tensorOf(C, 3 + r + i, r, i));
  checks.allgather = check(await api.grouped.allgather(gathers), [Float32Array, Int32Array, Float64Array, Uint8Array].map((C, i) => gatherOf(p, C, i)));
  checks.reduceScatter = check(await api.grouped.reduceScatter(mine.slice(0, 4)), SHAPES.slice(0, 4).map(([C, n], i) => blockOf(sumOver(p, C, n, i), p, r)));
  checks.empty = check(await api.grouped.allreduce([]), []);
  // One batch: single calls, named and not, between two unnamed groups and a named one.
  const a = api.grouped.allreduce([mine[0], mine[2]], { op: 'sum' });
  const s = api.allreduce(new Float32Array([r]), { op: 'sum' });
  const b = api.grouped.allreduce([mine[3], mine[0]], { op: 'max' });
  const n = api.allreduce(new Float32Array([1]), { op: 'sum', name: 'lone' });
  const c = api.grouped.allgather([gathers[0]], { name: 'g' });
  const [ga, gs, gb, gn, gc] = await Promise.all([a, s, b, n, c]);
  const max = (i) => {
    const out = new SHAPES[i][0](SHAPES[i][1]);
    for (let q = 0; q < p; q++) tensorOf(SHAPES[i][0], SHAPES[i][1], q, i).forEach((v, j) => { out[j] = q === 0 ? v : Math.max(out[j], v); });
    return out;
  };
  checks['one batch: first group'] = check(ga, [sums[0], sums[2]]);
  checks['one batch: second group'] = check(gb, [max(3), max(0)]);
  checks['one batch: third group'] = check(gc, [gatherOf(p, Float32Array, 0)]);
  checks['one batch: single calls'] = gs[0] === (p * (p - 1)) / 2 && gn[0] === p;
  return checks;
}

async function values(r, p) {
  return { checks: await valuesIn(hora, r, p) };
}

async function whole(r, p) {
  // The addon's methods are read-only: the dispatcher is given a proxy of its communicator that records
  // each batch handed to the engine.
  const dispatcher = core.current('test').dispatcher;
  const comm = dispatcher.comm;
  const batches = [];
  dispatcher.comm = new Proxy(comm, {
    get(target, key) {
      if (key === 'submit') {
        return (items, willWait) => {
          batches.push(items.map((it) => it.name));
          return target.submit(items, willWait);
        };
      }
      const v = target[key];
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
  const tensors = Array.from({ length: 40 }, (_, i) => new Float32Array(2048).fill(r + i));
  const lone = hora.allreduce(new Float32Array(4096).fill(1), { op: 'sum' });
  const group = hora.grouped.allreduce(tensors, { op: 'sum' });
  const got = await group;
  await lone;
  dispatcher.comm = comm;
  const right = got.every((t, i) => t.every((v) => v === (p * (p - 1)) / 2 + p * i));
  const names = tensors.map((_, i) => `grouped.allreduce.1_${i + 1}of40`);
  const holding = batches.filter((b) => names.some((n) => b.includes(n)));
  return { right, batches: batches.map((b) => b.length), whole: holding.length === 1 && names.every((n) => holding[0].includes(n)) };
}

async function bad(r, p) {
  const last = r === p - 1;
  const tensors = [new Float32Array(3), new Float64Array(200000), last ? [1, 2] : new Float32Array(2), new Int32Array(1)];
  const got = await outcome(() => hora.grouped.allreduce(tensors, { op: 'sum' }));
  const afterBad = await after(p);
  const option = await outcome(() => hora.grouped.allgather([new Float32Array(1)], last ? { nam: 'x' } : {}));
  return { got, afterBad, option, after: await after(p) };
}

async function counts(r, p) {
  const fused = await outcome(() => hora.grouped.allreduce([new Float32Array(4), new Float32Array(r === 1 ? 6 : 5), new Float32Array(2)], { op: 'sum', name: 'small' }));
  const afterFused = await after(p);
  const large = await outcome(() => hora.grouped.allreduce([new Float64Array(100000), new Float64Array(r === 1 ? 100001 : 100000)], { op: 'sum', name: 'large' }));
  return { fused, afterFused, large, after: await after(p) };
}

async function length(r, p) {
  const tensors = Array.from({ length: r === 0 ? 3 : 2 }, () => new Float32Array(8).fill(1));
  const got = await outcome(() => hora.grouped.allreduce(tensors, { op: 'sum' }));
  const taken = r !== 0 ? await outcome(() => hora.allreduce(new Float32Array(8), { op: 'sum' })) : null;
  return { got, taken, after: await after(p) };
}

async function groups(r, p) {
  const g = await hora.newGroup([p - 1, 0]);
  if (!g) return { member: false, after: await after(p) };
  const gr = g.rank();
  const got = await g.grouped.allreduce([new Float32Array([r, 1]), new Int32Array([3 * (p - 1), 3 * (p - 1)])], { op: 'sum' });
  const gathered = await g.grouped.allgather([new Int32Array([r]), new Float64Array([r, r])]);
  const scattered = await g.grouped.reduceScatter([new Float32Array([1, 2, 3])]);
  const badOne = await outcome(() => g.grouped.allreduce([new Float32Array(1), gr === 1 ? 'x' : new Float32Array(1)]));
  return {
    member: true,
    allreduce: check(got, [new Float32Array([p - 1, 2]), new Int32Array([6 * (p - 1), 6 * (p - 1)])]),
    allgather: check(gathered, [new Int32Array([p - 1, 0]), new Float64Array([p - 1, p - 1, 0, 0])]),
    reduceScatter: check(scattered, [gr === 0 ? new Float32Array([2, 4]) : new Float32Array([6])]),
    bad: badOne,
    groupAfter: await outcome(() => g.allreduce(new Float32Array([1]), { op: 'sum' })),
    after: await after(p),
  };
}

async function one() {
  const checks = await valuesIn(hora, 0, 1);
  const x = new Float32Array([5]);
  const [y] = await hora.grouped.allreduce([x]);
  const bad = await outcome(() => hora.grouped.reduceScatter([new Float32Array(1), null]));
  return { checks, copy: y !== x && y[0] === 5, bad };
}

runScenarios(hora, { values, whole, bad, counts, length, groups, one });
