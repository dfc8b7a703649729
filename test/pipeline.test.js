'use strict';
// hora/tfjs's pipeline(), proven against one process: a model cut into 2 or 3 stages, trained with GPipe
// and 1F1B, auto and manual partitions, micro-batches of uneven size, SGD and Adam, ends where one plain
// tfjs model trained on the whole batch ends (test/workers/pipeline-worker.js trains both in each rank;
// this file asserts). Then fit/evaluate/predict/getWeights/setWeights/toModel/save, stats, the timeline,
// every bad input, ranks that disagree, and a stage that throws, dies, or sends the wrong shape.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { runJob, runProcess, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'pipeline-worker.js');
/** Per element |a - b| <= 1e-5 x max(|b|, 1e-3), as for data parallelism (docs/tfjs.md). */
const EXACT_REL = 1e-5;

const EQUIV = [
  { np: 2, schedule: '1f1b', partition: 'auto', opt: 'adam', B: 10, micro: 4, recompute: false },
  { np: 2, schedule: 'gpipe', partition: '[1,3]', opt: 'sgd', B: 10, micro: 3, recompute: true },
  { np: 3, schedule: '1f1b', partition: '[1,2,1]', opt: 'sgd', B: 11, micro: 4, recompute: false },
  { np: 3, schedule: 'gpipe', partition: 'auto', opt: 'adam', B: 9, micro: 2, recompute: false },
  { np: 3, schedule: '1f1b', partition: '[2,1,1]', opt: 'adam', B: 12, micro: 5, recompute: true },
  // Dense kernel gradients once per batch: relu's product (recorded unfused), tanh's and the last
  // layer's (fused, linear), from kept records and recomputed.
  { np: 2, schedule: '1f1b', partition: '[2,2]', opt: 'adam', B: 10, micro: 4, recompute: false, defer: true, activation: 'relu' },
  { np: 3, schedule: 'gpipe', partition: '[1,2,1]', opt: 'sgd', B: 11, micro: 3, recompute: true, defer: true, activation: 'linear' },
  // Regularizers on every stage's layers: each stage's penalty is part of the loss and of its gradients.
  { np: 3, schedule: '1f1b', partition: '[1,2,1]', opt: 'adam', B: 10, micro: 4, recompute: false, l2: 0.05 },
  { np: 2, schedule: '1f1b', partition: '[2,2]', opt: 'sgd', B: 10, micro: 4, recompute: true, defer: true, l2: 0.05 },
];

for (const c of EQUIV) {
  const name = `${c.np} stages, ${c.schedule}, partition ${c.partition}, ${c.opt}, ${c.B} samples in ${c.micro} micro-batches, ` +
    `backward ${c.recompute ? 'recomputing the forward' : 'from the kept record'}` +
    (c.defer ? `, ${c.activation || 'tanh'} layers' kernel gradients once per batch` : '') + (c.l2 ? ', L2 and L1 penalties on every layer' : '');
  t.test(`${name}: the same weights as one process on the whole batch`, async (t) => {
    const job = await runJob(c.np, WORKER, {
      args: ['equiv'], timeoutMs: 90000,
      env: {
        PIPE_SCHEDULE: c.schedule, PIPE_PARTITION: c.partition, PIPE_OPT: c.opt, PIPE_B: String(c.B), PIPE_MICRO: String(c.micro), PIPE_RECOMPUTE: String(c.recompute),
        PIPE_DEFER: String(Boolean(c.defer)), PIPE_ACTIVATION: c.activation || 'tanh', PIPE_L2: String(c.l2 || 0),
      },
    });
    t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
    if (!job.reports.every(Boolean)) return t.fail('every rank reported', { output: tail(job) });
    job.reports.forEach((rep, r) => {
      t.equal(rep.stage, r, `rank ${r} holds stage ${r} (rank = replica x stages + stage)`);
      t.same([rep.stages, rep.replica, rep.replicas], [c.np, 0, 1], `rank ${r}: ${c.np} stages, one replica`);
      t.ok(rep.worst <= EXACT_REL, `rank ${r}: every weight within ${EXACT_REL} of the 1-process run (got ${rep.worst.toExponential(2)})`);
      t.equal(rep.base64, job.reports[0].base64, `rank ${r}: getWeights gives every rank the same bytes`);
      rep.losses.forEach((l, i) => t.ok(Math.abs(l - rep.refLosses[i]) <= 1e-5 * Math.abs(rep.refLosses[i]), `rank ${r}: batch ${i} loss ${l} = ${rep.refLosses[i]}`));
      t.same(rep.plan, job.reports[0].plan, `rank ${r}: the same plan as rank 0`);
      t.equal(rep.recompute, c.recompute, `rank ${r}: recompute is ${c.recompute}`);
      t.equal(rep.deferWeightGradients, Boolean(c.defer), `rank ${r}: deferWeightGradients is ${Boolean(c.defer)}`);
      t.ok(rep.tensors.every((n) => n === rep.tensors[0]), `rank ${r}: no tensor leaked from batch to batch (${rep.tensors.join(', ')})`);
    });
    if (c.defer) {
      // The last stage keeps nothing for its backwards but, with deferral, each Dense layer's input and
      // output gradient for the whole batch: exactly B x (in + out) floats per layer at the batch's end.
      const widths = [6, 10, 8, 7, 3];
      const counts = JSON.parse(c.partition);
      const lastIn = widths.length - 1 - counts[counts.length - 1];
      const floats = widths.slice(lastIn, -1).reduce((n, w, i) => n + c.B * (w + widths[lastIn + i + 1]), 0);
      t.equal(job.reports[c.np - 1].stats.peakStashBytes, 4 * floats, `the last stage kept ${4 * floats} bytes for its kernel gradients: they were deferred`);
    }
    const rep = job.reports[0];
    t.ok(rep.moved > 1e-2, 'training moved the weights (the comparison says something)');
    t.equal(rep.plan.counts.reduce((a, b) => a + b, 0), 4, 'the plan covers the 4 layers');
    t.equal(rep.plan.partition, c.partition === 'auto' ? 'auto' : 'manual', 'the plan says how it was chosen');
    if (c.partition !== 'auto') t.same(rep.plan.counts, JSON.parse(c.partition), 'the manual partition is the cut');
    else t.ok(rep.plan.stageTimes.length === c.np && rep.plan.stageTimes.every((x) => x > 0), 'auto: a predicted time per stage');
  });
}

for (const defer of [false, true]) {
  t.test(`2 stages x 2 replicas (rank = replica x stages + stage)${defer ? ', kernel gradients once per batch' : ''}: each replica on its shard = one process on the whole batch`, async (t) => {
    const job = await runJob(4, WORKER, {
      args: ['equiv'], timeoutMs: 120000,
      env: { PIPE_STAGES: '2', PIPE_SCHEDULE: '1f1b', PIPE_PARTITION: '[2,2]', PIPE_OPT: 'adam', PIPE_B: '20', PIPE_MICRO: '3', PIPE_DEFER: String(defer) },
    });
    t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
    if (!job.reports.every(Boolean)) return t.fail('every rank reported', { output: tail(job) });
    job.reports.forEach((rep, r) => {
      t.same([rep.stage, rep.replica, rep.stages, rep.replicas], [r % 2, Math.floor(r / 2), 2, 2], `rank ${r}: stage ${r % 2} of replica ${Math.floor(r / 2)}`);
      t.ok(rep.worst <= EXACT_REL, `rank ${r}: every weight within ${EXACT_REL} of one process on the 20 samples (got ${rep.worst.toExponential(2)})`);
      t.equal(rep.base64, job.reports[0].base64, `rank ${r}: the same weights as rank 0`);
      rep.losses.forEach((l, i) => t.ok(Math.abs(l - rep.refLosses[i]) <= 1e-5 * Math.abs(rep.refLosses[i]), `rank ${r}: batch ${i} loss ${l} (mean over replicas) = ${rep.refLosses[i]}`));
      t.ok(rep.tensors.every((n) => n === rep.tensors[0]), `rank ${r}: no tensor leaked`);
    });
    t.ok(job.reports[0].moved > 1e-2, 'training moved the weights');
  });
}

t.test('GPipe and 1F1B, recomputing or not, end with bit-identical weights (same micro-batch order of the sums)', async (t) => {
  const base = {};
  // Also with kernel gradients once per batch: the first stage computes those of all but the last
  // micro-batch before its last backward, in every schedule, so the sums are the same products.
  for (const defer of ['false', 'true']) {
    const deferred = defer === 'true' ? 'deferred ' : '';
    for (const [schedule, recompute] of [['gpipe', 'false'], ['1f1b', 'false'], ['1f1b', 'true']]) {
      const job = await runJob(2, WORKER, { args: ['equiv'], timeoutMs: 90000, env: { PIPE_SCHEDULE: schedule, PIPE_PARTITION: '[2,2]', PIPE_OPT: 'adam', PIPE_B: '10', PIPE_MICRO: '4', PIPE_RECOMPUTE: recompute, PIPE_DEFER: defer } });
      t.equal(job.code, 0, `${schedule}, recompute ${recompute}${deferred ? ', deferred kernel gradients' : ''}: hora run exits 0`, { output: tail(job) });
      base[`${deferred}${schedule} ${recompute}`] = job.reports[0] && job.reports[0].base64;
    }
  }
  t.ok(base['gpipe false'], 'GPipe reported');
  t.equal(base['1f1b false'], base['gpipe false'], '1F1B = GPipe, bit for bit');
  t.equal(base['1f1b true'], base['gpipe false'], 'recomputing = keeping the record, bit for bit');
  t.ok(base['deferred gpipe false'], 'GPipe with deferred kernel gradients reported');
  t.equal(base['deferred 1f1b false'], base['deferred gpipe false'], 'deferred: 1F1B = GPipe, bit for bit');
  t.equal(base['deferred 1f1b true'], base['deferred gpipe false'], 'deferred: recomputing = keeping the record, bit for bit');
  // With Dropout the recomputed forward must draw the masks the first one drew.
  for (const recompute of ['false', 'true']) {
    const job = await runJob(2, WORKER, { args: ['equiv'], timeoutMs: 90000, env: { PIPE_DROPOUT: '1', PIPE_PARTITION: '[3,2]', PIPE_OPT: 'sgd', PIPE_B: '10', PIPE_MICRO: '4', PIPE_RECOMPUTE: recompute } });
    t.equal(job.code, 0, `Dropout, recompute ${recompute}: hora run exits 0`, { output: tail(job) });
    base[`dropout ${recompute}`] = job.reports[0] && job.reports[0].base64;
  }
  t.ok(base['dropout false'], 'Dropout run reported');
  t.equal(base['dropout true'], base['dropout false'], 'with Dropout too: the recomputed forward draws the same masks');
  t.not(base['dropout false'], base['gpipe false'], 'and Dropout did change the training');
});

t.test('fit (validationData, callbacks), evaluate, predict, setWeights/getWeights, toModel, save, stats', async (t) => {
  const job = await runJob(2, WORKER, { args: ['api'], timeoutMs: 90000 });
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  if (!job.reports.every(Boolean)) return t.fail('every rank reported', { output: tail(job) });
  const close = (a, b, tol = 1e-5) => Math.abs(a - b) <= tol * Math.max(Math.abs(b), 1e-3);
  job.reports.forEach((rep, r) => {
    t.same(Object.keys(rep.history).sort(), ['acc', 'loss', 'val_acc', 'val_loss'], `rank ${r}: per-epoch logs with metrics and validation`);
    for (const k of Object.keys(rep.refHistory)) {
      t.ok(rep.history[k].every((v, i) => close(v, rep.refHistory[k][i])), `rank ${r}: ${k} ${JSON.stringify(rep.history[k])} = model.fit's ${JSON.stringify(rep.refHistory[k])}`);
    }
    t.same(rep.history, job.reports[0].history, `rank ${r}: the same logs as rank 0`);
    t.ok(rep.fitWorst <= EXACT_REL, `rank ${r}: after fit, the weights of model.fit (${rep.fitWorst.toExponential(2)})`);
    t.same(rep.events.slice(0, 3), ['trainBegin', 'epochBegin 0', 'batchEnd 0 number'], `rank ${r}: callbacks in order`);
    t.equal(rep.events.filter((e) => e.startsWith('batchEnd')).length, 9, `rank ${r}: onBatchEnd for each of 3 x 3 batches`);
    t.same(rep.events.slice(-2), ['epochEnd 2 acc,loss,val_acc,val_loss', 'trainEnd'], `rank ${r}: onEpochEnd gets the logs`);
    rep.evaluated.forEach((v, i) => t.ok(close(v, rep.refEvaluated[i]), `rank ${r}: evaluate ${i}: ${v} = ${rep.refEvaluated[i]}`));
    t.same(rep.predictShape, [40, 3], `rank ${r}: predict gives the output on every rank`);
    t.ok(rep.predictWorst <= 1e-4, `rank ${r}: the output of model.predict (${rep.predictWorst.toExponential(2)})`);
    t.ok(rep.shuffledLoss[0] > 0 && Number.isFinite(rep.shuffledLoss[0]), `rank ${r}: fit with shuffle runs`);
    t.equal(rep.setGetWorst, 0, `rank ${r}: setWeights then getWeights gives them back`);
    t.equal(rep.exportedClass, 'Sequential', `rank ${r}: toModel gives a tf.Sequential`);
    t.equal(rep.exportedWorst, 0, `rank ${r}: holding the pipeline's weights`);
    const s = rep.stats;
    t.equal(s.batches, 12, `rank ${r}: stats count the 12 training batches`);
    t.equal(s.lastBatch.busyMs.length, 2, `rank ${r}: busy time per stage`);
    t.ok(s.lastBatch.busyMs.every((b) => b > 0) && s.lastBatch.wallMs >= Math.max(...s.lastBatch.busyMs) * 0.99, `rank ${r}: busy time within the batch's wall time`);
    t.ok(s.total.bubbleFraction >= 0 && s.total.bubbleFraction < 1, `rank ${r}: a bubble fraction (${s.total.bubbleFraction.toFixed(3)})`);
    t.ok(s.weightBytes > 0, `rank ${r}: its stage's weight bytes`);
    t.equal(rep.steps.count, 12, `rank ${r}: each training batch is a step in hora's stats (the dashboard's)`);
    t.equal(rep.reported.length, 12, `rank ${r}: each training batch reported for the launcher's stats (the dashboard's Pipeline panel)`);
    const b = rep.reported[rep.reported.length - 1];
    t.same([b.stage, b.stages, b.replica, b.replicas, b.weightBytes], [r, 2, 0, 1, s.weightBytes], `rank ${r}: with its stage, replica and weight bytes`);
    t.ok(b.busyMs > 0 && b.busyMs <= b.wallMs && Number.isInteger(b.peakStashBytes) && (r === 0 ? b.peakStashBytes > 0 : b.peakStashBytes === 0), `rank ${r}: busy within wall, and the batch's peak stash (none on the last stage)`);
  });
  const [a, b] = job.reports;
  t.equal(a.stats.weightBytes + b.stats.weightBytes, 4 * (6 * 12 + 12 + 12 * 8 + 8 + 8 * 3 + 3), 'the stages hold the model\'s weights between them, once');
  t.ok(a.stats.peakStashMicroBatches >= 1 && a.stats.peakStashMicroBatches <= 2, `1F1B: stage 0 stashed at most 2 micro-batches (${a.stats.peakStashMicroBatches})`);
  t.equal(b.stats.peakStashMicroBatches, 0, 'the last stage stashes nothing: its input\'s gradient leaves as soon as it is computed');
  t.equal(b.stats.peakStashBytes, 0, 'and holds no bytes for backwards');
  t.same(a.saved, ['modelArtifactsInfo'], 'save returns the SaveResult on rank 0');
  t.equal(b.saved, null, 'and null elsewhere');
  t.same(a.reloaded, { className: 'Sequential', same: 0 }, 'the saved model loads with plain tfjs, with the weights');
});

t.test('the timeline has a slice per micro-batch forward and backward on each stage; HORA_DEBUG=INFO logs the plan', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-pipe-timeline-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'trace.json');
  const job = await runJob(2, WORKER, {
    args: ['equiv'], launcherArgs: ['--timeline', file], timeoutMs: 90000,
    env: { PIPE_STEPS: '2', PIPE_MICRO: '4', PIPE_PARTITION: '[2,2]', HORA_DEBUG: 'INFO' },
  });
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  t.match(job.stderr, /hora pipeline INFO: 2 stages x 1 replica\(s\), 4 micro-batches, schedule 1f1b, backward from the kept record, partition manual: stage 0: 2 layers d1\.\.d2; stage 1: 2 layers d3\.\.d4/, 'the plan is logged');
  let text = fs.readFileSync(file, 'utf8').trim();
  if (text.startsWith('[') && !text.endsWith(']')) text += ']';
  const parsed = JSON.parse(text);
  const events = Array.isArray(parsed) ? parsed : parsed.traceEvents;
  for (const rank of [0, 1]) {
    for (const op of ['forward', 'backward']) {
      const slices = events.filter((e) => e.pid === rank && e.ph === 'X' && e.name.startsWith(`${op} `));
      t.equal(slices.length, 2 * 4, `rank ${rank}: ${op} slices for 2 batches x 4 micro-batches`);
      t.ok(slices.every((e) => e.args.stage === rank && e.dur >= 0), `rank ${rank}: ${op} slices name the stage`);
    }
  }
});

const BAD = {
  stagesNotDividing: /option 'stages' must be a divisor of hora.size\(\) \(2\); received 3/,
  stagesZero: /option 'stages' must be an integer >= 1; received 0/,
  microZero: /option 'microBatches' must be an integer >= 1; received 0/,
  schedule: /option 'schedule' must be 'gpipe' or '1f1b'; received 'zigzag'/,
  partitionSum: /option 'partition' must be layer counts adding up to the model's 4 layers; received \[2, 1\]/,
  partitionEmpty: /option 'partition' must be layer counts that are integers >= 1 \(no stage may be empty\); received \[4, 0\]/,
  notAChain: /argument 'model' must be a chain of layers.*layer 'branch_a' feeds 2 layers/,
  notAModel: /argument 'model' must be a tf.LayersModel/,
  unknownOption: /argument 'options\.micro' is not an option \(received number 2\): did you mean 'microBatches'\? pipeline takes stages, microBatches/,
  deferNotBoolean: /option 'deferWeightGradients' must be true or false; received 'yes'/,
  beforeCompile: /call pipe.compile/,
  microLarger: /option 'microBatches' must be at most the batch size \(batchSize 3, 8 samples\); received 4/,
  microLargerBatch: /option 'microBatches' must be at most the batch size \(3 samples\); received 4/,
  xy: /x has 8 samples but y has 7/,
  setWeights: /argument 'weights' must be an array of the model's 8 weights; received 1 entries/,
  xShape: /stage 0 \(rank 0\) failed: argument 'x' must have samples of shape \[6\]/,
  afterFailure: /the pipeline failed earlier and cannot go on/,
};

t.test('bad input: ERR_INVALID_ARGUMENT naming the option and the value, on every rank', async (t) => {
  const job = await runJob(2, WORKER, { args: ['bad'], timeoutMs: 90000 });
  t.equal(job.code, 0, 'hora run exits 0 (every error was caught)', { output: tail(job) });
  job.reports.forEach((rep, r) => {
    if (!rep) return t.fail(`rank ${r} reported`, { output: tail(job) });
    for (const [name, re] of Object.entries(BAD)) {
      t.equal(rep[name] && rep[name].code, 'ERR_INVALID_ARGUMENT', `rank ${r}: ${name}: ERR_INVALID_ARGUMENT`, { got: rep[name] });
      t.match(rep[name] && rep[name].message, re, `rank ${r}: ${name}: the message`);
    }
    for (const name of ['stagesNotDividing', 'partitionSum', 'partitionEmpty']) {
      t.equal(rep[name] && rep[name].rank, r, `rank ${r}: ${name}: the error carries the rank`);
    }
  });
});

t.test('without the launcher (a world of one), pipeline() says the job has one rank and how to start more', async (t) => {
  const { cleanEnv } = require('./support/hora-job');
  const run = await runProcess([WORKER, 'alone'], cleanEnv({}), 120000);
  t.equal(run.code, 0, 'the worker ran', { output: run.stderr.slice(-2000) });
  const rep = JSON.parse(run.stdout.trim().split('\n').pop());
  t.equal(rep.size, 1, 'a world of one');
  t.equal(rep.twoStages.code, 'ERR_INVALID_ARGUMENT');
  t.match(rep.twoStages.message, /option 'stages' must be a divisor of hora.size\(\) \(1\); received 2: this job has one rank \(started without a launcher, it runs alone\)/);
  t.match(rep.twoStages.message, /npx hora run -np 2 node pipeline-worker\.js/, 'says how to start more ranks');
});

const MISMATCH = {
  microBatches: /different options: 'microBatches' differs \(rank 0: 4, rank 1: 5\)/,
  schedule: /different options: 'schedule' differs \(rank 0: '1f1b', rank 1: 'gpipe'\)/,
  deferWeightGradients: /different options: 'deferWeightGradients' differs \(rank 0: false, rank 1: true\)/,
  layers: /different models: 'layer count' differs \(rank 0: 4, rank 1: 5\)/,
  shapes: /different models: 'layer shapes' differs \(layer 1 \('d2' here: output \[null, (8|9)\]/,
};

t.test('ranks given different models or options: ERR_MISMATCH on every rank at pipeline(), naming the field', async (t) => {
  const job = await runJob(2, WORKER, { args: ['mismatch'], timeoutMs: 60000 });
  t.equal(job.code, 0, 'hora run exits 0 (every error was caught)', { output: tail(job) });
  job.reports.forEach((rep, r) => {
    if (!rep) return t.fail(`rank ${r} reported`, { output: tail(job) });
    for (const [which, re] of Object.entries(MISMATCH)) {
      t.equal(rep[which].code, 'ERR_MISMATCH', `rank ${r}: different ${which}: ERR_MISMATCH`, { got: rep[which] });
      t.match(rep[which].message, re, `rank ${r}: different ${which}: names the field and the values`);
    }
  });
  // One rank refusing its options: its own error there, ERR_INVALID_ARGUMENT naming it elsewhere.
  const [a, b] = job.reports;
  t.match(b && b.refused, { code: 'ERR_INVALID_ARGUMENT', message: /option 'microBatches' must be an integer >= 1; received -1/ }, 'refused: rank 1 has its own error');
  t.match(a && a.refused, { code: 'ERR_INVALID_ARGUMENT', message: /rank 1 refused its model or options/, peer: 1 }, 'refused: rank 0 names rank 1');
});

for (const [np, stage, schedule] of [[3, 1, 'gpipe'], [3, 2, '1f1b'], [2, 0, '1f1b']]) {
  t.test(`${np} stages, ${schedule}: a layer of stage ${stage} throws in batch 2 -> every rank fails naming it, no hang`, async (t) => {
    const job = await runJob(np, WORKER, { args: ['throw'], env: { THROW_STAGE: String(stage), PIPE_SCHEDULE: schedule, HORA_TIMEOUT_S: '30' }, timeoutMs: 60000 });
    t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
    t.ok(job.seconds < 40, `within a bounded time (${job.seconds.toFixed(1)} s, deadline 30 s)`);
    job.reports.forEach((rep, r) => {
      if (!rep) return t.fail(`rank ${r} reported`, { output: tail(job) });
      t.equal(rep.step, 2, `rank ${r}: failed in batch 2`);
      t.match(rep.error.message, new RegExp(`^pipeline: stage ${stage} \\(rank ${stage}\\) failed: boom\\d: NaN in the activations`), `rank ${r}: names the stage, the rank and the error`);
      if (r !== stage) t.equal(rep.error.peer, stage, `rank ${r}: the error's peer is rank ${stage}`);
    });
  });
}

t.test('2 stages x 2 replicas: stage 0 of replica 1 throws -> every rank fails naming it', async (t) => {
  const job = await runJob(4, WORKER, { args: ['throw'], env: { PIPE_STAGES: '2', THROW_STAGE: '0', THROW_REPLICA: '1', HORA_TIMEOUT_S: '30' }, timeoutMs: 90000 });
  t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
  job.reports.forEach((rep, r) => {
    if (!rep) return t.fail(`rank ${r} reported`, { output: tail(job) });
    t.match(rep.error.message, /^pipeline: stage 0 of replica 1 \(rank 2\) failed: boom1: NaN in the activations/, `rank ${r}: names the stage, the replica and the rank`);
  });
});

for (const [np, stage] of [[3, 1], [2, 0]]) {
  t.test(`${np} stages: stage ${stage} is killed in batch 2 -> the others fail naming it, no hang`, async (t) => {
    const job = await runJob(np, WORKER, { args: ['kill'], env: { KILL_STAGE: String(stage), HORA_TIMEOUT_S: '30' }, timeoutMs: 60000 });
    t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
    t.ok(job.seconds < 40, `within a bounded time (${job.seconds.toFixed(1)} s, deadline 30 s)`);
    job.reports.forEach((rep, r) => {
      if (r === stage) return t.equal(rep, null, `rank ${r} died before reporting`);
      if (!rep) return t.fail(`rank ${r} reported`, { output: tail(job) });
      t.equal(rep.error.code, 'ERR_PEER_LOST', `rank ${r}: ERR_PEER_LOST`);
      t.match(rep.error.message, `pipeline: stage ${stage} (rank ${stage}) was lost`, `rank ${r}: names the stage and rank`);
    });
  });
}

t.test('a stage sent a shape other than the next expects: ERR_MISMATCH on every rank naming the layers and both shapes', async (t) => {
  const job = await runJob(2, WORKER, { args: ['shape'], timeoutMs: 60000 });
  t.not(job.code, 0, 'hora run exits non-zero', { output: tail(job) });
  job.reports.forEach((rep, r) => {
    t.equal(rep && rep.error.code, 'ERR_MISMATCH', `rank ${r}: ERR_MISMATCH`, { got: rep });
    t.match(rep && rep.error.message, "stage 1's first layer 'd3' expects input of shape [4, 8] but stage 0's last layer 'liar' (rank 0) gave [4, 9]", `rank ${r}: both layers and shapes`);
  });
});

t.test('examples/tfjs-pipeline.js (npm run demo:pipeline) trains the MNIST digits in 2 stages and exports the whole model', async (t) => {
  const example = path.join(__dirname, '..', 'examples', 'tfjs-pipeline.js');
  const job = await runJob(2, example, { args: ['--epochs', '1', '--train', '300', '--test', '100', '--batch', '30', '--micro', '3'], timeoutMs: 120000 });
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  t.match(job.stdout, /\[0\] pipeline: 2 stages, 3 micro-batches of a batch of 30, 1f1b, cut \[\d,\d\]/, 'says where it cut');
  t.match(job.stdout, /\[0\] epoch 1\/1: loss [\d.]+ acc [\d.]+ val_loss [\d.]+ val_acc [\d.]+/, 'per-epoch logs');
  t.match(job.stdout, /\[0\] 10 batches in [\d.]+ s; per stage busy/, 'the stats');
  t.match(job.stdout, /\[1\] \[stage 1\] weights \d+ bytes/, 'each stage its bytes');
  const val = /val_acc ([\d.]+)/.exec(job.stdout);
  const plain = /in plain tfjs: loss [\d.]+, accuracy ([\d.]+)/.exec(job.stdout);
  t.ok(val && plain, 'the exported model evaluates in plain tfjs');
  if (val && plain) t.equal(plain[1], val[1], 'to the accuracy the pipeline measured');
});

t.test('bench/pipeline.js --quick runs every part and reports its figures', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-pipe-bench-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const out = path.join(dir, 'pipeline.json');
  const run = await runProcess([path.join(__dirname, '..', 'bench', 'pipeline.js'), '--quick', '--out', out], process.env, 240000);
  t.equal(run.code, 0, 'exits 0', { stderr: run.stderr.slice(-2000) });
  if (!fs.existsSync(out)) return t.fail('wrote --out');
  const { results } = JSON.parse(fs.readFileSync(out, 'utf8'));
  const part = (name) => results.filter((r) => r.part === name);
  const [tp] = part('throughput');
  t.ok(tp && tp.speedup > 0 && tp.recomputeSpeedup > 0 && tp.deferredSpeedup > 0 && Math.abs(tp.bound - 16 / 9) < 1e-12, 'throughput: the three speed-ups against one process, and the bound');
  t.ok(tp && tp.machineFactor > 0 && tp.twinSamplesPerSecond.length === tp.singleSamplesPerSecond.length, 'throughput: two processes at once without communication, against one alone');
  t.same(part('bubble').map((r) => [r.schedule, r.micro, r.expected]), [['gpipe', 2, 1 / 3], ['gpipe', 4, 1 / 5], ['1f1b', 2, 1 / 3], ['1f1b', 4, 1 / 5]], 'bubble: each m and schedule against (S-1)/(m+S-1)');
  t.ok(part('bubble').every((r) => r.bubbleFraction >= 0 && r.bubbleFraction < 1), 'bubble fractions measured');
  const mem = Object.fromEntries(part('memory').map((r) => [`${r.schedule} ${r.recompute}`, r]));
  t.same(mem['gpipe false'].peakStashMicroBatches, [4, 0], 'memory: GPipe holds all 4 micro-batches on the first stage, none on the last');
  t.same(mem['1f1b false'].peakStashMicroBatches, [2, 0], '1F1B at most S - s on the first stage (2), none on the last');
  t.equal(mem['1f1b false'].peakStashBytes[0] * 2, mem['gpipe false'].peakStashBytes[0], '1F1B holds half the bytes of GPipe here');
  t.ok(mem['1f1b true'].peakStashBytes[0] < mem['1f1b false'].peakStashBytes[0], 'recomputing holds less than keeping records');
  const [p] = part('partition');
  t.ok(p && Object.keys(p.measured).length === 4 && p.autoOverBest > 0 && p.autoOverEvenThroughput > 0, 'partition: every cut and auto measured');
  const [mb] = part('microbatch');
  t.ok(mb && mb.micro === 2 && mb.microBatchedOverWhole > 0 && Math.abs(mb.boundWithThisCost - (16 / 9) * mb.microBatchedOverWhole) < 1e-12,
    'microbatch: one process, the batch whole against micro-batched, and the bound scaled by it');
  t.ok(mb && mb.deferredOverWhole > 0 && Math.abs(mb.boundWithDeferredCost - (16 / 9) * mb.deferredOverWhole) < 1e-12,
    'microbatch: micro-batched with kernel gradients once per batch too');
});
