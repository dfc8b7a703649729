// Runs a known set of collectives for the timeline test: three small allreduces issued in one tick (the
// engine fuses them), a large allreduce, a broadcast, an allgather and a barrier, awaited and with wait().
// Reports what it issued, the results' checks, and the clocks (to check the monotonic clock is hrtime's).
// TIMELINE_CRASH=r: rank r is killed (SIGKILL) after the fused allreduces.
const hora = require('../../dist/ts/index.js');
const { report } = require('../support/worker-util');

(async () => {
  await hora.init();
  const rank = hora.rank();
  const size = hora.size();
  const issued = [];
  const ok = [];
  // In one synchronous run: submitted as one batch, fused by the engine.
  const small = ['g/a', 'g/b', 'g/c'].map((name, i) => {
    issued.push({ kind: 'allreduce', name });
    return hora.allreduce(new Float32Array(16 + i).fill(rank + 1), { op: 'sum', name });
  });
  for (const r of await Promise.all(small)) ok.push(r[0] === (size * (size + 1)) / 2);
  if (process.env.TIMELINE_CRASH === String(rank)) {
    // Dies without any exit handler, after the timeline's periodic write.
    setTimeout(() => process.kill(process.pid, 'SIGKILL'), 600);
    return;
  }
  issued.push({ kind: 'allreduce', name: 'big' });
  const big = await hora.allreduce(new Float32Array(1 << 20).fill(1), { op: 'sum', name: 'big' });
  ok.push(big[big.length - 1] === size);
  issued.push({ kind: 'broadcast', name: 'weights' });
  const b = hora.broadcast(new Float64Array(1000).fill(rank + 7), { root: 1, name: 'weights' }).wait();
  ok.push(b[999] === 8);
  issued.push({ kind: 'allgather', name: '' });
  const g = await hora.allgather(new Int32Array(rank + 1).fill(rank));
  ok.push(g.length === (size * (size + 1)) / 2);
  issued.push({ kind: 'barrier', name: 'end' });
  await hora.barrier({ name: 'end' });
  const native = require('../../dist/ts/loader.js').loadNative();
  const hr = Number(process.hrtime.bigint());
  const [mono] = native.clocks();
  const hr2 = Number(process.hrtime.bigint());
  report(rank, { issued, ok, clockCheck: { hr, mono, hr2 } });
  await hora.shutdown();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
