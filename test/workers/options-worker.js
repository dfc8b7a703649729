'use strict';
// Options hora does not know, and prescaleFactor / postscaleFactor, observed from inside a process.
// Usage: node options-worker.js <scenario>
//   solo   no launcher (a world of one): every entry point given an unknown key, what it answers; and the
//          factors where nothing is combined
//   ranks  under `hora run -np 2`: a collective with an unknown key on one rank fails on both ranks, in the
//          world and in a group, and the next one works; a message's unknown key fails its own rank only;
//          the factors over two ranks
// Writes one JSON line (to $HORA_TEST_RESULT_DIR/rank-<rank>.json when set) and exits 0 whatever it saw:
// the test asserts on it.
const hora = require('../../dist/ts/index.js');
const { report, outcome, describeError } = require('../support/worker-util');

/** What a call that may throw synchronously (a constructor) or return a promise or Work did. */
async function settled(call) {
  try {
    await call();
    return { ok: true };
  } catch (e) {
    return describeError(e);
  }
}

/** The module, or null when it is not installed (the test then skips what needs it, saying why). */
function optional(name) {
  try {
    return require(name);
  } catch {
    return null;
  }
}

async function soloScenario() {
  const results = {};
  const missing = {};
  // Before init: init itself refuses the key (and a later init without it works).
  results['init timeout'] = await settled(() => hora.init({ timeout: 5 }));
  await hora.init();
  const f32 = () => new Float32Array([1, 2, 3]);
  const calls = {
    'allreduce average false': () => hora.allreduce(f32(), { average: false }),
    'allreduce average true': () => hora.allreduce(f32(), { average: true }),
    'allreduce process_set': () => hora.allreduce(f32(), { process_set: 0 }),
    'allreduce inPlace': () => hora.allreduce(f32(), { inPlace: true }),
    'broadcast root_rank': () => hora.broadcast(f32(), { root_rank: 0 }),
    'allgather nam': () => hora.allgather(f32(), { nam: 'x' }),
    'reduceScatter compression': () => hora.reduceScatter(f32(), { compression: 'fp16' }),
    'reduceScatter prescale': () => hora.reduceScatter(f32(), { prescale: 0.5 }),
    'barrier async_op': () => hora.barrier({ async_op: true }),
    'broadcastObject src': () => hora.broadcastObject({ a: 1 }, { src: 0 }),
    'allgatherObject max_bytes': () => hora.allgatherObject({ a: 1 }, { max_bytes: 1024 }),
    'grouped.allreduce average false': () => hora.grouped.allreduce([f32(), f32()], { average: false }),
    'grouped.allgather nam': () => hora.grouped.allgather([f32()], { nam: 'x' }),
    'grouped.reduceScatter prescale': () => hora.grouped.reduceScatter([f32()], { prescale: 0.5 }),
    'reduce dst': () => hora.reduce(f32(), { dst: 0 }),
    'gather gather_list': () => hora.gather(f32(), { gather_list: [] }),
    'send dst': () => hora.send(f32(), { dst: 1 }),
    'recv src': () => hora.recv({ src: 0, dtype: 'float32', count: 3 }),
    'newGroup timeout': () => hora.newGroup([0], { timeout: 30 }),
    'allreduce int32 prescaleFactor': () => hora.allreduce(new Int32Array(3), { prescaleFactor: 0.5 }),
    'reduceScatter uint8 postscaleFactor': () => hora.reduceScatter(new Uint8Array(3), { postscaleFactor: 2 }),
    'allreduce postscaleFactor NaN': () => hora.allreduce(f32(), { postscaleFactor: NaN }),
    'allreduce prescaleFactor string': () => hora.allreduce(f32(), { prescaleFactor: '0.5' }),
  };
  for (const [name, call] of Object.entries(calls)) results[name] = await outcome(call);

  // Alone, nothing is combined: x * pre * post (avg divides by 1), each product rounded in the dtype.
  const values = {
    'allreduce float32 sum': await outcome(() => hora.allreduce(f32(), { op: 'sum', prescaleFactor: 0.5, postscaleFactor: 3 })),
    'allreduce float64 avg inplace': await outcome(() => hora.allreduce(new Float64Array([1, -2, 0.1]), { inplace: true, prescaleFactor: 0.1 })),
    'reduceScatter float16': await outcome(() => hora.reduceScatter(Uint16Array.of(0x3c00, 0x4000), { dtype: 'float16', prescaleFactor: 0.5, postscaleFactor: 0.5 })),
    'allreduce int32 factors of 1': await outcome(() => hora.allreduce(new Int32Array([4]), { prescaleFactor: 1, postscaleFactor: 1 })),
  };

  // The adapters' entry points.
  const tf = optional('@tensorflow/tfjs');
  if (tf) {
    const { DistributedOptimizer, pipeline } = require('../../dist/adapters/tfjs/index.js');
    results['DistributedOptimizer bucket_mb'] = await settled(() => new DistributedOptimizer(tf.train.sgd(0.1), { bucket_mb: 4 }));
    results['DistributedOptimizer average'] = await settled(() => new DistributedOptimizer(tf.train.sgd(0.1), { average: true }));
    const model = tf.sequential({ layers: [tf.layers.dense({ units: 2, inputShape: [3] }), tf.layers.dense({ units: 1 })] });
    results['pipeline micro_batches'] = await settled(() => pipeline(model, { stages: 1, micro_batches: 2 }));
    const { shard, LearningRateWarmupCallback, ElasticCallback, ElasticState } = require('../../dist/adapters/tfjs/index.js');
    results['shard strided'] = await settled(() => shard([1, 2, 3, 4], undefined, { strided: true }));
    results['LearningRateWarmupCallback warmup_epochs'] = await settled(() => new LearningRateWarmupCallback({ warmupEpochs: 1, warmup_epochs: 2 }));
    if (ElasticState) {
      results['ElasticCallback commit_every'] = await settled(() => new ElasticCallback(new ElasticState(model, model.optimizer ?? tf.train.sgd(0.1)), { commit_every: 5 }));
    }
    const piped = pipeline(tf.sequential({ layers: [tf.layers.dense({ units: 1, inputShape: [2] })] }), { stages: 1 });
    piped.compile({ optimizer: tf.train.sgd(0.1), loss: 'meanSquaredError' });
    const px = tf.zeros([4, 2]), py = tf.zeros([4, 1]);
    results['pipeline.fit batch_size'] = await settled(() => piped.fit(px, py, { batch_size: 2 }));
    results['pipeline.evaluate batch_size'] = await settled(() => piped.evaluate(px, py, { batch_size: 2 }));
  } else {
    missing.tfjs = '@tensorflow/tfjs is not installed';
  }
  const brain = optional('brain.js');
  if (brain) {
    const { distributed } = require('../../dist/adapters/brain/index.js');
    const net = new brain.NeuralNetwork({ hiddenLayers: [2] });
    results['brain distributed batch_size'] = await settled(() => distributed(net, { batchSize: 2, batch_size: 2 }));
    const data = [{ input: [0, 1], output: [1] }, { input: [1, 0], output: [0] }];
    results['brain trainAsync learning_rate'] = await settled(() => distributed(net, { batchSize: 2 }).trainAsync(data, { learning_rate: 0.1 }));
  } else {
    missing.brain = 'brain.js is not installed';
  }
  // The option check comes before ONNX Runtime is loaded: it needs no onnxruntime-web.
  const { DistributedTrainingSession } = require('../../dist/adapters/onnxruntime/index.js');
  const bytes = new Uint8Array(1);
  results['onnxruntime create learning_rate'] = await settled(() => DistributedTrainingSession.create({
    checkpointState: bytes, trainModel: bytes, optimizerModel: bytes, learning_rate: 0.01,
  }));
  await hora.shutdown();
  return { results, values, missing };
}

async function ranksScenario() {
  const r = hora.rank();
  const p = hora.size();
  const bad = p - 1;
  const results = {};
  const follow = async (call) => outcome(call);
  // World: the bad rank's unknown key fails the collective on every rank; the next one works.
  results['world allreduce'] = await outcome(() => hora.allreduce(new Float32Array(4).fill(1), r === bad ? { average: false } : { op: 'sum' }));
  results['world allreduce, after'] = await follow(() => hora.allreduce(new Int32Array([r + 1]), { op: 'sum' }));
  results['world reduceScatter'] = await outcome(() => hora.reduceScatter(new Float32Array(4).fill(1), r === bad ? { post_scale_factor: 2 } : {}));
  results['world reduceScatter, after'] = await follow(() => hora.allreduce(new Int32Array([r + 1]), { op: 'sum' }));
  results['newGroup'] = await outcome(() => hora.newGroup([0, 1], r === bad ? { backend: 'gloo' } : undefined).then((g) => (g ? [g.size()] : [])));
  results['newGroup, after'] = await follow(() => hora.allreduce(new Int32Array([r + 1]), { op: 'sum' }));
  const group = await hora.newGroup([0, 1]);
  results['group allreduce'] = await outcome(() => group.allreduce(new Float32Array(4).fill(1), r === bad ? { op: 'sum', average: true } : { op: 'sum' }));
  results['group allreduce, after'] = await follow(() => group.allreduce(new Int32Array([r + 1]), { op: 'sum' }));
  // A message has no order across ranks to keep: the bad call fails on its own rank only.
  results['send'] = await outcome(() => (r === 0 ? hora.send(new Float32Array(2), { to: 1, tga: 3 }) : Promise.resolve()));
  results['send, after'] = await follow(() => (r === 0 ? hora.send(Float32Array.of(7, 8), { to: 1 }) : hora.recv(new Float32Array(2), { from: 0 })));
  // The factors over two ranks, small (the data rides the agreement) and past the ring's threshold.
  results['allreduce sum prescale'] = await outcome(() => hora.allreduce(Float32Array.of(r + 1, 10 * (r + 1)), { op: 'sum', prescaleFactor: 0.5 }));
  results['allreduce avg postscale'] = await outcome(() => hora.allreduce(Float64Array.of(r + 1), { prescaleFactor: 2, postscaleFactor: 4 }));
  const big = await outcome(() => hora.allreduce(new Float32Array(100000).fill(r + 1), { op: 'sum', prescaleFactor: 0.25, postscaleFactor: 2 }));
  results['allreduce large'] = big.ok ? { ok: true, value: [...new Set(big.value)] } : big;
  results['reduceScatter avg prescale'] = await outcome(() => hora.reduceScatter(Float32Array.of(r + 1, r + 3), { op: 'avg', prescaleFactor: 4 }));
  // Small allreduces of one synchronous run are fused, but never across different factors.
  const fused = [{ prescaleFactor: 0.5 }, {}, { postscaleFactor: 2 }, { prescaleFactor: 0.5 }, { prescaleFactor: 0.5, postscaleFactor: 2 }]
    .map((factors) => hora.allreduce(Float32Array.of(r + 1, r + 1), { op: 'sum', ...factors }));
  results['fused, different factors'] = { ok: true, value: [] };
  for (const work of fused) {
    const got = await outcome(() => work);
    if (!got.ok) results['fused, different factors'] = got;
    else if (results['fused, different factors'].ok) results['fused, different factors'].value.push(got.value[0]);
  }
  return { results };
}

async function main() {
  const scenario = process.argv[2];
  if (scenario === 'solo') {
    report(0, await soloScenario());
    return;
  }
  if (scenario !== 'ranks') throw new Error(`unknown scenario ${scenario}`);
  await hora.init();
  const rank = hora.rank();
  report(rank, { size: hora.size(), ...(await ranksScenario()) });
  await hora.shutdown();
}

main().catch((e) => {
  process.stderr.write(`options-worker: ${e && e.stack ? e.stack : String(e)}\n`);
  process.exit(1);
});
