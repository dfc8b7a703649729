#!/usr/bin/env node
// Same-run, alternating comparison of bench/small-latency.js in two checkouts (say, before and after a
// change), each built (`npm ci`): the machine may be shared and noisy, so the two take turns, and the
// figure per size is the median over rounds of the ratio B/A.
//   node bench/small-latency-ab.js CHECKOUT_A CHECKOUT_B [--rounds 5] [--np 2] [--transport auto|tcp]
// SIZES, MODES, ITERS and CPU pass through to bench/small-latency.js.
const { execFileSync } = require('child_process');
const path = require('path');

const [a, b] = process.argv.slice(2, 4).map((p) => path.resolve(p));
if (!a || !b) {
  console.error('usage: node bench/small-latency-ab.js CHECKOUT_A CHECKOUT_B [--rounds 5] [--np 2] [--transport auto|tcp]');
  process.exit(2);
}
const opt = { rounds: 5, np: 2, transport: 'auto' };
for (let i = 4; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in opt)) {
    console.error(`small-latency-ab.js: unknown option ${process.argv[i]}`);
    process.exit(2);
  }
  opt[key] = typeof opt[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}

function run(checkout) {
  const env = { ...process.env, ...(opt.transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {}) };
  const out = execFileSync('node', [path.join(checkout, 'dist/ts/cli/main.js'), 'run', '-np', String(opt.np), 'node',
    path.join(checkout, 'bench/small-latency.js')], { env, encoding: 'utf8', cwd: checkout });
  const line = out.split('\n').find((l) => /^\[0\] \{/.test(l));
  if (!line) throw new Error(`no result from ${checkout}:\n${out}`);
  return JSON.parse(line.slice(4));
}

const median = (v) => { const s = [...v].sort((x, y) => x - y); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const res = { a: [], b: [] };
for (let i = 0; i < opt.rounds; i++) {
  // Alternate who goes first, so neither side always runs on a warmer (or busier) machine.
  for (const k of i % 2 === 0 ? ['a', 'b'] : ['b', 'a']) res[k].push(run(k === 'a' ? a : b));
  process.stderr.write(`round ${i + 1}/${opt.rounds} done\n`);
}
console.log(`np=${opt.np} ${opt.transport}, ${opt.rounds} alternating rounds; A = ${a}, B = ${b}`);
console.log('| what | A (median) | B (median) | B/A (median of ratios) |\n|---|---:|---:|---:|');
for (const key of Object.keys(res.b[0])) {
  if (typeof res.b[0][key] !== 'number' || key === 'ranks' || key === 'iters') continue;
  const x = res.a.map((r) => r[key]), y = res.b.map((r) => r[key]);
  console.log(`| ${key} | ${median(x).toFixed(1)} | ${median(y).toFixed(1)} | ${median(y.map((v, i) => v / x[i])).toFixed(2)} |`);
}
