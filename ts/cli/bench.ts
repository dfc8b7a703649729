/**
 * `hora bench`: bandwidth and latency of one collective over a range of sizes, in the table format of
 * nccl-tests (and of the peer baselines), with a correctness check of every result. Run it under
 * `hora run -np N`; rank 0 prints.
 *
 *   algbw = bytes / time;  busbw = algbw * factor, where factor is 2(n-1)/n for allreduce,
 *   (n-1)/n for allgather and reducescatter, and 1 for broadcast (nccl-tests' definitions).
 */
import * as hora from '../index';
import { allreduceEstimate } from '../hora';
import { ALGORITHMS, readSettings, resolveLaunch } from '../config';
import { DTYPE_BYTES, DTYPE_NAMES, DTYPE_OF_NAME, OP_NAMES, valuesOf } from '../native';
import type { DType, ReduceOp, Tensor } from '../types';

const OPS = ['allreduce', 'broadcast', 'allgather', 'reducescatter'] as const;
const REDUCE_OPS: readonly string[] = valuesOf(OP_NAMES);
type BenchOp = (typeof OPS)[number];

interface BenchArgs {
  op: BenchOp;
  min: number;
  max: number;
  factor: number;
  dtype: DType;
  reduceOp: ReduceOp;
  iters?: number;
  warmup: number;
  /** Timed loops per row; the row shows the median of their times. */
  reps: number;
  sync: boolean;
  check: boolean;
  /** HORA_ALGO for this run; undefined: the environment's. */
  algo?: string;
}

const USAGE = `usage: hora run -np N hora bench [options]

  --op allreduce|broadcast|allgather|reducescatter   collective to measure (allreduce)
  --min SIZE          smallest message in bytes, suffixes K M G (4)
  --max SIZE          largest message (256M)
  --factor F          size multiplier between rows (4)
  --dtype T           ${valuesOf(DTYPE_NAMES).join('|')} (float32)
  --reduce-op OP      ${REDUCE_OPS.join('|')} for allreduce/reducescatter (sum)
  --iters N           timed iterations per size (default: 200 below 1 MiB, 20 below 16 MiB, else 5)
  --warmup N          untimed iterations per size (20; fewer above 16 MiB)
  --reps N            timed loops per size; the row shows the median of their mean times (1)
  --algo A            allreduce algorithm: ${ALGORITHMS.join('|')} (HORA_ALGO, else auto)
  --sync              block with Work.wait() instead of awaiting
  --no-check          skip the correctness check`;

export class UsageError extends Error {}

function parseSize(flag: string, v: string | undefined): number {
  const m = v === undefined ? null : /^(\d+(?:\.\d+)?)([kKmMgG]?)$/.exec(v);
  if (!m) throw new UsageError(`${flag} expects a size such as 4, 64K or 256M; received ${JSON.stringify(v)}`);
  const mult = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[m[2].toLowerCase() as '' | 'k' | 'm' | 'g'];
  return Math.round(Number(m[1]) * mult);
}

function parseInteger(flag: string, v: string | undefined, min: number): number {
  const n = v === undefined ? NaN : Number(v);
  if (!Number.isInteger(n) || n < min) throw new UsageError(`${flag} expects an integer >= ${min}; received ${JSON.stringify(v)}`);
  return n;
}

export function parseArgs(argv: string[]): BenchArgs {
  const a: BenchArgs = {
    op: 'allreduce', min: 4, max: 256 * 1024 * 1024, factor: 4, dtype: 'float32', reduceOp: 'sum', warmup: 20, reps: 1, sync: false, check: true,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const next = () => argv[++i];
    switch (flag) {
      case '--op': {
        const v = next();
        if (!OPS.includes(v as BenchOp)) throw new UsageError(`--op expects one of ${OPS.join(', ')}; received ${JSON.stringify(v)}`);
        a.op = v as BenchOp;
        break;
      }
      case '--min': a.min = parseSize(flag, next()); break;
      case '--max': a.max = parseSize(flag, next()); break;
      case '--factor': a.factor = parseInteger(flag, next(), 2); break;
      case '--dtype': {
        const v = next();
        if (!Object.hasOwn(ELEMENT, v)) throw new UsageError(`--dtype expects one of ${Object.keys(ELEMENT).join(', ')}; received ${JSON.stringify(v)}`);
        a.dtype = v as DType;
        break;
      }
      case '--reduce-op': {
        const v = next();
        if (!REDUCE_OPS.includes(v)) throw new UsageError(`--reduce-op expects ${REDUCE_OPS.slice(0, -1).join(', ')} or ${REDUCE_OPS[REDUCE_OPS.length - 1]}; received ${JSON.stringify(v)}`);
        a.reduceOp = v as ReduceOp;
        break;
      }
      case '--iters': a.iters = parseInteger(flag, next(), 1); break;
      case '--warmup': a.warmup = parseInteger(flag, next(), 0); break;
      case '--reps': a.reps = parseInteger(flag, next(), 1); break;
      case '--algo': {
        const v = next();
        if (!(ALGORITHMS as readonly string[]).includes(v)) throw new UsageError(`--algo expects one of ${ALGORITHMS.join(', ')}; received ${JSON.stringify(v)}`);
        a.algo = v;
        break;
      }
      case '--sync': a.sync = true; break;
      case '--no-check': a.check = false; break;
      case '-h': case '--help': throw new UsageError('');
      default: throw new UsageError(`unknown option ${JSON.stringify(flag)}`);
    }
  }
  if (a.min > a.max) throw new UsageError(`--min (${a.min}) is larger than --max (${a.max})`);
  return a;
}

const bytesOf = (d: DType) => DTYPE_BYTES[DTYPE_OF_NAME[d]];
const ELEMENT: Record<DType, { bytes: number; make: (n: number) => Tensor; set: (x: Tensor, i: number, v: number) => void; get: (x: Tensor, i: number) => number }> = {
  float32: { bytes: bytesOf('float32'), make: (n) => new Float32Array(n), set: (x, i, v) => { (x as Float32Array)[i] = v; }, get: (x, i) => (x as Float32Array)[i] },
  float64: { bytes: bytesOf('float64'), make: (n) => new Float64Array(n), set: (x, i, v) => { (x as Float64Array)[i] = v; }, get: (x, i) => (x as Float64Array)[i] },
  int32: { bytes: bytesOf('int32'), make: (n) => new Int32Array(n), set: (x, i, v) => { (x as Int32Array)[i] = v; }, get: (x, i) => (x as Int32Array)[i] },
  int64: { bytes: bytesOf('int64'), make: (n) => new BigInt64Array(n), set: (x, i, v) => { (x as BigInt64Array)[i] = BigInt(v); }, get: (x, i) => Number((x as BigInt64Array)[i]) },
  uint8: { bytes: bytesOf('uint8'), make: (n) => new Uint8Array(n), set: (x, i, v) => { (x as Uint8Array)[i] = v; }, get: (x, i) => (x as Uint8Array)[i] },
  int8: { bytes: bytesOf('int8'), make: (n) => new Int8Array(n), set: (x, i, v) => { (x as Int8Array)[i] = v; }, get: (x, i) => (x as Int8Array)[i] },
  int16: { bytes: bytesOf('int16'), make: (n) => new Int16Array(n), set: (x, i, v) => { (x as Int16Array)[i] = v; }, get: (x, i) => (x as Int16Array)[i] },
  uint16: { bytes: bytesOf('uint16'), make: (n) => new Uint16Array(n), set: (x, i, v) => { (x as Uint16Array)[i] = v; }, get: (x, i) => (x as Uint16Array)[i] },
  // Small integers are exact in both 16-bit formats: float16 1 = 0x3c00, bfloat16 1 = 0x3f80 (and k = the bits of k).
  float16: { bytes: bytesOf('float16'), make: (n) => new Uint16Array(n), set: (x, i, v) => { (x as Uint16Array)[i] = halfOf(v); }, get: (x, i) => halfValue((x as Uint16Array)[i]) },
  bfloat16: { bytes: bytesOf('bfloat16'), make: (n) => new Uint16Array(n), set: (x, i, v) => { (x as Uint16Array)[i] = bf16Of(v); }, get: (x, i) => bf16Value((x as Uint16Array)[i]) },
};

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function bf16Of(v: number): number { f32[0] = v; return u32[0] >>> 16; }
function bf16Value(h: number): number { u32[0] = h << 16; return f32[0]; }
function halfOf(v: number): number {
  // Only small non-negative integers are used here, which float16 represents exactly.
  if (v === 0) return 0;
  const e = Math.floor(Math.log2(v));
  return ((e + 15) << 10) | Math.round((v / 2 ** e - 1) * 1024);
}
function halfValue(h: number): number {
  const e = (h >> 10) & 0x1f, m = h & 0x3ff;
  return e === 0 ? m * 2 ** -24 : (1 + m / 1024) * 2 ** (e - 15);
}

function busFactor(op: BenchOp, n: number): number {
  if (op === 'allreduce') return (2 * (n - 1)) / n;
  if (op === 'broadcast') return 1;
  return (n - 1) / n;
}

function defaultIters(bytes: number): number {
  return bytes < 1 << 20 ? 200 : bytes < 16 << 20 ? 20 : 5;
}

/** Input of rank r at element i: small integers, so every dtype and op has an exact expected result. */
function valueAt(r: number, i: number): number {
  return 1 + ((r + i) % 3);
}

function expected(a: BenchArgs, n: number, i: number, root: number): number {
  if (a.op === 'broadcast') return valueAt(root, i);
  const vals = Array.from({ length: n }, (_, r) => valueAt(r, i));
  switch (a.reduceOp) {
    case 'sum': return vals.reduce((s, v) => s + v, 0);
    case 'avg': return vals.reduce((s, v) => s + v, 0) / n;
    case 'min': return Math.min(...vals);
    case 'max': return Math.max(...vals);
    case 'prod': return vals.reduce((s, v) => s * v, 1);
  }
}

/** One collective of the benchmark, as a call in a training script would make it. */
function callOnce(a: BenchArgs, x: Tensor): hora.Work<Tensor> {
  switch (a.op) {
    case 'allreduce': return hora.allreduce(x, { dtype: a.dtype, inplace: true, op: a.reduceOp });
    case 'broadcast': return hora.broadcast(x, { dtype: a.dtype, inplace: true, root: 0 });
    case 'allgather': return hora.allgather(x, { dtype: a.dtype });
    case 'reducescatter': return hora.reduceScatter(x, { dtype: a.dtype, op: a.reduceOp });
  }
}

async function runOnce(a: BenchArgs, x: Tensor): Promise<Tensor> {
  return a.sync ? callOnce(a, x).wait() : await callOnce(a, x);
}

/**
 * n collectives back to back: a plain loop of wait() (as the peers' C and Python loops block), or of
 * await. Warm-up and timed iterations run through the same function, so V8 has compiled this loop before
 * the clock starts (a loop compiled on the fly stalls a rank for milliseconds, and the other waits).
 */
function loopWaited(a: BenchArgs, x: Tensor, n: number): void {
  for (let i = 0; i < n; i++) callOnce(a, x).wait();
}

async function loopAwaited(a: BenchArgs, x: Tensor, n: number): Promise<void> {
  for (let i = 0; i < n; i++) await callOnce(a, x);
}

async function loop(a: BenchArgs, x: Tensor, n: number): Promise<void> {
  if (a.sync) loopWaited(a, x, n);
  else await loopAwaited(a, x, n);
}

/**
 * The timed loops of one row, a.reps of them; each loop's time is its slowest rank's, as in nccl-tests,
 * and the row takes their median. With --sync every call of the row blocks: the ranks leave a blocking
 * barrier together, as the peers' loops leave theirs (an awaited barrier completes on each rank when its
 * event loop next runs, some microseconds apart, and a loop of 200 calls of a microsecond would start with
 * one rank waiting that long), and no promise runs between the loops. Each await runs Node's async
 * machinery, whose functions V8 then compiles on a background thread, in the middle of the rows on a
 * machine with as many cores as ranks (a row of 200 calls took 20-38 µs a call where its neighbours took
 * 1-2); and an awaited collective leaves the communication thread watching for more work on those cores.
 */
function timeRowWaited(a: BenchArgs, x: Tensor, iters: number): number[] {
  const times: number[] = [];
  for (let rep = 0; rep < a.reps; rep++) {
    hora.barrier().wait();
    const t0 = process.hrtime.bigint();
    loopWaited(a, x, iters);
    times.push(hora.allreduce(new Float64Array([secondsPerCall(t0, iters)]), { op: 'max' }).wait()[0]);
  }
  return times;
}

async function timeRowAwaited(a: BenchArgs, x: Tensor, iters: number): Promise<number[]> {
  const times: number[] = [];
  for (let rep = 0; rep < a.reps; rep++) {
    await hora.barrier();
    const t0 = process.hrtime.bigint();
    await loopAwaited(a, x, iters);
    times.push((await hora.allreduce(new Float64Array([secondsPerCall(t0, iters)]), { op: 'max' }))[0]);
  }
  return times;
}

function secondsPerCall(t0: bigint, iters: number): number {
  return Number(process.hrtime.bigint() - t0) / 1e9 / iters;
}

/** Checks one result; returns the number of wrong elements. */
function check(a: BenchArgs, result: Tensor, count: number): number {
  const n = hora.size(), r = hora.rank(), el = ELEMENT[a.dtype];
  let wrong = 0;
  const tol = a.reduceOp === 'avg' && (a.dtype === 'float16' || a.dtype === 'bfloat16') ? 0.01 : 1e-6;
  const want = (k: number) => {
    if (a.op === 'allgather') return valueAt(Math.floor(k / count), k % count);
    if (a.op === 'reducescatter') {
      const base = Math.floor(count / n), extra = count % n;
      return expected(a, n, r * base + Math.min(r, extra) + k, 0);
    }
    return expected(a, n, k, 0);
  };
  for (let k = 0; k < result.length; k++) {
    let w = want(k);
    const integer = !(a.dtype === 'float32' || a.dtype === 'float64' || a.dtype === 'float16' || a.dtype === 'bfloat16');
    if (a.reduceOp === 'avg' && integer && a.op !== 'broadcast' && a.op !== 'allgather') w = Math.trunc(w);
    if (a.dtype === 'int8' || a.dtype === 'int16' || a.dtype === 'uint16') w = el.get(Object.assign(el.make(1), [w]), 0);  // wraps as the sum does
    const got = el.get(result, k);
    if (Math.abs(got - w) > tol * Math.max(1, Math.abs(w))) wrong++;
  }
  return wrong;
}

function fill(a: BenchArgs, x: Tensor, r: number): void {
  const el = ELEMENT[a.dtype];
  for (let i = 0; i < x.length; i++) el.set(x, i, valueAt(r, i));
}

/** This process's rank as the launcher gave it, before init; 0 when the variables say nothing usable. */
function launchRank(): number {
  try {
    return resolveLaunch().rank;
  } catch {
    return 0;
  }
}

/** No launcher's variables at all: `npx hora bench` run by itself (bad variables are left to init to name). */
function startedAlone(): boolean {
  try {
    return resolveLaunch().source === 'single';
  } catch {
    return false;
  }
}

export async function main(argv: string[]): Promise<number> {
  let a: BenchArgs;
  try {
    a = parseArgs(argv);
  } catch (e) {
    if (e instanceof UsageError) {
      // Every rank parses the same flags: rank 0 says what is wrong, once for the job (all exit alike).
      if (launchRank() === 0) {
        if (e.message) process.stderr.write(`hora bench: ${e.message}\n\n`);
        process.stderr.write(USAGE + '\n');
      }
      return e.message ? 2 : 0;
    }
    throw e;
  }
  if (startedAlone()) {
    // A collective over one rank moves no data and returns at once: its rows would be nonsense.
    process.stderr.write('hora bench: started without a launcher, this job has one rank, and a collective over one rank ' +
      'moves no data: a world of one measures nothing. Start two or more ranks with the launcher: ' +
      'npx hora run -np 2 hora bench [options] (add -H host1,host2 to measure between machines).\n');
    return 2;
  }
  const algo = a.algo ?? readSettings().algo;
  await hora.init(a.algo ? { algorithm: a.algo as hora.InitOptions['algorithm'] } : {});
  const n = hora.size(), r = hora.rank(), el = ELEMENT[a.dtype];
  // Across hosts the cost model's prediction for each size is printed beside the measurement.
  const model = a.op === 'allreduce' && n > 1 && allreduceEstimate(4, algo)?.measured;
  const header = ['bytes', 'count', 'type', 'iters', 'time_us', 'algbw_GBs', 'busbw_GBs', '#wrong'];
  if (model) header.push('model_us', 'algorithm');
  if (r === 0) {
    console.log(`# hora bench: ${a.op} (${a.op === 'allreduce' || a.op === 'reducescatter' ? a.reduceOp : 'n/a'}), ${n} ranks, ${hora.localSize()} on this host, ${a.sync ? 'wait()' : 'await'}, algorithm ${algo}`);
    // -np 1 on purpose (the cost of a call alone): say what the columns are worth.
    if (n === 1) console.log('# a world of one: no data moves, time_us is the cost of a call alone; algbw and busbw measure nothing');
    console.log(header.map((h, i) => (i === 2 ? h.padStart(9) : h.padStart(12))).join(' '));
  }
  // Let V8 compile the hot path first: its optimizing compiler runs on a background thread, and on a
  // machine with as many cores as ranks that thread takes a core from a rank in the middle of a
  // collective. Two thousand small collectives, untimed, are enough for it to settle.
  const warm = el.make(1);
  for (let i = 0; i < 1000; i++) await runOnce({ ...a, op: 'allreduce', reduceOp: 'sum', sync: false }, warm);
  for (let i = 0; i < 1000; i++) await runOnce({ ...a, op: 'allreduce', reduceOp: 'sum', sync: true }, warm);
  await loop(a, el.make(n), 5000);
  // And a pass over the small rows with everything a row does around its loop: V8 re-optimizes a
  // function when it meets new types, and a row timed while that happens on a background thread loses
  // a core for milliseconds.
  // Twice, and a pause for the compiler's background thread to finish what the passes started.
  for (let pass = 0; pass < 2; pass++) {
    for (let bytes = a.min; bytes <= Math.min(a.max, 1 << 20); bytes *= a.factor) {
      const x = el.make(Math.max(1, Math.floor(bytes / el.bytes)));
      fill(a, x, r);
      if (a.sync) {
        loopWaited(a, x, 20);
        timeRowWaited(a, x, 200);
        hora.allreduce(new Float64Array([bytes]), { op: 'sum' }).wait();
      } else {
        await loopAwaited(a, x, 20);
        await timeRowAwaited(a, x, 200);
        await hora.allreduce(new Float64Array([bytes]), { op: 'sum' });
      }
    }
  }
  // The passes' other calls (barrier, float64 reductions) make V8 throw away code it had optimized for
  // the loop alone; the loop once more has it compiled again, during the pause.
  await loop(a, el.make(n), 5000);
  await new Promise((resolve) => setTimeout(resolve, 200));
  // A machine idle for 200 ms runs the next millisecond or so slowly (a virtual CPU given back to the
  // host, a core in a power state): the first row took 5-10x its time in a run where the rest did not.
  // Busy again for a few milliseconds first, with the loop V8 has compiled.
  if (a.sync) {
    hora.barrier().wait();
    loopWaited(a, el.make(n), 5000);
  } else {
    await hora.barrier();
    await loopAwaited(a, el.make(n), 5000);
  }
  let anyWrong = 0;
  // The mean of the rows' busbw, as nccl-tests ends its table.
  let busbwSum = 0;
  let rowCount = 0;
  for (let bytes = a.min; bytes <= a.max; bytes *= a.factor) {
    const count = Math.max(1, Math.floor(bytes / el.bytes));
    const x = el.make(count);
    const iters = a.iters ?? defaultIters(bytes);
    fill(a, x, r);
    let wrong = 0;
    if (a.check) {
      const result = a.sync ? callOnce(a, x).wait() : await callOnce(a, x);
      wrong = check(a, (result ?? x) as Tensor, count);
      fill(a, x, r);
    }
    const warmup = bytes > 16 << 20 ? Math.min(a.warmup, 2) : a.warmup;
    if (a.sync) loopWaited(a, x, warmup);
    else await loopAwaited(a, x, warmup);
    const times = a.sync ? timeRowWaited(a, x, iters) : await timeRowAwaited(a, x, iters);
    times.sort((p, q) => p - q);
    const slowest = times[times.length >> 1];
    const allWrong = hora.allreduce(new Float64Array([wrong]), { op: 'sum' });
    const totalWrong = (a.sync ? allWrong.wait() : await allWrong)[0];
    anyWrong += totalWrong;
    if (r === 0) {
      const algbw = (count * el.bytes) / slowest / 1e9;
      busbwSum += algbw * busFactor(a.op, n);
      rowCount++;
      const row: (string | number)[] = [count * el.bytes, count, a.dtype, iters, (slowest * 1e6).toFixed(1), algbw.toFixed(3), (algbw * busFactor(a.op, n)).toFixed(3), a.check ? totalWrong : 'n/a'];
      if (model) {
        const e = allreduceEstimate(count * el.bytes, algo) as NonNullable<ReturnType<typeof allreduceEstimate>>;
        const predicted = e[e.chosen as 'ring'] ?? NaN;
        row.push((predicted * 1e6).toFixed(1), e.chosen);
      }
      console.log(row.map((v, i) => (i === 2 ? String(v).padStart(9) : String(v).padStart(12))).join(' '));
    }
  }
  if (r === 0 && rowCount > 0) console.log(`# Avg bus bandwidth    : ${(busbwSum / rowCount).toFixed(3)} GB/s`);
  await hora.shutdown();
  return anyWrong > 0 ? 1 : 0;
}
