#!/usr/bin/env node
// Same-run, alternating comparison of hora's send/recv (bench/sendrecv.js) with Open MPI's MPI_Send /
// MPI_Recv (bench/mpi_pingpong.c): the machine is shared and noisy, so the two take turns, and the
// figure quoted per size is the median over pairs of (hora / MPI), a ratio of two runs taken seconds apart.
//
//   node bench/sendrecv-compare.js [--pairs 3] [--max 64M] [--transport auto|tcp] [--await 1] [--out FILE]
//
// Needs mpicc and mpirun (Debian: openmpi-bin libopenmpi-dev). --transport tcp sets HORA_TRANSPORT=tcp
// and gives Open MPI `--mca btl tcp,self`. Prints a markdown table: per size the median latency of each
// side, the median best bandwidth of each side, and the median and lowest bandwidth ratio.
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const args = { pairs: 3, max: '64M', transport: 'auto', await: 0, out: '' };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in args)) { console.error(`sendrecv-compare.js: unknown option ${process.argv[i]}`); process.exit(2); }
  args[key] = typeof args[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
const root = path.resolve(__dirname, '..');
const sizeMatch = /^(\d+)([KM]?)$/i.exec(args.max);
const maxBytes = sizeMatch ? Number(sizeMatch[1]) * { '': 1, k: 1 << 10, m: 1 << 20 }[sizeMatch[2].toLowerCase()] : 0;
if (maxBytes < 4) {
  console.error(`sendrecv-compare.js: --max expects a size of at least 4 bytes such as 4096, 64K or 4M; received ${JSON.stringify(args.max)}`);
  process.exit(2);
}
if (!Number.isInteger(args.pairs) || args.pairs < 1) {
  console.error(`sendrecv-compare.js: --pairs expects a whole number of at least 1; received ${JSON.stringify(process.argv[process.argv.indexOf('--pairs') + 1])}`);
  process.exit(2);
}
const tcp = args.transport === 'tcp';

const mpiBin = path.join(os.tmpdir(), 'hora-mpi-pingpong');
execFileSync('mpicc', ['-O2', '-o', mpiBin, path.join(__dirname, 'mpi_pingpong.c')], { stdio: 'inherit' });

function lines(text) {
  const rows = new Map();
  for (const line of text.split('\n')) {
    const json = line.replace(/^\[0\] /, '');
    if (!json.startsWith('{')) continue;
    const r = JSON.parse(json);
    rows.set(r.bytes, r);
  }
  return rows;
}

function runHora() {
  const env = { ...process.env, ...(tcp ? { HORA_TRANSPORT: 'tcp' } : {}) };
  const extra = args.await ? ['--await'] : [];
  return lines(execFileSync(process.execPath, [path.join(root, 'dist/ts/cli/main.js'), 'run', '-np', '2', process.execPath,
    path.join(__dirname, 'sendrecv.js'), '--max-bytes', String(maxBytes), ...extra], { env, encoding: 'utf8', maxBuffer: 1 << 26 }));
}

// Open MPI's TCP transport leaves out the loopback interface unless told otherwise, and would then talk
// to this machine's own network address; a benchmark's traffic stays on loopback.
const MPI_LOOPBACK = ['--mca', 'btl_tcp_if_include', 'lo', '--mca', 'oob_tcp_if_include', 'lo'];

function runMpi() {
  const flags = ['--allow-run-as-root', '--oversubscribe', ...MPI_LOOPBACK, ...(tcp ? ['--mca', 'btl', 'tcp,self'] : []), '-np', '2', mpiBin, String(maxBytes)];
  return lines(execFileSync('mpirun', flags, { encoding: 'utf8', maxBuffer: 1 << 26 }));
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

const raw = [];
for (let p = 0; p < args.pairs; p++) {
  const hora = runHora();
  const mpi = runMpi();
  raw.push({ hora: [...hora.values()], mpi: [...mpi.values()] });
  process.stderr.write(`pair ${p + 1} of ${args.pairs} done\n`);
}
if (args.out) fs.writeFileSync(args.out, JSON.stringify({ args, raw }, null, 1));

console.log(`| bytes | hora latency µs | MPI latency µs | hora MB/s | MPI MB/s | bandwidth ratio (median) | ratio (min) |`);
console.log('|---:|---:|---:|---:|---:|---:|---:|');
for (let bytes = 4; bytes <= maxBytes; bytes *= 2) {
  const h = raw.map((r) => r.hora.find((x) => x.bytes === bytes)).filter(Boolean);
  const m = raw.map((r) => r.mpi.find((x) => x.bytes === bytes)).filter(Boolean);
  if (h.length === 0 || m.length === 0) continue;
  const ratios = h.map((x, i) => (m[i] ? x.bandwidth_MBps.best / m[i].bandwidth_MBps.best : NaN)).filter((x) => !Number.isNaN(x));
  console.log(`| ${bytes} | ${median(h.map((x) => x.latency_us.median)).toFixed(1)} | ${median(m.map((x) => x.latency_us.median)).toFixed(1)} | ` +
    `${median(h.map((x) => x.bandwidth_MBps.best)).toFixed(0)} | ${median(m.map((x) => x.bandwidth_MBps.best)).toFixed(0)} | ` +
    `${median(ratios).toFixed(2)} | ${Math.min(...ratios).toFixed(2)} |`);
}
