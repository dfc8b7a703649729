#!/usr/bin/env node
// What HORA_TIMELINE costs: latency of a small allreduce without and with the timeline, in alternating
// 2-rank jobs (the machine is shared and noisy, so the two sides take turns, and the first side
// alternates too). Each job times every iteration and reports the median, which a few descheduled
// iterations do not move (on a busy machine they dominate a mean). Prints each pair and the median over
// pairs of the ratio with / without.
//
//   node bench/timeline-overhead.js [--pairs 9] [--np 2] [--bytes 8] [--iters 5000] [--sync 1]
//                                   [--with-timeline 0] [--without OTHER_CHECKOUT]
//
// --sync 1 blocks on Work.wait() in the loop; without it each collective is awaited.
// What the timeline costs when off: `--with-timeline 0 --without DIR`, DIR a built checkout of the code
// before the timeline existed, compares this build (timeline off) with that one.
//
// Under `hora run` (HORA_RANK set) this file is the worker: BENCH_ROOT names the checkout whose hora it
// loads; rank 0 prints {"median_us", "mean_us"}.
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const here = path.resolve(__dirname, '..');

async function worker() {
  const hora = require(path.join(process.env.BENCH_ROOT, 'dist', 'ts', 'index.js'));
  const iters = Number(process.env.BENCH_ITERS);
  const sync = process.env.BENCH_SYNC === '1';
  const x = new Uint8Array(Number(process.env.BENCH_BYTES));
  await hora.init();
  const times = [];
  for (let i = 0; i < iters + Math.ceil(iters / 10); i++) {
    const t0 = process.hrtime.bigint();
    const w = hora.allreduce(x, { op: 'sum', inplace: true });
    if (sync) w.wait();
    else await w;
    times.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  const timed = times.slice(times.length - iters).sort((a, b) => a - b);
  if (hora.rank() === 0) {
    const mean = timed.reduce((a, b) => a + b, 0) / timed.length;
    console.log(JSON.stringify({ median_us: timed[timed.length >> 1], mean_us: mean }));
  }
  await hora.shutdown();
}

function driver() {
  const args = { pairs: 9, np: 2, bytes: 8, iters: 5000, sync: 0, 'with-timeline': 1, without: here };
  for (let i = 2; i < process.argv.length; i += 2) {
    const key = process.argv[i].replace(/^--/, '');
    if (!(key in args)) { console.error(`timeline-overhead.js: unknown option ${process.argv[i]}`); process.exit(2); }
    args[key] = typeof args[key] === 'number' ? Number(process.argv[i + 1]) : path.resolve(process.argv[i + 1]);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-timeline-overhead-'));
  const job = (withSide) => {
    const root = withSide ? here : args.without;
    const timeline = withSide && args['with-timeline'] === 1 ? ['--timeline', path.join(dir, 'trace.json')] : [];
    const env = { ...process.env, BENCH_ROOT: root, BENCH_ITERS: String(args.iters), BENCH_BYTES: String(args.bytes), BENCH_SYNC: String(args.sync) };
    const out = execFileSync(process.execPath, [path.join(root, 'dist', 'ts', 'cli', 'main.js'), 'run', '-np', String(args.np), ...timeline,
      process.execPath, __filename], { encoding: 'utf8', env, stdio: ['ignore', 'pipe', 'ignore'] });
    const line = out.split('\n').find((l) => l.includes('median_us'));
    if (!line) throw new Error(`no result in:\n${out}`);
    return JSON.parse(line.replace(/^\[\d+\]\s*/, ''));
  };
  const ratios = [];
  for (let p = 0; p < args.pairs; p++) {
    const r = {};
    for (const side of p % 2 === 0 ? [false, true] : [true, false]) r[side] = job(side);
    const ratio = r[true].median_us / r[false].median_us;
    ratios.push(ratio);
    console.log(`pair ${p + 1}: median without ${r[false].median_us.toFixed(1)} us (mean ${r[false].mean_us.toFixed(1)}), ` +
      `with ${r[true].median_us.toFixed(1)} us (mean ${r[true].mean_us.toFixed(1)}), ratio ${ratio.toFixed(3)}`);
  }
  fs.rmSync(dir, { recursive: true, force: true });
  const s = [...ratios].sort((a, b) => a - b);
  const median = s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  const what = args['with-timeline'] ? 'with/without timeline' : `this build (timeline off) / ${args.without}`;
  console.log(`${args.bytes}-byte allreduce, ${args.np} ranks, ${args.sync ? 'wait()' : 'await'}: median ratio ${what} ` +
    `${median.toFixed(3)} over ${s.length} pairs (min ${s[0].toFixed(3)}, max ${s[s.length - 1].toFixed(3)})`);
}

if (process.env.HORA_RANK !== undefined) {
  worker().catch((e) => {
    console.error(e);
    process.exit(1);
  });
} else {
  driver();
}
