'use strict';
// Runs inside every rank of a `hora run` job for test/rooted.test.js: hora.reduce and hora.gather, one
// scenario (argv[2]) per run.
//
//   sweep      every root x dtype x op x length (0, 1, 7, 13p+1) for reduce, against a JS reference (sum, min,
//              max, prod: inputs small enough that every result is exact) and against hora.allreduce of the
//              same inputs, bit for bit (avg, and the float dtypes with prescaleFactor and postscaleFactor);
//              lengths past the shared-memory slots and the fusion buffer for a few; gather of every dtype
//              from every root with lengths that differ by rank (rank 0 with nothing, all empty, large)
//   groups     reduce and gather in a group of the last and first ranks (group ranks reversed)
//   invalid    one rank passes a root out of range, an unknown op, an unknown option, a plain Array, a
//              DeviceBuffer (a look-alike: no GPU needed), an integer array with prescaleFactor; then different
//              roots, ops, dtypes, kinds and lengths (reduce) on different ranks
//   kill       the last rank SIGKILLs itself; the others' next reduce and gather
//   one        a world of one: copies
//   elastic    under `hora run -np 3 --min-np 2`: refused outside hora.elastic.run; inside, reduce and gather in
//              each step, worker 2 SIGKILLing itself after the first commit
// After each failing call every rank runs one more reduce, which must succeed: nothing was lost.
const hora = require('../../dist/ts/index.js');
const { describeError, outcome, runScenarios, lastRankDies } = require('../support/worker-util');

const DTYPES = ['float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'int8', 'int16', 'uint16'];
const OPS = ['sum', 'avg', 'min', 'max', 'prod'];
const CTOR = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array, bfloat16: Uint16Array, int32: Int32Array,
  int64: BigInt64Array, uint8: Uint8Array, int8: Int8Array, int16: Int16Array, uint16: Uint16Array,
};
const UNSIGNED = new Set(['uint8', 'uint16']);

/** float16 bits of a small integer (|v| < 2048: exact). */
function half(v) {
  if (v === 0) return 0;
  const sign = v < 0 ? 0x8000 : 0;
  const a = Math.abs(v);
  const e = Math.floor(Math.log2(a));
  return sign | ((e + 15) << 10) | Math.round((a / 2 ** e - 1) * 1024);
}
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
/** bfloat16 bits of a small integer (|v| < 256: exact). */
function bfloat(v) {
  f32[0] = v;
  return u32[0] >>> 16;
}

/** Element i of rank r's input: small integers, so every sum, min, max and product over 4 ranks is exact. */
function value(dtype, op, r, i, salt) {
  const h = (Math.imul(i + 1, 2654435761) ^ Math.imul(r + 7, 40503) ^ salt) >>> 0;
  if (op === 'prod') return [1, 2, -1, -2][h % (UNSIGNED.has(dtype) ? 2 : 4)];
  if (UNSIGNED.has(dtype)) return h % 40;
  return (h % 33) - 16;
}

/** An array of dtype holding the numbers vals. */
function encode(dtype, vals) {
  const x = new CTOR[dtype](vals.length);
  for (let i = 0; i < vals.length; i++) {
    const v = vals[i];
    x[i] = dtype === 'float16' ? half(v) : dtype === 'bfloat16' ? bfloat(v) : dtype === 'int64' ? BigInt(v) : v;
  }
  return x;
}

function input(dtype, op, r, n, salt) {
  return encode(dtype, Array.from({ length: n }, (_, i) => value(dtype, op, r, i, salt)));
}

const COMBINE = { sum: (a, b) => a + b, min: Math.min, max: Math.max, prod: (a, b) => a * b };

/** The exact reduction over ranks of their inputs (not avg). */
function reference(dtype, op, p, n, salt) {
  const vals = [];
  for (let i = 0; i < n; i++) {
    let acc = value(dtype, op, 0, i, salt);
    for (let q = 1; q < p; q++) acc = COMBINE[op](acc, value(dtype, op, q, i, salt));
    vals.push(acc);
  }
  return encode(dtype, vals);
}

function sameBytes(a, b) {
  if (!a || !b || a.constructor !== b.constructor || a.length !== b.length) return false;
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

function show(x) {
  if (x === null) return 'null';
  if (!x || typeof x.length !== 'number') return String(x);
  return `${x.constructor.name}(${x.length}) [${Array.from(x.slice(0, 6), String).join(', ')}${x.length > 6 ? ', ...' : ''}]`;
}

/** Failures of the checks, each a line; counted checks in `checked`. */
class Checks {
  constructor() {
    this.checked = 0;
    this.failures = [];
  }
  expect(ok, what) {
    this.checked++;
    if (!ok && this.failures.length < 20) this.failures.push(typeof what === 'function' ? what() : what);
  }
}

async function reduceCase(c, r, p, dtype, op, n, root, scale) {
  const salt = n * 31 + DTYPES.indexOf(dtype) * 7 + OPS.indexOf(op);
  const x = input(dtype, op, r, n, salt);
  const before = x.slice();
  const options = { root, op, ...(dtype === 'float16' || dtype === 'bfloat16' || dtype === 'uint16' ? { dtype } : {}), ...scale };
  const what = `reduce ${dtype} ${op} x ${n} root ${root}${scale ? ` ${JSON.stringify(scale)}` : ''}`;
  let got, oracle;
  try {
    got = await hora.reduce(x, options);
    const { root: _root, ...allreduceOptions } = options;
    oracle = await hora.allreduce(x, allreduceOptions);
  } catch (e) {
    return c.expect(false, `${what}: threw ${e.code} ${e.message}`);
  }
  c.expect(sameBytes(x, before), () => `${what}: x was written`);
  if (r !== root) return c.expect(got === null, () => `${what}: a non-root got ${show(got)}, not null`);
  c.expect(got !== x, `${what}: the root's result is a new array`);
  c.expect(sameBytes(got, oracle), () => `${what}: ${show(got)} differs from allreduce's ${show(oracle)}`);
  if (op !== 'avg' && !scale) {
    const want = reference(dtype, op, p, n, salt);
    c.expect(sameBytes(got, want), () => `${what}: ${show(got)}, want ${show(want)}`);
  }
}

/** Rank q's gather input: length lengthOf(q), values that name the rank and the index. */
function gatherInput(dtype, q, n) {
  return encode(dtype, Array.from({ length: n }, (_, i) => (UNSIGNED.has(dtype) ? (q * 7 + i) % 50 : ((q * 7 + i) % 50) - 25)));
}

async function gatherCase(c, r, p, dtype, lengthOf, root, label, group) {
  const x = gatherInput(dtype, r, lengthOf(r));
  const options = { root, ...(dtype === 'float16' || dtype === 'bfloat16' || dtype === 'uint16' ? { dtype } : {}) };
  const what = `${group ? 'group.' : ''}gather ${dtype} lengths ${label} root ${root}`;
  let got;
  try {
    got = await (group ? group.gather(x, options) : hora.gather(x, options));
  } catch (e) {
    return c.expect(false, `${what}: threw ${e.code} ${e.message}`);
  }
  const me = group ? group.rank() : r;
  if (me !== root) return c.expect(got === null, () => `${what}: a non-root got ${show(got)}, not null`);
  const ranks = group ? group.ranks : Array.from({ length: p }, (_, q) => q);
  const parts = ranks.map((q) => gatherInput(dtype, q, lengthOf(q)));
  const want = new CTOR[dtype](parts.reduce((a, b) => a + b.length, 0));
  let at = 0;
  for (const part of parts) {
    want.set(part, at);
    at += part.length;
  }
  c.expect(sameBytes(got, want), () => `${what}: ${show(got)}, want ${show(want)}`);
}

async function sweep(r, p) {
  const c = new Checks();
  const counts = [0, 1, 7, 13 * p + 1];
  for (let root = 0; root < p; root++) {
    for (const dtype of DTYPES) {
      for (const op of OPS) {
        for (const n of counts) await reduceCase(c, r, p, dtype, op, n, root);
      }
      if (['float32', 'float64', 'float16', 'bfloat16'].includes(dtype)) {
        for (const op of ['sum', 'avg']) await reduceCase(c, r, p, dtype, op, 13 * p + 1, root, { prescaleFactor: 2, postscaleFactor: 0.5 });
      }
    }
    // Past the 64 KiB shared-memory slots, the ring's threshold and (HORA_FUSION_MB=1) the fusion buffer.
    await reduceCase(c, r, p, 'float32', 'sum', 300001, root);
    await reduceCase(c, r, p, 'int64', 'max', 150001, root);
    await reduceCase(c, r, p, 'float16', 'avg', 600001, root);
    await reduceCase(c, r, p, 'float64', 'avg', 150001, root, { prescaleFactor: 4, postscaleFactor: 0.25 });
    const patterns = [
      ['r (rank 0 none)', (q) => q],
      ['3r+1', (q) => 3 * q + 1],
      ['all 0', () => 0],
      ['only the last rank', (q) => (q === p - 1 ? 5 : 0)],
    ];
    for (const dtype of DTYPES) {
      for (const [label, lengthOf] of patterns) await gatherCase(c, r, p, dtype, lengthOf, root, label);
    }
    await gatherCase(c, r, p, 'float32', (q) => 300001 + 1013 * q, root, '300001+1013r');
    await gatherCase(c, r, p, 'uint8', (q) => (q === root ? 0 : 2000001 + q), root, '2000001+r, the root none');
  }
  // Several in one batch (one synchronous run), named, with an allreduce among them.
  const xs = [input('float32', 'sum', r, 10, 1), input('int32', 'max', r, 10, 2)];
  const [a, s, b] = await Promise.all([
    hora.reduce(xs[0], { root: p - 1, name: 'a' }), hora.allreduce(new Float32Array([1]), { op: 'sum', name: 'b' }),
    hora.gather(xs[1], { root: 0, name: 'c' }),
  ]);
  c.expect(r === p - 1 ? sameBytes(a, reference('float32', 'sum', p, 10, 1)) : a === null, () => `one batch: reduce gave ${show(a)}`);
  c.expect(s[0] === p, 'one batch: the allreduce between');
  c.expect(r === 0 ? b.length === 10 * p : b === null, () => `one batch: gather gave ${show(b)}`);
  // wait() blocks for it as for the others.
  const waited = hora.reduce(new Int32Array([r + 1]), { root: 0 }).wait();
  c.expect(r === 0 ? waited[0] === (p * (p + 1)) / 2 : waited === null, () => `wait(): ${show(waited)}`);
  return { checked: c.checked, failures: c.failures };
}

async function groups(r, p) {
  const c = new Checks();
  const g = await hora.newGroup([p - 1, 0]);
  if (!g) return { member: false, checked: 0, failures: [] };
  const gr = g.rank();
  for (const root of [0, 1]) {
    // Each member's input: its world rank's; the group's reduction is ranks p-1 and 0's.
    const x = input('float64', 'sum', r, 9, 5);
    const got = await g.reduce(x, { root });
    const want = encode('float64', Array.from({ length: 9 }, (_, i) => value('float64', 'sum', p - 1, i, 5) + value('float64', 'sum', 0, i, 5)));
    c.expect(gr === root ? sameBytes(got, want) : got === null, () => `group.reduce root ${root}: ${show(got)}, want ${show(want)}`);
    await gatherCase(c, r, p, 'int16', (q) => 2 * q + 1, root, '2r+1', g);
  }
  const avg = await g.reduce(new Float32Array([r, 2]), { root: 1, op: 'avg' });
  c.expect(gr === 1 ? avg[0] === (p - 1) / 2 && avg[1] === 2 : avg === null, () => `group.reduce avg divides by the group's size: ${show(avg)}`);
  return { member: true, checked: c.checked, failures: c.failures };
}

/** One reduce after a failure: the ranks are still in step. */
async function after(p) {
  try {
    const got = await hora.reduce(new Int32Array([1, 2]), { root: p - 1 });
    return hora.rank() === p - 1 ? Array.from(got).join(',') === `${p},${2 * p}` : got === null;
  } catch (e) {
    return describeError(e);
  }
}

async function invalid(r, p) {
  const x = new Float32Array([r, 1, 2]);
  const out = {};
  out.root = await outcome(() => hora.reduce(x, { root: r === 1 ? p : 0 }));
  out.rootAfter = await after(p);
  out.gatherRoot = await outcome(() => hora.gather(x, { root: r === 1 ? -1 : 0 }));
  out.gatherRootAfter = await after(p);
  out.op = await outcome(() => hora.reduce(x, { op: r === 1 ? 'mean' : 'sum' }));
  out.opAfter = await after(p);
  out.key = await outcome(() => hora.gather(x, r === 0 ? { dst: 1 } : {}));
  out.keyAfter = await after(p);
  out.notArray = await outcome(() => hora.reduce(r === 1 ? [1, 2, 3] : x));
  out.notArrayAfter = await after(p);
  const device = Object.create(hora.cuda.DeviceBuffer.prototype);
  out.device = await outcome(() => hora.reduce(r === 1 ? device : x));
  out.deviceAfter = await after(p);
  out.gatherDevice = await outcome(() => hora.gather(r === 1 ? device : x));
  out.gatherDeviceAfter = await after(p);
  out.intScale = await outcome(() => hora.reduce(new Int32Array(3), r === 1 ? { prescaleFactor: 2 } : {}));
  out.intScaleAfter = await after(p);
  out.roots = await outcome(() => hora.reduce(x, { root: r }));
  out.rootsAfter = await after(p);
  out.gatherRoots = await outcome(() => hora.gather(x, { root: r }));
  out.gatherRootsAfter = await after(p);
  out.ops = await outcome(() => hora.reduce(x, { op: r === 0 ? 'max' : 'sum' }));
  out.opsAfter = await after(p);
  out.counts = await outcome(() => hora.reduce(new Float32Array(r === p - 1 ? 4 : 3)));
  out.countsAfter = await after(p);
  out.dtypes = await outcome(() => hora.gather(r === 0 ? new Int32Array(3) : x));
  out.dtypesAfter = await after(p);
  out.kinds = await outcome(() => (r === 0 ? hora.gather(x) : hora.reduce(x)));
  out.kindsAfter = await after(p);
  return out;
}

async function kill(r, p) {
  await lastRankDies(hora, r, p);
  const t0 = performance.now();
  const reduce = await outcome(() => hora.reduce(new Float32Array(1000), { root: 0 }));
  const ms = performance.now() - t0;
  const gather = await outcome(() => hora.gather(new Float32Array(10), { root: 1 }));
  return { reduce, gather, ms };
}

async function one() {
  const x = new Float64Array([1.5, -2]);
  const a = await hora.reduce(x, { op: 'avg', postscaleFactor: 2 });
  const g = hora.gather(x).wait();
  const bad = await outcome(() => hora.reduce(x, { root: 1 }));
  return { reduce: Array.from(a), reduceCopy: a !== x, gather: Array.from(g), gatherCopy: g !== x, bad };
}

async function elastic() {
  const worker = Number(process.env.HORA_WORKER_ID);
  const outside = await outcome(() => hora.reduce(new Float32Array(1)));
  const state = new hora.elastic.State({ step: 0 });
  const seen = [];
  await hora.elastic.run(state, async (s) => {
    while (s.step < 3) {
      const last = hora.size() - 1;
      const sum = await hora.reduce(new Float32Array([1, s.step]), { root: last });
      const all = await hora.gather(new Int32Array([worker, s.step]), { root: 0 });
      seen.push({ size: hora.size(), step: s.step, sum: sum && Array.from(sum), all: all && Array.from(all) });
      s.step++;
      await s.commit();
      if (s.step === 1 && worker === 2) process.kill(process.pid, 'SIGKILL');
    }
  });
  return { outside, seen, rank: hora.rank() };
}

// A worker started in a refilled slot of the elastic scenario leaves at once: the world stays at two.
if (process.argv[2] === 'elastic' && Number(process.env.HORA_WORKER_ID) >= 3) process.exit(0);
runScenarios(hora, { sweep, groups, invalid, kill, one, elastic }, { noShutdown: ['kill'] });
