'use strict';
// Every options object hora takes refuses a key it does not know (ERR_INVALID_ARGUMENT naming the key,
// listing the options there are, suggesting the one likely meant), where it used to run as if the key were
// absent: Horovod's `average: false` gave an average and `prescaleFactor: 0.5` an unscaled result. And
// prescaleFactor / postscaleFactor where nothing is combined (a world of one) and over two ranks.
// test/workers/options-worker.js records; this file asserts. The factors' sweep over dtypes, world sizes,
// transports, fusion and algorithms is in test/workers/collectives-worker.js.
const t = require('tap');
const path = require('node:path');
const { runJob, runProcess, tail, cleanEnv } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'options-worker.js');

// Every entry point: the key named, the likely option (or the Horovod / torch equivalent), and what it takes.
const SOLO = {
  'init timeout': /^hora\.init: argument 'options\.timeout' is not an option \(received number 5\): use timeoutSeconds .*hora\.init takes timeoutSeconds, fusionMB, algorithm, transport$/,
  'allreduce average false': /^hora\.allreduce: argument 'options\.average' is not an option \(received boolean false\): for Horovod's average=False use op: 'sum'\. hora\.allreduce takes op, name, inplace, dtype, prescaleFactor, postscaleFactor$/,
  'allreduce average true': /argument 'options\.average' .*for Horovod's average=True use op: 'avg'/,
  'allreduce process_set': /argument 'options\.process_set' .*hora\.newGroup\(ranks\)/,
  'allreduce inPlace': /argument 'options\.inPlace' .*did you mean 'inplace'\?/,
  'broadcast root_rank': /^hora\.broadcast: argument 'options\.root_rank' .*did you mean 'root'\? hora\.broadcast takes root, name, inplace, dtype$/,
  'allgather nam': /^hora\.allgather: argument 'options\.nam' .*did you mean 'name'\? hora\.allgather takes name, dtype$/,
  'reduceScatter compression': /^hora\.reduceScatter: argument 'options\.compression' .*DistributedOptimizer\(optimizer, \{compression: 'fp16'\}\)/,
  'reduceScatter prescale': /^hora\.reduceScatter: argument 'options\.prescale' .*did you mean 'prescaleFactor'\?/,
  'barrier async_op': /^hora\.barrier: argument 'options\.async_op' .*returns a Work at once: await it, or call wait\(\)/,
  'broadcastObject src': /^hora\.broadcastObject: argument 'options\.src' .*did you mean 'root'\? hora\.broadcastObject takes root, maxBytes, name$/,
  'allgatherObject max_bytes': /^hora\.allgatherObject: argument 'options\.max_bytes' .*did you mean 'maxBytes'\? hora\.allgatherObject takes maxBytes, name$/,
  'grouped.allreduce average false': /^hora\.grouped\.allreduce: argument 'options\.average' is not an option \(received boolean false\): for Horovod's average=False use op: 'sum'\. hora\.grouped\.allreduce takes op, name, inplace, dtype, prescaleFactor, postscaleFactor$/,
  'grouped.allgather nam': /^hora\.grouped\.allgather: argument 'options\.nam' .*did you mean 'name'\? hora\.grouped\.allgather takes name, dtype$/,
  'grouped.reduceScatter prescale': /^hora\.grouped\.reduceScatter: argument 'options\.prescale' .*did you mean 'prescaleFactor'\?/,
  'reduce dst': /^hora\.reduce: argument 'options\.dst' .*did you mean 'root'\? hora\.reduce takes root, op, name, dtype, prescaleFactor, postscaleFactor$/,
  'gather gather_list': /^hora\.gather: argument 'options\.gather_list' is not an option .*hora\.gather takes root, name, dtype$/,
  'send dst': /^hora\.send: argument 'options\.dst' .*did you mean 'to'\? hora\.send takes to, tag, dtype$/,
  'recv src': /^hora\.recv: argument 'options\.src' .*did you mean 'from'\? hora\.recv takes from, tag, dtype, count$/,
  'newGroup timeout': /^hora\.newGroup: argument 'options\.timeout' is not an option \(received number 30\)\. hora\.newGroup takes no options$/,
  'allreduce int32 prescaleFactor': /argument 'options\.prescaleFactor' must be 1 or absent for an integer dtype .*Int32Array\(3\).*received number 0\.5$/,
  'reduceScatter uint8 postscaleFactor': /argument 'options\.postscaleFactor' must be 1 or absent for an integer dtype/,
  'allreduce postscaleFactor NaN': /argument 'options\.postscaleFactor' must be a finite number; received number NaN/,
  'allreduce prescaleFactor string': /argument 'options\.prescaleFactor' must be a finite number; received the string "0\.5"/,
  'DistributedOptimizer bucket_mb': /^DistributedOptimizer: argument 'options\.bucket_mb' .*did you mean 'bucketMB'\? DistributedOptimizer takes compression, backwardPassesPerStep, op, overlap, bucketMB, shard, model$/,
  'DistributedOptimizer average': /^DistributedOptimizer: argument 'options\.average' .*use op: 'avg'/,
  'pipeline micro_batches': /^pipeline: argument 'options\.micro_batches' .*did you mean 'microBatches'\? pipeline takes stages, microBatches/,
  'shard strided': /^shard: argument 'options\.strided' is not an option .*shard takes mode, rank, size, remainder$/,
  'LearningRateWarmupCallback warmup_epochs': /^LearningRateWarmupCallback: argument 'options\.warmup_epochs' .*did you mean 'warmupEpochs'\?/,
  'ElasticCallback commit_every': /^ElasticCallback: argument 'options\.commit_every' .*did you mean 'commitEvery'\?/,
  'pipeline.fit batch_size': /^pipeline\.fit: argument 'options\.batch_size' .*did you mean 'batchSize'\?/,
  'pipeline.evaluate batch_size': /^pipeline\.evaluate: argument 'options\.batch_size' .*did you mean 'batchSize'\?/,
  'brain distributed batch_size': /^hora\/brain distributed: argument 'options\.batch_size' .*did you mean 'batchSize'\? hora\/brain distributed takes batchSize, trace$/,
  'brain trainAsync learning_rate': /^hora\/brain trainAsync: argument 'options\.learning_rate' .*did you mean 'learningRate'\?/,
  'onnxruntime create learning_rate': /^hora\/onnxruntime DistributedTrainingSession\.create: argument 'options\.learning_rate' .*did you mean 'learningRate'\?/,
};
const NEEDS = {
  DistributedOptimizer: 'tfjs', pipeline: 'tfjs', 'pipeline.fit': 'tfjs', 'pipeline.evaluate': 'tfjs', shard: 'tfjs',
  LearningRateWarmupCallback: 'tfjs', ElasticCallback: 'tfjs', brain: 'brain',
};

t.test('a world of one: every entry point refuses an unknown key, saying which and what it takes', async (t) => {
  const run = await runProcess([WORKER, 'solo'], cleanEnv(), 120000);
  t.equal(run.code, 0, 'the worker exits 0', { output: run.stderr.slice(-3000) });
  const line = run.stdout.split('\n').find((l) => l.startsWith('{'));
  if (!t.ok(line, 'the worker reported', { output: run.stdout.slice(-3000) })) return;
  const { results, values, missing } = JSON.parse(line);
  for (const [name, re] of Object.entries(SOLO)) {
    const need = NEEDS[name.split(' ')[0]];
    if (need && missing[need]) {
      t.skip(`${name}: ${missing[need]}`);
      continue;
    }
    const got = results[name];
    if (!t.ok(got, `${name}: recorded`)) continue;
    t.notOk(got.ok, `${name}: refused`, { got });
    t.ok(got.isHoraError, `${name}: a HoraError`, { got });
    t.equal(got.code, 'ERR_INVALID_ARGUMENT', `${name}: ERR_INVALID_ARGUMENT`, { got });
    t.match(got.message, re, `${name}: the message`);
  }
  // Alone nothing is combined: x * prescaleFactor * postscaleFactor, each product rounded in the dtype.
  t.same(values['allreduce float32 sum'], { ok: true, value: ['1.5', '3', '4.5'] }, 'allreduce float32: [1, 2, 3] * 0.5 * 3');
  t.same(values['allreduce float64 avg inplace'], { ok: true, value: ['0.1', '-0.2', String(0.1 * 0.1)] }, 'allreduce float64 inplace: x * 0.1');
  t.same(values['reduceScatter float16'], { ok: true, value: ['13312', '14336'] }, 'reduceScatter float16: [1, 2] * 0.5 * 0.5 = [0.25, 0.5]');
  t.same(values['allreduce int32 factors of 1'], { ok: true, value: ['4'] }, 'factors of 1 are no factors, whatever the dtype');
});

t.test('p=2: an unknown key on one rank fails that collective on every rank, and the next one works', async (t) => {
  const job = await runJob(2, WORKER, { args: ['ranks'] });
  t.equal(job.code, 0, 'hora run exits 0', { output: tail(job) });
  for (let r = 0; r < 2; r++) {
    const rep = job.reports[r];
    if (!t.ok(rep, `rank ${r} reported`, { output: tail(job) })) continue;
    const res = rep.results;
    const bad = 1;
    for (const [name, key] of [['world allreduce', 'average'], ['world reduceScatter', 'post_scale_factor'], ['newGroup', 'backend'],
      ['group allreduce', 'average']]) {
      const got = res[name];
      t.equal(got.code, 'ERR_INVALID_ARGUMENT', `rank ${r}, ${name}: ERR_INVALID_ARGUMENT`, { got });
      if (r === bad) t.match(got.message, `argument 'options.${key}' is not an option`, `rank ${r}, ${name}: names the key`);
      else t.match(got.message, /rank 1 made an invalid call: .*is not an option/, `rank ${r}, ${name}: names the rank and why`);
      t.same(res[`${name}, after`], { ok: true, value: ['3'] }, `rank ${r}, ${name}: the next collective works`);
    }
    if (r === 0) t.match(res.send.message, /hora\.send: argument 'options\.tga' .*did you mean 'tag'\?/, 'rank 0: its send is refused');
    else t.same(res.send, { ok: true, value: null }, 'rank 1: nothing to do with rank 0\'s bad send');
    t.same(res['send, after'], { ok: true, value: r === 0 ? null : ['7', '8'] }, `rank ${r}: the next message goes through`);
    // [1, 10] and [2, 20] summed after * 0.5; avg of [1], [2] after * 2, then * 4; 100000 x (1 + 2) * 0.25 * 2;
    // reduceScatter avg of [1, 3] and [2, 4] after * 4: rank 0 holds 6, rank 1 holds 14.
    t.same(res['allreduce sum prescale'], { ok: true, value: ['1.5', '15'] }, `rank ${r}: allreduce sum, prescaleFactor 0.5`);
    t.same(res['allreduce avg postscale'], { ok: true, value: ['12'] }, `rank ${r}: allreduce avg, prescaleFactor 2, postscaleFactor 4`);
    t.same(res['allreduce large'], { ok: true, value: ['1.5'] }, `rank ${r}: 100000 elements (the ring), prescaleFactor 0.25, postscaleFactor 2`);
    t.same(res['reduceScatter avg prescale'], { ok: true, value: [r === 0 ? '6' : '14'] }, `rank ${r}: reduceScatter avg, prescaleFactor 4`);
    t.same(res['fused, different factors'], { ok: true, value: ['1.5', '3', '6', '1.5', '3'] },
      `rank ${r}: allreduces of one tick with different factors are not fused together`);
  }
});
