'use strict';
// Load and soak, seen from one rank: SOAK_SMALL small collectives then SOAK_LARGE large allreduces in a
// row, with up to 16 outstanding at once, every result checked. Samples resident memory as it goes and
// counts open file descriptors and this job's /dev/shm segments before and after, so a leak of any of
// them shows. Also issues 16 different collectives at once (dtypes, ops, kinds, sizes) and checks each.
// Reports one JSON line per rank (test/support/worker-util.js); exits 1 on a wrong result.
const fs = require('node:fs');
const hora = require('../../dist/ts/index.js');
const { report, growYoungGeneration } = require('../support/worker-util');

const SMALL = Number(process.env.SOAK_SMALL || 100000);
const LARGE = Number(process.env.SOAK_LARGE || 1000);
const LARGE_ELEMS = Number(process.env.SOAK_LARGE_ELEMS || 1 << 20); // float32: 4 MiB
const WINDOW = 16;

// A collection before each sample, so the figures show what is retained rather than when V8 last
// collected (results of large allreduces are fresh arrays that would otherwise make the size saw).
require('node:v8').setFlagsFromString('--expose-gc');
const collect = require('node:vm').runInNewContext('gc');
const rssMiB = () => process.memoryUsage().rss / 1048576;
const openFds = () => fs.readdirSync('/proc/self/fd').length;
const shmSegments = () =>
  fs.existsSync('/dev/shm') ? fs.readdirSync('/dev/shm').filter((f) => f.startsWith(`hora-${process.env.HORA_JOB_ID}`)).length : 0;

// Runs n collectives, at most WINDOW outstanding; issue(i) returns [work, check(result) -> error text or ''].
async function pipeline(n, issue, samples, sampleEvery) {
  const inflight = new Set();
  let failure = '';
  for (let i = 0; i < n && !failure; i++) {
    const [work, check] = issue(i);
    const p = work.then((res) => {
      const bad = check(res);
      if (bad && !failure) failure = `#${i}: ${bad}`;
      inflight.delete(p);
    });
    inflight.add(p);
    if (inflight.size >= WINDOW) await Promise.race(inflight);
    if ((i + 1) % sampleEvery === 0) collect();
    if ((i + 1) % sampleEvery === 0) samples.push({ done: i + 1, rssMiB: +rssMiB().toFixed(1), heapMiB: +(process.memoryUsage().heapUsed / 1048576).toFixed(1), arrayBuffersMiB: +(process.memoryUsage().arrayBuffers / 1048576).toFixed(1) });
  }
  await Promise.all(inflight);
  return failure;
}

async function main() {
  await hora.init();
  const rank = hora.rank();
  const p = hora.size();
  const ranksSum = (p * (p + 1)) / 2; // sum over ranks of rank + 1

  // 16 different collectives at once, all outstanding before the first is awaited.
  const mixed = [];
  for (let k = 0; k < WINDOW; k++) {
    const n = [1, 3, 1000, 70000][k % 4];
    switch (k % 4) {
      case 0: mixed.push([hora.allreduce(new Int32Array(n).fill(rank + k), { op: 'sum', name: `mixed/${k}` }), (r) => r[0] === ranksSum - p + p * k]); break;
      case 1: mixed.push([hora.allreduce(new Float64Array(n).fill(rank), { op: 'max', name: `mixed/${k}` }), (r) => r[n - 1] === p - 1]); break;
      case 2: mixed.push([hora.broadcast(new Uint8Array(n).fill(rank + 1), { root: p - 1, name: `mixed/${k}` }), (r) => r[0] === p && r[n - 1] === p]); break;
      default: mixed.push([hora.allgather(new Float32Array(n).fill(rank), { name: `mixed/${k}` }), (r) => r.length === n * p && r[n * p - 1] === p - 1]);
    }
  }
  const mixedOk = (await Promise.all(mixed.map(([w]) => w))).map((r, k) => mixed[k][1](r));

  growYoungGeneration();
  collect();
  await hora.barrier();
  const fdsBefore = openFds();
  const shmBefore = shmSegments();
  const small = [];
  const t0 = process.hrtime.bigint();
  // Small: allreduce of 2 float32, with a broadcast and an allgather every 8th and 9th.
  const smallFailure = await pipeline(SMALL, (i) => {
    if (i % 8 === 6) return [hora.broadcast(new Int32Array([i, rank]), { root: i % p }), (r) => (r[0] === i && r[1] === i % p ? '' : `broadcast got ${r}`)];
    if (i % 8 === 7) return [hora.allgather(new Int32Array([i, rank])), (r) => (r.length === 2 * p && r[1] === 0 && r[2 * p - 1] === p - 1 && r[2 * p - 2] === i ? '' : `allgather got ${r}`)];
    return [hora.allreduce(new Float32Array([rank + 1, i % 1000]), { op: 'sum' }), (r) => (r[0] === ranksSum && r[1] === p * (i % 1000) ? '' : `allreduce got ${r}`)];
  }, small, Math.max(1, Math.floor(SMALL / 20)));
  const smallSeconds = Number(process.hrtime.bigint() - t0) / 1e9;

  const large = [];
  const x = new Float32Array(LARGE_ELEMS);
  const t1 = process.hrtime.bigint();
  const largeFailure = await pipeline(LARGE, (i) => {
    x.fill(rank + (i % 7));
    return [hora.allreduce(x, { op: 'sum' }), (r) => (r[0] === ranksSum - p + p * (i % 7) && r[LARGE_ELEMS - 1] === r[0] ? '' : `large allreduce got ${r[0]}, ${r[LARGE_ELEMS - 1]}`)];
  }, large, Math.max(1, Math.floor(LARGE / 20)));
  const largeSeconds = Number(process.hrtime.bigint() - t1) / 1e9;

  await hora.barrier();
  // V8 frees the backing stores of collected array buffers on a background thread, so the figure drops
  // some time after a collection; take the lowest over up to 3 s. A leak never drops.
  let arrayBuffersMiB = Infinity;
  for (let k = 0; k < 30 && arrayBuffersMiB > 8; k++) {
    collect();
    await new Promise((r) => setTimeout(r, 100));
    arrayBuffersMiB = Math.min(arrayBuffersMiB, process.memoryUsage().arrayBuffers / 1048576);
  }
  const fdsAfter = openFds();
  const shmAfter = shmSegments();
  report(rank, {
    size: p, mixedOk, small, large, smallFailure, largeFailure, smallSeconds, largeSeconds,
    fdsBefore, fdsAfter, arrayBuffersMiB, shmBefore, shmAfter, jobId: process.env.HORA_JOB_ID,
  });
  await hora.shutdown();
  if (smallFailure || largeFailure || mixedOk.includes(false)) process.exitCode = 1;
}

main().catch((e) => {
  process.stderr.write(`soak-worker: ${e && e.stack ? e.stack : String(e)}\n`);
  process.exit(1);
});
