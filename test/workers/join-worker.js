'use strict';
// Runs inside every rank of a `hora run` job for test/join.test.js: hora.join() for uneven data, one scenario
// (argv[2]) per run. Rank r's value at step s for element i is valueOf(r, s, i) (small integers, exact in
// float32), so every rank can compute what the ranks still live at step s make of them.
//
//   uneven      rank r runs r + 1 steps, then joins: rank 0 first, the last rank last. Each step: allreduce
//               sum, avg, min, max, prod (small: the agreement's payload path), an int32 max, a large avg
//               (ring), a fused batch of three allreduces, an allgather, a reduceScatter, a broadcast from
//               the highest live rank, a barrier. join() resolves to the last rank everywhere.
//   tie         every rank runs 2 steps and joins at the same place: the highest rank is the last
//   lastIsZero  rank 0 runs 3 steps, the others 1 (joining together): rank 0 is the last
//   rootJoined  rank 0 joins at once; the others broadcast from root 0 (ERR_INVALID_ARGUMENT), then allreduce
//               (which still works), then join
//   rooted      rank 0 joins at once; the others reduce (sum, avg over the contributors, max), gather,
//               scatter and alltoall with it taking part with nothing; a reduce to root 0 and an alltoall
//               with recvSplits are ERR_INVALID_ARGUMENT
//   refused     rank 0 joins and at once calls allreduce, which is refused; its join still resolves
//   scaled      rank 0 joins at once; the others allreduce with prescaleFactor 2 and op min (refused on every
//               live rank) and with postscaleFactor 3 and op avg (divided by the contributors, then scaled)
//   mismatch    rank 0 joins at once; ranks 1 and 2 disagree on a count, then on a fused batch's second
//               name: ERR_MISMATCH on both; the next allreduce works, and the join resolves
//   group       a group of the first and last ranks: group rank 0 joins, group rank 1 runs two group
//               allreduces and joins; then a world allreduce shows every rank in step
//   kill        rank 0 joins; the last rank SIGKILLs itself; rank 0's join fails with ERR_PEER_LOST
const hora = require('../../dist/ts/index.js');
const { describeError, runScenarios } = require('../support/worker-util');

const valueOf = (r, s, i) => (r + 1) * 10 + s + (i % 3);

/** Element-wise f over the live ranks' values at step s. */
function expected(live, s, n, f) {
  return Array.from({ length: n }, (_, i) => f(live.map((q) => valueOf(q, s, i))));
}
const sum = (v) => v.reduce((a, b) => a + b, 0);
const ops = {
  sum, avg: (v) => sum(v) / v.length, min: (v) => Math.min(...v), max: (v) => Math.max(...v), prod: (v) => v.reduce((a, b) => a * b, 1),
};

function close(got, want) {
  const a = Array.from(got, Number);
  if (a.length !== want.length) return false;
  return a.every((x, i) => Math.abs(x - want[i]) <= 1e-6 * Math.max(1, Math.abs(want[i])));
}

function blockRange(count, size, block) {
  const base = Math.floor(count / size), extra = count % size;
  const start = (b) => b * base + Math.min(b, extra);
  return [start(block), start(block + 1)];
}

/** One step of every collective, checked against what the live ranks (those with more than s steps) make. */
async function step(r, p, s, live, checks) {
  const check = (name, got, want) => {
    checks[`step ${s}: ${name}`] = close(got, want) ? true : { got: Array.from(got, Number).slice(0, 8), want: want.slice(0, 8) };
  };
  const mine = (n, Ctor = Float32Array) => Ctor.from({ length: n }, (_, i) => valueOf(r, s, i));
  for (const op of Object.keys(ops)) check(`allreduce ${op}`, await hora.allreduce(mine(5), { op }), expected(live, s, 5, ops[op]));
  check('allreduce int32 max', await hora.allreduce(mine(7, Int32Array), { op: 'max' }), expected(live, s, 7, ops.max));
  check('allreduce large avg', await hora.allreduce(mine(40000), { op: 'avg' }), expected(live, s, 40000, ops.avg));
  const fused = [hora.allreduce(mine(3), { op: 'avg' }), hora.allreduce(mine(4), { op: 'avg' }), hora.allreduce(mine(5), { op: 'avg' })];
  for (const [k, w] of fused.entries()) check(`fused allreduce ${k}`, await w, expected(live, s, 3 + k, ops.avg));
  const gathered = await hora.allgather(new Float32Array(r + 1).fill(r * 100 + s));
  check('allgather', gathered, live.flatMap((q) => new Array(q + 1).fill(q * 100 + s)));
  const n = 2 * p + 1;
  const [b, e] = blockRange(n, p, r);
  check('reduceScatter', await hora.reduceScatter(mine(n), { op: 'sum' }), expected(live, s, n, sum).slice(b, e));
  const root = live[live.length - 1];
  const data = r === root ? Float32Array.from({ length: 9 }, (_, i) => s * 7 + i) : new Float32Array(9);
  check('broadcast', await hora.broadcast(data, { root }), Array.from({ length: 9 }, (_, i) => s * 7 + i));
  await hora.barrier();
}

/** Runs `steps[r]` steps on rank r, then joins; returns the checks and what join resolved to. */
async function uneven(r, p, steps) {
  const checks = {};
  for (let s = 0; s < steps[r]; s++) {
    const live = [...Array(p).keys()].filter((q) => steps[q] > s);
    await step(r, p, s, live, checks);
  }
  const last = await hora.join();
  return { checks, last };
}

async function attempt(call) {
  try {
    return { ok: true, value: Array.from(await call(), Number) };
  } catch (e) {
    return describeError(e);
  }
}

const scenarios = {
  uneven: (r, p) => uneven(r, p, Array.from({ length: p }, (_, q) => q + 1)),
  tie: (r, p) => uneven(r, p, new Array(p).fill(2)),
  lastIsZero: (r, p) => uneven(r, p, Array.from({ length: p }, (_, q) => (q === 0 ? 3 : 1))),

  async rootJoined(r, p) {
    if (r === 0) return { last: await hora.join() };
    const bcast = await attempt(() => hora.broadcast(new Float32Array(4), { root: 0 }));
    const after = await attempt(() => hora.allreduce(new Float32Array([r, 1]), { op: 'avg' }));
    return { bcast, after, last: await hora.join() };
  },

  // Rank 0 joins at once; ranks 1..p-1 run the rooted calls and alltoall among themselves (rank 0 takes part
  // with nothing), then the same with root 0 (refused) and an alltoall with recvSplits (refused).
  async rooted(r, p) {
    if (r === 0) return { last: await hora.join() };
    const live = Array.from({ length: p - 1 }, (_, q) => q + 1);
    const mine = Float32Array.from([r, 2 * r, 10]);
    const value = async (call) => {
      const got = await attempt(async () => {
        const v = await call();
        return v === null ? [] : ArrayBuffer.isView(v) ? v : v.data;
      });
      return got;
    };
    const got = {
      sum: await value(() => hora.reduce(mine, { root: 1, op: 'sum' })),
      avg: await value(() => hora.reduce(mine, { root: 1, op: 'avg' })),
      max: await value(() => hora.reduce(mine, { root: p - 1, op: 'max' })),
      gather: await value(() => hora.gather(new Int32Array(r).fill(r), { root: 1 })),
      scatter: await value(() => hora.scatter(Int32Array.from({ length: 2 * p }, (_, i) => i), { root: 1, splits: Array.from({ length: p }, () => 2) })),
      alltoall: await value(() => hora.alltoall(Int32Array.from({ length: p }, (_, q) => 100 * r + q))),
      reduceRoot0: await attempt(() => hora.reduce(mine, { root: 0 })),
      alltoallRecv: await attempt(() => hora.alltoall(new Int32Array(p), { recvSplits: new Array(p).fill(1) })),
    };
    got.after = await attempt(() => hora.allreduce(new Float32Array([r]), { op: 'sum' }));
    return { got, live, last: await hora.join() };
  },

  async refused(r) {
    if (r !== 0) return { last: await hora.join() };
    const join = hora.join();
    const during = await attempt(() => hora.allreduce(new Float32Array([1])));
    const grouped = await attempt(() => hora.grouped.allreduce([new Float32Array([1]), new Float32Array([2])]));
    return { during, grouped, last: await join };
  },

  async scaled(r, p) {
    if (r === 0) return { last: await hora.join() };
    const min = await attempt(() => hora.allreduce(new Float32Array([r]), { op: 'min', prescaleFactor: 2 }));
    const avg = await attempt(() => hora.allreduce(new Float32Array([r, 2 * r]), { op: 'avg', postscaleFactor: 3 }));
    // The live ranks are 1..p-1: their mean times 3.
    const mean = sum([...Array(p).keys()].slice(1)) / (p - 1);
    return { min, avg, want: [3 * mean, 6 * mean], last: await hora.join() };
  },

  async mismatch(r) {
    if (r === 0) return { last: await hora.join() };
    // A lone allreduce whose count differs, then a fused batch whose second tensor differs by name (the
    // layouts are exchanged to name it, the joined rank taking part), then one that agrees.
    const lone = await attempt(() => hora.allreduce(new Float32Array(r + 2), { op: 'sum' }));
    const batch = [hora.allreduce(new Float32Array([r]), { op: 'sum', name: 'a' }), hora.allreduce(new Float32Array([r]), { op: 'sum', name: `b${r}` })];
    const fused = [];
    for (const w of batch) fused.push(await attempt(() => w));
    const after = await attempt(() => hora.allreduce(new Float32Array([r]), { op: 'sum' }));
    return { lone, fused, after, last: await hora.join() };
  },

  async group(r, p) {
    const members = [0, p - 1];
    const g = await hora.newGroup(members);
    let result = {};
    if (g) {
      if (g.rank() === 0) {
        result.last = await g.join();
      } else {
        result.sums = [];
        for (let s = 0; s < 2; s++) result.sums.push(Array.from(await g.allreduce(new Float32Array([r, s]), { op: 'sum' })));
        result.avg = Array.from(await g.allreduce(new Float32Array([4]), { op: 'avg' }));
        result.last = await g.join();
      }
    }
    result.world = Array.from(await hora.allreduce(new Float32Array([1]), { op: 'sum' }));
    return result;
  },

  async kill(r, p) {
    await hora.barrier();
    if (r === p - 1) {
      await new Promise((resolve) => setTimeout(resolve, 300));
      process.kill(process.pid, 'SIGKILL');
      await new Promise(() => {});
    }
    const t0 = performance.now();
    let got;
    if (r === 0) {
      try {
        got = { ok: true, value: await hora.join() };
      } catch (e) {
        got = describeError(e);
      }
    } else {
      got = await attempt(() => hora.allreduce(new Float32Array([1])));
    }
    return { got, ms: performance.now() - t0 };
  },
};

runScenarios(hora, scenarios, { noShutdown: ['kill'] });
