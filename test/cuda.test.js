'use strict';
// hora.cuda on a GPU: DeviceBuffer in one process, then collectives on DeviceBuffers across 2-4 processes
// sharing one GPU (the IPC path) and across 2 forced over TCP (the staged path), against a float64 CPU
// reference (test/workers/cuda-worker.js). Every test skips, saying why, where no CUDA device is usable.
const t = require('tap');
const crypto = require('node:crypto');
const path = require('node:path');
const hora = require('../dist/ts/index.js');
const { runJob, tail } = require('./support/hora-job');

const { DeviceBuffer } = hora.cuda;
const WORKER = path.join(__dirname, 'workers', 'cuda-worker.js');
const skip = hora.cuda.available() ? false : `no CUDA device: ${hora.cuda.unavailableReason()}`;
if (skip) t.comment(`skipping the GPU tests: ${skip}`);

function throwsInvalid(t, call, pattern, what) {
  try {
    call();
  } catch (e) {
    t.ok(e instanceof hora.HoraError, `${what}: a HoraError`, { error: e && e.stack });
    t.equal(e.code, 'ERR_INVALID_ARGUMENT', `${what}: ERR_INVALID_ARGUMENT`, { message: e && e.message });
    t.match(e.message, pattern, `${what}: says what is wrong`);
    return;
  }
  t.fail(`${what}: did not throw`);
}

function randomArray(dtype, n) {
  const bytes = crypto.randomBytes(n * { float32: 4, float64: 8, float16: 2, bfloat16: 2, int32: 4, int64: 8, uint8: 1 }[dtype]);
  const ab = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  switch (dtype) {
    case 'float32': return Float32Array.from(new Float32Array(ab), (v, i) => (Number.isFinite(v) ? v : i));
    case 'float64': return new Float64Array(ab);
    case 'int32': return new Int32Array(ab);
    case 'int64': return new BigInt64Array(ab);
    case 'uint8': return new Uint8Array(ab);
    default: return new Uint16Array(ab);
  }
}

const DTYPES = ['float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8'];
const SIZES = [0, 1, 7, 1023, (1 << 20) + 3];
const half = (d) => (d === 'float16' || d === 'bfloat16' ? { dtype: d } : {});
const sameBytes = (a, b) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

t.test('fromHost / toHost round trip, every dtype, odd sizes', { skip }, async (t) => {
  for (const dtype of DTYPES) {
    for (const n of SIZES) {
      const host = randomArray(dtype, n);
      const b = DeviceBuffer.fromHost(host, half(dtype));
      t.equal(b.dtype, dtype);
      t.equal(b.count, n);
      t.equal(b.byteLength, host.byteLength);
      t.equal(b.owned, true);
      const back = b.toHost();
      t.equal(back.constructor, host.constructor, `${dtype} n=${n}: toHost's array type`);
      t.ok(sameBytes(back, host), `${dtype} n=${n}: same bytes back`);
      const z = DeviceBuffer.alloc(dtype, n);
      t.ok(z.toHost().every((v) => v == 0), `${dtype} n=${n}: alloc is zero-filled`);
      z.copyFromHost(host);
      t.ok(sameBytes(z.toHost(), host), `${dtype} n=${n}: copyFromHost`);
      b.free();
      z.free();
    }
  }
});

t.test('a freed buffer: every use is a clear error, free() again does nothing', { skip }, async (t) => {
  const b = DeviceBuffer.fromHost(new Float32Array([1, 2, 3]));
  b.free();
  t.equal(b.freed, true);
  throwsInvalid(t, () => b.toHost(), /DeviceBuffer\.toHost: the buffer was freed/, 'toHost');
  throwsInvalid(t, () => b.copyFromHost(new Float32Array(3)), /DeviceBuffer\.copyFromHost: the buffer was freed/, 'copyFromHost');
  throwsInvalid(t, () => b.cast('float16'), /DeviceBuffer\.cast: the buffer was freed/, 'cast');
  throwsInvalid(t, () => b.pointer, /DeviceBuffer\.pointer: the buffer was freed/, 'pointer');
  t.doesNotThrow(() => b.free(), 'a second free() is harmless');
  await hora.init();
  await t.rejects(async () => hora.allreduce(b), { code: 'ERR_INVALID_ARGUMENT', message: /argument 'x' must be a DeviceBuffer that has not been freed/ });
});

t.test('wrap: a sub-range of an owned buffer works; bad ranges are clear errors', { skip }, async (t) => {
  const owner = DeviceBuffer.fromHost(Float32Array.from({ length: 64 }, (_, i) => i));
  const view = DeviceBuffer.wrap(owner.pointer + 16n * 4n, 'float32', 16, 0);
  t.equal(view.owned, false);
  t.same(Array.from(view.toHost()), Array.from({ length: 16 }, (_, i) => 16 + i), 'reads the owner\'s elements 16..31');
  view.copyFromHost(new Float32Array(16).fill(-1));
  t.equal(owner.toHost()[20], -1, 'writes land in the owner\'s memory');
  view.free();
  t.same(Array.from(owner.toHost().subarray(0, 2)), [0, 1], 'freeing a wrap leaves the memory to its owner');
  throwsInvalid(t, () => DeviceBuffer.wrap(owner.pointer, 'float32', 65, 0), /DeviceBuffer\.wrap: /, 'a range past the allocation');
  throwsInvalid(t, () => DeviceBuffer.wrap(0x1000n, 'float32', 16, 0), /DeviceBuffer\.wrap: /, 'an address that is not device memory (as a host pointer is not)');
  throwsInvalid(t, () => DeviceBuffer.wrap(owner.pointer, 'float32', 4, hora.cuda.deviceCount()), /argument 'device' must be a CUDA device index from 0/, 'a device that does not exist');
  if (hora.cuda.deviceCount() > 1) throwsInvalid(t, () => DeviceBuffer.wrap(owner.pointer, 'float32', 4, 1), /DeviceBuffer\.wrap: /, 'the wrong device');
  owner.free();
});

t.test('cast: float32 -> float16 / bfloat16 -> float32 within rounding', { skip }, async (t) => {
  const n = 1023;
  const x = Float32Array.from({ length: n }, () => (Math.random() * 2 - 1) * 100);
  const b = DeviceBuffer.fromHost(x);
  for (const [dtype, rel] of [['float16', 2 ** -11], ['bfloat16', 2 ** -8]]) {
    const h = b.cast(dtype);
    t.equal(h.dtype, dtype);
    const back = h.cast('float32').toHost();
    let worst = 0;
    for (let i = 0; i < n; i++) worst = Math.max(worst, Math.abs(back[i] - x[i]) / Math.max(Math.abs(x[i]), 1e-3));
    t.ok(worst <= rel * 1.0001, `${dtype}: worst relative error ${worst} within ${rel}`);
    h.free();
  }
  throwsInvalid(t, () => b.cast('int32'), /DeviceBuffer\.cast: argument 'dtype' must be/, 'float32 -> int32');
  b.free();
});

t.test('world of one: collectives answer with device memory', { skip }, async (t) => {
  await hora.init();
  const host = Float32Array.from({ length: 7 }, (_, i) => i + 0.5);
  const x = DeviceBuffer.fromHost(host);
  const a = await hora.allreduce(x, { op: 'sum' });
  t.ok(a instanceof DeviceBuffer && a !== x, 'allreduce: a new DeviceBuffer');
  t.same(Array.from(a.toHost()), Array.from(host));
  t.equal(await hora.allreduce(x, { inplace: true }), x, 'allreduce inplace: x itself');
  const b = await hora.broadcast(x);
  const g = await hora.allgather(x);
  const r = await hora.reduceScatter(x);
  for (const [name, out] of [['broadcast', b], ['allgather', g], ['reduceScatter', r]]) {
    t.ok(out instanceof DeviceBuffer && out !== x, `${name}: a new DeviceBuffer`);
    t.same(Array.from(out.toHost()), Array.from(host), `${name}: x's values`);
    out.free();
  }
  await t.rejects(async () => hora.allreduce(x, { dtype: 'float16' }), { code: 'ERR_INVALID_ARGUMENT', message: /options\.dtype.*DeviceBuffer's own dtype \('float32'\)/ });
  a.free();
  x.free();
});

const seed = crypto.randomInt(1, 2 ** 31);
// ipc: rank 0 does the GPU work (every rank shares one GPU here); ipc-slots: every rank works through the
// staging slots, as on several GPUs (HORA_IPC_SLOTS=1); tcp: the staged path.
const PATH_ENV = { ipc: {}, 'ipc-slots': { HORA_IPC_SLOTS: '1' }, tcp: { HORA_TRANSPORT: 'tcp' } };
for (const [np, transport] of [[2, 'ipc'], [3, 'ipc'], [4, 'ipc'], [2, 'ipc-slots'], [3, 'ipc-slots'], [2, 'tcp']]) {
  t.test(`p=${np} ${transport}: collectives on DeviceBuffers match the float64 reference`, { skip }, async (t) => {
    t.comment(`HORA_TEST_SEED=${seed}`);
    const env = { HORA_TEST_SEED: String(seed), ...PATH_ENV[transport] };
    const job = await runJob(np, WORKER, { env, timeoutMs: 540000 });
    t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
    t.equal(job.reports.filter(Boolean).length, np, 'every rank reported', { output: tail(job) });
    for (const rep of job.reports) {
      if (!rep) continue;
      const where = `rank ${rep.rank} (seed ${seed})`;
      t.notOk(rep.crashed, `${where}: did not crash`, { crashed: rep.crashed });
      t.ok(rep.checked > 0, `${where}: compared ${rep.checked} elements`);
      t.same(rep.failures, [], `${where}: every element within tolerance`);
      t.same(rep.identical, new Array(np).fill(true), `${where}: bit-identical results on every rank`);
      t.equal(rep.freedError && rep.freedError.code, 'ERR_INVALID_ARGUMENT', `${where}: a freed buffer on rank 0 fails the collective here too`, { freedError: rep.freedError });
      t.match(rep.busyError && rep.busyError.message, /in use by 1 outstanding collective/, `${where}: free() of a lent buffer refuses`);
      t.same(rep.after, new Array(4).fill(np), `${where}: the collective after them works`);
      t.same(rep.reuse && rep.reuse.failures, [], `${where}: a buffer freed and reallocated between collectives, on one rank and on all, is read afresh`, { reuse: rep.reuse });
      t.comment(`${where}: ${rep.reuse && rep.reuse.sameAddress} of 2 reallocations got the freed buffer's address`);
    }
  });
}
