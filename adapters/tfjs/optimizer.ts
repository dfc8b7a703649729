/**
 * DistributedOptimizer: wraps any tf.train optimizer so that every rank applies the same, averaged
 * gradients.
 *
 * tfjs calls applyGradients synchronously with every gradient already computed (the cpu backend is
 * eager), so the only overlap available is inside this call: each gradient is read back and handed to
 * hora before the next one is read, and the JS thread blocks with Work.wait() only after all of them
 * are submitted. The inner optimizer then sees the averaged gradients under the same names and in the
 * same order it would have seen locally (Adam and friends key their slots by position), so N ranks on
 * batch B/N follow one process on batch B up to float rounding.
 */
import * as tf from '@tensorflow/tfjs-core';
import * as hora from '../../ts/index';
import { steps } from '../../ts/stats';
import { bfloat16ToFloat, floatToBFloat16, floatToHalf, halfToFloat } from './half';

export type Compression = 'none' | 'fp16' | 'bf16';

export interface DistributedOptimizerOptions {
  /** How gradients travel: 'none' (float32, exact), 'fp16' or 'bf16' (half the bytes, rounded). Default 'none'. */
  compression?: Compression;
  /** Local gradient sets summed (then divided by this) before one allreduce and one update; integer >= 1. Default 1. */
  backwardPassesPerStep?: number;
  /** How gradients are combined over ranks: 'avg' for mean-reduced losses (default), 'sum' for summed ones. */
  op?: 'avg' | 'sum';
}

/** Where the time of applyGradients went, summed over calls (milliseconds). */
export interface DistributedOptimizerStats {
  /** applyGradients calls that ran an allreduce and an update. */
  steps: number;
  /** Reading gradients back (dataSync), accumulating, converting and submitting them. */
  submitMs: number;
  /** Blocked in Work.wait(): the communication that nothing hid. */
  waitMs: number;
  /** The inner optimizer's update. */
  applyMs: number;
}

/** tfjs-core's NamedTensor (not exported from its index). */
type NamedTensor = { name: string; tensor: tf.Tensor };
type Gradients = tf.NamedTensorMap | NamedTensor[];
type Entry = { name: string; tensor: tf.Tensor | null | undefined };

function invalid(option: string, expected: string, received: unknown): Error {
  const shown = typeof received === 'string' ? `'${received}'` : String(received);
  return new TypeError(`DistributedOptimizer: option '${option}' must be ${expected}; received ${shown}`);
}

/**
 * Measurement only: HORA_TFJS_SKIP_ALLREDUCE=1 makes every DistributedOptimizer skip the allreduce (each
 * rank then trains on its own gradients and the ranks drift apart). bench/scaling.sh uses it to time the
 * same step without communication.
 */
function skipAllreduce(): boolean {
  return process.env.HORA_TFJS_SKIP_ALLREDUCE === '1';
}

export class DistributedOptimizer extends tf.Optimizer {
  /** The wrapped optimizer; it owns the learning rate, slots and iteration count. */
  readonly optimizer: tf.Optimizer;
  readonly compression: Compression;
  readonly backwardPassesPerStep: number;
  readonly op: 'avg' | 'sum';
  readonly stats: DistributedOptimizerStats = { steps: 0, submitMs: 0, waitMs: 0, applyMs: 0 };
  private readonly skip = skipAllreduce();
  /** Sum of the local gradient sets since the last update (backwardPassesPerStep > 1). */
  private accumulated: { names: string[]; sums: Array<Float32Array | null> } | null = null;
  private passes = 0;

  constructor(optimizer: tf.Optimizer, options: DistributedOptimizerOptions = {}) {
    super();
    if (!(optimizer instanceof tf.Optimizer)) {
      throw new TypeError(`DistributedOptimizer: argument 'optimizer' must be a tf.train optimizer; received ${optimizer === null ? 'null' : typeof optimizer}`);
    }
    if (options === null || typeof options !== 'object') throw invalid('options', 'an object', options);
    const { compression = 'none', backwardPassesPerStep = 1, op = 'avg' } = options;
    if (compression !== 'none' && compression !== 'fp16' && compression !== 'bf16') {
      throw invalid('compression', "'none', 'fp16' or 'bf16'", compression);
    }
    if (typeof backwardPassesPerStep !== 'number' || !Number.isInteger(backwardPassesPerStep) || backwardPassesPerStep < 1) {
      throw invalid('backwardPassesPerStep', 'an integer >= 1', backwardPassesPerStep);
    }
    if (op !== 'avg' && op !== 'sum') throw invalid('op', "'avg' or 'sum'", op);
    this.optimizer = optimizer;
    this.compression = compression;
    this.backwardPassesPerStep = backwardPassesPerStep;
    this.op = op;
  }

  /**
   * Averages the gradients over ranks, then lets the inner optimizer apply them. With
   * backwardPassesPerStep = k only every k-th call communicates and updates; the others accumulate.
   */
  applyGradients(variableGradients: Gradients): void {
    const t0 = performance.now();
    // A step runs from the end of the previous applyGradients to the end of this one, so that it holds the
    // forward and backward pass that tfjs runs before calling here; the first starts here.
    steps.begin(true);
    const asArray = Array.isArray(variableGradients);
    const entries: Entry[] = asArray
      ? (variableGradients as NamedTensor[]).map((g) => ({ name: g.name, tensor: g.tensor }))
      : Object.keys(variableGradients).map((name) => ({ name, tensor: (variableGradients as tf.NamedTensorMap)[name] }));

    const k = this.backwardPassesPerStep;
    let local: Array<Float32Array | null>;
    if (k === 1) {
      local = entries.map((e) => readGradient(e));
    } else {
      this.accumulate(entries);
      if (++this.passes < k) {
        this.stats.submitMs += performance.now() - t0;
        return;
      }
      local = (this.accumulated as { sums: Array<Float32Array | null> }).sums;
      for (const sum of local) if (sum) for (let i = 0; i < sum.length; i++) sum[i] /= k;
      this.accumulated = null;
      this.passes = 0;
    }

    // Submit everything first, in the order received, so later read-backs overlap earlier transfers.
    const pending = local.map((data, i) => (data ? this.submit(data, entries[i].name) : null));
    const t1 = performance.now();
    const averaged = pending.map((finish) => (finish ? finish() : null));
    const t2 = performance.now();

    const tensors = averaged.map((data, i) => {
      const g = entries[i].tensor;
      return data && g ? tf.tensor(data, g.shape, 'float32') : g;
    });
    try {
      if (asArray) {
        this.optimizer.applyGradients(entries.map((e, i) => ({ name: e.name, tensor: tensors[i] as tf.Tensor })));
      } else {
        const map: tf.NamedTensorMap = {};
        entries.forEach((e, i) => { map[e.name] = tensors[i] as tf.Tensor; });
        this.optimizer.applyGradients(map);
      }
    } finally {
      tensors.forEach((t, i) => { if (t && t !== entries[i].tensor) t.dispose(); });
    }
    const t3 = performance.now();
    this.stats.steps += 1;
    this.stats.submitMs += t1 - t0;
    this.stats.waitMs += t2 - t1;
    this.stats.applyMs += t3 - t2;
    steps.end();
    steps.begin();
  }

  /** Starts one allreduce; returns a function that waits for it and gives the float32 result. */
  private submit(data: Float32Array, name: string): () => Float32Array {
    if (this.skip) return () => data;
    if (this.compression === 'none') {
      const work = hora.allreduce(data, { op: this.op, name, inplace: true });
      return () => work.wait();
    }
    const dtype = this.compression === 'fp16' ? 'float16' : 'bfloat16';
    const packed = dtype === 'float16' ? floatToHalf(data) : floatToBFloat16(data);
    const work = hora.allreduce(packed, { op: this.op, name, inplace: true, dtype });
    return () => {
      const reduced = work.wait();
      return dtype === 'float16' ? halfToFloat(reduced, data) : bfloat16ToFloat(reduced, data);
    };
  }

  private accumulate(entries: Entry[]): void {
    if (!this.accumulated) {
      this.accumulated = { names: entries.map((e) => e.name), sums: entries.map((e) => readGradient(e)) };
      return;
    }
    const { names, sums } = this.accumulated;
    if (names.length !== entries.length || names.some((n, i) => n !== entries[i].name)) {
      throw new Error(`DistributedOptimizer: backward pass ${this.passes + 1} of ${this.backwardPassesPerStep} got gradients for [${entries.map((e) => e.name).join(', ')}], ` +
        `but the earlier passes of this step had [${names.join(', ')}]; every pass of a step must update the same variables`);
    }
    entries.forEach((e, i) => {
      const sum = sums[i];
      if (!e.tensor || !sum) return;
      const g = e.tensor.dataSync() as Float32Array;
      for (let j = 0; j < sum.length; j++) sum[j] += g[j];
    });
  }

  /** The inner optimizer's learning rate (undefined where it has none). */
  get learningRate(): number | undefined {
    return (this.optimizer as unknown as { learningRate?: number }).learningRate;
  }

  set learningRate(lr: number | undefined) {
    setLearningRate(this.optimizer, lr as number);
  }

  get iterations(): number {
    return this.optimizer.iterations;
  }

  getWeights(): Promise<NamedTensor[]> {
    return this.optimizer.getWeights();
  }

  setWeights(weightValues: NamedTensor[]): Promise<void> {
    return this.optimizer.setWeights(weightValues);
  }

  getConfig(): tf.serialization.ConfigDict {
    return this.optimizer.getConfig();
  }

  /** The inner optimizer's class, so model.save() records an optimizer that tfjs can load anywhere. */
  getClassName(): string {
    return this.optimizer.getClassName();
  }

  dispose(): void {
    this.accumulated = null;
    this.optimizer.dispose();
  }
}

/** A float32 copy of one gradient (null where the variable got none). */
function readGradient(e: Entry): Float32Array | null {
  if (!e.tensor) return null;
  if (e.tensor.dtype !== 'float32') {
    throw new TypeError(`DistributedOptimizer: gradient '${e.name}' has dtype ${e.tensor.dtype}; only float32 gradients can be averaged`);
  }
  return Float32Array.from(e.tensor.dataSync() as Float32Array);
}

/** Sets an optimizer's learning rate the way its class expects (SGD caches it in a tensor). */
export function setLearningRate(optimizer: tf.Optimizer, lr: number): void {
  if (typeof lr !== 'number' || !Number.isFinite(lr) || lr < 0) {
    throw new TypeError(`setLearningRate: the learning rate must be a finite number >= 0; received ${String(lr)}`);
  }
  const o = optimizer as unknown as { learningRate?: number; setLearningRate?: (lr: number) => void };
  // Not instanceof: tf.Optimizer's Symbol.hasInstance (inherited) says yes to every optimizer.
  if (DistributedOptimizer.prototype.isPrototypeOf(optimizer)) (optimizer as DistributedOptimizer).learningRate = lr;
  else if (typeof o.setLearningRate === 'function') o.setLearningRate(lr);
  else if (typeof o.learningRate === 'number') o.learningRate = lr;
  else throw new TypeError(`setLearningRate: ${optimizer.getClassName()} has no learningRate to set`);
}
