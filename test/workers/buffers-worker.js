'use strict';
// Buffer kinds and buffers that change under a pending collective. Usage: node buffers-worker.js <scenario>
//   sab        views of SharedArrayBuffers in every collective (inplace or not, awaited and wait()ed, fused),
//              in send/recv and in a process group's collectives, against a reference
//   refused    the binding throws instead of taking a call (a test hook replaces one of the communicator's
//              calls on rank 1): the works fail with a HoraError on every rank, nothing escapes a microtask
//   detach-before   rank 1 transfers its array's ArrayBuffer before the call
//   detach-between  ... after the call, in the same synchronous run (awaited, and with wait())
//   detach-during   ... while the work is pending, then runs the collector (HORA_TEST_BYTES: array size)
// Each scenario returns what every case did; test/buffers.test.js asserts on it. Needs --expose-gc for
// detach-during (NODE_OPTIONS). HORA_TEST_STAGE=1 tells the dispatcher the addon holds no ArrayBuffer memory,
// so pending arrays take the copying path (ts/lend.ts) that Nodes without V8's BackingStore call would take.
const hora = require('../../dist/ts/index.js');
const addon = require('../../dist/ts/loader.js').loadNative();
if (process.env.HORA_TEST_STAGE === '1') addon.holdsArrayBuffers = false;
const { runScenarios, outcome } = require('../support/worker-util');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A Float32Array over a new SharedArrayBuffer, element i = (rank + 1) * (i + 1). */
function sharedOf(n, rank) {
  const x = new Float32Array(new SharedArrayBuffer(4 * n));
  for (let i = 0; i < n; i++) x[i] = (rank + 1) * (i + 1);
  return x;
}

function plainOf(n, rank) {
  return Float32Array.from({ length: n }, (_, i) => (rank + 1) * (i + 1));
}

/** What each rank's array sums to over p ranks, element by element. */
const summed = (n, p) => Array.from({ length: n }, (_, i) => String(((p * (p + 1)) / 2) * (i + 1)));

/** The next collective is right on every rank: a sum of rank + 1. */
async function followUp(r, p) {
  const got = await outcome(() => hora.allreduce(Int32Array.of(r + 1), { op: 'sum' }));
  return { ok: got.ok && got.value[0] === String((p * (p + 1)) / 2), got };
}

function detach(x) {
  structuredClone(x.buffer, { transfer: [x.buffer] });
}

/** Transfers x's memory away and lets the collector free it (the new owner is garbage at once). */
function detachAndCollect(x) {
  const bytes = x.byteLength;
  detach(x);
  for (let i = 0; i < 4; i++) {
    global.gc();
    // Memory for the freed pages to be handed to, as a program that goes on would.
    new Uint8Array(bytes).fill(0xab);
  }
}

const scenarios = {
  async sab(r, p) {
    const n = 1000;
    const cases = [];
    const check = async (name, call, expected, after) => {
      const got = await outcome(call);
      const also = after ? after() : null;
      cases.push({ name, got, expected, also });
    };
    let x;
    x = sharedOf(n, r);
    await check('allreduce inplace, awaited', () => hora.allreduce(x, { op: 'sum', inplace: true }), summed(n, p),
      () => ({ same: Array.from(x, String).join() === summed(n, p).join() }));
    x = sharedOf(n, r);
    await check('allreduce inplace, wait()', () => { const v = hora.allreduce(x, { op: 'sum', inplace: true }).wait(); return { then: (f) => f(v) }; },
      summed(n, p));
    await check('allreduce, new array', () => hora.allreduce(sharedOf(n, r), { op: 'sum' }), summed(n, p));
    x = sharedOf(4, r);
    const y = sharedOf(8, r);
    const a = hora.allreduce(x, { op: 'sum', inplace: true, name: 'fused a' });
    const b = hora.allreduce(y, { op: 'sum', inplace: true, name: 'fused b' });
    await check('allreduce inplace, fused with another', () => a, summed(4, p));
    await check('allreduce inplace, fused, second', () => b, summed(8, p));
    const root = p - 1;
    x = sharedOf(n, r);
    await check('broadcast inplace', () => hora.broadcast(x, { root, inplace: true }), Array.from(plainOf(n, root), String),
      () => ({ same: Array.from(x, String).join() === Array.from(plainOf(n, root), String).join() }));
    await check('broadcast, new array', () => hora.broadcast(sharedOf(n, r), { root }), Array.from(plainOf(n, root), String));
    const gathered = [];
    for (let q = 0; q < p; q++) gathered.push(...Array.from(plainOf(3 + q, q), String));
    await check('allgather', () => hora.allgather(sharedOf(3 + r, r)), gathered);
    const m = 7 * p + 1;
    const block = Math.floor(m / p) + (r < m % p ? 1 : 0);
    const start = r * Math.floor(m / p) + Math.min(r, m % p);
    await check('reduceScatter', () => hora.reduceScatter(sharedOf(m, r), { op: 'sum' }), summed(m, p).slice(start, start + block));
    await check('barrier', () => hora.barrier(), null);
    // Messages around a ring: each rank sends its array to the next and receives the previous rank's.
    const to = (r + 1) % p, from = (r + p - 1) % p;
    const into = new Float32Array(new SharedArrayBuffer(4 * n));
    const sent = hora.send(sharedOf(n, r), { to, tag: 3 });
    await check('recv into a SharedArrayBuffer view', () => hora.recv(into, { from, tag: 3 }), Array.from(plainOf(n, from), String));
    await check('send from a SharedArrayBuffer view', () => sent, null);
    const into2 = new Float32Array(new SharedArrayBuffer(4 * n));
    hora.send(sharedOf(n, r), { to, tag: 4 });
    await check('recv into a SharedArrayBuffer view, wait()', () => { const v = hora.recv(into2, { from, tag: 4 }).wait(); return { then: (f) => f(v) }; },
      Array.from(plainOf(n, from), String));
    // The same in a process group of every rank.
    const group = await hora.newGroup(Array.from({ length: p }, (_, q) => q));
    x = sharedOf(n, r);
    await check('group allreduce inplace', () => group.allreduce(x, { op: 'sum', inplace: true }), summed(n, p));
    x = sharedOf(n, r);
    await check('group broadcast inplace', () => group.broadcast(x, { root, inplace: true }), Array.from(plainOf(n, root), String));
    await check('group allgather', () => group.allgather(sharedOf(3 + r, r)), gathered);
    await check('group reduceScatter', () => group.reduceScatter(sharedOf(m, r), { op: 'sum' }), summed(m, p).slice(start, start + block));
    const into3 = new Float32Array(new SharedArrayBuffer(4 * n));
    const sent3 = group.send(sharedOf(n, r), { to, tag: 5 });
    await check('group recv into a SharedArrayBuffer view', () => group.recv(into3, { from, tag: 5 }), Array.from(plainOf(n, from), String));
    await check('group send from a SharedArrayBuffer view', () => sent3, null);
    return { cases, after: await followUp(r, p) };
  },

  async refused(r, p) {
    // The engine's communicator (an internal of dist/ts/hora.js, the module index.js is made of).
    const comm = require('../../dist/ts/hora.js').nativeCommunicator();
    // Rank 1's next call of `method` throws what the binding throws for an array it refuses.
    const refuseOnce = (method) => {
      if (r !== 1) return;
      const own = Object.getOwnPropertyDescriptor(comm, method);
      Object.defineProperty(comm, method, {
        configurable: true, writable: true,
        value: () => {
          if (own) Object.defineProperty(comm, method, own);
          else delete comm[method];
          throw new TypeError('native: expected a TypedArray');
        },
      });
    };
    const cases = [];
    const f32 = (n) => new Float32Array(n).fill(r + 1);
    refuseOnce('collective');
    cases.push({ name: 'awaited allreduce (collective)', got: await outcome(() => hora.allreduce(f32(4), { op: 'sum' })) });
    cases.push({ name: 'after it', got: await outcome(() => hora.allreduce(f32(4), { op: 'sum' })) });
    refuseOnce('submit');
    const w1 = hora.allreduce(f32(4), { op: 'sum', name: 'batch a' });
    const w2 = hora.allreduce(f32(8), { op: 'sum', name: 'batch b' });
    cases.push({ name: 'a batch of two (submit), first', got: await outcome(() => w1) });
    cases.push({ name: 'a batch of two (submit), second', got: await outcome(() => w2) });
    cases.push({ name: 'after it', got: await outcome(() => hora.allreduce(f32(4), { op: 'sum' })) });
    refuseOnce('collective');
    cases.push({ name: 'wait()ed allreduce (collective, waited now)', got: await outcome(() => { const v = hora.allreduce(f32(4), { op: 'sum' }).wait(); return { then: (f) => f(v) }; }) });
    cases.push({ name: 'after it', got: await outcome(() => hora.allreduce(f32(4), { op: 'sum' })) });
    // Messages hold no place in the order: only rank 1 calls them, and only rank 1 fails.
    if (r === 1) {
      refuseOnce('message');
      cases.push({ name: 'awaited send (message)', got: await outcome(() => hora.send(f32(4), { to: 0 })) });
      refuseOnce('message');
      cases.push({ name: 'wait()ed recv (message, waited now)', got: await outcome(() => { const v = hora.recv(f32(4), { from: 0 }).wait(); return { then: (f) => f(v) }; }) });
    }
    return { cases, after: await followUp(r, p) };
  },

  async 'detach-before'(r, p) {
    const n = 1024;
    const cases = [];
    const victim = (x) => { if (r === 1) detach(x); return x; };
    cases.push({ name: 'allreduce inplace', got: await outcome(() => hora.allreduce(victim(plainOf(n, r)), { op: 'sum', inplace: true })) });
    cases.push({ name: 'broadcast inplace', got: await outcome(() => hora.broadcast(victim(plainOf(n, r)), { root: 0, inplace: true })) });
    if (r === 1) cases.push({ name: 'recv', got: await outcome(() => hora.recv(victim(plainOf(n, r)), { from: 0 })) });
    return { cases, after: await followUp(r, p) };
  },

  async 'detach-between'(r, p) {
    const n = 1024;
    const cases = [];
    // Rank 1 detaches its array after the call, before the end of the synchronous run that submits it.
    const between = (call, x, wait) => () => {
      const work = call(x);
      if (r === 1) detach(x);
      if (!wait) return work;
      const v = work.wait();
      return { then: (f) => f(v) };
    };
    for (const wait of [false, true]) {
      const how = wait ? 'wait()' : 'awaited';
      cases.push({ name: `allreduce inplace, ${how}`, got: await outcome(between((x) => hora.allreduce(x, { op: 'sum', inplace: true }), plainOf(n, r), wait)) });
      cases.push({ name: `broadcast inplace, ${how}`, got: await outcome(between((x) => hora.broadcast(x, { root: 0, inplace: true }), plainOf(n, r), wait)) });
      // The failed recv takes nothing: rank 0's message goes to the recv after it.
      if (r === 0) {
        cases.push({ name: `send to a recv that failed, ${how}`, got: await outcome(() => hora.send(plainOf(n, 0), { to: 1 })) });
      } else {
        cases.push({ name: `recv, ${how}`, got: await outcome(between((x) => hora.recv(x, { from: 0 }), plainOf(n, r), wait)) });
        cases.push({ name: `the next recv, ${how}`, got: await outcome(() => hora.recv(new Float32Array(n), { from: 0 })) });
      }
    }
    return { cases, after: await followUp(r, p), reference: Array.from(plainOf(n, 0), String) };
  },

  async 'detach-during'(r, p) {
    const n = Number(process.env.HORA_TEST_BYTES) / 4;
    const cases = [];
    // Rank 0 calls late, so rank 1's work is pending when rank 1 takes its array away.
    const during = async (name, call) => {
      const x = plainOf(n, r);
      if (r === 0) await sleep(300);
      const work = call(x);
      if (r === 1) {
        await new Promise((resolve) => setImmediate(resolve));
        detachAndCollect(x);
      }
      const got = await outcome(() => work);
      // The values themselves are long: keep the first and last.
      if (got.ok && got.value) got.value = [got.value[0], got.value[got.value.length - 1], got.value.length];
      cases.push({ name, got });
      await hora.barrier();
    };
    await during('allreduce inplace', (x) => hora.allreduce(x, { op: 'sum', inplace: true }));
    await during('broadcast inplace', (x) => hora.broadcast(x, { root: 0, inplace: true }));
    await during(r === 0 ? 'send' : 'recv', (x) => (r === 0 ? hora.send(x, { to: 1 }) : hora.recv(x, { from: 0 })));
    return { cases, n, after: await followUp(r, p) };
  },
};

runScenarios(hora, scenarios);
