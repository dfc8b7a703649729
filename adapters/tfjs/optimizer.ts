/**
 * DistributedOptimizer: wraps any tf.train optimizer so that every rank applies the same, averaged
 * gradients.
 *
 * With overlap (the default) the allreduce starts inside the backward pass: minimize(), and with it
 * model.fit and trainOnBatch, run the pass through computeGradients(), where gradient-ready hooks
 * (hooks.ts) hand each gradient over as soon as it is final and buckets (buckets.ts) send it while tfjs
 * computes the layers below. applyGradients() then only waits for what is still in flight.
 *
 * Without overlap, or for gradients computed elsewhere (tf.variableGrads), applyGradients does all the
 * work after the fact: the gradients are read back into buckets in the order of their names, each bucket
 * handed to hora as soon as it is full, and the JS thread blocks with Work.wait() only after all of them
 * are submitted.
 *
 * Every rank packs the same variables in the same order, whatever the key order of the gradient map (or
 * of an array, or a varList), and a rank whose variables differ in name or size fails the bucket with
 * ERR_MISMATCH on every rank before anything is applied (buckets.ts says how), with a message that names
 * the variable (bucket-mismatch.ts).
 *
 * Either way the inner optimizer sees the averaged gradients under the same names and in the same order
 * it would have seen locally (Adam and friends key their slots by position), so N ranks on batch B/N
 * follow one process on batch B up to float rounding, and both ways give bit-identical weights.
 *
 * Uneven batches. With op 'avg', a step whose ranks hold different numbers of samples (the last batch of
 * an epoch that shard(..., {remainder: 'keep'}) split unevenly) must average over samples, not ranks. A
 * pass told its sample count n (setSampleCount; model.fit tells it through SampleCountCallback, in
 * callbacks.ts) sends n x its gradient instead, and the step's count as one float more in the last bucket
 * (buckets.ts: carries), so no collective more; the averaged sum is then divided by the averaged count: sum
 * over ranks of n_r g_r / sum of n_r, as one process on the whole batch computes it. With compression the
 * count would be rounded to 16 bits: it goes as a float32 allreduce of its own in the last bucket's batch.
 */
import { checkSameTfjs, tf } from './framework';
import * as hora from '../../ts/index';
import { readTfjsSkipAllreduce, flushCollectives, timelineOn, timelineSpan, steps } from '../../ts/internal';
import { BucketedStep, planBuckets, PlannedBucket } from './buckets';
import { explainFailure } from './bucket-mismatch';
import { addWeighted, byName, checkFloat32, divideBy, readGradient } from './gradient-arrays';
import type { Entry } from './gradient-arrays';
import { gradientsWithHooks } from './hooks';
import { compress, decompress } from './half';
import { checkOptions } from './optimizer-options';
import type { Compression, DistributedOptimizerOptions, DistributedOptimizerStats } from './optimizer-options';
import { Shard, ShardedUpdate } from './zero';
import { WeightShards } from './zero-weights';
import { PassRounds } from './zero-rounds';
import type { Model } from './zero-layers';

/** tfjs-core's NamedTensor (not exported from its index). */
type NamedTensor = { name: string; tensor: tf.Tensor };
type Gradients = tf.NamedTensorMap | NamedTensor[];

export class DistributedOptimizer extends tf.Optimizer {
  /** The wrapped optimizer; it owns the learning rate, slots and iteration count. */
  readonly optimizer: tf.Optimizer;
  readonly compression: Compression;
  readonly backwardPassesPerStep: number;
  readonly op: 'avg' | 'sum';
  readonly overlap: boolean;
  readonly bucketMB: number;
  readonly shard: Shard;
  private readonly zero: ShardedUpdate | null; // zero.ts, where shard is 'optimizer' or 'gradients'
  /** Uneven data with shard 'optimizer' or 'gradients': each pass's round, joinEpoch's shadow passes (zero-rounds.ts); else null. */
  private readonly rounds: PassRounds | null = null;
  readonly stats: DistributedOptimizerStats = { steps: 0, submitMs: 0, waitMs: 0, applyMs: 0, backwardMs: 0, hiddenMs: 0, exposedMs: 0 };
  /** Measurement only (HORA_TFJS_SKIP_ALLREDUCE=1): no allreduce, each rank trains on its own gradients. */
  private readonly skip = readTfjsSkipAllreduce();
  /** The bucket plan learnt on the first overlapped step; null until then. */
  private plan: PlannedBucket[] | null = null;
  /** The communicating pass whose buckets are in flight, until applyGradients takes it. */
  private inFlight: { step: BucketedStep; grads: tf.NamedTensorMap; taken: Set<string> } | null = null;
  /** Sum of the local gradient sets since the last update (backwardPassesPerStep > 1). */
  private accumulated: { names: string[]; sums: Array<Float32Array | null> } | null = null;
  private passes = 0;
  /** This rank's samples in the coming pass (setSampleCount); null: not given (the pass weighs 1). */
  private nextSamples: number | null = null;
  /** The weights of the passes of this step so far: their samples, 1 for a pass not given any. */
  private stepSamples = 0;
  /** What submit() multiplies a bucket by: a weighted step's samples when k = 1 (k > 1 weighs each pass as it sums them), else 1. */
  private scale = 1;
  /** shard: 'weights': the model's sharded weights, and the step's side of them (zero-weights.ts); else null. */
  private readonly weightShards: WeightShards | null = null;

  constructor(optimizer: tf.Optimizer, options: DistributedOptimizerOptions = {}) {
    super();
    if (!(optimizer instanceof tf.Optimizer)) {
      throw new TypeError(`DistributedOptimizer: argument 'optimizer' must be a tf.train optimizer; received ${optimizer === null ? 'null' : typeof optimizer}`);
    }
    checkSameTfjs(optimizer, 'Optimizer', "DistributedOptimizer: argument 'optimizer'");
    const { compression, backwardPassesPerStep, op, overlap, bucketMB, shard } = checkOptions(options);
    this.optimizer = optimizer;
    this.overlap = overlap;
    this.bucketMB = bucketMB;
    this.compression = compression;
    this.backwardPassesPerStep = backwardPassesPerStep;
    this.op = op;
    this.shard = shard;
    this.zero = this.shard === 'optimizer' || this.shard === 'gradients' ? new ShardedUpdate(this, optimizer, this.shard, bucketMB * 1024 * 1024) : null;
    // A step needs every rank's block of the state: a rank whose data has ended serves the others' steps (zero-rounds.ts).
    if (this.zero) this.rounds = new PassRounds(this, null);
    if (this.shard === 'weights') {
      const shards = new WeightShards(this, options.model as ConstructorParameters<typeof WeightShards>[1]);
      this.weightShards = shards;
    }
  }

  /**
   * Runs f's forward and backward pass, as tf.variableGrads(f, varList) does. With overlap, on a pass
   * that communicates (every pass, or every k-th with backwardPassesPerStep = k), each bucket of
   * gradients starts its allreduce as soon as it is final; applyGradients then waits for them.
   */
  computeGradients(f: () => tf.Scalar, varList?: tf.Variable[]): { value: tf.Scalar; grads: tf.NamedTensorMap } {
    const k = this.backwardPassesPerStep;
    this.inFlight = null;
    // Sharded state, uneven data: a pass no setSampleCount began agrees its round here, and takes its count from it.
    if (this.rounds) this.nextSamples = this.rounds.passCount(this.nextSamples);
    // Sharded weights: their gradients are reduced inside the pass (zero-weights.ts).
    if (!this.overlap || this.passes + 1 < k || this.weightShards) {
      // Sharded weights, uneven data: a pass no setSampleCount began agrees its round here (zero-weights.ts).
      this.weightShards?.beginPassIfNot();
      let backwardAt = performance.now();
      const result = super.computeGradients(() => {
        const y = f();
        backwardAt = performance.now();
        return y;
      }, varList);
      this.stats.backwardMs += performance.now() - backwardAt;
      return result;
    }
    // With k > 1 the earlier passes' sums (by name) take this pass's gradients as they become final.
    const earlier = k > 1 && this.accumulated ? new Map(this.accumulated.names.map((n, i) => [n, this.accumulated?.sums[i]])) : null;
    const weight = this.nextSamples ?? 1;
    this.scale = k === 1 && this.weighs() ? weight : 1;
    const step = new BucketedStep(this.plan ?? planBuckets([], 0), (data, name, tail, counts) => this.submit(data, name, tail, counts), flushCollectives, variableShape,
      this.carriesSamples());
    const taken = new Set<string>();
    const tracing = timelineOn();
    let backwardAt = performance.now();
    let backwardNs = 0;
    let result: { value: tf.Scalar; grads: tf.NamedTensorMap };
    try {
      result = gradientsWithHooks(f, varList, {
        forwardEnded: () => {
          backwardAt = performance.now();
          if (tracing) backwardNs = Number(process.hrtime.bigint());
        },
        ready: (name, values) => {
          if (k === 1) {
            step.add(name, values);
          } else {
            const sum = earlier?.get(name);
            if (!sum || sum.length !== values.length) return; // applyGradients reports the difference
            addWeighted(sum, values, weight);
            for (let i = 0; i < sum.length; i++) sum[i] /= k;
            step.add(name, sum);
          }
          taken.add(name);
        },
      });
    } catch (e) {
      // Buckets of this pass may be out already, and the other ranks wait in theirs: fail them now
      // rather than let them wait for a collective this rank will never issue.
      this.abandon(e);
      throw e;
    }
    const end = performance.now();
    this.stats.backwardMs += end - backwardAt;
    if (step.firstSentAt !== null) this.stats.hiddenMs += end - Math.max(step.firstSentAt, backwardAt);
    if (tracing) timelineSpan('backward', backwardNs, Number(process.hrtime.bigint()), { bucketsSent: step.submitted });
    this.inFlight = { step, grads: result.grads, taken };
    return result;
  }

  /**
   * Averages the gradients over ranks, then lets the inner optimizer apply them. With
   * backwardPassesPerStep = k only every k-th call communicates and updates; the others accumulate.
   */
  applyGradients(variableGradients: Gradients): void {
    if (this.weightShards) {
      steps.begin(true);
      this.weightShards.applyGradients(variableGradients);
      steps.end();
      steps.begin();
      return;
    }
    const t0 = performance.now();
    // A step runs from the end of the previous applyGradients to the end of this one, so that it holds the
    // forward and backward pass that tfjs runs before calling here; the first starts here.
    steps.begin(true);
    const asArray = Array.isArray(variableGradients);
    const entries: Entry[] = asArray
      ? (variableGradients as NamedTensor[]).map((g) => ({ name: g.name, tensor: g.tensor }))
      : Object.keys(variableGradients).map((name) => ({ name, tensor: (variableGradients as tf.NamedTensorMap)[name] }));
    const pass = this.inFlight;
    this.inFlight = null;
    // Sharded state: the pass's round (where computeGradients did not run it) gave its count; the next pass agrees anew.
    if (this.rounds) {
      this.nextSamples = this.rounds.passCount(this.nextSamples);
      this.rounds.endPass();
    }
    // This pass's samples, taken: the step is weighted when its communicating pass was given them.
    const weighted = this.weighs();
    const weight = this.nextSamples ?? 1;
    this.nextSamples = null;
    this.stepSamples += weight;

    const k = this.backwardPassesPerStep;
    let averaged: Array<Float32Array | null>;
    let t1: number;
    let t2: number;
    if (pass) {
      if (k > 1) this.checkSameVariables(entries);
      // What the hooks did not send: gradients they could not follow, and any replaced since the pass; in
      // the order of their names, so that the first step's plan (made from these arrivals) is every rank's.
      for (const i of byName(entries)) {
        const e = entries[i];
        if (!e.tensor || (pass.taken.has(e.name) && pass.grads[e.name] === e.tensor)) continue;
        let values = readGradient(e) as Float32Array;
        if (k > 1) {
          if (pass.taken.has(e.name)) {
            throw new Error(`DistributedOptimizer: the gradient of '${e.name}' was replaced between computeGradients and applyGradients; ` +
              'with backwardPassesPerStep > 1 that needs overlap: false');
          }
          const sum = (this.accumulated as { sums: Array<Float32Array | null> }).sums[i];
          if (!sum) continue; // no gradient in the earlier passes: applied unaveraged, as without overlap
          addWeighted(sum, values, weight);
          for (let j = 0; j < sum.length; j++) sum[j] /= k;
          values = sum;
        }
        pass.step.add(e.name, values);
      }
      t1 = performance.now();
      const samples = weighted ? this.submitSamples(pass.step) : null;
      const { results, errors, carried } = pass.step.complete(this.stepCount());
      t2 = performance.now();
      if (k > 1) {
        this.accumulated = null;
        this.passes = 0;
      }
      if (errors.length > 0) throw explainFailure(errors, pass.step, entries);
      if (!this.plan) this.plan = planBuckets(pass.step.arrivals, this.bucketMB * 1024 * 1024);
      averaged = entries.map((e) => (e.tensor ? results.get(e.name) ?? null : null));
      if (weighted) divideBy(averaged, samples ? samples() : carried ?? 0);
    } else {
      let sums: Array<Float32Array | null> | null = null; // k > 1: the passes' averaged sums
      if (k === 1) {
        // Refused before any bucket leaves, so that no rank waits in a bucket this one will not send.
        entries.forEach(checkFloat32);
        this.scale = weighted ? weight : 1;
      } else {
        this.accumulate(entries, weight);
        this.scale = 1;
        if (++this.passes < k) {
          this.stats.submitMs += performance.now() - t0;
          return;
        }
        sums = (this.accumulated as { sums: Array<Float32Array | null> }).sums;
        for (const sum of sums) if (sum) for (let i = 0; i < sum.length; i++) sum[i] /= k;
        this.accumulated = null;
        this.passes = 0;
      }
      // Buckets in the order of the names: each goes out once full, so later read-backs overlap earlier transfers.
      const order = byName(entries).filter((i) => (sums ? sums[i] : entries[i].tensor));
      const sizes = order.map((i) => ({ name: entries[i].name, count: sums ? (sums[i] as Float32Array).length : (entries[i].tensor as tf.Tensor).size }));
      const shapes = new Map(entries.map((e) => [e.name, e.tensor ? e.tensor.shape : undefined]));
      const step = new BucketedStep(planBuckets(sizes, this.bucketMB * 1024 * 1024), (data, name, tail, counts) => this.submit(data, name, tail, counts), flushCollectives,
        (name) => shapes.get(name) ?? variableShape(name), weighted && this.compression === 'none' && !this.zero?.scatters);
      // (add copies the values into its bucket, so the backend's own array is read without a copy of ours.)
      for (const i of order) step.add(entries[i].name, sums ? (sums[i] as Float32Array) : ((entries[i].tensor as tf.Tensor).dataSync() as Float32Array));
      t1 = performance.now();
      const samples = weighted ? this.submitSamples(step) : null;
      const { results, errors, carried } = step.complete(this.stepCount());
      t2 = performance.now();
      if (errors.length > 0) throw explainFailure(errors, step, entries);
      averaged = entries.map((e, i) => ((sums ? sums[i] : e.tensor) ? results.get(e.name) ?? null : null));
      if (weighted) divideBy(averaged, samples ? samples() : carried ?? 0);
    }

    const tensors = this.zero ? [] : averaged.map((data, i) => {
      const g = entries[i].tensor;
      return data && g ? tf.tensor(data, g.shape, 'float32') : g;
    });
    try {
      if (this.zero) this.zero.apply(entries, averaged);
      else if (asArray) {
        this.optimizer.applyGradients(entries.map((e, i) => ({ name: e.name, tensor: tensors[i] as tf.Tensor })));
      } else {
        const map: tf.NamedTensorMap = {};
        entries.forEach((e, i) => { map[e.name] = tensors[i] as tf.Tensor; });
        this.optimizer.applyGradients(map);
      }
    } finally {
      tensors.forEach((t, i) => { if (t && t !== entries[i].tensor) t.dispose(); });
    }
    const t3 = performance.now();
    this.stepSamples = 0;
    this.scale = 1;
    this.stats.steps += 1;
    this.stats.submitMs += t1 - t0;
    this.stats.waitMs += t2 - t1;
    this.stats.exposedMs += t2 - t1;
    this.stats.applyMs += t3 - t2;
    steps.end();
    steps.begin();
  }

  /**
   * The number of samples this rank's next backward pass averages its loss over (its local batch size), or
   * null. With op 'avg', a step whose communicating pass was given its count averages over samples: each
   * rank's gradient weighs its count (with backwardPassesPerStep = k, each pass its own), so a global batch
   * split unevenly among the ranks gives the gradient one process computes on all of it. model.fit and
   * fitDataset call it before each batch (SampleCountCallback); a custom loop calls it before each
   * minimize (or applyGradients), on every rank alike: a rank that gives counts where another does not sends
   * one collective more than it, and the step fails with ERR_MISMATCH. A count of 0 contributes nothing.
   * Consumed by the next applyGradients. With a sharded optimizer (shard 'optimizer', 'gradients' or 'weights')
   * it begins the pass: the pass's round with the other ranks runs here (zero-rounds.ts startPass;
   * docs/zero-weights.md and docs/zero.md, "Uneven data").
   */
  setSampleCount(samples: number | null): void {
    if (samples !== null && (typeof samples !== 'number' || !Number.isInteger(samples) || samples < 0)) {
      const shown = typeof samples === 'string' ? `'${samples}'` : String(samples);
      throw new TypeError(`DistributedOptimizer.setSampleCount: argument 'samples' must be an integer >= 0 or null; received ${shown}`);
    }
    // Sharded weights: the pass's round with the other ranks, now (zero-weights.ts startPass).
    if (this.weightShards) this.weightShards.startPass(samples);
    else if (this.rounds) {
      // Sharded state: the round now; the count the pass weighs with comes from it (here, where this rank steps: `samples`).
      this.rounds.startPass(samples);
      this.nextSamples = this.rounds.passCount(samples);
    } else this.nextSamples = samples;
  }

  /**
   * @internal joinEpoch with a sharded optimizer (broadcast.ts): serves the other ranks' remaining passes with
   * shadow passes of `model` until no rank steps (zero-rounds.ts); resolves to the rank that stepped last.
   * null with shard: 'none'.
   */
  joinShards(model: unknown): Promise<number> | null {
    if (this.weightShards) return this.weightShards.joinEpoch();
    return this.rounds ? this.rounds.joinEpoch(model as Model) : null;
  }

  /** Whether the coming step averages over samples: op 'avg', and a count given for the pass. */
  private weighs(): boolean {
    return this.op === 'avg' && !this.skip && this.nextSamples !== null;
  }

  /** Whether the coming step's count rides in its last bucket (float32 buckets: no compression). */
  private carriesSamples(): boolean {
    return this.weighs() && this.compression === 'none' && !this.zero?.scatters;
  }

  /** The step's count as it travels: its passes' weights over k, as the buckets carry their gradients over k. */
  private stepCount(): number {
    const count = this.stepSamples / this.backwardPassesPerStep;
    this.stepSamples = 0;
    return count;
  }

  /**
   * A step whose last bucket does not carry its count (compression): starts the float32 allreduce of the
   * count, queued before the last bucket so the two go out in one batch; returns the wait for the count
   * averaged over ranks. null where the bucket carries it.
   */
  private submitSamples(step: BucketedStep): (() => number) | null {
    if (step.carries) return null;
    const work = hora.allreduce(Float32Array.of(this.stepCount()), { op: 'avg', name: 'tfjs samples', inplace: true });
    return () => work.wait()[0];
  }

  /** Starts one bucket's allreduce (shard 'gradients': reduceScatter); returns a function that waits for it and gives the float32 result. */
  private submit(data: Float32Array, name: string, tail: boolean, counts: readonly number[]): () => Float32Array {
    if (this.skip) return () => data;
    if (this.scale !== 1) {
      // Not the carried count (tail): it is a count, not a gradient.
      const end = tail ? data.length - 1 : data.length;
      if (this.scale === 0) data.fill(0, 0, end);
      else for (let i = 0; i < end; i++) data[i] *= this.scale;
    }
    if (this.zero?.scatters) return this.zero.reduceScatter(data, name, counts, this.op, this.compression);
    if (this.compression === 'none') {
      const work = hora.allreduce(data, { op: this.op, name, inplace: true });
      return () => work.wait();
    }
    const { bits, dtype } = compress(data, this.compression);
    const work = hora.allreduce(bits, { op: this.op, name, inplace: true, dtype });
    return () => decompress(work.wait(), dtype, data);
  }

  /** A pass that threw: tells the other ranks, so none waits for buckets this rank will not send. */
  private abandon(e: unknown): void {
    this.accumulated = null;
    this.passes = 0;
    this.stepSamples = 0;
    try {
      hora.failPeers(`rank ${hora.rank()}: DistributedOptimizer's backward pass threw: ${(e as Error)?.message ?? String(e)}`);
    } catch {
      // Not initialised, or shut down: there is nobody to tell.
    }
  }

  /** backwardPassesPerStep > 1: every pass of a step must have the same gradients. */
  private checkSameVariables(entries: Entry[]): void {
    const names = this.accumulated?.names ?? [];
    if (names.length !== entries.length || names.some((n, i) => n !== entries[i].name)) {
      throw new Error(`DistributedOptimizer: backward pass ${this.passes + 1} of ${this.backwardPassesPerStep} got gradients for [${entries.map((e) => e.name).join(', ')}], ` +
        `but the earlier passes of this step had [${names.join(', ')}]; every pass of a step must update the same variables`);
    }
  }

  /** Adds a pass's gradients, times its weight (its samples, or 1), to the step's sums. */
  private accumulate(entries: Entry[], weight: number): void {
    if (!this.accumulated) {
      const sums = entries.map((e) => readGradient(e));
      if (weight !== 1) for (const sum of sums) if (sum) sum.fill(0);
      this.accumulated = { names: entries.map((e) => e.name), sums };
      if (weight === 1) return;
    } else {
      this.checkSameVariables(entries);
    }
    const { sums } = this.accumulated;
    entries.forEach((e, i) => {
      const sum = sums[i];
      if (!e.tensor || !sum) return;
      addWeighted(sum, e.tensor.dataSync() as Float32Array, weight);
    });
  }

  /** The inner optimizer's learning rate (undefined where it has none). */
  get learningRate(): number | undefined {
    return (this.optimizer as unknown as { learningRate?: number }).learningRate;
  }

  set learningRate(lr: number | undefined) {
    setLearningRate(this.optimizer, lr as number);
  }

  get iterations(): number {
    return this.optimizer.iterations;
  }

  /** The inner optimizer's weights; with shard: 'weights', each slot of a sharded weight allgathered (call it on every rank). */
  getWeights(): Promise<NamedTensor[]> {
    return this.zero ? this.zero.getWeights() : this.weightShards ? this.weightShards.getWeights() : this.optimizer.getWeights();
  }

  setWeights(weightValues: NamedTensor[]): Promise<void> {
    return this.zero ? this.zero.setWeights(weightValues) : this.weightShards ? this.weightShards.setWeights(weightValues) : this.optimizer.setWeights(weightValues);
  }

  getConfig(): tf.serialization.ConfigDict {
    return this.optimizer.getConfig();
  }

  /** The inner optimizer's class, so model.save() records an optimizer that tfjs can load anywhere. */
  getClassName(): string {
    return this.optimizer.getClassName();
  }

  /**
   * @internal Forgets the backward passes of a step not yet applied (their sums, and buckets in flight):
   * an elastic restore goes back to a commit taken between steps, so the passes after it are lost work.
   */
  discardPartialStep(): void {
    this.accumulated = null;
    this.passes = 0;
    this.stepSamples = 0;
    this.nextSamples = null;
    this.inFlight = null;
    this.weightShards?.discardPartialStep();
    this.rounds?.endPass();
  }

  /**
   * @internal Forgets the bucket plan learnt on the first overlapped step: after ElasticState.sync every
   * rank, a worker that just joined included, packs its next step by the first step's rule (names' order),
   * then learns the same plan again; else the ranks that learnt one would pack otherwise than the new one.
   */
  forgetBucketPlan(): void {
    this.plan = null;
  }

  dispose(): void {
    this.accumulated = null;
    this.inFlight = null;
    this.zero?.dispose();
    this.optimizer.dispose();
  }
}

/** The shape of the registered variable of this name, where there is one (its gradient has that shape). */
function variableShape(name: string): readonly number[] | undefined {
  return tf.engine().registeredVariables[name]?.shape;
}

/** Sets an optimizer's learning rate the way its class expects (SGD caches it in a tensor). */
export function setLearningRate(optimizer: tf.Optimizer, lr: number): void {
  if (typeof lr !== 'number' || !Number.isFinite(lr) || lr < 0) {
    throw new TypeError(`setLearningRate: the learning rate must be a finite number >= 0; received ${String(lr)}`);
  }
  const o = optimizer as unknown as { learningRate?: number; setLearningRate?: (lr: number) => void };
  // Not instanceof: tf.Optimizer's Symbol.hasInstance (inherited) says yes to every optimizer.
  if (DistributedOptimizer.prototype.isPrototypeOf(optimizer)) (optimizer as DistributedOptimizer).learningRate = lr;
  else if (typeof o.setLearningRate === 'function') o.setLearningRate(lr);
  else if (typeof o.learningRate === 'number') o.learningRate = lr;
  else throw new TypeError(`setLearningRate: ${optimizer.getClassName()} has no learningRate to set`);
}
