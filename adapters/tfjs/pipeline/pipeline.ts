/**
 * pipeline(model, options): a tfjs model cut into stages, one per rank, trained by streaming
 * micro-batches through them (docs/pipeline.md).
 *
 * Rank layout: with size = stages x replicas, rank = replica x stages + stage; stage s of replica r
 * talks to ranks r x stages + s - 1 and + 1. Every rank calls every method (fit, trainOnBatch, evaluate,
 * predict, getWeights, toModel, save) in the same order, with the same arguments: ranks of one replica
 * pass the same data, of which the first stage reads x and the last y.
 *
 * This file makes the pipeline (options checked and agreed in options.ts, the model cut, this rank's
 * stage built) and holds the whole model's weights; a batch is run by the executor (executor.ts), and
 * fit, evaluate and predict are its loops (loops.ts).
 */
import { tf, tfl } from '../framework';
import type { LayersModel } from '@tensorflow/tfjs-layers';
import * as hora from '../../../ts/index';
import { HoraError, makeLogger } from '../../../ts/internal';
import { Layer, layerChain, profileLayers } from './layers';
import { Plan as CostPlan, planPartition } from './partition';
import { ScheduleKind } from './schedule';
import { Stage } from './stage';
import { agree, Checked, checkOptions, PipelineOptions, shapeText, shown } from './options';
import { concatenated, Executor, PipelineStats } from './executor';
import * as loops from './loops';
import type { PipelineFitArgs, PipelineHistory } from './loops';

export type { PipelineOptions } from './options';
export type { BatchStats, PipelineStats } from './executor';
export { microBatchSizes } from './executor';
export type { PipelineFitArgs, PipelineCallback, PipelineHistory } from './loops';

/** Where the model was cut, and what the planner predicted for it. */
export interface PipelinePlan {
  /** Layers per stage. */
  counts: number[];
  /** Index (in the chain of layers) of each stage's first layer. */
  firstLayer: number[];
  /** Names of each stage's layers. */
  layers: string[][];
  /** Predicted seconds per micro-batch of each stage (profile batch size), or null for a manual partition. */
  stageTimes: number[] | null;
  /** How the cut was chosen. */
  partition: 'auto' | 'manual';
}

const log = makeLogger('pipeline');
/** Tags of pipelines live above the ones users pick for their own messages first (0, 1, ...). */
const TAG_BASE = 2 ** 30;
let pipelinesMade = 0;

export class Pipeline {
  /** This rank's stage, 0-based. */
  readonly stage: number;
  readonly stages: number;
  /** This rank's replica (rank = replica x stages + stage). */
  readonly replica: number;
  readonly replicas: number;
  readonly microBatches: number;
  readonly schedule: ScheduleKind;
  /** Whether a backward runs its micro-batch's forward again (true) or replays its kept record. */
  readonly recompute: boolean;
  readonly deferWeightGradients: boolean;
  readonly plan: PipelinePlan;
  readonly stats: PipelineStats;
  private readonly stageOf: Stage;
  private readonly rank: number;
  private readonly topology: unknown;
  /** For each of the whole model's weights in model.getWeights() order: [stage, index in the stage model's weights]. */
  private readonly weightOwner: Array<[number, number]>;
  private readonly weightShapes: number[][];
  /** Runs this rank's share of each batch (executor.ts). */
  private readonly executor: Executor;
  private optimizer: tf.Optimizer | null = null;

  constructor(model: LayersModel, options: PipelineOptions) {
    const rank = hora.rank();
    const size = hora.size();
    let layers: Layer[] | null = null;
    let opts: Checked | null = null;
    let refused: unknown = null;
    try {
      layers = layerChain(model);
      opts = checkOptions(options, layers.length, size);
    } catch (e) {
      refused = e;
    }
    agree(layers, opts, refused);
    const chain = layers as Layer[];
    const o = opts as Checked;
    this.rank = rank;
    this.stages = o.stages;
    this.replicas = size / o.stages;
    this.stage = rank % o.stages;
    this.replica = Math.floor(rank / o.stages);
    this.microBatches = o.microBatches;
    this.schedule = o.schedule;
    this.recompute = o.recompute;
    this.deferWeightGradients = o.deferWeightGradients;
    const id = pipelinesMade++;
    const tags = { activation: TAG_BASE + 4 * id, gradient: TAG_BASE + 4 * id + 1, control: TAG_BASE + 4 * id + 2, output: TAG_BASE + 4 * id + 3 };

    const inputShape = (model.inputs[0].shape as Array<number | null>).slice();
    const shapes = [inputShape, ...chain.map((l) => (l.outputShape as Array<number | null>).slice())];
    this.plan = this.cut(chain, o, inputShape);
    const { counts, firstLayer } = this.plan;
    const inputShapes = firstLayer.map((a) => shapes[a]);
    for (let s = 1; s < this.stages; s++) {
      const cutShape = inputShapes[s];
      if (cutShape.slice(1).some((d) => d === null)) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: option 'partition' cuts after layer '${chain[firstLayer[s] - 1].name}', whose output shape ` +
          `${shapeText(cutShape)} is not fixed (only the batch axis may be null); received ${shown(counts)}`, rank);
      }
    }
    const mine = chain.slice(firstLayer[this.stage], firstLayer[this.stage] + counts[this.stage]);
    this.stageOf = new Stage(mine, inputShapes[this.stage], this.stage === 0, this.stage === this.stages - 1, o.deferWeightGradients);
    let group: hora.Group | null = null;
    if (this.replicas > 1) {
      // Every rank makes every stage's group, in stage order (newGroup is a world collective); a stage's
      // replicas then start from replica 0's weights.
      for (let s = 0; s < this.stages; s++) {
        const g = hora.newGroup(Array.from({ length: this.replicas }, (_, r) => r * this.stages + s)).wait();
        if (g) group = g;
      }
      const weights = this.stageOf.model.weights;
      const flat = concatenated(weights.map((w) => w.read().dataSync() as Float32Array));
      const root = (group as hora.Group).broadcast(flat, { root: 0, name: 'pipeline.replicas.weights' }).wait();
      let at = 0;
      for (const w of weights) {
        const size = w.shape.reduce((a: number, b) => a * (b ?? 1), 1);
        const t = tf.tensor(root.subarray(at, at + size), w.shape as number[], 'float32');
        w.write(t);
        at += size;
      }
    }

    // The whole model's weight order, mapped to the stage that holds each weight.
    const layerIndex = new Map(chain.map((l, i) => [l, i]));
    const stageOfLayer = (i: number) => firstLayer.filter((a) => a <= i).length - 1;
    const offsetInStage = new Map<Layer, number>();
    firstLayer.forEach((a, s) => {
      let at = 0;
      for (let i = a; i < a + counts[s]; i++) { offsetInStage.set(chain[i], at); at += chain[i].weights.length; }
    });
    this.weightOwner = model.weights.map((w) => {
      const layer = chain.find((l) => l.weights.includes(w as never)) as Layer;
      const i = layerIndex.get(layer) as number;
      return [stageOfLayer(i), (offsetInStage.get(layer) as number) + layer.weights.indexOf(w as never)];
    });
    this.weightShapes = model.weights.map((w) => w.shape.slice() as number[]);
    this.topology = model.toJSON(null, false);
    this.executor = new Executor({
      rank, stage: this.stage, stages: this.stages, replica: this.replica, replicas: this.replicas,
      microBatches: this.microBatches, schedule: this.schedule, recompute: this.recompute, stageModel: this.stageOf,
      inputShapes, outputShape: shapes[shapes.length - 1],
      firstLayerName: firstLayer.map((a) => chain[a].name), lastLayerName: firstLayer.map((a, s) => chain[a + counts[s] - 1].name),
      tags, group,
    });
    this.stats = this.executor.stats;
    if (rank === 0) {
      const times = this.plan.stageTimes;
      log('INFO', `${this.stages} stages x ${this.replicas} replica(s), ${this.microBatches} micro-batches, schedule ${this.schedule}, ` +
        `backward ${this.recompute ? 'recomputing the forward' : 'from the kept record'}${o.deferWeightGradients ? ', Dense kernel gradients once per batch' : ''}, ` +
        `partition ${this.plan.partition}: ${this.plan.layers.map((ls, s) => `stage ${s}: ${ls.length} layers ${ls[0]}..${ls[ls.length - 1]}` +
        (times ? ` (predicted ${(times[s] * 1000).toFixed(3)} ms per micro-batch of ${o.profileBatchSize})` : '')).join('; ')}`);
    }
  }

  /** The cut: the manual partition, or rank 0's profile planned and broadcast. */
  private cut(chain: Layer[], o: Checked, inputShape: Array<number | null>): PipelinePlan {
    let counts: number[];
    let stageTimes: number[] | null = null;
    if (o.partition !== 'auto') {
      counts = o.partition;
    } else {
      const S = o.stages;
      const out = new Float64Array(2 * S);
      let failure = '';
      if (this.rank === 0) {
        try {
          const sample = tf.tidy(() => tf.randomUniform([o.profileBatchSize, ...inputShape.slice(1).map((d) => d ?? 1)]));
          const profiles = profileLayers(chain, sample);
          sample.dispose();
          const plan: CostPlan = planPartition(profiles, { stages: S, microBatches: o.microBatches, replicas: hora.size() / S, rematerialize: o.recompute });
          out.set(plan.counts, 0);
          out.set(plan.stageTimes, S);
        } catch (e) {
          failure = (e as Error).message;
          out.fill(NaN);
        }
      }
      const got = hora.broadcast(out, { root: 0, name: 'pipeline.plan' }).wait();
      if (Number.isNaN(got[0])) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: option 'partition' is 'auto' but profiling the layers on rank 0 failed${failure ? `: ${failure}` : ''}`, this.rank, 0);
      }
      counts = Array.from(got.subarray(0, S));
      stageTimes = Array.from(got.subarray(S));
    }
    const firstLayer: number[] = [];
    let at = 0;
    for (const n of counts) { firstLayer.push(at); at += n; }
    return {
      counts, firstLayer, stageTimes,
      layers: counts.map((n, s) => chain.slice(firstLayer[s], firstLayer[s] + n).map((l) => l.name)),
      partition: o.partition === 'auto' ? 'auto' : 'manual',
    };
  }

  /** The optimizer, loss and metrics, as LayersModel.compile takes them. Every rank calls it. */
  compile(args: { optimizer: tf.Optimizer | string; loss: string | ((yTrue: tf.Tensor, yPred: tf.Tensor) => tf.Tensor); metrics?: unknown }): void {
    if (args === null || typeof args !== 'object') throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.compile: argument 'args' must be an object {optimizer, loss, metrics}; received ${shown(args)}`, this.rank);
    const optimizer = typeof args.optimizer === 'string' ? null : args.optimizer;
    this.stageOf.compile(args as { optimizer: tf.Optimizer; loss: unknown; metrics?: unknown });
    this.optimizer = optimizer ?? (this.stageOf.model as unknown as { optimizer: tf.Optimizer }).optimizer;
  }

  /** The optimizer, once the pipeline is compiled and no batch has failed. */
  private ready(call: string): tf.Optimizer {
    const { broken } = this.executor;
    if (broken) throw new HoraError(broken.code, `pipeline.${call}: the pipeline failed earlier and cannot go on (${broken.message})`, this.rank);
    if (!this.optimizer) throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: call pipe.compile({optimizer, loss}) first`, this.rank);
    return this.optimizer;
  }

  /** One training batch; the update applied once. Resolves with the loss ([loss, ...metrics] with metrics), on every rank. */
  async trainOnBatch(x: tf.Tensor | null, y: tf.Tensor | null): Promise<number | number[]> {
    return loops.trainOnBatch(this.executor, this.ready('trainOnBatch'), x, y);
  }

  /** Loss (and metrics) over x, y in batches of batchSize, as scalars on every rank (model.evaluate). */
  async evaluate(x: tf.Tensor | null, y: tf.Tensor | null, args: { batchSize?: number } = {}): Promise<tf.Scalar | tf.Scalar[]> {
    this.ready('evaluate');
    return loops.evaluate(this.executor, x, y, args);
  }

  /** The model's output for x, in batches of batchSize, on every rank of the replica. */
  async predict(x: tf.Tensor | null, args: { batchSize?: number } = {}): Promise<tf.Tensor> {
    this.ready('predict');
    return loops.predict(this.executor, x, args);
  }

  /**
   * Trains for `epochs` over x, y in batches of batchSize (model.fit): per-epoch logs (loss, metrics,
   * val_ ones) on every rank, callbacks called on every rank.
   */
  async fit(x: tf.Tensor | null, y: tf.Tensor | null, args: PipelineFitArgs = {}): Promise<PipelineHistory> {
    return loops.fit(this.executor, this.ready('fit'), x, y, args);
  }

  /** The whole model's weights, in model.getWeights() order, on every rank (each stage broadcasts its own). */
  async getWeights(): Promise<tf.Tensor[]> {
    const own = this.stageOf.model.weights;
    const works = this.weightShapes.map((shape, i) => {
      const [stage, index] = this.weightOwner[i];
      const count = shape.reduce((a, b) => a * b, 1);
      const data = stage === this.stage && this.replica === 0 ? Float32Array.from(own[index].read().dataSync() as Float32Array) : new Float32Array(count);
      // Replica 0's copy (rank = stage): the replicas of a stage hold the same weights.
      return hora.broadcast(data, { root: stage, name: `pipeline.weight${i}`, inplace: true });
    });
    const values = await Promise.all(works);
    return values.map((v, i) => tf.tensor(v, this.weightShapes[i], 'float32'));
  }

  /** Sets the whole model's weights (model.getWeights() order); each stage keeps its own. Every rank calls it. */
  setWeights(weights: tf.Tensor[]): void {
    if (!Array.isArray(weights) || weights.length !== this.weightShapes.length) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.setWeights: argument 'weights' must be an array of the model's ${this.weightShapes.length} weights; received ${Array.isArray(weights) ? `${weights.length} entries` : shown(weights)}`, this.rank);
    }
    weights.forEach((w, i) => {
      const want = this.weightShapes[i];
      if (!(w instanceof tf.Tensor) || w.shape.length !== want.length || w.shape.some((d, j) => d !== want[j])) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.setWeights: weight ${i} must be a tf.Tensor of shape ${shapeText(want)}; received ${w instanceof tf.Tensor ? shapeText(w.shape) : shown(w)}`, this.rank);
      }
    });
    const own = this.stageOf.model.weights;
    weights.forEach((w, i) => {
      const [stage, index] = this.weightOwner[i];
      if (stage === this.stage) own[index].write(tf.clone(w));
    });
  }

  /** The whole model as a tf.LayersModel with the trained weights, on every rank (a collective). */
  async toModel(): Promise<LayersModel> {
    const weights = await this.getWeights();
    try {
      const model = await tfl.models.modelFromJSON({ modelTopology: this.topology as tf.io.ModelJSON['modelTopology'] } as never);
      model.setWeights(weights);
      return model;
    } finally {
      tf.dispose(weights);
    }
  }

  /** Saves the whole model from rank 0 (model.save's handler or URL); every rank calls it. Null elsewhere. */
  async save(handlerOrURL: string | tf.io.IOHandler): Promise<tf.io.SaveResult | null> {
    const model = await this.toModel();
    try {
      return this.rank === 0 ? await model.save(handlerOrURL) : null;
    } finally {
      model.dispose();
    }
  }
}

/**
 * Cuts `model` (the same tf.Sequential or chain of layers on every rank) into options.stages stages and
 * returns this rank's part of the pipeline. Every rank calls it; it returns once every rank has (the
 * ranks compare their models and options, and with partition 'auto' rank 0's plan is broadcast).
 */
export function pipeline(model: LayersModel, options: PipelineOptions): Pipeline {
  return new Pipeline(model, options);
}
