'use strict';
// Time per allreduce of DeviceBuffers from 4 KiB up, against host arrays of the same size in the same job:
//   node dist/ts/cli/main.js run -np N node bench/gpu/latency.js [--sizes 4K,64K,1M] [--iters 200] [--label L]
// bench/gpu/device-check.sh runs it for two builds, alternating, on 2 and 4 ranks.
//
// Each size: a warm-up of --warmup calls, then --iters float32 avg allreduces in place, one after the other,
// each finished with wait() (`wait` rows) or awaited (`await` rows); after the last one the buffer's stream
// is synchronised (a 4-byte copy to the host), so the time per call includes the GPU's work and the wait
// for it, as nccl-tests count it. avg keeps the values bounded over many calls; the inputs are not zeros.
// Host arrays get the same loop with --iters calls up to 4 MiB and about 16 MiB of traffic per size above,
// up to 64 MiB; copy_both_ways_us is one copyFromHost and one toHost of the buffer (the staged path's floor
// over the host path).
// Rank 0 prints one JSON line per (size, mode): microseconds per call for the device and the host buffer.
const hora = require('../..');

function parseSize(s) {
  const m = /^(\d+)([KMG]?)$/i.exec(s.trim());
  if (!m) throw new Error(`bad size ${s}`);
  return Number(m[1]) * { '': 1, K: 1024, M: 1 << 20, G: 1 << 30 }[m[2].toUpperCase()];
}

function args() {
  const a = { sizes: '4K,64K,256K,1M,4M,16M,64M,256M', iters: 200, warmup: 20, label: '', host: true, modes: 'wait,await' };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i++) {
    const k = v[i].replace(/^--/, '');
    if (k === 'no-host') a.host = false;
    else a[k] = v[++i];
  }
  return { ...a, sizes: a.sizes.split(',').map(parseSize), iters: Number(a.iters), warmup: Number(a.warmup), modes: a.modes.split(',') };
}

async function loop(x, n, mode, sync) {
  const opts = { inplace: true, op: 'avg' };
  await hora.barrier();
  const t0 = process.hrtime.bigint();
  if (mode === 'wait') for (let i = 0; i < n; i++) hora.allreduce(x, opts).wait();
  else for (let i = 0; i < n; i++) await hora.allreduce(x, opts);
  sync();
  return Number(process.hrtime.bigint() - t0) / 1e3 / n;
}

async function main() {
  const o = args();
  await hora.init();
  if (!hora.cuda.available()) throw new Error(`no GPU: ${hora.cuda.unavailableReason()}`);
  const device = hora.localRank() % hora.cuda.deviceCount();
  for (const bytes of o.sizes) {
    const n = bytes / 4;
    const host = new Float32Array(n);
    for (let i = 0; i < Math.min(n, 4096); i++) host[i] = 1 + ((i * 7 + hora.rank()) % 13) / 16;
    for (let have = 4096; have < n; have *= 2) host.copyWithin(have, 0, Math.min(have, n - have));
    const dev = hora.cuda.DeviceBuffer.fromHost(host, { device });
    const tail = hora.cuda.DeviceBuffer.wrap(dev.pointer, 'float32', 1, device, dev.stream);
    const syncDevice = () => tail.toHost();
    const hostIters = bytes <= 4 << 20 ? o.iters : Math.max(5, Math.round((16 << 20) / bytes));
    const withHost = o.host && bytes <= 64 << 20;
    // One copy each way between the device and a host array, the staged path's floor over the host path.
    let copyUs = null;
    if (withHost) {
      const k = Math.min(50, hostIters);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < k; i++) {
        dev.copyFromHost(host);
        dev.toHost();
      }
      copyUs = Number(process.hrtime.bigint() - t0) / 1e3 / k;
    }
    for (const mode of o.modes) {
      await loop(dev, o.warmup, mode, syncDevice);
      const deviceUs = await loop(dev, o.iters, mode, syncDevice);
      let hostUs = null;
      if (withHost) {
        await loop(host, Math.min(o.warmup, hostIters), mode, () => {});
        hostUs = await loop(host, hostIters, mode, () => {});
      }
      if (hora.rank() === 0) {
        console.log(JSON.stringify({
          label: o.label, ranks: hora.size(), transport: process.env.HORA_TRANSPORT || 'auto', bytes, mode,
          iters: o.iters, device_us: +deviceUs.toFixed(2), host_us: hostUs === null ? null : +hostUs.toFixed(2), host_iters: hostIters,
          copy_both_ways_us: copyUs === null ? null : +copyUs.toFixed(2),
        }));
      }
    }
    const back = dev.toHost();
    if (!back.every(Number.isFinite)) throw new Error(`non-finite result at ${bytes} bytes`);
    tail.free();
    dev.free();
  }
  await hora.shutdown();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
