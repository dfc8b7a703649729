#!/usr/bin/env node
// Same-run, alternating comparison of `hora bench` with a peer baseline from ../shared/peers (Open MPI's
// MPI_Allreduce or torch.distributed Gloo), as the benchmark rules ask: the machine is shared and noisy,
// so hora and the peer take turns, and the figure quoted per size is the median over pairs of
// (hora busbw / peer busbw) — a ratio of two measurements taken a few seconds apart.
//
//   node bench/compare.js --peer mpi|gloo [--np 2] [--pairs 5] [--reps 3] [--max 256M] [--transport auto|tcp] [--sync 1] [--out FILE]
//
// --reps: each side times every size that many times per pair (hora bench --reps; the peer's program run
// that many times) and keeps the median: a mean over 200 microsecond-scale calls is moved several-fold
// by one stall of a millisecond (a garbage collection, V8 compiling on its background thread, another
// process), which both sides meet on a shared machine.
//
// --sync 1 runs hora's loop with Work.wait() (a blocking loop, like the peers' C and Python loops);
// without it each collective is awaited.
//
// Prints a markdown table: bytes, median busbw of each side, median ratio, min ratio; and the 4-byte
// latencies. --out also writes every raw table to FILE as JSON.
const { execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const args = { peer: 'mpi', np: 2, pairs: 5, reps: 3, max: '256M', transport: 'auto', sync: 0, out: '' };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in args)) { console.error(`compare.js: unknown option ${process.argv[i]}`); process.exit(2); }
  args[key] = typeof args[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
const root = path.resolve(__dirname, '..');
const peersDir = path.resolve(root, '..', 'shared', 'peers');
const SUFFIX = { '': 1, K: 1 << 10, M: 1 << 20, G: 1 << 30 };
const maxMatch = /^(\d+)([KMG]?)$/i.exec(args.max);
if (!maxMatch) throw new Error(`--max expects a size such as 4096, 64K or 256M; received ${JSON.stringify(args.max)}`);
const maxBytes = Number(maxMatch[1]) * SUFFIX[maxMatch[2].toUpperCase()];

function parseTable(text, bytesCol, busCol, timeCol) {
  const rows = new Map();
  for (const line of text.split('\n')) {
    const cols = line.replace(/^\[\d+\]\s*/, '').trim().split(/\s+/);
    if (!/^\d+$/.test(cols[0] || '')) continue;
    rows.set(Number(cols[bytesCol]), { busbw: Number(cols[busCol]), time_us: Number(cols[timeCol]) });
  }
  return rows;
}

function runHora() {
  const env = { ...process.env };
  if (args.transport === 'tcp') env.HORA_TRANSPORT = 'tcp';
  const out = execFileSync('node', [path.join(root, 'dist/ts/cli/main.js'), 'run', '-np', String(args.np), 'node',
    path.join(root, 'dist/ts/cli/main.js'), 'bench', '--max', String(maxBytes), '--no-check', '--reps', String(args.reps),
    ...(args.sync ? ['--sync'] : [])], { env, encoding: 'utf8', maxBuffer: 1 << 24 });
  return { text: out, rows: parseTable(out, 0, 6, 4) };
}

// The peers' traffic stays on loopback: Open MPI's TCP transport leaves the loopback interface out unless
// told otherwise (it would talk to this machine's own network address), and Gloo takes the interface of
// the host name's address unless GLOO_SOCKET_IFNAME names one.
const peerEnv = {
  ...process.env,
  MPI_FLAGS: `${process.env.MPI_FLAGS || ''} --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo`.trim(),
  GLOO_SOCKET_IFNAME: process.env.GLOO_SOCKET_IFNAME || 'lo',
};

// The peer's program times one loop per size; it runs --reps times and each row keeps its median time,
// as hora bench --reps does within one run.
function runPeer() {
  const runs = [];
  for (let i = 0; i < args.reps; i++) {
    const out = execFileSync('bash', [path.join(peersDir, 'run.sh'), args.peer, String(args.np), String(maxBytes)], { env: peerEnv, encoding: 'utf8', maxBuffer: 1 << 24 });
    runs.push({ text: out, rows: parseTable(out, 0, 4, 2) });
  }
  const rows = new Map();
  for (const b of runs[0].rows.keys()) {
    const mine = runs.map((r) => r.rows.get(b)).filter(Boolean).sort((x, y) => x.time_us - y.time_us);
    rows.set(b, mine[mine.length >> 1]);
  }
  return { text: runs.map((r) => r.text).join('\n'), rows };
}

const median = (v) => { const s = [...v].sort((a, b) => a - b); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

const pairs = [];
for (let i = 0; i < args.pairs; i++) {
  // Alternate who goes first, so neither side always runs on a warmer (or busier) machine.
  const first = i % 2 === 0 ? runHora : runPeer;
  const a = first();
  const b = (first === runHora ? runPeer : runHora)();
  pairs.push(first === runHora ? { hora: a, peer: b } : { hora: b, peer: a });
  process.stderr.write(`pair ${i + 1}/${args.pairs} done\n`);
}

const sizes = [...pairs[0].hora.rows.keys()].filter((b) => pairs.every((p) => p.peer.rows.has(b) && p.hora.rows.has(b)));
const peerName = args.peer === 'mpi' ? 'Open MPI' : 'Gloo';
console.log(`| bytes | hora busbw GB/s | ${peerName} busbw GB/s | hora/${peerName} (median of ${args.pairs} pairs) | min ratio | hora time_us | ${peerName} time_us |`);
console.log('|---:|---:|---:|---:|---:|---:|---:|');
const summary = [];
for (const b of sizes) {
  const ratios = pairs.map((p) => (p.peer.rows.get(b).busbw > 0 ? p.hora.rows.get(b).busbw / p.peer.rows.get(b).busbw : NaN));
  const timeRatios = pairs.map((p) => p.hora.rows.get(b).time_us / p.peer.rows.get(b).time_us);
  const row = {
    bytes: b,
    hora: median(pairs.map((p) => p.hora.rows.get(b).busbw)),
    peer: median(pairs.map((p) => p.peer.rows.get(b).busbw)),
    ratio: median(ratios.filter((r) => !Number.isNaN(r))),
    minRatio: Math.min(...ratios.filter((r) => !Number.isNaN(r))),
    horaTime: median(pairs.map((p) => p.hora.rows.get(b).time_us)),
    peerTime: median(pairs.map((p) => p.peer.rows.get(b).time_us)),
    timeRatio: median(timeRatios),
  };
  summary.push(row);
  const busOrTime = b < 4096 ? `${row.timeRatio.toFixed(3)} (time)` : row.ratio.toFixed(2);
  console.log(`| ${b} | ${row.hora.toFixed(3)} | ${row.peer.toFixed(3)} | ${busOrTime} | ${b < 4096 ? '' : row.minRatio.toFixed(2)} | ${row.horaTime.toFixed(1)} | ${row.peerTime.toFixed(1)} |`);
}
if (args.out) fs.writeFileSync(args.out, JSON.stringify({ args, date: new Date().toISOString(), summary, raw: pairs.map((p) => ({ hora: p.hora.text, peer: p.peer.text })) }, null, 1));
