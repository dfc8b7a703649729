/**
 * Making every rank start from the same place: root's model weights and optimizer state, and each
 * rank's share of the data.
 */
import { tf } from './framework';
import * as hora from '../../ts/index';
import { HoraError, checkOptionKeys, describeValue, knownOptions } from '../../ts/internal';
import { isWeightSharded } from './zero-weights';

/** What broadcastModel needs of a model: tf.LayersModel's `weights` (LayerVariables). */
export interface ModelWithWeights {
  weights: Array<{ name: string; read(): tf.Tensor; write(value: tf.Tensor): unknown }>;
}

type Typed = Float32Array | Int32Array;

function typedCopy(t: tf.Tensor, what: string): Typed {
  if (t.dtype === 'float32') return Float32Array.from(t.dataSync() as Float32Array);
  if (t.dtype === 'int32') return Int32Array.from(t.dataSync() as Int32Array);
  throw new TypeError(`${what} has dtype ${t.dtype}; only float32 and int32 can be broadcast`);
}

/**
 * Overwrites every weight of `model` (trainable or not: batch-norm statistics too) with root's values.
 * Every rank must call it with the same model architecture. Resolves once the weights are assigned.
 */
export async function broadcastModel(model: ModelWithWeights, root = 0): Promise<void> {
  const weights = model.weights;
  const works = weights.map((w) => hora.broadcast(typedCopy(w.read(), `broadcastModel: weight '${w.name}'`), { root, name: w.name, inplace: true }));
  const values = await Promise.all(works);
  weights.forEach((w, i) => {
    const current = w.read();
    const t = tf.tensor(values[i], current.shape, current.dtype);
    w.write(t);
    t.dispose();
  });
}

/**
 * Overwrites the optimizer's state (iteration count, Adam's moments, momentum...) with root's, through
 * getWeights()/setWeights(). Every rank must hold the same number of optimizer weights: most tf.train
 * optimizers create their slots on the first update, so call it either before any update on every rank
 * (then only the iteration count travels) or after the same number of updates everywhere. A difference
 * is reported on every rank as an Error naming the counts.
 */
export async function broadcastOptimizer(optimizer: tf.Optimizer, root = 0): Promise<void> {
  const named = await optimizer.getWeights();
  const counts = await hora.allgather(Int32Array.of(named.length), { name: 'broadcastOptimizer.count' });
  if (counts.some((c) => c !== named.length)) {
    throw new Error(`broadcastOptimizer: ranks hold different numbers of optimizer weights (by rank: ${Array.from(counts).join(', ')}); ` +
      'call it before the first update on every rank, or after the same number of updates');
  }
  const works = named.map((w) => hora.broadcast(typedCopy(w.tensor, `broadcastOptimizer: weight '${w.name}'`), { root, name: w.name, inplace: true }));
  const values = await Promise.all(works);
  const fresh = named.map((w, i) => ({ name: w.name, tensor: tf.tensor(values[i], w.tensor.shape, w.tensor.dtype) }));
  await optimizer.setWeights(fresh);
  // setWeights copies ours into its own variables (getWeights gave us those variables themselves: keep them).
  fresh.forEach((w) => w.tensor.dispose());
}

/**
 * The end of this rank's data for an epoch of uneven data: joins (hora.join()), serving the other ranks'
 * remaining steps with zeros (a DistributedOptimizer's sample count 0), and once every rank has joined
 * copies the model's weights, and the optimizer's state when given, from the rank that joined last (it took
 * every step; a rank that joined earlier skipped the updates of the steps it served). Resolves to that rank.
 * model.fit and fitDataset with a DistributedOptimizer do this by themselves at each epoch's end; a custom
 * loop calls it after its last batch of each epoch, on every rank. With a sharded DistributedOptimizer (shard
 * 'optimizer', 'gradients' or 'weights'; sharded weights need it) a rank serves the others' steps with shadow
 * steps instead, and every rank takes every step (docs/zero.md and docs/zero-weights.md, "Uneven data"); only
 * stages 1 and 2 copy the model's weights (the untrained ones differ), never the optimizer's state.
 */
export async function joinEpoch(model: ModelWithWeights, optimizer?: tf.Optimizer): Promise<number> {
  const shard = (optimizer as { shard?: string } | undefined)?.shard;
  // Sharded (weights, or optimizer state): every rank's blocks serve every step, so a rank out of data serves
  // the others' passes with passes of its own on zeros (zero-rounds.ts), not with hora.join(), and every rank
  // takes every step: the trained weights are alike everywhere. With sharded state (stages 1 and 2) the weights
  // that are not trained (batch normalization's statistics, which a pass on zeros moves) come from the rank
  // that stepped last, as after hora.join().
  const joinShards = (optimizer as { joinShards?: (model: unknown) => Promise<number> | null } | undefined)?.joinShards;
  if (shard !== undefined && shard !== 'none' && typeof joinShards === 'function') {
    const joined = joinShards.call(optimizer, model);
    if (joined) {
      const last = await joined;
      if (shard !== 'weights' && hora.size() > 1) await broadcastModel(model, last);
      return last;
    }
  }
  if (isWeightSharded(model)) {
    throw new HoraError('ERR_INVALID_ARGUMENT', "joinEpoch: argument 'optimizer' must be the DistributedOptimizer that shards the model's weights " +
      `(shard: 'weights'); received ${describeValue(optimizer)}`);
  }
  const last = await hora.join();
  if (hora.size() === 1) return last;
  // Sharded (docs/zero.md), a step needs every rank, so every rank took every step: no copy of the optimizer's
  // state (gathering it whole here would hold what sharding spares).
  await broadcastModel(model, last);
  if (optimizer && (shard === undefined || shard === 'none')) await broadcastOptimizer(optimizer, last);
  return last;
}

export interface ShardOptions {
  /** 'contiguous' (default): rank r gets samples [r*m, (r+1)*m); 'strided': samples r, r+size, r+2*size... */
  mode?: 'contiguous' | 'strided';
  /** Defaults to hora.rank(). */
  rank?: number;
  /** Defaults to hora.size(). */
  size?: number;
  /**
   * What becomes of the n % size samples that do not divide among the ranks: 'drop' (default) leaves them
   * out, so every rank gets floor(n / size); 'keep' gives one more to each of the first n % size ranks, so
   * sizes differ by at most one and every sample is trained on (DistributedOptimizer then averages an uneven
   * step over samples: see docs/tfjs.md).
   */
  remainder?: 'drop' | 'keep';
}

type Shardable = tf.Tensor | unknown[] | ArrayLike<unknown>;

const SHARD_OPTIONS = knownOptions<ShardOptions>({ mode: true, rank: true, size: true, remainder: true }, '');

/**
 * Each rank's part of a data set along axis 0. Every rank gets m = floor(n / size) samples (the last
 * n % size are dropped) so that all ranks run the same number of steps; with remainder: 'keep' the first
 * n % size ranks get one more each (contiguous: rank r's part starts at r*m + min(r, n % size)); x and y
 * are cut the same way.
 * Tensors come back as new tensors, arrays (and typed arrays) as arrays of the same kind.
 */
export function shard<X extends Shardable, Y extends Shardable>(x: X, y?: Y, options: ShardOptions = {}): { x: X; y: Y } {
  if (options === null || typeof options !== 'object') throw new TypeError(`shard: argument 'options' must be an object; received ${String(options)}`);
  checkOptionKeys('shard', options, SHARD_OPTIONS);
  const rank = options.rank ?? hora.rank();
  const size = options.size ?? hora.size();
  const mode = options.mode ?? 'contiguous';
  if (mode !== 'contiguous' && mode !== 'strided') throw new TypeError(`shard: option 'mode' must be 'contiguous' or 'strided'; received '${String(mode)}'`);
  if (!Number.isInteger(size) || size < 1) throw new TypeError(`shard: option 'size' must be an integer >= 1; received ${String(size)}`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= size) throw new TypeError(`shard: option 'rank' must be an integer from 0 to ${size - 1}; received ${String(rank)}`);
  const n = lengthOf(x);
  if (y !== undefined && lengthOf(y) !== n) throw new RangeError(`shard: x has ${n} samples but y has ${lengthOf(y)}`);
  const remainder = options.remainder ?? 'drop';
  if (remainder !== 'drop' && remainder !== 'keep') throw new TypeError(`shard: option 'remainder' must be 'drop' or 'keep'; received '${String(remainder)}'`);
  const base = Math.floor(n / size);
  const extra = remainder === 'keep' ? n % size : 0;
  const m = base + (rank < extra ? 1 : 0);
  const start = rank * base + Math.min(rank, extra);
  const indices = mode === 'contiguous'
    ? Array.from({ length: m }, (_, i) => start + i)
    : Array.from({ length: m }, (_, i) => rank + i * size);
  const cut = <T extends Shardable>(v: T): T => {
    if (v instanceof tf.Tensor) {
      if (mode === 'contiguous') return tf.slice(v, start, m) as unknown as T;
      return tf.tidy(() => tf.gather(v, tf.tensor1d(indices, 'int32'))) as unknown as T;
    }
    if (Array.isArray(v)) return indices.map((i) => v[i]) as unknown as T;
    const Ctor = (v as unknown as { constructor: { from(a: unknown[]): T } }).constructor;
    const a = v as ArrayLike<unknown>;
    return Ctor.from(indices.map((i) => a[i]));
  };
  return { x: cut(x), y: (y === undefined ? undefined : cut(y)) as Y };
}

function lengthOf(v: Shardable): number {
  if (v instanceof tf.Tensor) return v.shape[0] ?? 1;
  return (v as ArrayLike<unknown>).length;
}
