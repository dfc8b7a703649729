// One rank of the fusion benchmark: a "training step" allreduces a model's worth of gradients of mixed
// sizes, submitted back to back the way the adapters do it, then waits for all of them. Prints (rank 0)
// one JSON line with the median step time. Run under `hora run`; HORA_FUSION_MB selects the buffer size.
const hora = require('..');

// Layer shapes of a small convolutional network plus an MLP head: many small tensors and a few large.
const SIZES = [
  864, 32, 32, 32, 18432, 64, 64, 64, 73728, 128, 128, 128, 294912, 256, 256, 256,
  1179648, 512, 512, 512, 262144, 512, 65536, 128, 1280, 10,
];
const STEPS = Number(process.env.BENCH_STEPS || 40);

async function main() {
  await hora.init();
  const grads = SIZES.map((n) => new Float32Array(n).fill(hora.rank() + 1));
  const times = [];
  for (let step = 0; step < STEPS + 5; step++) {
    const t0 = process.hrtime.bigint();
    const works = grads.map((g, i) => hora.allreduce(g, { inplace: true, name: `grad${i}` }));
    for (const w of works) w.wait();
    if (step >= 5) times.push(Number(process.hrtime.bigint() - t0) / 1e3);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  const slowest = (await hora.allreduce(new Float64Array([median]), { op: 'max' }))[0];
  if (hora.rank() === 0) {
    console.log(JSON.stringify({ fusionMB: Number(process.env.HORA_FUSION_MB ?? 64), tensors: SIZES.length, bytes: SIZES.reduce((s, n) => s + 4 * n, 0), step_us: Math.round(slowest) }));
  }
  await hora.shutdown();
}
main().catch((e) => { console.error(e); process.exit(1); });
