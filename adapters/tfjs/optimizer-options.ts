/**
 * DistributedOptimizer's options and stats (optimizer.ts): the options a user passes, each with its doc
 * line and default; their check (checkOptions), which refuses an unknown key or a bad value by name before
 * anything is built and gives the settings the optimizer runs with; and where the time of its steps went.
 */
import { HoraError, checkOptionKeys, knownOptions } from '../../ts/internal';
import { Shard, shardOf } from './zero';

export type Compression = 'none' | 'fp16' | 'bf16';

export interface DistributedOptimizerOptions {
  /** How gradients travel: 'none' (float32, exact), 'fp16' or 'bf16' (half the bytes, rounded). Default 'none'. */
  compression?: Compression;
  /** Local gradient sets summed (then divided by this) before one allreduce and one update; integer >= 1. Default 1. */
  backwardPassesPerStep?: number;
  /** How gradients are combined over ranks: 'avg' for mean-reduced losses (default), 'sum' for summed ones. */
  op?: 'avg' | 'sum';
  /**
   * Start each bucket's allreduce during the backward pass of minimize / fit / trainOnBatch (true, the
   * default), or all of them in applyGradients (false). Both give bit-identical weights.
   */
  overlap?: boolean;
  /** Size of a bucket of gradients sent together when overlapping, in MiB (> 0). Default 4. */
  bucketMB?: number;
  /**
   * ZeRO (docs/zero.md): each rank keeps 1/N of the optimizer state ('optimizer'), and of the averaged
   * gradients ('gradients'), and of the weights of `model` ('weights': a layer's weights are allgathered when
   * the layer runs; docs/zero-weights.md). Default 'none'.
   */
  shard?: Shard;
  /** The model whose weights shard: 'weights' shards (a built tf.LayersModel, before model.fit); only with it. */
  model?: unknown;
}

const OPTIONS = knownOptions<DistributedOptimizerOptions>({ compression: true, backwardPassesPerStep: true, op: true, overlap: true, bucketMB: true, shard: true, model: true }, '');

/** Default bucketMB: see docs/tfjs.md for the measurement behind it. */
export const DEFAULT_BUCKET_MB = 4;

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
  /** Backward passes run through computeGradients (minimize, fit, trainOnBatch): their time. */
  backwardMs: number;
  /**
   * Communication in flight while a backward pass still ran: from its first bucket's start to the
   * pass's end. An upper bound of the communication the pass hid.
   */
  hiddenMs: number;
  /** Communication nothing hid: blocked after the backward pass (the same figure as waitMs). */
  exposedMs: number;
}

/** An option's error: its name, what it must be, what it received. */
function invalid(option: string, expected: string, received: unknown): Error {
  const shown = typeof received === 'string' ? `'${received}'` : String(received);
  return new TypeError(`DistributedOptimizer: option '${option}' must be ${expected}; received ${shown}`);
}

/** The options as the optimizer runs with them: every default filled in (the model aside). */
export type Settings = Readonly<Required<Omit<DistributedOptimizerOptions, 'model'>>>;

/** Checks DistributedOptimizer's options (the keys, then each value in turn); the settings with defaults filled in. */
export function checkOptions(options: DistributedOptimizerOptions): Settings {
  if (options === null || typeof options !== 'object') throw invalid('options', 'an object', options);
  checkOptionKeys('DistributedOptimizer', options, OPTIONS);
  const {
    compression = 'none', backwardPassesPerStep = 1, op = 'avg', overlap = true, bucketMB = DEFAULT_BUCKET_MB,
  } = options;
  if (compression !== 'none' && compression !== 'fp16' && compression !== 'bf16') {
    throw invalid('compression', "'none', 'fp16' or 'bf16'", compression);
  }
  if (typeof backwardPassesPerStep !== 'number' || !Number.isInteger(backwardPassesPerStep) || backwardPassesPerStep < 1) {
    throw invalid('backwardPassesPerStep', 'an integer >= 1', backwardPassesPerStep);
  }
  if (op !== 'avg' && op !== 'sum') throw invalid('op', "'avg' or 'sum'", op);
  if (typeof overlap !== 'boolean') throw invalid('overlap', 'true or false', overlap);
  if (typeof bucketMB !== 'number' || !Number.isFinite(bucketMB) || bucketMB <= 0) {
    throw invalid('bucketMB', 'a finite number > 0', bucketMB);
  }
  const shard = shardOf(options.shard);
  if (options.model !== undefined && shard !== 'weights') {
    throw new HoraError('ERR_INVALID_ARGUMENT', "DistributedOptimizer: option 'model' is used with shard: 'weights' only; received a model without it");
  }
  return { compression, backwardPassesPerStep, op, overlap, bucketMB, shard };
}
