/**
 * A tfjs model as a chain of layers that can be cut into stages, and what each layer costs.
 *
 * A cut between two layers must be crossed by exactly one tensor, the one a stage sends to the next.
 * That holds everywhere in a chain: one input, one output, and every layer fed by the one before it
 * and feeding only the one after it. A tf.Sequential is a chain by construction; a functional model
 * is walked from its input along the layers that consume each output. A layer with two inbound layers
 * (Add, Concatenate), a layer whose output feeds two layers (the start of a residual branch) or a layer
 * applied twice (shared weights) is rejected with an error naming it: a cut beside it would have to
 * carry two tensors, or split one set of weights over two stages. A block with a branch can still be
 * pipelined by wrapping it in a model of its own and using that model as one layer of the chain: it
 * then stays whole inside one stage.
 *
 * profileLayers measures what the partitioner needs, on the backend in use, for one sample batch (a
 * micro-batch): each layer's forward (apply in training mode, then reading the result so the time is
 * spent), its backward (tf.variableGrads of the sum of its output over its trainable weights and,
 * except for the first layer, its input, minus the forward that variableGrads runs first), the bytes
 * of its output, and the bytes of its trainable weights. Each time is the median of `repeats` runs
 * after `warmup` untimed ones (the first runs of a kernel are many times slower: V8 has not compiled
 * it yet, the backend allocates), the layers taking turns run by run.
 */
import { checkSameTfjs, tf } from '../framework';
import type { layers as tfl, LayersModel } from '@tensorflow/tfjs-layers';
import { HoraError } from '../../../ts/internal';
import type { LayerCost } from './partition';

export type Layer = tfl.Layer;

/** A layer's costs for one sample batch, with its name and output shape. */
export interface LayerProfile extends LayerCost {
  name: string;
  outputShape: number[];
}

function notAChain(message: string): HoraError {
  return new HoraError('ERR_INVALID_ARGUMENT', `pipeline: argument 'model' must be a chain of layers (each fed by the one before it and feeding only the one after it); ${message}`);
}

const names = (ls: Layer[]) => ls.map((l) => `'${l.name}'`).join(', ');

/** The model's layers in the order data flows through them (no InputLayer); throws if they are not a chain. */
export function layerChain(model: LayersModel): Layer[] {
  const m = model as unknown as { layers?: unknown; getClassName?: unknown; inputs?: unknown[]; outputs?: unknown[] };
  if (m === null || typeof m !== 'object' || !Array.isArray(m.layers) || typeof m.getClassName !== 'function') {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: argument 'model' must be a tf.LayersModel (tf.sequential or tf.model); received ${m === null ? 'null' : typeof m}`);
  }
  checkSameTfjs(model, 'LayersModel', "pipeline: argument 'model'");
  if (model.getClassName() === 'Sequential') return model.layers.filter((l) => l.getClassName() !== 'InputLayer');
  if (model.inputs.length !== 1 || model.outputs.length !== 1) {
    throw notAChain(`the model has ${model.inputs.length} inputs and ${model.outputs.length} outputs, not one of each`);
  }
  // The model's own nodes: a layer may also belong to other models, whose nodes do not count here.
  const own = (model as unknown as { containerNodes: Set<string> }).containerNodes;
  const nodeKey = (layer: Layer, node: unknown) => `${layer.name}_ib-${layer.inboundNodes.indexOf(node as never)}`;
  for (const layer of model.layers) {
    if (layer.inboundNodes.filter((n) => own.has(nodeKey(layer, n))).length > 1) {
      throw notAChain(`layer '${layer.name}' is applied more than once (shared weights cannot be split over stages)`);
    }
  }
  const chain: Layer[] = [];
  const seen = new Set<Layer>();
  const output = model.outputLayers[0];
  let current = model.inputLayers[0];
  for (;;) {
    // A layer that takes this output twice (concatenate([x, x])) lists the same node twice.
    const consumers = [...new Set(current.outboundNodes)].filter((n) => own.has(nodeKey(n.outboundLayer, n)));
    if (current === output) {
      if (consumers.length > 0) throw notAChain(`the output layer '${current.name}' also feeds ${names(consumers.map((n) => n.outboundLayer))}`);
      break;
    }
    if (consumers.length !== 1) {
      throw notAChain(consumers.length === 0
        ? `layer '${current.name}' feeds no layer but is not the output`
        : `layer '${current.name}' feeds ${consumers.length} layers: ${names(consumers.map((n) => n.outboundLayer))}`);
    }
    const node = consumers[0];
    const next = node.outboundLayer;
    if (node.inboundLayers.length !== 1) {
      throw notAChain(`layer '${next.name}' has ${node.inboundLayers.length} inbound layers: ${names(node.inboundLayers)}`);
    }
    seen.add(next);
    chain.push(next);
    current = next;
  }
  const missing = model.layers.filter((l) => l.getClassName() !== 'InputLayer' && !seen.has(l));
  if (missing.length > 0) throw notAChain(`layer ${names(missing)} is not on the path from the input to the output`);
  return chain;
}

const BYTES: Record<string, number> = { float32: 4, int32: 4, bool: 1, complex64: 8 };

function bytesOf(t: tf.Tensor): number {
  return t.size * (BYTES[t.dtype] ?? 4);
}

function median(xs: number[]): number {
  const s = xs.slice().sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

/**
 * Seconds per forward and backward of each layer on `sample`, with output and weight bytes. Each
 * repetition times a forward and then a forward with backward, and the backward is the median of
 * their differences, so that load from other processes that comes and goes hits both alike.
 */
export function profileLayers(layers: Layer[], sample: tf.Tensor, options: { repeats?: number; warmup?: number } = {}): LayerProfile[] {
  const { repeats = 7, warmup = 2 } = options;
  for (const [name, v, least] of [['repeats', repeats, 1], ['warmup', warmup, 0]] as const) {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < least) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `profileLayers: option '${name}' must be an integer >= ${least}; received ${String(v)}`);
    }
  }
  if (!(sample instanceof tf.Tensor)) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `profileLayers: argument 'sample' must be a tf.Tensor; received ${sample === null ? 'null' : typeof sample}`);
  }
  // Every layer's input: the sample through the layers before it.
  const inputs: tf.Tensor[] = [tf.clone(sample)];
  const variables: tf.Variable[] = [];
  try {
    layers.forEach((layer, index) => { inputs.push(tf.tidy(() => layer.apply(inputs[index], { training: true }) as tf.Tensor)); });
    const runs = layers.map((layer, index) => {
      const x = inputs[index];
      const forward = (input: tf.Tensor) => layer.apply(input, { training: true }) as tf.Tensor;
      const weights = layer.trainableWeights.map((w) => w.read() as tf.Variable);
      // The first layer's input is data: no gradient flows to it.
      const input = index > 0 ? tf.variable(x, true) : null;
      if (input) variables.push(input);
      return { x, forward, weights, input, wrt: input ? [input, ...weights] : weights, forwardTimes: [] as number[], backwardTimes: [] as number[] };
    });
    // Round by round over all the layers, not one layer's runs after another's: a slow spell of the
    // machine (another rank still starting, another tenant) then falls on every layer alike instead of
    // making the layers profiled during it look dearer, which moves the cut of layers of equal cost.
    for (let r = 0; r < warmup + repeats; r++) {
      for (const run of runs) {
        const { x, forward, input, wrt } = run;
        const t0 = performance.now();
        tf.tidy(() => { forward(x).dataSync(); });
        const t1 = performance.now();
        if (wrt.length > 0) {
          tf.tidy(() => {
            const { value, grads } = tf.variableGrads(() => tf.sum(forward(input ?? x)) as tf.Scalar, wrt);
            value.dataSync();
            for (const g of Object.values(grads)) g.dataSync();
          });
        }
        const t2 = performance.now();
        if (r >= warmup) {
          run.forwardTimes.push(t1 - t0);
          run.backwardTimes.push(wrt.length > 0 ? Math.max(0, (t2 - t1) - (t1 - t0)) : 0);
        }
      }
    }
    return runs.map((run, index) => {
      const y = inputs[index + 1];
      return {
        name: layers[index].name,
        forward: median(run.forwardTimes) / 1000,
        backward: median(run.backwardTimes) / 1000,
        outputBytes: bytesOf(y),
        paramBytes: run.weights.reduce((sum, w) => sum + bytesOf(w), 0),
        outputShape: y.shape.slice(),
      };
    });
  } finally {
    variables.forEach((v) => v.dispose());
    inputs.forEach((t) => t.dispose());
  }
}
