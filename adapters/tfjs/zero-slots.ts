/**
 * The inner optimizer's state under ZeRO stage 3 (zero-weights.ts; docs/zero-weights.md, "Elastic
 * training"): its slots (Adam's moments...) are blocks, as the weights they belong to. getWeights and
 * setWeights give and take whole slots (allgathered); saveCheckpoint and ElasticState take this rank's
 * blocks as sharded entries (checkpointEntries) and give back the blocks of the current world
 * (restoreCheckpoint), with the weights' own blocks where ElasticState commits them.
 */
import { tf } from './framework';
import * as hora from '../../ts/index';
import type { CheckpointEntry, LoadedShard, Tensor } from '../../ts/index';
import { HoraError } from '../../ts/internal';
import type { ShardedWeight, ShardingOwner } from './zero-blocks';

/** The prefix of stage 3's own optimizer entries in a checkpoint (after checkpoint.ts's 'optimizer/'). */
const ENTRY = 'zero3/';

/** One DistributedOptimizer's inner optimizer state, its slots cut as the model's sharded weights (`weights`, in their order). */
export class OptimizerSlots {
  constructor(private readonly owner: ShardingOwner, private readonly weights: readonly ShardedWeight[]) {}

  /**
   * The sharded weight of the inner optimizer's slot j (counted after the iteration count): a tf.train
   * optimizer keeps its slots in runs of one per variable (Adam: every first moment, then every second), in
   * the order it was first given the variables: the model's sharded weights' order, the same in every process
   * (slot names are not: tfjs numbers layers per process). `size`: the slot's values, a block or the whole.
   */
  private slotWeight(j: number, size: number, whole: boolean): ShardedWeight | null {
    const w = this.weights.length > 0 ? this.weights[j % this.weights.length] : null;
    return w && size === (whole ? w.count : w.end - w.begin) ? w : null;
  }

  /** The inner optimizer's weights with every slot of a sharded weight allgathered to the weight's shape. */
  async getWeights(): Promise<Array<{ name: string; tensor: tf.Tensor }>> {
    const named = await this.owner.optimizer.getWeights();
    const first = named.length > 0 && named[0].name === 'iter' ? 1 : 0;
    const owners = named.map((n, i) => (i < first ? null : this.slotWeight(i - first, n.tensor.size, false)));
    const works = named.map((n, i) => (owners[i] ? hora.allgather(n.tensor.dataSync() as Float32Array, { name: `zero3 slot ${n.name}` }) : null));
    return named.map((n, i) => {
      const w = owners[i];
      const work = works[i];
      return w && work ? { name: n.name, tensor: tf.tensor(work.wait(), w.shape, 'float32') } : n;
    });
  }

  /** setWeights with whole slots (as getWeights gives them): each slot of a sharded weight keeps this rank's block. */
  async setWeights(weightValues: Array<{ name: string; tensor: tf.Tensor }>): Promise<void> {
    const made: tf.Tensor[] = [];
    const first = weightValues.length > 0 && weightValues[0].name === 'iter' ? 1 : 0;
    const mine = weightValues.map((n, i) => {
      const w = i < first ? null : this.slotWeight(i - first, n.tensor.size, true);
      if (!w) return n;
      const block = tf.tensor1d((n.tensor.dataSync() as Float32Array).slice(w.begin, w.end), 'float32');
      made.push(block);
      return { name: n.name, tensor: block };
    });
    try {
      await this.owner.optimizer.setWeights(mine);
    } finally {
      made.forEach((t) => t.dispose());
    }
  }

  /**
   * saveCheckpoint's entries for the optimizer (CheckpointableOptimizer, checkpoint.ts), under 'zero3/' (so
   * that an unsharded optimizer refuses them by name): the iteration count, each slot of a sharded weight as
   * a sharded entry (this rank's block, the weight's count, the block's offset), the inner optimizer's
   * scalar variables replicated. With `weights` (ElasticState's commit), also this rank's block of each
   * sharded weight, as `weight/<place in this.weights>`: no allgather, every rank keeps its own part.
   */
  async checkpointEntries(what: { weights?: boolean } = {}): Promise<Record<string, CheckpointEntry>> {
    const inner = this.owner.optimizer;
    const entries: Record<string, CheckpointEntry> = { [`${ENTRY}iterations`]: Float64Array.of(inner.iterations ?? 0) };
    if (what.weights) {
      this.weights.forEach((w, i) => {
        entries[`${ENTRY}weight/${String(i).padStart(5, '0')}`] = { data: Float32Array.from(w.shard.val.dataSync() as Float32Array), globalLength: w.count, offset: w.begin };
      });
    }
    const named = await inner.getWeights();
    named.forEach((n, i) => {
      if (i === 0 && n.name === 'iter') {
        n.tensor.dispose();
        return;
      }
      const w = this.slotWeight(i - 1, n.tensor.size, false);
      const data = Float32Array.from(n.tensor.dataSync() as Float32Array);
      entries[`${ENTRY}slot/${String(i).padStart(5, '0')} ${n.name}`] = w ? { data, globalLength: w.count, offset: w.begin } : data;
    });
    for (const [prop, v] of scalarVariables(inner)) entries[`${ENTRY}hidden/${prop}`] = Float32Array.from(v.dataSync() as Float32Array);
    return entries;
  }

  /**
   * loadCheckpoint's side (CheckpointableOptimizer): the entries checkpointEntries saved, this rank's blocks
   * at the current world size; or those of an unsharded optimizer (checkpoint.ts: 'iterations', 'slot/...'
   * replicated, 'hidden/...'), of which each rank keeps its blocks. Blocks of the weights (ElasticState's
   * 'weight/...', this world's) are written into the shard variables before this returns its promise.
   */
  async restoreCheckpoint(entries: Record<string, Tensor | LoadedShard>): Promise<void> {
    const inner = this.owner.optimizer;
    const prefix = `${ENTRY}iterations` in entries ? ENTRY : '';
    const iterations = Number((entries[`${prefix}iterations`] as Float64Array)[0]);
    const blocks = this.weightBlocks(entries);
    const given: Array<{ name: string; tensor: tf.Tensor }> = [];
    for (const [j, key] of Object.keys(entries).filter((k) => k.startsWith(`${prefix}slot/`)).sort().entries()) {
      const name = key.slice(key.indexOf(' ') + 1);
      const e = entries[key];
      const sharded = !ArrayBuffer.isView(e);
      let data = (sharded ? (e as LoadedShard).data : e) as Float32Array;
      const total = sharded ? (e as LoadedShard).globalLength : data.length;
      const w = this.slotWeight(j, total, true);
      if (!w) {
        throw new HoraError('ERR_MISMATCH', `hora/tfjs loadCheckpoint: optimizer slot ${j} ('${name}' there, ${total} values) does not fit ` +
          `the model's sharded weight ${j % Math.max(1, this.weights.length)}${this.weights.length > 0 ? ` ('${this.weights[j % this.weights.length].name}', ${this.weights[j % this.weights.length].count} values)` : ''}`);
      }
      if (!sharded) data = data.subarray(w.begin, w.end);
      else if ((e as LoadedShard).offset !== w.begin || data.length !== w.end - w.begin) {
        throw new HoraError('ERR_MISMATCH', `hora/tfjs loadCheckpoint: optimizer slot '${name}' came back as values ${(e as LoadedShard).offset} to ` +
          `${(e as LoadedShard).offset + data.length}; this rank's block of '${w.name}' is ${w.begin} to ${w.end}`);
      }
      given.push({ name, tensor: tf.tensor1d(data, 'float32') });
    }
    // Checked all before the first write; written before the first await (ElasticState.restore's weights are back on return).
    blocks.forEach(([w, data]) => {
      const t = tf.tensor1d(data, 'float32');
      w.shard.val.assign(t);
      t.dispose();
    });
    const iter = tf.scalar(iterations, 'int32');
    await inner.setWeights([{ name: 'iter', tensor: iter }, ...given]);
    iter.dispose();
    given.forEach((g) => g.tensor.dispose());
    (inner as unknown as { iterations_: number }).iterations_ = iterations;
    for (const [prop, v] of scalarVariables(inner)) {
      const e = entries[`${prefix}hidden/${prop}`];
      if (!e || !ArrayBuffer.isView(e)) continue;
      const t = tf.tensor(e as Float32Array, v.shape, 'float32');
      v.assign(t);
      t.dispose();
    }
  }

  /** The weights' blocks among the entries ('weight/<place>', this rank's at this world), each checked against its sharded weight. */
  private weightBlocks(entries: Record<string, Tensor | LoadedShard>): Array<[ShardedWeight, Float32Array]> {
    const out: Array<[ShardedWeight, Float32Array]> = [];
    for (const key of Object.keys(entries).filter((k) => k.startsWith(`${ENTRY}weight/`)).sort()) {
      const place = Number(key.slice(`${ENTRY}weight/`.length));
      const e = entries[key] as LoadedShard;
      const w = this.weights[place];
      if (!w || e.globalLength !== w.count || e.offset !== w.begin || e.data.length !== w.end - w.begin) {
        throw new HoraError('ERR_MISMATCH', `hora/tfjs ElasticState: the committed block of sharded weight ${place} is values ${e.offset} to ${e.offset + e.data.length} ` +
          `of ${e.globalLength}; ${w ? `this rank's block of '${w.name}' is ${w.begin} to ${w.end} of ${w.count}` : 'the model has no such sharded weight'}`);
      }
      out.push([w, e.data as Float32Array]);
    }
    return out;
  }
}

/** The float32 variables an optimizer keeps outside getWeights() (Adam's accBeta1...), by property name (elastic.ts hiddenVariables). */
function scalarVariables(optimizer: tf.Optimizer): Array<[string, tf.Variable]> {
  const o = optimizer as unknown as Record<string, unknown>;
  return Object.keys(o).sort().filter((k) => o[k] instanceof tf.Variable && (o[k] as tf.Variable).dtype === 'float32').map((k) => [k, o[k] as tf.Variable]);
}
