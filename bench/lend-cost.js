// What keeping a pending collective's memory valid costs (ts/lend.ts), one rank's view, under `hora run`:
//   node dist/ts/cli/main.js run -np 2 node bench/lend-cost.js
// Times ITERS allreduces (sum, float32) of BYTES (default 64 MiB) each way an array can be given:
//   wait         inplace, Work.wait(): no JavaScript runs while it is pending, the engine uses the array
//   await        inplace, awaited, an ArrayBuffer's view: the engine uses a stage, copied in and back
//   await-sab    inplace, awaited, a SharedArrayBuffer's view: cannot be taken away, the engine uses it
//   await-new    not inplace, awaited: the result is a new array hora made (a copy of x, as always)
// and prints the median milliseconds of each as one JSON line from rank 0. With A/B=1 it prints
// nothing but the JSON (for a script that alternates two builds).
const hora = require('..');

async function main() {
  const bytes = Number(process.env.BYTES || 64 * 1024 * 1024);
  const iters = Number(process.env.ITERS || 10);
  const modes = (process.env.MODES || 'wait,await,await-sab,await-new').split(',');
  await hora.init();
  const n = bytes / 4;
  const plain = new Float32Array(n).fill(1);
  const shared = new Float32Array(new SharedArrayBuffer(bytes)).fill(1);
  const out = { ranks: hora.size(), bytes, iters };
  for (const mode of modes) {
    const once = () => {
      if (mode === 'wait') return hora.allreduce(plain, { op: 'sum', inplace: true }).wait();
      if (mode === 'await') return hora.allreduce(plain, { op: 'sum', inplace: true });
      if (mode === 'await-sab') return hora.allreduce(shared, { op: 'sum', inplace: true });
      return hora.allreduce(plain, { op: 'sum' });
    };
    await once();
    await hora.barrier();
    const t = [];
    for (let i = 0; i < iters; i++) {
      const t0 = process.hrtime.bigint();
      await once();
      t.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    t.sort((a, b) => a - b);
    out[mode] = +t[t.length >> 1].toFixed(2);
  }
  if (hora.rank() === 0) console.log(JSON.stringify(out));
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
