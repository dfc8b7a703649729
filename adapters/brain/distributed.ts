/**
 * distributed(net, {batchSize}): data-parallel mini-batch training of a brain.js NeuralNetwork.
 *
 * How a step works. brain updates its weights after every sample, which no data-parallel scheme can
 * reproduce, so training here goes by global mini-batches of `batchSize` consecutive samples. Every rank
 * passes the whole data set; rank r takes the samples of each batch whose index i has i % size === r
 * (stride sharding: the union over ranks of their step-k samples is exactly the step-k batch of a single
 * process). For each of its samples a rank runs brain's forward pass (net.runInput) and brain's deltas, and
 * adds delta x incoming activation (and the bias deltas) into one float64 gradient per layer. On its last
 * sample of the step it computes the deltas layer by layer from the output back, and submits each layer's
 * allreduce as soon as that layer is complete, so the transfer of layer l runs on hora's communication
 * thread while layer l-1 is being computed. It waits for all of them, divides the sums by the batch's sample
 * count and applies brain's own update rule (momentum, or Adam with praxis 'adam') to the mean gradient.
 *
 * Agreement. Ranks first check that they were given the same data, batch size and network shape, then rank
 * 0's weights (and update-rule state) are broadcast. An iteration (one pass over the data, as in brain) ends
 * with one allreduce of the summed sample errors and of each rank's timeout flag, so errorThresh, iterations
 * and timeout stop every rank at the same iteration. A rank that throws inside the loop issues a deliberately
 * invalid collective before rethrowing: hora fails the matching collective on every other rank with an error
 * naming that rank, so nobody waits for it.
 */
import * as hora from '../../ts/index';
import { HoraError } from '../../ts/index';
import { checkOptionKeys, describeValue, knownOptions, steps as stepClock } from '../../ts/internal';
import { StepFailure } from '../step-failure';
import {
  ACTIVATIONS, BrainNeuralNetwork, Sample, accumulateLayer, activationOf, ensureAdamState, isBrain2, layerDeltas,
  layerGradientLength, logStatus, outputError, stateArrays,
} from './net';
import { applyAdam, applyMomentum } from './update';

export interface DistributedOptions {
  /** Samples per weight update, summed over all ranks (a positive integer); each rank computes its share. */
  batchSize: number;
  /** Called with every step event, for tests and profiling; it runs inside the training loop. */
  trace?: (event: TraceEvent) => void;
}

/** One event of a training step, in the order it happened on this rank. */
export interface TraceEvent {
  /**
   * 'deltas': layer's deltas of the step's last local sample are computed (its gradient is complete);
   * 'submit': its allreduce was submitted; 'settled': that allreduce completed; 'wait': the rank starts
   * waiting for the step's allreduces; 'update': the weights were updated.
   */
  phase: 'deltas' | 'submit' | 'settled' | 'wait' | 'update';
  /** 1-based iteration (pass over the data), as brain counts them. */
  iteration: number;
  /** 0-based step within the iteration. */
  step: number;
  /** Layer index (1 .. outputLayer), or -1 for step-wide events. */
  layer: number;
  /** Wall-clock milliseconds (performance.timeOrigin + performance.now()), comparable across local ranks. */
  time: number;
}

/** brain's train options (NeuralNetwork.trainDefaults); all optional. */
export interface TrainOptions {
  /** 'sigmoid', 'relu', 'leaky-relu' or 'tanh'; brain.js 2.0 keeps it among the training options. */
  activation?: string;
  /** brain.js 2.0 (1.6 takes it from the NeuralNetwork's constructor options). */
  leakyReluAlpha?: number;
  iterations?: number;
  errorThresh?: number;
  /**
   * true or a function: logs every logPeriod iterations, on rank 0 only. As in brain, the function gets a
   * sentence from brain.js 1.6 and {iterations, error} from 2.0.
   */
  log?: boolean | ((status: string | { iterations: number; error: number }) => void);
  logPeriod?: number;
  learningRate?: number;
  momentum?: number;
  /** Called every callbackPeriod iterations on every rank, with the same status everywhere. */
  callback?: ((status: { iterations: number; error: number }) => void) | null;
  callbackPeriod?: number;
  /** Milliseconds; ranks stop together at the end of the first iteration where any rank ran out of time. */
  timeout?: number;
  /** null for brain's momentum rule, 'adam' for its Adam. */
  praxis?: null | 'adam';
  beta1?: number;
  beta2?: number;
  epsilon?: number;
}

export interface TrainStatus {
  /** Mean over the data of each sample's output mean squared error during the last iteration. */
  error: number;
  /** Iterations (passes over the data) run. */
  iterations: number;
}

export interface DistributedNet {
  readonly net: BrainNeuralNetwork;
  readonly batchSize: number;
  /** Trains like net.trainAsync(data, options), by global mini-batches averaged across ranks. */
  trainAsync(data: Array<{ input: unknown; output: unknown }>, options?: TrainOptions): Promise<TrainStatus>;
}

const WHERE = 'hora/brain';
const OPTIONS = knownOptions<DistributedOptions>({ batchSize: true, trace: true }, '');
const TRAIN_OPTIONS = knownOptions<TrainOptions>({
  activation: true, leakyReluAlpha: true, iterations: true, errorThresh: true, log: true, logPeriod: true, learningRate: true,
  momentum: true, callback: true, callbackPeriod: true, timeout: true, praxis: true, beta1: true, beta2: true, epsilon: true,
}, '');
/** Sent with hora.failPeers() by a rank whose training loop threw; hora quotes it in the other ranks' error. */
const FAILURE_SIGNAL = 'hora/brain: a rank failed';


function invalid(fn: string, argument: string, expected: string, received: unknown): HoraError {
  return new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ${fn}: argument '${argument}' must be ${expected}; received ${describeValue(received)}`);
}

/**
 * Wraps a brain.js NeuralNetwork for data-parallel training. `net` is used in place: after trainAsync its
 * weights are the trained ones, identical on every rank.
 */
export function distributed(net: BrainNeuralNetwork, options: DistributedOptions): DistributedNet {
  if (net === null || typeof net !== 'object') throw invalid('distributed', 'net', 'a brain.js NeuralNetwork', net);
  for (const method of ['updateTrainingOptions', 'formatData', 'verifyIsInitialized'] as const) {
    if (typeof net[method] !== 'function') {
      throw invalid('distributed', `net.${method}`, 'a function (net must be a brain.js NeuralNetwork)', net[method]);
    }
  }
  checkActivation(net, 'distributed', isBrain2(net) ? 'net.trainOpts.activation' : 'net.activation');
  if (options === null || typeof options !== 'object') throw invalid('distributed', 'options', 'an object with batchSize', options);
  checkOptionKeys(`${WHERE} distributed`, options, OPTIONS);
  const { batchSize, trace } = options;
  if (typeof batchSize !== 'number' || !Number.isInteger(batchSize) || batchSize < 1) {
    throw invalid('distributed', 'options.batchSize', 'a positive integer', batchSize);
  }
  if (trace !== undefined && typeof trace !== 'function') throw invalid('distributed', 'options.trace', 'a function', trace);
  return {
    net,
    batchSize,
    trainAsync: (data, trainOptions = {}) => new Trainer(net, batchSize, trace).train(data, trainOptions),
  };
}

/** The activation must be one whose derivative layerDeltas knows (brain 1.6 stores any string it is given). */
function checkActivation(net: BrainNeuralNetwork, fn: string, argument: string): void {
  const activation = activationOf(net);
  if (!(ACTIVATIONS as readonly unknown[]).includes(activation)) {
    throw invalid(fn, argument, `one of ${ACTIVATIONS.map((a) => `'${a}'`).join(', ')}`, activation);
  }
}

const now = () => performance.timeOrigin + performance.now();

/** Small integers hashed exactly in float64 (the agreement check compares them across ranks). */
function hashInts(values: number[]): number {
  let h = values.length;
  for (const v of values) h = (h * 1009 + v) % 2 ** 40;
  return h;
}

/** A float64 fingerprint of the formatted data: equal data on every rank gives bit-equal sums. */
function dataFingerprint(samples: Sample[]): number {
  let h = 0;
  for (let i = 0; i < samples.length; i++) {
    const { input, output } = samples[i];
    for (let k = 0; k < input.length; k++) h += (k + 1) * input[k] * (1 + (i % 7));
    for (let k = 0; k < output.length; k++) h += (k + 3) * output[k] * (1 + (i % 5));
  }
  return h;
}

class Trainer {
  private rank = 0;
  private size = 1;
  private iteration = 0;
  private step = 0;
  private readonly failure = new StepFailure(FAILURE_SIGNAL);

  constructor(
    private readonly net: BrainNeuralNetwork,
    private readonly batchSize: number,
    private readonly trace: ((event: TraceEvent) => void) | undefined,
  ) {}

  async train(data: unknown, options: TrainOptions): Promise<TrainStatus> {
    if (!Array.isArray(data) || data.length === 0) {
      throw invalid('trainAsync', 'data', 'a non-empty Array of {input, output}', data);
    }
    if (options === null || typeof options !== 'object') throw invalid('trainAsync', 'options', 'an object', options);
    checkOptionKeys(`${WHERE} trainAsync`, options, TRAIN_OPTIONS);
    await hora.init();
    this.rank = hora.rank();
    this.size = hora.size();
    const samples = await this.prepare(data, options);
    try {
      return await this.loop(samples);
    } catch (e) {
      throw this.failure.error(e, `${WHERE} trainAsync (rank ${this.rank}, iteration ${this.iteration}, step ${this.step})`, 'failed inside its training loop');
    }
  }

  /**
   * brain's prepTraining (options, formatData, sizes from the data), then the agreement check and rank 0's
   * broadcast. A rank whose own preparation fails still joins the agreement allreduce, so every rank
   * throws instead of the others waiting for it.
   */
  private async prepare(data: unknown[], options: TrainOptions): Promise<Sample[]> {
    const net = this.net;
    let local: HoraError | null = null;
    let samples: Sample[] = [];
    try {
      if (options.praxis !== undefined && options.praxis !== null && options.praxis !== 'adam') {
        throw invalid('trainAsync', 'options.praxis', "null or 'adam'", options.praxis);
      }
      try {
        net.updateTrainingOptions(options);
        samples = net.formatData(data);
        net.verifyIsInitialized(samples);
        net.validateData?.(samples);
      } catch (e) {
        // brain's messages name the option and the value ("[learningRate, 2] is out of normal training range").
        throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} trainAsync: brain.js rejected the data or options: ${(e as Error).message}`);
      }
      checkActivation(net, 'trainAsync', 'options.activation');
      // brain sets runInput from the activation only when the net is initialized; an activation passed in
      // these options must reach the forward pass too, since layerDeltas differentiates that activation.
      net.setActivation?.();
      if (this.net.trainOpts.praxis === 'adam') ensureAdamState(net);
    } catch (e) {
      local = e instanceof HoraError ? e : new HoraError('ERR_INVALID_ARGUMENT', String(e));
    }
    const sizes = net.sizes ?? [];
    const adam = net.trainOpts.praxis === 'adam';
    const meta = [samples.length, this.batchSize, hashInts(sizes), adam ? 1 : 0, adam ? net.iterations ?? 0 : 0,
      local ? 0 : dataFingerprint(samples)];
    const failed = new Array(this.size).fill(0);
    failed[this.rank] = local ? 1 : 0;
    const both = Float64Array.from([...meta, ...meta.map((v) => -v), ...failed]);
    const agreed = await hora.allreduce(both, { op: 'max', name: `${WHERE} agreement` });
    if (local) throw local;
    const badRanks = failed.map((_, r) => r).filter((r) => agreed[2 * meta.length + r] > 0);
    if (badRanks.length > 0) {
      throw new HoraError('ERR_INVALID_ARGUMENT',
        `${WHERE} trainAsync: rank ${badRanks.join(', ')} rejected its arguments (see that rank's error); training did not start`, this.rank, badRanks[0]);
    }
    const names = ['the number of samples', 'options.batchSize', 'the network sizes', "praxis 'adam'", "the Adam step count", 'the data'];
    for (let i = 0; i < meta.length; i++) {
      if (agreed[i] !== -agreed[meta.length + i]) {
        throw new HoraError('ERR_MISMATCH',
          `${WHERE} trainAsync: ranks disagree on ${names[i]} (this rank: ${meta[i]}); every rank must pass the whole, identical data set and the same options — hora/brain takes each rank's shard itself`, this.rank);
      }
    }
    await this.broadcastState(adam);
    return samples;
  }

  /** Rank 0's weights, biases and update-rule state, copied into every rank's net. */
  private async broadcastState(adam: boolean): Promise<void> {
    if (this.size === 1) return;
    const arrays = stateArrays(this.net, adam);
    const flat = new Float32Array(arrays.reduce((n, a) => n + a.length, 0));
    let at = 0;
    for (const a of arrays) { flat.set(a, at); at += a.length; }
    await hora.broadcast(flat, { root: 0, inplace: true, name: `${WHERE} initial weights` });
    at = 0;
    for (const a of arrays) { a.set(flat.subarray(at, at + a.length)); at += a.length; }
  }

  private emit(phase: TraceEvent['phase'], layer: number): void {
    if (this.trace) this.trace({ phase, iteration: this.iteration, step: this.step, layer, time: now() });
  }

  private async loop(samples: Sample[]): Promise<TrainStatus> {
    const net = this.net;
    const opts = net.trainOpts;
    const sizes = net.sizes as number[];
    const top = net.outputLayer;
    const n = samples.length;
    const steps = Math.ceil(n / this.batchSize);
    const grads: Float64Array[] = [];
    for (let layer = 1; layer <= top; layer++) grads[layer] = new Float64Array(layerGradientLength(sizes, layer));
    const adam = opts.praxis === 'adam';
    const endTime = Date.now() + opts.timeout;
    const status: TrainStatus = { error: 1, iterations: 0 };
    let outOfTime = false;

    while (status.iterations < opts.iterations && status.error > opts.errorThresh && !outOfTime) {
      status.iterations++;
      this.iteration = status.iterations;
      let errorSum = 0;
      for (this.step = 0; this.step < steps; this.step++) {
        const start = this.step * this.batchSize;
        const end = Math.min(n, start + this.batchSize);
        stepClock.begin();
        for (let layer = 1; layer <= top; layer++) grads[layer].fill(0);
        const works: Array<PromiseLike<unknown>> = [];
        // Stride sharding: this rank's samples of [start, end) are those with i % size === rank.
        const first = start + ((this.rank - (start % this.size)) + this.size) % this.size;
        if (first >= end) {
          // No sample of this batch here: contribute zeros, in the same order as everyone else.
          for (let layer = top; layer >= 1; layer--) works.push(this.submit(grads[layer], layer));
        }
        for (let i = first; i < end; i += this.size) {
          const sample = samples[i];
          net.runInput(sample.input);
          if (i + this.size < end) {
            for (let layer = top; layer >= 1; layer--) {
              layerDeltas(net, layer, sample.output);
              accumulateLayer(net, layer, grads[layer]);
            }
          } else {
            for (let layer = top; layer >= 1; layer--) {
              layerDeltas(net, layer, sample.output);
              accumulateLayer(net, layer, grads[layer]);
              this.emit('deltas', layer);
              works.push(this.submit(grads[layer], layer));
              // hora hands the calls of one synchronous run to its communication thread in a microtask:
              // yielding one microtask starts this layer's allreduce before the next layer is computed.
              await null;
            }
          }
          errorSum += outputError(net);
        }
        this.emit('wait', -1);
        await this.failure.collective(Promise.all(works));
        const count = end - start;
        // brain's Adam counts updates in net.iterations; here there is one update per step.
        const adamStep = adam ? (net.iterations = (net.iterations ?? 0) + 1) : 0;
        for (let layer = 1; layer <= top; layer++) {
          if (adam) applyAdam(net, layer, grads[layer], count, adamStep);
          else applyMomentum(net, layer, grads[layer], count);
        }
        this.emit('update', -1);
        stepClock.end();
      }
      const local = Float64Array.from([errorSum, Date.now() >= endTime ? 1 : 0]);
      const [errorTotal, timedOut] = await this.failure.collective(hora.allreduce(local, { op: 'sum', name: `${WHERE} error` }));
      status.error = errorTotal / n;
      outOfTime = timedOut > 0;
      if (opts.log && this.rank === 0 && status.iterations % opts.logPeriod === 0) logStatus(net, status);
      if (opts.callback && status.iterations % opts.callbackPeriod === 0) {
        opts.callback({ iterations: status.iterations, error: status.error });
      }
    }
    return status;
  }

  private submit(grad: Float64Array, layer: number): PromiseLike<unknown> {
    const work = hora.allreduce(grad, { op: 'sum', inplace: true, name: `${WHERE} gradient of layer ${layer}` });
    this.emit('submit', layer);
    if (this.trace) work.then(() => this.emit('settled', layer), () => undefined);
    return work;
  }
}
