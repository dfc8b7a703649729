#!/usr/bin/env node
// Pipeline parallelism on this machine (docs/pipeline.md): hora/tfjs's pipeline() against one process.
//
//   node bench/pipeline.js [--part all|throughput|bubble|memory|partition|microbatch] [--repeats 3] [--quick] [--out FILE]
//
// Parts (each job is a fresh `hora run -np 2`; the pipeline and its baseline take turns, --repeats times,
// and the figure quoted is the median):
//   throughput  8 dense layers of equal cost (width 512) in 2 stages, m = 8 micro-batches of a batch of 256,
//               samples per second against the same model trained by one process on the same batch, with
//               backwards from kept records, recomputing, and keeping records with deferWeightGradients;
//               GPipe's bound is S x m / (m + S - 1) = 1.78x.
//               Also two such processes at once, one per core, no communication (machineFactor: the slower
//               one's speed over one alone): what the machine gives two busy processes.
//   bubble      the same model with m = 2, 4, 8, 16: the bubble fraction measured (pipe.stats) against
//               (S - 1) / (m + S - 1), both schedules.
//   memory      m = 16: each stage's peak of bytes held for backwards still to run, with 1F1B and with GPipe,
//               keeping records and recomputing.
//   partition   7 dense layers of unequal cost: every cut into 2 stages, measured, against partition 'auto':
//               auto's slowest stage against the best cut's, and its throughput against the even cut's.
//   microbatch  one process, no hora: the throughput model's batch trained whole against the same batch as
//               m = 8 micro-batches whose gradients are summed and applied once (what the stages compute
//               between them), alternating: what cutting the batch costs tfjs before any pipelining. Also
//               the micro-batches through one stage with deferWeightGradients (kernel gradients once).
// --quick shrinks every model and run so that the whole script finishes in about a minute (for the tests;
// its figures mean nothing). Prints one JSON line per measurement and a summary; --out writes them all.
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');
const HORA = path.join(ROOT, 'dist', 'ts', 'cli', 'main.js');

// ---------------------------------------------------------------------------------------------------
// Worker: one training run, alone (the baseline) or as a rank of `hora run`. Config in BENCH_CONFIG.

async function worker() {
  const c = JSON.parse(process.env.BENCH_CONFIG);
  const tf = require('@tensorflow/tfjs');
  await tf.setBackend('cpu');
  tf.env().set('PROD', true);
  const { seeded } = require(path.join(ROOT, 'dist', 'adapters', 'tfjs', 'pipeline', 'stage.js'));
  const next = seeded(7);
  const model = tf.sequential({
    layers: c.widths.slice(1).map((units, i) => tf.layers.dense({
      units, activation: 'tanh', ...(i === 0 ? { inputShape: [c.widths[0]] } : {}),
    })),
  });
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => (next() - 0.5) * 0.1), w.shape)));
  const x = tf.tensor2d(Float32Array.from({ length: c.batch * c.widths[0] }, next), [c.batch, c.widths[0]]);
  const y = tf.tensor2d(Float32Array.from({ length: c.batch * c.widths[c.widths.length - 1] }, next), [c.batch, c.widths[c.widths.length - 1]]);
  let step;
  let finish = async () => ({});
  let hora = null;
  if (c.single && c.accumulate && c.defer) {
    // The same, through a pipeline stage that is both first and last, its Dense kernels' gradients
    // computed once per batch (deferWeightGradients).
    const { Stage } = require(path.join(ROOT, 'dist', 'adapters', 'tfjs', 'pipeline', 'stage.js'));
    const stage = new Stage(model.layers, [null, c.widths[0]], true, true, true);
    const optimizer = tf.train.sgd(0.01);
    stage.compile({ optimizer, loss: 'meanSquaredError' });
    const xs = tf.split(x, c.accumulate);
    const ys = tf.split(y, c.accumulate);
    step = () => {
      for (let i = 0; i < c.accumulate; i++) stage.lossAndBackward(xs[i], ys[i], 1 / c.accumulate, i + 1);
      stage.update(optimizer, null);
    };
  } else if (c.single && c.accumulate) {
    // The batch as c.accumulate micro-batches: their gradients summed, weighted by their share, applied once.
    const optimizer = tf.train.sgd(0.01);
    const xs = tf.split(x, c.accumulate);
    const ys = tf.split(y, c.accumulate);
    step = () => {
      let sums = null;
      for (let i = 0; i < c.accumulate; i++) {
        const { value, grads } = tf.variableGrads(() => tf.mul(tf.losses.meanSquaredError(ys[i], model.predict(xs[i])), 1 / c.accumulate));
        value.dispose();
        if (sums === null) sums = grads;
        else for (const k of Object.keys(grads)) { const prev = sums[k]; sums[k] = tf.add(prev, grads[k]); prev.dispose(); grads[k].dispose(); }
      }
      optimizer.applyGradients(sums);
      for (const t of Object.values(sums)) t.dispose();
    };
  } else if (c.single) {
    model.compile({ optimizer: tf.train.sgd(0.01), loss: 'meanSquaredError' });
    step = () => model.trainOnBatch(x, y);
  } else {
    hora = require(path.join(ROOT, 'dist', 'ts', 'index.js'));
    const { pipeline } = require(path.join(ROOT, 'dist', 'adapters', 'tfjs', 'index.js'));
    await hora.init();
    const pipe = pipeline(model, {
      stages: hora.size(), microBatches: c.micro, schedule: c.schedule, partition: c.partition, recompute: Boolean(c.recompute), deferWeightGradients: Boolean(c.defer),
    });
    pipe.compile({ optimizer: tf.train.sgd(0.01), loss: 'meanSquaredError' });
    step = () => pipe.trainOnBatch(x, y);
    const start = { busy: null, wall: 0 };
    const warmed = () => { start.busy = pipe.stats.total.busyMs.slice(); start.wall = pipe.stats.total.wallMs; };
    finish = async () => {
      const busyMs = pipe.stats.total.busyMs.map((b, i) => b - start.busy[i]);
      const wallMs = pipe.stats.total.wallMs - start.wall;
      const stash = await hora.allgather(Float64Array.of(pipe.stats.peakStashBytes, pipe.stats.peakStashMicroBatches), { name: 'bench.stash' });
      return {
        plan: pipe.plan, busyMs, wallMs, bubbleFraction: 1 - busyMs.reduce((a, b) => a + b, 0) / (pipe.stages * wallMs),
        peakStashBytes: Array.from({ length: hora.size() }, (_, r) => stash[2 * r]),
        peakStashMicroBatches: Array.from({ length: hora.size() }, (_, r) => stash[2 * r + 1]),
      };
    };
    step.warmed = warmed;
  }
  for (let i = 0; i < c.warmup; i++) await step();
  if (step.warmed) step.warmed();
  const t0 = performance.now();
  for (let i = 0; i < c.steps; i++) await step();
  const seconds = (performance.now() - t0) / 1000;
  const extra = await finish();
  if (!hora || hora.rank() === 0) process.stdout.write(`BENCH ${JSON.stringify({ samplesPerSecond: c.steps * c.batch / seconds, seconds, ...extra })}\n`);
  if (hora) await hora.shutdown();
}

// ---------------------------------------------------------------------------------------------------
// Driver.

function run(config) {
  return runAll(config)[0];
}

// config.twins: two one-process runs at once, one per core, with no communication: what this machine gives
// each of two busy processes, against which a 2-stage pipeline's speed-up is bounded too.
function runAll(config) {
  const env = { ...process.env, BENCH_CONFIG: JSON.stringify(config) };
  const worker = `"${process.execPath}" "${__filename}" --worker`;
  const r = config.twins
    ? spawnSync('bash', ['-c', `${worker} & ${worker} & wait`], { cwd: ROOT, env, encoding: 'utf8', timeout: 600000 })
    : spawnSync(process.execPath, config.single ? [__filename, '--worker']
      : [HORA, 'run', '-np', String(config.stages ?? 2), '--', process.execPath, __filename, '--worker'], { cwd: ROOT, env, encoding: 'utf8', timeout: 600000 });
  const lines = (r.stdout || '').split('\n').map((l) => l.replace(/^\[\d+\]\s*/, '')).filter((l) => l.startsWith('BENCH '));
  if (r.status !== 0 || lines.length < (config.twins ? 2 : 1)) throw new Error(`bench/pipeline.js: a run failed (${JSON.stringify(config)}): exit ${r.status}\n${(r.stderr || '').slice(-2000)}`);
  return lines.map((l) => JSON.parse(l.slice('BENCH '.length)));
}

const median = (xs) => { const s = xs.slice().sort((a, b) => a - b); const m = s.length >> 1; return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };

function main() {
  const args = { part: 'all', repeats: 3, quick: false, out: '' };
  for (let i = 2; i < process.argv.length; i++) {
    const key = process.argv[i].replace(/^--/, '');
    if (key === 'quick') { args.quick = true; continue; }
    if (!(key in args)) { console.error(`bench/pipeline.js: unknown option ${process.argv[i]}`); process.exit(2); }
    args[key] = typeof args[key] === 'number' ? Number(process.argv[++i]) : process.argv[++i];
  }
  const parts = args.part === 'all' ? ['throughput', 'bubble', 'memory', 'partition', 'microbatch'] : [args.part];
  const q = args.quick;
  const equal = q ? [16, 16, 16, 16, 16] : [512, 512, 512, 512, 512, 512, 512, 512, 512];
  const unequal = q ? [16, 32, 8, 16, 8] : [256, 1024, 128, 512, 256, 1024, 128, 64];
  const base = { batch: q ? 16 : 256, warmup: q ? 1 : 3, steps: q ? 2 : 20, schedule: '1f1b' };
  const results = [];
  const emit = (r) => { results.push(r); console.log(JSON.stringify(r)); };
  const repeats = q ? 1 : args.repeats;

  if (parts.includes('throughput')) {
    const single = [];
    const piped = [];
    const recomputed = [];
    const deferred = [];
    const twins = [];
    for (let i = 0; i < repeats; i++) {
      single.push(run({ ...base, widths: equal, single: true }).samplesPerSecond);
      const pair = runAll({ ...base, widths: equal, single: true, twins: true });
      twins.push(Math.min(...pair.map((r) => r.samplesPerSecond)));
      piped.push(run({ ...base, widths: equal, micro: 8, partition: 'auto' }).samplesPerSecond);
      recomputed.push(run({ ...base, widths: equal, micro: 8, partition: 'auto', recompute: true }).samplesPerSecond);
      deferred.push(run({ ...base, widths: equal, micro: 8, partition: 'auto', defer: true }).samplesPerSecond);
    }
    emit({
      part: 'throughput', stages: 2, micro: 8, bound: 2 * 8 / (8 + 1),
      singleSamplesPerSecond: single, pipelineSamplesPerSecond: piped, recomputeSamplesPerSecond: recomputed, deferredSamplesPerSecond: deferred,
      twinSamplesPerSecond: twins, machineFactor: median(twins.map((p, i) => p / single[i])),
      speedup: median(piped.map((p, i) => p / single[i])), recomputeSpeedup: median(recomputed.map((p, i) => p / single[i])),
      deferredSpeedup: median(deferred.map((p, i) => p / single[i])),
    });
  }
  if (parts.includes('bubble')) {
    for (const schedule of ['gpipe', '1f1b']) {
      for (const m of q ? [2, 4] : [2, 4, 8, 16]) {
        const runs = Array.from({ length: repeats }, () => run({ ...base, widths: equal, micro: m, schedule, partition: 'auto' }));
        emit({ part: 'bubble', schedule, micro: m, bubbleFraction: median(runs.map((r) => r.bubbleFraction)), expected: 1 / (m + 1), runs: runs.map((r) => r.bubbleFraction) });
      }
    }
  }
  if (parts.includes('memory')) {
    const m = q ? 4 : 16;
    for (const recompute of [false, true]) {
      for (const schedule of ['gpipe', '1f1b']) {
        const r = run({ ...base, widths: equal, micro: m, schedule, partition: [4, 4].map((n) => (q ? n / 2 : n)), steps: 1, recompute });
        emit({ part: 'memory', schedule, recompute, micro: m, peakStashBytes: r.peakStashBytes, peakStashMicroBatches: r.peakStashMicroBatches });
      }
    }
  }
  if (parts.includes('partition')) {
    const L = unequal.length - 1;
    const cuts = Array.from({ length: L - 1 }, (_, i) => [i + 1, L - i - 1]);
    const measured = {};
    for (const cut of [...cuts, 'auto']) {
      const runs = Array.from({ length: repeats }, () => run({ ...base, widths: unequal, micro: 8, partition: cut }));
      const key = cut === 'auto' ? 'auto' : cut.join(',');
      measured[key] = {
        counts: runs[0].plan.counts,
        slowestStageMs: median(runs.map((r) => Math.max(...r.busyMs))),
        samplesPerSecond: median(runs.map((r) => r.samplesPerSecond)),
        predicted: runs[0].plan.stageTimes,
      };
    }
    const best = Math.min(...cuts.map((c) => measured[c.join(',')].slowestStageMs));
    const even = [Math.ceil(L / 2), Math.floor(L / 2)].join(',');
    emit({
      part: 'partition', measured, autoCut: measured.auto.counts,
      autoOverBest: measured.auto.slowestStageMs / best, autoOverEvenThroughput: measured.auto.samplesPerSecond / measured[even].samplesPerSecond,
    });
  }
  if (parts.includes('microbatch')) {
    const whole = [];
    const cut = [];
    const cutDeferred = [];
    for (let i = 0; i < repeats; i++) {
      whole.push(run({ ...base, widths: equal, single: true }).samplesPerSecond);
      cut.push(run({ ...base, widths: equal, single: true, accumulate: q ? 2 : 8 }).samplesPerSecond);
      cutDeferred.push(run({ ...base, widths: equal, single: true, accumulate: q ? 2 : 8, defer: true }).samplesPerSecond);
    }
    // boundWithThisCost: the throughput part's bound (m = 8) scaled by what micro-batching costs here.
    const ratio = median(cut.map((c, i) => c / whole[i]));
    const deferredRatio = median(cutDeferred.map((c, i) => c / whole[i]));
    emit({
      part: 'microbatch', micro: q ? 2 : 8, wholeSamplesPerSecond: whole, microBatchedSamplesPerSecond: cut,
      microBatchedDeferredSamplesPerSecond: cutDeferred,
      microBatchedOverWhole: ratio, boundWithThisCost: (2 * 8 / (8 + 1)) * ratio,
      deferredOverWhole: deferredRatio, boundWithDeferredCost: (2 * 8 / (8 + 1)) * deferredRatio,
    });
  }
  if (args.out) fs.writeFileSync(args.out, JSON.stringify({ date: new Date().toISOString(), quick: q, repeats, results }, null, 2) + '\n');
}

if (process.argv.includes('--worker')) {
  worker().catch((e) => { console.error(e); process.exit(1); });
} else {
  try {
    main();
  } catch (e) {
    console.error(e.message);
    process.exit(1);
  }
}
