/**
 * Callbacks for model.fit / model.fitDataset. They extend tf.Callback (from @tensorflow/tfjs-layers,
 * which @tensorflow/tfjs includes) so that fit hands them the model. Put every hora callback before
 * your own: tfjs passes one logs object down the list, so later callbacks see the averaged values.
 */
import type { Logs } from '@tensorflow/tfjs-layers';
import { tfl } from './framework';
import * as hora from '../../ts/index';
import { checkOptionKeys, knownOptions } from '../../ts/internal';
import { ModelWithWeights, broadcastModel, joinEpoch } from './broadcast';
import { DistributedOptimizer, setLearningRate } from './optimizer';

/** Broadcasts root's weights to every rank when training begins, so all ranks start identical. */
export class BroadcastWeightsCallback extends tfl.Callback {
  constructor(readonly root = 0) {
    super();
  }

  async onTrainBegin(): Promise<void> {
    await broadcastModel(this.model, this.root);
  }
}

/**
 * Replaces every numeric entry of the epoch logs (loss, acc, val_loss...) by its mean over ranks, so
 * rank 0's history and early-stopping decisions reflect the whole data set and every rank decides alike.
 */
export class MetricAverageCallback extends tfl.Callback {
  async onEpochEnd(epoch: number, logs?: Logs): Promise<void> {
    if (!logs) return;
    const keys = Object.keys(logs).sort();
    const values = new Float64Array(keys.length);
    const numeric: string[] = [];
    for (const key of keys) {
      const v = await numberOf((logs as Record<string, unknown>)[key]);
      if (v === undefined) continue;
      values[numeric.length] = v;
      numeric.push(key);
    }
    const mean = await hora.allreduce(values.subarray(0, numeric.length).slice(), { op: 'avg', name: `metrics.epoch${epoch}` });
    numeric.forEach((key, i) => { (logs as Record<string, number>)[key] = mean[i]; });
  }
}

async function numberOf(v: unknown): Promise<number | undefined> {
  if (typeof v === 'number') return v;
  const t = v as { data?: () => Promise<ArrayLike<number>>; size?: number } | null;
  if (t && typeof t.data === 'function' && t.size === 1) return (await t.data())[0];
  return undefined;
}

export interface LearningRateWarmupOptions {
  /** Epochs (fractions allowed) over which the rate climbs linearly, updated every batch; > 0. */
  warmupEpochs: number;
  /** The single-process learning rate; default: the optimizer's rate when training begins. */
  initialLr?: number;
  /** Target = initialLr x hora.size() (true, the default) or initialLr itself (false). */
  scaleByWorldSize?: boolean;
}

/**
 * Goyal et al. (2017), "Accurate, Large Minibatch SGD": with N ranks the global batch is N times
 * larger, so the target rate is N times the single-process one, reached by a linear ramp from
 * target / N over the first warmupEpochs, updated every batch, then held. Sets the learning rate of the
 * model's optimizer (a DistributedOptimizer or any tf.train optimizer with a learningRate).
 */
const WARMUP_OPTIONS = knownOptions<LearningRateWarmupOptions>({ warmupEpochs: true, initialLr: true, scaleByWorldSize: true }, '');

export class LearningRateWarmupCallback extends tfl.Callback {
  readonly warmupEpochs: number;
  readonly scaleByWorldSize: boolean;
  private initialLr: number | undefined;
  private target = 0;
  private epoch = 0;
  private done = false;

  constructor(options: LearningRateWarmupOptions) {
    super();
    if (options === null || typeof options !== 'object') throw new TypeError(`LearningRateWarmupCallback: argument 'options' must be an object; received ${String(options)}`);
    checkOptionKeys('LearningRateWarmupCallback', options, WARMUP_OPTIONS);
    const { warmupEpochs, initialLr, scaleByWorldSize = true } = options;
    if (typeof warmupEpochs !== 'number' || !(warmupEpochs > 0) || !Number.isFinite(warmupEpochs)) {
      throw new TypeError(`LearningRateWarmupCallback: option 'warmupEpochs' must be a number > 0; received ${String(warmupEpochs)}`);
    }
    if (initialLr !== undefined && !(typeof initialLr === 'number' && initialLr > 0 && Number.isFinite(initialLr))) {
      throw new TypeError(`LearningRateWarmupCallback: option 'initialLr' must be a number > 0; received ${String(initialLr)}`);
    }
    if (typeof scaleByWorldSize !== 'boolean') {
      throw new TypeError(`LearningRateWarmupCallback: option 'scaleByWorldSize' must be a boolean; received ${String(scaleByWorldSize)}`);
    }
    this.warmupEpochs = warmupEpochs;
    this.initialLr = initialLr;
    this.scaleByWorldSize = scaleByWorldSize;
  }

  /** The rate `progress` epochs into training (progress may be fractional). */
  learningRateAt(progress: number): number {
    const start = this.target / hora.size();
    return progress >= this.warmupEpochs ? this.target : start + (this.target - start) * (progress / this.warmupEpochs);
  }

  async onTrainBegin(): Promise<void> {
    const base = this.initialLr ?? (this.model.optimizer as unknown as { learningRate?: number }).learningRate;
    if (typeof base !== 'number') {
      throw new TypeError(`LearningRateWarmupCallback: ${this.model.optimizer.getClassName()} has no learningRate; pass options.initialLr`);
    }
    this.target = this.scaleByWorldSize ? base * hora.size() : base;
    this.done = false;
    setLearningRate(this.model.optimizer, this.learningRateAt(0));
  }

  async onEpochBegin(epoch: number): Promise<void> {
    this.epoch = epoch;
    if (!this.done) setLearningRate(this.model.optimizer, this.learningRateAt(epoch));
  }

  async onBatchBegin(batch: number): Promise<void> {
    if (this.done) return;
    const steps = stepsPerEpoch(this.params);
    const progress = steps ? this.epoch + batch / steps : this.epoch;
    setLearningRate(this.model.optimizer, this.learningRateAt(progress));
    if (progress >= this.warmupEpochs) this.done = true;
  }
}

function stepsPerEpoch(params: Record<string, unknown> | undefined): number | undefined {
  if (!params) return undefined;
  if (typeof params.steps === 'number' && params.steps > 0) return params.steps;
  if (typeof params.samples === 'number' && typeof params.batchSize === 'number' && params.batchSize > 0) {
    return Math.ceil(params.samples / params.batchSize);
  }
  return undefined;
}

/**
 * Tells a DistributedOptimizer how many samples each batch of model.fit and fitDataset holds, before the
 * batch's step, so that an uneven last batch is averaged over samples (DistributedOptimizer.setSampleCount).
 * fitDataset gives onBatchBegin the batch's `size`; model.fit fills it in only after onBatchBegin, so there
 * the size comes from fit's params as fit cuts its batches: batch i is [i * batchSize, min(samples, (i + 1) * batchSize)). Not for the user to add: hora/tfjs
 * registers it with tfjs (registerCallbackConstructor, at verbosity 0), so that every fit and fitDataset
 * makes one, ahead of the callbacks the user passes; it does nothing for a model with another optimizer.
 *
 * At the end of this rank's data for the epoch (onEpochEnd runs on each rank when its own batches are done,
 * before the user's callbacks) it joins (hora.join()): a rank with fewer batches than the others takes part
 * in their remaining steps with zeros and a count of 0, so the last, uneven global batches average over the
 * samples that exist; the epoch ends on every rank together when the last rank's data ends, and the ranks
 * that joined early take the weights and optimizer state of the last to join (joinEpoch()). With a sharded
 * optimizer (shard 'optimizer', 'gradients' or 'weights') the rank serves the others' steps with shadow steps
 * instead (joinEpoch; zero-rounds.ts).
 */
export class SampleCountCallback extends tfl.Callback {
  async onBatchBegin(batch: number, logs?: Logs): Promise<void> {
    const optimizer = distributedOptimizerOf(this.model);
    if (!optimizer) return;
    const size = typeof logs?.size === 'number' ? logs.size : batchSizeOf(this.params, batch);
    // Not told the size: a pass without a count (with sharded weights the pass's round still runs).
    if (size !== undefined || optimizer.shard === 'weights') optimizer.setSampleCount(size ?? null);
  }

  async onEpochEnd(): Promise<void> {
    const optimizer = distributedOptimizerOf(this.model);
    if (optimizer && hora.size() > 1) await joinEpoch(this.model as unknown as ModelWithWeights, optimizer);
  }
}

/** The samples of model.fit's batch `batch` from fit's params; undefined where they do not tell. */
function batchSizeOf(params: Record<string, unknown> | undefined, batch: number): number | undefined {
  const samples = params?.samples, batchSize = params?.batchSize;
  if (typeof samples !== 'number' || typeof batchSize !== 'number' || !(batchSize > 0)) return undefined;
  return Math.max(0, Math.min(batchSize, samples - batch * batchSize));
}

/** The model's optimizer when it is a DistributedOptimizer; else null. */
function distributedOptimizerOf(model: { optimizer?: unknown } | undefined): DistributedOptimizer | null {
  const optimizer = model?.optimizer;
  // Not instanceof: tf.Optimizer's Symbol.hasInstance (inherited) says yes to every optimizer.
  return optimizer && DistributedOptimizer.prototype.isPrototypeOf(optimizer) ? optimizer as DistributedOptimizer : null;
}

tfl.registerCallbackConstructor(0, SampleCountCallback as unknown as Parameters<typeof tfl.registerCallbackConstructor>[1]);
