#!/usr/bin/env node
// Same-run, alternating comparison of send/recv ping-pong latency in two checkouts (say, before and after
// a change), each built: the machine is shared and noisy, so the two take turns.
//   node bench/pingpong-ab.js CHECKOUT_A CHECKOUT_B [--rounds 3] [--sizes 131072,1048576] [--iters 300]
//                             [--transport auto|tcp] [--window 0]
// Each round runs one 2-rank job per checkout (who goes first alternates); a job times --iters round trips
// per size with Work.wait(), after 20 unmeasured ones, and reports the median half round trip. Prints
// every round's figures per size (A / B) and the median over rounds of the ratio B/A. With --window N it
// times --iters windows of N messages per size instead (osu_bw's form, bench/pingpong.js windowWaited,
// after 3 unmeasured ones) and reports the median MB/s of a window.
'use strict';
const { execFileSync } = require('node:child_process');
const path = require('node:path');

if (process.env.PINGPONG_WORKER) {
  const hora = require(process.env.PINGPONG_WORKER);
  (async () => {
    await hora.init();
    const { pingPongWaited, windowWaited } = require('./pingpong');
    const out = {};
    const windowLength = Number(process.env.PINGPONG_WINDOW);
    for (const bytes of process.env.PINGPONG_SIZES.split(',').map(Number)) {
      const iters = Number(process.env.PINGPONG_ITERS);
      const t = new Float64Array(iters);
      if (windowLength > 0) {
        // Each message of the window in an array of its own, written once; MB/s of each window.
        const window = Array.from({ length: windowLength }, () => new Uint8Array(bytes).fill(hora.rank() + 1));
        const ack = new Uint8Array(4);
        for (let i = -3; i < iters; i++) {
          const s = windowWaited(hora, window, ack);
          if (i >= 0) t[i] = (bytes * windowLength) / s / 1e6;
        }
      } else {
        const buf = new Uint8Array(bytes).fill(hora.rank() + 1);
        pingPongWaited(hora, buf, -20, iters, t);
      }
      t.sort();
      out[bytes] = t[iters >> 1];
    }
    if (hora.rank() === 0) console.log(`PINGPONG ${JSON.stringify(out)}`);
    await hora.shutdown();
  })();
  return;
}

const [a, b] = process.argv.slice(2, 4).map((p) => p && path.resolve(p));
if (!a || !b) {
  console.error('usage: node bench/pingpong-ab.js CHECKOUT_A CHECKOUT_B [--rounds 3] [--sizes 131072,1048576] [--iters 300] [--transport auto|tcp] [--window 0]');
  process.exit(2);
}
const opt = { rounds: 3, sizes: '131072,524288,1048576,4194304', iters: 300, transport: 'auto', window: 0 };
for (let i = 4; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in opt)) {
    console.error(`pingpong-ab.js: unknown option ${process.argv[i]}`);
    process.exit(2);
  }
  opt[key] = typeof opt[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}

function run(checkout) {
  const env = {
    ...process.env, PINGPONG_WORKER: checkout, PINGPONG_SIZES: opt.sizes, PINGPONG_ITERS: String(opt.iters), PINGPONG_WINDOW: String(opt.window),
    ...(opt.transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {}),
  };
  const out = execFileSync(process.execPath, [path.join(checkout, 'dist/ts/cli/main.js'), 'run', '-np', '2', process.execPath, __filename],
    { env, encoding: 'utf8', cwd: checkout });
  const line = out.split('\n').find((l) => l.includes('PINGPONG '));
  if (!line) throw new Error(`no result from ${checkout}:\n${out}`);
  return JSON.parse(line.slice(line.indexOf('PINGPONG ') + 9));
}

const median = (v) => { const s = [...v].sort((x, y) => x - y); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const res = { a: [], b: [] };
for (let i = 0; i < opt.rounds; i++) {
  for (const k of i % 2 === 0 ? ['a', 'b'] : ['b', 'a']) res[k].push(run(k === 'a' ? a : b));
  process.stderr.write(`round ${i + 1}/${opt.rounds} done\n`);
}
const what = opt.window > 0 ? `median MB/s of windows of ${opt.window} messages` : 'median half round trip in µs';
console.log(`${opt.transport}, ${opt.rounds} alternating rounds, ${what}; A = ${a}, B = ${b}`);
console.log('| bytes | A (each round) | B (each round) | B/A (median of ratios) |\n|---:|---:|---:|---:|');
for (const bytes of Object.keys(res.a[0])) {
  const x = res.a.map((r) => r[bytes]), y = res.b.map((r) => r[bytes]);
  console.log(`| ${bytes} | ${x.map((v) => v.toFixed(1)).join(' / ')} | ${y.map((v) => v.toFixed(1)).join(' / ')} | ${median(y.map((v, i) => v / x[i])).toFixed(2)} |`);
}
