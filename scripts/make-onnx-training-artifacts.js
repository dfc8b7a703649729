#!/usr/bin/env node
'use strict';
/**
 * Writes ONNX Runtime training artifacts of a small MLP, the project's own test data for hora/onnxruntime:
 *   training_model.onnx  forward, loss, backward and gradient accumulation, as ORT's training build runs them
 *   eval_model.onnx      forward and loss
 *   adamw.onnx           the optimizer graph (one AdamWOptimizer node)
 *   checkpoint.ckpt      the initial parameters (ORT's FlatBuffers checkpoint, scripts/ort-checkpoint.js)
 * Usage: node scripts/make-onnx-training-artifacts.js [OUT_DIR]   (default test/fixtures/onnxruntime-training)
 *
 * The graphs have the shape, names, operators and domains of those ORT's offline tooling
 * (onnxruntime.training.artifacts.generate_artifacts) writes for the same model, since onnxruntime-web's
 * TrainingSession finds its way by them:
 * - graph inputs: the user's inputs, then each parameter, then `<param>_grad.accumulation.buffer` for each, then
 *   `lazy_reset_grad` (bool [1]); ORT tells parameters from user inputs by the checkpoint's names, and buffers by
 *   that suffix;
 * - the backward pass uses ORT's gradient ops of domain com.microsoft (SoftmaxCrossEntropyLossGrad, ReluGrad)
 *   and standard ONNX ops (Gemm, ReduceSum); each gradient `<param>_grad` goes into an InPlaceAccumulatorV2
 *   (com.microsoft) that adds it to its buffer, or overwrites the buffer when lazy_reset_grad is set;
 * - graph outputs: the loss first, then each accumulator's `<param>_grad.accumulation.out` (bool [1]);
 * - the optimizer graph: AdamWOptimizer (com.microsoft) over inputs learning_rate, step, params, gradients,
 *   first_order_moments, second_order_moments (sequences of float tensors), one bool output.
 *
 * The model: input-0 float32 [N, 784] -> Gemm (fc1, 784 -> HIDDEN) -> Relu -> Gemm (fc2, HIDDEN -> 10) = output-0,
 * loss = SoftmaxCrossEntropyLoss(output-0, labels int32 [N], mean). Parameters fc1.weight [HIDDEN, 784],
 * fc1.bias, fc2.weight [10, HIDDEN], fc2.bias (Gemm with transB = 1, PyTorch's Linear), initialised uniform in
 * +-1/sqrt(fan_in) from a fixed seed. The same inputs and labels as ORT's MNIST test artifacts, so code written
 * for one runs on the other.
 *
 * The output is the same bytes on every run (test/onnxruntime-artifacts.test.js checks the committed files).
 */
const fs = require('node:fs');
const path = require('node:path');
const protobuf = require('protobufjs');
const { writeCheckpoint } = require('./ort-checkpoint');

const ROOT = path.join(__dirname, '..');

/** The model's sizes and the optimizer's attributes. */
const SPEC = {
  inputs: 784,
  hidden: 32,
  classes: 10,
  seed: 20261127,
  // AdamWOptimizer's attributes: adam_mode 1 (Hugging Face's AdamW, what ORT's tooling writes by default), and a
  // weight decay, so that its part of the update is exercised too.
  adamw: { adam_mode: 1, alpha: 0.9, beta: 0.999, correct_bias: 1, epsilon: 1e-6, weight_decay: 0.01 },
};

// ONNX's TensorProto.DataType and AttributeProto.AttributeType numbers.
const FLOAT = 1, INT32 = 6, INT64 = 7, BOOL = 9;
const ATTR = { FLOAT: 1, INT: 2, STRING: 3 };
/** The attributes of the operators used here that are floats (Gemm's, AdamWOptimizer's); the others are ints. */
const FLOAT_ATTRIBUTES = new Set(['alpha', 'beta', 'epsilon', 'weight_decay']);

const MS = 'com.microsoft';
const ACCUMULATION_BUFFER = '_grad.accumulation.buffer';
const ACCUMULATION_OUT = '_grad.accumulation.out';
const RESET = 'lazy_reset_grad';

// Value types and helpers that build the plain objects protobufjs encodes.
const dim = (d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d });
const tensorType = (elemType, dims) => ({ tensorType: { elemType, shape: dims === undefined ? undefined : { dim: dims.map(dim) } } });
const value = (name, elemType, dims) => ({ name, type: tensorType(elemType, dims) });
const floatSequence = (name) => ({ name, type: { sequenceType: { elemType: { tensorType: { elemType: FLOAT } } } } });

function attribute(name, v) {
  if (typeof v === 'string') return { name, type: ATTR.STRING, s: Buffer.from(v, 'utf8') };
  if (FLOAT_ATTRIBUTES.has(name)) return { name, type: ATTR.FLOAT, f: v };
  return { name, type: ATTR.INT, i: v };
}

function node(opType, inputs, outputs, attributes = {}, domain = undefined) {
  return {
    name: `${opType}_${outputs[0]}`, opType, input: inputs, output: outputs, domain,
    attribute: Object.entries(attributes).map(([k, v]) => attribute(k, v)),
  };
}

/** A deterministic uniform generator (xorshift32), in [0, 1); integer arithmetic only, so the same everywhere. */
function uniform(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x / 4294967296;
  };
}

/** The parameters in graph order: [{name, dims, data: Float32Array}]. */
function initialParameters(spec = SPEC) {
  const rand = uniform(spec.seed);
  const layer = (name, fanIn, fanOut) => {
    const bound = 1 / Math.sqrt(fanIn);
    const fill = (n) => Float32Array.from({ length: n }, () => (2 * rand() - 1) * bound);
    return [
      { name: `${name}.weight`, dims: [fanOut, fanIn], data: fill(fanOut * fanIn) },
      { name: `${name}.bias`, dims: [fanOut], data: fill(fanOut) },
    ];
  };
  return [...layer('fc1', spec.inputs, spec.hidden), ...layer('fc2', spec.hidden, spec.classes)];
}

/** The forward pass and loss, shared by the training and eval graphs. */
function forward() {
  return [
    node('Gemm', ['input-0', 'fc1.weight', 'fc1.bias'], ['fc1_out'], { alpha: 1, beta: 1, transB: 1 }),
    node('Relu', ['fc1_out'], ['relu_out']),
    node('Gemm', ['relu_out', 'fc2.weight', 'fc2.bias'], ['output-0'], { alpha: 1, beta: 1, transB: 1 }),
    node('SoftmaxCrossEntropyLoss', ['output-0', 'labels'], ['loss', 'log_prob'], { reduction: 'mean' }),
  ];
}

/** The backward pass: each parameter's gradient `<param>_grad` of the mean loss. */
function backward() {
  return [
    node('SoftmaxCrossEntropyLossGrad', ['loss_grad', 'log_prob', 'labels'], ['output-0_grad'], { reduction: 'mean' }, MS),
    node('ReduceSum', ['output-0_grad', 'batch_axis'], ['fc2.bias_grad'], { keepdims: 0 }),
    node('Gemm', ['output-0_grad', 'relu_out'], ['fc2.weight_grad'], { alpha: 1, beta: 0, transA: 1 }),
    node('Gemm', ['output-0_grad', 'fc2.weight'], ['relu_out_grad'], { alpha: 1, beta: 0 }),
    node('ReluGrad', ['relu_out_grad', 'relu_out'], ['fc1_out_grad'], {}, MS),
    node('ReduceSum', ['fc1_out_grad', 'batch_axis'], ['fc1.bias_grad'], { keepdims: 0 }),
    node('Gemm', ['fc1_out_grad', 'input-0'], ['fc1.weight_grad'], { alpha: 1, beta: 0, transA: 1 }),
  ];
}

const userInputs = (spec) => [value('input-0', FLOAT, ['batch', spec.inputs]), value('labels', INT32, ['batch'])];
const parameterInputs = (params) => params.map((p) => value(p.name, FLOAT, p.dims));
const opsets = [{ domain: '', version: 14 }, { domain: MS, version: 1 }];
const model = (graph, irVersion = 7) => ({ irVersion, producerName: 'hora scripts/make-onnx-training-artifacts.js', graph, opsetImport: opsets });

function trainingGraph(spec, params) {
  const accumulators = params.map((p) => node('InPlaceAccumulatorV2', [p.name + ACCUMULATION_BUFFER, `${p.name}_grad`, RESET], [p.name + ACCUMULATION_OUT], {}, MS));
  return {
    name: 'training',
    node: [...forward(), ...backward(), ...accumulators],
    initializer: [
      { name: 'loss_grad', dataType: FLOAT, dims: [], rawData: Buffer.from(new Float32Array([1]).buffer) },
      { name: 'batch_axis', dataType: INT64, dims: [1], rawData: Buffer.from(new BigInt64Array([0n]).buffer) },
    ],
    input: [
      ...userInputs(spec), ...parameterInputs(params),
      ...params.map((p) => value(p.name + ACCUMULATION_BUFFER, FLOAT, p.dims)), value(RESET, BOOL, [1]),
    ],
    output: [value('loss', FLOAT, []), ...params.map((p) => value(p.name + ACCUMULATION_OUT, BOOL, [1]))],
  };
}

function evalGraph(spec, params) {
  return { name: 'eval', node: forward(), input: [...userInputs(spec), ...parameterInputs(params)], output: [value('loss', FLOAT, [])] };
}

function adamwGraph(spec) {
  const inputs = [value('learning_rate', FLOAT, [1]), value('step', INT64, [1]),
    ...['params', 'gradients', 'first_order_moments', 'second_order_moments'].map(floatSequence)];
  return {
    name: 'AdamWOptimizer',
    node: [node('AdamWOptimizer', inputs.map((i) => i.name), ['updated_flag'], spec.adamw, MS)],
    input: inputs,
    output: [value('updated_flag', BOOL, [1])],
  };
}

/** The artifacts as {fileName: bytes}. */
function makeArtifacts(spec = SPEC) {
  const ModelProto = protobuf.loadSync(path.join(ROOT, 'proto', 'onnx.proto')).lookupType('onnx.ModelProto');
  const encode = (m) => Buffer.from(ModelProto.encode(ModelProto.fromObject(m)).finish());
  const params = initialParameters(spec);
  return {
    'training_model.onnx': encode(model(trainingGraph(spec, params))),
    'eval_model.onnx': encode(model(evalGraph(spec, params))),
    'adamw.onnx': encode(model(adamwGraph(spec), 9)),
    'checkpoint.ckpt': writeCheckpoint(params),
  };
}

module.exports = { SPEC, makeArtifacts, initialParameters };

if (require.main === module) {
  const out = path.resolve(process.argv[2] ?? path.join(ROOT, 'test', 'fixtures', 'onnxruntime-training'));
  fs.mkdirSync(out, { recursive: true });
  for (const [name, bytes] of Object.entries(makeArtifacts())) {
    fs.writeFileSync(path.join(out, name), bytes);
    console.log(`${path.relative(process.cwd(), path.join(out, name))}: ${bytes.length} bytes`);
  }
}
