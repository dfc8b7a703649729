'use strict';
// The project's own ONNX Runtime training artifacts (test/fixtures/onnxruntime-training, written by
// scripts/make-onnx-training-artifacts.js): the script writes the committed files byte for byte, ORT reads the
// checkpoint, and what ORT's training build computes from the graphs (losses, AdamW steps, gradients of the
// graph hora/onnxruntime rewrites) is what the same MLP computes in plain JavaScript (test/support/mlp-reference.js).
const t = require('tap');
const fs = require('node:fs');
const path = require('node:path');
const { ROOT } = require('./support/hora-job');
const { prng } = require('./support/worker-util');
const reference = require('./support/mlp-reference');
const { SPEC, makeArtifacts, initialParameters } = require('../scripts/make-onnx-training-artifacts');
const { readCheckpoint } = require('../scripts/ort-checkpoint');

const FIXTURES = path.join(ROOT, 'test', 'fixtures', 'onnxruntime-training');
const ORT_FILE = path.join(ROOT, 'node_modules', 'onnxruntime-web', 'dist', 'ort.training.wasm.min.js');
const read = (f) => fs.readFileSync(path.join(FIXTURES, f));
const ARTIFACTS = ['training_model.onnx', 'eval_model.onnx', 'adamw.onnx', 'checkpoint.ckpt'];

/** The initial parameters from the script's generator, flat in the graphs' order, as float64. */
const initial = () => Float64Array.from(initialParameters().flatMap((p) => Array.from(p.data)));

/** A batch of `n` samples: inputs in [0, 1) like scaled pixels, labels 0..9. */
function batch(seed, n) {
  const rand = prng(seed);
  const x = Float32Array.from({ length: n * SPEC.inputs }, () => rand());
  const labels = Int32Array.from({ length: n }, () => Math.floor(rand() * SPEC.classes));
  return { x, labels };
}

/** max |a - b| / max |b|, and ||a - b|| / ||b||. */
function differences(a, b) {
  let maxDiff = 0, maxB = 0, num = 0, den = 0;
  for (let i = 0; i < b.length; i++) {
    const d = a[i] - b[i];
    maxDiff = Math.max(maxDiff, Math.abs(d));
    maxB = Math.max(maxB, Math.abs(b[i]));
    num += d * d;
    den += b[i] * b[i];
  }
  return { elementwise: maxDiff / maxB, normwise: Math.sqrt(num / den) };
}

t.test('the script writes the committed artifacts byte for byte, the same on every run', async (t) => {
  const [first, second] = [makeArtifacts(), makeArtifacts()];
  t.same(Object.keys(first).sort(), [...ARTIFACTS].sort(), 'it writes the four artifacts');
  for (const name of ARTIFACTS) {
    t.ok(first[name].equals(second[name]), `${name}: two runs give the same bytes`);
    t.ok(fs.existsSync(path.join(FIXTURES, name)), `${name} is committed`);
    if (fs.existsSync(path.join(FIXTURES, name))) {
      t.ok(first[name].equals(read(name)), `${name}: the committed file is what the script writes (${read(name).length} bytes); rerun node scripts/make-onnx-training-artifacts.js`);
    }
  }
});

t.test('the checkpoint holds the generator\'s parameters, and ORT reads them back', async (t) => {
  const checkpoint = readCheckpoint(read('checkpoint.ckpt'));
  t.equal(checkpoint.version, 2, 'checkpoint version 2 (that of ORT\'s own tooling)');
  const byName = new Map(checkpoint.parameters.map((p) => [p.name, p]));
  for (const p of initialParameters()) {
    const got = byName.get(p.name);
    t.ok(got, `${p.name} is in the checkpoint`);
    if (!got) continue;
    t.same(got.dims, p.dims, `${p.name}: dims [${p.dims}]`);
    t.same(Array.from(got.data), Array.from(p.data), `${p.name}: the generator's ${p.data.length} values`);
  }
  const ort = require(ORT_FILE);
  ort.env.wasm.numThreads = 1;
  const session = await ort.TrainingSession.create({ checkpointState: read('checkpoint.ckpt'), trainModel: read('training_model.onnx') });
  const params = (await session.getContiguousParameters(true)).data;
  t.same(Array.from(params), Array.from(Float32Array.from(initial())), `ORT's contiguous parameters (${params.length}) are the generator's, in graph order`);
  await session.release();
  const corrupt = Buffer.from(read('checkpoint.ckpt'));
  corrupt.write('XXXX', 4, 'latin1');
  await t.rejects(ort.TrainingSession.create({ checkpointState: corrupt, trainModel: read('training_model.onnx') }), 'and ORT rejects the same bytes with another file identifier (it checks what it reads)');
});

t.test('ORT\'s TrainingSession on the artifacts = the JS reference: 5 AdamW steps, losses and weights', async (t) => {
  const ort = require(ORT_FILE);
  ort.env.wasm.numThreads = 1;
  const session = await ort.TrainingSession.create({
    checkpointState: read('checkpoint.ckpt'), trainModel: read('training_model.onnx'),
    evalModel: read('eval_model.onnx'), optimizerModel: read('adamw.onnx'),
  });
  const attributes = Object.fromEntries(Object.entries(SPEC.adamw).map(([k, v]) => [k, Math.fround(v)])); // as the model stores them
  const lr = 0.001; // ORT's initial learning rate
  const w = initial();
  const state = {};
  for (let step = 0; step < 5; step++) {
    const { x, labels } = batch(500 + step, 8);
    const out = await session.runTrainStep({ 'input-0': new ort.Tensor('float32', x, [8, SPEC.inputs]), labels: new ort.Tensor('int32', labels, [8]) });
    await session.runOptimizerStep();
    await session.lazyResetGrad();
    const { loss, grad } = reference.lossAndGradient(SPEC, w, x, labels);
    reference.adamwStep(attributes, state, w, grad, lr);
    const got = out[session.trainingOutputNames[0]].data[0];
    t.ok(Math.abs(got - loss) <= 1e-5 * loss, `step ${step + 1}: ORT's loss ${got} = the reference's ${loss.toFixed(7)}`);
  }
  const trained = (await session.getContiguousParameters(true)).data;
  const d = differences(trained, w);
  // ORT computes in float32, the reference in float64 (observed: 1.4e-7 normwise, 2.7e-7 elementwise).
  t.ok(d.normwise <= 1e-5, `weights: ||w_ort - w_ref|| / ||w_ref|| = ${d.normwise.toExponential(2)} <= 1e-5`);
  t.ok(d.elementwise <= 1e-5, `weights: max |w_ort - w_ref| / max |w_ref| = ${d.elementwise.toExponential(2)} <= 1e-5`);
  const moved = differences(trained, initial());
  t.ok(moved.normwise > 100 * d.normwise, `the steps moved the weights (${moved.normwise.toExponential(2)}) far more than ORT and the reference differ`);
  const { x, labels } = batch(900, 8);
  const evalOut = await session.runEvalStep({ 'input-0': new ort.Tensor('float32', x, [8, SPEC.inputs]), labels: new ort.Tensor('int32', labels, [8]) });
  const evalLoss = reference.lossAndGradient(SPEC, w, x, labels).loss;
  t.ok(Math.abs(evalOut.loss.data[0] - evalLoss) <= 1e-5 * evalLoss, `the eval graph's loss ${evalOut.loss.data[0]} = the reference's ${evalLoss.toFixed(7)}`);
  await session.release();
});

t.test('the graph hora/onnxruntime rewrites (gradients as outputs) gives the JS reference\'s gradients', async (t) => {
  const { gradientModel } = require(path.join(ROOT, 'dist', 'adapters', 'onnxruntime', 'index.js'));
  const ort = require(ORT_FILE);
  ort.env.wasm.numThreads = 1;
  const model = gradientModel(read('training_model.onnx'));
  t.same(model.userInputs, ['input-0', 'labels'], 'the user\'s inputs');
  t.same(model.parameters.map((p) => p.name), ['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias'], 'the parameters, in graph order');
  const session = await ort.InferenceSession.create(model.bytes);
  const w = initial();
  const { x, labels } = batch(700, 6);
  const feeds = { 'input-0': new ort.Tensor('float32', x, [6, SPEC.inputs]), labels: new ort.Tensor('int32', labels, [6]) };
  for (const p of model.parameters) feeds[p.name] = new ort.Tensor('float32', Float32Array.from(w.subarray(p.offset, p.offset + p.size)), p.dims);
  const out = await session.run(feeds);
  const { loss, grad } = reference.lossAndGradient(SPEC, w, x, labels);
  t.ok(Math.abs(out[model.userOutputs[0]].data[0] - loss) <= 1e-5 * loss, `loss ${out[model.userOutputs[0]].data[0]} = the reference's ${loss.toFixed(7)}`);
  model.parameters.forEach((p, k) => {
    const d = differences(out[model.gradientOutputs[k]].data, grad.subarray(p.offset, p.offset + p.size));
    t.ok(d.elementwise <= 1e-5, `${p.name}'s gradient: max |g_ort - g_ref| / max |g_ref| = ${d.elementwise.toExponential(2)} <= 1e-5`);
  });
  await session.release();
});
