'use strict';
// hora/brain: mini-batch training of brain.js's NeuralNetwork is the same computation on N ranks as in one
// process, every rank ends bit-identical, stopping rules stop every rank together, and arguments are checked.
// Multi-rank cases run test/workers/brain-worker.js under `hora run`; the world-of-one reference runs the same
// worker without the launcher. Every case runs against brain.js 1.6.1 and 2.0.0-beta (installed as brain.js-2).
const t = require('tap');
const path = require('node:path');
const { runJob, runProcess, tail, ROOT } = require('./support/hora-job');
const { distributed } = require('../dist/adapters/brain/index.js');
const { BRAIN_VERSIONS } = require('./support/brain-versions');

const WORKER = path.join(__dirname, 'workers', 'brain-worker.js');

/** The worker alone (no launcher variables): hora is a world of one. */
async function solo(scenario, env) {
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^(HORA_|OMPI_|PMI_|SLURM_)/.test(k)));
  const run = await runProcess([WORKER, scenario], { ...clean, ...env });
  if (run.code !== 0) throw new Error(`solo ${scenario} failed: ${run.stderr}`);
  return JSON.parse(run.stdout.trim().split('\n').pop());
}

/** Largest |a - b| / max(|b|, 1e-3) over all weights (the floor keeps near-zero weights from dominating). */
function maxRelativeDifference(a, b) {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]) / Math.max(Math.abs(b[i]), 1e-3));
  return worst;
}

function assertAllRanksIdentical(t, job, np) {
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  t.equal(job.reports.filter(Boolean).length, np, 'every rank reported', { output: tail(job) });
  if (!job.reports.every(Boolean)) return false;
  for (const rep of job.reports) {
    t.equal(rep.size, np, `rank ${rep.rank} ran in a world of ${np}`);
    t.equal(rep.hash, job.reports[0].hash, `rank ${rep.rank}'s weights are bit-identical to rank 0's`);
  }
  return true;
}

for (const { version, moduleName } of BRAIN_VERSIONS) {
  const brain = require(moduleName);
  const base = { BRAIN_MODULE: moduleName };
  const label = (title) => `brain.js ${version}: ${title}`;

  for (const praxis of ['momentum', 'adam']) {
    t.test(label(`equivalence (${praxis}): N ranks with local batch 12/N end where one process with batch 12 ends`), async (t) => {
      const env = { ...base, BRAIN_PRAXIS: praxis };
      const reference = await solo('equiv', env);
      t.equal(reference.size, 1, 'the reference ran in a world of one');
      t.equal(reference.status.iterations, 3, 'the reference ran 3 iterations (27 steps of 12, the last of 4)');
      if (praxis === 'adam') t.equal(reference.adamSteps, 27, 'Adam took one step per mini-batch');
      t.ok(maxRelativeDifference(reference.weights, reference.initial) > 1e-2, 'training moved the weights');
      for (const np of [2, 3]) {
        const job = await runJob(np, WORKER, { args: ['equiv'], env });
        if (!assertAllRanksIdentical(t, job, np)) continue;
        const rep = job.reports[0];
        t.same(rep.initial, reference.initial, `np=${np}: rank 0 started from the reference's weights`);
        t.not(job.reports[1].initialHash, rep.initialHash, `np=${np}: rank 1 started from other weights (the broadcast matters)`);
        const diff = maxRelativeDifference(rep.weights, reference.weights);
        t.ok(diff <= 1e-5, `np=${np}: weights within 1e-5 relative of the world of one (max ${diff.toExponential(2)})`);
        t.ok(Math.abs(rep.status.error - reference.status.error) <= 1e-6 * reference.status.error,
          `np=${np}: same training error (${rep.status.error} vs ${reference.status.error})`);
        t.equal(rep.status.iterations, 3, `np=${np}: 3 iterations`);
      }
    });
  }

  t.test(label('errorThresh: every rank stops at the same iteration, the one a single process stops at'), async (t) => {
    const reference = await solo('thresh', base);
    t.ok(reference.status.iterations < 3000, `the reference stopped by errorThresh (iteration ${reference.status.iterations})`);
    t.ok(reference.status.error <= 0.02, 'with error <= errorThresh');
    for (const np of [2, 3]) {
      const job = await runJob(np, WORKER, { args: ['thresh'], env: base });
      if (!assertAllRanksIdentical(t, job, np)) continue;
      for (const rep of job.reports) {
        t.same(rep.status, job.reports[0].status, `np=${np} rank ${rep.rank}: same status as rank 0`);
      }
      t.equal(job.reports[0].status.iterations, reference.status.iterations, `np=${np}: stopped at the reference's iteration`);
    }
  });

  t.test(label('timeout on one rank only: every rank stops at the same iteration'), async (t) => {
    const job = await runJob(2, WORKER, { args: ['timeout'], env: base });
    if (!assertAllRanksIdentical(t, job, 2)) return;
    const [a, b] = job.reports;
    t.same(a.status, b.status, 'rank 0 (no timeout) stopped with rank 1 (timeout 300 ms)');
    t.ok(a.status.iterations < 1e7, `stopped early, at iteration ${a.status.iterations}`);
    t.ok(job.seconds < 30, `in bounded time (${job.seconds.toFixed(1)} s)`);
  });

  t.test(label('overlap: each layer\'s allreduce is submitted, and runs, while the layers below are still computed'), async (t) => {
    const job = await runJob(2, WORKER, { args: ['overlap'], env: base });
    t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
    if (!job.reports.every(Boolean)) return;
    const top = job.reports[0].top;
    for (const rep of job.reports) {
      const steps = new Map();
      for (const e of rep.events.filter((e) => e.phase !== 'settled')) {
        if (!steps.has(e.step)) steps.set(e.step, []);
        steps.get(e.step).push(e.layer < 0 ? e.phase : `${e.phase} ${e.layer}`);
      }
      t.equal(steps.size, 2, `rank ${rep.rank}: two steps`);
      const expected = [];
      for (let l = top; l >= 1; l--) expected.push(`deltas ${l}`, `submit ${l}`);
      expected.push('wait', 'update');
      for (const [step, order] of steps) t.same(order, expected, `rank ${rep.rank} step ${step}: submit(l) before deltas(l-1)`);
    }
    // Rank 1 spends 300 ms on layer top-1 after submitting layer top. Rank 0's allreduce of layer top can only
    // complete once rank 1's share has reached the wire, so it must settle before rank 1's slow layer ends.
    const [r0, r1] = job.reports;
    for (let step = 0; step < 2; step++) {
      const settled = r0.events.find((e) => e.phase === 'settled' && e.layer === top && e.step === step);
      t.ok(settled, `step ${step}: rank 0 saw layer ${top}'s allreduce settle`);
      if (!settled) continue;
      const slack = r1.slowUntil[step] - settled.time;
      t.ok(slack > 150, `step ${step}: it settled ${slack.toFixed(0)} ms before rank 1 finished its slow layer (> 150 ms)`);
    }
  });

  t.test(label('argument errors name the argument and the value'), async (t) => {
    const net = () => new brain.NeuralNetwork({ hiddenLayers: [3] });
    t.throws(() => distributed(null, { batchSize: 4 }), { code: 'ERR_INVALID_ARGUMENT', message: /argument 'net'.*received null/ });
    t.throws(() => distributed({}, { batchSize: 4 }), { message: /argument 'net.updateTrainingOptions'.*received undefined/ });
    t.throws(() => distributed(net(), { batchSize: 0 }), { message: /argument 'options.batchSize' must be a positive integer; received number 0/ });
    t.throws(() => distributed(net(), { batchSize: 2.5 }), { message: /options.batchSize.*number 2.5/ });
    t.throws(() => distributed(net(), { batchSize: '8' }), { message: /options.batchSize.*the string "8"/ });
    t.throws(() => distributed(net(), undefined), { message: /argument 'options'.*received undefined/ });
    t.throws(() => distributed(net(), { batchSize: 4, trace: 1 }), { message: /options.trace.*number 1/ });
    // 1.6 keeps any activation it is given on the net; 2.0's constructor rejects one it does not know, so the
    // unknown value is put where 2.0 keeps it.
    const softmax = version.startsWith('1.') ? new brain.NeuralNetwork({ activation: 'softmax' }) : net();
    if (!version.startsWith('1.')) softmax.trainOpts.activation = 'softmax';
    const where = version.startsWith('1.') ? /argument 'net.activation'.*"softmax"/ : /argument 'net.trainOpts.activation'.*"softmax"/;
    t.throws(() => distributed(softmax, { batchSize: 4 }), { message: where });
    const d = distributed(net(), { batchSize: 4 });
    await t.rejects(d.trainAsync([], {}), { code: 'ERR_INVALID_ARGUMENT', message: /argument 'data'.*an Array of length 0/ });
    await t.rejects(d.trainAsync('xor', {}), { message: /argument 'data'.*the string "xor"/ });
    const xor = [{ input: [0, 0], output: [0] }, { input: [0, 1], output: [1] }];
    await t.rejects(d.trainAsync(xor, null), { message: /argument 'options'.*null/ });
    await t.rejects(d.trainAsync(xor, { praxis: 'sgd' }), { message: /options.praxis.*"sgd"/ });
    await t.rejects(d.trainAsync(xor, { learningRate: 2 }), { message: /learningRate, 2/ });
    // 1.6 stores an unknown activation without a word, 2.0 rejects it; either way trainAsync names it.
    await t.rejects(distributed(net(), { batchSize: 4 }).trainAsync(xor, { activation: 'softmax' }),
      { code: 'ERR_INVALID_ARGUMENT', message: /activation.*softmax/ });
  });

  // Every activation (brain 2.0 keeps it among the training options, 1.6 on the net) and both update rules.
  for (const activation of ['sigmoid', 'relu', 'leaky-relu', 'tanh']) {
    for (const praxis of [null, 'adam']) {
      t.test(label(`batchSize 1 in a world of one is brain's own per-sample training (${activation}, ${praxis || 'momentum'})`), async (t) => {
        const xor = [{ input: [0, 0], output: [0] }, { input: [0, 1], output: [1] }, { input: [1, 0], output: [1] }, { input: [1, 1], output: [0] }];
        const [a, b] = [0, 1].map(() => {
          const net = new brain.NeuralNetwork({ hiddenLayers: [3], activation, leakyReluAlpha: 0.05, praxis });
          net.sizes = [2, 3, 1];
          net.initialize();
          return net;
        });
        for (let l = 1; l < 3; l++) {
          a.weights[l].forEach((row, node) => b.weights[l][node].set(row));
          b.biases[l].set(a.biases[l]);
        }
        const opts = { iterations: 100, errorThresh: 0.001, learningRate: praxis ? 0.01 : 0.1, momentum: 0.1, praxis };
        const ours = await distributed(a, { batchSize: 1 }).trainAsync(xor, opts);
        const theirs = b.train(xor, opts);
        t.equal(ours.iterations, theirs.iterations, 'same iterations');
        t.ok(Math.abs(ours.error - theirs.error) <= 1e-6 * theirs.error, `same error (${ours.error} vs ${theirs.error})`);
        if (praxis) t.equal(a.iterations, b.iterations, `same Adam step count (${a.iterations})`);
        const wa = a.weights.slice(1).flatMap((layer) => layer.flatMap((row) => Array.from(row)));
        const wb = b.weights.slice(1).flatMap((layer) => layer.flatMap((row) => Array.from(row)));
        t.ok(wb.every(Number.isFinite), 'brain\'s own training kept finite weights');
        const diff = maxRelativeDifference(wa, wb);
        t.ok(diff <= 1e-5, `same weights within 1e-5 relative (max ${diff.toExponential(2)})`);
      });
    }
  }

  t.test(label('log gets what brain gives it: a sentence from 1.6, {iterations, error} from 2.0'), async (t) => {
    const xor = [{ input: [0, 0], output: [0] }, { input: [0, 1], output: [1] }];
    const seen = [];
    const status = await distributed(new brain.NeuralNetwork({ hiddenLayers: [3] }), { batchSize: 2 })
      .trainAsync(xor, { iterations: 4, errorThresh: 1e-6, logPeriod: 2, log: (s) => seen.push(s) });
    t.equal(seen.length, 2, 'logged at iterations 2 and 4');
    if (version.startsWith('1.')) {
      t.match(seen[1], /^iterations: 4, training error: [0-9.e-]+$/, `a sentence: ${seen[1]}`);
    } else {
      t.same(seen[1], { iterations: 4, error: status.error }, 'the status object');
    }
  });
}

t.teardown(async () => {
  await require(path.join(ROOT, 'dist', 'ts', 'index.js')).shutdown();
});

t.test('examples/brain-clusters.js trains to a useful classifier on 2 ranks', async (t) => {
  const example = path.join(ROOT, 'examples', 'brain-clusters.js');
  const job = await runJob(2, example);
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  t.match(job.stdout, /\[0\] iterations: 10, training error: /, 'rank 0 logs the error every 10 iterations');
  t.notMatch(job.stdout, /\[1\] iterations:/, 'rank 1 does not log');
  const m = /held out ([0-9.]+)%/.exec(job.stdout);
  t.ok(m && Number(m[1]) >= 90, `held-out accuracy >= 90% (${m && m[1]}%)`);
});
