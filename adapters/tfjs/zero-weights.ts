/**
 * ZeRO stage 3 for tfjs models: DistributedOptimizer's `shard: 'weights'` (docs/zero-weights.md).
 *
 * Each rank keeps 1/N of each weight of the model's sharded layers between steps: the weight flattened and
 * cut into N blocks as hora.reduceScatter cuts an array (the first count % N blocks one element longer),
 * block r on rank r, as a variable of its own under the weight's name. The layer's call() becomes a
 * tf.customGrad function of (input, the layer's shard variables):
 * - forward: allgathers the layer's weights, runs the layer's own call() with the full weights in place of
 *   its variables, and disposes the full weights; the tape keeps only the input (as a custom gradient's
 *   saved tensor), so no full weight lives past its layer;
 * - backward: allgathers the weights again, runs the layer's call() under tf.grads to get the gradients of
 *   the input and of the full weights (the forward is computed a second time: the price of not keeping the
 *   full weights or the layer's inner activations between the passes), and reduce-scatters each weight's
 *   gradient (averaged, or summed with op 'sum'), so that this rank gets the gradient of its own block only.
 * With overlap (the default), each layer's gather starts the allgather of the layer that ran after it in the
 * last pass of the same kind (one layer ahead; gatherFor), and the backward leaves its reduce-scatters in
 * flight with -0 stand-ins for tfjs to carry to applyGradients, which waits for them (deferReduceScatters,
 * withDeferred); the weights are those of overlap: false, bit for bit.
 * The model's trainable weights are then the shard variables: model.fit and minimize hand them to the
 * optimizer, whose inner tf.train optimizer updates them and keeps state (Adam's moments...) of their size.
 * The layer's original variables are disposed.
 *
 * The rest of tfjs and hora sees full weights: each sharded weight has a view (FullWeight) in the layer's
 * and the model's `weights`, whose read() allgathers the weight (a new tensor of the full shape) and whose
 * write() keeps this rank's block of the value written. model.getWeights(), setWeights(), save(),
 * loadWeights(), broadcastModel() and saveCheckpoint() go through `weights`, so they give and take full
 * weights, and every rank must call them (each read is an allgather).
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
import type { CheckpointEntry, LoadedShard, Tensor, Work } from '../../ts/index';
import { HoraError, blockRange, describeValue, flushCollectives } from '../../ts/internal';
import { compress, decompress } from './half';
import { checkShardable } from './zero';
import { checkModel, markWeightSharded } from './zero-layers';
import type { Layer, LayerVariable, Model } from './zero-layers';

export { isWeightSharded } from './zero-layers';

/** What stage 3 needs of the DistributedOptimizer that owns it (optimizer.ts; a type, to keep the import one way). */
export interface ShardingOwner {
  readonly optimizer: tf.Optimizer;
  readonly op: 'avg' | 'sum';
  readonly compression: 'none' | 'fp16' | 'bf16';
  readonly backwardPassesPerStep: number;
  /** Prefetch the next layer's allgather and defer the gradients' reduce-scatters to applyGradients. */
  readonly overlap: boolean;
  /** With overlap: the gradient bytes whose reduce-scatters may be in flight before the backward pass waits for the oldest. */
  readonly bucketMB: number;
  readonly stats: { steps: number; submitMs: number; waitMs: number; applyMs: number };
  /** The DistributedOptimizer's own minimize (a shadow pass runs through it, as fit's passes do). */
  minimize(f: () => tf.Scalar, returnCost?: boolean, varList?: tf.Variable[]): tf.Scalar | null;
}

/** This rank's block of one weight, as the trainable variable the layer lists and the optimizer updates. */
class ShardVariable {
  val: tf.Variable;
  shape: number[];
  readonly dtype = 'float32';
  private trainable_: boolean;

  constructor(readonly name: string, readonly originalName: string, values: Float32Array, trainable: boolean) {
    const t = tf.tensor1d(values, 'float32');
    this.val = tf.variable(t, trainable, name);
    t.dispose();
    this.shape = [values.length];
    this.trainable_ = trainable;
  }

  read(): tf.Variable {
    return this.val;
  }

  write(v: tf.Tensor): this {
    if (v.size !== this.val.size) throw new Error(`Shape mismatch: [${this.shape.join(', ')}] vs. [${v.shape.join(', ')}] (a shard of '${this.name}')`);
    tf.tidy(() => this.val.assign(tf.reshape(v, this.shape)));
    return this;
  }

  dispose(): void {
    if (!this.val.isDisposed) this.val.dispose();
  }

  /** A new block of `length` zeros under the same name (a recut: the caller writes its values next). */
  resize(length: number): void {
    if (length === this.val.size) return;
    this.dispose();
    const t = tf.zeros([length], 'float32');
    this.val = tf.variable(t, this.trainable_, this.name);
    t.dispose();
    this.shape = [length];
  }

  get trainable(): boolean {
    return this.trainable_;
  }

  set trainable(t: boolean) {
    this.trainable_ = t;
    this.val.trainable = t;
  }
}

/** One sharded weight: its full shape, this rank's block of it, and its full view. */
class ShardedWeight {
  readonly count: number;
  begin: number;
  end: number;
  readonly view: FullWeight;

  constructor(readonly layer: string, readonly shape: number[], readonly shard: ShardVariable, rank: number, size: number) {
    this.count = shape.reduce((a, b) => a * b, 1);
    [this.begin, this.end] = blockRange(this.count, size, rank);
    this.view = new FullWeight(this);
  }

  /** This rank's block for another world: the range, and a shard variable of its length (zeros until written). */
  cut(rank: number, size: number): void {
    [this.begin, this.end] = blockRange(this.count, size, rank);
    this.shard.resize(this.end - this.begin);
  }

  get name(): string {
    return this.shard.name;
  }
}

/**
 * A sharded weight as tfjs and hora see it in `weights`: full shape; read() allgathers it (a new tensor,
 * the caller's to dispose), write() keeps this rank's block of the value. Every rank must call them together.
 */
class FullWeight {
  constructor(private readonly w: ShardedWeight) {}

  get name(): string { return this.w.shard.name; }
  get originalName(): string { return this.w.shard.originalName; }
  get shape(): number[] { return this.w.shape.slice(); }
  get dtype(): string { return 'float32'; }
  get trainable(): boolean { return this.w.shard.trainable; }
  set trainable(t: boolean) { this.w.shard.trainable = t; }

  read(): tf.Tensor {
    return gather([this.w])[0];
  }

  write(value: tf.Tensor): this {
    const { w } = this;
    if (value.size !== w.count || value.shape.length !== w.shape.length || value.shape.some((d, i) => d !== w.shape[i])) {
      throw new Error(`Shape mismatch: ${JSON.stringify(w.shape)} vs. ${JSON.stringify(value.shape)} (sharded weight '${w.name}')`);
    }
    const values = value.dataSync() as Float32Array;
    const block = tf.tensor1d(values.subarray(w.begin, w.end), 'float32');
    w.shard.val.assign(block);
    block.dispose();
    return this;
  }

  dispose(): void {
    this.w.shard.dispose();
  }
}

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

/** Allgathers each weight (all submitted, then waited for) into a tensor of its full shape. */
function gather(weights: ShardedWeight[]): tf.Tensor[] {
  return finishGather(weights, startGather(weights));
}

/** Starts the allgather of each weight, in one batch. */
function startGather(weights: ShardedWeight[]): Array<Work<Float32Array>> {
  return weights.map((w) => hora.allgather(w.shard.val.dataSync() as Float32Array, { name: `zero3 ${w.name}` }));
}

/** Waits for the allgathers startGather started; each weight as a tensor of its full shape. */
function finishGather(weights: ShardedWeight[], works: Array<Work<Float32Array>>): tf.Tensor[] {
  return works.map((work, i) => {
    const full = work.wait();
    const w = weights[i];
    if (full.length !== w.count) {
      throw new HoraError('ERR_MISMATCH', `DistributedOptimizer (shard: 'weights'): the allgather of '${w.name}' gave ${full.length} values, ` +
        `the weight has ${w.count}: every rank must run the same model through the same steps`);
    }
    return tf.tensor(full, w.shape, 'float32');
  });
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

/** A sharded layer: what its forward and backward gather. */
type ShardedLayer = { readonly name: string; readonly weights: ShardedWeight[] };

/** The tensor data a variable holds now (tfjs gives a variable new data at each assign). */
const dataOf = (w: ShardedWeight): unknown => (w.shard.val as unknown as { dataId: unknown }).dataId;

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

/** Stage 3 of one DistributedOptimizer: its sharded weights, and its side of the step. */
export class WeightShards {
  readonly weights: ShardedWeight[] = [];
  private readonly byName = new Map<string, ShardedWeight>();
  /** Sum of the shard gradients of the passes since the last update (backwardPassesPerStep > 1). */
  private accumulated: Map<string, Float32Array> | null = null;
  private passes = 0;
  /** The most tensor bytes (tf.memory().numBytes) seen with a layer's full weights or gradients alive. */
  peakBytes = 0;
  /** Overlap: the pass the layers are running in now (null: none since the last update). */
  private phase: 'forward' | 'backward' | null = null;
  /** Overlap: the layer that ran last in this pass. */
  private previous: ShardedLayer | null = null;
  /** Overlap: the layer that ran after each one in its last pass of each kind (null: the pass ended there). */
  private readonly nextLayer = { forward: new Map<ShardedLayer, ShardedLayer | null>(), backward: new Map<ShardedLayer, ShardedLayer | null>() };
  /** Overlap: the one allgather started ahead of its layer, or null. */
  private prefetch: Prefetch | null = null;
  /** Overlap: the reduce-scatters of this backward pass's gradients, in the order they started. */
  private deferred: DeferredGradient[] = [];
  /** Overlap: bytes of full gradients whose reduce-scatter is in flight and not yet waited for. */
  private inFlightBytes = 0;
  readonly overlapStats: OverlapStats = { prefetched: 0, onDemand: 0, dropped: 0, deferred: 0, waitedEarly: 0, maxInFlightAtLayer: 0 };
  /** Uneven data: the agreement of the coming pass (its step round) has run; the pass has not yet applied. */
  private passAgreed = false;
  /** What this pass's gradients are multiplied by before the reduce-scatter (round()): 1 when every rank steps alike. */
  private gradientScale = 1;
  /** The weight of this pass in its step (the pass's samples over all ranks, or 1 with no counts); k > 1 sums them. */
  private passWeight = 1;
  private stepWeight = 0;
  private stepBase = 1;
  /** The highest rank that stepped in the latest round with a rank stepping, this epoch (joinEpoch's result); -1 for none. */
  private lastStepper = -1;
  /** The world the blocks are cut for. */
  private size: number;
  private rank: number;

  constructor(private readonly owner: ShardingOwner, private readonly model: Model) {
    checkShardable(owner.optimizer, 'weights');
    // As zero.ts's ShardedUpdate: saveCheckpoint and loadCheckpoint take the owner's state from here
    // (CheckpointableOptimizer), ElasticState also the cut of its blocks (elastic-shards.ts ShardedOptimizer).
    Object.assign(owner, {
      checkpointEntries: this.checkpointEntries.bind(this), restoreCheckpoint: this.restoreCheckpoint.bind(this),
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
    if (this.owner.overlap) return [dx, ...this.deferReduceScatters(mine, dws)];
    const works = dws.map((g, i) => this.reduceScatter(g.dataSync() as Float32Array, mine[i].name));
    const shards = works.map((wait) => tf.tensor1d(wait(), 'float32'));
    dws.forEach((g) => g.dispose());
    return [dx, ...shards];
  }

  /**
   * The full weights of `unit` for its forward or backward pass. Without overlap, an allgather waited for
   * here. With overlap, the allgather a previous layer started for this one if there is one (else one
   * started now), and before waiting for it, the allgather of the layer that ran next in the last pass
   * of this kind is started: at most one layer ahead. The order is learnt as the layers run; a layer that
   * is not the one prefetched gets its weights on demand (the prefetch is waited for and dropped) and the
   * order is learnt again. Every rank runs the same layers in the same order, so every rank starts the same
   * collectives in the same order.
   */
  private gatherFor(unit: ShardedLayer, phase: 'forward' | 'backward'): tf.Tensor[] {
    if (!this.owner.overlap) return gather(unit.weights);
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
      if (waiting > this.overlapStats.maxInFlightAtLayer) this.overlapStats.maxInFlightAtLayer = waiting;
    }
    let works: Array<Work<Float32Array>> | null = null;
    const ahead = this.prefetch;
    this.prefetch = null;
    if (ahead) {
      if (ahead.layer === unit && unit.weights.every((w, i) => dataOf(w) === ahead.data[i])) {
        works = ahead.works;
        this.overlapStats.prefetched += 1;
      } else {
        this.dropPrefetch(ahead);
      }
    }
    if (!works) {
      works = startGather(unit.weights);
      this.overlapStats.onDemand += 1;
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
    this.overlapStats.dropped += 1;
    for (const work of ahead.works) work.wait();
  }

  /**
   * With overlap: starts the reduce-scatter of each weight's gradient and returns stand-ins (-0 blocks)
   * for tfjs to carry to applyGradients, which waits for the blocks and puts them in their place. Before
   * starting, waits for the oldest reduce-scatters still in flight while the full gradients in flight would
   * pass bucketMB (always at least this layer's may go out, and the one before it is then waited for).
   */
  private deferReduceScatters(mine: ShardedWeight[], dws: tf.Tensor[]): tf.Tensor[] {
    const perValue = this.owner.compression === 'none' ? 4 : 2;
    const bytes = dws.reduce((n, g) => n + g.size * perValue, 0);
    const limit = this.owner.bucketMB * 1024 * 1024;
    for (const d of this.deferred) {
      if (this.inFlightBytes === 0 || this.inFlightBytes + bytes <= limit) break;
      if (d.result !== null) continue;
      d.result = d.wait();
      this.inFlightBytes -= d.bytes;
      this.overlapStats.waitedEarly += 1;
    }
    const started = dws.map((g, i) => {
      const wait = this.reduceScatter(g.dataSync() as Float32Array, mine[i].name);
      const standIn = tf.tensor1d(new Float32Array(mine[i].end - mine[i].begin).fill(-0), 'float32');
      this.deferred.push({ name: mine[i].name, standIn, wait, bytes: g.size * perValue, result: null });
      this.overlapStats.deferred += 1;
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
  private withDeferred(entries: Array<{ name: string; tensor: tf.Tensor }>, made: tf.Tensor[]): Array<{ name: string; tensor: tf.Tensor }> {
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

  /** Overlap: a pass ended at an update; a prefetch still out is dropped (the update changes the weights). */
  private endPass(): void {
    if (this.phase !== null && this.previous) this.nextLayer[this.phase].set(this.previous, null);
    this.phase = null;
    this.previous = null;
    const ahead = this.prefetch;
    this.prefetch = null;
    if (ahead) this.dropPrefetch(ahead);
  }

  /** Starts this rank's reduce-scatter of one weight's gradient; returns the wait for its block (float32). */
  private reduceScatter(data: Float32Array, name: string): () => Float32Array {
    const { op, compression } = this.owner;
    const scale = this.gradientScale;
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
      const taken = this.owner.overlap ? this.withDeferred(entries, received) : entries;
      if (this.owner.overlap) this.endPass();
      this.update(taken, t0);
    } finally {
      received.forEach((t) => t.dispose());
    }
  }

  /** applyGradients's update of the blocks with this pass's gradients (and the earlier passes', k > 1). */
  private update(entries: Array<{ name: string; tensor: tf.Tensor }>, t0: number): void {
    const k = this.owner.backwardPassesPerStep;
    // The pass ends here: the next one agrees anew (uneven data).
    const passWeight = this.passWeight;
    this.passAgreed = false;
    this.gradientScale = 1;
    this.passWeight = 1;
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
    this.stepWeight = 0;
    this.passAgreed = false;
    this.gradientScale = 1;
    this.passWeight = 1;
  }

  /**
   * The start of a pass of this rank's data (DistributedOptimizer.setSampleCount, or computeGradients where
   * no count came first): the pass's round, an allgather of [1, samples, 1 if counted] from every rank that
   * steps and [0, 0, 0] from every rank in joinEpoch, so that a rank whose data has ended serves the pass
   * (shadowPass). Blocks for the round. Once per pass: a second call before the pass applies changes nothing
   * when it gives the same count.
   */
  startPass(samples: number | null): void {
    if (hora.size() === 1) return;
    if (this.passAgreed) {
      if (samples === null || samples === this.passSamples) return;
      throw new HoraError('ERR_INVALID_ARGUMENT', `DistributedOptimizer.setSampleCount (shard: 'weights'): argument 'samples' was ${this.passSamples} ` +
        `for the coming pass, agreed with the other ranks already; received ${samples} before that pass ran`);
    }
    const round = hora.allgather(Float64Array.of(1, samples ?? 0, samples === null ? 0 : 1), { name: ROUND }).wait();
    this.passSamples = samples;
    this.agree(round, samples);
  }

  private passSamples: number | null = null;

  /**
   * A round's outcome, alike on every rank: how many ranks step; this rank's gradient scale for the pass
   * (op 'avg': with every stepping rank's count, n_r x N / sum(n), so the reduce-scatter's average over the
   * N ranks is the average over the pass's samples; without counts, N / (ranks stepping), an average over
   * the ranks that have data; 0 on a rank in joinEpoch); the pass's weight in its step.
   */
  private agree(round: Float64Array, samples: number | null): number {
    const size = round.length / 3;
    let stepping = 0, counted = 0, total = 0, last = -1;
    for (let r = 0; r < size; r++) {
      if (round[3 * r] !== 1) continue;
      stepping += 1;
      counted += round[3 * r + 2];
      total += round[3 * r + 1];
      last = r;
    }
    if (stepping === 0) return 0;
    this.lastStepper = last;
    if (counted !== 0 && counted !== stepping) {
      const none = Array.from({ length: size }, (_, r) => r).filter((r) => round[3 * r] === 1 && round[3 * r + 2] === 0);
      throw new HoraError('ERR_MISMATCH', `DistributedOptimizer (shard: 'weights'): rank${none.length > 1 ? 's' : ''} ${none.join(', ')} ` +
        'began a pass without a sample count where other ranks gave one (setSampleCount); every rank must give counts alike');
    }
    this.passAgreed = true;
    const mine = samples === null ? 0 : samples;
    const stepsHere = round[3 * hora.rank()] === 1;
    if (this.owner.op !== 'avg') this.gradientScale = 1;
    else if (counted === stepping) this.gradientScale = !stepsHere || total === 0 ? 0 : (mine * size === total ? 1 : mine * size / total);
    else this.gradientScale = !stepsHere ? 0 : (stepping === size ? 1 : size / stepping);
    this.passWeight = counted === stepping && this.owner.op === 'avg' ? total : 1;
    return stepping;
  }

  /** computeGradients: a pass that no setSampleCount began begins here, without a count. */
  beginPassIfNot(): void {
    if (!this.passAgreed) this.startPass(null);
  }

  /**
   * joinEpoch with sharded weights: this rank's data for the epoch has ended. Every step needs every rank's
   * blocks, and every block must be updated, so instead of hora.join() this rank takes the rounds of the
   * other ranks' passes with [0, 0, 0], and serves each with a shadow pass: the model's forward and backward
   * on zeros, with a loss times 0, so its collectives are those of the other ranks' pass and its gradient is
   * 0; the update of its blocks with the gradient the other ranks reduced. Ends on every rank at the round
   * where no rank steps. Resolves to the highest rank that stepped last (the one that took every step).
   */
  async joinEpoch(): Promise<number> {
    const size = hora.size();
    if (size === 1) return 0;
    if (this.passAgreed) {
      throw new HoraError('ERR_INVALID_ARGUMENT', "joinEpoch (shard: 'weights'): a pass was begun (setSampleCount) and has not run; " +
        'call joinEpoch after the last pass of the epoch');
    }
    for (;;) {
      const round = await hora.allgather(Float64Array.of(0, 0, 0), { name: ROUND });
      if (this.agree(round, null) === 0) break;
      this.shadowPass();
    }
    const last = this.lastStepper;
    this.lastStepper = -1;
    return last < 0 ? size - 1 : last;
  }

  /** One pass of the model on zeros, its loss times 0: the collectives of a pass, a gradient of 0, the update. */
  private shadowPass(): void {
    const model = this.model;
    const inputs = model.inputs;
    if (!Array.isArray(inputs) || inputs.length === 0 || typeof model.apply !== 'function') {
      throw new HoraError('ERR_INVALID_ARGUMENT', "joinEpoch (shard: 'weights'): the model has no inputs to run a pass on zeros with");
    }
    const xs = inputs.map((i) => tf.zeros(i.shape.map((d) => d ?? 1), (i.dtype ?? 'float32') as 'float32'));
    const vars = this.weights.filter((w) => w.shard.trainable).map((w) => w.shard.val);
    try {
      this.owner.minimize(() => {
        const out = (model.apply as NonNullable<Model['apply']>)(xs.length === 1 ? xs[0] : xs, { training: true }) as tf.Tensor | tf.Tensor[];
        const outs = Array.isArray(out) ? out : [out];
        return tf.addN(outs.map((o) => tf.sum(tf.mul(o, 0)))) as tf.Scalar;
      }, false, vars);
    } finally {
      xs.forEach((x) => x.dispose());
    }
  }

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

/** The name of a pass's round (WeightShards.startPass). */
const ROUND = 'zero3 step';

/** The prefix of stage 3's own optimizer entries in a checkpoint (after checkpoint.ts's 'optimizer/'). */
const ENTRY = 'zero3/';

/** The float32 variables an optimizer keeps outside getWeights() (Adam's accBeta1...), by property name (elastic.ts hiddenVariables). */
function scalarVariables(optimizer: tf.Optimizer): Array<[string, tf.Variable]> {
  const o = optimizer as unknown as Record<string, unknown>;
  return Object.keys(o).sort().filter((k) => o[k] instanceof tf.Variable && (o[k] as tf.Variable).dtype === 'float32').map((k) => [k, o[k] as tf.Variable]);
}
