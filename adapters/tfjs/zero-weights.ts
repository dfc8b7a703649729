/**
 * ZeRO stage 3 for tfjs models: DistributedOptimizer's `shard: 'weights'` (docs/zero-weights.md).
 *
 * Each rank keeps 1/N of each weight of the model's sharded layers between steps: the weight flattened and
 * cut into N blocks as hora.reduceScatter cuts an array (the first count % N blocks one element longer),
 * block r on rank r, as a variable of its own under the weight's name (zero-blocks.ts). The layer's call()
 * becomes a tf.customGrad function of (input, the layer's shard variables):
 * - forward: allgathers the layer's weights, runs the layer's own call() with the full weights in place of
 *   its variables, and disposes the full weights; the tape keeps only the input (as a custom gradient's
 *   saved tensor), so no full weight lives past its layer;
 * - backward: allgathers the weights again, runs the layer's call() under tf.grads to get the gradients of
 *   the input and of the full weights (the forward is computed a second time: the price of not keeping the
 *   full weights or the layer's inner activations between the passes), and reduce-scatters each weight's
 *   gradient (averaged, or summed with op 'sum'), so that this rank gets the gradient of its own block only.
 * With overlap (the default), each layer's gather starts the allgather of the layer that ran after it in the
 * last pass of the same kind (one layer ahead), and the backward leaves its reduce-scatters in flight with
 * -0 stand-ins for tfjs to carry to applyGradients, which waits for them (zero-overlap.ts); the weights are
 * those of overlap: false, bit for bit. On uneven data each pass begins with a round with the other ranks,
 * and a rank whose data has ended serves their passes with shadow passes (zero-rounds.ts).
 * The model's trainable weights are then the shard variables: model.fit and minimize hand them to the
 * optimizer, whose inner tf.train optimizer updates them and keeps state (Adam's moments...) of their size.
 * The layer's original variables are disposed.
 *
 * The rest of tfjs and hora sees full weights: each sharded weight has a view (FullWeight) in the layer's
 * and the model's `weights`, whose read() allgathers the weight (a new tensor of the full shape) and whose
 * write() keeps this rank's block of the value written. model.getWeights(), setWeights(), save(),
 * loadWeights(), broadcastModel() and saveCheckpoint() go through `weights`, so they give and take full
 * weights, and every rank must call them (each read is an allgather). The inner optimizer's slots are cut as
 * the weights; its getWeights() and checkpoints go through zero-slots.ts.
 *
 * Which layers: those whose call() reads each weight through one property's read() (layer.kernel.read()):
 * Dense and the convolutions that share Conv's call (Conv1D, Conv2D, Conv3D). A layer with trainable weights
 * of another kind is refused by name: a recurrent layer reads its cell's weights once per time step (one
 * allgather per step, in a loop tfjs runs), batch normalization updates its moving statistics inside call(),
 * and a nested model has layers of its own. A regularizer or a constraint on a sharded weight needs the full
 * weight outside call(): refused too.
 */
import { tf } from './framework';
import * as hora from '../../ts/index';
import { HoraError, blockRange, describeValue } from '../../ts/internal';
import { compress, decompress } from './half';
import { checkShardable } from './zero';
import { FullWeight, ShardVariable, ShardedWeight, gather } from './zero-blocks';
import type { ShardedLayer, ShardingOwner } from './zero-blocks';
import { checkModel, markWeightSharded } from './zero-layers';
import type { Layer, LayerVariable, Model } from './zero-layers';
import { LayerOverlap } from './zero-overlap';
import type { OverlapStats } from './zero-overlap';
import { PassRounds } from './zero-rounds';
import { OptimizerSlots } from './zero-slots';

export { isWeightSharded } from './zero-layers';
export type { ShardingOwner } from './zero-blocks';

/** model.setWeights through the model's `weights` (views for the sharded ones), checked as tfjs checks it. */
function setWeights(model: Model, values: tf.Tensor[]): void {
  const weights = (model as unknown as { weights: LayerVariable[] }).weights;
  if (!Array.isArray(values) || values.length !== weights.length) {
    throw new Error(`setWeights: the model has ${weights.length} weights; received ${Array.isArray(values) ? values.length : describeValue(values)}`);
  }
  weights.forEach((w, i) => {
    const v = values[i];
    if (!(v instanceof tf.Tensor) || v.shape.length !== w.shape.length || v.shape.some((d, k) => d !== w.shape[k])) {
      throw new Error(`setWeights: weight ${i} ('${w.name}') has shape [${w.shape.join(', ')}]; received ${v instanceof tf.Tensor ? `[${v.shape.join(', ')}]` : describeValue(v)}`);
    }
  });
  tf.tidy(() => weights.forEach((w, i) => { w.write(values[i]); }));
}

/** Runs `f` with the layer's weight properties reading the given tensors, then puts its variables back. */
function withWeights<T>(layer: Layer, props: readonly string[], values: tf.Tensor[], f: () => T): T {
  const saved = props.map((p) => layer[p]);
  props.forEach((p, i) => { layer[p] = { read: () => values[i] }; });
  try {
    return f();
  } finally {
    props.forEach((p, i) => { layer[p] = saved[i]; });
  }
}

/** What a layer's call() hands to the custom-gradient function besides tensors. */
type Pending = { kwargs: Record<string, unknown> };

/** Stage 3 of one DistributedOptimizer: its sharded weights, and its side of the step. */
export class WeightShards {
  readonly weights: ShardedWeight[] = [];
  private readonly byName = new Map<string, ShardedWeight>();
  /** Sum of the shard gradients of the passes since the last update (backwardPassesPerStep > 1). */
  private accumulated: Map<string, Float32Array> | null = null;
  private passes = 0;
  /** The most tensor bytes (tf.memory().numBytes) seen with a layer's full weights or gradients alive. */
  peakBytes = 0;
  /** With overlap: the prefetch of the next layer's allgather and the reduce-scatters deferred to applyGradients. */
  private readonly overlap: LayerOverlap;
  /** Uneven data: the round of each pass with the other ranks, and joinEpoch's shadow passes. */
  private readonly rounds: PassRounds;
  /** The inner optimizer's slots, cut as the weights: getWeights, setWeights, checkpoints. */
  private readonly slots: OptimizerSlots;
  /** The step's passes' weights so far (k > 1), relative to its first pass's (stepBase). */
  private stepWeight = 0;
  private stepBase = 1;
  /** The world the blocks are cut for. */
  private size: number;
  private rank: number;

  constructor(private readonly owner: ShardingOwner, model: Model) {
    checkShardable(owner.optimizer, 'weights');
    this.overlap = new LayerOverlap(owner, (data, name) => this.reduceScatter(data, name));
    this.rounds = new PassRounds(owner, model, () => this.weights.filter((w) => w.shard.trainable).map((w) => w.shard.val));
    this.slots = new OptimizerSlots(owner, this.weights);
    // As zero.ts's ShardedUpdate: saveCheckpoint and loadCheckpoint take the owner's state from here
    // (CheckpointableOptimizer), ElasticState also the cut of its blocks (elastic-shards.ts ShardedOptimizer).
    Object.assign(owner, {
      checkpointEntries: this.slots.checkpointEntries.bind(this.slots), restoreCheckpoint: this.slots.restoreCheckpoint.bind(this.slots),
      shardCut: this.shardCut.bind(this), recut: this.recut.bind(this),
    });
    const layers = checkModel(model);
    const rank = hora.rank(), size = hora.size();
    this.rank = rank;
    this.size = size;
    for (const [layer, props] of layers) this.shardLayer(layer, props, rank, size);
    markWeightSharded(model);
    const views = new Map<unknown, FullWeight>(this.weights.map((w) => [w.shard, w.view]));
    const sub = (w: LayerVariable) => views.get(w) ?? w;
    // Full views in `weights`, in the places tfjs gives them (the trainable ones first, layer by layer).
    Object.defineProperty(model, 'weights', {
      configurable: true,
      get: () => [...model.trainableWeights.map(sub), ...model.nonTrainableWeights.map(sub)],
    });
    // A tf.Sequential's setWeights goes to the model it wraps (model.model, which compile() makes anew):
    // the model's own writes through `weights`.
    Object.defineProperty(model, 'setWeights', { configurable: true, writable: true, value: (values: tf.Tensor[]) => setWeights(model, values) });
    for (const [layer] of layers) {
      Object.defineProperty(layer, 'weights', {
        configurable: true,
        get: () => [...layer.trainableWeights.map(sub), ...layer.nonTrainableWeights.map(sub)],
      });
    }
    // A model compiled before: model.fit trains the list compile collected.
    if (Array.isArray(model.collectedTrainableWeights)) model.collectedTrainableWeights = model.trainableWeights;
    if (model.model && Array.isArray(model.model.collectedTrainableWeights)) model.model.collectedTrainableWeights = model.model.trainableWeights;
  }

  private shardLayer(layer: Layer, props: readonly string[], rank: number, size: number): void {
    const mine: ShardedWeight[] = [];
    for (const p of props) {
      const lv = layer[p] as LayerVariable;
      const full = lv.read();
      const values = full.dataSync() as Float32Array;
      const [begin, end] = blockRange(values.length, size, rank);
      const block = values.slice(begin, end);
      const { name, originalName, trainable } = lv;
      const shape = full.shape.slice();
      lv.dispose(); // frees the full weight, and its name for the shard
      const shard = new ShardVariable(name, originalName, block, trainable);
      layer._trainableWeights = layer._trainableWeights.map((w) => (w === lv ? shard as unknown as LayerVariable : w));
      const w = new ShardedWeight(layer.name, shape, shard, rank, size);
      mine.push(w);
      this.weights.push(w);
      this.byName.set(name, w);
    }
    const call = layer.call;
    const unit: ShardedLayer = { name: layer.name, weights: mine };
    const pending: Pending = { kwargs: {} };
    const f = tf.customGrad(((...args: unknown[]) => {
      const save = args.pop() as (t: tf.Tensor[]) => void;
      const [x] = args as tf.Tensor[];
      const kwargs = pending.kwargs;
      save([x]);
      const full = this.gatherFor(unit, 'forward');
      this.notePeak();
      let y: tf.Tensor;
      try {
        y = withWeights(layer, props, full, () => call.call(layer, x, kwargs) as tf.Tensor);
      } finally {
        full.forEach((t) => t.dispose());
      }
      return { value: y, gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => this.backward(layer, props, call, unit, kwargs, dy, saved[0]) };
    }) as never) as (...t: tf.Tensor[]) => tf.Tensor;
    layer.call = (inputs, kwargs) => {
      const xs = Array.isArray(inputs) ? inputs : [inputs];
      if (xs.length !== 1) throw new Error(`DistributedOptimizer (shard: 'weights'): layer '${layer.name}' got ${xs.length} inputs; a sharded layer takes one`);
      pending.kwargs = kwargs ?? {};
      return f(xs[0], ...mine.map((w) => w.shard.val));
    };
  }

  /**
   * A sharded layer's backward: gathers its weights again, computes the gradients of the input and of
   * the full weights with tfjs's own gradients of the layer's call(), and keeps this rank's block of each
   * weight's gradient, reduced over the ranks.
   */
  private backward(layer: Layer, props: readonly string[], call: Layer['call'], unit: ShardedLayer, kwargs: Record<string, unknown>,
    dy: tf.Tensor, x: tf.Tensor): tf.Tensor[] {
    const mine = unit.weights;
    const full = this.gatherFor(unit, 'backward');
    // tf.grads inside a gradient function: the outer pass's tape is in the engine's state, and the inner
    // call ends with that state's tape set to null; the outer pass disposes its saved tensors through it.
    const state = (tf.engine() as unknown as { state: { activeTape: unknown } }).state;
    const tape = state.activeTape;
    let grads: tf.Tensor[];
    try {
      grads = tf.grads((xx: tf.Tensor, ...ws: tf.Tensor[]) => withWeights(layer, props, ws, () => call.call(layer, xx, kwargs) as tf.Tensor))([x, ...full], dy);
      this.notePeak();
    } finally {
      state.activeTape = tape;
      full.forEach((t) => t.dispose());
    }
    const [dx, ...dws] = grads;
    if (this.owner.overlap) return [dx, ...this.overlap.deferReduceScatters(mine, dws)];
    const works = dws.map((g, i) => this.reduceScatter(g.dataSync() as Float32Array, mine[i].name));
    const shards = works.map((wait) => tf.tensor1d(wait(), 'float32'));
    dws.forEach((g) => g.dispose());
    return [dx, ...shards];
  }

  /**
   * The full weights of `unit` for its forward or backward pass: without overlap, an allgather waited for
   * here; with overlap, the allgather the layer before started for this one (LayerOverlap.gather).
   */
  private gatherFor(unit: ShardedLayer, phase: 'forward' | 'backward'): tf.Tensor[] {
    return this.owner.overlap ? this.overlap.gather(unit, phase) : gather(unit.weights);
  }

  /** What the overlap did (overlap: true); tests read it. */
  get overlapStats(): OverlapStats {
    return this.overlap.stats;
  }

  /** Starts this rank's reduce-scatter of one weight's gradient; returns the wait for its block (float32). */
  private reduceScatter(data: Float32Array, name: string): () => Float32Array {
    const { op, compression } = this.owner;
    const scale = this.rounds.gradientScale;
    if (scale !== 1) data = data.map((v) => (scale === 0 ? 0 : v * scale)); // a copy: data may be the tensor's own
    const t0 = performance.now();
    const timed = <T>(wait: () => T) => () => {
      const t1 = performance.now();
      const r = wait();
      // From the start (the wait comes at once) or, deferred (overlap), from the wait's start.
      this.owner.stats.waitMs += performance.now() - (this.owner.overlap ? t1 : t0);
      return r;
    };
    if (compression === 'none') {
      const work = hora.reduceScatter(data, { op, name: `zero3 grad ${name}` });
      return timed(() => work.wait());
    }
    const { bits, dtype } = compress(data, compression);
    const work = hora.reduceScatter(bits, { op, name: `zero3 grad ${name}`, dtype });
    return timed(() => decompress(work.wait(), dtype));
  }

  private notePeak(): void {
    const bytes = tf.memory().numBytes;
    if (bytes > this.peakBytes) this.peakBytes = bytes;
  }

  /**
   * DistributedOptimizer.applyGradients with sharded weights: the gradients are this rank's blocks,
   * already reduced over the ranks in the backward pass; with backwardPassesPerStep = k they are summed
   * over k passes and divided by k before the update. Refuses, before any update, a gradient of a variable
   * that is not a sharded weight (it was never reduced over the ranks).
   */
  applyGradients(variableGradients: tf.NamedTensorMap | Array<{ name: string; tensor: tf.Tensor }>): void {
    const t0 = performance.now();
    const entries = Array.isArray(variableGradients)
      ? variableGradients.map((g) => ({ name: g.name, tensor: g.tensor }))
      : Object.keys(variableGradients).map((name) => ({ name, tensor: variableGradients[name] }));
    for (const e of entries) {
      if (!this.byName.has(e.name)) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer (shard: 'weights'): got a gradient for '${e.name}', which is not a sharded weight ` +
          "of the model; with shard: 'weights' the optimizer trains the model's sharded weights only (their gradients are reduced in the backward pass)");
      }
    }
    // Overlap: the reduce-scatters this pass started are waited for here, the prefetch still out dropped.
    const received: tf.Tensor[] = [];
    try {
      const taken = this.owner.overlap ? this.overlap.withDeferred(entries, received) : entries;
      if (this.owner.overlap) this.overlap.endPass();
      this.update(taken, t0);
    } finally {
      received.forEach((t) => t.dispose());
    }
  }

  /** applyGradients's update of the blocks with this pass's gradients (and the earlier passes', k > 1). */
  private update(entries: Array<{ name: string; tensor: tf.Tensor }>, t0: number): void {
    const k = this.owner.backwardPassesPerStep;
    // The pass ends here: the next one agrees anew (uneven data).
    const passWeight = this.rounds.endPass();
    let given = entries;
    let made: tf.Tensor[] = [];
    if (k > 1) {
      const sums = this.accumulated ?? new Map<string, Float32Array>();
      this.accumulated = sums;
      // Relative to the step's first pass, so passes of equal samples weigh 1 each, as passes without counts.
      if (this.passes === 0) this.stepBase = passWeight > 0 ? passWeight : 1;
      const weight = passWeight / this.stepBase;
      this.stepWeight += weight;
      for (const e of entries) {
        if (!e.tensor) continue;
        const values = e.tensor.dataSync() as Float32Array;
        const sum = sums.get(e.name);
        if (!sum) sums.set(e.name, weight === 1 ? Float32Array.from(values) : values.map((v) => v * weight));
        else if (weight === 1) for (let i = 0; i < sum.length; i++) sum[i] += values[i];
        else for (let i = 0; i < sum.length; i++) sum[i] += weight * values[i];
      }
      if (++this.passes < k) {
        this.owner.stats.submitMs += performance.now() - t0;
        return;
      }
      // k passes of weight 1 (no counts) divide by k; passes weighted by their samples, by the step's samples.
      const divisor = this.stepWeight;
      this.accumulated = null;
      this.passes = 0;
      this.stepWeight = 0;
      given = [...sums].map(([name, sum]) => {
        if (divisor === 0) sum.fill(0);
        else for (let i = 0; i < sum.length; i++) sum[i] /= divisor;
        const tensor = tf.tensor1d(sum, 'float32');
        made.push(tensor);
        return { name, tensor };
      });
    }
    const t1 = performance.now();
    try {
      const map: tf.NamedTensorMap = {};
      for (const e of given) if (e.tensor) map[e.name] = e.tensor;
      this.owner.optimizer.applyGradients(map);
    } finally {
      made.forEach((t) => t.dispose());
      made = [];
    }
    this.owner.stats.steps += 1;
    this.owner.stats.submitMs += t1 - t0;
    this.owner.stats.applyMs += performance.now() - t1;
  }

  /** The world the blocks are cut for (ElasticState records it with a commit). */
  shardCut(): { size: number; rank: number } {
    return { size: this.size, rank: this.rank };
  }

  /**
   * Cuts the blocks anew for the current world (ElasticState, after the world re-formed): each sharded
   * weight gets this rank's new range and a shard variable of its length, zeros until restoreCheckpoint()
   * writes the weights' and the optimizer's blocks cut for this world, which the caller does next.
   */
  recut(): void {
    this.size = hora.size();
    this.rank = hora.rank();
    for (const w of this.weights) w.cut(this.rank, this.size);
    this.discardPartialStep();
  }

  /** Forgets the passes of a step not yet applied (an elastic or checkpoint restore). */
  discardPartialStep(): void {
    this.accumulated = null;
    this.passes = 0;
    this.overlap.forget();
    this.stepWeight = 0;
    this.rounds.endPass();
  }


  /** DistributedOptimizer.setSampleCount: the pass's round with the other ranks (PassRounds.startPass). */
  startPass(samples: number | null): void {
    this.rounds.startPass(samples);
  }

  /** computeGradients: a pass that no setSampleCount began begins here, without a count. */
  beginPassIfNot(): void {
    this.rounds.beginPassIfNot();
  }

  /** joinEpoch: this rank's data has ended; serves the other ranks' passes (PassRounds.joinEpoch). */
  joinEpoch(): Promise<number> {
    return this.rounds.joinEpoch();
  }

  /** The inner optimizer's weights with every slot of a sharded weight allgathered to the weight's shape. */
  getWeights(): Promise<Array<{ name: string; tensor: tf.Tensor }>> {
    return this.slots.getWeights();
  }

  /** setWeights with whole slots (as getWeights gives them): each slot of a sharded weight keeps this rank's block. */
  setWeights(weightValues: Array<{ name: string; tensor: tf.Tensor }>): Promise<void> {
    return this.slots.setWeights(weightValues);
  }
}
