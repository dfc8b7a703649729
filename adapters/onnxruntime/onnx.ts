/**
 * Reading and rewriting ONNX training artifacts with protobufjs and proto/onnx.proto.
 *
 * gradientModel() turns ORT's training model into an inference model whose outputs are the loss and the
 * per-parameter gradients. ORT's offline tooling writes each gradient `<param>_grad` into an
 * InPlaceAccumulatorV2 node (com.microsoft) that adds it to `<param>_grad.accumulation.buffer` unless
 * `lazy_reset_grad` is set. Those nodes, their buffer inputs, `lazy_reset_grad` and the accumulation outputs
 * are removed and `<param>_grad` becomes a graph output instead, so one run returns this batch's gradient
 * and the accumulation (and its reset) is done in JavaScript, where it can be averaged across ranks first.
 *
 * readOptimizer() reads the optimizer model's single AdamWOptimizer or SGDOptimizerV2 node and its attributes,
 * so hora applies exactly the update ORT would. sgdOptimizerModel() builds a plain-SGD optimizer model from an
 * AdamW one, for exact-mode training with SGD.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as protobuf from 'protobufjs';

/** One trainable parameter of the training model, in graph-input order (ORT's contiguous-buffer order). */
export interface ParameterInfo {
  name: string;
  dims: number[];
  /** Element count (product of dims). */
  size: number;
  /** Offset of this parameter in the contiguous parameter buffer. */
  offset: number;
}

export interface GradientModel {
  /** The rewritten model, to be loaded with ort.InferenceSession.create. */
  bytes: Uint8Array;
  /** Inputs the user feeds (everything that is neither a parameter nor accumulation state). */
  userInputs: string[];
  /** The training model's own outputs that are not accumulation outputs (the loss first, as ORT lists them). */
  userOutputs: string[];
  parameters: ParameterInfo[];
  /** Name of the graph output that holds each parameter's gradient, in parameters' order. */
  gradientOutputs: string[];
}

export type OptimizerSpec =
  | { kind: 'adamw'; alpha: number; beta: number; epsilon: number; weightDecay: number; adamMode: number; correctBias: boolean }
  | { kind: 'sgd' };

const ACCUMULATOR = 'InPlaceAccumulatorV2';

/* eslint-disable @typescript-eslint/no-explicit-any */
type Msg = any;

let modelType: protobuf.Type | undefined;

/** Walks up from this file to the folder that holds proto/onnx.proto (the package root). */
function findProtoFile(): string {
  const tried: string[] = [];
  let dir = __dirname;
  for (let i = 0; i < 6; i++) {
    const candidate = path.join(dir, 'proto', 'onnx.proto');
    tried.push(candidate);
    if (fs.existsSync(candidate)) return candidate;
    dir = path.dirname(dir);
  }
  throw new Error(`hora/onnxruntime: cannot find proto/onnx.proto (looked at ${tried.join(', ')}); the package is incomplete, reinstall it`);
}

function ModelProto(): protobuf.Type {
  if (!modelType) modelType = protobuf.loadSync(findProtoFile()).lookupType('onnx.ModelProto');
  return modelType;
}

export function decodeModel(bytes: Uint8Array): Msg {
  return ModelProto().decode(bytes);
}

export function encodeModel(model: Msg): Uint8Array {
  return ModelProto().encode(model).finish();
}

function dimsOf(valueInfo: Msg, what: string): number[] {
  const dims = valueInfo.type?.tensorType?.shape?.dim ?? [];
  return dims.map((d: Msg) => {
    if (d.value !== 'dimValue') throw new Error(`hora/onnxruntime: ${what} '${valueInfo.name}' has a symbolic dimension; parameters need fixed shapes`);
    return Number(d.dimValue);
  });
}

/** Rewrites ORT's training model so that each parameter's gradient is a graph output (see the file comment). */
export function gradientModel(trainModel: Uint8Array): GradientModel {
  const model = decodeModel(trainModel);
  const graph = model.graph;
  const accumulators = graph.node.filter((n: Msg) => n.opType === ACCUMULATOR);
  if (accumulators.length === 0) {
    throw new Error(`hora/onnxruntime: the training model has no ${ACCUMULATOR} nodes; it does not look like an artifact of onnxruntime.training.artifacts.generate_artifacts`);
  }
  // InPlaceAccumulatorV2(buffer, gradient, lazy_reset_grad) -> accumulation.out
  const removedInputs = new Set<string>();
  const removedOutputs = new Set<string>();
  const gradientOf = new Map<string, string>(); // parameter name -> gradient tensor name
  for (const n of accumulators) {
    const [buffer, gradient, reset] = n.input;
    const suffix = '_grad.accumulation.buffer';
    if (!buffer.endsWith(suffix)) throw new Error(`hora/onnxruntime: unexpected accumulation buffer name '${buffer}'`);
    gradientOf.set(buffer.slice(0, -suffix.length), gradient);
    removedInputs.add(buffer);
    if (reset) removedInputs.add(reset);
    for (const o of n.output) removedOutputs.add(o);
  }
  const parameters: ParameterInfo[] = [];
  const userInputs: string[] = [];
  let offset = 0;
  for (const input of graph.input) {
    if (removedInputs.has(input.name)) continue;
    if (gradientOf.has(input.name)) {
      const dims = dimsOf(input, 'parameter');
      const size = dims.reduce((a, b) => a * b, 1);
      parameters.push({ name: input.name, dims, size, offset });
      offset += size;
    } else {
      userInputs.push(input.name);
    }
  }
  if (parameters.length !== gradientOf.size) {
    const missing = [...gradientOf.keys()].filter((p) => !parameters.some((q) => q.name === p));
    throw new Error(`hora/onnxruntime: gradients accumulate for ${missing.join(', ')}, which are not graph inputs`);
  }
  const userOutputs = graph.output.map((o: Msg) => o.name).filter((n: string) => !removedOutputs.has(n));
  graph.node = graph.node.filter((n: Msg) => n.opType !== ACCUMULATOR);
  graph.input = graph.input.filter((i: Msg) => !removedInputs.has(i.name));
  graph.output = graph.output.filter((o: Msg) => !removedOutputs.has(o.name));
  const gradientOutputs = parameters.map((p) => gradientOf.get(p.name) as string);
  for (const p of parameters) {
    const paramInput = graph.input.find((i: Msg) => i.name === p.name);
    graph.output.push({ name: gradientOf.get(p.name), type: paramInput.type });
  }
  return { bytes: encodeModel(model), userInputs, userOutputs, parameters, gradientOutputs };
}

function attribute(node: Msg, name: string, fallback: number): number {
  const a = node.attribute.find((x: Msg) => x.name === name);
  if (!a) return fallback;
  return a.type === 1 /* FLOAT */ ? a.f : Number(a.i);
}

/**
 * The update rule of ORT's optimizer model. Defaults are those of ORT's AdamWOptimizer op schema
 * (alpha 0.9, beta 0.999, epsilon 1e-8, weight_decay 0, adam_mode 0, correct_bias 1), used when the model
 * leaves an attribute out.
 */
export function readOptimizer(optimizerModel: Uint8Array): OptimizerSpec {
  const graph = decodeModel(optimizerModel).graph;
  for (const n of graph.node) {
    if (n.opType === 'AdamWOptimizer') {
      return {
        kind: 'adamw',
        alpha: attribute(n, 'alpha', 0.9),
        beta: attribute(n, 'beta', 0.999),
        epsilon: attribute(n, 'epsilon', 1e-8),
        weightDecay: attribute(n, 'weight_decay', 0),
        adamMode: attribute(n, 'adam_mode', 0),
        correctBias: attribute(n, 'correct_bias', 1) !== 0,
      };
    }
    if (n.opType === 'SGDOptimizerV2') return { kind: 'sgd' };
  }
  const ops = graph.node.map((n: Msg) => n.opType).join(', ');
  throw new Error(`hora/onnxruntime: the optimizer model has neither an AdamWOptimizer nor an SGDOptimizerV2 node (it has: ${ops || 'none'})`);
}

/**
 * An SGD optimizer model (SGDOptimizerV2: weights -= learning_rate * gradients), built from an AdamW optimizer
 * model of the same artifacts so the input types (sequences of float tensors) are the ones ORT wrote. For exact
 * mode, which reads the rule and applies it in hora: onnxruntime-web 1.19.2's TrainingSession rejects it.
 */
export function sgdOptimizerModel(adamwOptimizerModel: Uint8Array): Uint8Array {
  const model = decodeModel(adamwOptimizerModel);
  const graph = model.graph;
  const byName = (n: string) => {
    const v = graph.input.find((i: Msg) => i.name === n);
    if (!v) throw new Error(`hora/onnxruntime: the optimizer model has no input '${n}'`);
    return v;
  };
  const inputs = [byName('learning_rate'), byName('params'), byName('gradients')];
  const flag = graph.output[0];
  graph.input = inputs;
  graph.node = [{ input: inputs.map((i: Msg) => i.name), output: [flag.name], name: 'SGDOptimizerV2', opType: 'SGDOptimizerV2', domain: 'com.microsoft', attribute: [] }];
  graph.name = 'SGDOptimizer';
  return encodeModel(model);
}
