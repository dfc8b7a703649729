#!/usr/bin/env node
// Same-run, alternating comparison of `hora bench` at one size in two checkouts (say, before and after a
// change), each built: the machine may be shared and noisy, so the two take turns, and the figure is the
// median over rounds of the time ratio B/A, with the lowest pair beside it.
//   node bench/build-ab.js CHECKOUT_A CHECKOUT_B [--size 64M] [--rounds 7] [--np 2] [--transport auto|tcp]
//        [--iters 10] [--reps 3] [--sync 0|1] [--op allreduce]
const { execFileSync } = require('child_process');
const path = require('path');

const [a, b] = process.argv.slice(2, 4).map((p) => p && path.resolve(p));
if (!a || !b) {
  console.error('usage: node bench/build-ab.js CHECKOUT_A CHECKOUT_B [--size 64M] [--rounds 7] [--np 2] [--transport auto|tcp] [--iters 10] [--reps 3] [--sync 0|1] [--op allreduce]');
  process.exit(2);
}
const opt = { size: '64M', rounds: 7, np: 2, transport: 'auto', iters: 10, reps: 3, sync: 0, op: 'allreduce' };
for (let i = 4; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in opt) || process.argv[i + 1] === undefined) {
    console.error(`build-ab.js: unknown option or missing value: ${process.argv[i]}`);
    process.exit(2);
  }
  opt[key] = typeof opt[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}

/** The row's mean time in microseconds of one `hora bench` run in `checkout`. */
function run(checkout) {
  const env = { ...process.env, ...(opt.transport === 'tcp' ? { HORA_TRANSPORT: 'tcp' } : {}) };
  const main = path.join(checkout, 'dist/ts/cli/main.js');
  const args = [main, 'run', '-np', String(opt.np), 'node', main, 'bench', '--op', opt.op, '--min', opt.size, '--max', opt.size,
    '--iters', String(opt.iters), '--reps', String(opt.reps), ...(opt.sync ? ['--sync'] : [])];
  const out = execFileSync('node', args, { env, encoding: 'utf8', cwd: checkout });
  const row = out.split('\n').map((l) => l.replace(/^\[0\]\s*/, '').trim().split(/\s+/)).find((c) => /^\d+$/.test(c[0]));
  if (!row) throw new Error(`no result row from ${checkout}:\n${out}`);
  if (Number(row[7]) !== 0) throw new Error(`${checkout}: ${row[7]} wrong results`);
  return Number(row[4]);
}

const median = (v) => { const s = [...v].sort((x, y) => x - y); return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
const res = { a: [], b: [] };
for (let i = 0; i < opt.rounds; i++) {
  for (const k of i % 2 === 0 ? ['a', 'b'] : ['b', 'a']) res[k].push(run(k === 'a' ? a : b));
  process.stderr.write(`round ${i + 1}/${opt.rounds}: A ${res.a[i].toFixed(1)} us, B ${res.b[i].toFixed(1)} us\n`);
}
const ratios = res.b.map((v, i) => v / res.a[i]);
const sums = res.a.map((x, i) => x + res.b[i]);
const lowest = sums.indexOf(Math.min(...sums));
console.log(`${opt.op} ${opt.size}, np=${opt.np} ${opt.transport}${opt.sync ? ' sync' : ''}, ${opt.rounds} alternating rounds; A = ${a}, B = ${b}`);
console.log(`A median ${median(res.a).toFixed(1)} us, B median ${median(res.b).toFixed(1)} us, B/A median of ratios ${median(ratios).toFixed(3)}, ` +
  `lowest pair (fastest A+B): A ${res.a[lowest].toFixed(1)} us, B ${res.b[lowest].toFixed(1)} us, ratio ${ratios[lowest].toFixed(3)}`);
