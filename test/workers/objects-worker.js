'use strict';
// Runs inside every rank of a `hora run` job for test/objects.test.js: hora.broadcastObject and
// hora.allgatherObject, one scenario (argv[2]) per run.
//
//   values       nested structures (Map, Set, Date, typed arrays, bigint, nested objects and arrays) from every
//                root and gathered from every rank, awaited and wait()ed, in the world and in a group of the
//                last and first ranks; each result compared with the value every rank can build (expected())
//   uncloneable  the last rank's value is a function (allgatherObject) or, as root, a symbol (broadcastObject)
//   maxBytes     rank 1's value serializes past maxBytes
//   unknown      rank 0 passes an option that does not exist ({rot: 1}); rank 1 a root out of range, a maxBytes of -1
//   roots        each rank names itself the root
//   plain        rank 0 calls allgatherObject where the others call a plain allgather of a Uint8Array
//   one          a world of one: the results are copies
//   kill         the last rank SIGKILLs itself; the others' next allgatherObject
//   elastic      under `hora run -np 3 --min-np 2`: a call outside hora.elastic.run is refused; inside, three
//                steps of allgatherObject and broadcastObject, worker 2 SIGKILLing itself after the first
//                commit, so the last steps run in the re-formed world of two (a refilled worker leaves at once)
// After each failing call every rank runs one more allgatherObject, which must succeed: nothing was lost.
const util = require('node:util');
const hora = require('../../dist/ts/index.js');
const { describeError, outcome, runScenarios, lastRankDies } = require('../support/worker-util');

/** The value rank r contributes: the same on every rank for a given r. */
function valueOf(r) {
  return {
    rank: r,
    label: `rank ${r}`,
    map: new Map([['a', [r, { deep: new Set([r, 'x']) }]], [r, new Date(1700000000000 + r)]]),
    floats: new Float32Array([r, 0.5, -1.25]),
    ints: new Int32Array([r, -r, 7]),
    big: 2n ** 70n + BigInt(r),
    nested: { list: [[r], [r, [r, null, undefined, true]]], when: new Date(Date.UTC(2026, 10, r + 1)) },
  };
}

/** The outcome of a call as data: its result's deep equality with `expected`, or its error. */
async function compare(call, expected) {
  try {
    const got = await call();
    return { ok: true, equal: util.isDeepStrictEqual(got, expected) };
  } catch (e) {
    return describeError(e);
  }
}

/** One allgatherObject after a failure: the ranks are still in step. */
async function after(p) {
  return compare(() => hora.allgatherObject(`after ${hora.rank()}`), Array.from({ length: p }, (_, q) => `after ${q}`));
}

async function values(r, p) {
  const checks = {};
  const all = Array.from({ length: p }, (_, q) => valueOf(q));
  for (let root = 0; root < p; root++) {
    checks[`broadcastObject root ${root}`] = await compare(() => hora.broadcastObject(r === root ? valueOf(r) : undefined, { root }), valueOf(root));
    checks[`broadcastObject root ${root} wait()`] = await compare(() => hora.broadcastObject(r === root ? valueOf(r) : 'ignored', { root }).wait(), valueOf(root));
  }
  checks.allgatherObject = await compare(() => hora.allgatherObject(valueOf(r)), all);
  checks['allgatherObject wait()'] = await compare(() => hora.allgatherObject(valueOf(r)).wait(), all);
  // Two calls in one synchronous run (one batch), with a tensor collective between them.
  checks['one batch'] = await compare(async () => {
    const a = hora.allgatherObject(r);
    const s = hora.allreduce(new Float32Array([1]), { op: 'sum' });
    const b = hora.broadcastObject(r === p - 1 ? 'last' : null, { root: p - 1 });
    return [await a, Array.from(await s), await b];
  }, [Array.from({ length: p }, (_, q) => q), [p], 'last']);
  // Large values: many shared-memory slots and TCP reads, past the fusion buffer.
  const big = (q) => ({ q, data: Float64Array.from({ length: 40000 + 1000 * q }, (_, i) => i * (q + 1)) });
  checks['allgatherObject of 320 KB values'] = await compare(() => hora.allgatherObject(big(r)), Array.from({ length: p }, (_, q) => big(q)));
  checks['broadcastObject of a 3 MB value'] = await compare(() => hora.broadcastObject(r === p - 1 ? { m: new Map([['x', new Uint8Array(3e6).fill(7)]]) } : null, { root: p - 1 }),
    { m: new Map([['x', new Uint8Array(3e6).fill(7)]]) });
  checks['a copy on the root'] = await compare(async () => {
    const v = { a: [1] };
    const got = await hora.broadcastObject(v);
    return r === 0 ? got !== v && got.a !== v.a : true;
  }, true);
  const g = await hora.newGroup([p - 1, 0]);
  if (g) {
    const gr = g.rank();
    checks['group.broadcastObject'] = await compare(() => g.broadcastObject(gr === 1 ? valueOf(r) : undefined, { root: 1 }), valueOf(0));
    checks['group.allgatherObject'] = await compare(() => g.allgatherObject(valueOf(r)), [valueOf(p - 1), valueOf(0)]);
  }
  return { checks };
}

async function uncloneable(r, p) {
  const last = r === p - 1;
  const gather = await outcome(() => hora.allgatherObject(last ? { fine: 1, bad: () => 1 } : { fine: 1 }));
  const bcast = await outcome(() => hora.broadcastObject(last ? Symbol('s') : 1, { root: p - 1 }));
  return { gather, bcast, after: await after(p) };
}

async function maxBytes(r, p) {
  const got = await outcome(() => hora.allgatherObject(r === 1 ? 'x'.repeat(5000) : 'small', { maxBytes: 1000 }));
  const bcast = await outcome(() => hora.broadcastObject(r === 1 ? new Float64Array(200) : null, { root: 1, maxBytes: 1000 }));
  return { got, bcast, after: await after(p) };
}

async function unknown(r, p) {
  const got = await outcome(() => hora.broadcastObject(1, r === 0 ? { rot: 1 } : {}));
  const root = await outcome(() => hora.broadcastObject(1, { root: r === 1 ? 7 : 0 }));
  const bound = await outcome(() => hora.allgatherObject(1, { maxBytes: r === 1 ? -1 : 100 }));
  return { got, root, bound, after: await after(p) };
}

async function roots(r, p) {
  const got = await outcome(() => hora.broadcastObject(r, { root: r }));
  return { got, after: await after(p) };
}

async function plain(r, p) {
  const got = await outcome(() => (r === 0 ? hora.allgatherObject({ r }) : hora.allgather(new Uint8Array([1, 2, 3, r]))));
  return { got, after: await after(p) };
}

async function one() {
  const v = valueOf(0);
  const b = await hora.broadcastObject(v);
  const a = hora.allgatherObject(v).wait();
  const bad = await outcome(() => hora.allgatherObject(() => 1));
  return { broadcastEqual: util.isDeepStrictEqual(b, v), broadcastCopy: b !== v, allgatherEqual: util.isDeepStrictEqual(a, [v]), allgatherCopy: a[0] !== v, bad };
}

async function kill(r, p) {
  await lastRankDies(hora, r, p);
  const t0 = performance.now();
  const got = await outcome(() => hora.allgatherObject({ r }));
  return { got, ms: performance.now() - t0 };
}

async function elastic() {
  const worker = Number(process.env.HORA_WORKER_ID);
  const outside = await outcome(() => hora.allgatherObject(1));
  const state = new hora.elastic.State({ step: 0 });
  const seen = [];
  await hora.elastic.run(state, async (s) => {
    while (s.step < 3) {
      const all = await hora.allgatherObject({ worker, step: s.step });
      const last = hora.size() - 1;
      const b = await hora.broadcastObject(hora.rank() === last ? { worker, at: new Map([[s.step, new Date(s.step)]]) } : undefined, { root: last });
      seen.push({ size: hora.size(), step: s.step, workers: all.map((x) => x.worker), steps: all.map((x) => x.step), root: b.worker, date: b.at.get(s.step).getTime() });
      s.step++;
      await s.commit();
      if (s.step === 1 && worker === 2) process.kill(process.pid, 'SIGKILL');
    }
  });
  return { outside, seen };
}

// A worker started in a refilled slot of the elastic scenario leaves at once: the world stays at two.
if (process.argv[2] === 'elastic' && Number(process.env.HORA_WORKER_ID) >= 3) process.exit(0);
runScenarios(hora, { values, uncloneable, maxBytes, unknown, roots, plain, one, kill, elastic }, { noShutdown: ['kill'] });
