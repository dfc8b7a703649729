// Small-collective latency, one rank's view, under `hora run -np N`:
//   node dist/ts/cli/main.js run -np 2 node bench/small-latency.js
// For each size (SIZES, bytes of float32, comma-separated) and each way of waiting (MODES: wait, await),
// times ITERS allreduces (sum) one by one and prints the median: on a shared machine a rare stall of a
// few milliseconds (a garbage collection, another process taking the core) moves a mean over 200 calls
// of a microsecond-scale collective by tens of microseconds, but not the median. With CPU=1 it also
// prints the process's CPU time per second of the loop (1.0: one core busy); with MEAN=1 the mean as well
// (which the stalls do move: a benchmark that times a whole loop, as bench/compare.js does, sees it).
// Rank 0 prints one JSON line.
const hora = require('..');

async function main() {
  const sizes = (process.env.SIZES || '4,64,1024,4096,16384,65536,262144').split(',').map(Number);
  const modes = (process.env.MODES || 'wait,await').split(',');
  const iters = Number(process.env.ITERS || 1000);
  await hora.init();
  const warm = new Float32Array(1);
  for (let i = 0; i < 500; i++) await hora.allreduce(warm, { inplace: true, op: 'sum' });
  for (let i = 0; i < 500; i++) hora.allreduce(warm, { inplace: true, op: 'sum' }).wait();
  const out = { ranks: hora.size(), transport: process.env.HORA_TRANSPORT || 'auto', iters };
  for (const mode of modes) {
    for (const bytes of sizes) {
      const x = new Float32Array(Math.max(1, bytes / 4));
      for (let i = 0; i < 20; i++) hora.allreduce(x, { inplace: true, op: 'sum' }).wait();
      await hora.barrier();
      const t = new Float64Array(iters);
      const cpu0 = process.cpuUsage();
      const wall0 = process.hrtime.bigint();
      for (let i = 0; i < iters; i++) {
        const t0 = process.hrtime.bigint();
        if (mode === 'wait') hora.allreduce(x, { inplace: true, op: 'sum' }).wait();
        else await hora.allreduce(x, { inplace: true, op: 'sum' });
        t[i] = Number(process.hrtime.bigint() - t0) / 1e3;
      }
      const wallUs = Number(process.hrtime.bigint() - wall0) / 1e3;
      const cpu = process.cpuUsage(cpu0);
      t.sort();
      out[`${mode} ${bytes}`] = +t[iters >> 1].toFixed(2);
      if (process.env.MEAN) out[`mean ${mode} ${bytes}`] = +(t.reduce((s, v) => s + v, 0) / iters).toFixed(2);
      if (process.env.CPU) out[`cpu ${mode} ${bytes}`] = +((cpu.user + cpu.system) / wallUs).toFixed(2);
    }
  }
  if (hora.rank() === 0) console.log(JSON.stringify(out));
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
