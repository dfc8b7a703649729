/**
 * ZeRO stages 1 and 2 for DistributedOptimizer: `shard: 'optimizer'` and `shard: 'gradients'`.
 *
 * The shard layout, the same in both stages and at every step: each trained variable, flattened, is cut into
 * size() blocks by reduceScatter's rule (blockRange: the first count % size blocks one element longer), and
 * rank r owns block r of every variable. So each rank keeps 1/N of every variable's optimizer state (within
 * one element per variable), whatever the bucket plan, and a parameter count that does not divide works.
 *
 * A step (ShardedUpdate.apply), after the gradients are averaged:
 *  1. each variable's shard variable (a tf.Variable of this rank's block, registered under the variable's
 *     name + `@zeroN`) takes the block of the variable's current value (so weights set since the last
 *     step, by setWeights, a checkpoint or a broadcast, are what is updated);
 *  2. the wrapped optimizer applies the block of the averaged gradient to the shard variables, in one
 *     applyGradients, in the order the unsharded optimizer would see the variables: its state (Adam's
 *     moments...) exists for this rank's blocks only. Every optimizer tf.train ships is elementwise, so
 *     updating a block is the block of the update (others are refused by name, see checkShardable);
 *  3. the updated blocks are allgathered, in groups of about bucketMB started together, and every rank
 *     writes the same gathered bytes into its variables: bit-identical weights everywhere.
 *
 * Stage 1 averages gradients exactly as the unsharded optimizer does (allreduce in buckets, overlap,
 * compression, accumulation, sample weights): it then reads only its blocks. Stage 2 replaces each bucket's
 * allreduce by a reduceScatter (reduceScatter() below): the bucket is packed rank by rank (rank q's blocks of
 * the bucket's variables, padded to the longest rank's, so the reduceScatter cuts it at the ranks' borders)
 * and the reduced blocks are written back into the bucket, in place, so no rank ever holds more of the
 * averaged gradient than its own blocks (the rest of the bucket keeps its local gradient, never read).
 *
 * What the optimizer's state looks like from outside: getWeights() gathers the blocks (a collective: every
 * rank calls it) into the full state, named as the unsharded optimizer names it; setWeights() takes the
 * full state and keeps this rank's blocks. Checkpoints save the blocks as sharded entries (checkpoint.ts's
 * CheckpointableOptimizer), which load at another world size as that world's blocks.
 */
import { tf } from './framework';
import * as hora from '../../ts/index';
import type { CheckpointEntry, LoadedShard, Tensor } from '../../ts/index';
import { HoraError, blockRange, describeValue, flushCollectives } from '../../ts/internal';
import { planBuckets } from './buckets';
import { compress, decompress } from './half';

/** What DistributedOptimizer keeps sharded: nothing, the optimizer state (stage 1), or it and the gradients (stage 2). */
export type Shard = 'none' | 'optimizer' | 'gradients' | 'weights';

type NamedTensor = { name: string; tensor: tf.Tensor };

/** tf.train's optimizers, all elementwise: the only ones whose update of a block is the block of the update. */
function elementwise(): Array<{ prototype: unknown }> {
  return [tf.SGDOptimizer, tf.MomentumOptimizer, tf.AdamOptimizer, tf.AdamaxOptimizer, tf.RMSPropOptimizer, tf.AdagradOptimizer, tf.AdadeltaOptimizer];
}

/** Checks the shard option (undefined: 'none'). */
export function shardOf(shard: unknown): Shard {
  if (shard === undefined || shard === 'none') return 'none';
  if (shard === 'optimizer' || shard === 'gradients' || shard === 'weights') return shard;
  throw new HoraError('ERR_INVALID_ARGUMENT', "DistributedOptimizer: option 'shard' must be 'none', 'optimizer', 'gradients' or 'weights'" +
    `; received ${describeValue(shard)}`);
}

/** Refuses an optimizer whose state cannot be cut into blocks (any that is not one of tf.train's own). */
export function checkShardable(optimizer: tf.Optimizer, shard: Shard): void {
  const proto = Object.getPrototypeOf(optimizer);
  if (elementwise().some((C) => C.prototype === proto)) return;
  const name = (optimizer as { getClassName?: () => string }).getClassName?.() ?? proto?.constructor?.name ?? typeof optimizer;
  throw new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer: argument 'optimizer' must be one of tf.train's elementwise optimizers ` +
    `(sgd, momentum, adam, adamax, rmsprop, adagrad, adadelta) to shard its state (shard: '${shard}'); received ${name}` +
    (isDistributedOptimizer(optimizer) ? ' (a DistributedOptimizer: wrap the tf.train optimizer itself)' : ''));
}

function isDistributedOptimizer(o: unknown): boolean {
  return typeof (o as { discardPartialStep?: unknown }).discardPartialStep === 'function';
}

/** One trained variable and this rank's block of it. */
interface Sharded {
  name: string;
  variable: tf.Variable;
  /** This rank's block, as the wrapped optimizer sees it. */
  shard: tf.Variable;
  begin: number;
  end: number;
}

/** What the checkpoint methods need of the model: its weights' names, in order. */
export interface CheckpointModelLike {
  weights: Array<{ name: string }>;
}

let instances = 0;

export class ShardedUpdate {
  /** Stage 2: buckets are reduce-scattered. */
  readonly scatters: boolean;
  private readonly marker = `@zero${++instances}`;
  private readonly vars = new Map<string, Sharded>();
  /** The world the blocks were cut for. */
  private size = -1;
  private rank = -1;
  /** The full-state tensors the last getWeights() made: freed by the next call, or by dispose(). */
  private lastFull: tf.Tensor[] = [];

  /** owner: the DistributedOptimizer, which gets checkpoint.ts's CheckpointableOptimizer methods from here. */
  constructor(owner: tf.Optimizer, readonly inner: tf.Optimizer, readonly mode: Shard, private readonly bucketBytes: number) {
    checkShardable(inner, mode);
    this.scatters = mode === 'gradients';
    // Only a sharded optimizer has them: an unsharded one saves through getWeights().
    Object.assign(owner, {
      checkpointEntries: this.checkpointEntries.bind(this), restoreCheckpoint: this.restoreCheckpoint.bind(this),
      shardCut: this.shardCut.bind(this), recut: this.recut.bind(this),
    });
  }

  /** Fixes the world this rank's blocks are cut for at the first call; another world later is refused (the blocks would not fit). */
  private world(): void {
    const size = hora.size(), rank = hora.rank();
    if (this.size === -1) {
      this.size = size;
      this.rank = rank;
    } else if (size !== this.size || rank !== this.rank) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer (shard: '${this.mode}'): its optimizer state is cut for rank ${this.rank} of ${this.size}, ` +
        `but this process is now rank ${rank} of ${size}; a sharded optimizer does not follow a world that changes size (save a checkpoint with ` +
        'saveCheckpoint and load it into a new DistributedOptimizer)');
    }
  }

  /** The world this rank's blocks are cut for (size -1 before the first step); ElasticState records it with a commit. */
  shardCut(): { size: number; rank: number } {
    return { size: this.size, rank: this.rank };
  }

  /**
   * Cuts the blocks anew for the current world (ElasticState, after the world re-formed): each shard
   * variable gets this rank's new block range; the wrapped optimizer's slots still have the old lengths
   * until restoreCheckpoint() gives it the state cut for this world, which the caller does next.
   */
  recut(): void {
    this.size = -1;
    this.world();
    for (const s of this.vars.values()) {
      const [begin, end] = blockRange(s.variable.size, this.size, this.rank);
      if (end - begin !== s.end - s.begin) {
        const name = s.shard.name;
        s.shard.dispose();
        s.shard = tf.tidy(() => tf.variable(tf.zeros([end - begin]), false, name, 'float32'));
      }
      s.begin = begin;
      s.end = end;
    }
  }

  private shardOf(name: string): Sharded {
    let s = this.vars.get(name);
    if (s) return s;
    const variable = tf.engine().registeredVariables[name];
    if (!variable) throw new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer (shard: '${this.mode}'): there is no variable named '${name}' to update`);
    if (variable.dtype !== 'float32') {
      throw new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer (shard: '${this.mode}'): variable '${name}' has dtype ${variable.dtype}; only float32 variables can be sharded`);
    }
    this.world();
    const [begin, end] = blockRange(variable.size, this.size, this.rank);
    const shard = tf.tidy(() => tf.variable(tf.zeros([end - begin]), false, name + this.marker, 'float32'));
    s = { name, variable, shard, begin, end };
    this.vars.set(name, s);
    return s;
  }

  /**
   * Stage 2: starts the reduceScatter of one bucket (the concatenation of variables of `counts` elements);
   * the returned function waits and gives the bucket with this rank's blocks reduced (the rest as it was).
   */
  reduceScatter(data: Float32Array, name: string, counts: readonly number[], op: 'avg' | 'sum', compression: 'none' | 'fp16' | 'bf16'): () => Float32Array {
    this.world();
    const n = this.size;
    const offsets: number[] = [];
    let at = 0;
    for (const c of counts) {
      offsets.push(at);
      at += c;
    }
    // Rank 0's blocks are the longest (blockRange gives the extra elements to the first blocks).
    const stride = counts.reduce((sum, c) => sum + blockRange(c, n, 0)[1], 0);
    const packed = new Float32Array(stride * n);
    for (let q = 0; q < n; q++) {
      let to = q * stride;
      counts.forEach((c, i) => {
        const [b, e] = blockRange(c, n, q);
        packed.set(data.subarray(offsets[i] + b, offsets[i] + e), to);
        to += e - b;
      });
    }
    const unpack = (mine: Float32Array) => {
      let from = 0;
      counts.forEach((c, i) => {
        const [b, e] = blockRange(c, n, this.rank);
        data.set(mine.subarray(from, from + e - b), offsets[i] + b);
        from += e - b;
      });
      return data;
    };
    if (compression === 'none') {
      const work = hora.reduceScatter(packed, { op, name });
      return () => unpack(work.wait());
    }
    const { bits, dtype } = compress(packed, compression);
    const work = hora.reduceScatter(bits, { op, name, dtype });
    return () => unpack(decompress(work.wait(), dtype));
  }

  /**
   * The step: `averaged[i]` is entries[i]'s averaged gradient (stage 2: only this rank's block of it is);
   * updates this rank's blocks with the wrapped optimizer, then allgathers the weights.
   */
  apply(entries: Array<{ name: string; tensor: tf.Tensor | null | undefined }>, averaged: Array<Float32Array | null>): void {
    this.world();
    const shards = entries.map((e) => this.shardOf(e.name));
    for (const s of shards) {
      const block = tf.tidy(() => tf.slice(tf.reshape(s.variable, [-1]), s.begin, s.end - s.begin));
      s.shard.assign(block);
      block.dispose();
    }
    const grads = shards.map((s, i) => {
      const g = averaged[i];
      return { name: s.shard.name, tensor: g ? tf.tensor1d(g.subarray(s.begin, s.end), 'float32') : (null as unknown as tf.Tensor) };
    });
    try {
      this.inner.applyGradients(grads);
    } finally {
      for (const g of grads) if (g.tensor) g.tensor.dispose();
    }
    this.gatherWeights(shards.filter((_, i) => averaged[i]));
  }

  /** Allgathers the updated blocks into every rank's variables: groups of about bucketBytes, all started first. */
  private gatherWeights(shards: Sharded[]): void {
    const sorted = shards.slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const groups = planBuckets(sorted.map((s) => ({ name: s.name, count: s.variable.size })), this.bucketBytes);
    let k = 0;
    const works = groups.map((g, gi) => {
      const members = g.names.map(() => sorted[k++]);
      const mine = new Float32Array(members.reduce((sum, s) => sum + s.end - s.begin, 0));
      let at = 0;
      for (const s of members) {
        mine.set(s.shard.dataSync() as Float32Array, at);
        at += s.end - s.begin;
      }
      return { members, work: hora.allgather(mine, { name: `tfjs zero weights ${gi + 1}/${groups.length}` }) };
    });
    flushCollectives();
    for (const { members, work } of works) {
      const gathered = work.wait();
      const values = this.assemble(gathered, members.map((s) => s.variable.size), 'weights');
      members.forEach((s, i) => {
        const t = tf.tensor(values[i], s.variable.shape, 'float32');
        s.variable.assign(t);
        t.dispose();
      });
    }
  }

  /**
   * Whole arrays of `sizes` elements from an allgather of every rank's blocks of them (rank after rank,
   * each rank's blocks in order). A rank that sent nothing (it joined: hora.join() serves an allgather
   * with nothing; joinEpoch serves them instead, zero-rounds.ts) leaves a hole that no rank can fill: that is an
   * error, on every rank that took part.
   */
  private assemble(gathered: Float32Array, sizes: number[], what: string): Float32Array[] {
    const n = this.size;
    const total = sizes.reduce((a, b) => a + b, 0);
    if (gathered.length !== total) {
      const message = `DistributedOptimizer (shard: '${this.mode}'): the allgather of the ${what} brought ${gathered.length} of ${total} values: ` +
        'a rank took no part (it joined: hora.join()). A sharded optimizer needs every rank in every step, ' +
        'since each rank alone holds its part of the optimizer state; at the end of a rank\'s data call joinEpoch(model, optimizer) ' +
        '(model.fit and fitDataset do), which serves the other ranks\' steps, not hora.join()';
      // Every rank that took part got the same short result, so each throws this; the joined rank learns it
      // when they leave (ERR_PEER_LOST in its join()).
      throw new HoraError('ERR_MISMATCH', message);
    }
    const out = sizes.map((size) => new Float32Array(size));
    let at = 0;
    for (let q = 0; q < n; q++) {
      sizes.forEach((size, i) => {
        const [b, e] = blockRange(size, n, q);
        out[i].set(gathered.subarray(at, at + e - b), b);
        at += e - b;
      });
    }
    return out;
  }

  /** The wrapped optimizer's slots (getWeights without 'iter'), each with the variable it belongs to. */
  private async slots(): Promise<{ iter: NamedTensor | null; slots: Array<{ s: Sharded; suffix: string; tensor: tf.Tensor }> }> {
    const named = await this.inner.getWeights();
    const iter = named.length > 0 && named[0].name === 'iter' ? named[0] : null;
    const slots = (iter ? named.slice(1) : named).map((w) => {
      const k = w.name.indexOf(this.marker);
      const s = k >= 0 ? this.vars.get(w.name.slice(0, k)) : undefined;
      if (!s) throw new HoraError('ERR_INTERNAL', `DistributedOptimizer: optimizer weight '${w.name}' belongs to no sharded variable`);
      return { s, suffix: w.name.slice(k + this.marker.length), tensor: w.tensor };
    });
    return { iter, slots };
  }

  /**
   * The full optimizer state, as the unsharded optimizer's getWeights() gives it: 'iter', then each slot
   * whole, in the variable's shape, named `<variable>/<slot>`. A collective (one allgather): every rank calls
   * it. The tensors are new ones, valid until the next call.
   */
  async getWeights(): Promise<NamedTensor[]> {
    for (const t of this.lastFull) t.dispose();
    this.lastFull = [];
    const { iter, slots } = await this.slots();
    const out: NamedTensor[] = iter ? [iter] : [];
    if (slots.length === 0) return out;
    this.world();
    const mine = new Float32Array(slots.reduce((sum, x) => sum + x.tensor.size, 0));
    let at = 0;
    for (const x of slots) {
      mine.set(x.tensor.dataSync() as Float32Array, at);
      at += x.tensor.size;
    }
    const gathered = await hora.allgather(mine, { name: 'tfjs zero optimizer state' });
    const values = this.assemble(gathered, slots.map((x) => x.s.variable.size), 'optimizer state');
    slots.forEach((x, i) => {
      const t = tf.tensor(values[i], x.s.variable.shape, 'float32');
      this.lastFull.push(t);
      out.push({ name: x.s.name + x.suffix, tensor: t });
    });
    return out;
  }

  /** Takes the full state (as getWeights gives it) and keeps this rank's blocks; no collective. */
  async setWeights(weightValues: NamedTensor[]): Promise<void> {
    const iter = weightValues.length > 0 && weightValues[0].name === 'iter' ? weightValues[0] : null;
    const given = iter ? weightValues.slice(1) : weightValues;
    const registered = tf.engine().registeredVariables;
    const blocks = given.map((w) => {
      // The longest variable name that the slot's name extends with '/<slot>'.
      let name = w.name;
      while (name.includes('/') && !(name in registered && this.ownName(name))) name = name.slice(0, name.lastIndexOf('/'));
      if (!(name in registered) || name === w.name) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer.setWeights: optimizer weight '${w.name}' names no variable ('<variable>/<slot>', as getWeights() gives)`);
      }
      const s = this.shardOf(name);
      if (w.tensor.size !== s.variable.size) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer.setWeights: optimizer weight '${w.name}' has ${w.tensor.size} values, variable '${name}' has ${s.variable.size}`);
      }
      return { name: s.shard.name + w.name.slice(name.length), tensor: tf.tidy(() => tf.slice(tf.reshape(w.tensor, [-1]), s.begin, s.end - s.begin)) };
    });
    await this.replaceSlots(iter ? iter.tensor : null, blocks);
  }

  private ownName(name: string): boolean {
    return !name.includes(this.marker);
  }

  /** Gives the wrapped optimizer these blocks (and the iteration count) and frees the variables it drops. */
  private async replaceSlots(iter: tf.Tensor | null, blocks: NamedTensor[]): Promise<void> {
    const old = await this.inner.getWeights();
    const count = iter ?? tf.scalar(this.inner.iterations ?? 0, 'int32');
    try {
      await this.inner.setWeights([{ name: 'iter', tensor: count }, ...blocks]);
    } finally {
      if (!iter) count.dispose();
      for (const b of blocks) b.tensor.dispose();
    }
    // setWeights made variables of its own from ours; the ones it held before are no longer used.
    for (const w of old) w.tensor.dispose();
  }

  /** The scalar variables the wrapped optimizer keeps outside getWeights() (Adam's beta powers...), by property. */
  private hidden(): Array<[string, tf.Variable]> {
    const inner = this.inner as unknown as Record<string, unknown>;
    return Object.keys(inner).sort().filter((k) => inner[k] instanceof tf.Variable).map((k) => [k, inner[k] as tf.Variable]);
  }

  /**
   * checkpoint.ts's CheckpointableOptimizer: the iteration count and hidden scalars (replicated), and every
   * slot as a sharded entry `zero/slot/<slot> <place> <suffix>`: its place in the wrapped optimizer's slots
   * (which are by place), the place of its variable in model.weights (names differ between processes: tfjs
   * numbers its layers), and the slot's suffix; globalLength is the variable's size, offset this rank's block.
   */
  async checkpointEntries({ model }: { model: CheckpointModelLike }): Promise<Record<string, CheckpointEntry>> {
    const out: Record<string, CheckpointEntry> = { 'zero/iterations': Float64Array.of(this.inner.iterations ?? 0) };
    for (const [prop, v] of this.hidden()) out[`zero/hidden/${prop}`] = Float32Array.from(v.dataSync() as Float32Array);
    const { iter, slots } = await this.slots();
    iter?.tensor.dispose();
    const places = new Map(model.weights.map((w, i) => [w.name, i]));
    slots.forEach((x, i) => {
      const place = places.get(x.s.name);
      if (place === undefined) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `hora/tfjs saveCheckpoint: the optimizer trains variable '${x.s.name}', which is not one of the model's weights`);
      }
      out[`zero/slot/${pad(i)} ${pad(place)} ${x.suffix}`] = { data: Float32Array.from(x.tensor.dataSync() as Float32Array), globalLength: x.s.variable.size, offset: x.s.begin };
    });
    return out;
  }

  /**
   * Takes a checkpoint's entries: this rank's part of each at the current world size (hora.checkpoint.load
   * cuts a sharded entry by reduceScatter's rule, this layout's), into the wrapped optimizer's slots.
   */
  async restoreCheckpoint(entries: Record<string, Tensor | LoadedShard>, { model }: { model: CheckpointModelLike }): Promise<void> {
    const iterations = entries['zero/iterations'];
    if (!(iterations instanceof Float64Array)) {
      throw new HoraError('ERR_MISMATCH', `hora/tfjs loadCheckpoint: the checkpoint's optimizer state was not saved by a sharded DistributedOptimizer ` +
        `(it has no 'zero/iterations'); load it into a DistributedOptimizer with shard: 'none' (this one has shard: '${this.mode}')`);
    }
    const blocks: NamedTensor[] = [];
    try {
      for (const key of Object.keys(entries).sort()) {
        if (!key.startsWith('zero/slot/')) continue;
        const [, place, suffix] = key.slice('zero/slot/'.length).split(' ');
        const e = entries[key] as LoadedShard;
        const w = model.weights[Number(place)];
        const s = w ? this.shardOf(w.name) : undefined;
        if (!s || s.variable.size !== e.globalLength || s.begin !== e.offset || s.end - s.begin !== e.data.length) {
          throw new HoraError('ERR_MISMATCH', `hora/tfjs loadCheckpoint: the checkpoint's optimizer slot '${suffix}' of weight ${Number(place)} has ${e.globalLength} values, ` +
            `but the model's weight ${Number(place)} ${s ? `('${s.name}') has ${s.variable.size}` : 'does not exist'}`);
        }
        blocks.push({ name: s.shard.name + suffix, tensor: tf.tensor1d(e.data as Float32Array, 'float32') });
      }
    } catch (e) {
      for (const b of blocks) b.tensor.dispose();
      throw e;
    }
    const iter = tf.scalar(iterations[0], 'int32');
    try {
      await this.replaceSlots(iter, blocks);
    } finally {
      iter.dispose();
    }
    (this.inner as unknown as { iterations_: number }).iterations_ = iterations[0];
    for (const [prop, v] of this.hidden()) {
      const saved = entries[`zero/hidden/${prop}`];
      if (!(saved instanceof Float32Array) || saved.length !== v.size) continue;
      const t = tf.tensor(saved, v.shape, 'float32');
      v.assign(t);
      t.dispose();
    }
  }

  dispose(): void {
    for (const t of this.lastFull) t.dispose();
    this.lastFull = [];
    for (const s of this.vars.values()) s.shard.dispose();
    this.vars.clear();
  }
}

function pad(i: number): string {
  return String(i).padStart(5, '0');
}
