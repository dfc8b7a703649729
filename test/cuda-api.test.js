'use strict';
// hora.cuda where no GPU can be used (the default CPU-only build, or a CUDA build without a device):
// availability is reported without throwing, every way to get device memory says why it cannot, argument
// errors name the argument and what was received, and a collective given something that is not a live
// DeviceBuffer fails ERR_INVALID_ARGUMENT on every rank. With a GPU the argument checks still run.
const t = require('tap');
const path = require('node:path');
const hora = require('../dist/ts/index.js');
const { runJob, runProcess, tail, ROOT, NODE } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'cuda-api-worker.js');
const { DeviceBuffer } = hora.cuda;

function throwsInvalid(t, call, pattern, what) {
  try {
    call();
  } catch (e) {
    t.ok(e instanceof hora.HoraError, `${what}: a HoraError`, { error: e && e.stack });
    t.equal(e.code, 'ERR_INVALID_ARGUMENT', `${what}: ERR_INVALID_ARGUMENT`);
    t.match(e.message, pattern, `${what}: says what is wrong`);
    return;
  }
  t.fail(`${what}: did not throw`);
}

t.test('availability is reported without throwing', async (t) => {
  t.type(hora.cuda.available(), 'boolean');
  t.type(hora.cuda.deviceCount(), 'number');
  t.type(hora.cuda.unavailableReason(), 'string');
  if (hora.cuda.available()) {
    t.ok(hora.cuda.deviceCount() > 0, 'available: at least one device');
    t.equal(hora.cuda.unavailableReason(), '', 'available: no reason to give');
    return;
  }
  t.equal(hora.cuda.deviceCount(), 0, 'unavailable: no devices');
  t.ok(hora.cuda.unavailableReason().length > 0, 'unavailable: a reason', { reason: hora.cuda.unavailableReason() });
  if (!hora.cuda.built()) {
    t.match(hora.cuda.unavailableReason(), /built without CUDA.*npm run build:cuda/, 'the CPU-only build says how to get a CUDA one');
  }
});

t.test('the ESM entry point has hora.cuda too', async (t) => {
  const esm = await import(path.join(ROOT, 'dist', 'ts', 'index.mjs'));
  t.equal(esm.cuda.available(), hora.cuda.available());
  t.equal(esm.cuda.DeviceBuffer, DeviceBuffer, 'one module instance');
});

t.test('without a usable GPU, alloc, fromHost and wrap say why', { skip: hora.cuda.available() && 'a CUDA device is available' }, async (t) => {
  const reason = hora.cuda.unavailableReason();
  const escaped = reason.replace(/[.*+?^${}()|[\]\\`]/g, '\\$&');
  const why = new RegExp(`CUDA is not available: ${escaped}`);
  throwsInvalid(t, () => DeviceBuffer.alloc('float32', 8), why, 'alloc');
  throwsInvalid(t, () => DeviceBuffer.alloc('float16', 0, 0), why, 'alloc of nothing');
  throwsInvalid(t, () => DeviceBuffer.fromHost(new Float32Array(3)), why, 'fromHost');
  throwsInvalid(t, () => DeviceBuffer.fromHost(new Uint16Array(3), { dtype: 'bfloat16' }), why, 'fromHost of bfloat16');
  throwsInvalid(t, () => DeviceBuffer.wrap(0x7f0000000000n, 'float32', 8, 0), why, 'wrap');
  if (!hora.cuda.built()) throwsInvalid(t, () => DeviceBuffer.alloc('int32', 1), /build:cuda/, 'alloc in the CPU-only build');
});

t.test('argument errors name the argument and what was received', async (t) => {
  const cases = [
    ['alloc dtype float8', () => DeviceBuffer.alloc('float8', 4), /DeviceBuffer\.alloc: argument 'dtype' must be one of .*'bfloat16'.*; received the string "float8"/],
    ['alloc dtype missing', () => DeviceBuffer.alloc(undefined, 4), /argument 'dtype' .*received undefined/],
    ['alloc count -1', () => DeviceBuffer.alloc('float32', -1), /DeviceBuffer\.alloc: argument 'count' must be a non-negative integer .*received number -1/],
    ['alloc count 2.5', () => DeviceBuffer.alloc('float32', 2.5), /argument 'count' .*received number 2\.5/],
    ['alloc count as a string', () => DeviceBuffer.alloc('float32', '4'), /argument 'count' .*received the string "4"/],
    ['alloc count too large', () => DeviceBuffer.alloc('float64', 2 ** 52), /argument 'count' .*received number 4503599627370496/],
    ['alloc device 1.5', () => DeviceBuffer.alloc('float32', 4, 1.5), /DeviceBuffer\.alloc: argument 'device' must be a CUDA device index .*received number 1\.5/],
    ['alloc device -1', () => DeviceBuffer.alloc('float32', 4, -1), /argument 'device' .*received number -1/],
    ['fromHost of an Array', () => DeviceBuffer.fromHost([1, 2, 3]), /DeviceBuffer\.fromHost: argument 'array' must be a Float32Array.*received an Array of length 3/],
    ['fromHost of a Uint16Array without dtype', () => DeviceBuffer.fromHost(new Uint16Array(2)), /argument 'options\.dtype' must be 'float16' or 'bfloat16' for a Uint16Array; received undefined/],
    ['alloc dtype int8 (host arrays only)', () => DeviceBuffer.alloc('int8', 4), /DeviceBuffer\.alloc: argument 'dtype' must be one of .*host arrays only.*; received the string "int8"/],
    ['wrap dtype uint16 (host arrays only)', () => DeviceBuffer.wrap(4096n, 'uint16', 4, 0), /argument 'dtype' .*host arrays only.*received the string "uint16"/],
    ['fromHost of an Int16Array', () => DeviceBuffer.fromHost(new Int16Array(2)), /argument 'array' must be a Float32Array.*host arrays only; received Int16Array\(2\)/],
    ['fromHost with the wrong dtype', () => DeviceBuffer.fromHost(new Float32Array(2), { dtype: 'int32' }), /argument 'options\.dtype' must be undefined or the array's own type \('float32'\); received the string "int32"/],
    ['fromHost device "0"', () => DeviceBuffer.fromHost(new Float32Array(2), { device: '0' }), /argument 'device' .*received the string "0"/],
    ['fromHost options 5', () => DeviceBuffer.fromHost(new Float32Array(2), 5), /argument 'options' must be an object; received number 5/],
    ['wrap pointer 0n', () => DeviceBuffer.wrap(0n, 'float32', 4, 0), /DeviceBuffer\.wrap: argument 'pointer' must be a non-zero device address as a bigint; received bigint 0/],
    ['wrap pointer as a number', () => DeviceBuffer.wrap(4096, 'float32', 4, 0), /argument 'pointer' .*received number 4096/],
    ['wrap negative pointer', () => DeviceBuffer.wrap(-8n, 'float32', 4, 0), /argument 'pointer' .*received bigint -8/],
    ['wrap pointer past 64 bits', () => DeviceBuffer.wrap(1n << 64n, 'float32', 4, 0), /argument 'pointer' .*received bigint 18446744073709551616/],
    ['wrap dtype', () => DeviceBuffer.wrap(4096n, 'half', 4, 0), /argument 'dtype' .*received the string "half"/],
    ['wrap count', () => DeviceBuffer.wrap(4096n, 'float32', -3, 0), /argument 'count' .*received number -3/],
    ['wrap device missing', () => DeviceBuffer.wrap(4096n, 'float32', 4), /argument 'device' .*received undefined/],
    ['wrap stream as a number', () => DeviceBuffer.wrap(4096n, 'float32', 4, 0, 7), /argument 'stream' must be a cudaStream_t as a bigint .*received number 7/],
    ['wrap negative stream', () => DeviceBuffer.wrap(4096n, 'float32', 4, 0, -1n), /argument 'stream' .*received bigint -1/],
  ];
  for (const [what, call, pattern] of cases) throwsInvalid(t, call, pattern, what);
});

t.test('a DeviceBuffer is only made by alloc, fromHost or wrap', async (t) => {
  throwsInvalid(t, () => new DeviceBuffer(), /make one with DeviceBuffer\.alloc, DeviceBuffer\.fromHost or DeviceBuffer\.wrap/, 'new DeviceBuffer()');
  const fake = Object.create(DeviceBuffer.prototype);
  t.ok(fake instanceof DeviceBuffer, 'the look-alike passes instanceof');
  const made = /argument 'this' must be a DeviceBuffer made by DeviceBuffer\.alloc, fromHost or wrap/;
  throwsInvalid(t, () => fake.toHost(), made, 'toHost on a look-alike');
  throwsInvalid(t, () => fake.copyFromHost(new Float32Array(1)), made, 'copyFromHost on a look-alike');
  throwsInvalid(t, () => fake.cast('float16'), made, 'cast on a look-alike');
  throwsInvalid(t, () => fake.free(), made, 'free on a look-alike');
  t.equal(fake.freed, true, 'a look-alike reads as freed');
});

t.test('world of one: collectives refuse what is not a live DeviceBuffer', async (t) => {
  const run = await runProcess([WORKER], { ...process.env, HORA_TEST_RESULT_DIR: '' });
  t.equal(run.code, 0, 'exits 0', { output: `${run.stdout}\n${run.stderr}` });
  const rep = JSON.parse(run.stdout.trim().split('\n').pop());
  assertResults(t, rep);
});

for (const [np, transport] of [[2, 'tcp'], [3, 'shm']]) {
  t.test(`p=${np} ${transport}: a bad DeviceBuffer argument on one rank fails the collective on every rank`, async (t) => {
    const job = await runJob(np, WORKER, { env: transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {} });
    t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
    t.equal(job.reports.filter(Boolean).length, np, 'every rank reported', { output: tail(job) });
    for (const rep of job.reports) if (rep) assertResults(t, rep);
  });
}

function assertResults(t, rep) {
  const p = rep.size;
  t.ok(rep.results.length > 0, 'cases ran');
  for (const res of rep.results) {
    const where = `rank ${rep.rank}, ${res.name}`;
    const { got } = res;
    t.notOk(got.sync, `${where}: reported through the Work, not thrown`, { got });
    t.ok(got.isHoraError, `${where}: a HoraError`, { got });
    t.equal(got.code, 'ERR_INVALID_ARGUMENT', `${where}: ERR_INVALID_ARGUMENT`, { got });
    if (res.isBad) {
      t.match(got.message, "argument 'x'", `${where}: names the argument`, { got });
      t.match(got.message, res.expected, `${where}: says what was expected`, { got });
    } else {
      t.match(got.message, new RegExp(`\\brank ${res.badRank}\\b.*invalid`), `${where}: names the bad rank`, { got });
    }
    t.same(res.after.value, new Array(4).fill(String(p)), `${where}: the next collective works`, { after: res.after });
  }
}
