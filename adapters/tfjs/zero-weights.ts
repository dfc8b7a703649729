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
import type { CheckpointEntry, LoadedShard, Tensor } from '../../ts/index';
import { HoraError, blockRange, describeValue } from '../../ts/internal';
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
  readonly stats: { steps: number; submitMs: number; waitMs: number; applyMs: number };
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
  const works = weights.map((w) => hora.allgather(w.shard.val.dataSync() as Float32Array, { name: `zero3 ${w.name}` }));
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

/** Stage 3 of one DistributedOptimizer: its sharded weights, and its side of the step. */
export class WeightShards {
  readonly weights: ShardedWeight[] = [];
  private readonly byName = new Map<string, ShardedWeight>();
  /** Sum of the shard gradients of the passes since the last update (backwardPassesPerStep > 1). */
  private accumulated: Map<string, Float32Array> | null = null;
  private passes = 0;
  /** The most tensor bytes (tf.memory().numBytes) seen with a layer's full weights or gradients alive. */
  peakBytes = 0;
  /** The world the blocks are cut for. */
  private size: number;
  private rank: number;

  constructor(private readonly owner: ShardingOwner, model: Model) {
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
    const pending: Pending = { kwargs: {} };
    const f = tf.customGrad(((...args: unknown[]) => {
      const save = args.pop() as (t: tf.Tensor[]) => void;
      const [x] = args as tf.Tensor[];
      const kwargs = pending.kwargs;
      save([x]);
      const full = gather(mine);
      this.notePeak();
      let y: tf.Tensor;
      try {
        y = withWeights(layer, props, full, () => call.call(layer, x, kwargs) as tf.Tensor);
      } finally {
        full.forEach((t) => t.dispose());
      }
      return { value: y, gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => this.backward(layer, props, call, mine, kwargs, dy, saved[0]) };
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
  private backward(layer: Layer, props: readonly string[], call: Layer['call'], mine: ShardedWeight[], kwargs: Record<string, unknown>,
    dy: tf.Tensor, x: tf.Tensor): tf.Tensor[] {
    const full = gather(mine);
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
    const works = dws.map((g, i) => this.reduceScatter(g.dataSync() as Float32Array, mine[i].name));
    const shards = works.map((wait) => tf.tensor1d(wait(), 'float32'));
    dws.forEach((g) => g.dispose());
    return [dx, ...shards];
  }

  /** Starts this rank's reduce-scatter of one weight's gradient; returns the wait for its block (float32). */
  private reduceScatter(data: Float32Array, name: string): () => Float32Array {
    const { op, compression } = this.owner;
    const t0 = performance.now();
    const timed = <T>(wait: () => T) => () => {
      const r = wait();
      this.owner.stats.waitMs += performance.now() - t0;
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
    const k = this.owner.backwardPassesPerStep;
    let given = entries;
    let made: tf.Tensor[] = [];
    if (k > 1) {
      const sums = this.accumulated ?? new Map<string, Float32Array>();
      this.accumulated = sums;
      for (const e of entries) {
        if (!e.tensor) continue;
        const values = e.tensor.dataSync() as Float32Array;
        const sum = sums.get(e.name);
        if (!sum) sums.set(e.name, Float32Array.from(values));
        else for (let i = 0; i < sum.length; i++) sum[i] += values[i];
      }
      if (++this.passes < k) {
        this.owner.stats.submitMs += performance.now() - t0;
        return;
      }
      this.accumulated = null;
      this.passes = 0;
      given = [...sums].map(([name, sum]) => {
        for (let i = 0; i < sum.length; i++) sum[i] /= k;
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

/** The prefix of stage 3's own optimizer entries in a checkpoint (after checkpoint.ts's 'optimizer/'). */
const ENTRY = 'zero3/';

/** The float32 variables an optimizer keeps outside getWeights() (Adam's accBeta1...), by property name (elastic.ts hiddenVariables). */
function scalarVariables(optimizer: tf.Optimizer): Array<[string, tf.Variable]> {
  const o = optimizer as unknown as Record<string, unknown>;
  return Object.keys(o).sort().filter((k) => o[k] instanceof tf.Variable && (o[k] as tf.Variable).dtype === 'float32').map((k) => [k, o[k] as tf.Variable]);
}
