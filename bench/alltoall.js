#!/usr/bin/env node
// hora.alltoall against Open MPI's MPI_Alltoallv (bench/mpi_alltoallv.c) in the same run, taking turns:
// the machine is shared and noisy, so the figure quoted per size is the median over pairs of
// (hora time / MPI time) inverted, a ratio of two runs taken seconds apart.
//
//   node bench/alltoall.js [--np 2] [--pairs 3] [--reps 5] [--max 4M] [--transport auto|tcp] [--recv 1] [--into 1] [--out FILE]
//
// Each size is the bytes each rank sends each peer (float32 blocks, equal splits), from 1 KiB by fours to
// --max. Both sides time a blocking loop (hora: Work.wait(); the iteration counts of mpi_alltoallv.c), take
// the slowest rank's mean per round and the median of --reps rounds. --recv 1 (default) gives hora the
// recvSplits, as MPI_Alltoallv is given its receive counts; --recv 0 lets hora exchange the counts first.
// --into 1 (default) gives hora an `out` array to receive into, as MPI_Alltoallv is given its receive
// buffer; --into 0 lets each call return a new array (fresh memory: its page faults are the cost above
// 64 KiB on this machine).
// Needs mpicc and mpirun (Debian: openmpi-bin libopenmpi-dev). --transport tcp sets HORA_TRANSPORT=tcp
// and gives Open MPI `--mca btl tcp,self`.
//
// Prints a table in nccl-tests' form per side (bytes per peer, bytes per rank, time, algbw, busbw:
// algbw = bytes each rank sends / time, busbw = algbw * (p - 1) / p) and the ratio MPI time / hora time
// (above 1: hora is faster).
//
// Inside a job (`hora run`) with --worker it is hora's side: prints one JSON line per size from rank 0.
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const args = { np: 2, pairs: 3, reps: 5, max: '4M', transport: 'auto', recv: 1, into: 1, out: '', worker: 0 };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in args)) { console.error(`alltoall.js: unknown option ${process.argv[i]}`); process.exit(2); }
  args[key] = typeof args[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
const sizeMatch = /^(\d+)([KM]?)$/i.exec(String(args.max));
const maxBytes = sizeMatch ? Number(sizeMatch[1]) * { '': 1, k: 1 << 10, m: 1 << 20 }[sizeMatch[2].toLowerCase()] : 0;
if (maxBytes < 1024) {
  console.error(`alltoall.js: --max expects a size of at least 1K such as 64K or 4M; received ${JSON.stringify(args.max)}`);
  process.exit(2);
}
// Calls before the timed ones, per size, on both sides alike (bench/mpi_alltoallv.c): batches of 100 until
// the slowest rank has spent WARMUP_MS in them. V8 compiles hora's call path and collects its garbage on
// threads of its own during a process's first few thousand calls; on 2 cores shared by two ranks that
// made a 1 KiB alltoall take 5 to 90 µs over the first thousand calls, and 4-5 µs after 5,000.
const WARMUP_MS = 200;
const itersFor = (bytes) => (bytes <= 65536 ? 200 : bytes <= 1 << 20 ? 50 : 10);
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

async function worker() {
  const hora = require('../dist/ts/index.js');
  await hora.init();
  const p = hora.size();
  for (let bytes = 1024; bytes <= maxBytes; bytes *= 4) {
    const count = bytes / 4;
    const x = new Float32Array(count * p).fill(1);
    const splits = Array(p).fill(count);
    const options = args.recv ? { splits, recvSplits: splits } : { splits };
    // As MPI_Alltoallv is given its receive buffer: one array, written by every call (--into 0: a new one each).
    if (args.into) options.out = new Float32Array(count * p);
    const iters = itersFor(bytes);
    for (const t0 = performance.now(); ;) {
      for (let i = 0; i < 100; i++) hora.alltoall(x, options).wait();
      if (hora.allreduce(Float64Array.of(performance.now() - t0), { op: 'max' }).wait()[0] >= WARMUP_MS) break;
    }
    const rounds = [];
    for (let r = 0; r < args.reps; r++) {
      hora.barrier().wait();
      const t0 = performance.now();
      for (let i = 0; i < iters; i++) hora.alltoall(x, options).wait();
      const mine = new Float64Array([(performance.now() - t0) / iters]);
      rounds.push(hora.allreduce(mine, { op: 'max' }).wait()[0]);
    }
    if (hora.rank() === 0) console.log(JSON.stringify({ bytes, time_us: median(rounds) * 1000 }));
  }
  await hora.shutdown();
}

function lines(text) {
  const rows = new Map();
  for (const line of text.split('\n')) {
    const json = line.replace(/^\[\d+\]\s*/, '');
    if (!json.startsWith('{')) continue;
    const r = JSON.parse(json);
    rows.set(r.bytes, r);
  }
  return rows;
}

function compare() {
  const root = path.resolve(__dirname, '..');
  const tcp = args.transport === 'tcp';
  const mpiBin = path.join(os.tmpdir(), `hora-mpi-alltoallv-${process.pid}`);
  execFileSync('mpicc', ['-O2', '-o', mpiBin, path.join(__dirname, 'mpi_alltoallv.c')], { stdio: 'inherit' });
  const runHora = () => lines(execFileSync(process.execPath, [path.join(root, 'dist/ts/cli/main.js'), 'run', '-np', String(args.np),
    process.execPath, __filename, '--worker', '1', '--max', String(maxBytes), '--reps', String(args.reps), '--recv', String(args.recv), '--into', String(args.into)],
  { env: { ...process.env, ...(tcp ? { HORA_TRANSPORT: 'tcp' } : {}) }, encoding: 'utf8', maxBuffer: 1 << 24 }));
  // Open MPI's TCP transport leaves out the loopback interface unless told otherwise: the traffic stays on loopback.
  const runMpi = () => lines(execFileSync('mpirun', ['--allow-run-as-root', '--oversubscribe', '--mca', 'btl_tcp_if_include', 'lo',
    '--mca', 'oob_tcp_if_include', 'lo', ...(tcp ? ['--mca', 'btl', 'tcp,self'] : []), '-np', String(args.np), mpiBin, String(maxBytes),
    String(args.reps)], { encoding: 'utf8', maxBuffer: 1 << 24 }));
  const raw = [];
  try {
    for (let i = 0; i < args.pairs; i++) {
      raw.push({ hora: [...runHora().values()], mpi: [...runMpi().values()] });
      process.stderr.write(`pair ${i + 1} of ${args.pairs} done\n`);
    }
  } finally {
    fs.rmSync(mpiBin, { force: true });
  }
  if (args.out) fs.writeFileSync(args.out, JSON.stringify({ args, raw }, null, 1));
  const p = args.np;
  console.log(`alltoall, ${p} ranks, transport ${args.transport}, recvSplits ${args.recv ? 'given' : 'exchanged'}, ${args.into ? 'into one out array' : 'a new array each call'}; medians over ${args.pairs} pairs`);
  console.log('| bytes/peer | bytes/rank | hora time µs | hora algbw GB/s | hora busbw GB/s | MPI time µs | MPI algbw GB/s | MPI busbw GB/s | MPI time / hora time (median) | (min) |');
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (let bytes = 1024; bytes <= maxBytes; bytes *= 4) {
    const h = raw.map((r) => r.hora.find((x) => x.bytes === bytes));
    const m = raw.map((r) => r.mpi.find((x) => x.bytes === bytes));
    if (h.some((x) => !x) || m.some((x) => !x)) continue;
    const ratios = h.map((x, i) => m[i].time_us / x.time_us);
    const perRank = bytes * p;
    const row = (t) => { const alg = perRank / (t * 1e3); return [t.toFixed(1), alg.toFixed(3), (alg * (p - 1) / p).toFixed(3)]; };
    console.log(`| ${bytes} | ${perRank} | ${row(median(h.map((x) => x.time_us))).join(' | ')} | ${row(median(m.map((x) => x.time_us))).join(' | ')} | ` +
      `${median(ratios).toFixed(2)} | ${Math.min(...ratios).toFixed(2)} |`);
  }
}

if (args.worker) {
  worker().catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else {
  compare();
}
