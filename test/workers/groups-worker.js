'use strict';
// Process groups (hora.newGroup), observed from inside each rank of a 4-rank job.
// Usage: node groups-worker.js <scenario>
//   results      groups [0, 2], [1, 3] (disjoint, at the same time) and [3, 1, 0] (listed out of order):
//                every collective, several dtypes and sizes, against values computed here; world
//                collectives interleaved with the groups'; rank(), size(), and null for non-members
//   messages     send/recv inside groups, peers named by group rank; group and world messages of one
//                tag kept apart; a mismatched group message
//   pipeline     replica groups [0, 2] and [1, 3] average gradients while 0 <-> 1 and 2 <-> 3 exchange
//                activations with send/recv, at the same time, for several steps
//   invalid      bad lists (on every rank, then on rank 1 only) and bad group calls; then a group works
//   lists        rank 2 gives a different list: ERR_MISMATCH on every rank; the world still works
//   inside       group [0, 2] members call allreduce with different counts: ERR_MISMATCH on both, naming
//                the group; the group and the world go on
//   kill         rank 2 SIGKILLs itself while group [0, 1, 2] runs allreduces: ERR_PEER_LOST on 0 and 1
//   independent  group [0, 1] runs five allreduces while group [2, 3] starts its own 3 s late
//   timeout      group [0, 1]: rank 1 never calls the allreduce rank 0 waits in (run with a short
//                HORA_TIMEOUT_S): ERR_TIMEOUT on rank 0 naming rank 1
// Each rank writes one JSON line to $HORA_TEST_RESULT_DIR/rank-<rank>.json and exits 0 whatever it saw.
const hora = require('../../dist/ts/index.js');
const { outcome, describeError, runScenarios } = require('../support/worker-util');

const DTYPES = ['float32', 'float64', 'float16', 'int32', 'int64', 'uint8', 'int8', 'int16', 'uint16'];

function ctorOf(dtype) {
  return { float32: Float32Array, float64: Float64Array, float16: Uint16Array, int32: Int32Array, int64: BigInt64Array, uint8: Uint8Array,
    int8: Int8Array, int16: Int16Array, uint16: Uint16Array }[dtype];
}

/** float16 bits of a small non-negative integer (exact below 2048). */
function half(v) {
  if (v === 0) return 0;
  const e = Math.floor(Math.log2(v));
  return ((e + 15) << 10) | Math.round((v / 2 ** e - 1) * 1024);
}

/** The small integer at position i of rank r's contribution; as a plain number. */
function value(i, r) {
  return (i * 7 + r * 13) % 23 + r;
}

function encode(dtype, v) {
  if (dtype === 'float16') return half(v);
  if (dtype === 'int64') return BigInt(v);
  return v;
}

function contribution(dtype, n, r) {
  const x = new (ctorOf(dtype))(n);
  for (let i = 0; i < n; i++) x[i] = encode(dtype, value(i, r));
  return x;
}

const opt = (dtype) => (dtype === 'float16' || dtype === 'uint16' ? { dtype } : {});

/** First index where got differs from the expected numbers (encoded), or -1. */
function firstDifference(dtype, got, expected) {
  if (!got || got.length !== expected.length) return got ? `length ${got.length}, not ${expected.length}` : 'nothing';
  for (let i = 0; i < expected.length; i++) {
    if (got[i] !== encode(dtype, expected[i])) return `index ${i}: ${got[i]}, not ${encode(dtype, expected[i])}`;
  }
  return -1;
}

const range = (n) => Array.from({ length: n }, (_, i) => i);

/** Every collective of `group` (world ranks `ranks`) checked against expected values; failures listed in bad. */
async function checkGroup(group, ranks, bad, label) {
  const me = hora.rank(), gr = ranks.indexOf(me), gs = ranks.length;
  if (group.rank() !== gr || group.size() !== gs) bad.push(`${label}: rank()/size() ${group.rank()}/${group.size()}, not ${gr}/${gs}`);
  for (const dtype of DTYPES) {
    // 5 rides along the agreement; 70001 float32 (280 KB) takes the ring.
    for (const n of [5, 70001]) {
      if (n > 5 && dtype !== 'float32' && dtype !== 'int32') continue;
      const where = `${label} ${dtype} x ${n}`;
      const sum = await group.allreduce(contribution(dtype, n, me), { op: 'sum', ...opt(dtype) });
      let d = firstDifference(dtype, sum, range(n).map((i) => ranks.reduce((a, r) => a + value(i, r), 0)));
      if (d !== -1) bad.push(`${where} allreduce sum: ${d}`);
      const max = await group.allreduce(contribution(dtype, n, me), { op: 'max', ...opt(dtype) });
      d = firstDifference(dtype, max, range(n).map((i) => Math.max(...ranks.map((r) => value(i, r)))));
      if (d !== -1) bad.push(`${where} allreduce max: ${d}`);
      const root = gs - 1;
      const b = await group.broadcast(contribution(dtype, n, me), { root, ...opt(dtype) });
      d = firstDifference(dtype, b, range(n).map((i) => value(i, ranks[root])));
      if (d !== -1) bad.push(`${where} broadcast from group rank ${root}: ${d}`);
      // Group rank g contributes n + g elements.
      const g = await group.allgather(contribution(dtype, n + gr, me), opt(dtype));
      d = firstDifference(dtype, g, ranks.flatMap((r, k) => range(n + k).map((i) => value(i, r))));
      if (d !== -1) bad.push(`${where} allgather: ${d}`);
      const rs = await group.reduceScatter(contribution(dtype, n, me), { op: 'sum', ...opt(dtype) });
      const base = Math.floor(n / gs), extra = n % gs, start = gr * base + Math.min(gr, extra);
      const len = base + (gr < extra ? 1 : 0);
      d = firstDifference(dtype, rs, range(len).map((i) => ranks.reduce((a, r) => a + value(start + i, r), 0)));
      if (d !== -1) bad.push(`${where} reduceScatter: ${d}`);
    }
  }
  const avg = await group.allreduce(Float64Array.from([gs * 2, 1]));
  if (avg[0] !== gs * 2 || avg[1] !== 1) bad.push(`${label} allreduce avg: ${Array.from(avg)}`);
  await group.barrier({ name: `${label} done` });
}

async function results(r, p) {
  const bad = [];
  const a = await hora.newGroup([0, 2]);
  const b = await hora.newGroup([1, 3]);
  const c = hora.newGroup([3, 1, 0]).wait();
  const seen = { a: a && a.ranks, b: b && b.ranks, c: c && c.ranks };
  if ((a !== null) !== (r === 0 || r === 2)) bad.push(`newGroup([0, 2]) on rank ${r}: ${a}`);
  if ((b !== null) !== (r === 1 || r === 3)) bad.push(`newGroup([1, 3]) on rank ${r}: ${b}`);
  if ((c !== null) !== (r !== 2)) bad.push(`newGroup([3, 1, 0]) on rank ${r}: ${c}`);
  // Disjoint groups at the same time (each rank is in one of them).
  const mine = a || b;
  await checkGroup(mine, mine.ranks, bad, a ? 'group [0, 2]' : 'group [1, 3]');
  // World and group collectives interleaved, issued together (one batch) and awaited together.
  for (let step = 0; step < 3; step++) {
    const w1 = hora.allreduce(Float32Array.from([r, step]), { op: 'sum' });
    const g1 = mine.allreduce(Float32Array.from([r, step]), { op: 'sum' });
    const c1 = c ? c.allgather(Int32Array.from([r, step])) : null;
    const w2 = hora.broadcast(Int32Array.from([r]), { root: 3 });
    const [x, y, z, v] = await Promise.all([w1, g1, c1, w2]);
    if (x[0] !== 6 || x[1] !== 4 * step) bad.push(`interleaved world allreduce ${step}: ${Array.from(x)}`);
    const gsum = mine.ranks.reduce((s, q) => s + q, 0);
    if (y[0] !== gsum || y[1] !== 2 * step) bad.push(`interleaved group allreduce ${step}: ${Array.from(y)}`);
    if (c && Array.from(z).join() !== [3, step, 1, step, 0, step].join()) bad.push(`interleaved group [3, 1, 0] allgather ${step}: ${Array.from(z)}`);
    if (v[0] !== 3) bad.push(`interleaved world broadcast ${step}: ${v[0]}`);
  }
  if (c) await checkGroup(c, [3, 1, 0], bad, 'group [3, 1, 0]');
  await hora.barrier();
  return { bad, seen };
}

async function messages(r) {
  const bad = [];
  const g = await hora.newGroup([3, 2, 1]);
  if (!g) return { bad, member: false };
  // Group rank k sends to group rank k + 1 (a ring), small and large messages.
  const next = (g.rank() + 1) % g.size(), prev = (g.rank() + g.size() - 1) % g.size();
  for (const n of [3, 100000]) {
    const sent = g.send(contribution('int32', n, r), { to: next, tag: 9 });
    const got = await g.recv({ from: prev, tag: 9, dtype: 'int32', count: n });
    await sent;
    const d = firstDifference('int32', got, range(n).map((i) => value(i, g.ranks[prev])));
    if (d !== -1) bad.push(`${n} elements from group rank ${prev}: ${d}`);
  }
  // World rank 3 (group rank 0) sends rank 2 (group rank 1) a world message, then a group message, both
  // with tag 4; rank 2 asks for the group's first: each receive gets its own, though the world's came first.
  if (r === 3) {
    await Promise.all([hora.send(Int32Array.of(1), { to: 2, tag: 4 }), g.send(Int32Array.of(2), { to: 1, tag: 4 })]);
  } else if (r === 2) {
    const fromGroup = await g.recv({ from: 0, tag: 4, dtype: 'int32', count: 1 });
    const fromWorld = await hora.recv({ from: 3, tag: 4, dtype: 'int32', count: 1 });
    if (fromGroup[0] !== 2 || fromWorld[0] !== 1) bad.push(`tag 4: the group's receive got ${fromGroup[0]}, the world's ${fromWorld[0]}`);
  }
  // A mismatch names the group's tag.
  if (r === 1) {
    await g.send(new Int32Array(3), { to: 0, tag: 5 }).catch(() => undefined);
  } else if (r === 3) {
    const m = await outcome(() => g.recv(new Int32Array(4), { from: 2, tag: 5 }));
    if (m.code !== 'ERR_MISMATCH' || !/rank 1 sent 3 x int32 with tag 5 of group 1, but this rank's receive is for 4 x int32/.test(m.message)) {
      bad.push(`a mismatched group message: ${JSON.stringify(m)}`);
    }
  }
  const self = await outcome(() => g.send(new Int32Array(1), { to: g.rank() }));
  const outside = await outcome(() => g.recv(new Int32Array(1), { from: 3 }));
  return { bad, member: true, self, outside };
}

async function pipeline(r) {
  const bad = [];
  // Every rank makes both groups, in the same order.
  const g02 = await hora.newGroup([0, 2]);
  const g13 = await hora.newGroup([1, 3]);
  const group = g02 || g13;
  const stage = r % 2, peer = stage === 0 ? r + 1 : r - 1;
  const n = 50000;
  for (let step = 0; step < 6; step++) {
    const grads = new Float32Array(n).fill(r + step);
    // Stage 0 sends activations forward and gets gradients back; stage 1 the reverse; meanwhile the
    // replicas of each stage average their gradients.
    const out = hora.send(new Float32Array(n).fill(100 * r + step), { to: peer, tag: step });
    const reduced = group.allreduce(grads, { name: `grads ${step}` });
    const incoming = hora.recv({ from: peer, tag: step, dtype: 'float32', count: n });
    const [avg, got] = await Promise.all([reduced, incoming, out]);
    const expectAvg = group.ranks.reduce((s, q) => s + q + step, 0) / 2;
    if (avg[0] !== expectAvg || avg[n - 1] !== expectAvg) bad.push(`step ${step}: average ${avg[0]}, not ${expectAvg}`);
    if (got[0] !== 100 * peer + step || got[n - 1] !== 100 * peer + step) bad.push(`step ${step}: message ${got[0]} from rank ${peer}`);
  }
  return { bad };
}

async function invalid(r) {
  const out = {};
  // The same bad list on every rank: every rank fails on its own.
  for (const [name, list] of [['empty', []], ['not an array', 5], ['out of range', [0, 4]], ['negative', [-1, 1]],
    ['fraction', [0, 1.5]], ['duplicate', [1, 1]], ['string', ['0', 1]]]) {
    out[name] = await outcome(() => hora.newGroup(list));
  }
  // A bad list on rank 1 only: the others' newGroup fails too, with ERR_INVALID_ARGUMENT naming rank 1.
  out.oneRank = await outcome(() => hora.newGroup(r === 1 ? [0, 0] : [0, 1]));
  const g = await hora.newGroup([1, 2]);
  if (g) {
    out.root = await outcome(() => g.broadcast(new Float32Array(2), { root: 2 }));
    out.op = await outcome(() => g.allreduce(new Float32Array(2), { op: 'mean' }));
    out.to = await outcome(() => g.send(new Float32Array(2), { to: 2 }));
    out.x = await outcome(() => g.allreduce([1, 2]));
    // After the failures the group works.
    const sum = await g.allreduce(Float32Array.from([r]), { op: 'sum' });
    out.after = sum[0];
  }
  out.world = (await hora.allreduce(Float32Array.from([1]), { op: 'sum' }))[0];
  return out;
}

async function lists(r) {
  const made = await outcome(() => hora.newGroup(r === 2 ? [0, 1, 2] : [0, 1]));
  const world = (await hora.allreduce(Float32Array.from([r]), { op: 'sum' }))[0];
  const again = await hora.newGroup([0, 1]);
  const sum = again ? (await again.allreduce(Float32Array.from([r]), { op: 'sum' }))[0] : null;
  return { made, world, sum };
}

async function inside(r) {
  const g = await hora.newGroup([0, 2]);
  const h = await hora.newGroup([1, 3]);
  const out = {};
  if (g) {
    out.mismatch = await outcome(() => g.allreduce(new Float32Array(r === 0 ? 4 : 5), { name: 'grads' }));
    out.after = (await g.allreduce(Float32Array.from([r]), { op: 'sum' }))[0];
  } else {
    out.other = (await h.allreduce(Float32Array.from([r]), { op: 'sum' }))[0];
  }
  out.world = (await hora.allreduce(Float32Array.from([r]), { op: 'sum' }))[0];
  return out;
}

async function kill(r) {
  const g = await hora.newGroup([0, 1, 2]);
  if (r === 3) return {};
  if (r === 2) {
    setTimeout(() => process.kill(process.pid, 'SIGKILL'), 500);
    await g.allreduce(new Float32Array(1000), { name: 'step 0' }); // the others' first; later ones are never answered
    await new Promise(() => {});
  }
  const t0 = performance.now();
  let got = null;
  for (let i = 0; i < 1000 && !got; i++) {
    try {
      await g.allreduce(new Float32Array(1000), { name: `step ${i}` });
      await new Promise((res) => setTimeout(res, 20));
    } catch (e) {
      got = describeError(e);
    }
  }
  return { got, ms: performance.now() - t0 };
}

async function timeout(r) {
  const g = await hora.newGroup([0, 1]);
  if (r === 0) {
    const t0 = performance.now();
    const got = await outcome(() => g.allreduce(new Float32Array(10), { name: 'late' }));
    return { got, ms: performance.now() - t0 };
  }
  // Rank 1 never calls it; it waits past rank 0's deadline before leaving.
  if (r === 1) await new Promise((res) => setTimeout(res, 4000));
  return {};
}

async function independent(r) {
  const low = await hora.newGroup([0, 1]);
  const high = await hora.newGroup([2, 3]);
  if (high) {
    await new Promise((res) => setTimeout(res, 3000));
    await high.allreduce(new Float32Array(100000));
    return {};
  }
  const t0 = performance.now();
  for (let i = 0; i < 5; i++) await low.allreduce(new Float32Array(100000));
  return { ms: performance.now() - t0 };
}

const SCENARIOS = { results, messages, pipeline, invalid, lists, inside, kill, timeout, independent };

runScenarios(hora, SCENARIOS, { noShutdown: ['kill'] });
