/**
 * The overlap of ZeRO stage 3 (zero-weights.ts with overlap, the default; docs/zero-weights.md): each
 * layer's gather starts the allgather of the layer that ran after it in the last pass of the same kind (one
 * layer ahead; gather), and the backward leaves its reduce-scatters in flight with -0 stand-ins for tfjs
 * to carry to applyGradients, which waits for them (deferReduceScatters, withDeferred), keeping the full
 * gradients in flight within bucketMB. The weights are those of overlap: false, bit for bit.
 */
import { tf } from './framework';
import type { Work } from '../../ts/index';
import { flushCollectives } from '../../ts/internal';
import { dataOf, finishGather, startGather } from './zero-blocks';
import type { ShardedLayer, ShardedWeight, ShardingOwner } from './zero-blocks';

/** A layer's allgather started ahead of its use (overlap), and the data of the blocks it read. */
type Prefetch = { layer: ShardedLayer; works: Array<Work<Float32Array>>; data: unknown[] };

/**
 * A gradient block's reduce-scatter started in the backward pass (overlap): the stand-in the pass gave
 * tfjs (-0 everywhere, so that tfjs summing it with other contributions changes none of them), the wait,
 * and the full gradient's bytes in flight until it is waited for.
 */
type DeferredGradient = { name: string; standIn: tf.Tensor; wait: () => Float32Array; bytes: number; result: Float32Array | null };

/** What the overlap did (overlap: true); tests read it. */
export interface OverlapStats {
  /** Layer allgathers started before the layer's forward or backward began (a prefetch used). */
  prefetched: number;
  /** Layer allgathers started when the layer began (no prefetch: the first step, or the order changed). */
  onDemand: number;
  /** Prefetches not used (the layers ran in another order, or the weights changed meanwhile): waited for and dropped. */
  dropped: number;
  /** Gradient reduce-scatters waited for in applyGradients rather than in their layer's backward. */
  deferred: number;
  /** Of those, waited for in a later layer's backward to keep the gradient bytes in flight within bucketMB. */
  waitedEarly: number;
  /** The most reduce-scatters of earlier layers still not waited for when a layer's backward began. */
  maxInFlightAtLayer: number;
}

/** One DistributedOptimizer's overlap of its sharded layers' collectives with their forward and backward. */
export class LayerOverlap {
  /** The pass the layers are running in now (null: none since the last update). */
  private phase: 'forward' | 'backward' | null = null;
  /** The layer that ran last in this pass. */
  private previous: ShardedLayer | null = null;
  /** The layer that ran after each one in its last pass of each kind (null: the pass ended there). */
  private readonly nextLayer = { forward: new Map<ShardedLayer, ShardedLayer | null>(), backward: new Map<ShardedLayer, ShardedLayer | null>() };
  /** The one allgather started ahead of its layer, or null. */
  private prefetch: Prefetch | null = null;
  /** The reduce-scatters of this backward pass's gradients, in the order they started. */
  private deferred: DeferredGradient[] = [];
  /** Bytes of full gradients whose reduce-scatter is in flight and not yet waited for. */
  private inFlightBytes = 0;
  readonly stats: OverlapStats = { prefetched: 0, onDemand: 0, dropped: 0, deferred: 0, waitedEarly: 0, maxInFlightAtLayer: 0 };

  /** `reduceScatter`: starts the reduce-scatter of one weight's gradient and returns the wait for its block (WeightShards). */
  constructor(private readonly owner: ShardingOwner, private readonly reduceScatter: (data: Float32Array, name: string) => () => Float32Array) {}

  /**
   * The full weights of `unit` for its forward or backward pass: the allgather a previous layer started
   * for this one if there is one (else one started now), and before waiting for it, the allgather of the
   * layer that ran next in the last pass of this kind is started: at most one layer ahead. The order is
   * learnt as the layers run; a layer that is not the one prefetched gets its weights on demand (the
   * prefetch is waited for and dropped) and the order is learnt again. Every rank runs the same layers in
   * the same order, so every rank starts the same collectives in the same order.
   */
  gather(unit: ShardedLayer, phase: 'forward' | 'backward'): tf.Tensor[] {
    const order = this.nextLayer[phase];
    if (this.phase !== phase) {
      // A pass of the other kind ended: nothing ran after its last layer in it.
      if (this.phase !== null && this.previous) this.nextLayer[this.phase].set(this.previous, null);
      this.phase = phase;
      this.previous = null;
      if (phase === 'backward') this.dropDeferred();
    }
    if (this.previous && order.get(this.previous) !== unit) order.set(this.previous, unit);
    this.previous = unit;
    if (phase === 'backward') {
      const waiting = this.deferred.filter((d) => d.result === null).length;
      if (waiting > this.stats.maxInFlightAtLayer) this.stats.maxInFlightAtLayer = waiting;
    }
    let works: Array<Work<Float32Array>> | null = null;
    const ahead = this.prefetch;
    this.prefetch = null;
    if (ahead) {
      if (ahead.layer === unit && unit.weights.every((w, i) => dataOf(w) === ahead.data[i])) {
        works = ahead.works;
        this.stats.prefetched += 1;
      } else {
        this.dropPrefetch(ahead);
      }
    }
    if (!works) {
      works = startGather(unit.weights);
      this.stats.onDemand += 1;
    }
    const next = order.get(unit);
    if (next) {
      // A batch of its own (a layer that runs twice in a row gathers the same names again), handed to the engine now.
      flushCollectives();
      this.prefetch = { layer: next, works: startGather(next.weights), data: next.weights.map(dataOf) };
      flushCollectives();
    }
    return finishGather(unit.weights, works);
  }

  /** Waits for a prefetch that will not be used, and drops it. */
  private dropPrefetch(ahead: Prefetch): void {
    this.stats.dropped += 1;
    for (const work of ahead.works) work.wait();
  }

  /**
   * Starts the reduce-scatter of each weight's gradient and returns stand-ins (-0 blocks)
   * for tfjs to carry to applyGradients, which waits for the blocks and puts them in their place. Before
   * starting, waits for the oldest reduce-scatters still in flight while the full gradients in flight would
   * pass bucketMB (always at least this layer's may go out, and the one before it is then waited for).
   */
  deferReduceScatters(mine: ShardedWeight[], dws: tf.Tensor[]): tf.Tensor[] {
    const perValue = this.owner.compression === 'none' ? 4 : 2;
    const bytes = dws.reduce((n, g) => n + g.size * perValue, 0);
    const limit = this.owner.bucketMB * 1024 * 1024;
    for (const d of this.deferred) {
      if (this.inFlightBytes === 0 || this.inFlightBytes + bytes <= limit) break;
      if (d.result !== null) continue;
      d.result = d.wait();
      this.inFlightBytes -= d.bytes;
      this.stats.waitedEarly += 1;
    }
    const started = dws.map((g, i) => {
      const wait = this.reduceScatter(g.dataSync() as Float32Array, mine[i].name);
      const standIn = tf.tensor1d(new Float32Array(mine[i].end - mine[i].begin).fill(-0), 'float32');
      this.deferred.push({ name: mine[i].name, standIn, wait, bytes: g.size * perValue, result: null });
      this.stats.deferred += 1;
      return standIn;
    });
    this.inFlightBytes += bytes;
    flushCollectives();
    dws.forEach((g) => g.dispose());
    return started;
  }

  /** Waits for every deferred reduce-scatter still in flight; their blocks, by the gradient each stand-in went out as. */
  private takeDeferred(): DeferredGradient[] {
    const taken = this.deferred;
    this.deferred = [];
    this.inFlightBytes = 0;
    let failure: unknown = null;
    for (const d of taken) {
      if (d.result !== null) continue;
      try {
        d.result = d.wait();
      } catch (e) {
        failure ??= e;
      }
    }
    if (failure !== null) throw failure;
    return taken;
  }

  /** Forgets the reduce-scatters of a pass that was never applied (waited for, so none is left in flight). */
  private dropDeferred(): void {
    if (this.deferred.length > 0) this.takeDeferred();
  }

  /**
   * The gradients as applyGradients is given them, with each stand-in of a deferred reduce-scatter
   * replaced by its reduced block. A layer that ran more than once in the pass has several blocks, and
   * tfjs gave their stand-ins' sum: the blocks are summed in the order tfjs summed them (the order of
   * the backward), and added to what tfjs gave (-0 plus any other contribution). `made`: the tensors made.
   */
  withDeferred(entries: Array<{ name: string; tensor: tf.Tensor }>, made: tf.Tensor[]): Array<{ name: string; tensor: tf.Tensor }> {
    const taken = this.takeDeferred();
    if (taken.length === 0) return entries;
    const blocks = new Map<string, DeferredGradient[]>();
    for (const d of taken) {
      const list = blocks.get(d.name);
      if (list) list.push(d);
      else blocks.set(d.name, [d]);
    }
    return entries.map((e) => {
      const list = blocks.get(e.name);
      if (!list || !e.tensor) return e;
      let values: Float32Array;
      if (list.length === 1 && list[0].standIn === e.tensor) {
        values = list[0].result as Float32Array;
      } else {
        values = Float32Array.from(list[0].result as Float32Array);
        for (const d of list.slice(1)) {
          const r = d.result as Float32Array;
          for (let i = 0; i < values.length; i++) values[i] += r[i];
        }
        const given = e.tensor.dataSync() as Float32Array;
        for (let i = 0; i < values.length; i++) values[i] = given[i] + values[i];
      }
      const tensor = tf.tensor(values, e.tensor.shape, 'float32');
      made.push(tensor);
      return { name: e.name, tensor };
    });
  }

  /** A pass ended at an update; a prefetch still out is dropped (the update changes the weights). */
  endPass(): void {
    if (this.phase !== null && this.previous) this.nextLayer[this.phase].set(this.previous, null);
    this.phase = null;
    this.previous = null;
    const ahead = this.prefetch;
    this.prefetch = null;
    if (ahead) this.dropPrefetch(ahead);
  }

  /** Forgets the pass in progress and the layers' order (an elastic or checkpoint restore). */
  forget(): void {
    // Forgotten, not waited for: the world they went out in may be gone (an elastic restore).
    this.deferred = [];
    this.inFlightBytes = 0;
    this.prefetch = null;
    this.phase = null;
    this.previous = null;
    // The layers' order is learnt anew on every rank: a prefetch moves a layer's allgather ahead of the
    // reduce-scatter before it, so ranks that start prefetching at different steps (a worker that joins a
    // re-formed world knows no order) would submit their collectives in different orders.
    this.nextLayer.forward.clear();
    this.nextLayer.backward.clear();
  }
}
