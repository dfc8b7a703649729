'use strict';
// Collectives on DeviceBuffers against a float64 CPU reference (test/cuda.test.js asserts on the report).
// Usage: node cuda-worker.js, under `hora run -np N`, with HORA_TEST_SEED set (the test picks a fresh one
// each run and prints it). Rank r's input for case k comes from (seed, k, r), so every rank builds every
// rank's input and computes the reference of the whole job itself.
//
// "Poisoned": where the caller provides the memory a collective writes (broadcast into x with inplace: true
// on the ranks that are not root), it is filled with 0x7f bytes first (NaN for float16, a large value for
// the other types), so a write that never happens shows. Outputs hora allocates (the copy an allreduce or
// broadcast works on, a reduceScatter block, an allgather result) start as a copy of the input or as
// zero-filled memory; random inputs make an untouched or zero result fail the comparison.
//
// Checks: every element within the dtype's tolerance (exact for min, max, integer sums and products,
// broadcast and allgather); an input given with inplace: false unchanged; every rank's results of
// allreduce, broadcast and allgather bit-identical (a SHA-256 of them, compared by an allgather); and
// finally a freed DeviceBuffer on one rank failing the collective on every rank.
const crypto = require('node:crypto');
const hora = require('../../dist/ts/index.js');
const { report, prng } = require('../support/worker-util');

const { DeviceBuffer } = hora.cuda;
const SEED = Number(process.env.HORA_TEST_SEED || 1);
const SMALL = [1, 7, 1023, 65537];
const LARGE = (1 << 22) + 5;
// The IPC path moves a buffer through 32 MiB staging slots and reduces steps of up to 1 MiB one-shot:
// 262144 float32 is the largest one-shot step, 262145 the smallest of the other kind, and float64 LARGE
// takes two steps, the second of 40 bytes.
const EDGES = [262144, 262145];
const FLOATS = ['float32', 'float64', 'float16', 'bfloat16'];
const OPS = ['sum', 'avg', 'min', 'max', 'prod'];
/** Twice the unit roundoff: the per-operation error bound the tolerances scale. */
const EPS = { float64: 2 ** -52, float32: 2 ** -23, float16: 2 ** -10, bfloat16: 2 ** -7 };
const MAX_FAILURES = 20;

// ---------------------------------------------------------------------------------------------------
// float16 / bfloat16 bits, built directly (no rounding to test) and decoded exactly.

function halfBits(sign, exponent, mantissa) {
  return (sign << 15) | ((exponent + 15) << 10) | mantissa;
}
function bfloatBits(sign, exponent, mantissa) {
  return (sign << 15) | ((exponent + 127) << 7) | mantissa;
}
function halfValue(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function bfloatValue(b) {
  u32[0] = b << 16;
  return f32[0];
}

/** Rank `rank`'s input of case `k`: {array (what goes to the device), values (float64 of each element)}. */
function input(k, rank, dtype, op, count) {
  const rand = prng((SEED * 1000003 + k * 7919 + rank * 104729) >>> 0);
  const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
  const forProd = op === 'prod';
  const values = new Float64Array(count);
  let array;
  switch (dtype) {
    case 'float32':
    case 'float64': {
      array = dtype === 'float32' ? new Float32Array(count) : new Float64Array(count);
      for (let i = 0; i < count; i++) array[i] = forProd ? (rand() < 0.5 ? -1 : 1) * (0.5 + rand()) : 2 * rand() - 1;
      values.set(array);
      break;
    }
    case 'float16':
    case 'bfloat16': {
      array = new Uint16Array(count);
      const bits = dtype === 'float16' ? halfBits : bfloatBits;
      const value = dtype === 'float16' ? halfValue : bfloatValue;
      const mantissaBits = dtype === 'float16' ? 10 : 7;
      for (let i = 0; i < count; i++) {
        array[i] = bits(int(0, 1), forProd ? int(-1, 0) : int(-8, 0), int(0, (1 << mantissaBits) - 1));
        values[i] = value(array[i]);
      }
      break;
    }
    case 'int32':
      array = new Int32Array(count);
      for (let i = 0; i < count; i++) array[i] = forProd ? int(-9, 9) : int(-1000, 1000);
      values.set(array);
      break;
    case 'int64':
      array = new BigInt64Array(count);
      for (let i = 0; i < count; i++) {
        const v = forProd ? int(-9, 9) : int(-1000000, 1000000);
        array[i] = BigInt(v);
        values[i] = v;
      }
      break;
    case 'uint8':
      array = new Uint8Array(count);
      for (let i = 0; i < count; i++) array[i] = int(0, 255);
      values.set(array);
      break;
  }
  return { array, values };
}

/** float64 values of a host array of `dtype`. */
function valuesOf(dtype, array) {
  if (dtype === 'float16') return Float64Array.from(array, halfValue);
  if (dtype === 'bfloat16') return Float64Array.from(array, bfloatValue);
  if (dtype === 'int64') return Float64Array.from(array, Number);
  return Float64Array.from(array);
}

/** The reference of op over every rank's values, element i; and the tolerance of the comparison. */
function reference(inputs, op, dtype, i) {
  const p = inputs.length;
  let acc = op === 'prod' ? 1 : op === 'min' ? Infinity : op === 'max' ? -Infinity : 0;
  let magnitude = 0;
  for (const { values } of inputs) {
    const v = values[i];
    if (op === 'sum' || op === 'avg') acc += v;
    else if (op === 'prod') acc *= v;
    else if (op === 'min') acc = Math.min(acc, v);
    else acc = Math.max(acc, v);
    magnitude += Math.abs(v);
  }
  if (op === 'avg') {
    acc /= p;
    magnitude /= p;
  }
  if (!(dtype in EPS)) return { want: acc, tolerance: op === 'avg' ? 1 : 0 }; // integers: exact; avg rounds either way
  if (op === 'min' || op === 'max') return { want: acc, tolerance: 0 };
  const scale = op === 'prod' ? Math.abs(acc) : magnitude;
  return { want: acc, tolerance: 2 * EPS[dtype] * (p + 1) * scale };
}

// ---------------------------------------------------------------------------------------------------

let failures = [];
let checked = 0;
const digest = crypto.createHash('sha256');

function fail(what, detail) {
  if (failures.length < MAX_FAILURES) failures.push({ what, ...detail });
  else failures.length === MAX_FAILURES && failures.push({ what: 'more failures not listed' });
}

/** Compares got (host array of dtype) with the reference over `inputs` for elements [begin, begin + got.length). */
function compareReduced(what, got, inputs, op, dtype, begin) {
  const values = valuesOf(dtype, got);
  for (let i = 0; i < values.length; i++) {
    const { want, tolerance } = reference(inputs, op, dtype, begin + i);
    checked++;
    if (!(Math.abs(values[i] - want) <= tolerance)) {
      fail(what, { index: begin + i, got: values[i], want, tolerance });
      return;
    }
  }
}

function compareExact(what, got, want) {
  checked++;
  const a = Buffer.from(got.buffer, got.byteOffset, got.byteLength);
  const b = Buffer.from(want.buffer, want.byteOffset, want.byteLength);
  if (!a.equals(b)) {
    let index = 0;
    while (index < got.length && String(got[index]) === String(want[index])) index++;
    fail(what, { index, got: String(got[index]), want: String(want[index]), gotLength: got.length, wantLength: want.length });
  }
}

function hashResult(array) {
  digest.update(Buffer.from(array.buffer, array.byteOffset, array.byteLength));
}

function blockRange(count, size, block) {
  const base = Math.floor(count / size), extra = count % size;
  const start = (b) => b * base + Math.min(b, extra);
  return [start(block), start(block + 1)];
}

/** A Uint16Array's dtype; a DeviceBuffer knows its own, and hora checks that one given agrees. */
function options(dtype) {
  return dtype === 'float16' || dtype === 'bfloat16' ? { dtype } : {};
}

function poisonFor(dtype, count) {
  const bytes = new Uint8Array(count * { float64: 8, int64: 8, float32: 4, int32: 4, float16: 2, bfloat16: 2, uint8: 1 }[dtype]).fill(0x7f);
  const Ctor = { float32: Float32Array, float64: Float64Array, int32: Int32Array, int64: BigInt64Array, uint8: Uint8Array, float16: Uint16Array, bfloat16: Uint16Array }[dtype];
  return new Ctor(bytes.buffer);
}

let caseNumber = 0;

async function reduceCase(dtype, op, count, withInplace) {
  const k = caseNumber++;
  const r = hora.rank(), p = hora.size();
  const inputs = [];
  for (let q = 0; q < p; q++) inputs.push(input(k, q, dtype, op, count));
  const mine = inputs[r].array;
  const what = `allreduce ${dtype} ${op} n=${count}`;

  const x = DeviceBuffer.fromHost(mine, options(dtype));
  const out = await hora.allreduce(x, { op, name: what, ...options(dtype) });
  const got = out.toHost();
  compareReduced(what, got, inputs, op, dtype, 0);
  hashResult(got);
  if (count <= 65537) compareExact(`${what}: input left unchanged`, x.toHost(), mine);
  out.free();

  if (withInplace) {
    const same = await hora.allreduce(x, { op, inplace: true, name: `${what} inplace`, ...options(dtype) });
    if (same !== x) fail(`${what} inplace`, { got: 'a different buffer', want: 'x itself' });
    compareReduced(`${what} inplace`, x.toHost(), inputs, op, dtype, 0);
  }
  x.free();

  const y = DeviceBuffer.fromHost(mine, options(dtype));
  const block = await hora.reduceScatter(y, { op, name: `reduceScatter ${dtype} ${op} n=${count}`, ...options(dtype) });
  const [begin, end] = blockRange(count, p, r);
  if (block.count !== end - begin) fail(`reduceScatter ${dtype} ${op} n=${count}`, { got: block.count, want: end - begin, index: 'count' });
  else compareReduced(`reduceScatter ${dtype} ${op} n=${count}`, block.toHost(), inputs, op, dtype, begin);
  block.free();
  y.free();
}

async function moveCase(dtype, count) {
  const k = caseNumber++;
  const r = hora.rank(), p = hora.size();
  const root = k % p;
  const rootInput = input(k, root, dtype, 'sum', count).array;

  // broadcast into x itself: poisoned everywhere but on root.
  const x = DeviceBuffer.fromHost(r === root ? rootInput : poisonFor(dtype, count), options(dtype));
  await hora.broadcast(x, { root, inplace: true, name: `broadcast ${dtype} n=${count}`, ...options(dtype) });
  const got = x.toHost();
  compareExact(`broadcast inplace ${dtype} n=${count} root=${root}`, got, rootInput);
  hashResult(got);
  x.free();

  // broadcast into a new buffer: every rank's own input goes in, root's must come out.
  const own = input(k, r, dtype, 'sum', count).array;
  const y = DeviceBuffer.fromHost(own, options(dtype));
  const z = await hora.broadcast(y, { root, name: `broadcast copy ${dtype} n=${count}`, ...options(dtype) });
  compareExact(`broadcast ${dtype} n=${count} root=${root}`, z.toHost(), rootInput);
  compareExact(`broadcast ${dtype} n=${count}: input left unchanged`, y.toHost(), own);
  y.free();
  z.free();

  // allgather: rank q contributes count + q elements.
  const parts = [];
  for (let q = 0; q < p; q++) parts.push(input(k + 1000000, q, dtype, 'sum', count + q).array);
  const g = DeviceBuffer.fromHost(parts[r], options(dtype));
  const all = await hora.allgather(g, { name: `allgather ${dtype} n=${count}`, ...options(dtype) });
  const want = new parts[0].constructor(parts.reduce((a, b) => a + b.length, 0));
  let at = 0;
  for (const part of parts) {
    want.set(part, at);
    at += part.length;
  }
  const gathered = all.toHost();
  compareExact(`allgather ${dtype} n=${count}`, gathered, want);
  hashResult(gathered);
  all.free();
  g.free();
}

/**
 * A buffer freed and a new one allocated between two collectives (cudaMalloc tends to hand back the same
 * address), on rank 0 only and then on every rank: the second collective must read the new buffer's
 * values on the ranks that replaced it and the first result on the others.
 */
async function freeAndReuse() {
  const r = hora.rank(), p = hora.size(), n = 1000;
  const out = { failures: [], sameAddress: 0 };
  for (const everyRank of [false, true]) {
    let a = DeviceBuffer.fromHost(Float32Array.from({ length: n }, (_, i) => r + i));
    await hora.allreduce(a, { op: 'sum', inplace: true, name: `reuse ${everyRank} first` });
    const first = a.pointer;
    if (everyRank || r === 0) {
      a.free();
      a = DeviceBuffer.fromHost(new Float32Array(n).fill(10 * (r + 1)));
      if (a.pointer === first) out.sameAddress++;
    }
    await hora.allreduce(a, { op: 'sum', inplace: true, name: `reuse ${everyRank} second` });
    const got = a.toHost();
    for (let i = 0; i < n; i++) {
      let want = 0;
      for (let q = 0; q < p; q++) want += everyRank || q === 0 ? 10 * (q + 1) : p * i + (p * (p - 1)) / 2;
      if (got[i] !== want) {
        out.failures.push({ everyRank, index: i, got: got[i], want });
        break;
      }
    }
    a.free();
  }
  return out;
}

async function main() {
  await hora.init();
  const r = hora.rank();
  const started = Date.now();
  for (const count of SMALL) {
    for (const dtype of [...FLOATS, 'int32', 'int64']) {
      for (const op of OPS) await reduceCase(dtype, op, count, count <= 1023);
    }
    for (const op of ['min', 'max']) await reduceCase('uint8', op, count, false);
    for (const dtype of [...FLOATS, 'int32', 'int64', 'uint8']) await moveCase(dtype, count);
  }
  for (const count of EDGES) await reduceCase('float32', 'sum', count, false);
  await reduceCase('int32', 'max', EDGES[1], false);
  await reduceCase('float64', 'sum', LARGE, false);
  await moveCase('float64', LARGE);
  await reduceCase('float32', 'sum', LARGE, false);
  await reduceCase('float16', 'avg', LARGE, false);
  await reduceCase('bfloat16', 'sum', LARGE, false);
  await moveCase('float32', LARGE);

  const reuse = await freeAndReuse();

  // Every rank's results must be bit-identical.
  const mine = new Uint8Array(digest.digest());
  const hashes = await hora.allgather(mine);
  const identical = [];
  for (let q = 0; q < hora.size(); q++) identical.push(Buffer.from(hashes.subarray(32 * q, 32 * q + 32)).equals(Buffer.from(mine)));

  // A freed DeviceBuffer on rank 0, a live one elsewhere: every rank fails the same collective, and the
  // next one works. A buffer lent to an outstanding collective cannot be freed.
  const freed = DeviceBuffer.fromHost(new Float32Array(4).fill(1));
  if (r === 0) freed.free();
  let freedError = null;
  try {
    await hora.allreduce(freed, { op: 'sum' });
  } catch (e) {
    freedError = { code: e.code, message: e.message };
  }
  const busy = DeviceBuffer.fromHost(new Float32Array(4).fill(1));
  const work = hora.allreduce(busy, { op: 'sum', inplace: true });
  let busyError = null;
  try {
    busy.free();
  } catch (e) {
    busyError = { code: e.code, message: e.message };
  }
  await work;
  const after = Array.from(busy.toHost());
  busy.free();
  if (r !== 0) freed.free();

  report(r, { seed: SEED, checked, failures, identical, freedError, busyError, after, reuse, seconds: (Date.now() - started) / 1000 });
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  report(hora.isInitialized() ? hora.rank() : -1, { crashed: String(e && e.stack) });
  process.exit(1);
});
