// A float32 allreduce of DeviceBuffers against the same allreduce of host buffers, under `hora run`:
//   node dist/ts/cli/main.js run -np 2 node bench/gpu/allreduce.js [MiB=256] [ITERS=10]
// (bench/gpu/allreduce.sh runs it for both device paths). Each iteration times, in alternating order, one
// host allreduce, one device allreduce, and one device-to-device copy of the whole buffer made by every rank
// at once (the copy engine's speed under the same sharing of the GPU). Rank 0 prints one JSON line with
// medians of the per-iteration ratios:
//   device_vs_host   device time / host time (staged path target: <= 1.15: the copies hidden)
//   ipc_vs_bound     device time / the copy-based lower bound. On the IPC path the p ranks together read
//                    and write (3p - 1) x n bytes of GPU memory (each reads n and writes n/p reducing its
//                    block, then copies (p - 1)/p x n in), where a copy of n bytes moves 2n: the bound is
//                    (3p - 1)/2 copy times.
const hora = require('../..');
const { loadNative } = require('../../dist/ts/loader');

const median = (a) => {
  const s = [...a].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function timed(fn) {
  await hora.barrier();
  const t0 = process.hrtime.bigint();
  await fn();
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

async function main() {
  const mib = Number(process.argv[2] || 256);
  const iters = Number(process.argv[3] || 10);
  await hora.init();
  if (!hora.cuda.available()) throw new Error(`no GPU: ${hora.cuda.unavailableReason()}`);
  const p = hora.size();
  const device = hora.localRank() % hora.cuda.deviceCount();
  const n = (mib << 20) / 4;
  const host = new Float32Array(n).fill(1);
  const dev = hora.cuda.DeviceBuffer.fromHost(host, { device });
  const copy = hora.cuda.DeviceBuffer.alloc('float32', n, device);
  const cuda = loadNative().cuda;
  const rows = [];
  for (let i = 0; i <= iters; i++) {
    const t = {};
    const steps = [
      ['host', () => hora.allreduce(host, { inplace: true, op: 'avg' })],
      ['device', () => hora.allreduce(dev, { inplace: true, op: 'avg' })],
      ['copy', () => cuda.cast(device, dev.pointer, 0, copy.pointer, 0, n, 0n)],
    ];
    if (i % 2) steps.reverse();
    for (const [name, fn] of steps) t[name] = await timed(fn);
    if (i > 0) rows.push(t);  // the first round warms up (IPC handles, NCCL set-up, pinned buffers)
  }
  const check = dev.toHost();
  if (check[0] !== 1 || check[n - 1] !== 1) throw new Error(`wrong result: ${check[0]}, ${check[n - 1]}`);
  if (hora.rank() === 0) {
    const gb = (s) => +((mib / 1024) / s).toFixed(2);
    console.log(JSON.stringify({
      ranks: p, transport: process.env.HORA_TRANSPORT || 'auto', mib, iters,
      host_s: +median(rows.map((r) => r.host)).toFixed(4), device_s: +median(rows.map((r) => r.device)).toFixed(4),
      copy_s: +median(rows.map((r) => r.copy)).toFixed(4),
      device_algbw_GBps: gb(median(rows.map((r) => r.device))), host_algbw_GBps: gb(median(rows.map((r) => r.host))),
      device_vs_host: +median(rows.map((r) => r.device / r.host)).toFixed(3),
      ipc_vs_bound: +median(rows.map((r) => r.device / (((3 * p - 1) / 2) * r.copy))).toFixed(3),
    }));
  }
  dev.free();
  copy.free();
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
