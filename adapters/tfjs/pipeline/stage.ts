/**
 * One stage of a pipeline: its layers, rebuilt apart from the whole model, and the forward and backward
 * of one micro-batch through them.
 *
 * The layers are clones (fromConfig of each layer's config) holding copies of the whole model's
 * weights, in a tf.Sequential of their own, so the stage's variables, and the optimizer slots made for
 * them, are all this rank trains; the model passed to pipeline() is not touched and may be disposed.
 *
 * A backward needs the values its forward computed, and tfjs's public API keeps them only inside one
 * gradient call (tf.variableGrads, engine.gradients), which must be given the output's gradient when it
 * starts. That gradient comes from the next stage long after the forward. Two ways around it:
 *
 * - keep the record (the default): the forward runs with tfjs's tape on, as a gradient call runs it,
 *   and the stage keeps the tape (the operations and the tensors their gradients need) until the
 *   micro-batch's backward, which hands that tape to engine.gradients with the output's gradient. No
 *   work is repeated; the stage holds each micro-batch's saved tensors between the two. This uses the
 *   engine's tape fields (state.activeTape, startTape/endTape), which tfjs 4 has had all along.
 * - re-materialization (recompute: true, GPipe's): the stage keeps only each micro-batch's input and
 *   the backward runs the forward again inside the gradient call: less memory, an extra forward.
 *   Random layers (Dropout) draw the same numbers both times (Math.random is replaced by a generator
 *   seeded per micro-batch for the length of each forward), and what a forward updates (batch
 *   normalization's moving averages) is restored after the second one, so the recomputation is
 *   invisible.
 *
 * The last stage needs neither: it has the loss at once and runs forward and backward in one call.
 *
 * With deferWeightGradients, every backward (kept record, recomputed, or the last stage's) replays a
 * recorded tape whose Dense kernel products keep their input and output gradient, and the kernels'
 * gradients are computed once per batch (weight-grads.ts).
 */
import { tf, tfl } from '../framework';
import type { LayersModel, Sequential } from '@tensorflow/tfjs-layers';
import { HoraError } from '../../../ts/internal';
import type { Layer } from './layers';
import { DeferredKernels, type TapeNode } from './weight-grads';

type LossFn = (yTrue: tf.Tensor, yPred: tf.Tensor) => tf.Tensor;
type LayerClass = { fromConfig(cls: unknown, config: unknown): Layer };
type NonTrainable = { read(): tf.Tensor; write(v: tf.Tensor): unknown };

/** mulberry32, uniform in [0, 1): the same draws on every rank that starts from the same seed. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Runs f with Math.random drawing from `seed`: the same draws every time f runs with that seed. */
function withSeed<T>(seed: number, f: () => T): T {
  const saved = Math.random;
  Math.random = seeded(seed);
  try {
    return f();
  } finally {
    Math.random = saved;
  }
}

export const BYTES_PER_FLOAT = 4;

/** tfjs-core's engine, as far as keeping a forward's record goes. */
interface TapeEngine {
  state: { activeTape: Array<{ saved?: tf.Tensor[] }> | null; gradientDepth: number };
  startTape(): void;
  endTape(): void;
  tidy<T extends tf.TensorContainer>(name: string, f: () => T): T;
  gradients(f: () => tf.Tensor, xs: tf.Tensor[], dy?: tf.Tensor, allowNoGradients?: boolean): { value: tf.Tensor; grads: tf.Tensor[] };
}

function tapeEngine(): TapeEngine | null {
  const e = tf.engine() as unknown as Partial<TapeEngine>;
  const ok = typeof e.startTape === 'function' && typeof e.endTape === 'function' && e.state !== undefined && typeof e.state.gradientDepth === 'number';
  return ok ? e as TapeEngine : null;
}

/** What a forward with the tape on leaves for its backward: the output and the tape. */
export interface ForwardRecord {
  y: tf.Tensor;
  tape: Array<{ saved?: tf.Tensor[] }>;
  /** Bytes of the tensors the tape keeps. */
  bytes: number;
}

/** Frees a record whose backward will not run. */
export function disposeRecord(r: ForwardRecord): void {
  for (const node of r.tape) for (const t of node.saved ?? []) t.dispose();
  r.y.dispose();
}

export class Stage {
  readonly model: Sequential;
  /** The trainable variables, in the order the stage model lists them. */
  readonly variables: tf.Variable[];
  /** Bytes of the stage's weights (trainable and not). */
  readonly weightBytes: number;
  private readonly nonTrainable: NonTrainable[];
  private lossFn: LossFn | null = null;
  private metricFns: LossFn[] = [];
  metricNames: string[] = [];
  /** Sum over the batch's micro-batches of each variable's gradient, by position in `variables`. */
  private sums: Array<tf.Tensor | null> = [];
  /** Whether any of the stage's layers has a regularizer (known once compiled). */
  private regularized = false;
  /** Dense kernels whose gradients wait for the batch's end (deferWeightGradients), or null. */
  private readonly deferred: DeferredKernels | null;

  constructor(readonly layers: Layer[], inputShape: Array<number | null>, readonly first: boolean, readonly last: boolean, deferWeightGradients = false) {
    const model = tfl.sequential();
    model.add(tfl.layers.inputLayer({ batchInputShape: inputShape }));
    for (const layer of layers) {
      const cls = layer.constructor as unknown as LayerClass;
      let clone: Layer;
      try {
        clone = cls.fromConfig(cls, layer.getConfig());
      } catch (e) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: layer '${layer.name}' (${layer.getClassName()}) cannot be rebuilt from its config for its stage: ${(e as Error).message}`);
      }
      model.add(clone);
    }
    // The clones' weights are in the same order as the originals' (both built the same way).
    const values = layers.flatMap((l) => l.getWeights());
    model.setWeights(values);
    this.model = model;
    this.variables = model.trainableWeights.map((w) => w.read() as tf.Variable);
    this.nonTrainable = model.nonTrainableWeights as unknown as NonTrainable[];
    this.weightBytes = model.weights.reduce((n, w) => n + w.shape.reduce((a: number, b) => a * (b ?? 1), 1) * BYTES_PER_FLOAT, 0);
    const deferred = deferWeightGradients ? new DeferredKernels(model.layers as Layer[], this.variables) : null;
    this.deferred = deferred && deferred.size > 0 ? deferred : null;
  }

  /** Dense kernels whose gradients are computed once per batch (0 without deferWeightGradients). */
  get deferredKernels(): number {
    return this.deferred?.size ?? 0;
  }

  /** Bytes kept for the kernel gradients still to compute this batch. */
  get deferredBytes(): number {
    return this.deferred?.bytes ?? 0;
  }

  /** Resolves the loss and metrics the way model.compile does (and fails the same way). */
  compile(args: { optimizer: tf.Optimizer; loss: unknown; metrics?: unknown }): void {
    (this.model as LayersModel).compile(args as Parameters<LayersModel['compile']>[0]);
    // A Sequential compiles the functional model it wraps.
    const m = (this.model as unknown as { model: unknown }).model as { lossFunctions: LossFn[]; metricsTensors: Array<[LossFn, number]>; metricsNames: string[] };
    this.lossFn = m.lossFunctions[0];
    this.metricFns = m.metricsTensors.map(([fn]) => fn);
    this.metricNames = m.metricsNames.slice(1);
    this.regularized = tf.tidy(() => this.penalty() !== null);
  }

  private apply(x: tf.Tensor, training: boolean): tf.Tensor {
    return (this.model as LayersModel).apply(x, { training }) as tf.Tensor;
  }

  /** Whether forwardRecorded can run here: tfjs's engine has the tape fields it uses. */
  static canRecord(): boolean {
    return tapeEngine() !== null;
  }

  /**
   * The forward of a micro-batch with the tape on, as engine.gradients runs it, keeping the tape for
   * backwardRecorded. The output y belongs to the record (disposeRecord or backwardRecorded frees it).
   * `f` is what runs (the stage's layers on x unless given).
   */
  forwardRecorded(x: tf.Tensor, seed: number, f: () => tf.Tensor = () => this.apply(x, true)): ForwardRecord {
    const e = tapeEngine() as TapeEngine;
    if (e.state.gradientDepth !== 0) throw new HoraError('ERR_INVALID_ARGUMENT', 'pipeline: a training step cannot run inside another gradient computation');
    let y: tf.Tensor;
    e.startTape();
    try {
      y = e.tidy('forward', () => withSeed(seed, f));
    } finally {
      e.endTape();
    }
    const tape = e.state.activeTape ?? [];
    e.state.activeTape = null;
    // A saved tensor is a clone that shares its data with the original (a weight, the input, an
    // intermediate): count each piece of data once, and neither the weights nor the input (the
    // pipeline counts that) at all.
    const seen = new Set<unknown>([x, ...this.variables].map((v) => (v as unknown as { dataId: unknown }).dataId));
    let bytes = 0;
    for (const node of tape) {
      for (const t of node.saved ?? []) {
        const id = (t as unknown as { dataId: unknown }).dataId;
        if (seen.has(id)) continue;
        seen.add(id);
        bytes += t.size * BYTES_PER_FLOAT;
      }
    }
    return { y, tape, bytes };
  }

  /**
   * The backward of a recorded forward, given dy (ones for a loss): the tape replayed backwards; no
   * forward runs again.
   */
  backwardRecorded(record: ForwardRecord, x: tf.Tensor, dy?: tf.Tensor): tf.Tensor | null {
    const e = tapeEngine() as TapeEngine;
    const standIns = this.deferred ? this.deferred.rewire(record.tape as unknown as TapeNode[]) : [];
    try {
      const [dx = null] = tf.tidy(() => {
        const inputs = this.first ? [] : [x];
        // engine.gradients starts a fresh tape; the recorded one becomes it, and y is its output. It
        // frees the tensors the tape saved once the backward is done.
        const { grads } = e.gradients(() => {
          (e.state.activeTape as unknown[]).push(...record.tape);
          return record.y;
        }, [...inputs, ...this.variables, ...standIns], dy, true);
        this.accumulate(grads.slice(inputs.length, inputs.length + this.variables.length));
        return this.first ? [] : [grads[0]];
      });
      return dx;
    } finally {
      standIns.forEach((t) => t.dispose());
      record.y.dispose();
    }
  }

  /** The forward of one micro-batch with its seed (training) or without (inference). Caller disposes. */
  forward(x: tf.Tensor, seed: number | null): tf.Tensor {
    if (seed === null) return tf.tidy(() => this.apply(x, false));
    return tf.tidy(() => withSeed(seed, () => this.apply(x, true)));
  }

  /** Regularization losses of the stage's layers (weighted by a micro-batch's share of the batch). */
  private penalty(): tf.Scalar | null {
    const losses = (this.model as unknown as { calculateLosses(): tf.Scalar[] }).calculateLosses();
    return losses.length === 0 ? null : losses.reduce((a, b) => tf.add(a, b) as tf.Scalar);
  }

  /**
   * A stage before the last: its layers' regularization penalty for the batch, whose gradient is added to
   * the sums once (it does not depend on the data). Returns its value, 0 without regularizers. The last
   * stage counts its own penalty in each micro-batch's loss instead (lossAndBackward).
   */
  penaltyOfBatch(): number {
    if (this.last || !this.regularized) return 0;
    let value = 0;
    tf.tidy(() => {
      const { value: v, grads } = tf.engine().gradients(() => this.penalty() as tf.Scalar, this.variables, undefined, true);
      value = v.dataSync()[0];
      this.accumulate(grads);
    });
    return value;
  }

  /**
   * The last stage's forward and backward at once: the micro-batch's loss weighted by its share of the
   * batch, accumulated gradients, and the gradient of its input (null on a stage that is also the first).
   * Returns the unweighted loss and metric values of the micro-batch.
   */
  lossAndBackward(x: tf.Tensor, y: tf.Tensor, share: number, seed: number): { loss: number; metrics: number[]; dx: tf.Tensor | null; forwardEndNs: number } {
    const lossFn = this.lossFn as LossFn;
    let loss = 0;
    let metrics: number[] = [];
    // Where the forward ends and the backward begins inside the one gradient call (the cpu backend
    // computes as it goes: reading the loss has waited for the forward).
    let forwardEndNs = 0;
    const total = (): tf.Scalar => {
      const out = this.apply(x, true);
      const mean = tf.mean(lossFn(y, out));
      const values = [mean, ...this.metricFns.map((fn) => tf.mean(fn(y, out)))];
      metrics = values.slice(1).map((v) => v.dataSync()[0]);
      let weighted = tf.mul(mean, share) as tf.Scalar;
      const p = this.penalty();
      if (p) weighted = tf.add(weighted, tf.mul(p, share)) as tf.Scalar;
      loss = (p ? tf.add(mean, p) : mean).dataSync()[0];
      forwardEndNs = Number(process.hrtime.bigint());
      return weighted;
    };
    if (this.deferred) {
      const dx = this.backwardRecorded(this.forwardRecorded(x, seed, total), x);
      return { loss, metrics, dx, forwardEndNs };
    }
    const [dx = null] = tf.tidy(() => {
      const xs: tf.Tensor[] = this.first ? [...this.variables] : [x, ...this.variables];
      const { value, grads } = tf.engine().gradients(() => withSeed(seed, total), xs, undefined, true);
      value.dispose();
      const first = this.first ? 0 : 1;
      this.accumulate(grads.slice(first));
      return this.first ? [] : [grads[0]];
    });
    return { loss, metrics, dx, forwardEndNs };
  }

  /** A middle or first stage's backward: runs the forward again under the gradient call, given dy. */
  backward(x: tf.Tensor, dy: tf.Tensor, seed: number): tf.Tensor | null {
    const saved = this.nonTrainable.map((w) => tf.clone(w.read()));
    try {
      if (this.deferred) return this.backwardRecorded(this.forwardRecorded(x, seed), x, dy);
      const [dx = null] = tf.tidy(() => {
        const xs: tf.Tensor[] = this.first ? [...this.variables] : [x, ...this.variables];
        const { value, grads } = tf.engine().gradients(() => withSeed(seed, () => this.apply(x, true)), xs, dy, true);
        value.dispose();
        this.accumulate(grads.slice(this.first ? 0 : 1));
        return this.first ? [] : [grads[0]];
      });
      return dx;
    } finally {
      // The forward that ran first already updated what training updates; undo the second one's update.
      this.nonTrainable.forEach((w, i) => { w.write(saved[i]); saved[i].dispose(); });
    }
  }

  private accumulate(grads: Array<tf.Tensor | null | undefined>): void {
    grads.forEach((g, i) => { if (g) this.add(i, g); });
  }

  private add(i: number, g: tf.Tensor): void {
    if (this.sums.length === 0) this.sums = new Array(this.variables.length).fill(null);
    const prev = this.sums[i];
    this.sums[i] = tf.keep(prev ? tf.add(prev, g) : tf.clone(g));
    prev?.dispose();
  }

  /**
   * The kernel gradients deferred to the batch's end, computed and added to the sums (after the batch's
   * last backward; gradientArrays and update call it too).
   */
  finishWeightGradients(): void {
    this.deferred?.finish((i, g) => this.add(i, g));
  }

  /** The summed gradients as flat float32 arrays (zeros for a variable no micro-batch reached). */
  gradientArrays(): Float32Array[] {
    this.finishWeightGradients();
    return this.variables.map((v, i) => {
      const g = this.sums[i];
      return g ? Float32Array.from(g.dataSync() as Float32Array) : new Float32Array(v.size);
    });
  }

  /** Applies one update with the given gradients (one per variable), then forgets the batch. */
  update(optimizer: tf.Optimizer, grads: Float32Array[] | null): void {
    this.finishWeightGradients();
    const named: tf.NamedTensorMap = {};
    this.variables.forEach((v, i) => {
      const g = grads ? grads[i] : null;
      const sum = this.sums[i];
      if (g) named[v.name] = tf.tensor(g, v.shape, 'float32');
      else if (sum) named[v.name] = sum;
    });
    optimizer.applyGradients(named);
    if (grads) Object.values(named).forEach((t) => t.dispose());
    this.resetGradients();
  }

  resetGradients(): void {
    this.deferred?.discard();
    this.sums.forEach((t) => t?.dispose());
    this.sums = [];
  }

  /** Unweighted loss and metrics of a micro-batch without training (evaluate). */
  lossOf(out: tf.Tensor, y: tf.Tensor): number[] {
    const lossFn = this.lossFn as LossFn;
    return tf.tidy(() => [tf.mean(lossFn(y, out)), ...this.metricFns.map((fn) => tf.mean(fn(y, out)))].map((v) => v.dataSync()[0]));
  }
}
