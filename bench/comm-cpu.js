'use strict';
// CPU the communication thread spends on one allreduce: the JS thread blocks in Work.wait(), so the
// process's CPU time over the wait is the engine's. Run under `hora run`; rank 0 prints one JSON line.
//   node bench/comm-cpu.js [FLOATS=4196352]   (default: the 2048x2048 layer of bench/overlap.sh's MLP)
const hora = require('../dist/ts/index.js');

async function main() {
  await hora.init();
  const buffer = new Float32Array(Number(process.argv[2] || 2048 * 2049));
  const rows = [];
  for (let i = 0; i < 4; i++) {
    const cpu = process.cpuUsage();
    const t0 = performance.now();
    hora.allreduce(buffer, { inplace: true, name: 'comm-cpu' }).wait();
    const wallMs = performance.now() - t0;
    const used = process.cpuUsage(cpu);
    rows.push({ wallMs: Math.round(wallMs), cpuMs: Math.round((used.user + used.system) / 1000), userMs: Math.round(used.user / 1000),
      systemMs: Math.round(used.system / 1000), share: +((used.user + used.system) / 1000 / wallMs).toFixed(3) });
  }
  if (hora.rank() === 0) process.stdout.write(JSON.stringify({ bytes: buffer.byteLength, size: hora.size(), rows }) + '\n');
  await hora.shutdown();
}

main().catch((e) => {
  process.stderr.write(`comm-cpu rank ${process.env.HORA_RANK}: ${e && e.stack}\n`);
  process.exit(1);
});
