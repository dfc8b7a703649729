'use strict';
// Save and load throughput of hora.checkpoint against the disk's own sequential write speed, measured in
// the same run.
//
//   node bench/checkpoint.js [--mb 200] [--ranks 1,2,4] [--rounds 3] [--dir DIR]
//
// The state is --mb MB of float32, sharded evenly over the ranks (each rank saves its 1/N), in 4 entries.
// Each round runs, for each rank count, in alternating order (dd first in one round, hora first in the next):
//   dd      `dd if=/dev/zero of=DIR/dd.bin bs=4M count=MB/4 conv=fsync`: the same bytes, one sequential
//           writer, flushed to disk before it exits (hora's save fsyncs every file too); then
//           `dd if=DIR/dd.bin of=/dev/null bs=4M`: the file just written, read back from the page cache
//           (nothing here drops the cache: it is shared with other users of the machine); MB/s from dd's
//           own elapsed times
//   hora    `hora run -np N node bench/checkpoint.js --worker`: rank 0 times, each from a barrier to the
//           call's resolution on every rank,
//             save   a step into an empty DIR/hora (files fsynced, renamed, the manifest last), as dd
//                    writes a new file;
//             load   of that step at the same size, every chunk read checked by its checksum (CRC-32C): it
//                    reads what the save just wrote, from the page cache, as dd's read does;
//             keep   a save of the next step with keep 1, which also removes the first step (its files)
//                    before it resolves: what a job that saves with keep pays.
// Ratios are hora / dd of the same round; the medians are of those ratios, "lowest" the round with the
// lowest one. The goal (docs/checkpoint.md): save and load >= 0.7x dd's write.
// DIR (default: a folder under os.tmpdir()) is removed at the end.
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
  const timed = async (f) => {
    await hora.barrier();
    const t0 = process.hrtime.bigint();
    const out = await f();
    return { s: Number(process.hrtime.bigint() - t0) / 1e9, out };
  };
  const saved = await timed(() => hora.checkpoint.save(dir, entries, { step }));
  const loaded = await timed(() => hora.checkpoint.load(dir, { step }));
  if (loaded.out.entries.e0.data.length !== entries.e0.data.length) throw new Error('load returned another split');
  const kept = await timed(() => hora.checkpoint.save(dir, entries, { step: step + 1, keep: 1 }));
  if (r === 0) process.stdout.write(`CKPT_BENCH ${JSON.stringify({ saveS: saved.s, loadS: loaded.s, keepS: kept.s })}\n`);
  await hora.shutdown();
}

/** MB/s from dd's "209715200 bytes (210 MB, 200 MiB) copied, 0.52 s, 403 MB/s". */
function ddRate(r) {
  if (r.status !== 0) throw new Error(`dd failed: ${r.stderr}`);
  const m = /(\d+) bytes .* copied, ([\d.]+) s/.exec(r.stderr);
  if (!m) throw new Error(`cannot read dd's output: ${r.stderr}`);
  return Number(m[1]) / 1048576 / Number(m[2]);
}

function runDd(dir, mb) {
  const file = path.join(dir, 'dd.bin');
  try {
    const write = ddRate(spawnSync('dd', ['if=/dev/zero', `of=${file}`, 'bs=4M', `count=${Math.ceil(mb / 4)}`, 'conv=fsync'], { encoding: 'utf8' }));
    const read = ddRate(spawnSync('dd', [`if=${file}`, 'of=/dev/null', 'bs=4M'], { encoding: 'utf8' }));
    return { write, read };
  } finally {
    fs.rmSync(file, { force: true });
  }
}

function runHora(dir, mb, np, step) {
  const into = path.join(dir, 'hora');
  fs.rmSync(into, { recursive: true, force: true });
  const r = spawnSync(NODE, [HORA, 'run', '-np', String(np), '--', NODE, __filename, '--worker'], {
    encoding: 'utf8', timeout: 600_000, env: { ...process.env, CKPT_BENCH_DIR: into, CKPT_BENCH_MB: String(mb), CKPT_BENCH_STEP: String(step) },
  });
  fs.rmSync(into, { recursive: true, force: true });
  const line = (r.stdout || '').split('\n').find((l) => l.includes('CKPT_BENCH '));
  if (r.status !== 0 || !line) throw new Error(`hora run -np ${np} failed (status ${r.status}):\n${r.stdout}\n${r.stderr}`);
  const { saveS, loadS, keepS } = JSON.parse(line.slice(line.indexOf('CKPT_BENCH ') + 11));
  return { save: mb / saveS, load: mb / loadS, keep: mb / keepS };
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
    const f = (x) => x.toFixed(0), x2 = (x) => `${x.toFixed(2)}x`;
    for (let round = 0; round < o.rounds; round++) {
      for (const np of o.ranks) {
        const ddFirst = (round + np) % 2 === 0;
        let dd, h;
        if (ddFirst) dd = runDd(dir, o.mb);
        h = runHora(dir, o.mb, np, (step += 2));
        if (!ddFirst) dd = runDd(dir, o.mb);
        (rows[np] ??= []).push({ dd, ...h });
        console.log(`round ${round + 1}, ${np} rank(s) (${ddFirst ? 'dd first' : 'hora first'}): dd write ${f(dd.write)} MB/s, read ${f(dd.read)} MB/s; ` +
          `save ${f(h.save)} MB/s (${x2(h.save / dd.write)} dd write), load ${f(h.load)} MB/s (${x2(h.load / dd.write)} dd write, ${x2(h.load / dd.read)} dd read), ` +
          `save with keep 1 ${f(h.keep)} MB/s (${x2(h.keep / dd.write)})`);
      }
    }
    console.log(`medians of ${o.rounds} round(s), each ratio hora / dd of the same round (lowest: the round with the lowest ratio):`);
    for (const np of o.ranks) {
      const rs = rows[np];
      const ratio = (k, d) => {
        const xs = rs.map((x) => x[k] / x.dd[d]);
        return `${x2(median(xs))} dd ${d}, lowest ${x2(Math.min(...xs))}`;
      };
      console.log(`  ${np} rank(s): dd write ${f(median(rs.map((x) => x.dd.write)))} MB/s, read ${f(median(rs.map((x) => x.dd.read)))} MB/s; ` +
        `save ${f(median(rs.map((x) => x.save)))} MB/s (${ratio('save', 'write')}), load ${f(median(rs.map((x) => x.load)))} MB/s (${ratio('load', 'write')}; ${ratio('load', 'read')}), ` +
        `save with keep 1 ${f(median(rs.map((x) => x.keep)))} MB/s (${ratio('keep', 'write')})`);
    }
  } finally {
    if (!o.dir) fs.rmSync(dir, { recursive: true, force: true });
  }
}

main();
