'use strict';
// Save and load throughput of hora.checkpoint against the disk's own sequential write speed, measured in
// the same run.
//
//   node bench/checkpoint.js [--mb 200] [--ranks 1,2,4] [--rounds 3] [--dir DIR]
//
// The state is --mb MB of float32, sharded evenly over the ranks (each rank saves its 1/N), in 4 entries.
// Each round runs, for each rank count, in alternating order:
//   dd      `dd if=/dev/zero of=DIR/dd.bin bs=4M count=MB/4 conv=fsync`: the same bytes, one sequential
//           writer, flushed to disk before it exits (the save fsyncs too); MB/s from dd's own elapsed time
//   hora    `hora run -np N node bench/checkpoint.js --worker`: rank 0 times save (from a barrier to the
//           save's resolution on every rank: files fsynced, manifest renamed) and load (at the same size;
//           every chunk read is checked by sha256) of step `round`, keep 1
// Load reads what the save just wrote, from the page cache unless the machine dropped it: the figure is
// hora's own cost (reads, sha256, copies), not the disk's read speed.
// Prints one line per round and rank count, and the medians; DIR (default: a folder under os.tmpdir()) is
// removed at the end.
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ROOT = path.join(__dirname, '..');
const HORA = path.join(ROOT, 'dist', 'ts', 'cli', 'main.js');
const NODE = process.execPath;
const ENTRIES = 4;

function parseArgs(argv) {
  const o = { mb: 200, ranks: [1, 2, 4], rounds: 3, dir: null, worker: false };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--worker') {
      o.worker = true;
      continue;
    }
    const value = argv[++i];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === '--mb' && Number(value) >= 4) o.mb = Number(value);
    else if (flag === '--ranks') o.ranks = value.split(',').map(Number);
    else if (flag === '--rounds' && Number(value) >= 1) o.rounds = Number(value);
    else if (flag === '--dir') o.dir = value;
    else throw new Error(`unknown or invalid ${flag} ${value} (usage: node bench/checkpoint.js [--mb 200] [--ranks 1,2,4] [--rounds 3] [--dir DIR])`);
  }
  return o;
}

async function worker() {
  const hora = require('../dist/ts/index.js');
  await hora.init();
  const r = hora.rank(), p = hora.size();
  const dir = process.env.CKPT_BENCH_DIR;
  const total = (Number(process.env.CKPT_BENCH_MB) * 1024 * 1024) / 4 / ENTRIES;
  const base = Math.floor(total / p), extra = total % p;
  const start = (b) => b * base + Math.min(b, extra);
  const entries = {};
  for (let e = 0; e < ENTRIES; e++) {
    const data = new Float32Array(start(r + 1) - start(r));
    for (let i = 0; i < data.length; i++) data[i] = (i * 7 + e) % 1000;
    entries[`e${e}`] = { data, globalLength: total, offset: start(r) };
  }
  const step = Number(process.env.CKPT_BENCH_STEP);
  await hora.barrier();
  const t0 = process.hrtime.bigint();
  await hora.checkpoint.save(dir, entries, { step, keep: 1 });
  const t1 = process.hrtime.bigint();
  await hora.barrier();
  const t2 = process.hrtime.bigint();
  const loaded = await hora.checkpoint.load(dir, { step });
  const t3 = process.hrtime.bigint();
  if (loaded.entries.e0.data.length !== entries.e0.data.length) throw new Error('load returned another split');
  if (r === 0) process.stdout.write(`CKPT_BENCH ${JSON.stringify({ saveS: Number(t1 - t0) / 1e9, loadS: Number(t3 - t2) / 1e9 })}\n`);
  await hora.shutdown();
}

function runDd(dir, mb) {
  const file = path.join(dir, 'dd.bin');
  const r = spawnSync('dd', ['if=/dev/zero', `of=${file}`, 'bs=4M', `count=${Math.ceil(mb / 4)}`, 'conv=fsync'], { encoding: 'utf8' });
  fs.rmSync(file, { force: true });
  if (r.status !== 0) throw new Error(`dd failed: ${r.stderr}`);
  // "209715200 bytes (210 MB, 200 MiB) copied, 0.52 s, 403 MB/s"
  const m = /(\d+) bytes .* copied, ([\d.]+) s/.exec(r.stderr);
  if (!m) throw new Error(`cannot read dd's output: ${r.stderr}`);
  return Number(m[1]) / 1048576 / Number(m[2]);
}

function runHora(dir, mb, np, step) {
  const r = spawnSync(NODE, [HORA, 'run', '-np', String(np), '--', NODE, __filename, '--worker'], {
    encoding: 'utf8', timeout: 600_000, env: { ...process.env, CKPT_BENCH_DIR: dir, CKPT_BENCH_MB: String(mb), CKPT_BENCH_STEP: String(step) },
  });
  const line = (r.stdout || '').split('\n').find((l) => l.includes('CKPT_BENCH '));
  if (r.status !== 0 || !line) throw new Error(`hora run -np ${np} failed (status ${r.status}):\n${r.stdout}\n${r.stderr}`);
  const { saveS, loadS } = JSON.parse(line.slice(line.indexOf('CKPT_BENCH ') + 11));
  return { save: mb / saveS, load: mb / loadS };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function main() {
  const o = parseArgs(process.argv.slice(2));
  if (o.worker) return worker().catch((e) => {
    console.error(e);
    process.exit(1);
  });
  const dir = o.dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'hora-ckpt-bench-'));
  fs.mkdirSync(dir, { recursive: true });
  const rows = {};
  try {
    console.log(`hora.checkpoint: ${o.mb} MB of float32 in ${ENTRIES} sharded entries, ranks ${o.ranks.join(',')}, ${o.rounds} rounds, in ${dir}`);
    console.log(`${os.cpus().length} CPUs, ${os.cpus()[0]?.model ?? ''}, ${new Date().toISOString()}`);
    let step = 0;
    for (let round = 0; round < o.rounds; round++) {
      for (const np of o.ranks) {
        const ddFirst = (round + np) % 2 === 0;
        let dd, h;
        if (ddFirst) dd = runDd(dir, o.mb);
        h = runHora(dir, o.mb, np, ++step);
        if (!ddFirst) dd = runDd(dir, o.mb);
        (rows[np] ??= []).push({ dd, ...h });
        console.log(`round ${round + 1}, ${np} rank(s) (${ddFirst ? 'dd first' : 'hora first'}): dd ${dd.toFixed(0)} MB/s, ` +
          `save ${h.save.toFixed(0)} MB/s (${(h.save / dd).toFixed(2)}x dd), load ${h.load.toFixed(0)} MB/s`);
      }
    }
    console.log('medians:');
    for (const np of o.ranks) {
      const rs = rows[np];
      const ratio = median(rs.map((x) => x.save / x.dd));
      console.log(`  ${np} rank(s): dd ${median(rs.map((x) => x.dd)).toFixed(0)} MB/s, save ${median(rs.map((x) => x.save)).toFixed(0)} MB/s ` +
        `(${ratio.toFixed(2)}x dd), load ${median(rs.map((x) => x.load)).toFixed(0)} MB/s`);
    }
  } finally {
    if (!o.dir) fs.rmSync(dir, { recursive: true, force: true });
  }
}

main();
