'use strict';
// Buffer kinds and buffers that change under a pending collective (test/workers/buffers-worker.js records
// what each rank saw; this file asserts): SharedArrayBuffer views everywhere, a binding that throws
// instead of taking a call, and an ArrayBuffer detached before the call, between the call and its
// submission, and while its work is pending (docs/failures.md, "Arrays that change while a collective is
// pending").
const t = require('tap');
const path = require('node:path');
const { runScenario } = require('./support/hora-job');
const hora = require('../dist/ts/index.js');

const WORKER = path.join(__dirname, 'workers', 'buffers-worker.js');
const TRANSPORTS = [['shm', {}], ['tcp', { HORA_TRANSPORT: 'tcp' }]];

function assertFollowUp(t, results) {
  for (const [rank, res] of results.entries()) t.ok(res && res.after.ok, `rank ${rank}: the next collective is right`, { after: res && res.after });
}

for (const [transport, env] of TRANSPORTS) {
  t.test(`p=2 ${transport}: SharedArrayBuffer views work in every collective and message`, async (t) => {
    const { results } = await runScenario(t, 2, WORKER, 'sab', env);
    for (const [rank, res] of results.entries()) {
      if (!res) continue;
      for (const c of res.cases) {
        t.ok(c.got.ok, `rank ${rank}, ${c.name}: succeeds`, { got: c.got });
        if (c.expected) t.same(c.got.value, c.expected, `rank ${rank}, ${c.name}: the reference result`);
        if (c.also) t.ok(c.also.same, `rank ${rank}, ${c.name}: the array itself holds the result`);
      }
    }
    assertFollowUp(t, results);
  });

  t.test(`p=2 ${transport}: a call the binding refuses fails on every rank, from no microtask`, async (t) => {
    // runScenario asserts the job exits 0: an exception thrown from the dispatcher's microtask ends the rank with 1.
    const { results } = await runScenario(t, 2, WORKER, 'refused', env);
    for (const [rank, res] of results.entries()) {
      if (!res) continue;
      for (const c of res.cases) {
        const where = `rank ${rank}, ${c.name}`;
        if (c.name === 'after it') {
          t.ok(c.got.ok, `${where}: succeeds`, { got: c.got });
          continue;
        }
        t.notOk(c.got.ok, `${where}: fails`, { got: c.got });
        if (!/wait\(\)/.test(c.name)) t.notOk(c.got.sync, `${where}: through its Work`, { got: c.got });
        t.ok(c.got.isHoraError, `${where}: with a HoraError`, { got: c.got });
        t.equal(c.got.code, 'ERR_INVALID_ARGUMENT', `${where}: ERR_INVALID_ARGUMENT`);
        if (rank === 1) t.match(c.got.message, /the native binding refused the call: native: expected a TypedArray/, `${where}: says what the binding said`);
        else t.match(c.got.message, /rank 1 made an invalid call: .*native binding refused/, `${where}: names rank 1 and why`);
      }
    }
    assertFollowUp(t, results);
  });

  t.test(`p=2 ${transport}: an array detached before the call fails on every rank`, async (t) => {
    const { results } = await runScenario(t, 2, WORKER, 'detach-before', env);
    for (const [rank, res] of results.entries()) {
      if (!res) continue;
      for (const c of res.cases) {
        const where = `rank ${rank}, ${c.name}`;
        t.equal(c.got.code, 'ERR_INVALID_ARGUMENT', `${where}: ERR_INVALID_ARGUMENT`, { got: c.got });
        t.match(c.got.message, rank === 1 ? /argument '(x|into)' must be an array whose buffer is not detached/ : /rank 1 made an invalid call/, where);
      }
    }
    assertFollowUp(t, results);
  });

  t.test(`p=2 ${transport}: an array detached between the call and its submission fails on every rank`, async (t) => {
    const { results } = await runScenario(t, 2, WORKER, 'detach-between', env);
    for (const [rank, res] of results.entries()) {
      if (!res) continue;
      for (const c of res.cases) {
        const where = `rank ${rank}, ${c.name}`;
        if (/^send|^the next recv/.test(c.name)) {
          t.ok(c.got.ok, `${where}: succeeds`, { got: c.got });
          if (c.name.startsWith('the next recv')) t.same(c.got.value, res.reference, `${where}: gets the message the failed recv did not take`);
          continue;
        }
        t.notOk(c.got.ok, `${where}: fails, no 0-element success`, { got: c.got });
        t.ok(c.got.isHoraError, `${where}: with a HoraError`, { got: c.got });
        t.equal(c.got.code, 'ERR_INVALID_ARGUMENT', `${where}: ERR_INVALID_ARGUMENT`);
        t.match(c.got.message, rank === 1
          ? /argument '(x|into)' was detached .* after the call and before the (allreduce|broadcast|recv) was submitted/
          : /rank 1 made an invalid call: hora\.(allreduce|broadcast): argument 'x' was detached/, where);
      }
    }
    assertFollowUp(t, results);
  });

  // held: the addon keeps the memory of the pending work's ArrayBuffer (native/binding/backing_store.h);
  // staged: the fallback where it cannot, the engine working on a copy of hora's (ts/lend.ts).
  for (const [label, bytes, how] of [['1 MiB', 1 << 20, 'held'], ['128 MiB', 128 << 20, 'held'], ['1 MiB', 1 << 20, 'staged'], ['128 MiB', 128 << 20, 'staged']]) {
    if (transport === 'tcp' && bytes > (1 << 20)) continue;
    t.test(`p=2 ${transport}: an array detached and collected while its work is pending (${label}, ${how}): no crash, a HoraError`, async (t) => {
      const { results } = await runScenario(t, 2, WORKER, 'detach-during',
        { ...env, NODE_OPTIONS: '--expose-gc', HORA_TEST_BYTES: String(bytes), HORA_TEST_STAGE: how === 'staged' ? '1' : '0' });
      const n = bytes / 4;
      for (const [rank, res] of results.entries()) {
        if (!res) continue;
        for (const c of res.cases) {
          const where = `rank ${rank}, ${c.name}`;
          if (rank === 1) {
            t.notOk(c.got.ok, `${where}: fails`, { got: c.got });
            t.equal(c.got.code, 'ERR_INVALID_ARGUMENT', `${where}: ERR_INVALID_ARGUMENT`, { got: c.got });
            t.match(c.got.message, /argument '(x|into)' was detached .* while the (allreduce|broadcast|recv) was pending/, where);
            continue;
          }
          t.ok(c.got.ok, `${where}: succeeds on the rank that kept its array`, { got: c.got });
          if (c.name === 'allreduce inplace') t.same(c.got.value, ['3', String(3 * n), String(n)], `${where}: the right sum`);
          if (c.name === 'broadcast inplace') t.same(c.got.value, ['1', String(n), String(n)], `${where}: root's array`);
        }
      }
      assertFollowUp(t, results);
    });
  }
}

t.test("this Node's V8 lets the addon hold a pending work's ArrayBuffer memory, so no array is copied", async (t) => {
  const addon = require('../dist/ts/loader.js').loadNative();
  t.equal(addon.holdsArrayBuffers, true, 'v8::ArrayBuffer::GetBackingStore is found in this process');
});

t.test('world of one: DeviceBuffer.fromHost takes a SharedArrayBuffer view as far as the device', async (t) => {
  const x = new Float32Array(new SharedArrayBuffer(16));
  if (hora.cuda.available()) {
    x.set([1, 2, 3, 4]);
    const d = hora.cuda.DeviceBuffer.fromHost(x);
    t.same(Array.from(d.toHost()), [1, 2, 3, 4], 'the copy on the device holds the view');
    d.free();
    return;
  }
  // No GPU here: the argument is accepted, and the call fails only where the device is needed.
  t.throws(() => hora.cuda.DeviceBuffer.fromHost(x), { code: 'ERR_INVALID_ARGUMENT', message: /CUDA|GPU|device/ },
    'fails for want of a device, not for the view');
  try {
    hora.cuda.DeviceBuffer.fromHost(x);
  } catch (e) {
    t.notMatch(e.message, /argument 'array'|TypedArray/, 'the view itself is not what is refused', { message: e.message });
  }
  // One step further: the addon's copy reads the view, and fails at the device (a non-view fails before).
  const cuda = require('../dist/ts/loader.js').loadNative().cuda;
  t.throws(() => cuda.copyFromHost(0, 0n, x, 0n), { code: 'ERR_INVALID_ARGUMENT', message: /CUDA/ }, 'the addon reads the view');
  t.throws(() => cuda.copyFromHost(0, 0n, 'not a view', 0n), { message: /expected a TypedArray/ }, 'and refuses what is no view');
});
