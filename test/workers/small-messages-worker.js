'use strict';
// Small collectives waited with wait() (the calling thread runs them, without the communication thread)
// against the same collectives awaited (the communication thread runs them). One scenario per run,
// named by argv[2]; reports one JSON line per rank (test/support/worker-util.js).
//   sweep    allreduce of every dtype and op over sizes around the small-message limits, each waited and
//            awaited, and fused (several in one tick); the bytes of every result must agree across the
//            modes and with the reference; also broadcast and barrier waited
//   mixed    large and small collectives outstanding at once, waited in the reverse order of submission
//   soak     SOAK_SMALL allreduces of 2 floats in a wait() loop, resident memory sampled as it goes
//   kill     rank $KILL_RANK SIGKILLs itself while the others are in a wait() loop of small allreduces
//   stop     rank $KILL_RANK SIGSTOPs itself in the same loop; the others must time out at HORA_TIMEOUT_S
//   second   2 ranks: one awaits, the other calls 30 ms later, when the first one's message is there; the
//            second runs its collective at once when it cannot wait (it is settled after microtasks
//            alone, before any callback could come). Results, mismatches, and an event loop that keeps
//            running while a call waits for a late peer.
const hora = require('../../dist/ts/index.js');
const { report, prng, describeError, growYoungGeneration } = require('../support/worker-util');

const DTYPES = {
  float32: Float32Array, float64: Float64Array, int32: Int32Array, uint8: Uint8Array, int64: BigInt64Array,
};
const OPS = ['sum', 'avg', 'min', 'max', 'prod'];
// Elements: 1, odd counts, and byte sizes on both sides of 4 KiB (the agreement's single-write limit)
// and 64 KiB (the largest allreduce that rides the agreement).
const SIZES = [1, 2, 3, 7, 63, 255, 1023, 1024, 1025, 4095, 16384, 16385, 65537];

function fill(ctor, n, rank, seed) {
  const rnd = prng(seed * 7919 + rank * 104729 + n);
  const x = new ctor(n);
  for (let i = 0; i < n; i++) {
    const v = Math.floor(rnd() * 9) - 2; // small integers: sums and products stay exact in every dtype
    x[i] = ctor === BigInt64Array ? BigInt(v) : (ctor === Uint8Array ? Math.abs(v) : v);
  }
  return x;
}

// The result every rank must get, computed from every rank's input (all ranks' data is reproducible).
function reference(ctor, n, p, seed, op) {
  const inputs = [];
  for (let r = 0; r < p; r++) inputs.push(fill(ctor, n, r, seed));
  const out = new ctor(n);
  const big = ctor === BigInt64Array;
  for (let i = 0; i < n; i++) {
    let acc = inputs[0][i];
    for (let r = 1; r < p; r++) {
      const v = inputs[r][i];
      if (op === 'sum' || op === 'avg') acc += v;
      else if (op === 'prod') acc *= v;
      else if (op === 'min') acc = v < acc ? v : acc;
      else acc = v > acc ? v : acc;
    }
    out[i] = acc;
  }
  return out;
}

const bytesOf = (a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

async function sweep() {
  const p = hora.size();
  const failures = [];
  let checked = 0;
  let seed = 1;
  for (const [dtype, ctor] of Object.entries(DTYPES)) {
    for (const op of OPS) {
      for (const n of SIZES) {
        if (n * ctor.BYTES_PER_ELEMENT > 300 * 1024) continue;
        seed++;
        const name = `sweep/${dtype}/${op}/${n}`;
        const waited = hora.allreduce(fill(ctor, n, hora.rank(), seed), { op, name }).wait();
        const awaited = await hora.allreduce(fill(ctor, n, hora.rank(), seed), { op, name });
        // Three in one tick: small ones are fused into one collective.
        const fused = [0, 1, 2].map(() => hora.allreduce(fill(ctor, n, hora.rank(), seed), { op }));
        const fusedResults = [fused[0].wait(), await fused[1], await fused[2]];
        const what = `${dtype} ${op} x${n}`;
        if (!bytesOf(waited).equals(bytesOf(awaited))) failures.push(`${what}: wait() and await differ`);
        for (const f of fusedResults) if (!bytesOf(f).equals(bytesOf(waited))) failures.push(`${what}: fused differs from wait()`);
        if (op !== 'avg') {
          const want = reference(ctor, n, p, seed, op);
          if (!bytesOf(waited).equals(bytesOf(want))) failures.push(`${what}: differs from the reference`);
        } else if (ctor === Float64Array) {
          const want = reference(ctor, n, p, seed, 'sum');
          for (let i = 0; i < n; i++) {
            if (Math.abs(waited[i] - want[i] / p) > 1e-12) {
              failures.push(`${what}: element ${i} is ${waited[i]}, want ${want[i] / p}`);
              break;
            }
          }
        }
        checked++;
      }
    }
  }
  // Broadcast and barrier, waited and awaited.
  for (const n of [1, 1000, 20000]) {
    const root = n % p;
    const a = hora.broadcast(fill(Float32Array, n, hora.rank(), n), { root }).wait();
    const b = await hora.broadcast(fill(Float32Array, n, hora.rank(), n), { root });
    const want = fill(Float32Array, n, root, n);
    if (!bytesOf(a).equals(bytesOf(want)) || !bytesOf(b).equals(bytesOf(want))) failures.push(`broadcast x${n} from ${root}: wrong`);
  }
  hora.barrier().wait();
  await hora.barrier();
  // The addon sizes an array by the dtype the call names, bounded by the array's buffer: one whose buffer
  // is too short for that dtype is refused before anything is sent, on every rank, and the world goes on.
  // One reader of an item's array serves every way in (native/binding/work_calls.cc readData): a batch's
  // item (submit()) and a message alone (message()) are refused alike; a view of a SharedArrayBuffer
  // (no ArrayBuffer to bound it) is refused by its element type.
  const { nativeItem, packCode } = require('../../dist/ts/native.js');
  const comm = require('../../dist/ts/hora.js').current('sweep').dispatcher.comm;
  const short = new Uint8Array(6);
  const shared = new Uint8Array(new SharedArrayBuffer(6));
  // ts/native.ts: allreduce, sum, float32 (NativeKind, NativeOp, NativeDType 0), algorithm auto.
  const item = nativeItem(0, 0, 0, 0, '', short, null);
  const tooShort = /fewer bytes than its dtype needs/, notItsSize = /the array's elements are not its dtype's size/;
  // ts/native.ts Manner: WaitNow (a wait()ed call alone, 1 << 20) and Awaited (0).
  const refusals = [
    ['collective, waited now', () => comm.collective(1e9, packCode(item, 1 << 20), 0, short, null, null), tooShort],
    ['collective, awaited', () => comm.collective(1e9, packCode(item, 0), 0, short, null, null), tooShort],
    ['collective of a SharedArrayBuffer view', () => comm.collective(1e9, packCode(item, 0), 0, shared, null, null), notItsSize],
    ['submit', () => comm.submit([{ ...item, id: 1e9 }], false), tooShort],
    ['submit of a SharedArrayBuffer view', () => comm.submit([{ ...item, data: shared, id: 1e9 }], false), notItsSize],
  ];
  // A send (NativeKind 6) of float32 to the next rank, awaited; no rank receives it, so none may be posted.
  const send = nativeItem(6, 0, 0, 0, '', short, null, (hora.rank() + 1) % p, 999);
  refusals.push(['message', () => comm.message(1e9, packCode(send, 0), short, send.peer, send.tag, 0), tooShort]);
  refusals.push(['message of a SharedArrayBuffer view', () => comm.message(1e9, packCode(send, 0), shared, send.peer, send.tag, 0), notItsSize]);
  for (const [call, refused, why] of refusals) {
    try {
      refused();
      failures.push(`${call} took 6 bytes as float32 elements`);
    } catch (e) {
      if (!(e instanceof RangeError) || !why.test(e.message)) failures.push(`${call}: ${e}`);
    }
  }
  const after = hora.allreduce(new Float32Array([hora.rank() + 1]), { op: 'sum' }).wait();
  if (after[0] !== (p * (p + 1)) / 2) failures.push(`an allreduce after the refused calls gave ${after[0]}`);
  checked++;
  return { checked, failures };
}

async function mixed() {
  const p = hora.size(), r = hora.rank();
  const failures = [];
  for (let round = 0; round < 12; round++) {
    const works = [];
    for (let k = 0; k < 8; k++) {
      const n = k % 2 === 0 ? 1024 * 1024 : [1, 300, 5000, 16384][(k >> 1) % 4]; // 4 MiB and small
      works.push([hora.allreduce(new Float32Array(n).fill(r + k + round), { op: 'sum' }), n, k]);
    }
    // Even rounds: waited last first, so wait() runs the earlier ones in order before its own. Odd
    // rounds: the first is awaited (the communication thread runs the batch) and the rest waited
    // while that thread is still at them.
    const order = round % 2 === 0 ? [7, 6, 5, 4, 3, 2, 1, 0] : [0, 3, 1, 7, 2, 6, 4, 5];
    for (const i of order) {
      const [w, n, k] = works[i];
      const got = (round % 2 === 0 ? i % 3 === 0 : i === 0) ? await w : w.wait();
      const want = (p * (p - 1)) / 2 + p * (k + round);
      if (got.length !== n || got[0] !== want || got[n - 1] !== want) failures.push(`round ${round}, #${k}: got ${got[0]}, want ${want}`);
    }
  }
  return { failures };
}

async function soak() {
  const n = Number(process.env.SOAK_SMALL || 100000);
  const p = hora.size(), r = hora.rank();
  require('node:v8').setFlagsFromString('--expose-gc');
  const collect = require('node:vm').runInNewContext('gc');
  const samples = [];
  let failure = '';
  const every = Math.max(1, Math.floor(n / 20));
  growYoungGeneration();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const got = hora.allreduce(new Float32Array([r + 1, i % 1000]), { op: 'sum' }).wait();
    if (!failure && (got[0] !== (p * (p + 1)) / 2 || got[1] !== p * (i % 1000))) failure = `#${i}: got ${got}`;
    if ((i + 1) % every === 0) {
      // The loop never yields to the event loop: anything that piles up per collective (completion
      // callbacks, results) shows as growth here.
      collect();
      samples.push({ done: i + 1, rssMiB: +(process.memoryUsage().rss / 1048576).toFixed(1), heapMiB: +(process.memoryUsage().heapUsed / 1048576).toFixed(1) });
    }
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  // What the Stats report says of the loop: every call counted, and its time as busy time (a wait()ed
  // collective reports the time its one call into the addon took).
  const stats = require('../../dist/ts/hora.js').current('soak').dispatcher.stats.snapshot().kinds.find((k) => k.kind === 'allreduce');
  return { failure, samples, seconds, stats };
}

// The victim stops (or dies) after a few hundred waited allreduces; the others keep waiting in the loop.
async function failure(how) {
  const r = hora.rank();
  const victim = Number(process.env.KILL_RANK || 1);
  const x = new Float32Array(2);
  for (let i = 0; i < 100000000; i++) {
    if (r === victim && i === 500) {
      report(r, { [how === 'kill' ? 'killedAt' : 'stoppedAt']: Date.now(), iteration: i, jobId: process.env.HORA_JOB_ID });
      process.kill(process.pid, how === 'kill' ? 'SIGKILL' : 'SIGSTOP');
      for (;;); // eslint-disable-line no-empty
    }
    try {
      hora.allreduce(x, { op: 'sum', inplace: true }).wait();
    } catch (e) {
      const rejectedAt = Date.now();
      const t0 = Date.now();
      const after = await hora.allreduce(new Float32Array(1)).then(() => ({ ok: true }), describeError);
      return { rejectedAt, iteration: i, error: describeError(e), after, afterMs: Date.now() - t0 };
    }
  }
  return { rejectedAt: null };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Calls fn (which starts a collective and returns its Work) and lets only microtasks run: whether the
// Work has settled by then, and the Work.
async function callAndPeek(fn) {
  const w = fn();
  for (let i = 0; i < 4; i++) await null;
  return { settled: w.done, w };
}

async function second() {
  const r = hora.rank();
  const failures = [];
  const notAtOnce = [];
  let atOnce = 0;
  // Allreduces of float32 and int32 sums and avgs, 1 to 1025 elements; the late rank alternates.
  const cases = [];
  for (const n of [1, 2, 255, 1023, 1024, 1025]) for (const dtype of ['float32', 'int32']) for (const op of ['sum', 'avg', 'max']) cases.push([n, dtype, op]);
  for (let k = 0; k < cases.length; k++) {
    const [n, dtype, op] = cases[k];
    const ctor = DTYPES[dtype];
    const x = fill(ctor, n, r, k + 1);
    const late = k % 2;
    const want = reference(ctor, n, 2, k + 1, op);
    if (op === 'avg') for (let i = 0; i < n; i++) want[i] = dtype === 'int32' ? Math.trunc(want[i] / 2) : want[i] / 2;
    let got;
    if (r === late) {
      await sleep(30);
      const { settled, w } = await callAndPeek(() => hora.allreduce(x, { op, dtype }));
      // Up to 4 KiB the whole message travels in one piece and is there at once; above, not always.
      if (settled) atOnce++;
      else if (n * 4 <= 4096) notAtOnce.push(`${n} x ${dtype} ${op}`);
      got = await w;
    } else {
      got = await hora.allreduce(x, { op, dtype });
    }
    if (!bytesOf(got).equals(bytesOf(want))) failures.push(`${n} x ${dtype} ${op}: got ${Array.from(got.slice(0, 3))}, want ${Array.from(want.slice(0, 3))}`);
  }
  // A barrier, the late rank's settled at once too.
  let barrierAtOnce = null;
  if (r === 1) {
    await sleep(30);
    const { settled, w } = await callAndPeek(() => hora.barrier());
    barrierAtOnce = settled;
    await w;
  } else {
    await hora.barrier();
  }
  // Mismatches met by the late rank: another count, then a barrier against an allreduce. Both ranks fail
  // with ERR_MISMATCH, and the next collective is right.
  const mismatches = [];
  for (const [mine, theirs] of [[4, 8], ['barrier', 4]]) {
    const what = r === 1 ? mine : theirs;
    const call = () => (what === 'barrier' ? hora.barrier() : hora.allreduce(new Float32Array(what).fill(1), { op: 'sum' }));
    if (r === 1) await sleep(30);
    const outcome = await (r === 1 ? callAndPeek(call).then(({ w }) => w) : call()).then(() => null, describeError);
    mismatches.push(outcome);
    const after = await hora.allreduce(new Float32Array([r + 1]), { op: 'sum' });
    if (after[0] !== 3) failures.push(`after the mismatch ${mine}/${theirs}: got ${after[0]}`);
  }
  // A peer that is late: the early call cannot run at once, and the event loop runs while it waits.
  let ticks = 0;
  let earlySettled = null;
  if (r === 0) {
    const timer = setInterval(() => ticks++, 5);
    const { settled, w } = await callAndPeek(() => hora.allreduce(new Float32Array([1]), { op: 'sum' }));
    earlySettled = settled;
    await w;
    clearInterval(timer);
  } else {
    await sleep(200);
    await hora.allreduce(new Float32Array([1]), { op: 'sum' });
  }
  return { failures, atOnce, cases: cases.length, notAtOnce, barrierAtOnce, mismatches, ticks, earlySettled };
}

async function main() {
  const scenario = process.argv[2];
  await hora.init();
  let result;
  switch (scenario) {
    case 'sweep': result = await sweep(); break;
    case 'mixed': result = await mixed(); break;
    case 'soak': result = await soak(); break;
    case 'kill': case 'stop': result = await failure(scenario); break;
    case 'second': result = await second(); break;
    default: throw new Error(`unknown scenario ${scenario}`);
  }
  report(hora.rank(), { ...result, jobId: process.env.HORA_JOB_ID });
  // A survivor leaves at once: its world is broken. After a stop it fails, so the launcher ends the job
  // (the stopped rank never exits by itself).
  if (scenario === 'kill') process.exit(0);
  if (scenario === 'stop') process.exit(1);
  await hora.shutdown();
}

main().catch((e) => {
  process.stderr.write(`small-messages-worker rank ${process.env.HORA_RANK}: ${e && e.stack}\n`);
  process.exit(1);
});
