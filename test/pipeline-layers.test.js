'use strict';
// Models as chains of layers for the pipeline, and the per-layer profiler, with small real tfjs models
// on the cpu backend.
const t = require('tap');
const tf = require('@tensorflow/tfjs');
const { layerChain, profileLayers } = require('../dist/adapters/tfjs/pipeline/layers.js');
const { planPartition } = require('../dist/adapters/tfjs/pipeline/partition.js');

const names = (ls) => ls.map((l) => l.name);
const dense = (units, name, extra = {}) => tf.layers.dense({ units, name, ...extra });

function invalidModel(t, model, re, what) {
  try {
    layerChain(model);
  } catch (e) {
    t.equal(e.code, 'ERR_INVALID_ARGUMENT', `${what}: ERR_INVALID_ARGUMENT`);
    t.match(e.message, re, what);
    return;
  }
  t.fail(`${what}: accepted`);
}

t.before(async () => {
  await tf.setBackend('cpu');
  await tf.ready();
});

t.test('a Sequential model and a functional chain give their layers in order, without the InputLayer', async (t) => {
  const seq = tf.sequential({ layers: [dense(8, 's0', { inputShape: [4] }), tf.layers.dropout({ rate: 0.5, name: 's1' }), dense(2, 's2')] });
  t.same(names(layerChain(seq)), ['s0', 's1', 's2']);
  const input = tf.input({ shape: [4], name: 'f_in' });
  const out = dense(3, 'f2').apply(tf.layers.reLU({ name: 'f1' }).apply(dense(8, 'f0').apply(input)));
  t.same(names(layerChain(tf.model({ inputs: input, outputs: out }))), ['f0', 'f1', 'f2']);
});

t.test('a layer that another model also uses is followed only along this model\'s graph', async (t) => {
  const shared = dense(4, 'shared');
  const inA = tf.input({ shape: [4] });
  const modelA = tf.model({ inputs: inA, outputs: dense(2, 'onlyA').apply(shared.apply(inA)) });
  const inB = tf.input({ shape: [4] });
  const modelB = tf.model({ inputs: inB, outputs: dense(3, 'onlyB').apply(shared.apply(inB)) });
  t.same(names(layerChain(modelA)), ['shared', 'onlyA']);
  t.same(names(layerChain(modelB)), ['shared', 'onlyB']);
});

t.test('models that are not chains are rejected, naming the layer', async (t) => {
  const input = tf.input({ shape: [4] });
  const a = dense(4, 'res_a').apply(input);
  const b = dense(4, 'res_b').apply(a);
  invalidModel(t, tf.model({ inputs: input, outputs: tf.layers.add({ name: 'res_add' }).apply([a, b]) }),
    /must be a chain of layers .*; layer 'res_a' feeds 2 layers: 'res_b', 'res_add'/, 'a residual branch');

  const in2 = tf.input({ shape: [4] });
  const c = dense(4, 'twice_src').apply(in2);
  invalidModel(t, tf.model({ inputs: in2, outputs: tf.layers.concatenate({ name: 'twice_cat' }).apply([c, c]) }),
    /layer 'twice_cat' has 2 inbound layers: 'twice_src', 'twice_src'/, 'one output used twice by one layer');

  const in3 = tf.input({ shape: [4] });
  const d = dense(4, 'applied_twice');
  invalidModel(t, tf.model({ inputs: in3, outputs: d.apply(d.apply(in3)) }), /layer 'applied_twice' is applied more than once/, 'shared weights');

  const x1 = tf.input({ shape: [4] });
  const x2 = tf.input({ shape: [4] });
  invalidModel(t, tf.model({ inputs: [x1, x2], outputs: tf.layers.add().apply([x1, x2]) }), /the model has 2 inputs and 1 outputs, not one of each/, 'two inputs');

  const in4 = tf.input({ shape: [4] });
  const mid = dense(4, 'also_out').apply(in4);
  const end = dense(4, 'the_end').apply(mid);
  invalidModel(t, tf.model({ inputs: in4, outputs: [mid, end] }), /the model has 1 inputs and 2 outputs/, 'two outputs');

  for (const bad of [null, {}, 'model']) {
    t.throws(() => layerChain(bad), /argument 'model' must be a tf.LayersModel \(tf.sequential or tf.model\)/, `not a model: ${JSON.stringify(bad)}`);
  }
});

t.test('a block with a branch, wrapped as a model of its own, is one layer of the chain', async (t) => {
  const input = tf.input({ shape: [8] });
  const inner = dense(8, 'block_inner').apply(input);
  const block = tf.model({ inputs: input, outputs: tf.layers.add().apply([input, inner]), name: 'residual_block' });
  const model = tf.sequential({ layers: [dense(8, 'before', { inputShape: [6] }), block, dense(2, 'after')] });
  const chain = layerChain(model);
  t.same(names(chain), ['before', 'residual_block', 'after']);
  const profile = profileLayers(chain, tf.ones([3, 6]), { repeats: 1, warmup: 0 });
  t.same(profile.map((p) => p.outputShape), [[3, 8], [3, 8], [3, 2]]);
  t.equal(profile[1].paramBytes, (8 * 8 + 8) * 4, 'the block\'s weights count as one layer\'s');
});

t.test('profileLayers: output and weight bytes exactly, times that follow the work, nothing leaked', async (t) => {
  const model = tf.sequential({ layers: [
    dense(512, 'heavy', { inputShape: [128], activation: 'relu' }),
    dense(8, 'light1'),
    tf.layers.dropout({ rate: 0.25, name: 'drop' }),
    dense(8, 'light2'),
  ] });
  const sample = tf.randomNormal([32, 128]);
  const before = tf.memory().numTensors;
  const profile = profileLayers(layerChain(model), sample, { repeats: 3, warmup: 1 });
  t.equal(tf.memory().numTensors, before, 'every tensor made while profiling is disposed');
  t.same(profile.map((p) => p.name), ['heavy', 'light1', 'drop', 'light2']);
  t.same(profile.map((p) => p.outputShape), [[32, 512], [32, 8], [32, 8], [32, 8]]);
  t.same(profile.map((p) => p.outputBytes), [32 * 512 * 4, 32 * 8 * 4, 32 * 8 * 4, 32 * 8 * 4]);
  t.same(profile.map((p) => p.paramBytes), [(128 * 512 + 512) * 4, (512 * 8 + 8) * 4, 0, (8 * 8 + 8) * 4]);
  for (const p of profile) {
    t.ok(Number.isFinite(p.forward) && p.forward > 0 && Number.isFinite(p.backward) && p.backward >= 0, `${p.name}: forward ${p.forward}s, backward ${p.backward}s`);
  }
  // 'heavy' does 2M multiply-adds each way, 'light2' 2 thousand: even on a loaded machine the order holds.
  t.ok(profile[0].forward > 3 * profile[3].forward, 'the heavy layer\'s forward measures longer');
  t.ok(profile[0].backward > 3 * profile[3].backward, 'the heavy layer\'s backward measures longer');
  const plan = planPartition(profile, { stages: 2 });
  t.same(plan.counts, [1, 3], 'the planner gives the heavy layer a stage of its own');
  t.throws(() => profileLayers(layerChain(model), sample, { repeats: 0 }), /option 'repeats' must be an integer >= 1; received 0/);
  t.throws(() => profileLayers(layerChain(model), [[1]]), /argument 'sample' must be a tf.Tensor; received object/);
  sample.dispose();
});

t.test('profileLayers times the layers in turns, run by run, so that a slow spell falls on all of them', async (t) => {
  const model = tf.sequential({ layers: [dense(6, 'a', { inputShape: [4] }), dense(5, 'b'), dense(3, 'c')] });
  const calls = [];
  for (const layer of model.layers) {
    const apply = layer.apply.bind(layer);
    layer.apply = (...args) => { calls.push(layer.name); return apply(...args); };
  }
  const sample = tf.randomNormal([8, 4]);
  profileLayers(layerChain(model), sample, { repeats: 3, warmup: 1 });
  sample.dispose();
  // One apply per layer to make the next one's input, then a forward and a gradient's forward per run.
  const runs = calls.slice(3).filter((name, i, all) => i === 0 || all[i - 1] !== name);
  t.same(calls.slice(0, 3), ['a', 'b', 'c'], 'the inputs first, through the chain');
  t.same(runs, ['a', 'b', 'c', 'a', 'b', 'c', 'a', 'b', 'c', 'a', 'b', 'c'], 'then 4 rounds (1 warm-up, 3 timed) of a, b, c');
});
