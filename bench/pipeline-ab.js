#!/usr/bin/env node
// The throughput model of bench/pipeline.js (8 dense layers of width 512, a batch of 256, 2 stages, m = 8,
// 1F1B, partition 'auto', Dense kernel gradients once per batch), job by job against one process training
// the same model on the same batch, alternating, so that each pair sees the same machine:
//
//   node bench/pipeline-ab.js [--pairs 7] [--steps 8] [--before CHECKOUT] [--config JSON]
//
// --before runs a second checkout's pipeline (built: dist/ and build/) in each round as well, after this
// one's, and prints its ratios beside this checkout's: before and after a change.
// --config merges into the pipeline's configuration (e.g. '{"defer":false}' or '{"micro":16}').
// Each line is one round; the last gives the medians of the per-round ratios.
const { spawnSync } = require('child_process');
const path = require('path');

const HERE = path.resolve(__dirname, '..');
const opt = { pairs: 7, steps: 8, before: '', config: '{}' };
for (let i = 2; i < process.argv.length; i += 2) {
  const key = process.argv[i].replace(/^--/, '');
  if (!(key in opt) || process.argv[i + 1] === undefined) {
    console.error(`bench/pipeline-ab.js: unknown option or missing value: ${process.argv[i]}`);
    process.exit(2);
  }
  opt[key] = typeof opt[key] === 'number' ? Number(process.argv[i + 1]) : process.argv[i + 1];
}
const base = { batch: 256, warmup: 2, steps: opt.steps, schedule: '1f1b', widths: Array(9).fill(512) };
const piped = { ...base, micro: 8, partition: 'auto', defer: true, ...JSON.parse(opt.config) };

/** One job of bench/pipeline.js's worker in `dir`: samples per second, the cut and the bubble. */
function job(dir, config, single) {
  const args = single
    ? [path.join(dir, 'bench/pipeline.js'), '--worker']
    : [path.join(dir, 'dist/ts/cli/main.js'), 'run', '-np', '2', '--', process.execPath, path.join(dir, 'bench/pipeline.js'), '--worker'];
  const r = spawnSync(process.execPath, args, { cwd: dir, env: { ...process.env, BENCH_CONFIG: JSON.stringify(config) }, encoding: 'utf8', timeout: 600000 });
  const line = (r.stdout || '').split('\n').map((l) => l.replace(/^\[\d+\]\s*/, '')).find((l) => l.startsWith('BENCH '));
  if (r.status !== 0 || !line) throw new Error(`bench/pipeline-ab.js: a job in ${dir} failed (exit ${r.status}):\n${(r.stderr || '').slice(-2000)}`);
  const o = JSON.parse(line.slice('BENCH '.length));
  return { sps: o.samplesPerSecond, cut: o.plan ? `[${o.plan.counts.join(',')}]` : '', bubble: o.bubbleFraction };
}

const median = (v) => { const s = [...v].sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
const ratios = { after: [], before: [], change: [] };
console.log(`# ${new Date().toISOString()} pipeline ${JSON.stringify(piped)}${opt.before ? `; before: ${path.resolve(opt.before)}` : ''}`);
for (let i = 1; i <= opt.pairs; i++) {
  const one = job(HERE, { ...base, single: true }, true);
  const after = job(HERE, piped, false);
  let line = `${i} ${new Date().toISOString()} one process ${one.sps.toFixed(1)} samples/s; pipeline ${after.sps.toFixed(1)} ${after.cut} bubble ${after.bubble.toFixed(3)}: ${(after.sps / one.sps).toFixed(3)}x`;
  ratios.after.push(after.sps / one.sps);
  if (opt.before) {
    const before = job(path.resolve(opt.before), piped, false);
    ratios.before.push(before.sps / one.sps);
    ratios.change.push(after.sps / before.sps);
    line += `; before ${before.sps.toFixed(1)} ${before.cut} bubble ${before.bubble.toFixed(3)}: ${(before.sps / one.sps).toFixed(3)}x; this / before ${(after.sps / before.sps).toFixed(3)}`;
  }
  console.log(line);
}
console.log(`median of ${opt.pairs} pairs: pipeline / one process ${median(ratios.after).toFixed(3)}` +
  (opt.before ? `; before / one process ${median(ratios.before).toFixed(3)}; this / before ${median(ratios.change).toFixed(3)}` : ''));
