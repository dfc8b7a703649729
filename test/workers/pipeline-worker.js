'use strict';
// Trains small tfjs models through hora/tfjs's pipeline() and reports what each rank saw.
// Usage: node pipeline-worker.js <scenario>
//   equiv     trainOnBatch for STEPS batches of B samples (PIPE_* env: schedule, partition, micro-batches,
//             optimizer, recompute), and in the same process one plain model trained on the whole batch from the same
//             start: the worst relative difference of every weight, on every rank
//   api       fit with validationData and callbacks, evaluate, predict, getWeights/setWeights, toModel,
//             save, stats and plan
//   bad       pipeline() and fit/trainOnBatch with every kind of bad input: each error's code and message
//   mismatch  rank-dependent options or models, one kind after the other: the error of each pipeline()
//   throw     a layer of stage $THROW_STAGE throws in batch 2
//   kill      stage $KILL_STAGE kills itself (SIGKILL) in batch 2
//   shape     stage 0's last layer gives an output wider than it declares
// Each rank writes one JSON line to $HORA_TEST_RESULT_DIR/rank-<rank>.json.
const tf = require('@tensorflow/tfjs');
const hora = require('../../dist/ts/index.js');
const { pipeline, shard } = require('../../dist/adapters/tfjs/index.js');
const { report, prng, describeError } = require('../support/worker-util');

const rand = (seed) => { const next = prng(seed); return () => next() * 2 - 1; };
const env = (name, fallback) => process.env[name] ?? fallback;

/** Identity, except that it throws when globalThis.boom names this layer: a NaN check in user code. */
class Boom extends tf.layers.Layer {
  static className = 'Boom';
  call(inputs) {
    const x = Array.isArray(inputs) ? inputs[0] : inputs;
    if (globalThis.boom === this.name) throw new Error(`${this.name}: NaN in the activations (thrown on purpose)`);
    return tf.mul(x, 1);
  }
}
tf.serialization.registerClass(Boom);

/** Says its output has the input's width, but appends a column. */
class Liar extends tf.layers.Layer {
  static className = 'Liar';
  computeOutputShape(s) { return s; }
  call(inputs) {
    const x = Array.isArray(inputs) ? inputs[0] : inputs;
    return tf.concat([x, tf.slice(x, [0, 0], [-1, 1])], 1);
  }
}
tf.serialization.registerClass(Liar);

/** A chain of dense layers [in, ...widths], seeded weights, optionally with Boom layers between. */
function buildModel({ widths = [6, 10, 8, 7, 3], activation = 'tanh', booms = false, seed = 7, extra = null, l2 = 0 } = {}) {
  const layers = [];
  for (let i = 1; i < widths.length; i++) {
    const opts = { units: widths[i], activation: i === widths.length - 1 ? 'linear' : activation, name: `d${i}` };
    if (i === 1) opts.inputShape = [widths[0]];
    if (l2) Object.assign(opts, { kernelRegularizer: tf.regularizers.l2({ l2 }), biasRegularizer: tf.regularizers.l1({ l1: l2 }) });
    layers.push(tf.layers.dense(opts));
    if (booms && i < widths.length - 1) layers.push(new Boom({ name: `boom${i}` }));
    if (extra && extra.after === i) layers.push(extra.layer());
  }
  const model = tf.sequential({ layers });
  const r = rand(seed);
  model.setWeights(model.getWeights().map((w) => tf.tensor(Float32Array.from({ length: w.size }, () => 0.6 * r()), w.shape)));
  return model;
}

function batch(step, n, widths = [6, 10, 8, 7, 3]) {
  const r = rand(1000 + step);
  const inW = widths[0];
  const outW = widths[widths.length - 1];
  const x = Float32Array.from({ length: n * inW }, r);
  const y = new Float32Array(n * outW);
  for (let i = 0; i < n; i++) for (let j = 0; j < outW; j++) y[i * outW + j] = Math.sin(x[i * inW + j] + 2 * x[i * inW + ((j + 1) % inW)]) + 0.1 * r();
  return { x: tf.tensor2d(x, [n, inW]), y: tf.tensor2d(y, [n, outW]) };
}

const OPTIMIZERS = { sgd: () => tf.train.sgd(0.1), adam: () => tf.train.adam(0.01) };

function worstRel(a, b) {
  let worst = 0;
  a.forEach((t, i) => {
    const u = t.dataSync();
    const v = b[i].dataSync();
    u.forEach((x, j) => { worst = Math.max(worst, Math.abs(x - v[j]) / Math.max(Math.abs(v[j]), 1e-3)); });
  });
  return worst;
}

function flat(ts) {
  const all = [];
  for (const t of ts) all.push(...t.dataSync());
  return Buffer.from(Float32Array.from(all).buffer).toString('base64');
}

async function equiv() {
  const schedule = env('PIPE_SCHEDULE', '1f1b');
  const partition = env('PIPE_PARTITION', 'auto') === 'auto' ? 'auto' : JSON.parse(process.env.PIPE_PARTITION);
  const microBatches = Number(env('PIPE_MICRO', '4'));
  const opt = env('PIPE_OPT', 'adam');
  const B = Number(env('PIPE_B', '10'));
  const steps = Number(env('PIPE_STEPS', '4'));
  // PIPE_DROPOUT=1: a Dropout layer after the first (the 1-process comparison then means nothing).
  const dropout = env('PIPE_DROPOUT', '') === '1' ? { after: 1, layer: () => tf.layers.dropout({ rate: 0.3, name: 'drop' }) } : null;
  // PIPE_ACTIVATION: the hidden layers' activation (tfjs records relu's product unfused, linear's fused).
  const activation = env('PIPE_ACTIVATION', 'tanh');
  // PIPE_L2: an L2 penalty on every kernel and an L1 on every bias, of this weight.
  const l2 = Number(env('PIPE_L2', '0'));
  const model = buildModel({ extra: dropout, activation, l2 });
  const recompute = env('PIPE_RECOMPUTE', 'false') === 'true';
  const deferWeightGradients = env('PIPE_DEFER', 'false') === 'true';
  // PIPE_STAGES below the world size: size / stages replicas, each training its shard of every batch.
  const stages = Number(env('PIPE_STAGES', String(hora.size())));
  const pipe = pipeline(model, { stages, microBatches, schedule, partition, recompute, deferWeightGradients });
  pipe.compile({ optimizer: OPTIMIZERS[opt](), loss: 'meanSquaredError' });
  const ref = buildModel({ seed: 99, extra: dropout, activation, l2 });
  ref.setWeights(await pipe.getWeights());
  ref.compile({ optimizer: OPTIMIZERS[opt](), loss: 'meanSquaredError' });
  const losses = [];
  const refLosses = [];
  const tensors = [];
  for (let s = 0; s < steps; s++) {
    const { x, y } = batch(s, B);
    const local = pipe.replicas > 1 ? shard(x, y, { rank: pipe.replica, size: pipe.replicas }) : { x, y };
    // The first stage reads x only and the last y only; a middle stage takes its batch size from either.
    const last = pipe.stage === pipe.stages - 1;
    const first = pipe.stage === 0;
    losses.push(await pipe.trainOnBatch(last && !first ? null : local.x, first && !last ? null : local.y));
    if (local.x !== x) tf.dispose([local.x, local.y]);
    refLosses.push(await ref.trainOnBatch(x, y));
    tf.dispose([x, y]);
    tensors.push(tf.memory().numTensors);
  }
  const weights = await pipe.getWeights();
  const expected = ref.getWeights();
  report(hora.rank(), {
    worst: worstRel(weights, expected), moved: worstRel(weights, model.getWeights()), base64: flat(weights),
    losses, refLosses, tensors, recompute: pipe.recompute, deferWeightGradients: pipe.deferWeightGradients, plan: pipe.plan, stats: pipe.stats, stage: pipe.stage, stages: pipe.stages, replica: pipe.replica, replicas: pipe.replicas,
  });
}

async function api() {
  // What the pipeline reports for the launcher's stats (the dashboard's Pipeline panel), seen on its way.
  const stats = require('../../dist/adapters/tfjs/pipeline/stats.js');
  const { steps } = require('../../dist/ts/stats.js');
  const reported = [];
  const original = stats.reportPipelineBatch;
  stats.reportPipelineBatch = (batch) => { reported.push(batch); return original(batch); };
  const model = buildModel({ widths: [6, 12, 8, 3], activation: 'relu' });
  const pipe = pipeline(model, { stages: hora.size(), microBatches: 3, schedule: '1f1b', partition: 'auto' });
  pipe.compile({ optimizer: tf.train.adam(0.01), loss: 'categoricalCrossentropy', metrics: ['accuracy'] });
  const ref = buildModel({ widths: [6, 12, 8, 3], activation: 'relu', seed: 5 });
  ref.setWeights(await pipe.getWeights());
  ref.compile({ optimizer: tf.train.adam(0.01), loss: 'categoricalCrossentropy', metrics: ['accuracy'] });
  const n = 40;
  const r = rand(3);
  const x = tf.tensor2d(Float32Array.from({ length: n * 6 }, r), [n, 6]);
  const labels = Array.from({ length: n }, (_, i) => (x.dataSync()[i * 6] > 0 ? 0 : x.dataSync()[i * 6 + 1] > 0 ? 1 : 2));
  const y = tf.oneHot(tf.tensor1d(labels, 'int32'), 3).toFloat();
  const events = [];
  const cb = {
    onTrainBegin: () => events.push('trainBegin'),
    onEpochBegin: (e) => events.push(`epochBegin ${e}`),
    onBatchEnd: (b, logs) => events.push(`batchEnd ${b} ${typeof logs.loss}`),
    onEpochEnd: (e, logs) => events.push(`epochEnd ${e} ${Object.keys(logs).sort().join(',')}`),
    onTrainEnd: () => events.push('trainEnd'),
  };
  const vx = tf.slice(x, 0, 12);
  const vy = tf.slice(y, 0, 12);
  const history = await pipe.fit(x, y, { batchSize: 16, epochs: 3, shuffle: false, validationData: [vx, vy], callbacks: [cb] });
  const refHistory = await ref.fit(x, y, { batchSize: 16, epochs: 3, shuffle: false, validationData: [vx, vy], verbose: 0 });
  const weights = await pipe.getWeights();
  const fitWorst = worstRel(weights, ref.getWeights());
  const evaluated = await pipe.evaluate(x, y, { batchSize: 7 });
  const refEvaluated = ref.evaluate(x, y, { batchSize: 7 });
  const predicted = await pipe.predict(x, { batchSize: 9 });
  const refPredicted = ref.predict(x);
  const shuffled = await pipe.fit(x, y, { batchSize: 16, epochs: 1 });
  // setWeights then getWeights gives them back; toModel and save give the same model anywhere.
  const fresh = buildModel({ widths: [6, 12, 8, 3], activation: 'relu', seed: 11 }).getWeights();
  pipe.setWeights(fresh);
  const back = await pipe.getWeights();
  const exported = await pipe.toModel();
  let artifacts = null;
  const saved = await pipe.save(tf.io.withSaveHandler(async (a) => { artifacts = a; return { modelArtifactsInfo: { dateSaved: new Date(), modelTopologyType: 'JSON' } }; }));
  let reloaded = null;
  if (artifacts) {
    // Loaded by plain tfjs, without hora: the same weights.
    const m = await tf.loadLayersModel(tf.io.fromMemory(artifacts));
    reloaded = { className: m.getClassName(), same: worstRel(m.getWeights(), fresh) };
  }
  report(hora.rank(), {
    history: history.history, refHistory: refHistory.history, events, fitWorst,
    evaluated: evaluated.map((s) => s.dataSync()[0]), refEvaluated: refEvaluated.map((s) => s.dataSync()[0]),
    predictWorst: worstRel([predicted], [refPredicted]), predictShape: predicted.shape,
    shuffledLoss: shuffled.history.loss, setGetWorst: worstRel(back, fresh), exportedWorst: worstRel(exported.getWeights(), fresh),
    exportedClass: exported.getClassName(), saved: saved ? Object.keys(saved).sort() : null, reloaded,
    plan: pipe.plan, stats: pipe.stats, steps: { ...steps }, reported,
  });
}

/** Runs f and reports its error (every case is run on every rank alike, so collectives stay in step). */
async function caught(f) {
  try {
    await f();
    return { ok: true };
  } catch (e) {
    return describeError(e);
  }
}

async function bad() {
  const size = hora.size();
  const out = {};
  const model = buildModel();
  const input = tf.input({ shape: [4] });
  const a = tf.layers.dense({ units: 4, name: 'branch_a' }).apply(input);
  const b = tf.layers.dense({ units: 4, name: 'branch_b' }).apply(a);
  const branched = tf.model({ inputs: input, outputs: tf.layers.add({ name: 'join' }).apply([a, b]) });
  out.stagesNotDividing = await caught(() => pipeline(model, { stages: size + 1 }));
  out.stagesZero = await caught(() => pipeline(model, { stages: 0 }));
  out.microZero = await caught(() => pipeline(model, { stages: size, microBatches: 0 }));
  out.schedule = await caught(() => pipeline(model, { stages: size, schedule: 'zigzag' }));
  out.partitionSum = await caught(() => pipeline(model, { stages: size, partition: [2, 1] }));
  out.partitionEmpty = await caught(() => pipeline(model, { stages: size, partition: [4, 0] }));
  out.notAChain = await caught(() => pipeline(branched, { stages: size }));
  out.notAModel = await caught(() => pipeline({ layers: 3 }, { stages: size }));
  out.unknownOption = await caught(() => pipeline(model, { stages: size, micro: 2 }));
  out.deferNotBoolean = await caught(() => pipeline(model, { stages: size, deferWeightGradients: 'yes' }));
  const pipe = pipeline(model, { stages: size, microBatches: 4, partition: [2, 2] });
  out.beforeCompile = await caught(() => pipe.trainOnBatch(tf.zeros([8, 6]), tf.zeros([8, 3])));
  pipe.compile({ optimizer: tf.train.sgd(0.1), loss: 'meanSquaredError' });
  out.microLarger = await caught(() => pipe.fit(tf.zeros([8, 6]), tf.zeros([8, 3]), { batchSize: 3 }));
  out.microLargerBatch = await caught(() => pipe.trainOnBatch(tf.zeros([3, 6]), tf.zeros([3, 3])));
  out.xy = await caught(() => pipe.fit(tf.zeros([8, 6]), tf.zeros([7, 3]), { batchSize: 4 }));
  out.setWeights = await caught(() => pipe.setWeights([tf.zeros([2])]));
  // The data are only read on the stage that needs them: a wrong shape there fails every rank.
  out.xShape = await caught(() => pipe.trainOnBatch(tf.zeros([8, 5]), tf.zeros([8, 3])));
  out.afterFailure = await caught(() => pipe.trainOnBatch(tf.zeros([8, 6]), tf.zeros([8, 3])));
  report(hora.rank(), out);
}

/** Each way ranks can differ, one after the other (a refused pipeline() leaves the ranks in step). */
async function mismatch() {
  const r = hora.rank();
  const out = {};
  for (const which of ['microBatches', 'schedule', 'deferWeightGradients', 'layers', 'shapes', 'refused']) {
    const opts = { stages: hora.size(), microBatches: 4, schedule: '1f1b', partition: [2, 2] };
    let model = buildModel();
    if (which === 'microBatches') opts.microBatches = 4 + r;
    if (which === 'schedule') opts.schedule = r === 1 ? 'gpipe' : '1f1b';
    if (which === 'deferWeightGradients') opts.deferWeightGradients = r === 1;
    if (which === 'layers') { model = buildModel({ widths: r === 1 ? [6, 10, 8, 7, 5, 3] : [6, 10, 8, 7, 3] }); opts.partition = 'auto'; }
    if (which === 'shapes') model = buildModel({ widths: r === 1 ? [6, 10, 9, 7, 3] : [6, 10, 8, 7, 3] });
    if (which === 'refused') opts.microBatches = r === 1 ? -1 : 4;
    out[which] = await caught(() => pipeline(model, opts));
  }
  report(r, out);
}

async function failing(kind) {
  const stage = Number(process.env[kind === 'throw' ? 'THROW_STAGE' : 'KILL_STAGE']);
  const replica = Number(env('THROW_REPLICA', '0'));
  const stages = Number(env('PIPE_STAGES', String(hora.size())));
  const model = buildModel({ booms: true });
  // 7 layers, d1 boom1 d2 boom2 d3 boom3 d4: every stage holds a Boom.
  const partition = { 2: [3, 4], 3: [2, 2, 3] }[stages];
  const pipe = pipeline(model, { stages, microBatches: 4, schedule: env('PIPE_SCHEDULE', '1f1b'), partition });
  pipe.compile({ optimizer: tf.train.sgd(0.1), loss: 'meanSquaredError' });
  const boomIn = pipe.plan.layers[stage].find((n) => n.startsWith('boom'));
  let step = 0;
  const result = await caught(async () => {
    for (; step < 5; step++) {
      const { x, y } = batch(step, 8);
      if (step === 2 && pipe.stage === stage && pipe.replica === replica) {
        if (kind === 'kill') setTimeout(() => process.kill(process.pid, 'SIGKILL'), 20);
        else globalThis.boom = boomIn;
      }
      await pipe.trainOnBatch(x, y);
    }
  });
  report(hora.rank(), { error: result, step, boomIn });
  process.exit(result.ok ? 0 : 1);
}

async function shape() {
  const model = buildModel({ extra: { after: 2, layer: () => new Liar({ name: 'liar' }) } });
  const pipe = pipeline(model, { stages: hora.size(), microBatches: 2, partition: [3, 2] });
  pipe.compile({ optimizer: tf.train.sgd(0.1), loss: 'meanSquaredError' });
  const { x, y } = batch(0, 8);
  const result = await caught(() => pipe.trainOnBatch(x, y));
  report(hora.rank(), { error: result });
  process.exit(result.ok ? 0 : 1);
}

/** Started without a launcher: a world of one asked for 2 stages. */
async function alone() {
  report(hora.rank(), { size: hora.size(), twoStages: await caught(() => pipeline(buildModel(), { stages: 2 })) });
}

const SCENARIOS = { equiv, api, bad, mismatch, throw: () => failing('throw'), kill: () => failing('kill'), shape, alone };

(async () => {
  await tf.setBackend('cpu');
  await hora.init();
  await SCENARIOS[process.argv[2]]();
  await hora.shutdown();
})().catch((e) => {
  console.error(e);
  try { report(hora.rank(), { fatal: describeError(e) }); } catch { /* not initialised */ }
  process.exit(1);
});
