/**
 * What hora/brain reads and writes on a brain.js NeuralNetwork, and the pieces of brain's arithmetic it
 * reimplements per layer. brain.js itself is never imported: the adapter works on the `net` it is given.
 *
 * Both brain.js lines are supported: 1.6.x and 2.0.0-beta. They keep the same arrays and apply the same update
 * rules; 2.0 moved `activation` and `leakyReluAlpha` from the net into net.trainOpts, starts with empty Adam
 * arrays, and calls trainOpts.log with a status object where 1.6 passes a sentence. The helpers below read
 * whichever the net has.
 *
 * brain keeps, for layer l (1 <= l <= outputLayer): weights[l][node] (a Float32Array over layer l-1's
 * nodes), biases[l], changes[l][node] (momentum), outputs[l], errors[l], deltas[l]; outputs[0] is the
 * input. Its deltas follow its convention error = target - output, so `delta x incoming` is the negative
 * gradient of the squared error and updates *add* learningRate x gradient.
 */

/** One training pair after brain's formatData: arrays of numbers. */
export interface Sample {
  input: ArrayLike<number>;
  output: ArrayLike<number>;
}

/** The training options brain keeps in net.trainOpts (see NeuralNetwork.trainDefaults). */
export interface BrainTrainOptions {
  /** 2.0 only (1.6 keeps it in net.activation). */
  activation?: string;
  /** 2.0 only (1.6 keeps it in net.leakyReluAlpha). */
  leakyReluAlpha?: number;
  iterations: number;
  errorThresh: number;
  /** 1.6 passes a sentence; 2.0 passes {iterations, error}. */
  log: false | ((message: string | { iterations: number; error: number }) => void);
  logPeriod: number;
  learningRate: number;
  momentum: number;
  callback?: null | ((status: { iterations: number; error: number }) => void);
  callbackPeriod: number;
  timeout: number;
  praxis: null | string;
  beta1: number;
  beta2: number;
  epsilon: number;
}

/** The parts of brain.js's NeuralNetwork (1.6.x and 2.0.0-beta) that the adapter uses. */
export interface BrainNeuralNetwork {
  /** null (1.6) or [] (2.0) until initialized. */
  sizes: number[] | null;
  outputLayer: number;
  weights: Float32Array[][];
  biases: Float32Array[];
  outputs: Float32Array[];
  errors: Float32Array[];
  deltas: Float32Array[];
  changes: Float32Array[][];
  /** 1.6 only. */
  activation?: string;
  /** 1.6 only. */
  leakyReluAlpha?: number;
  trainOpts: BrainTrainOptions;
  runInput(input: ArrayLike<number>): ArrayLike<number>;
  updateTrainingOptions(options: object): void;
  formatData(data: unknown): Sample[];
  verifyIsInitialized(data: Sample[]): void;
  /** Points runInput and calculateDeltas at the activation's functions. */
  setActivation?: () => void;
  /** 2.0 only: checks every sample's input and output length against the sizes. */
  validateData?: (data: Sample[]) => void;
  // Adam state, filled in once brain's _setupAdam has run (2.0 starts with empty arrays, 1.6 without them).
  changesLow?: Float32Array[][];
  changesHigh?: Float32Array[][];
  biasChangesLow?: Float32Array[];
  biasChangesHigh?: Float32Array[];
  iterations?: number;
  _setupAdam?: () => void;
}

export const ACTIVATIONS = ['sigmoid', 'relu', 'leaky-relu', 'tanh'] as const;

/** True for brain.js 2.0, which keeps the activation among the training options. */
export function isBrain2(net: BrainNeuralNetwork): boolean {
  return net.trainOpts !== null && typeof net.trainOpts === 'object' && 'activation' in net.trainOpts;
}

/** The activation brain's runInput uses: net.activation (1.6) or net.trainOpts.activation (2.0). */
export function activationOf(net: BrainNeuralNetwork): unknown {
  return isBrain2(net) ? net.trainOpts.activation : net.activation;
}

function leakyReluAlphaOf(net: BrainNeuralNetwork): number {
  return (isBrain2(net) ? net.trainOpts.leakyReluAlpha : net.leakyReluAlpha) as number;
}

/** brain's periodic log line: a sentence for 1.6, the status object for 2.0 (whose default logger formats it). */
export function logStatus(net: BrainNeuralNetwork, status: { iterations: number; error: number }): void {
  const log = net.trainOpts.log;
  if (!log) return;
  if (isBrain2(net)) log({ iterations: status.iterations, error: status.error });
  else log(`iterations: ${status.iterations}, training error: ${status.error}`);
}

/**
 * Brain's calculateDeltas for one layer (brain does all layers in one call; splitting it is what lets a
 * layer's allreduce start while the layers below are still being computed). Same formulas, same order of
 * summation, results stored in brain's own Float32Arrays.
 */
export function layerDeltas(net: BrainNeuralNetwork, layer: number, target: ArrayLike<number>): void {
  const size = (net.sizes as number[])[layer];
  const outputs = net.outputs[layer];
  const errors = net.errors[layer];
  const deltas = net.deltas[layer];
  const last = layer === net.outputLayer;
  const nextDeltas = last ? null : net.deltas[layer + 1];
  const nextWeights = last ? null : net.weights[layer + 1];
  const activation = activationOf(net);
  const alpha = leakyReluAlphaOf(net);
  for (let node = 0; node < size; node++) {
    const output = outputs[node];
    let error = 0;
    if (last) {
      error = target[node] - output;
    } else {
      const d = nextDeltas as Float32Array;
      const w = nextWeights as Float32Array[];
      for (let k = 0; k < d.length; k++) error += d[k] * w[k][node];
    }
    errors[node] = error;
    switch (activation) {
      case 'sigmoid': deltas[node] = error * output * (1 - output); break;
      case 'relu': deltas[node] = output > 0 ? error : 0; break;
      case 'leaky-relu': deltas[node] = output > 0 ? error : alpha * error; break;
      default: deltas[node] = (1 - output * output) * error; break; // tanh
    }
  }
}

/**
 * Adds this sample's gradient of `layer` into grad: weights as [node * incoming + k], then the biases at
 * [nodes * incoming + node]. Accumulated in float64 so that the order in which ranks' partial sums are
 * combined moves the result by rounding of float64, not float32.
 */
export function accumulateLayer(net: BrainNeuralNetwork, layer: number, grad: Float64Array): void {
  const incoming = net.outputs[layer - 1];
  const deltas = net.deltas[layer];
  const n = incoming.length;
  const biasAt = deltas.length * n;
  for (let node = 0; node < deltas.length; node++) {
    const delta = deltas[node];
    const row = node * n;
    for (let k = 0; k < n; k++) grad[row + k] += delta * incoming[k];
    grad[biasAt + node] += delta;
  }
}

/** Brain's mean squared error of the output layer's errors (its utilities/mse). */
export function outputError(net: BrainNeuralNetwork): number {
  const errors = net.errors[net.outputLayer];
  let sum = 0;
  for (let i = 0; i < errors.length; i++) sum += errors[i] * errors[i];
  return sum / errors.length;
}

/** Number of gradient entries of `layer`: one per weight plus one per bias. */
export function layerGradientLength(sizes: number[], layer: number): number {
  return sizes[layer] * (sizes[layer - 1] + 1);
}

/** True when the net holds Adam's moments for every layer, shaped like its weights. */
export function hasAdamState(net: BrainNeuralNetwork): boolean {
  const sizes = net.sizes as number[];
  for (let layer = 1; layer < sizes.length; layer++) {
    const low = net.changesLow?.[layer];
    const high = net.changesHigh?.[layer];
    if (!low || !high || low.length !== sizes[layer] || high.length !== sizes[layer]) return false;
    if (net.biasChangesLow?.[layer]?.length !== sizes[layer] || net.biasChangesHigh?.[layer]?.length !== sizes[layer]) return false;
    if (low[0]?.length !== sizes[layer - 1] || high[0]?.length !== sizes[layer - 1]) return false;
  }
  return true;
}

/** Adam's moments, as brain's _setupAdam makes them, when the net was initialized without praxis 'adam'. */
export function ensureAdamState(net: BrainNeuralNetwork): void {
  if (hasAdamState(net)) return;
  const sizes = net.sizes as number[];
  net.changesLow = [];
  net.changesHigh = [];
  net.biasChangesLow = [];
  net.biasChangesHigh = [];
  for (let layer = 1; layer < sizes.length; layer++) {
    net.biasChangesLow[layer] = new Float32Array(sizes[layer]);
    net.biasChangesHigh[layer] = new Float32Array(sizes[layer]);
    net.changesLow[layer] = Array.from({ length: sizes[layer] }, () => new Float32Array(sizes[layer - 1]));
    net.changesHigh[layer] = Array.from({ length: sizes[layer] }, () => new Float32Array(sizes[layer - 1]));
  }
  net.iterations = 0;
}

/**
 * Every array that must be equal on all ranks before training: weights and biases, and the update rule's
 * state (momentum changes; Adam's moments) so that a net trained before joins with the same history.
 */
export function stateArrays(net: BrainNeuralNetwork, adam: boolean): Float32Array[] {
  const out: Float32Array[] = [];
  for (let layer = 1; layer <= net.outputLayer; layer++) {
    out.push(...net.weights[layer], net.biases[layer], ...net.changes[layer]);
    if (adam) {
      out.push(...(net.changesLow as Float32Array[][])[layer], ...(net.changesHigh as Float32Array[][])[layer]);
      out.push((net.biasChangesLow as Float32Array[])[layer], (net.biasChangesHigh as Float32Array[])[layer]);
    }
  }
  return out;
}
