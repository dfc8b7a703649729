'use strict';
// Point-to-point messages, observed from inside each rank. Usage: node sendrecv-worker.js <scenario>
//   sweep        every dtype x sizes (0, 1, odd, KiB, MiB) x tags, rank 0 <-> every other rank, both recv forms
//   large        one 64 MiB message 0 -> 1 and back
//   out-of-order rank 1 posts tag 1 before tag 0 while rank 0 sends tag 0 then tag 1 (small and large)
//   in-order     40 messages of one tag, eager and large mixed, received in the order sent
//   window       rank 0 posts 64 sends at once (eager and large), rank 1 posts receives a few at a time, so
//                receives meet messages whose payload is still arriving
//   blocking     ping-pong with Work.wait() (the JS thread blocks), small and large, and a wait() for a
//                message that comes 300 ms later
//   independent  rank 0 sends to 1 and 2; rank 2 receives 1.5 s late; rank 1 must not wait for it
//   interleave   sends and receives around a ring mixed with allreduces and broadcasts
//   invalid      every bad argument, on each rank
//   mismatch     dtype and count differ between the ends, small and large; then a good message
//   kill         rank 1 SIGKILLs itself while rank 0 waits in recv from it
//   kill-send    rank 1 SIGKILLs itself while rank 0 sends it a 16 MiB message it never receives
//   kill-bystander  (3 ranks) rank 1 SIGKILLs itself while ranks 0 and 2 wait in recv from each other
//   timeout      rank 0 waits for a message never sent, rank 1 sends one never received (short
//                HORA_TIMEOUT_S); then an allreduce must still work
// Each rank writes one JSON line to $HORA_TEST_RESULT_DIR/rank-<rank>.json and exits 0 whatever it saw.
const hora = require('../../dist/ts/index.js');
const { outcome, runScenarios } = require('../support/worker-util');

const DTYPES = ['float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'int8', 'int16', 'uint16'];
const SIZES = [0, 1, 7, 1023, 4097, 70001, 1 << 20];

function ctorOf(dtype) {
  return { float32: Float32Array, float64: Float64Array, float16: Uint16Array, bfloat16: Uint16Array, int32: Int32Array, int64: BigInt64Array, uint8: Uint8Array,
    int8: Int8Array, int16: Int16Array, uint16: Uint16Array }[dtype];
}

/** Deterministic contents that differ per (seed, index) and fit every dtype. */
function pattern(dtype, n, seed) {
  const Ctor = ctorOf(dtype);
  const x = new Ctor(n);
  for (let i = 0; i < n; i++) {
    const v = (i * 31 + seed * 7) % 251;
    x[i] = Ctor === BigInt64Array ? BigInt(v) - 100n : v;
  }
  return x;
}

function sameContents(a, b) {
  if (a.length !== b.length || a.constructor !== b.constructor) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

const dtypeOption = (dtype) => (dtype === 'float16' || dtype === 'bfloat16' || dtype === 'uint16' ? { dtype } : {});

async function sweep(r, p) {
  const failures = [];
  let checked = 0;
  for (const dtype of DTYPES) {
    for (const n of SIZES) {
      for (let peer = 1; peer < p; peer++) {
        const tag = (n * 7 + peer) % 1000;
        const seed = n + peer;
        if (r === 0) {
          const sent = hora.send(pattern(dtype, n, seed), { to: peer, tag, ...dtypeOption(dtype) });
          const back = await hora.recv({ from: peer, tag: tag + 1, dtype, count: n });
          await sent;
          checked++;
          if (!sameContents(back, pattern(dtype, n, seed + 1))) failures.push({ dtype, n, peer, dir: 'back' });
        } else if (r === peer) {
          const into = new (ctorOf(dtype))(n);
          const got = await hora.recv(into, { from: 0, tag, ...dtypeOption(dtype) });
          checked++;
          if (got !== into || !sameContents(got, pattern(dtype, n, seed))) failures.push({ dtype, n, peer, dir: 'out' });
          await hora.send(pattern(dtype, n, seed + 1), { to: 0, tag: tag + 1, ...dtypeOption(dtype) });
        }
      }
    }
  }
  return { failures, checked };
}

async function large(r) {
  const n = 16 * 1024 * 1024; // 64 MiB of float32
  if (r === 0) {
    const x = new Float32Array(n);
    for (let i = 0; i < n; i += 4093) x[i] = i;
    const t0 = performance.now();
    await hora.send(x, { to: 1, tag: 64 });
    const y = await hora.recv(new Float32Array(n), { from: 1, tag: 65 });
    let ok = true;
    for (let i = 0; i < n; i++) if (y[i] !== (i % 4093 === 0 ? i + 1 : 0)) { ok = false; break; }
    return { ok, ms: performance.now() - t0 };
  }
  if (r === 1) {
    const y = await hora.recv(new Float32Array(n), { from: 0, tag: 64 });
    for (let i = 0; i < n; i += 4093) y[i] += 1;
    await hora.send(y, { to: 0, tag: 65 });
    return { ok: true };
  }
  return {};
}

async function outOfOrder(r) {
  const out = {};
  for (const n of [3, 200000]) {
    if (r === 0) {
      const a = hora.send(pattern('float32', n, 0), { to: 1, tag: 0 });
      const b = hora.send(pattern('float32', n, 1), { to: 1, tag: 1 });
      out[n] = { sends: (await Promise.allSettled([a, b])).map((s) => s.status) };
    } else if (r === 1) {
      const one = await hora.recv({ from: 0, tag: 1, dtype: 'float32', count: n });
      const zero = await hora.recv({ from: 0, tag: 0, dtype: 'float32', count: n });
      out[n] = { tag1: sameContents(one, pattern('float32', n, 1)), tag0: sameContents(zero, pattern('float32', n, 0)) };
    }
  }
  return out;
}

async function inOrder(r) {
  const sizes = Array.from({ length: 40 }, (_, i) => (i % 3 === 0 ? 100000 : i + 1));
  if (r === 0) {
    const sends = sizes.map((n, i) => hora.send(new Int32Array(n).fill(i), { to: 1, tag: 5 }));
    await Promise.all(sends);
    return { sent: sizes.length };
  }
  if (r === 1) {
    const recvs = sizes.map((n) => hora.recv({ from: 0, tag: 5, dtype: 'int32', count: n }));
    const got = await Promise.all(recvs);
    return { order: got.map((x) => (x.every((v) => v === x[0]) ? x[0] : -1)) };
  }
  return {};
}

async function windowed(r) {
  const sizes = [8192, 50000, 16, 0, 200000];
  const bad = [];
  for (const n of sizes) {
    if (r === 0) {
      await Promise.all(Array.from({ length: 64 }, (_, i) => hora.send(pattern('int32', n, i), { to: 1, tag: 2 })));
    } else if (r === 1) {
      const recvs = [];
      for (let i = 0; i < 64; i++) {
        recvs.push(hora.recv({ from: 0, tag: 2, dtype: 'int32', count: n }));
        if (i % 4 === 3) await new Promise((resolve) => setImmediate(resolve));
      }
      for (const [i, got] of (await Promise.all(recvs)).entries()) if (!sameContents(got, pattern('int32', n, i))) bad.push({ n, i });
    }
  }
  return { bad };
}

async function blocking(r) {
  const bad = [];
  for (const n of [1, 5000, 70000, 1 << 20]) {
    for (let i = 0; i < 20; i++) {
      if (r === 0) {
        hora.send(pattern('float32', n, i), { to: 1, tag: 4 }).wait();
        const back = hora.recv({ from: 1, tag: 4, dtype: 'float32', count: n }).wait();
        if (!sameContents(back, pattern('float32', n, i + 1))) bad.push({ n, i });
      } else if (r === 1) {
        const got = hora.recv({ from: 0, tag: 4, dtype: 'float32', count: n }).wait();
        if (!sameContents(got, pattern('float32', n, i))) bad.push({ n, i, side: 'out' });
        hora.send(pattern('float32', n, i + 1), { to: 0, tag: 4 }).wait();
      }
    }
  }
  let lateMs = null;
  if (r === 0) {
    await new Promise((resolve) => setTimeout(resolve, 300));
    hora.send(new Int32Array([7]), { to: 1, tag: 6 }).wait();
  } else if (r === 1) {
    const t0 = performance.now();
    const got = hora.recv({ from: 0, tag: 6, dtype: 'int32', count: 1 }).wait();
    lateMs = performance.now() - t0;
    if (got[0] !== 7) bad.push({ late: got[0] });
  }
  return { bad, lateMs };
}

async function independent(r) {
  if (r === 0) {
    const t0 = performance.now();
    const to1 = hora.send(new Float64Array(50000).fill(1), { to: 1, tag: 0 }).then(() => performance.now() - t0);
    const to2 = hora.send(new Float64Array(50000).fill(2), { to: 2, tag: 0 }).then(() => performance.now() - t0);
    return { to1Ms: await to1, to2Ms: await to2 };
  }
  if (r === 1) {
    const t0 = performance.now();
    const x = await hora.recv({ from: 0, tag: 0, dtype: 'float64', count: 50000 });
    return { ok: x.every((v) => v === 1), ms: performance.now() - t0 };
  }
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const x = await hora.recv({ from: 0, tag: 0, dtype: 'float64', count: 50000 });
  return { ok: x.every((v) => v === 2) };
}

async function interleave(r, p) {
  const right = (r + 1) % p, left = (r + p - 1) % p;
  const bad = [];
  for (let step = 0; step < 20; step++) {
    const n = step % 2 ? 300000 : 17;
    const s = hora.send(new Float32Array(n).fill(r * 100 + step), { to: right, tag: step % 3 });
    const sum = hora.allreduce(new Float32Array(1000).fill(r + 1), { op: 'sum' });
    const m = hora.recv({ from: left, tag: step % 3, dtype: 'float32', count: n });
    const b = hora.broadcast(new Int32Array(5).fill(step + r), { root: step % p });
    const [, summed, got, bc] = await Promise.all([s, sum, m, b]);
    if (summed[999] !== (p * (p + 1)) / 2) bad.push({ step, what: 'allreduce' });
    if (got[n - 1] !== left * 100 + step) bad.push({ step, what: 'recv', got: got[n - 1] });
    if (bc[4] !== step + (step % p)) bad.push({ step, what: 'broadcast' });
  }
  return { bad };
}

async function invalid(r, p) {
  const f = new Float32Array(4);
  const other = (r + 1) % p;
  const cases = [
    ['send to self', 'options.to', () => hora.send(f, { to: r })],
    ['send to rank outside the world', 'options.to', () => hora.send(f, { to: p })],
    ['send to negative rank', 'options.to', () => hora.send(f, { to: -1 })],
    ['send to non-integer rank', 'options.to', () => hora.send(f, { to: 0.5 })],
    ['send without options', 'options.to', () => hora.send(f)],
    ['send with options not an object', 'options', () => hora.send(f, 3)],
    ['send negative tag', 'options.tag', () => hora.send(f, { to: other, tag: -1 })],
    ['send non-integer tag', 'options.tag', () => hora.send(f, { to: other, tag: 1.5 })],
    ['send tag too large', 'options.tag', () => hora.send(f, { to: other, tag: 2 ** 31 })],
    ['send string tag', 'options.tag', () => hora.send(f, { to: other, tag: '1' })],
    ['send plain Array', 'x', () => hora.send([1, 2], { to: other })],
    ['send DataView', 'x', () => hora.send(new DataView(new ArrayBuffer(8)), { to: other })],
    ['send Uint16Array without dtype', 'options.dtype', () => hora.send(new Uint16Array(2), { to: other })],
    ['send Int16Array with dtype uint16', 'options.dtype', () => hora.send(new Int16Array(2), { to: other, dtype: 'uint16' })],
    ['recv into a Uint16Array without dtype', 'options.dtype', () => hora.recv(new Uint16Array(2), { from: other })],
    ['recv from self', 'options.from', () => hora.recv(f, { from: r })],
    ['recv from rank outside the world', 'options.from', () => hora.recv(f, { from: p + 3 })],
    ['recv bad tag', 'options.tag', () => hora.recv(f, { from: other, tag: -5 })],
    ['recv into a string', 'into', () => hora.recv('abc', { from: other })],
    ['recv without dtype', 'options.dtype', () => hora.recv({ from: other, count: 3 })],
    ['recv unknown dtype', 'options.dtype', () => hora.recv({ from: other, dtype: 'float8', count: 3 })],
    ['recv without count', 'options.count', () => hora.recv({ from: other, dtype: 'float32' })],
    ['recv negative count', 'options.count', () => hora.recv({ from: other, dtype: 'float32', count: -1 })],
    ['recv count with an array', 'options.count', () => hora.recv(f, { from: other, count: 4 })],
  ];
  if (hora.cuda.available()) {
    const d = hora.cuda.DeviceBuffer.from(new Float32Array(4));
    cases.push(['send DeviceBuffer', 'x', () => hora.send(d, { to: other })]);
  }
  const results = [];
  for (const [name, argument, call] of cases) results.push({ name, argument, got: await outcome(call) });
  // The bad calls touched nothing: a good exchange and a collective still work.
  const s = hora.send(new Int32Array([r]), { to: other, tag: 3 });
  const got = await hora.recv({ from: (r + p - 1) % p, tag: 3, dtype: 'int32', count: 1 });
  await s;
  const sum = await hora.allreduce(new Int32Array([1]), { op: 'sum' });
  return { results, after: { got: got[0], sum: sum[0] } };
}

async function mismatch(r) {
  const out = {};
  const cases = [
    ['count', 10, 'float32', 12, 'float32'],
    ['dtype', 10, 'float32', 10, 'int32'],
    ['large count', 300000, 'float32', 300001, 'float32'],
    ['large dtype', 300000, 'float64', 300000, 'float32'],
  ];
  for (const [name, sendN, sendT, recvN, recvT] of cases) {
    if (r === 0) out[name] = await outcome(() => hora.send(new (ctorOf(sendT))(sendN), { to: 1, tag: 3 }));
    if (r === 1) out[name] = await outcome(() => hora.recv({ from: 0, tag: 3, dtype: recvT, count: recvN }));
  }
  // The pair goes on working.
  if (r === 0) out.after = await outcome(() => hora.send(new Float32Array([42]), { to: 1, tag: 3 }));
  if (r === 1) out.after = await outcome(() => hora.recv({ from: 0, tag: 3, dtype: 'float32', count: 1 }));
  return out;
}

async function kill(r) {
  if (r === 1) {
    setTimeout(() => process.kill(process.pid, 'SIGKILL'), 500);
    await new Promise(() => {});
  }
  const t0 = performance.now();
  const got = await outcome(() => hora.recv({ from: 1, tag: 4, dtype: 'float32', count: 1000 }));
  return { got, ms: performance.now() - t0 };
}

async function killSend(r) {
  if (r === 1) {
    setTimeout(() => process.kill(process.pid, 'SIGKILL'), 500);
    await new Promise(() => {});
  }
  const t0 = performance.now();
  const got = await outcome(() => hora.send(new Float32Array(4 << 20), { to: 1, tag: 4 }));
  return { got, ms: performance.now() - t0 };
}

async function killBystander(r) {
  if (r === 1) {
    setTimeout(() => process.kill(process.pid, 'SIGKILL'), 500);
    await new Promise(() => {});
  }
  const t0 = performance.now();
  const got = await outcome(() => hora.recv({ from: 2 - r, tag: 4, dtype: 'float32', count: 1000 }));
  const ms = performance.now() - t0;
  // Stay a while: this rank's exit must not be what fails the other's receive.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  return { got, ms };
}

async function timeout(r) {
  const t0 = performance.now();
  const got = r === 0
    ? await outcome(() => hora.recv({ from: 1, tag: 7, dtype: 'float32', count: 8 }))
    : await outcome(() => hora.send(new Float32Array(8), { to: 0, tag: 9 }));
  const ms = performance.now() - t0;
  const after = await outcome(() => hora.allreduce(new Int32Array([1]), { op: 'sum' }));
  return { got, ms, after };
}

const SCENARIOS = { sweep, large, window: windowed, blocking, 'out-of-order': outOfOrder, 'in-order': inOrder, independent, interleave, invalid, mismatch, kill, 'kill-send': killSend, 'kill-bystander': killBystander, timeout };

runScenarios(hora, SCENARIOS, { noShutdown: ['kill', 'kill-send', 'kill-bystander'] });
