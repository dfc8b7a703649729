'use strict';
// Error behaviour, observed from inside each rank. Usage: node errors-worker.js <scenario>
//   invalid   one rank (or every rank) passes bad input; later collectives must still work
//   invalid-same-tick  the same, with the next collective issued in the same synchronous run
//   mismatch  ranks disagree on count, dtype, op, root or collective; later collectives must still work
//   kill      rank $KILL_RANK SIGKILLs itself during a loop of 64 MiB allreduces; the others must see
//             ERR_PEER_LOST quickly
//   stop      rank $KILL_RANK SIGSTOPs itself during the same loop; with a short HORA_TIMEOUT_S the others
//             must see ERR_TIMEOUT, then exit 1 as a training script whose step threw would
//   spin      rank $KILL_RANK loops forever on its JS thread between collectives; the same for the others
//   call-sites  ranks disagree on an awaited collective, inside and past HORA_CALL_SITES's budget
//   solo      no launcher: collectives before init, then a world of one, then after shutdown
// Each rank records what it saw and writes one JSON line to $HORA_TEST_RESULT_DIR/rank-<rank>.json (the test
// asserts on it), and exits 0 whatever it saw.
const hora = require('../../dist/ts/index.js');
const { report, outcome, describeError } = require('../support/worker-util');

/** A collective every rank can run afterwards: sum of rank+1 over ranks, in two dtypes. */
async function followUp() {
  const r = hora.rank();
  const a = await outcome(() => hora.allreduce(new Int32Array([r + 1, 1]), { op: 'sum' }));
  const b = await outcome(() => hora.allreduce(new Float64Array(100000).fill(r + 1), { op: 'max' }));
  return { sum: a.ok ? a.value : a, max: b.ok ? b.value[b.value.length - 1] : b };
}

function detachedFloat32Array() {
  const buf = new ArrayBuffer(16);
  const x = new Float32Array(buf);
  structuredClone(buf, { transfer: [buf] });
  return x;
}

// [name, argument the bad rank's error must name, bad call, the valid call the other ranks make]
function invalidCases(p) {
  const f32 = (n) => new Float32Array(n).fill(1);
  return [
    ['plain Array', 'x', () => hora.allreduce([1, 2, 3], { op: 'sum' }), () => hora.allreduce(f32(3), { op: 'sum' })],
    ['string', 'x', () => hora.allreduce('abc'), () => hora.allreduce(f32(3))],
    ['detached buffer', 'x', () => hora.allreduce(detachedFloat32Array()), () => hora.allreduce(f32(4))],
    ['unknown op', 'options.op', () => hora.allreduce(f32(4), { op: 'median' }), () => hora.allreduce(f32(4), { op: 'sum' })],
    ['root out of range', 'options.root', () => hora.broadcast(f32(4), { root: p }), () => hora.broadcast(f32(4), { root: 0 })],
    ['negative root', 'options.root', () => hora.broadcast(f32(4), { root: -1 }), () => hora.broadcast(f32(4), { root: 0 })],
    ['Uint16Array without dtype', 'options.dtype', () => hora.allreduce(new Uint16Array(4)), () => hora.allreduce(new Uint16Array(4), { dtype: 'float16' })],
    ['Uint16Array without dtype, the others uint16', 'options.dtype', () => hora.reduceScatter(new Uint16Array(4)),
      () => hora.reduceScatter(new Uint16Array(4), { dtype: 'uint16' })],
    ['Int8Array with dtype uint8', 'options.dtype', () => hora.allreduce(new Int8Array(4), { dtype: 'uint8' }), () => hora.allreduce(new Int8Array(4))],
    ['prescaleFactor of an Int16Array', 'options.prescaleFactor', () => hora.allreduce(new Int16Array(4), { op: 'sum', prescaleFactor: 2 }),
      () => hora.allreduce(new Int16Array(4), { op: 'sum' })],
    ['options not an object', 'options', () => hora.allreduce(f32(4), 5), () => hora.allreduce(f32(4))],
    ['allgather of a string', 'x', () => hora.allgather('abc'), () => hora.allgather(f32(2))],
    ['reduceScatter unknown op', 'options.op', () => hora.reduceScatter(f32(6), { op: 'mean' }), () => hora.reduceScatter(f32(6))],
    ['large valid call elsewhere', 'x', () => hora.allreduce({ length: 300001 }), () => hora.allreduce(f32(300001))],
    // Options hora does not know are refused, not ignored: Horovod's average=False would otherwise average.
    ['unknown option average', 'options.average', () => hora.allreduce(f32(4), { average: false }), () => hora.allreduce(f32(4), { op: 'sum' })],
    ['prescaleFactor of an Int32Array', 'options.prescaleFactor', () => hora.allreduce(new Int32Array(4), { op: 'sum', prescaleFactor: 0.5 }),
      () => hora.allreduce(new Int32Array(4), { op: 'sum' })],
  ];
}

async function invalidScenario() {
  const r = hora.rank();
  const p = hora.size();
  const results = [];
  const cases = invalidCases(p);
  for (let k = 0; k < cases.length; k++) {
    const [name, argument, bad, good] = cases[k];
    for (const who of ['one', 'all']) {
      if (who === 'all' && k % 3 !== 0) continue; // a few cases where every rank is wrong
      const badRank = who === 'all' ? -1 : k % p;
      const isBad = who === 'all' || badRank === r;
      const got = await outcome(isBad ? bad : good);
      results.push({ name: `${name} (${who === 'all' ? 'every rank' : `rank ${badRank}`})`, badRank, isBad, argument, got, after: await followUp() });
    }
  }
  return { results };
}

// The bad call and the next collective in one synchronous run, as gradient hooks issue them: the other
// ranks' valid call must not be fused with the next one, or the ranks fall out of step for good.
async function invalidSameTickScenario() {
  const r = hora.rank();
  const p = hora.size();
  const badRank = p - 1;
  const first = r === badRank ? hora.allreduce('bad', { op: 'sum' }) : hora.allreduce(new Float32Array(8).fill(1), { op: 'sum' });
  const second = hora.allreduce(new Float32Array(8).fill(r + 1), { op: 'sum' });
  const got = await outcome(() => first);
  const next = await outcome(() => second);
  return { results: [{ name: 'bad call then a valid one in the same tick', badRank, isBad: r === badRank, argument: 'x', got, next, after: await followUp() }] };
}

const LONG_NAME = 'pipeline.batch 12: 32 samples in 4 micro-batches, shapes [8, ';

async function mismatchScenario() {
  const r = hora.rank();
  const p = hora.size();
  const last = p - 1;
  const f32 = (n) => new Float32Array(n).fill(1);
  const cases = [
    ['count differs on the last rank', () => hora.allreduce(f32(r === last ? 11 : 10), { op: 'sum' })],
    ['count differs on every rank', () => hora.allreduce(f32(10 + r), { op: 'sum' })],
    ['large count differs by one', () => hora.allreduce(f32(r === 0 ? 300002 : 300001), { op: 'sum' })],
    ['reduceScatter count differs', () => hora.reduceScatter(f32(r === last ? 8 : 9))],
    ['broadcast count differs', () => hora.broadcast(f32(r === 0 ? 5 : 6))],
    ['dtype differs', () => hora.allreduce(r === last ? new Int32Array(4) : new Float32Array(4), { op: 'sum' })],
    // The same bytes under two names: the agreement compares dtypes, not arrays.
    ['uint16 on the last rank, float16 elsewhere', () => hora.allreduce(new Uint16Array(4), { op: 'sum', dtype: r === last ? 'uint16' : 'float16' })],
    ['int8 on the last rank, uint8 elsewhere', () => hora.allreduce(r === last ? new Int8Array(4) : new Uint8Array(4), { op: 'sum' })],
    ['op differs', () => hora.allreduce(f32(4), { op: r === last ? 'max' : 'sum' })],
    ['root differs', () => hora.broadcast(f32(4), { root: r === last ? 0 : last })],
    ['allgather on rank 0, allreduce elsewhere', () => (r === 0 ? hora.allgather(f32(4)) : hora.allreduce(f32(4)))],
    ['allreduce on rank 0, allgather elsewhere', () => (r === 0 ? hora.allreduce(f32(4)) : hora.allgather(f32(4)))],
    ['barrier on the last rank, allreduce elsewhere', () => (r === last ? hora.barrier() : hora.allreduce(f32(4)))],
    ['prescaleFactor on the last rank only', () => hora.allreduce(f32(4), { op: 'sum', ...(r === last ? { prescaleFactor: 0.5 } : {}) })],
    ['postscaleFactor differs, 300001 elements', () => hora.reduceScatter(f32(300001), { postscaleFactor: r === last ? 2 : 3 })],
  ];
  // In place: the array of a collective that failed holds what it held before (small allreduces are
  // reduced straight into it when ranks agree).
  const kept = [f32(4), f32(r === last ? 5 : 4), f32(16384)];
  cases.push(
    ['op differs, in place', () => hora.allreduce(kept[0], { op: r === last ? 'max' : 'sum', inplace: true }), kept[0]],
    ['count differs, in place', () => hora.allreduce(kept[1], { op: 'sum', inplace: true }), kept[1]],
    ['name differs, in place, 64 KiB', () => hora.allreduce(kept[2], { op: 'sum', inplace: true, name: r === last ? 'b' : 'a' }), kept[2]],
  );
  // Names that differ only past the 31 bytes a proposal holds: the error shows both whole.
  cases.push(['long names differ at the end', () => hora.barrier({ name: `${LONG_NAME}${r === last ? 9 : 8}]` })]);
  const results = [];
  for (const [name, call, array] of cases) {
    const got = await outcome(call);
    results.push({ name, got, untouched: array ? array.every((v) => v === 1) : undefined, after: await followUp() });
  }
  return { results };
}

async function killScenario() {
  const r = hora.rank();
  const victim = Number(process.env.KILL_RANK || 1);
  const x = new Float32Array(16 * 1024 * 1024).fill(1); // 64 MiB
  const started = Date.now();
  for (let i = 0; i < 1000; i++) {
    const work = hora.allreduce(x, { op: 'max', inplace: true });
    if (r === victim && i === 2) {
      // Die while this allreduce is in flight on every rank.
      setTimeout(() => {
        report(r, { killedAt: Date.now(), iteration: i });
        process.kill(process.pid, 'SIGKILL');
      }, 30);
    }
    try {
      await work;
    } catch (e) {
      const rejectedAt = Date.now();
      const t0 = Date.now();
      const after = await outcome(() => hora.allreduce(new Float32Array(4)));
      return { rejectedAt, iteration: i, error: describeError(e), after, afterMs: Date.now() - t0, startedAt: started };
    }
  }
  return { rejectedAt: null, iteration: 1000 };
}

// The victim hangs (SIGSTOP, or an endless loop on its JS thread) while its peers wait in a collective.
async function hangScenario(how) {
  const r = hora.rank();
  const victim = Number(process.env.KILL_RANK || 1);
  const x = new Float32Array(4 * 1024 * 1024).fill(1); // 16 MiB
  for (let i = 0; i < 1000; i++) {
    if (r === victim && i === 2) {
      report(r, { hungAt: Date.now(), iteration: i, how, jobId: process.env.HORA_JOB_ID });
      if (how === 'stop') process.kill(process.pid, 'SIGSTOP');
      for (;;); // eslint-disable-line no-empty
    }
    const work = hora.allreduce(x, { op: 'max', inplace: true });
    try {
      await work;
    } catch (e) {
      process.exitCode = 1;
      return { rejectedAt: Date.now(), iteration: i, error: describeError(e) };
    }
  }
  return { rejectedAt: null, iteration: 1000 };
}

async function soloScenario() {
  const f32 = new Float32Array([1.5, -2, 3]);
  const before = {};
  const calls = {
    allreduce: () => hora.allreduce(f32),
    broadcast: () => hora.broadcast(f32),
    allgather: () => hora.allgather(f32),
    reduceScatter: () => hora.reduceScatter(f32),
    barrier: () => hora.barrier(),
    rank: () => hora.rank(),
    size: () => hora.size(),
  };
  for (const [name, call] of Object.entries(calls)) before[name] = await outcome(call);
  before.isInitialized = hora.isInitialized();

  await hora.init();
  const world = { rank: hora.rank(), size: hora.size(), localRank: hora.localRank(), localSize: hora.localSize(), crossRank: hora.crossRank(), crossSize: hora.crossSize() };
  const arrays = {
    float32: new Float32Array([1.5, -2.25, 3e30, -0]),
    float64: new Float64Array([Math.PI, -1e300, 5e-324]),
    int32: new Int32Array([7, -7, 2 ** 31 - 1, -(2 ** 31)]),
    int64: new BigInt64Array([2n ** 62n, -5n, 3n]),
    uint8: new Uint8Array([0, 255, 7]),
    float16: new Uint16Array([0x3c00, 0xc000, 0x7bff]),
    bfloat16: new Uint16Array([0x3f80, 0xc040, 0x7f7f]),
    int8: new Int8Array([127, -128, 5]),
    int16: new Int16Array([32767, -32768, -3]),
    uint16: new Uint16Array([65535, 0, 1234]),
  };
  const same = (a, b) => a.constructor === b.constructor && Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
  const single = [];
  for (const [dtype, x] of Object.entries(arrays)) {
    const options = dtype === 'float16' || dtype === 'bfloat16' || dtype === 'uint16' ? { dtype } : {};
    const keep = x.slice();
    const record = (what, y, inplace) => single.push({ what: `${what} ${dtype}`, equal: same(y, keep), copy: inplace ? y === x : y !== x });
    for (const op of ['sum', 'avg', 'min', 'max', 'prod']) {
      record(`allreduce op=${op}`, await hora.allreduce(x, { ...options, op }), false);
      record(`reduceScatter op=${op}`, await hora.reduceScatter(x, { ...options, op }), false);
    }
    record('allreduce default op (wait)', hora.allreduce(x, options).wait(), false);
    record('broadcast', await hora.broadcast(x, options), false);
    record('allgather', await hora.allgather(x, options), false);
    const y = x.slice();
    const z = await hora.allreduce(y, { ...options, op: 'sum', inplace: true });
    single.push({ what: `allreduce inplace ${dtype}`, equal: same(z, keep), copy: z === y });
    single.push({ what: `input untouched ${dtype}`, equal: same(x, keep), copy: true });
  }
  const barrier = await outcome(() => hora.barrier());
  const invalid = await outcome(() => hora.allreduce([1, 2]));
  const invalidStack = await hora.allreduce([1, 2]).then(() => '', (e) => String(e.stack)); // SOLO_CALL_LINE
  await hora.shutdown();
  const after = await outcome(() => hora.allreduce(f32));
  return { before, world, single, barrier, invalid, invalidStack, after };
}

// Where an awaited collective's error points. Ranks disagree on the count (ERR_MISMATCH): first with the
// call-site budget full, then as the last of 400 calls made in one synchronous run, past the budget of
// HORA_CALL_SITES=sampled (256 at once, then 4 a millisecond). The clock stands still during the run, as
// if the 400 calls took no time: on a slow or busy machine they can take long enough for the budget to
// refill, and the test would then measure the machine rather than the budget.
async function callSitesScenario() {
  const r = hora.rank();
  const stackOf = async (work) => {
    try {
      await work;
      return null;
    } catch (e) {
      return { code: e.code, stack: e.stack };
    }
  };
  const first = await stackOf(hora.allreduce(new Float32Array(2 + r), { name: 'first mismatch' }));
  const works = [];
  const stopped = performance.now();
  performance.now = () => stopped;
  try {
    for (let i = 0; i < 399; i++) works.push(hora.allreduce(new Float32Array(1), { op: 'sum' }));
    works.push(hora.allreduce(new Float32Array(2 + r), { name: 'late mismatch' }));
  } finally {
    delete performance.now;  // the prototype's clock again
  }
  const late = await stackOf(works[399]);
  const others = await Promise.allSettled(works.slice(0, 399).map((w) => Promise.resolve(w)));
  return { first, late, othersOk: others.every((o) => o.status === 'fulfilled') };
}

// exit-after-throw: every rank makes a bad call, whose wait() throws at once, and exits with status 1 as a
// script whose step threw: nothing of the program's is outstanding. exit-outstanding: rank 0 leaves an
// allreduce behind and exits at once; the others wait for the launcher to stop them.
function exitAfterThrowScenario() {
  try {
    hora.allreduce(new Float32Array(4), { op: 'median' }).wait();
  } catch (e) {
    process.stderr.write(`rank ${hora.rank()} caught ${e.code}\n`);
  }
  process.exit(1);
}

async function exitOutstandingScenario() {
  if (hora.rank() === 0) {
    hora.allreduce(new Float32Array(4));
    process.exit(1);
  }
  await new Promise((resolve) => setTimeout(resolve, 60000));
}

const SCENARIOS = { 'exit-after-throw': exitAfterThrowScenario, 'exit-outstanding': exitOutstandingScenario, 'call-sites': callSitesScenario, invalid: invalidScenario, 'invalid-same-tick': invalidSameTickScenario, mismatch: mismatchScenario, kill: killScenario, stop: () => hangScenario('stop'), spin: () => hangScenario('spin'), solo: soloScenario };

async function main() {
  const scenario = SCENARIOS[process.argv[2]];
  if (!scenario) throw new Error(`unknown scenario ${process.argv[2]}`);
  if (process.argv[2] === 'solo') {
    report(0, await scenario());
    return;
  }
  await hora.init();
  const rank = hora.rank();
  report(rank, { size: hora.size(), ...(await scenario()) });
  await hora.shutdown();
}

main().catch((e) => {
  process.stderr.write(`errors-worker: ${e && e.stack ? e.stack : String(e)}\n`);
  process.exit(1);
});
