/**
 * Elastic training with tfjs: ElasticState keeps a model and its optimizer in a hora.elastic.State, and
 * ElasticCallback commits it from model.fit and lets a fit resume at the committed epoch and batch.
 *
 * What a commit holds. The model's weights (trainable or not), the optimizer's slots (its getWeights():
 * Adam's moments, momentum's accumulations...), its iteration count, and the scalar variables some
 * optimizers keep outside getWeights() (Adam's running beta powers: its setWeights() recomputes them with
 * pow(), which can differ in the last bit from the running product, so a restore through setWeights alone
 * would not continue bit-identically). Each tensor is copied into a typed array kept from one commit to
 * the next, so a commit costs one memory copy per tensor and no allocation while the shapes stay the same.
 * restore() writes the copies back into the same variables; sync(root) broadcasts root's tensors, and
 * gives the optimizer of a rank that has not stepped yet (no slots) the slots of root's.
 *
 * A sharded optimizer (DistributedOptimizer shard 'optimizer' or 'gradients', zero.ts) is committed as this
 * rank's blocks only, with the world they are cut for; sync does not broadcast them but reshards them
 * (elastic-shards.ts): in memory when every block of root's commit is still held, else from the last checkpoint on
 * disk, which the checkpoint option (required then) writes with the model, the optimizer and the fields.
 * With shard 'weights' (zero-weights.ts) the weights are sharded too: a commit keeps this rank's blocks of
 * them beside the optimizer's (no full weight is read), and they are resharded or reloaded with them.
 */
import type { Logs } from '@tensorflow/tfjs-layers';
import { tf, tfl } from './framework';
import * as hora from '../../ts/index';
import type { CheckpointEntry, LoadedShard } from '../../ts/index';
import {
  HoraError, describeValue, checkOptionKeys, knownOptions, current, broadcastHeader, differsFromRoot, keepCopy, ranksThatDiffer,
} from '../../ts/internal';
import { distributedLayers, hiddenVariables, setIterations, slotsOf } from './optimizer-state';
import { isWeightSharded } from './zero-weights';
import { asLoaded, isShard, recordOf, reshard } from './elastic-shards';
import type { Blocks, BlocksRecord, ReshardContext, ReshardRecord, ShardedOptimizer } from './elastic-shards';

const WHERE = 'hora/tfjs';

/** What ElasticState needs of a model: tf.LayersModel's `weights` (LayerVariables) and, if no optimizer is given, its optimizer. */
export interface ElasticModel {
  weights: Array<{ name: string; shape: number[]; dtype: string; read(): tf.Tensor; write(value: tf.Tensor): unknown }>;
  optimizer?: tf.Optimizer;
}

type Buffer32 = Float32Array | Int32Array;

/** One tensor's committed copy. */
interface Saved {
  name: string;
  shape: number[];
  dtype: 'float32' | 'int32';
  data: Buffer32;
}

/** What root sends before the tensors' bytes in sync(). */
interface TensorHeader {
  iterations: number;
  model: Array<[name: string, shape: number[], dtype: string]>;
  slots: Array<[name: string, shape: number[], dtype: string]>;
  hidden: Array<[name: string, shape: number[], dtype: string]>;
}

/** Entries of an ElasticState's checkpoint (beside hora.elastic.State's own 'state' and 'field/...'). */
const DISK = 'tfjs/';

/** Names ElasticState takes for itself; a user field may not use them. */
const OWN = new Set(['model', 'optimizer', 'fit', 'reshards']);

function invalid(fn: string, argument: string, expected: string, received: unknown): HoraError {
  return new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ${fn}: argument '${argument}' must be ${expected}; received ${describeValue(received)}`);
}

function dtypeOf(t: tf.Tensor, what: string): 'float32' | 'int32' {
  if (t.dtype === 'float32' || t.dtype === 'int32') return t.dtype;
  throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ElasticState: ${what} has dtype ${t.dtype}; only float32 and int32 tensors can be kept`);
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** Copies t's values into `into` when it fits (no allocation), else into a new array. */
function copyInto(t: tf.Tensor, name: string, into: Saved | undefined, what: string): Saved {
  const dtype = dtypeOf(t, what);
  const values = t.dataSync() as Buffer32;
  // As the dtype's array (a backend may hand another type), so that `into` is reused exactly when its dtype is t's.
  const typed = dtype === 'float32' ? (values instanceof Float32Array ? values : Float32Array.from(values)) : (values instanceof Int32Array ? values : Int32Array.from(values));
  const data = keepCopy<Buffer32>(typed, into?.data);
  if (into && data === into.data) {
    into.name = name;
    if (!sameShape(into.shape, t.shape)) into.shape = t.shape.slice();
    return into;
  }
  return { name, shape: t.shape.slice(), dtype, data };
}

/** A new tensor holding a copy of `s` (a copy, so that no tensor ever shares the committed arrays). */
function tensorOf(s: Saved): tf.Tensor {
  return tf.tensor(s.data.slice(), s.shape, s.dtype);
}

/** Which of the fields given to ElasticState are its own; epoch and batch default to 0. */
function stateFields(fields: Record<string, unknown>): Record<string, unknown> {
  if (fields === null || typeof fields !== 'object' || Array.isArray(fields)) throw invalid('ElasticState', 'fields', 'an object of named values', fields);
  for (const name of Object.keys(fields)) {
    if (OWN.has(name)) throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ElasticState: field '${name}' has the name of an ElasticState property; rename it`);
  }
  const out = { epoch: 0, batch: 0, ...fields };
  for (const name of ['epoch', 'batch']) {
    const v = out[name as 'epoch' | 'batch'];
    if (!Number.isSafeInteger(v) || (v as number) < 0) throw invalid('ElasticState', `fields.${name}`, 'an integer >= 0', v);
  }
  return out;
}

export interface ElasticFitArgs {
  /** Per-rank samples per batch, as model.fit takes it; default 32 (model.fit's default). */
  batchSize?: number;
  /** Epochs to reach in all (not more epochs from where the state is). */
  epochs?: number;
  [option: string]: unknown;
}

/**
 * A hora.elastic.State that also holds a tfjs model and its optimizer. Fields `epoch` and `batch` (both 0
 * unless given) say where training is: `batch` batches of epoch `epoch` are done. Other fields are the
 * user's, as hora.elastic.State takes them.
 */
export class ElasticState extends hora.elastic.State {
  declare epoch: number;
  declare batch: number;
  declare readonly model: ElasticModel;
  readonly #optimizer: tf.Optimizer | null;
  #weights: Saved[] = [];
  #slots: Saved[] = [];
  #hidden: Saved[] = [];
  #iterations = 0;
  /** A sharded optimizer's committed blocks (shard 'optimizer' or 'gradients'); null otherwise. */
  #blocks: Blocks | null = null;
  readonly #checkpointed: boolean;
  /** How each re-forming of the world brought the sharded optimizer state over, for logs and tests. */
  readonly reshards: ReshardRecord[] = [];

  /**
   * `optimizer` defaults to model.optimizer (set by model.compile), read at each commit, restore and sync.
   * The model, the iteration count and the fields as they are now are the first rollback point; the
   * optimizer's slots enter it at the first commit() or sync(), since reading them is asynchronous.
   */
  constructor(model: ElasticModel, optimizer?: tf.Optimizer | null, fields: Record<string, unknown> = {}, options?: hora.elastic.StateOptions) {
    super(stateFields(fields), options);
    this.#checkpointed = options?.checkpoint !== undefined;
    if (model === null || typeof model !== 'object' || !Array.isArray((model as ElasticModel).weights)) {
      throw invalid('ElasticState', 'model', 'a tf.LayersModel (an object with weights)', model);
    }
    if (optimizer !== undefined && optimizer !== null && !(optimizer instanceof tf.Optimizer)) {
      throw invalid('ElasticState', 'optimizer', 'a tf.train optimizer, or omitted to use model.optimizer', optimizer);
    }
    Object.defineProperty(this, 'model', { value: model, enumerable: false });
    this.#optimizer = optimizer ?? null;
    this.#saveWeights();
    this.#saveOptimizerSync();
  }

  /** The optimizer given, or model.optimizer; null when there is none yet (the model is not compiled). */
  get optimizer(): tf.Optimizer | null {
    return this.#optimizer ?? this.model.optimizer ?? null;
  }

  #saveWeights(): void {
    if (isWeightSharded(this.model)) {
      // Stage 3: this rank's blocks of the weights are committed with the optimizer's (#saveSlots).
      const opt = this.optimizer;
      if (!opt || !distributedLayers(opt).some((d) => d.shard === 'weights')) {
        throw invalid('ElasticState', 'optimizer', "the DistributedOptimizer with shard: 'weights' that shards this model's weights " +
          '(pass it, or compile the model with it): a commit keeps its blocks of the weights', opt ?? undefined);
      }
      this.#weights = [];
      return;
    }
    const weights = this.model.weights;
    if (this.#weights.length !== weights.length) this.#weights.length = weights.length;
    weights.forEach((w, i) => { this.#weights[i] = copyInto(w.read(), w.name, this.#weights[i], `weight '${w.name}'`); });
  }

  /** The iteration count and hidden variables; the slots need the asynchronous getWeights(), see #saveSlots. */
  #saveOptimizerSync(): void {
    const opt = this.optimizer;
    if (!opt) return;
    this.#sharded(opt);
    this.#iterations = opt.iterations ?? 0;
    const hidden = hiddenVariables(opt);
    if (this.#hidden.length !== hidden.length) this.#hidden.length = hidden.length;
    hidden.forEach(([name, v], i) => { this.#hidden[i] = copyInto(v, name, this.#hidden[i], `optimizer variable '${name}'`); });
  }

  /**
   * The optimizer's sharded side (shard 'optimizer', 'gradients' or 'weights'), or null. A sharded state
   * exists in parts, one per rank of the world it was cut for (docs/zero.md): a lost rank's part is restored
   * from the last checkpoint on disk, so the checkpoint option is required.
   */
  #sharded(opt: tf.Optimizer): ShardedOptimizer | null {
    const d = distributedLayers(opt).find((x) => x.shard !== 'none');
    if (!d) return null;
    if (!this.#checkpointed) {
      throw invalid('ElasticState', 'options.checkpoint', `an object {dir, everySteps} with a DistributedOptimizer of shard '${d.shard}' ` +
        `(each rank holds only its part of the ${d.shard === 'weights' ? 'weights and the ' : ''}optimizer state; a lost rank's part exists nowhere else ` +
        'and is restored from the last checkpoint on disk)', undefined);
    }
    return d as unknown as ShardedOptimizer;
  }

  async #saveSlots(): Promise<void> {
    const opt = this.optimizer;
    const sharded = opt ? this.#sharded(opt) : null;
    if (sharded) {
      // This rank's blocks only (no collective): the cut they belong to goes with them.
      this.#blocks = { entries: await sharded.checkpointEntries({ model: this.model, weights: true }), ...sharded.shardCut() };
      this.#slots = [];
      return;
    }
    this.#blocks = null;
    const slots = opt ? await slotsOf(opt) : [];
    if (this.#slots.length !== slots.length) this.#slots.length = slots.length;
    slots.forEach((s, i) => { this.#slots[i] = copyInto(s.tensor, s.name, this.#slots[i], `optimizer weight '${s.name}'`); });
  }

  /** Copies the model and optimizer, then commits the other fields (where the membership check runs). */
  async commit(): Promise<void> {
    this.#saveWeights();
    this.#saveOptimizerSync();
    await this.#saveSlots();
    await super.commit();
  }

  /**
   * Goes back to the last commit: the weights, slots and hidden variables are written back into the same
   * variables; slots that did not exist at the commit are removed, and ones made since are replaced. The
   * weights are back on return; the optimizer's part goes through its asynchronous getWeights(), so await
   * restored() before the next step (sync, ElasticState.fit and ElasticCallback do).
   */
  restore(): void {
    super.restore();
    const opt = this.optimizer;
    // Passes summed since the commit (backwardPassesPerStep > 1) belong to the lost work.
    if (opt) for (const d of distributedLayers(opt)) d.discardPartialStep();
    this.#restoreWeights();
  }

  #restoreWeights(): void {
    // Stage 3: the weights' blocks are the sharded optimizer's to write (#restoreOptimizer, before its first await).
    const weights = isWeightSharded(this.model) ? [] : this.model.weights;
    if (weights.length !== this.#weights.length) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ElasticState.restore: the model has ${weights.length} weights but ${this.#weights.length} were committed`);
    }
    weights.forEach((w, i) => {
      const t = tensorOf(this.#weights[i]);
      w.write(t);
      t.dispose();
    });
    const pending = this.#restoreOptimizer();
    // Awaited through restored(); kept from becoming an unhandled rejection if nothing awaits it.
    pending.catch(() => undefined);
    this.#pendingOptimizer = pending;
  }

  #pendingOptimizer: Promise<void> | null = null;

  /** Resolves once the last restore() has written the optimizer back; fit through ElasticCallback awaits it. */
  async restored(): Promise<void> {
    const p = this.#pendingOptimizer;
    this.#pendingOptimizer = null;
    if (p) await p;
  }

  async #restoreOptimizer(): Promise<void> {
    const opt = this.optimizer;
    if (!opt) return;
    const sharded = this.#sharded(opt);
    if (sharded) {
      const b = this.#blocks ?? { entries: { [isWeightSharded(this.model) ? 'zero3/iterations' : 'zero/iterations']: Float64Array.of(this.#iterations) }, size: -1, rank: -1 };
      const cut = sharded.shardCut();
      // Blocks cut for another world than the optimizer's (loaded from disk, or resharded): cut it anew first.
      if (b.size !== -1 && (b.size !== cut.size || b.rank !== cut.rank)) sharded.recut();
      await sharded.restoreCheckpoint(asLoaded(b.entries), { model: this.model });
      return;
    }
    const current = await slotsOf(opt);
    const same = current.length === this.#slots.length &&
      current.every((s, i) => sameShape(s.tensor.shape, this.#slots[i].shape) && s.tensor.dtype === this.#slots[i].dtype);
    if (same) {
      current.forEach((s, i) => {
        const t = tensorOf(this.#slots[i]);
        (s.tensor as tf.Variable).assign(t);
        t.dispose();
      });
      setIterations(opt, this.#iterations);
    } else {
      // The slots were made or dropped since the commit: give the optimizer the committed set through its
      // own setWeights (which makes new variables from what it is given), and free the ones it drops.
      const iter = tf.scalar(this.#iterations, 'int32');
      const given = this.#slots.map((s) => ({ name: s.name, tensor: tensorOf(s) }));
      await opt.setWeights([{ name: 'iter', tensor: iter }, ...given]);
      iter.dispose();
      given.forEach((g) => g.tensor.dispose());
      current.forEach((s) => s.tensor.dispose());
      setIterations(opt, this.#iterations);
    }
    const hidden = hiddenVariables(opt);
    hidden.forEach(([name, v]) => {
      const s = this.#hidden.find((h) => h.name === name);
      if (!s || !sameShape(s.shape, v.shape)) return;
      const t = tensorOf(s);
      v.assign(t);
      t.dispose();
    });
  }

  /**
   * Gives every rank root's model, optimizer and fields, and makes them the rollback point everywhere. A
   * rank whose optimizer has no slots yet (a new worker, or one that never stepped) gets root's.
   */
  async sync(root = 0): Promise<void> {
    await this.restored();
    const opt = this.optimizer;
    const sharded = opt ? this.#sharded(opt) : null;
    // A sharded optimizer's record is taken before super.sync makes every rank's commit count root's.
    let record: BlocksRecord | null = null;
    if (sharded) {
      await this.#saveSlots();
      record = recordOf(this.#blocks, this.commitCount);
    }
    await super.sync(root);
    const w = current('elastic.ElasticState.sync');
    if (opt) for (const d of distributedLayers(opt)) d.forgetBucketPlan();
    this.#saveWeights();
    this.#saveOptimizerSync();
    if (sharded && record) {
      // Every rank now holds the checkpoint's model, optimizer and fields: nothing more to send.
      if (await reshard(this.#reshardContext(), sharded, record, root, w.rank, w.size)) return;
    } else await this.#saveSlots();
    if (w.size === 1) return;
    const isRoot = w.rank === root;
    const header = await broadcastHeader(() => this.#header(), root, isRoot, 'elastic.ElasticState.sync header');
    await this.#checkModel(header, root, w.rank);
    if (!isRoot) {
      this.#iterations = header.iterations;
      this.#slots = this.#layout(header.slots, this.#slots);
      this.#hidden = this.#layout(header.hidden, this.#hidden);
    }
    const all = [...this.#weights, ...this.#slots, ...this.#hidden].filter((s) => s.data.length > 0);
    await Promise.all(all.map((s) => hora.broadcast(s.data, { root, inplace: true, name: `elastic.ElasticState.sync ${s.name}` })));
    if (!isRoot) {
      this.#restoreWeights();
      await this.restored();
    }
  }

  /** What reshard() (elastic-shards.ts) reads and changes of this state: its blocks, also as the checkpoint reload sets them. */
  #reshardContext(): ReshardContext {
    const get = () => this.#blocks;
    const set = (b: Blocks | null) => { this.#blocks = b; };
    return {
      model: this.model, reshards: this.reshards, reloadCheckpoint: () => this.reloadCheckpoint(),
      get blocks() { return get(); },
      set blocks(b) { set(b); },
    };
  }

  /** The committed model and optimizer as checkpoint entries: hora.elastic.State saves them with the fields. */
  protected override async diskEntries(): Promise<Record<string, CheckpointEntry>> {
    const list = (xs: Saved[]) => xs.map((s): [string, number[], string] => [s.name, s.shape, s.dtype]);
    const out: Record<string, CheckpointEntry> = {};
    // Stage 3: the weights' names and shapes; their values are this rank's blocks, under 'zero/'.
    const weightsSharded = isWeightSharded(this.model);
    const weights = weightsSharded ? this.model.weights.map((w): [string, number[], string] => [w.name, w.shape, w.dtype]) : list(this.#weights);
    const layout = { iterations: this.#iterations, weights, slots: list(this.#slots), hidden: list(this.#hidden), sharded: this.#blocks !== null, weightsSharded };
    out[`${DISK}layout`] = new Uint8Array(Buffer.from(JSON.stringify(layout)));
    this.#weights.forEach((s, i) => { out[`${DISK}weight/${i}`] = s.data; });
    this.#slots.forEach((s, i) => { out[`${DISK}slot/${i}`] = s.data; });
    this.#hidden.forEach((s, i) => { out[`${DISK}hidden/${i}`] = s.data; });
    if (this.#blocks) for (const [k, e] of Object.entries(this.#blocks.entries)) out[`${DISK}zero/${k}`] = e;
    return out;
  }

  /** Takes back what diskEntries saved (sharded blocks as this world's), into the model and optimizer. */
  protected override async loadDiskEntries(entries: Record<string, CheckpointEntry | LoadedShard>, step: number): Promise<void> {
    const bytes = entries[`${DISK}layout`];
    if (!(bytes instanceof Uint8Array)) {
      throw new HoraError('ERR_MISMATCH', `${WHERE} ElasticState: checkpoint step ${step} has no '${DISK}layout' entry: it was not saved by an ElasticState`);
    }
    const layout = JSON.parse(Buffer.from(bytes).toString('utf8')) as {
      iterations: number; weights: TensorHeader['model']; slots: TensorHeader['slots']; hidden: TensorHeader['hidden']; sharded: boolean; weightsSharded?: boolean;
    };
    const weights = this.model.weights;
    const bad = layout.weights.length !== weights.length ? `${layout.weights.length} weights there, ${weights.length} in the model`
      : layout.weights.map(([, shape, dtype], i) => (!sameShape(shape, weights[i].shape) || dtype !== weights[i].dtype ? `weight ${i} is ${dtype}[${shape}] there, ${weights[i].dtype}[${weights[i].shape}] in the model` : '')).find((x) => x);
    if (bad) throw new HoraError('ERR_MISMATCH', `${WHERE} ElasticState: checkpoint step ${step} is of another model: ${bad}`);
    const opt = this.optimizer;
    const sharded = opt ? this.#sharded(opt) : null;
    if (layout.sharded !== (sharded !== null)) {
      throw new HoraError('ERR_MISMATCH', `${WHERE} ElasticState: checkpoint step ${step} was saved with ${layout.sharded ? 'a sharded' : 'an unsharded'} optimizer, this state has ${sharded ? 'a sharded' : 'an unsharded'} one`);
    }
    if ((layout.weightsSharded ?? false) !== isWeightSharded(this.model)) {
      throw new HoraError('ERR_MISMATCH', `${WHERE} ElasticState: checkpoint step ${step} was saved ${layout.weightsSharded ? 'with' : 'without'} shard: 'weights', this model's weights are ${isWeightSharded(this.model) ? '' : 'not '}sharded`);
    }
    const saved = (list: TensorHeader['model'], kind: string): Saved[] => list.map(([name, shape, dtype], i) => {
      const data = entries[`${DISK}${kind}/${i}`] as Buffer32;
      return { name, shape, dtype: dtype as Saved['dtype'], data: dtype === 'int32' ? new Int32Array(data) : new Float32Array(data) };
    });
    this.#weights = layout.weightsSharded ? [] : saved(layout.weights, 'weight');
    this.#slots = saved(layout.slots, 'slot');
    this.#hidden = saved(layout.hidden, 'hidden');
    this.#iterations = layout.iterations;
    if (sharded) {
      const prefix = `${DISK}zero/`;
      const blocks: Record<string, CheckpointEntry> = {};
      for (const [k, e] of Object.entries(entries)) {
        if (!k.startsWith(prefix)) continue;
        blocks[k.slice(prefix.length)] = isShard(e) ? { data: e.data, globalLength: e.globalLength, offset: e.offset } : e;
      }
      this.#blocks = { entries: blocks, size: hora.size(), rank: hora.rank() };
    }
    this.#restoreWeights();
    await this.restored();
  }

  /** Buffers shaped as root's list, reusing ours where they fit. */
  #layout(list: TensorHeader['slots'], have: Saved[]): Saved[] {
    return list.map(([name, shape, dtype], i) => {
      const n = shape.reduce((a, b) => a * b, 1);
      const old = have[i];
      if (old && old.dtype === dtype && old.data.length === n) return { name, shape, dtype: old.dtype, data: old.data };
      return { name, shape, dtype: dtype as Saved['dtype'], data: dtype === 'int32' ? new Int32Array(n) : new Float32Array(n) };
    });
  }

  /** What root holds: its iteration count and the names, shapes and dtypes of its tensors. */
  #header(): TensorHeader {
    const list = (xs: Saved[]) => xs.map((s): [string, number[], string] => [s.name, s.shape, s.dtype]);
    return { iterations: this.#iterations, model: list(this.#weights), slots: list(this.#slots), hidden: list(this.#hidden) };
  }

  /** Every rank learns whether all models match root's (weights' number, shapes, dtypes), so all fail together. */
  async #checkModel(header: TensorHeader, root: number, rank: number): Promise<void> {
    let why = '';
    if (header.model.length !== this.#weights.length) why = `${this.#weights.length} weights here, ${header.model.length} on rank ${root}`;
    else {
      const i = header.model.findIndex(([, shape, dtype], k) => !sameShape(shape, this.#weights[k].shape) || dtype !== this.#weights[k].dtype);
      if (i >= 0) why = `weight ${i} ('${this.#weights[i].name}') is ${this.#weights[i].dtype}[${this.#weights[i].shape}] here, ${header.model[i][2]}[${header.model[i][1]}] on rank ${root}`;
    }
    const bad = await ranksThatDiffer(!why, 'elastic.ElasticState.sync check');
    if (bad.length === 0) return;
    throw differsFromRoot(`${WHERE} ElasticState.sync`, 'model', 'differs', bad, root, why, rank);
  }

  /**
   * model.fit that starts where the state is: at epoch `epoch`, after its first `batch` batches. When
   * batch > 0 it first fits the rest of that epoch (the samples after the batches done, in data order),
   * then the following epochs on all of x and y. `args.callbacks` must hold an ElasticCallback of this
   * state. Returns the last fit's History. validationSplit is refused (it would split the rest of the
   * epoch differently from the whole); pass validationData instead.
   */
  async fit(x: tf.Tensor | tf.Tensor[], y: tf.Tensor | tf.Tensor[], args: ElasticFitArgs = {}): Promise<unknown> {
    if (args === null || typeof args !== 'object') throw invalid('ElasticState.fit', 'args', 'an object of model.fit options', args);
    const model = this.model as unknown as { fit(x: unknown, y: unknown, a: unknown): Promise<unknown> };
    if (typeof model.fit !== 'function') throw invalid('ElasticState.fit', 'this.model', 'a tf.LayersModel', this.model);
    const callbacks = Array.isArray(args.callbacks) ? args.callbacks : args.callbacks === undefined ? [] : [args.callbacks];
    if (!callbacks.some((c) => c instanceof ElasticCallback && c.state === this)) {
      throw invalid('ElasticState.fit', 'args.callbacks', 'a list holding an ElasticCallback of this state', args.callbacks);
    }
    if (args.validationSplit !== undefined && args.validationSplit !== 0) {
      throw invalid('ElasticState.fit', 'args.validationSplit', '0 or absent (pass validationData)', args.validationSplit);
    }
    if (args.initialEpoch !== undefined) throw invalid('ElasticState.fit', 'args.initialEpoch', 'absent (the state says where to start)', args.initialEpoch);
    const batchSize = args.batchSize ?? 32;
    const epochs = args.epochs ?? 1;
    if (!Number.isSafeInteger(batchSize) || batchSize < 1) throw invalid('ElasticState.fit', 'args.batchSize', 'a positive integer', batchSize);
    if (!Number.isSafeInteger(epochs) || epochs < 1) throw invalid('ElasticState.fit', 'args.epochs', 'a positive integer', epochs);
    await this.restored();
    let history: unknown;
    if (this.batch > 0 && this.epoch < epochs) {
      const from = this.batch * batchSize;
      const tail = (v: tf.Tensor | tf.Tensor[]) => (Array.isArray(v) ? v.map((t) => tf.slice(t, from)) : tf.slice(v, from));
      const xs = tail(x);
      const ys = tail(y);
      try {
        history = await model.fit(xs, ys, { ...args, initialEpoch: this.epoch, epochs: this.epoch + 1 });
      } finally {
        tf.dispose([xs, ys] as unknown as tf.Tensor[]);
      }
    }
    if (this.epoch < epochs) history = await model.fit(x, y, { ...args, initialEpoch: this.epoch, epochs });
    return history;
  }
}

export interface ElasticCallbackOptions {
  /** Commit after every commitEvery-th batch of an epoch (and at every epoch's end); a positive integer. Default 10. */
  commitEvery?: number;
}

/** Default commitEvery: see docs/tfjs.md (Elastic training) for why. */
export const DEFAULT_COMMIT_EVERY = 10;

const CALLBACK_OPTIONS = knownOptions<ElasticCallbackOptions>({ commitEvery: true }, '');

/**
 * For model.fit inside hora.elastic.run: keeps state.epoch and state.batch current, commits the state
 * after every commitEvery-th batch of an epoch and at the end of every epoch. Batches are counted within
 * the epoch, from its first batch, so a fit resumed mid-epoch (ElasticState.fit) commits at the same
 * points as one that was never interrupted.
 */
export class ElasticCallback extends tfl.Callback {
  readonly state: ElasticState;
  readonly commitEvery: number;
  /** Commits made by this callback, for tests and logs. */
  commits = 0;
  /** Batches of the current epoch done before this fit started (a resumed epoch). */
  private offset = 0;
  private stepsInEpoch: number | undefined;

  constructor(state: ElasticState, options: ElasticCallbackOptions = {}) {
    super();
    if (!(state instanceof ElasticState)) throw invalid('ElasticCallback', 'state', 'an ElasticState', state);
    if (options === null || typeof options !== 'object') throw invalid('ElasticCallback', 'options', 'an object', options);
    checkOptionKeys('ElasticCallback', options, CALLBACK_OPTIONS);
    const { commitEvery = DEFAULT_COMMIT_EVERY } = options;
    if (typeof commitEvery !== 'number' || !Number.isSafeInteger(commitEvery) || commitEvery < 1) {
      throw invalid('ElasticCallback', 'options.commitEvery', 'a positive integer', commitEvery);
    }
    this.state = state;
    this.commitEvery = commitEvery;
  }

  async onTrainBegin(): Promise<void> {
    await this.state.restored();
    // A commit between the backward passes of one step would not hold their partial sums.
    const opt = this.state.optimizer;
    for (const d of opt ? distributedLayers(opt) : []) {
      if (this.commitEvery % d.backwardPassesPerStep !== 0) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `${WHERE} ElasticCallback: option 'commitEvery' must be a multiple of the ` +
          `DistributedOptimizer's backwardPassesPerStep (${d.backwardPassesPerStep}); received number ${this.commitEvery}`);
      }
    }
  }

  async onEpochBegin(epoch: number): Promise<void> {
    this.offset = epoch === this.state.epoch ? this.state.batch : 0;
    this.state.epoch = epoch;
    this.state.batch = this.offset;
    const steps = stepsOf(this.params);
    this.stepsInEpoch = steps === undefined ? undefined : this.offset + steps;
  }

  async onBatchEnd(batch: number, _logs?: Logs): Promise<void> {
    const done = this.offset + batch + 1;
    this.state.batch = done;
    // The last batch of an epoch is committed by onEpochEnd, as the start of the next epoch.
    if (done % this.commitEvery === 0 && (this.stepsInEpoch === undefined || done < this.stepsInEpoch)) await this.#commit();
  }

  async onEpochEnd(epoch: number): Promise<void> {
    this.state.epoch = epoch + 1;
    this.state.batch = 0;
    this.offset = 0;
    await this.#commit();
  }

  async #commit(): Promise<void> {
    await this.state.commit();
    this.commits++;
  }
}

function stepsOf(params: Record<string, unknown> | undefined): number | undefined {
  if (!params) return undefined;
  if (typeof params.steps === 'number' && params.steps > 0) return params.steps;
  if (typeof params.samples === 'number' && typeof params.batchSize === 'number' && params.batchSize > 0) {
    return Math.ceil(params.samples / params.batchSize);
  }
  return undefined;
}
