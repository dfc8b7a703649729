'use strict';
// Runs inside every rank of a `hora run` job for test/alltoall.test.js: hora.alltoall and hora.scatter,
// one scenario (argv[2]) per run.
//
//   values      every dtype; equal, uneven, one-sided and empty splits (all zero, and [] for equal parts),
//               zero-length arrays, recvSplits given,
//               blocks past the shared-memory slots; awaited and wait()ed; in the world and in a group of the
//               last and first ranks; scatter from every root, equal and uneven. Each result compared with
//               what every rank can compute (blockOf())
//   bad         rank 1 alone passes a bad argument (a negative split, splits of the wrong length or sum, a
//               non-integer, x.length that does not divide, an unknown option, a root out of range)
//   recv        rank 1's recvSplits differ from what rank 0 sends it; rank 0 alone gives recvSplits; ranks
//               name different roots for scatter
//   one         a world of one
//   kill        the last rank SIGKILLs itself; the others' next alltoall
//   single      blocks past the single-copy bound (16 KiB, read from the sender's memory between ranks of one
//               host): uneven with zero blocks, equal 1 MiB blocks into a reused out, twice each, then a small
//               one; scatter of large parts. As single-rank1-off, rank 1 runs with HORA_SHM_SINGLE_COPY=0
//               (it refuses the others' offers and offers none): the same results
//   killcopy    alltoalls of 8 MiB blocks, awaited one after another, until the last rank SIGKILLs itself
//               while one is on its way (a timer, the engine mid-copy or waiting for an answer); the others'
//               alltoall in flight is ERR_PEER_LOST
//   elastic     under `hora run -np 2 --min-np 2`: refused outside hora.elastic.run, working inside it
//   ride        2 ranks, recvSplits given (the first round rides on the agreement): blocks of every kind each
//               way (empty, small, just under and at the single-copy bound, large), into out and not, twice
//               each; then rank 1's recvSplits one element off, with out given: ERR_MISMATCH, out untouched.
//               As ride-rank1-off, rank 1 runs with HORA_SHM_SINGLE_COPY=0
// After each failing call every rank runs one more alltoall, which must succeed: nothing was lost.
// 'single-rank1-off' and 'ride-rank1-off': rank 1 alone turns the single copy off (read at init).
if (/-rank1-off$/.test(process.argv[2] || '') && process.env.HORA_RANK === '1') process.env.HORA_SHM_SINGLE_COPY = '0';
const hora = require('../../dist/ts/index.js');
const { describeError, outcome, runScenarios, lastRankDies } = require('../support/worker-util');

// [name, constructor, options.dtype, how a number becomes an element]
const DTYPES = [
  ['float32', Float32Array, undefined, Number], ['float64', Float64Array, undefined, Number],
  ['float16', Uint16Array, 'float16', Number], ['bfloat16', Uint16Array, 'bfloat16', Number],
  ['int32', Int32Array, undefined, Number], ['int64', BigInt64Array, undefined, BigInt], ['uint8', Uint8Array, undefined, Number],
  ['int8', Int8Array, undefined, Number], ['int16', Int16Array, undefined, Number], ['uint16', Uint16Array, 'uint16', Number],
];

/** The block rank s sends rank q: n elements, values that name s, q and the index (within every dtype's range). */
function blockOf(Ctor, conv, s, q, n) {
  return Ctor.from({ length: n }, (_, i) => conv((s * 37 + q * 11 + i) % 120));
}

function concat(Ctor, blocks) {
  const out = new Ctor(blocks.reduce((a, b) => a + b.length, 0));
  let at = 0;
  for (const b of blocks) {
    out.set(b, at);
    at += b.length;
  }
  return out;
}

/** x of rank s for splits(s, q), and what rank r must receive. */
function alltoallCase(Ctor, conv, r, p, splits) {
  const x = concat(Ctor, Array.from({ length: p }, (_, q) => blockOf(Ctor, conv, r, q, splits(r, q))));
  const want = concat(Ctor, Array.from({ length: p }, (_, s) => blockOf(Ctor, conv, s, r, splits(s, r))));
  const sendSplits = Array.from({ length: p }, (_, q) => splits(r, q));
  const recvSplits = Array.from({ length: p }, (_, s) => splits(s, r));
  return { x, want, sendSplits, recvSplits };
}

const same = (a, b) => a.constructor === b.constructor && a.length === b.length && a.every((v, i) => v === b[i]);

async function check(call, want, wantSplits) {
  try {
    const got = await call();
    const data = wantSplits === undefined ? got : got.data;
    const ok = same(data, want) && (wantSplits === undefined || JSON.stringify(got.splits) === JSON.stringify(wantSplits));
    return ok ? { ok: true } : { ok: false, got: Array.from(data.slice(0, 20), String), splits: got.splits, want: Array.from(want.slice(0, 20), String), wantSplits };
  } catch (e) {
    return describeError(e);
  }
}

/** One alltoall after a failure: the ranks are still in step. */
async function after(r, p) {
  const { x, want } = alltoallCase(Int32Array, Number, r, p, () => 2);
  return check(() => hora.alltoall(x), want, Array(p).fill(2));
}

const PATTERNS = {
  equal: () => 3,
  uneven: (s, q) => (s * 2 + q * 3 + 1) % 4,   // some zeros, different everywhere
  'one-sided': (s) => (s === 0 ? 5 : 0),       // only rank 0 sends; it receives only its own part
  'to one': (s, q) => (q === 1 ? s + 1 : 0),   // every rank sends to rank 1 only
  empty: () => 0,
  large: (s, q) => 70001 + 1013 * s + 17 * q,  // past the 64 KiB shared-memory slots
};

async function values(r, p) {
  const checks = {};
  for (const [dname, Ctor, dtype, conv] of DTYPES) {
    for (const [pname, splits] of Object.entries(PATTERNS)) {
      if (pname === 'large' && !['float32', 'int8', 'int64'].includes(dname)) continue;
      const c = alltoallCase(Ctor, conv, r, p, splits);
      const base = dtype ? { dtype } : {};
      checks[`${dname} ${pname}`] = await check(() => hora.alltoall(c.x, { ...base, splits: c.sendSplits }), c.want, c.recvSplits);
      checks[`${dname} ${pname} recvSplits`] = await check(() => hora.alltoall(c.x, { ...base, splits: c.sendSplits, recvSplits: c.recvSplits }).wait(), c.want, c.recvSplits);
    }
    const eq = alltoallCase(Ctor, conv, r, p, PATTERNS.equal);
    checks[`${dname} splits omitted`] = await check(() => hora.alltoall(eq.x, dtype ? { dtype } : undefined), eq.want, eq.recvSplits);
    checks[`${dname} splits []`] = await check(() => hora.alltoall(eq.x, { ...(dtype ? { dtype } : {}), splits: [], recvSplits: [] }), eq.want, eq.recvSplits);
    checks[`${dname} zero-length x`] = await check(() => hora.alltoall(new Ctor(0), dtype ? { dtype } : undefined), new Ctor(0), Array(p).fill(0));
    for (let root = 0; root < p; root++) {
      const parts = (q) => (q + root) % 3;  // rank root gets 0 elements when root is 0
      const x = r === root ? concat(Ctor, Array.from({ length: p }, (_, q) => blockOf(Ctor, conv, root, q, parts(q)))) : new Ctor(0);
      const splits = Array.from({ length: p }, (_, q) => parts(q));
      checks[`${dname} scatter root ${root}`] = await check(() => hora.scatter(x, { ...(dtype ? { dtype } : {}), root, splits }), blockOf(Ctor, conv, root, r, parts(r)));
    }
  }
  const bigRoot = p - 1;
  const bigX = r === bigRoot ? concat(Float32Array, Array.from({ length: p }, (_, q) => blockOf(Float32Array, Number, bigRoot, q, 200000))) : new Float32Array(3);
  checks['scatter equal parts, 800 KB each, splits only on the root'] = await check(() => hora.scatter(bigX, { root: bigRoot }), blockOf(Float32Array, Number, bigRoot, r, 200000));
  // Two calls and an allreduce in one synchronous run (one batch).
  const a = alltoallCase(Float64Array, Number, r, p, PATTERNS.uneven);
  checks['one batch'] = await check(async () => {
    const w1 = hora.alltoall(a.x, { splits: a.sendSplits, name: 'a' });
    const s = hora.allreduce(new Float32Array([1]), { op: 'sum', name: 'b' });
    const w2 = hora.alltoall(a.x, { splits: a.sendSplits, recvSplits: a.recvSplits, name: 'c' });
    const [g1, sum, g2] = await Promise.all([w1, s, w2]);
    return { data: same(g1.data, g2.data) && sum[0] === p ? g1.data : new Float64Array(0), splits: g2.splits };
  }, a.want, a.recvSplits);
  const g = await hora.newGroup([p - 1, 0]);
  if (g) {
    const gr = g.rank();
    const c = alltoallCase(Int32Array, Number, gr, 2, PATTERNS.uneven);
    checks['group.alltoall'] = await check(() => g.alltoall(c.x, { splits: c.sendSplits }), c.want, c.recvSplits);
    checks['group.alltoall recvSplits'] = await check(() => g.alltoall(c.x, { splits: c.sendSplits, recvSplits: c.recvSplits }), c.want, c.recvSplits);
    const x = gr === 1 ? concat(Int16Array, [blockOf(Int16Array, Number, 1, 0, 4), blockOf(Int16Array, Number, 1, 1, 2)]) : new Int16Array(0);
    checks['group.scatter'] = await check(() => g.scatter(x, { root: 1, splits: [4, 2] }), blockOf(Int16Array, Number, 1, gr, gr === 0 ? 4 : 2));
  }
  return { checks };
}

async function bad(r, p) {
  const x = new Float32Array(2 * p);
  const even = Array(p).fill(2);
  const calls = {
    negative: () => hora.alltoall(x, { splits: r === 1 ? [-1, ...even.slice(1)] : even }),
    length: () => hora.alltoall(x, { splits: r === 1 ? even.slice(1) : even }),
    sum: () => hora.alltoall(x, { splits: r === 1 ? [3, ...even.slice(1)] : even }),
    fraction: () => hora.alltoall(x, { splits: r === 1 ? [1.5, 0.5, ...even.slice(2)] : even }),
    divide: () => hora.alltoall(r === 1 ? new Float32Array(2 * p + 1) : x),
    recvNegative: () => hora.alltoall(x, { recvSplits: r === 1 ? [-2, ...even.slice(1)] : even }),
    unknown: () => hora.alltoall(x, r === 1 ? { split: even } : {}),
    torch: () => hora.alltoall(x, r === 1 ? { splits: even, output_split_sizes: even } : {}),
    scatterRoot: () => hora.scatter(x, { root: r === 1 ? p : 0 }),
    scatterSum: () => hora.scatter(x, { root: 1, splits: r === 1 ? [1, ...even.slice(1)] : undefined }),
    outType: () => hora.alltoall(x, { out: r === 1 ? new Int32Array(2 * p) : new Float32Array(2 * p) }),
    outLength: () => hora.alltoall(x, { recvSplits: even, out: new Float32Array(r === 1 ? 2 * p + 1 : 2 * p) }),
    outOverlap: () => hora.alltoall(x, { out: r === 1 ? x.subarray(1) : new Float32Array(2 * p) }),
  };
  const got = {};
  for (const [name, call] of Object.entries(calls)) {
    got[name] = await outcome(call);
    got[name].after = await after(r, p);
  }
  return got;
}

/**
 * options.out: the caller's array receives, twice in a row (the same array reused), with recvSplits
 * (uneven) and without (equal parts of out); the Work's data is out itself.
 */
async function out(r, p) {
  const checks = {};
  for (const [name, pattern] of [['uneven', PATTERNS.uneven], ['large', PATTERNS.large]]) {
    const c = alltoallCase(Float64Array, Number, r, p, pattern);
    const into = new Float64Array(c.want.length).fill(-1);
    for (const round of [1, 2]) {
      let same = true;
      checks[`${name} ${round}`] = await check(async () => {
        const got = await hora.alltoall(c.x, { splits: c.sendSplits, recvSplits: c.recvSplits, out: into });
        same = got.data === into;
        return got;
      }, c.want, c.recvSplits);
      if (!same) checks[`${name} ${round}`] = { ok: false, why: 'data is not out' };
    }
  }
  const c = alltoallCase(Int32Array, Number, r, p, PATTERNS.equal);
  const into = new Int32Array(c.want.length);
  checks.equal = await check(() => hora.alltoall(c.x, { out: into }).then((got) => (got.data === into ? got : { data: new Int32Array(0), splits: [] })), c.want, c.recvSplits);
  return { checks };
}

async function recv(r, p) {
  const c = alltoallCase(Int32Array, Number, r, p, PATTERNS.uneven);
  const wrong = c.recvSplits.slice();
  if (r === 1) wrong[0] += 1;
  const mismatch = await outcome(() => hora.alltoall(c.x, { splits: c.sendSplits, recvSplits: wrong }));
  const mixed = await outcome(() => hora.alltoall(c.x, { splits: c.sendSplits, recvSplits: r === 0 ? c.recvSplits : undefined }));
  const roots = await outcome(() => hora.scatter(new Int32Array(p), { root: r }));
  const after1 = await after(r, p);
  return { mismatch, mixed, roots, after: after1 };
}

async function one() {
  const x = new Float64Array([1, 2, 3]);
  const a = await hora.alltoall(x);
  const b = hora.scatter(x, { splits: [3] }).wait();
  const wrongRecv = await outcome(() => hora.alltoall(x, { recvSplits: [2] }));
  const badSplits = await outcome(() => hora.alltoall(x, { splits: [2] }));
  return { a: Array.from(a.data), splits: a.splits, copy: a.data !== x, b: Array.from(b), bCopy: b !== x, wrongRecv, badSplits };
}

async function kill(r, p) {
  await lastRankDies(hora, r, p);
  const t0 = performance.now();
  const got = await outcome(() => hora.alltoall(new Float32Array(p * 1000)));
  return { got, ms: performance.now() - t0 };
}

async function single(r, p) {
  const checks = {};
  const KiB16 = 4096;  // float32 elements in 16 KiB
  const patterns = {
    // Zero blocks, blocks just under and just over the bound, and large ones, different for every pair.
    uneven: (s, q) => [0, KiB16 - 1, KiB16, 5 * KiB16 + 7 * s + q][(s + 2 * q) % 4],
    equal: () => 1 << 18,  // 1 MiB
  };
  for (const [name, splits] of Object.entries(patterns)) {
    const c = alltoallCase(Float32Array, Number, r, p, splits);
    const into = new Float32Array(c.want.length).fill(-1);
    for (const round of [1, 2]) {
      checks[`${name} ${round}`] = await check(() => hora.alltoall(c.x, { splits: c.sendSplits }), c.want, c.recvSplits);
      checks[`${name} ${round} out`] = await check(() => hora.alltoall(c.x, { splits: c.sendSplits, recvSplits: c.recvSplits, out: into }).wait(), c.want, c.recvSplits);
    }
  }
  const root = p - 1;
  const parts = (q) => (q === 0 ? 0 : 3 * KiB16 + q);
  const x = r === root ? concat(Float32Array, Array.from({ length: p }, (_, q) => blockOf(Float32Array, Number, root, q, parts(q)))) : new Float32Array(0);
  checks.scatter = await check(() => hora.scatter(x, { root, splits: Array.from({ length: p }, (_, q) => parts(q)) }), blockOf(Float32Array, Number, root, r, parts(r)));
  checks.after = await after(r, p);
  return { checks };
}

async function ride(r, p) {
  const checks = {};
  const KiB16 = 4096;  // float32 elements in 16 KiB
  const sizes = [0, 3, KiB16 - 1, KiB16, 3 * KiB16 + 5];
  for (const a of sizes) {
    for (const b of sizes) {
      // Rank 0 sends rank 1 a elements, rank 1 sends rank 0 b; each keeps 2 for itself.
      const splits = (s, q) => (s === q ? 2 : s === 0 ? a : b);
      const c = alltoallCase(Float32Array, Number, r, p, splits);
      const into = new Float32Array(c.want.length).fill(-1);
      for (const round of [1, 2]) {
        checks[`${a}/${b} ${round}`] = await check(() => hora.alltoall(c.x, { splits: c.sendSplits, recvSplits: c.recvSplits }).wait(), c.want, c.recvSplits);
        checks[`${a}/${b} ${round} out`] = await check(() => hora.alltoall(c.x, { splits: c.sendSplits, recvSplits: c.recvSplits, out: into }), c.want, c.recvSplits);
      }
    }
  }
  const mismatched = {};
  for (const n of [3, KiB16 + 1]) {
    const c = alltoallCase(Float32Array, Number, r, p, () => n);
    const wrong = c.recvSplits.slice();
    if (r === 1) wrong[0] += 1;
    const into = new Float32Array(wrong.reduce((s, v) => s + v, 0)).fill(-7);
    const got = await outcome(() => hora.alltoall(c.x, { splits: c.sendSplits, recvSplits: wrong, out: into }));
    mismatched[n] = { code: got.code, message: got.message, untouched: into.every((v) => v === -7) };
  }
  checks.after = await after(r, p);
  return { checks, mismatched };
}

async function killcopy(r, p) {
  const n = 1 << 21;  // 8 MiB of float32 per block
  const x = new Float32Array(n * p).fill(r);
  const into = new Float32Array(n * p);
  await hora.barrier();
  if (r === p - 1) setTimeout(() => process.kill(process.pid, 'SIGKILL'), 300);
  const t0 = performance.now();
  let calls = 0;
  for (;;) {
    const t = performance.now();
    const got = await outcome(() => hora.alltoall(x, { out: into }));
    if (!got.ok) return { got, calls, ms: performance.now() - t, total: performance.now() - t0 };
    if (++calls > 100000) return { got: { code: 'none', message: 'no failure' }, calls };
  }
}

async function elastic(r) {
  const outside = await outcome(() => hora.alltoall(new Float32Array(2)));
  const state = new hora.elastic.State({ step: 0 });
  let inside = null;
  await hora.elastic.run(state, async () => {
    const p = hora.size(), me = hora.rank();
    const c = alltoallCase(Int32Array, Number, me, p, PATTERNS.uneven);
    inside = await check(() => hora.alltoall(c.x, { splits: c.sendSplits }), c.want, c.recvSplits);
    const x = me === 0 ? Int32Array.from({ length: 2 * p }, (_, i) => i) : new Int32Array(0);
    inside.scatter = await check(() => hora.scatter(x), Int32Array.from([2 * me, 2 * me + 1]));
  });
  return { outside, inside, r };
}

runScenarios(hora, { values, bad, out, recv, one, kill, single, 'single-rank1-off': single, killcopy, elastic, ride, 'ride-rank1-off': ride }, { noShutdown: ['kill', 'killcopy'] });
