// 8-byte allreduce latency, one rank's view, under `hora run -np N`:
//   node dist/ts/cli/main.js run -np 2 node bench/latency.js [ITERS]
// Measures the two ways a script waits for a collective: awaiting the Work (the event loop wakes on the
// completion) and Work.wait() (the JS thread blocks). Each iteration is timed on its own, so the output
// gives the median, which a rare garbage-collection pause does not move, next to the mean, which it does.
// Rank 0 prints one JSON line.
const hora = require('..');

async function main() {
  const iters = Number(process.argv[2] || 5000);
  await hora.init();
  const x = new Float64Array(1);
  const result = { ranks: hora.size(), transport: process.env.HORA_TRANSPORT || 'auto', iters };
  for (const mode of ['await', 'wait']) {
    for (let i = 0; i < 500; i++) await hora.allreduce(x, { inplace: true, op: 'sum' });
    await hora.barrier();
    const t = new Float64Array(iters);
    for (let i = 0; i < iters; i++) {
      const t0 = process.hrtime.bigint();
      if (mode === 'await') await hora.allreduce(x, { inplace: true, op: 'sum' });
      else hora.allreduce(x, { inplace: true, op: 'sum' }).wait();
      t[i] = Number(process.hrtime.bigint() - t0) / 1e3;
    }
    const mean = t.reduce((s, v) => s + v, 0) / iters;
    t.sort();
    result[mode] = { median_us: +t[iters >> 1].toFixed(1), p90_us: +t[Math.floor(iters * 0.9)].toFixed(1), mean_us: +mean.toFixed(1) };
  }
  if (hora.rank() === 0) console.log(JSON.stringify(result));
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
