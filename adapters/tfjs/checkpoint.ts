/**
 * Checkpoints of a tfjs model and its optimizer on disk, over hora.checkpoint (ts/checkpoint.ts).
 *
 * What a checkpoint holds, as hora.checkpoint entries (every one replicated: rank 0 writes it):
 *   model/<i> <weight name>          each weight of the model (trainable or not), float32 or int32, in the
 *                                    order of model.weights: tfjs numbers layer names per process (dense_Dense3
 *                                    in a second model), so a weight is matched by its place, as
 *                                    model.setWeights() does, and its shape and dtype are checked
 *   optimizer/iterations             the iteration count (Float64Array of 1)
 *   optimizer/slot/<i> <name>        getWeights()'s slots in their order (Adam's moments...); i keeps the order
 *   optimizer/hidden/<property>      the scalar variables an optimizer keeps outside getWeights() (Adam's beta
 *                                    powers: a restore through setWeights alone recomputes them with pow())
 *   tfjs/shapes                      the JSON of every tensor's shape, as UTF-8 bytes
 * An optimizer that keeps its own state sharded (a DistributedOptimizer that shards it) gives its entries
 * itself through the CheckpointableOptimizer methods below, in place of getWeights(): they may be sharded
 * entries ({data, globalLength, offset}), which load hands back as this rank's part at the current world size.
 *
 * Load checks the whole checkpoint against the model before it writes a weight: every rank reads the same
 * manifest (hora.checkpoint.load agrees on it), so each reaches the same verdict, and a checkpoint of another
 * model is the same error on every rank, naming the manifest.
 */
import { tf } from './framework';
import type { CheckpointEntry, CheckpointSaveOptions, LoadedCheckpoint, LoadedShard, Tensor } from '../../ts/index';
import { HoraError, describeValue, checkOptionKeys, knownOptions, loadCheckpointAgreed, saveCheckpointAgreed } from '../../ts/internal';
import { distributedLayers, hiddenVariables, innermost, setIterations, slotsOf } from './optimizer-state';

const MODEL = 'model/';
const OPTIMIZER = 'optimizer/';
const SHAPES = 'tfjs/shapes';

/** What saveCheckpoint and loadCheckpoint need of a model: tf.LayersModel's `weights` (LayerVariables). */
export interface CheckpointModel {
  weights: Array<{ name: string; shape: number[]; dtype: string; read(): tf.Tensor; write(value: tf.Tensor): unknown }>;
  optimizer?: tf.Optimizer;
}

/**
 * Methods an optimizer that keeps its state itself (sharded across ranks) implements; saveCheckpoint and
 * loadCheckpoint then use them in place of getWeights()/setWeights(). Entry names are its own (without
 * the 'optimizer/' prefix).
 */
export interface CheckpointableOptimizer {
  checkpointEntries(what: { model: CheckpointModel }): Promise<Record<string, CheckpointEntry>>;
  restoreCheckpoint(entries: Record<string, Tensor | LoadedShard>, what: { model: CheckpointModel }): Promise<void>;
}

export interface SaveCheckpointOptions {
  /** The step number (an integer >= 0, the same on every rank). */
  step: number;
  /** How many complete steps to keep (default: all). */
  keep?: number;
}

export interface LoadCheckpointOptions {
  /** The step to load (default: the latest). */
  step?: number;
}

const SAVE_OPTIONS = knownOptions<SaveCheckpointOptions>({ step: true, keep: true }, '');
const LOAD_OPTIONS = knownOptions<LoadCheckpointOptions>({ step: true }, '');

/** A model weight's entry: its place in model.weights (which orders the entries), then its name. */
function modelEntry(i: number, name: string): string {
  return `${MODEL}${String(i).padStart(5, '0')} ${name}`;
}

function invalid(fn: string, argument: string, expected: string, received: unknown): HoraError {
  return new HoraError('ERR_INVALID_ARGUMENT', `hora/tfjs ${fn}: argument '${argument}' must be ${expected}; received ${describeValue(received)}`);
}

function targetsOf(fn: string, what: unknown): { model: CheckpointModel; optimizer: tf.Optimizer | null } {
  if (what === null || typeof what !== 'object') throw invalid(fn, 'what', 'an object {model, optimizer?}', what);
  checkOptionKeys(fn, what, knownOptions<{ model: unknown; optimizer: unknown }>({ model: true, optimizer: true }, ''));
  const { model, optimizer } = what as { model?: CheckpointModel; optimizer?: tf.Optimizer };
  if (!model || !Array.isArray(model.weights)) throw invalid(fn, 'what.model', 'a tf.LayersModel (an object with weights)', model);
  if (optimizer !== undefined && !(optimizer instanceof tf.Optimizer)) throw invalid(fn, 'what.optimizer', 'a tf.Optimizer', optimizer);
  return { model, optimizer: optimizer ?? model.optimizer ?? null };
}

function checkpointable(optimizer: tf.Optimizer): CheckpointableOptimizer | null {
  const o = optimizer as unknown as Partial<CheckpointableOptimizer>;
  return typeof o.checkpointEntries === 'function' && typeof o.restoreCheckpoint === 'function' ? (o as CheckpointableOptimizer) : null;
}

function typedOf(t: tf.Tensor, what: string): Float32Array | Int32Array {
  const values = t.dataSync();
  if (t.dtype === 'float32') return new Float32Array(values as Float32Array);
  if (t.dtype === 'int32') return new Int32Array(values as Int32Array);
  throw new HoraError('ERR_INVALID_ARGUMENT', `hora/tfjs saveCheckpoint: ${what} has dtype ${t.dtype}; only float32 and int32 tensors can be saved`);
}

/**
 * Saves the model's weights and the optimizer's state (default: the model's optimizer) as step
 * `options.step` of the checkpoint in `dir`; every rank calls it. Resolves once the step is durable.
 */
export function saveCheckpoint(dir: string, what: { model: CheckpointModel; optimizer?: tf.Optimizer }, options: SaveCheckpointOptions): Promise<void> {
  // Made inside the save: an error here on one rank fails the save on every rank.
  return saveCheckpointAgreed(dir, () => entriesOf(what, options));
}

async function entriesOf(what: { model: CheckpointModel; optimizer?: tf.Optimizer }, options: SaveCheckpointOptions): Promise<{ entries: Record<string, CheckpointEntry>; options: CheckpointSaveOptions }> {
  const { model, optimizer } = targetsOf('saveCheckpoint', what);
  if (options === null || typeof options !== 'object') throw invalid('saveCheckpoint', 'options', 'an object {step, keep?}', options);
  checkOptionKeys('saveCheckpoint', options, SAVE_OPTIONS);
  const entries: Record<string, CheckpointEntry> = {};
  const shapes: Record<string, number[]> = {};
  for (const [i, w] of model.weights.entries()) {
    const name = modelEntry(i, w.name);
    const t = w.read();
    entries[name] = typedOf(t, `weight '${w.name}'`);
    shapes[name] = t.shape.slice();
  }
  if (optimizer) {
    const own = checkpointable(optimizer);
    if (own) {
      for (const [k, v] of Object.entries(await own.checkpointEntries({ model }))) entries[OPTIMIZER + k] = v;
    } else {
      entries[`${OPTIMIZER}iterations`] = Float64Array.of(optimizer.iterations ?? 0);
      const slots = await slotsOf(optimizer);
      slots.forEach((s, i) => {
        const name = `${OPTIMIZER}slot/${String(i).padStart(5, '0')} ${s.name}`;
        entries[name] = typedOf(s.tensor, `optimizer weight '${s.name}'`);
        shapes[name] = s.tensor.shape.slice();
      });
      for (const [prop, v] of hiddenVariables(optimizer)) {
        entries[`${OPTIMIZER}hidden/${prop}`] = typedOf(v, `optimizer variable '${prop}'`);
        shapes[`${OPTIMIZER}hidden/${prop}`] = v.shape.slice();
      }
    }
  }
  entries[SHAPES] = new Uint8Array(Buffer.from(JSON.stringify(shapes)));
  return { entries, options };
}

/**
 * Loads step `options.step` (default: the latest) of the checkpoint in `dir` into the model's weights
 * and the optimizer's state; every rank calls it, at any world size. A checkpoint of another model (other
 * weight names, dtypes or shapes), or a damaged one, is an error on every rank and nothing is written.
 * Resolves to the step loaded.
 */
export async function loadCheckpoint(dir: string, what: { model: CheckpointModel; optimizer?: tf.Optimizer }, options: LoadCheckpointOptions = {}): Promise<number> {
  let targets: Targets | null = null;
  let shapes: Record<string, number[]> = {};
  // The checks run inside the load, on every rank, before the ranks agree: an error on one fails all, and
  // nothing is written unless everything fits.
  const loaded = await loadCheckpointAgreed(dir, () => {
    targets = targetsOf('loadCheckpoint', what);
    if (options === null || typeof options !== 'object') throw invalid('loadCheckpoint', 'options', 'an object {step?}', options);
    checkOptionKeys('loadCheckpoint', options, LOAD_OPTIONS);
    return options;
  }, (read, manifest) => {
    shapes = checkFits(read, manifest, targets as Targets);
  });
  const { model, optimizer } = targets as unknown as Targets;
  const saved = Object.keys(loaded.entries).filter((k) => k.startsWith(MODEL)).sort();
  const optimizerNames = Object.keys(loaded.entries).filter((k) => k.startsWith(OPTIMIZER));

  // Gradients summed since the last update (backwardPassesPerStep > 1) belong to the run being replaced.
  if (optimizer) for (const d of distributedLayers(optimizer)) d.discardPartialStep();
  model.weights.forEach((w, i) => {
    const t = tf.tensor(loaded.entries[saved[i]] as Float32Array | Int32Array, w.shape, w.dtype as 'float32' | 'int32');
    w.write(t);
    t.dispose();
  });
  if (!optimizer || optimizerNames.length === 0) return loaded.step;
  const own = checkpointable(optimizer);
  if (own) {
    await own.restoreCheckpoint(Object.fromEntries(optimizerNames.map((k) => [k.slice(OPTIMIZER.length), loaded.entries[k]])), { model });
    return loaded.step;
  }
  const iterations = Number((loaded.entries[`${OPTIMIZER}iterations`] as Float64Array)[0]);
  const slotNames = optimizerNames.filter((k) => k.startsWith(`${OPTIMIZER}slot/`)).sort();
  const given = slotNames.map((k) => ({
    name: k.slice(k.indexOf(' ') + 1),
    tensor: tf.tensor(loaded.entries[k] as Float32Array | Int32Array, shapes[k], loaded.dtypes[k] as 'float32' | 'int32'),
  }));
  const current = await slotsOf(optimizer);
  const iter = tf.scalar(iterations, 'int32');
  await innermost(optimizer).setWeights([{ name: 'iter', tensor: iter }, ...given]);
  iter.dispose();
  given.forEach((g) => g.tensor.dispose());
  // setWeights made new variables of its own: the ones getWeights gave us are no longer the optimizer's.
  current.forEach((s) => s.tensor.dispose());
  setIterations(optimizer, iterations);
  for (const [prop, v] of hiddenVariables(optimizer)) {
    const k = `${OPTIMIZER}hidden/${prop}`;
    if (!(k in loaded.entries)) continue;
    const t = tf.tensor(loaded.entries[k] as Float32Array | Int32Array, v.shape, v.dtype as 'float32' | 'int32');
    v.assign(t);
    t.dispose();
  }
  return loaded.step;
}

type Targets = { model: CheckpointModel; optimizer: tf.Optimizer | null };

/** ERR_MISMATCH naming the manifest unless the checkpoint fits the model and optimizer; else the saved shapes. */
function checkFits(loaded: LoadedCheckpoint, manifest: string, { model, optimizer }: Targets): Record<string, number[]> {
  const other = (why: string) => new HoraError('ERR_MISMATCH', `hora/tfjs loadCheckpoint: ${manifest} is a checkpoint of another model: ${why}`);
  const shapesBytes = loaded.entries[SHAPES];
  if (!(shapesBytes instanceof Uint8Array)) throw other(`it has no '${SHAPES}' entry: it was not saved by saveCheckpoint`);
  const shapes = JSON.parse(Buffer.from(shapesBytes).toString('utf8')) as Record<string, number[]>;
  const saved = Object.keys(loaded.entries).filter((k) => k.startsWith(MODEL)).sort();
  if (saved.length !== model.weights.length) throw other(`it holds ${saved.length} weights, the model has ${model.weights.length}`);
  model.weights.forEach((w, i) => {
    const name = saved[i];
    const shape = shapes[name] ?? [];
    if (loaded.dtypes[name] !== w.dtype || shape.length !== w.shape.length || shape.some((d, k) => d !== w.shape[k])) {
      throw other(`weight ${i} ('${name.slice(name.indexOf(' ') + 1)}' there) is ${loaded.dtypes[name]} [${shape.join(', ')}], ` +
        `the model's ('${w.name}') is ${w.dtype} [${w.shape.join(', ')}]`);
    }
  });
  const optimizerNames = Object.keys(loaded.entries).filter((k) => k.startsWith(OPTIMIZER));
  if (optimizer && !checkpointable(optimizer) && optimizerNames.length > 0 && !(`${OPTIMIZER}iterations` in loaded.entries)) {
    throw other('its optimizer state was saved by an optimizer that keeps its own (sharded) state; load it with that optimizer');
  }
  return shapes;
}
