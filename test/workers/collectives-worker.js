'use strict';
// Runs inside every rank of a `hora run` job and sweeps collective x op x dtype x element count, comparing
// every element with a reference computed here in JS. Inputs are deterministic functions of (rank, index,
// seed), so each rank can compute every other rank's input and therefore the exact expected result.
//
// Two input families:
//   exact - small integers (and quarter multiples for float16/bfloat16) chosen so that every partial sum or
//           product is exactly representable in the dtype: results must match bit for bit, whatever the
//           algorithm, transport or fusion. Their bytes feed `digest`, which the test compares across runs.
//   real  - float32/float64 non-integers, checked with a relative tolerance (summation order may differ
//           between algorithms, so they stay out of `digest`), but still required to be bit-identical
//           across ranks.
// The float dtypes also run allreduce and reduceScatter (ops sum and avg) with prescaleFactor and
// postscaleFactor: powers of two and 3 with the exact inputs (still exact until the last rounding, so
// they feed `digest`), 0.1 and 1.7 with the real ones.
//
// Every result (that all ranks must agree on) is hashed per group; at the end the ranks allgather their
// group hashes and check them against each other. One JSON line is printed, and written to
// $HORA_TEST_RESULT_DIR/rank-<rank>.json when that is set. The process exits 0 even when checks failed:
// the test asserts on the report.
//
// Env: COLLECTIVES_COUNTS  comma-separated element counts (default 0,1,7,p*13+1,300001); also read as
//                          HORA_TEST_COUNTS, which `hora run` passes on to workers on other hosts
//      COLLECTIVES_SEED    integer mixed into every input (default 1)

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const hora = require('../../dist/ts/index.js');

const DTYPES = ['float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'int8', 'int16', 'uint16'];
const OPS = ['sum', 'avg', 'min', 'max', 'prod'];
const MAX_REPORTED = 12;

let checks = 0;
let failures = 0;
const firstFailures = [];
const digest = crypto.createHash('sha256');
/** group name -> sha256 of results every rank must agree on */
const groupHashes = new Map();

function fail(what) {
  failures++;
  if (firstFailures.length < MAX_REPORTED) firstFailures.push(what);
}

function check(ok, what) {
  checks++;
  if (!ok) fail(typeof what === 'function' ? what() : what);
  return ok;
}

function bytesOf(x) {
  return Buffer.from(x.buffer, x.byteOffset, x.byteLength);
}

function hashInto(group, x, exact) {
  if (!groupHashes.has(group)) groupHashes.set(group, crypto.createHash('sha256'));
  groupHashes.get(group).update(bytesOf(x));
  if (exact) digest.update(bytesOf(x));
}

// ---------------------------------------------------------------------------------------------------
// Deterministic inputs.

function mix(a, b, c) {
  let h = Math.imul(a ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(b + 0x632be5ab, 0xc2b2ae35) ^ Math.imul(c + 0x27d4eb2f, 0x165667b1);
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d);
  h ^= h >>> 12;
  h = Math.imul(h, 0x297a2d39);
  h ^= h >>> 15;
  return h >>> 0;
}

/** Integer in [lo, hi] from a hash. */
function pick(h, lo, hi) {
  return lo + (h % (hi - lo + 1));
}

// Exactly representable values per dtype and op; the bounds shrink with the world size so that every
// partial result over all ranks stays exact (set once the size is known).
let worldSize = 5;

function exactValue(dtype, op, h, h2) {
  const p = worldSize;
  if (op === 'prod') {
    if (dtype === 'uint8') return pick(h, 1, Math.max(1, Math.floor(255 ** (1 / p) + 1e-9))); // 3^5 = 243
    if (dtype === 'uint16') return pick(h, 1, Math.max(1, Math.floor(65535 ** (1 / p) + 1e-9)));
    return [-1, 1, 2][h % 3];
  }
  const minmax = op === 'min' || op === 'max';
  switch (dtype) {
    case 'float32':
    case 'float64':
      return minmax ? pick(h, -1e6, 1e6) : pick(h, -1000, 1000);
    case 'float16': {
      const q = Math.floor(2000 / p); // |sum| <= 500 in quarters: 11 bits
      return minmax ? pick(h, -8000, 8000) / 4 : pick(h, -q, q) / 4;
    }
    case 'bfloat16': {
      const q = Math.floor(160 / p); // |sum| <= 40 in quarters: 8 bits
      return minmax ? pick(h, -1000, 1000) / 4 : pick(h, -q, q) / 4;
    }
    case 'int32': {
      const m = Math.floor(2 ** 31 / p) - 1;
      return minmax ? h | 0 : pick(h, -m, m);
    }
    case 'int64': {
      // Beyond 32 bits, still exact as a JS number: |v| < 2^45 (sum) or 2^52 (min/max).
      const high = minmax ? pick(h, -(1 << 27), 1 << 27) : pick(h, -(1 << 20), 1 << 20);
      return high * 2 ** 25 + (h2 % 2 ** 25);
    }
    case 'uint8':
      return minmax ? h & 255 : pick(h, 0, Math.floor(255 / p)); // p * max <= 255
    case 'int8':
      return minmax ? (h << 24) >> 24 : pick(h, -Math.floor(127 / p), Math.floor(127 / p));
    case 'int16':
      return minmax ? (h << 16) >> 16 : pick(h, -Math.floor(32767 / p), Math.floor(32767 / p));
    case 'uint16':
      return minmax ? h & 0xffff : pick(h, 0, Math.floor(65535 / p));
  }
  throw new Error(dtype);
}

// Non-integer values for float32/float64; prod stays in [0.5, 2] in magnitude to avoid overflow and underflow.
function realValue(dtype, op, h, h2) {
  const u = h / 2 ** 32 + h2 / 2 ** 64;
  let v;
  if (op === 'prod') v = (h2 & 1 ? -1 : 1) * 2 ** (u * 2 - 1);
  else v = (u - 0.5) * 200;
  return dtype === 'float32' ? Math.fround(v) : v;
}

function inputValues(kind, dtype, op, rank, n, seed) {
  const out = new Float64Array(n);
  const gen = kind === 'exact' ? exactValue : realValue;
  for (let i = 0; i < n; i++) out[i] = gen(dtype, op, mix(rank, i, seed), mix(i, seed, rank ^ 0x5bd1e995));
  return out;
}

// ---------------------------------------------------------------------------------------------------
// float16 / bfloat16 codecs (round to nearest even), written here so the reference is independent of the core.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

// Via the float32 bits: every value passed here is a float32 already, so there is no double rounding.
function toHalf(x) {
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const e = (b >>> 23) & 0xff;
  let m = b & 0x7fffff;
  if (e === 0xff) return sign | 0x7c00 | (m ? 0x200 : 0);
  const he = e - 112; // the half exponent field, before clamping
  if (he >= 31) return sign | 0x7c00;
  if (he <= 0) {
    // Subnormal half: count units of 2^-24.
    if (he < -10) return sign;
    m |= 0x800000;
    const shift = 14 - he;
    const half = 2 ** (shift - 1);
    let r = Math.floor(m / 2 ** shift);
    const rem = m - r * 2 ** shift;
    if (rem > half || (rem === half && r & 1)) r++;
    return sign | r;
  }
  let r = (he << 10) | (m >>> 13);
  const rem = m & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && r & 1)) r++; // a carry into the exponent is still correct
  return sign | r;
}

function fromHalf(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 31;
  const m = h & 1023;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

function toBfloat16(x) {
  f32[0] = x;
  const bits = u32[0];
  if (Number.isNaN(f32[0])) return 0x7fc0;
  return ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
}

function fromBfloat16(h) {
  u32[0] = h << 16;
  return f32[0];
}

// ---------------------------------------------------------------------------------------------------
// Typed arrays and the reference.

const CTOR = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array, bfloat16: Uint16Array,
  int32: Int32Array, int64: BigInt64Array, uint8: Uint8Array, int8: Int8Array, int16: Int16Array, uint16: Uint16Array,
};

function optionsFor(dtype) {
  return dtype === 'float16' || dtype === 'bfloat16' || dtype === 'uint16' ? { dtype } : {};
}

/** Typed array holding JS numbers `vals` in `dtype`. */
function encode(dtype, vals) {
  const x = new CTOR[dtype](vals.length);
  for (let i = 0; i < vals.length; i++) x[i] = encodeOne(dtype, vals[i]);
  return x;
}

function encodeOne(dtype, v) {
  if (dtype === 'float16') return toHalf(v);
  if (dtype === 'bfloat16') return toBfloat16(v);
  if (dtype === 'int64') return BigInt(v);
  return v;
}

function decodeOne(dtype, raw) {
  if (dtype === 'float16') return fromHalf(raw);
  if (dtype === 'bfloat16') return fromBfloat16(raw);
  if (dtype === 'int64') return Number(raw);
  return raw;
}

const isInt = (dtype) => ['int32', 'int64', 'uint8', 'int8', 'int16', 'uint16'].includes(dtype);
const EPS = { float32: 2 ** -23, float64: 2 ** -52 };

/**
 * The expected full reduction of `inputs` (one array of JS numbers per rank): `want` as JS numbers, `typed`
 * in the dtype (exact inputs), and for real inputs a per-element absolute tolerance `tol`.
 */
function expectedOf(kind, dtype, op, inputs, p) {
  const n = inputs[0].length;
  const acc = Float64Array.from(inputs[0]);
  const mag = kind === 'real' ? acc.map(Math.abs) : null;
  for (let r = 1; r < p; r++) {
    const v = inputs[r];
    if (op === 'sum' || op === 'avg') for (let i = 0; i < n; i++) acc[i] += v[i];
    else if (op === 'min') for (let i = 0; i < n; i++) acc[i] = Math.min(acc[i], v[i]);
    else if (op === 'max') for (let i = 0; i < n; i++) acc[i] = Math.max(acc[i], v[i]);
    else for (let i = 0; i < n; i++) acc[i] *= v[i];
    if (mag) for (let i = 0; i < n; i++) mag[i] += Math.abs(v[i]);
  }
  if (op === 'avg') {
    // Integers truncate toward zero; float16/bfloat16 divide in float32 and round to 16 bits once.
    if (isInt(dtype)) for (let i = 0; i < n; i++) acc[i] = Math.trunc(acc[i] / p);
    else if (dtype === 'float64') for (let i = 0; i < n; i++) acc[i] /= p;
    else for (let i = 0; i < n; i++) acc[i] = Math.fround(acc[i] / p);
  }
  if (kind === 'exact') return { want: acc, typed: encode(dtype, acc), tol: null };
  const tol = new Float64Array(n);
  if (op === 'sum' || op === 'avg') {
    const scale = (p + 2) * EPS[dtype] / (op === 'avg' ? p : 1);
    for (let i = 0; i < n; i++) tol[i] = scale * mag[i];
  } else if (op === 'prod') {
    for (let i = 0; i < n; i++) tol[i] = (p + 2) * EPS[dtype] * Math.abs(acc[i]);
  } // min and max are exact even for real inputs
  return { want: acc, typed: null, tol };
}

/**
 * The same with prescaleFactor pre and postscaleFactor post (ops sum and avg): each input times pre (exact
 * for the exact inputs and pre a power of two), summed, then finished as the engine's last reduction step
 * does it, in float32 (float32, float16, bfloat16) or float64: divided by p for avg, times post, rounded
 * into the dtype once.
 */
function scaledExpectedOf(kind, dtype, op, inputs, p, pre, post) {
  const n = inputs[0].length;
  const acc = new Float64Array(n);
  const mag = new Float64Array(n);
  const f = dtype === 'float64' ? (v) => v : Math.fround;
  const fpre = f(pre), fpost = f(post);
  for (let r = 0; r < p; r++) {
    for (let i = 0; i < n; i++) {
      acc[i] += inputs[r][i] * fpre;
      mag[i] += Math.abs(inputs[r][i] * fpre);
    }
  }
  const divisor = op === 'avg' ? p : 1;
  for (let i = 0; i < n; i++) acc[i] = f(f(f(acc[i]) / divisor) * fpost);
  if (kind === 'exact') return { want: acc, typed: encode(dtype, acc), tol: null };
  const tol = mag.map((m) => (p + 4) * EPS[dtype] * m * Math.abs(fpost) / divisor);
  return { want: acc, typed: null, tol };
}

/** Compares result y, the block of the full reduction `e` that starts at `offset`, element by element. */
function checkReduction(label, dtype, e, y, offset) {
  checks++;
  let bad = 0;
  let first = -1;
  if (e.typed) {
    if (bytesOf(y).equals(bytesOf(e.typed.subarray(offset, offset + y.length)))) return;
    for (let j = 0; j < y.length; j++) {
      if (y[j] !== e.typed[offset + j]) {
        if (first < 0) first = j;
        bad++;
      }
    }
  } else {
    for (let j = 0; j < y.length; j++) {
      if (!(Math.abs(y[j] - e.want[offset + j]) <= e.tol[offset + j])) {
        if (first < 0) first = j;
        bad++;
      }
    }
  }
  if (bad > 0) {
    const i = offset + first;
    fail(`${label}: ${bad} of ${y.length} elements wrong; element ${i} is ${String(y[first])} (${decodeOne(dtype, y[first])}), expected ${e.want[i]}`);
  }
}

function sameBytes(label, got, want) {
  const a = bytesOf(got);
  const b = bytesOf(want);
  if (check(got.length === want.length, () => `${label}: length ${got.length}, expected ${want.length}`)) {
    if (!a.equals(b)) {
      let i = 0;
      while (i < got.length && bytesOf(got.subarray(i, i + 1)).equals(bytesOf(want.subarray(i, i + 1)))) i++;
      check(false, `${label}: element ${i} is ${String(got[i])}, expected ${String(want[i])}`);
    } else {
      checks++;
    }
  }
}

/** Arbitrary bit patterns (finite values for floats), for the collectives that only move data. */
function patternArray(dtype, rank, n, seed) {
  const x = new CTOR[dtype](n);
  for (let i = 0; i < n; i++) {
    const h = mix(rank, i, seed);
    const h2 = mix(i, rank, seed ^ 0x1234567);
    switch (dtype) {
      case 'float32':
        x[i] = (h / 2 ** 32 - 0.5) * 2 ** ((h2 % 80) - 40);
        break;
      case 'float64':
        x[i] = (h / 2 ** 32 - 0.5 + h2 / 2 ** 64) * 2 ** ((h2 % 600) - 300);
        break;
      case 'float16':
        x[i] = (h & 0x7c00) === 0x7c00 ? h & 0xfbff : h & 0xffff;
        break;
      case 'bfloat16':
        x[i] = (h & 0x7f80) === 0x7f80 ? h & 0xffbf : h & 0xffff;
        break;
      case 'int32':
        x[i] = h | 0;
        break;
      case 'int64':
        x[i] = BigInt.asIntN(64, (BigInt(h) << 32n) | BigInt(h2));
        break;
      case 'uint8':
      case 'int8':
      case 'int16':
      case 'uint16':
        x[i] = h; // the typed array keeps the low bits
        break;
    }
  }
  return x;
}

// ---------------------------------------------------------------------------------------------------
// Running groups of collectives: all calls of a group are issued in one synchronous run (so the engine
// may fuse them), then settled either with await or with the blocking wait(), alternating per group.

let groupIndex = 0;

async function settle(calls) {
  const useWait = groupIndex++ % 2 === 1;
  for (const c of calls) {
    try {
      c.result = useWait ? c.work.wait() : await c.work;
    } catch (e) {
      c.error = e;
      check(false, `${c.label}: rejected with ${e && e.code} ${e && e.message}`);
    }
  }
  return calls;
}

/** allreduce and reduceScatter of every op, count and input family for one dtype, issued together. */
async function reductions(dtype, rank, p, counts, seed) {
  const kinds = dtype === 'float32' || dtype === 'float64' ? ['exact', 'real'] : ['exact'];
  const cases = [];
  const calls = [];
  let s = seed;
  for (const kind of kinds) {
    for (const op of OPS) {
      for (const n of counts) {
        s++;
        const inputs = [];
        for (let r = 0; r < p; r++) inputs.push(inputValues(kind, dtype, op, r, n, s));
        const x = encode(dtype, inputs[rank]);
        const c = { kind, op, n, x, before: Buffer.from(bytesOf(x)), expected: expectedOf(kind, dtype, op, inputs, p) };
        cases.push(c);
        const options = { ...optionsFor(dtype), op };
        const what = `${dtype} op=${op} n=${n} ${kind} (rank ${rank} of ${p})`;
        calls.push({ c, collective: 'allreduce', label: `allreduce ${what}`, work: hora.allreduce(x, options) });
        calls.push({ c, collective: 'reduceScatter', label: `reduceScatter ${what}`, work: hora.reduceScatter(x, options) });
      }
    }
  }
  // prescaleFactor and postscaleFactor (float dtypes, ops sum and avg): exact factors for the exact inputs,
  // rounding ones for the real inputs; issued with the rest, so fusion must keep tensors of different
  // factors apart.
  if (!isInt(dtype)) {
    const exactFactors = [[0.5, 3], [2, 1], [1, 0.5]];
    for (const kind of kinds) {
      for (const op of ['sum', 'avg']) {
        counts.forEach((n, k) => {
          s++;
          const [pre, post] = kind === 'real' ? [0.1, 1.7] : exactFactors[(k + (op === 'avg' ? 1 : 0)) % exactFactors.length];
          const inputs = [];
          for (let r = 0; r < p; r++) inputs.push(inputValues(kind, dtype, 'sum', r, n, s));
          const x = encode(dtype, inputs[rank]);
          const c = { kind, op, n, x, before: Buffer.from(bytesOf(x)), expected: scaledExpectedOf(kind, dtype, op, inputs, p, pre, post) };
          cases.push(c);
          const options = { ...optionsFor(dtype), op, prescaleFactor: pre, postscaleFactor: post };
          const what = `${dtype} op=${op} prescaleFactor=${pre} postscaleFactor=${post} n=${n} ${kind} (rank ${rank} of ${p})`;
          calls.push({ c, collective: 'allreduce', label: `allreduce ${what}`, work: hora.allreduce(x, options) });
          calls.push({ c, collective: 'reduceScatter', label: `reduceScatter ${what}`, work: hora.reduceScatter(x, options) });
        });
      }
    }
  }
  await settle(calls);
  for (const { c, collective, label, result: y, error } of calls) {
    if (error) continue;
    check(y instanceof CTOR[dtype], `${label}: result is not a ${CTOR[dtype].name}`);
    check(y !== c.x, `${label}: result is the input array without inplace`);
    let offset = 0;
    let len = c.n;
    if (collective === 'reduceScatter') {
      offset = rank * Math.floor(c.n / p) + Math.min(rank, c.n % p);
      len = Math.floor(c.n / p) + (rank < c.n % p ? 1 : 0);
    }
    if (!check(y.length === len, `${label}: length ${y.length}, expected ${len}`)) continue;
    checkReduction(label, dtype, c.expected, y, offset);
    if (collective === 'allreduce') hashInto(`allreduce ${dtype}`, y, c.kind === 'exact');
    else if (c.kind === 'exact') digest.update(bytesOf(y));
  }
  for (const c of cases) check(bytesOf(c.x).equals(c.before), `${dtype} op=${c.op} n=${c.n}: the input array was modified`);
}

async function broadcasts(dtype, rank, p, counts, seed) {
  const calls = [];
  let s = seed;
  for (let root = 0; root < p; root++) {
    for (const n of counts) {
      s++;
      const x = patternArray(dtype, rank, n, s);
      const inplace = (root + n) % 2 === 1;
      const label = `broadcast ${dtype} root=${root} n=${n}${inplace ? ' inplace' : ''} (rank ${rank} of ${p})`;
      const work = hora.broadcast(x, { ...optionsFor(dtype), root, inplace });
      calls.push({ label, root, n, x, inplace, s, work });
    }
  }
  await settle(calls);
  for (const c of calls) {
    if (c.error) continue;
    check(c.inplace ? c.result === c.x : c.result !== c.x, `${c.label}: inplace is ${c.inplace} but the result ${c.inplace ? 'is not' : 'is'} the input`);
    sameBytes(c.label, c.result, patternArray(dtype, c.root, c.n, c.s));
    hashInto(`broadcast ${dtype}`, c.result, true);
  }
}

async function allgathers(dtype, rank, p, counts, seed) {
  // Equal lengths, then lengths that differ per rank (some zero).
  const lengthRules = [
    ['equal', (n) => n],
    ['ragged', (n, r) => (r % 2 === 0 ? n : (n >> 1) + r - 1)],
  ];
  const calls = [];
  let s = seed;
  for (const [rule, lengthOf] of lengthRules) {
    for (const n of counts) {
      s++;
      const x = patternArray(dtype, rank, lengthOf(n, rank), s);
      const label = `allgather ${dtype} n=${n} ${rule} (rank ${rank} of ${p})`;
      calls.push({ label, n, lengthOf, s, work: hora.allgather(x, optionsFor(dtype)) });
    }
  }
  await settle(calls);
  for (const c of calls) {
    if (c.error) continue;
    const parts = [];
    let total = 0;
    for (let r = 0; r < p; r++) {
      const part = patternArray(dtype, r, c.lengthOf(c.n, r), c.s);
      parts.push(part);
      total += part.length;
    }
    const want = new CTOR[dtype](total);
    let at = 0;
    for (const part of parts) {
      want.set(part, at);
      at += part.length;
    }
    check(c.result instanceof CTOR[dtype], `${c.label}: result is not a ${CTOR[dtype].name}`);
    sameBytes(c.label, c.result, want);
    hashInto(`allgather ${dtype}`, c.result, true);
  }
}

async function barriers(rank, p) {
  for (let i = 0; i < 3; i++) {
    try {
      check((await hora.barrier()) === undefined, 'barrier: resolved with a value');
    } catch (e) {
      check(false, `barrier ${i}: rejected with ${e && e.code} ${e && e.message}`);
    }
  }
  if (p === 1) return;
  // A barrier completes only once the last rank arrives: the late rank sleeps, the others must wait for it.
  const late = p - 1;
  const sleepMs = 500;
  try {
    await hora.barrier({ name: 'sync' });
    if (rank === late) await new Promise((r) => setTimeout(r, sleepMs));
    const t0 = process.hrtime.bigint();
    hora.barrier({ name: 'late' }).wait();
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (rank !== late) check(ms >= sleepMs / 2, `barrier: rank ${rank} left after ${ms.toFixed(1)} ms although rank ${late} arrived ~${sleepMs} ms late`);
  } catch (e) {
    check(false, `barrier: rejected with ${e && e.code} ${e && e.message}`);
  }
}

/** Options the sweep does not cover: default ops, inplace allreduce, arrays at a byteOffset. */
async function extras(rank, p, seed) {
  const n = 37;
  const inputs = [];
  for (let r = 0; r < p; r++) inputs.push(inputValues('exact', 'int32', 'sum', r, n, seed));
  // Default allreduce op is avg; default reduceScatter op is sum.
  try {
    const avg = await hora.allreduce(encode('int32', inputs[rank]));
    checkReduction('allreduce default op', 'int32', expectedOf('exact', 'int32', 'avg', inputs, p), avg, 0);
    const rs = await hora.reduceScatter(encode('int32', inputs[rank]));
    const start = rank * Math.floor(n / p) + Math.min(rank, n % p);
    checkReduction('reduceScatter default op', 'int32', expectedOf('exact', 'int32', 'sum', inputs, p), rs, start);
  } catch (e) {
    check(false, `default ops: rejected with ${e && e.code} ${e && e.message}`);
  }
  // inplace allreduce returns x itself, holding the result.
  try {
    const x = encode('int32', inputs[rank]);
    const y = await hora.allreduce(x, { op: 'sum', inplace: true });
    check(y === x, 'allreduce inplace: result is not the input array');
    checkReduction('allreduce inplace', 'int32', expectedOf('exact', 'int32', 'sum', inputs, p), y, 0);
  } catch (e) {
    check(false, `allreduce inplace: rejected with ${e && e.code} ${e && e.message}`);
  }
  // Views at a byteOffset into a larger buffer, with guard elements on both sides left untouched; awaited
  // (queued) and waited (run inside one call into the addon).
  for (const [dtype, waited] of [['float64', false], ['int64', false], ['float16', false], ['uint8', false],
    ['float32', true], ['float16', true], ['uint8', true]]) {
    try {
      const Ctor = CTOR[dtype];
      const vals = [];
      for (let r = 0; r < p; r++) vals.push(inputValues('exact', dtype, 'sum', r, n, seed + 7));
      const backing = new Ctor(n + 6);
      backing.fill(encodeOne(dtype, 3));
      const view = backing.subarray(3, 3 + n);
      view.set(encode(dtype, vals[rank]));
      const label = `allreduce ${dtype} at byteOffset ${view.byteOffset} inplace${waited ? ', wait()' : ''}`;
      const work = hora.allreduce(view, { ...optionsFor(dtype), op: 'sum', inplace: true });
      const y = waited ? work.wait() : await work;
      checkReduction(label, dtype, expectedOf('exact', dtype, 'sum', vals, p), y, 0);
      const guard = encodeOne(dtype, 3);
      check([0, 1, 2, n + 3, n + 4, n + 5].every((i) => backing[i] === guard), `${label}: wrote outside the view`);
      const g = await hora.allgather(view.subarray(0, rank + 1), optionsFor(dtype));
      check(g.length === (p * (p + 1)) / 2, `allgather ${dtype} of a view: length ${g.length}`);
    } catch (e) {
      check(false, `byteOffset ${dtype}: rejected with ${e && e.code} ${e && e.message}`);
    }
  }
}

/**
 * The small integers wrap around on overflow, as int32, int64 and uint8 do: sum and prod keep the low bits,
 * avg divides the wrapped sum by the world size (truncating toward zero), min and max never overflow. The
 * reference combines in the dtype's own typed array, which wraps the same way; int8 127 + 1 is also checked
 * against the literal -128.
 */
const WRAP_BOUNDS = { int8: [-128, 127], int16: [-32768, 32767], uint16: [0, 65535] };
async function wraps(rank, p) {
  // Element i of rank r: at the bounds, one past them, and factors whose product leaves the range.
  const valueAt = (dtype, r, i) => {
    const [lo, hi] = WRAP_BOUNDS[dtype];
    return [hi, lo, r === 0 ? hi : 1, r === 0 ? lo : -1, hi - r, lo + r, 16 + r, -(1 << 7) + 3 * r, 255 + r][i];
  };
  const n = 9;
  for (const dtype of Object.keys(WRAP_BOUNDS)) {
    const Ctor = CTOR[dtype];
    const inputs = [];
    for (let r = 0; r < p; r++) inputs.push(Ctor.from({ length: n }, (_, i) => valueAt(dtype, r, i)));
    for (const op of OPS) {
      const want = Ctor.from(inputs[0]);
      for (let r = 1; r < p; r++) {
        for (let i = 0; i < n; i++) {
          const a = want[i], b = inputs[r][i];
          want[i] = op === 'min' ? Math.min(a, b) : op === 'max' ? Math.max(a, b) : op === 'prod' ? a * b : a + b;
        }
      }
      if (op === 'avg') for (let i = 0; i < n; i++) want[i] = Math.trunc(want[i] / p);
      const label = `${dtype} op=${op} at its bounds (rank ${rank} of ${p})`;
      try {
        const [all, part] = await Promise.all([
          hora.allreduce(inputs[rank], { ...optionsFor(dtype), op }),
          hora.reduceScatter(inputs[rank], { ...optionsFor(dtype), op }),
        ]);
        sameBytes(`allreduce ${label}`, all, want);
        const offset = rank * Math.floor(n / p) + Math.min(rank, n % p);
        sameBytes(`reduceScatter ${label}`, part, want.subarray(offset, offset + part.length));
        if (dtype === 'int8' && op === 'sum' && p > 1) {
          check(all[2] === -128 + (p - 2), `allreduce ${label}: 127 + ${p - 1} x 1 is ${all[2]}, expected ${-128 + (p - 2)}`);
        }
        hashInto(`wraps ${dtype}`, all, true);
      } catch (e) {
        check(false, `${label}: rejected with ${e && e.code} ${e && e.message}`);
      }
    }
  }
}

/** Every rank must hold identical bytes for every group: allgather the group hashes and compare. */
async function crossRankCheck(rank, p) {
  const names = [...groupHashes.keys()].sort();
  const mine = new Uint8Array(32 * names.length);
  names.forEach((name, k) => mine.set(groupHashes.get(name).digest(), 32 * k));
  const all = await hora.allgather(mine);
  check(all.length === p * mine.length, `hash allgather: length ${all.length}, expected ${p * mine.length}`);
  for (let r = 0; r < p; r++) {
    names.forEach((name, k) => {
      const theirs = Buffer.from(all.buffer, all.byteOffset + r * mine.length + 32 * k, 32);
      check(theirs.equals(Buffer.from(mine.buffer, 32 * k, 32)), `${name}: results on rank ${r} differ from rank ${rank}'s`);
    });
  }
}

async function main() {
  await hora.init();
  const rank = hora.rank();
  const p = hora.size();
  worldSize = p;
  const seed = Number(process.env.COLLECTIVES_SEED || 1) * 100000;
  const countsText = process.env.COLLECTIVES_COUNTS || process.env.HORA_TEST_COUNTS;
  const counts = countsText
    ? countsText.split(',').map(Number)
    : [0, 1, 7, p * 13 + 1, 300001];
  const started = Date.now();
  check(Number.isInteger(rank) && rank >= 0 && rank < p, `rank ${rank} out of range for size ${p}`);

  let s = seed;
  for (const dtype of DTYPES) await reductions(dtype, rank, p, counts, (s += 1000));
  for (const dtype of DTYPES) await broadcasts(dtype, rank, p, counts, (s += 1000));
  for (const dtype of DTYPES) await allgathers(dtype, rank, p, counts, (s += 1000));
  await barriers(rank, p);
  await extras(rank, p, (s += 1000));
  await wraps(rank, p);
  await crossRankCheck(rank, p);

  const report = {
    rank, size: p, checks, failures, firstFailures, digest: digest.digest('hex'), seconds: (Date.now() - started) / 1000,
  };
  const line = JSON.stringify(report);
  process.stdout.write(line + '\n');
  if (process.env.HORA_TEST_RESULT_DIR) {
    fs.writeFileSync(path.join(process.env.HORA_TEST_RESULT_DIR, `rank-${rank}.json`), line + '\n');
  }
  await hora.shutdown();
}

main().catch((e) => {
  process.stderr.write(`collectives-worker: ${e && e.stack ? e.stack : String(e)}\n`);
  process.exit(1);
});
