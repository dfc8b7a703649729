/**
 * The Keras-like loops of a pipeline: trainOnBatch, fit (epochs, shuffling, validation, callbacks),
 * evaluate and predict, each a series of batches run by the executor (executor.ts). Every rank runs
 * them with the same arguments: ranks of one replica pass the same data, of which the first stage reads
 * x and the last y. The Pipeline checks that it is compiled and not broken before it calls them.
 */
import { tf } from '../framework';
import * as hora from '../../../ts/index';
import { HoraError, checkOptionKeys, knownOptions } from '../../../ts/internal';
import { seeded } from './stage';
import { shown } from './options';
import { Executor } from './executor';

export interface PipelineFitArgs {
  /** Samples per batch (of one replica). Default 32. */
  batchSize?: number;
  epochs?: number;
  /** Shuffle the samples every epoch, the same way on every rank. Default true. */
  shuffle?: boolean;
  /** [xVal, yVal]: evaluated after every epoch, giving val_loss and val_<metric>. */
  validationData?: [tf.Tensor | null, tf.Tensor | null];
  /** Objects with any of onTrainBegin, onEpochBegin, onBatchBegin, onBatchEnd, onEpochEnd, onTrainEnd. */
  callbacks?: PipelineCallback | PipelineCallback[];
  /** 0: silent (default); 1: one line per epoch on rank 0. */
  verbose?: number;
}

type Logs = Record<string, number>;
export interface PipelineCallback {
  onTrainBegin?(logs?: Logs): unknown;
  onEpochBegin?(epoch: number, logs?: Logs): unknown;
  onBatchBegin?(batch: number, logs?: Logs): unknown;
  onBatchEnd?(batch: number, logs?: Logs): unknown;
  onEpochEnd?(epoch: number, logs?: Logs): unknown;
  onTrainEnd?(logs?: Logs): unknown;
  setParams?(params: Record<string, unknown>): unknown;
}

export interface PipelineHistory {
  epoch: number[];
  history: Record<string, number[]>;
  params: Record<string, unknown>;
}

const EVALUATE_OPTIONS = knownOptions<{ batchSize?: number }>({ batchSize: true }, '');
const FIT_OPTIONS = knownOptions<PipelineFitArgs>({
  batchSize: true, epochs: true, shuffle: true, validationData: true, callbacks: true, verbose: true,
}, '');

/** A tensor given to fit/evaluate/predict, checked; null where this stage does not read it. */
function checkData(call: string, name: string, v: unknown, needed: boolean): tf.Tensor | null {
  if (v === null || v === undefined) {
    if (needed) throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: argument '${name}' must be a tf.Tensor on this stage; received ${String(v)}`, hora.rank());
    return null;
  }
  if (!(v instanceof tf.Tensor) || v.rank < 1) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: argument '${name}' must be a tf.Tensor with a batch axis; received ${v instanceof tf.Tensor ? `a scalar` : typeof v}`, hora.rank());
  }
  return v;
}

/** The samples in x and y, which must agree; one of them is enough. */
function sizeOf(ex: Executor, call: string, x: tf.Tensor | null, y: tf.Tensor | null): number {
  const n = (x ?? y)?.shape[0];
  if (x && y && x.shape[0] !== y.shape[0]) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: x has ${x.shape[0]} samples but y has ${y.shape[0]}`, ex.rank);
  }
  if (n === undefined) throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: pass x or y (or both) on every rank: their batch size sets the micro-batches`, ex.rank);
  return n;
}

function checkBatchSize(ex: Executor, call: string, batchSize: unknown): void {
  if (typeof batchSize !== 'number' || !Number.isInteger(batchSize) || batchSize < 1) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: option 'batchSize' must be an integer >= 1; received ${shown(batchSize)}`, ex.rank);
  }
}

/** One training batch; the update applied once. Resolves with the loss ([loss, ...metrics] with metrics), on every rank. */
export function trainOnBatch(ex: Executor, optimizer: tf.Optimizer, x: tf.Tensor | null, y: tf.Tensor | null): Promise<number | number[]> {
  const xs = checkData('trainOnBatch', 'x', x, ex.stage === 0);
  const ys = checkData('trainOnBatch', 'y', y, ex.stage === ex.stages - 1);
  const n = sizeOf(ex, 'trainOnBatch', xs, ys);
  if (n < ex.microBatches) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: option 'microBatches' must be at most the batch size (${n} samples); received ${ex.microBatches}`, ex.rank);
  }
  return ex.trainBatch(optimizer, xs, ys, n);
}

/** Loss (and metrics) over x, y in batches of batchSize, as scalars on every rank (model.evaluate). */
export async function evaluate(ex: Executor, x: tf.Tensor | null, y: tf.Tensor | null, args: { batchSize?: number } = {}): Promise<tf.Scalar | tf.Scalar[]> {
  if (args === null || typeof args !== 'object') throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.evaluate: argument 'args' must be an object; received ${shown(args)}`, ex.rank);
  checkOptionKeys('pipeline.evaluate', args, EVALUATE_OPTIONS, ex.rank);
  const values = await evaluateValues(ex, 'evaluate', x, y, args.batchSize ?? 32);
  const scalars = values.map((v) => tf.scalar(v));
  return scalars.length === 1 ? scalars[0] : scalars;
}

async function evaluateValues(ex: Executor, call: string, x: tf.Tensor | null | undefined, y: tf.Tensor | null | undefined, batchSize: number): Promise<number[]> {
  const xs = checkData(call, 'x', x, ex.stage === 0);
  const ys = checkData(call, 'y', y, ex.stage === ex.stages - 1);
  const n = sizeOf(ex, call, xs, ys);
  checkBatchSize(ex, call, batchSize);
  let sums: number[] = [];
  for (let at = 0; at < n; at += batchSize) {
    const b = Math.min(batchSize, n - at);
    const xb = xs ? tf.slice(xs, at, b) : null;
    const yb = ys ? tf.slice(ys, at, b) : null;
    try {
      const { reports } = await ex.runBatch(xb, yb, b, false, false);
      const values = ex.lastStageValues(reports);
      if (sums.length === 0) sums = values.map(() => 0);
      values.forEach((v, i) => { sums[i] += v * b; });
    } finally {
      tf.dispose([xb, yb].filter((t): t is tf.Tensor => t !== null));
    }
  }
  return sums.map((v) => v / n);
}

/** The model's output for x, in batches of batchSize, on every rank of the replica. */
export async function predict(ex: Executor, x: tf.Tensor | null, args: { batchSize?: number } = {}): Promise<tf.Tensor> {
  const xs = checkData('predict', 'x', x, true);
  const n = (xs as tf.Tensor).shape[0];
  const batchSize = args.batchSize ?? 32;
  checkBatchSize(ex, 'predict', batchSize);
  const parts: tf.Tensor[] = [];
  const rowShape = ex.outputShape.slice(1) as number[];
  const rowSize = rowShape.reduce((a, b) => a * b, 1);
  try {
    for (let at = 0; at < n; at += batchSize) {
      const b = Math.min(batchSize, n - at);
      const xb = ex.stage === 0 ? tf.slice(xs as tf.Tensor, at, b) : null;
      let output: tf.Tensor | null;
      try {
        ({ output } = await ex.runBatch(xb, null, b, false, true));
      } finally {
        xb?.dispose();
      }
      // The last stage of the replica holds the output; it sends it to the replica's other stages.
      const lastRank = ex.rankOf(ex.stages - 1);
      let got: Float32Array;
      if (ex.rank === lastRank) {
        got = Float32Array.from((output as tf.Tensor).dataSync() as Float32Array);
        const copies = Array.from({ length: ex.stages - 1 }, (_, s) => hora.send(got, { to: ex.rankOf(s), tag: ex.tags.output }));
        await Promise.all(copies);
      } else {
        got = await hora.recv(new Float32Array(b * rowSize), { from: lastRank, tag: ex.tags.output });
      }
      output?.dispose();
      parts.push(tf.tensor(got, [b, ...rowShape], 'float32'));
    }
    return tf.concat(parts);
  } finally {
    tf.dispose(parts);
  }
}

/**
 * Trains for `epochs` over x, y in batches of batchSize (model.fit): per-epoch logs (loss, metrics,
 * val_ ones) on every rank, callbacks called on every rank.
 */
export async function fit(ex: Executor, optimizer: tf.Optimizer, x: tf.Tensor | null, y: tf.Tensor | null, args: PipelineFitArgs = {}): Promise<PipelineHistory> {
  if (args === null || typeof args !== 'object') throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.fit: argument 'args' must be an object; received ${shown(args)}`, ex.rank);
  checkOptionKeys('pipeline.fit', args, FIT_OPTIONS, ex.rank);
  const { batchSize = 32, epochs = 1, shuffle = true, validationData, verbose = 0 } = args;
  const xs = checkData('fit', 'x', x, ex.stage === 0);
  const ys = checkData('fit', 'y', y, ex.stage === ex.stages - 1);
  const n = sizeOf(ex, 'fit', xs, ys);
  checkBatchSize(ex, 'fit', batchSize);
  if (typeof epochs !== 'number' || !Number.isInteger(epochs) || epochs < 0) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.fit: option 'epochs' must be an integer >= 0; received ${shown(epochs)}`, ex.rank);
  }
  if (Math.min(batchSize, n) < ex.microBatches) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: option 'microBatches' must be at most the batch size (batchSize ${batchSize}, ${n} samples); received ${ex.microBatches}`, ex.rank);
  }
  if (validationData !== undefined && !(Array.isArray(validationData) && validationData.length === 2)) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.fit: option 'validationData' must be [x, y]; received ${shown(validationData)}`, ex.rank);
  }
  // Every rank runs the same rounds: the same samples, batches and epochs everywhere (a replica's shard
  // of the data is the same size as any other's with shard()).
  const validationSize = validationData ? sizeOf(ex, 'fit', validationData[0] ?? null, validationData[1] ?? null) : 0;
  const mine = Float64Array.of(n, batchSize, epochs, shuffle ? 1 : 0, validationSize);
  const all = await hora.allgather(mine, { name: 'pipeline.fit.agree' });
  const fields = ['samples', 'batchSize', 'epochs', 'shuffle', 'validation samples'];
  for (let f = 0; f < fields.length; f++) {
    const values = Array.from({ length: hora.size() }, (_, r) => all[r * fields.length + f]);
    if (values.some((v) => v !== values[0])) {
      throw new HoraError('ERR_MISMATCH', `pipeline.fit: every rank must train on as many samples with the same options, but '${fields[f]}' differs ` +
        `(${values.map((v, r) => `rank ${r}: ${v}`).join(', ')})`, ex.rank);
    }
  }
  const callbacks = args.callbacks === undefined ? [] : Array.isArray(args.callbacks) ? args.callbacks : [args.callbacks];
  const names = ['loss', ...ex.stageModel.metricNames];
  const params = { epochs, batchSize, samples: n, steps: Math.ceil(n / batchSize), metrics: names };
  for (const cb of callbacks) await cb.setParams?.(params);
  const history: PipelineHistory = { epoch: [], history: {}, params };
  // Every rank of a replica shuffles alike: the seed is rank 0's.
  const seed = shuffle ? (await hora.broadcast(Int32Array.of(Math.floor(Math.random() * 2 ** 31)), { root: 0, name: 'pipeline.fit.seed' }))[0] : 0;
  for (const cb of callbacks) await cb.onTrainBegin?.({});
  for (let epoch = 0; epoch < epochs; epoch++) {
    for (const cb of callbacks) await cb.onEpochBegin?.(epoch, {});
    let order: tf.Tensor1D | null = null;
    if (shuffle) {
      const next = seeded(seed + epoch);  // the shuffle every rank of a replica does alike
      const idx = Array.from({ length: n }, (_, i) => i);
      for (let i = n - 1; i > 0; i--) { const j = Math.floor(next() * (i + 1)); [idx[i], idx[j]] = [idx[j], idx[i]]; }
      order = tf.tensor1d(idx, 'int32');
    }
    const sums = new Array(names.length).fill(0);
    let batch = 0;
    try {
      for (let at = 0; at < n; at += batchSize, batch++) {
        const b = Math.min(batchSize, n - at);
        const take = (t: tf.Tensor | null) => {
          if (!t) return null;
          if (!order) return tf.slice(t, at, b);
          return tf.tidy(() => tf.gather(t, tf.slice(order as tf.Tensor1D, at, b)));
        };
        for (const cb of callbacks) await cb.onBatchBegin?.(batch, { batch, size: b });
        const xb = take(xs);
        const yb = take(ys);
        let values: number[];
        try {
          const r = await ex.trainBatch(optimizer, xb, yb, b);
          values = Array.isArray(r) ? r : [r];
        } finally {
          tf.dispose([xb, yb].filter((t): t is tf.Tensor => t !== null));
        }
        values.forEach((v, i) => { sums[i] += v * b; });
        const logs: Logs = { batch, size: b };
        names.forEach((k, i) => { logs[k] = values[i]; });
        for (const cb of callbacks) await cb.onBatchEnd?.(batch, logs);
      }
    } finally {
      order?.dispose();
    }
    const logs: Logs = {};
    names.forEach((k, i) => { logs[k] = sums[i] / n; });
    if (validationData) {
      const values = await evaluateValues(ex, 'fit', validationData[0], validationData[1], batchSize);
      names.forEach((k, i) => { logs[`val_${k}`] = values[i]; });
    }
    for (const cb of callbacks) await cb.onEpochEnd?.(epoch, logs);
    history.epoch.push(epoch);
    for (const [k, v] of Object.entries(logs)) (history.history[k] ??= []).push(v);
    if (verbose > 0 && ex.rank === 0) {
      process.stdout.write(`Epoch ${epoch + 1} / ${epochs}: ${Object.entries(logs).map(([k, v]) => `${k}=${v.toFixed(4)}`).join(' ')}\n`);
    }
  }
  for (const cb of callbacks) await cb.onTrainEnd?.({});
  return history;
}
