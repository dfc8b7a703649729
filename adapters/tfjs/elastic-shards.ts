/**
 * ElasticState's sharded side (elastic.ts): a sharded optimizer's committed blocks, what each rank tells the
 * others of them in sync, and the reshard that gives every rank its blocks for the re-formed world.
 *
 * A commit keeps this rank's blocks only, with the world (size, rank) they are cut for. In sync, every rank
 * sends its record (which commit, which cut; root adds the layout and the replicated entries) and the ranks
 * find a holder for each block of root's commit. When every block has one, the holders send each rank
 * the parts of their blocks that fall in its block for the current world (one alltoall; each rank receives
 * its new blocks only), in memory; when a block was held only by a lost rank, every rank reloads the last checkpoint on disk instead
 * (weights, optimizer, fields and commit count together; the commits since it are redone).
 */
import * as hora from '../../ts/index';
import type { CheckpointEntry, LoadedShard, Tensor } from '../../ts/index';
import { HoraError, blockRange } from '../../ts/internal';

const WHERE = 'hora/tfjs';

/** What the sharded side needs of a model: its weights' names, in order (ElasticState's model). */
export interface ShardedModel {
  weights: Array<{ name: string }>;
}

/**
 * What a sharded DistributedOptimizer gives ElasticState (zero.ts's ShardedUpdate and zero-weights.ts's
 * WeightShards put these on it): its state as checkpoint entries (this rank's blocks as sharded entries;
 * with `weights`, stage 3 adds its blocks of the weights), taking them back, the world its blocks are cut
 * for, and a new cut for the current world.
 */
export interface ShardedOptimizer {
  checkpointEntries(what: { model: ShardedModel; weights?: boolean }): Promise<Record<string, CheckpointEntry>>;
  restoreCheckpoint(entries: Record<string, Tensor | LoadedShard>, what: { model: ShardedModel }): Promise<void>;
  shardCut(): { size: number; rank: number };
  recut(): void;
}

/** A sharded optimizer's committed blocks (its checkpointEntries()) and the world they are cut for. */
export interface Blocks {
  entries: Record<string, CheckpointEntry>;
  size: number;
  rank: number;
}

/** What each rank tells the others in a sharded sync; root's also carries the layout and the replicated entries. */
export interface BlocksRecord {
  commit: number;
  size: number;
  rank: number;
  slots: number;
  layout: Array<[key: string, globalLength: number]> | null;
  replicated: Array<[key: string, type: 'Float64Array' | 'Float32Array', values: number[]]> | null;
}

/** How one re-forming of the world brought the sharded state over (ElasticState.reshards). */
export interface ReshardRecord {
  how: 'memory' | 'checkpoint';
  from: number;
  to: number;
  step?: number;
}

/** What reshard() reads and changes of the ElasticState that calls it. */
export interface ReshardContext {
  readonly model: ShardedModel;
  readonly reshards: ReshardRecord[];
  /** This rank's committed blocks. */
  blocks: Blocks | null;
  /** hora.elastic.State's reloadCheckpoint(): the last checkpoint's step, or null when none was written. */
  reloadCheckpoint(): Promise<number | null>;
}

/**
 * The in-memory reshard's one collective, an alltoall: one rank per old block (holders[q], of a world of
 * `from` ranks) sends each rank of this world the part of its block that falls in that rank's new block, for
 * every entry of the layout in order; so each rank receives just its new blocks (about 1/size of the state),
 * never the whole. `kept[i]`: this rank's new block of entry i, filled here.
 */
async function exchange(blocks: Blocks | null, layout: Array<[key: string, globalLength: number]>, holders: number[], from: number,
  rank: number, size: number, kept: Float32Array[]): Promise<void> {
  // The part of old block q of entry i that falls in rank d's new block, as [lo, hi) of the entry.
  const part = (i: number, q: number, d: number): [number, number] => {
    const g = layout[i][1];
    const [b, e] = blockRange(g, from, q);
    const [nb, ne] = blockRange(g, size, d);
    return [Math.max(b, nb), Math.max(Math.max(b, nb), Math.min(e, ne))];
  };
  const q = holders.indexOf(rank);
  const splits = new Array<number>(size).fill(0);
  const pieces: Float32Array[] = [];
  if (q !== -1) {
    const have = layout.map(([k]) => (blocks!.entries[k] as { data: Float32Array; offset: number }));
    for (let d = 0; d < size; d++) {
      layout.forEach((_, i) => {
        const [lo, hi] = part(i, q, d);
        if (hi > lo) pieces.push(have[i].data.subarray(lo - have[i].offset, hi - have[i].offset));
        splits[d] += hi - lo;
      });
    }
  }
  const send = new Float32Array(splits.reduce((a, b) => a + b, 0));
  let at = 0;
  for (const x of pieces) {
    send.set(x, at);
    at += x.length;
  }
  const { data } = await hora.alltoall(send, { splits, name: 'elastic.ElasticState.sync blocks' });
  at = 0;
  for (let p = 0; p < size; p++) {
    const old = holders.indexOf(p);
    if (old === -1) continue;
    layout.forEach(([, g], i) => {
      const [lo, hi] = part(i, old, rank);
      if (hi > lo) kept[i].set(data.subarray(at, at + hi - lo), lo - blockRange(g, size, rank)[0]);
      at += hi - lo;
    });
  }
}

export function isShard(e: CheckpointEntry | LoadedShard): e is { data: Tensor; globalLength: number; offset: number } {
  return typeof e === 'object' && e !== null && !ArrayBuffer.isView(e) && 'globalLength' in e;
}

/** Committed entries in the form restoreCheckpoint takes (hora.checkpoint.load's), as copies. */
export function asLoaded(entries: Record<string, CheckpointEntry>): Record<string, Tensor | LoadedShard> {
  const out: Record<string, Tensor | LoadedShard> = {};
  for (const [k, e] of Object.entries(entries)) {
    if (isShard(e)) out[k] = { data: (e.data as Float32Array).slice(), dtype: 'float32', globalLength: e.globalLength, offset: e.offset };
    else out[k] = (ArrayBuffer.isView(e) ? e : (e as { data: Tensor }).data).slice() as Tensor;
  }
  return out;
}

/** What this rank's committed blocks are: their commit, cut and number of slots; root adds the layout. */
export function recordOf(b: Blocks | null, commit: number): BlocksRecord {
  const entries = b ? Object.entries(b.entries) : [];
  const slots = entries.filter(([, e]) => isShard(e)) as Array<[string, { data: Tensor; globalLength: number }]>;
  return {
    commit, size: b?.size ?? -1, rank: b?.rank ?? -1, slots: slots.length,
    layout: slots.map(([k, e]) => [k, e.globalLength]),
    replicated: entries.filter(([, e]) => !isShard(e)).map(([k, e]) => [k, e instanceof Float64Array ? 'Float64Array' : 'Float32Array', Array.from(e as Float32Array)]),
  };
}

/**
 * The sharded optimizer's part of sync: root's commit is the one every rank goes on from. When every
 * block of it is still held by some rank (the same commit, cut for the same world), one rank per old
 * block sends each rank the part of it that falls in its block for the current world (exchange), in
 * memory. When a block was held only by a lost rank, every rank loads the last checkpoint on disk
 * instead (weights, optimizer, fields and commit count together; the commits since it are redone):
 * resolves true then.
 */
export async function reshard(state: ReshardContext, sharded: ShardedOptimizer, mine: BlocksRecord, root: number, rank: number, size: number): Promise<boolean> {
  const all = await hora.allgatherObject(rank === root ? mine : { ...mine, layout: null, replicated: null }, { name: 'elastic.ElasticState.sync shards' }) as BlocksRecord[];
  const r = all[root];
  const layout = r.layout ?? [];
  const holders = r.slots === 0 ? [] : Array.from({ length: r.size }, () => -1);
  all.forEach((x, p) => {
    if (r.slots > 0 && x.commit === r.commit && x.size === r.size && x.slots === r.slots && holders[x.rank] === -1) holders[x.rank] = p;
  });
  const lost = holders.flatMap((p, q) => (p === -1 ? [q] : []));
  if (lost.length > 0) {
    const step = await state.reloadCheckpoint();
    if (step === null) {
      throw new HoraError('ERR_MISMATCH', `${WHERE} ElasticState.sync: the optimizer state's block${lost.length > 1 ? 's' : ''} ${lost.join(', ')} of commit ${r.commit} ` +
        `(cut for ${r.size} ranks) ${lost.length > 1 ? 'were' : 'was'} held only by lost ranks, and no checkpoint was written yet to restore from ` +
        '(options.checkpoint.everySteps commits must pass before the first)', rank);
    }
    state.reshards.push({ how: 'checkpoint', from: r.size, to: size, step });
    return true;
  }
  if (r.size === size && holders.every((p, q) => p === q)) return false;
  const ranges = layout.map(([, g]) => blockRange(g, size, rank));
  const kept = ranges.map(([b, e]) => new Float32Array(e - b));
  if (r.slots > 0) await exchange(state.blocks, layout, holders, r.size, rank, size, kept);
  const entries: Record<string, CheckpointEntry> = {};
  for (const [k, type, values] of r.replicated ?? []) entries[k] = type === 'Float64Array' ? Float64Array.from(values) : Float32Array.from(values);
  layout.forEach(([k, g], i) => { entries[k] = { data: kept[i], globalLength: g, offset: ranges[i][0] }; });
  sharded.recut();
  state.blocks = { entries, ...sharded.shardCut() };
  await sharded.restoreCheckpoint(asLoaded(entries), { model: state.model });
  if (r.slots > 0) state.reshards.push({ how: 'memory', from: r.size, to: size });
  return false;
}
