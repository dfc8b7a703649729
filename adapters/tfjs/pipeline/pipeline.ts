/**
 * pipeline(model, options): a tfjs model cut into stages, one per rank, trained by streaming
 * micro-batches through them (docs/pipeline.md).
 *
 * Rank layout: with size = stages x replicas, rank = replica x stages + stage; stage s of replica r
 * talks to ranks r x stages + s - 1 and + 1. Every rank calls every method (fit, trainOnBatch, evaluate,
 * predict, getWeights, toModel, save) in the same order, with the same arguments: ranks of one replica
 * pass the same data, of which the first stage reads x and the last y.
 *
 * One batch is one round (rounds.ts): each stage runs its schedule's instructions (schedule.ts), an
 * activation coming in from the stage before under one tag and a gradient from the stage after under
 * another, its sends posted without waiting on them (1F1B deadlocks otherwise); then every rank tells
 * every other it is done, the last stage handing out the loss, and each stage applies the sum of its
 * micro-batches' gradients once. A failure anywhere ends the round on every rank with an error naming
 * the stage and rank where it began.
 */
import { tf, tfl } from '../framework';
import type { LayersModel } from '@tensorflow/tfjs-layers';
import * as hora from '../../../ts/index';
import { HoraError, checkOptionKeys, knownOptions } from '../../../ts/errors';
import { makeLogger } from '../../../ts/config';
import { flushCollectives, timelineOn, timelineSpan } from '../../../ts/hora';
import { reportPipelineBatch, steps } from '../../../ts/stats';
import { Layer, layerChain, profileLayers } from './layers';
import { Plan as CostPlan, planPartition, validatePartition } from './partition';
import { Instruction, ScheduleKind, stageSchedule } from './schedule';
import { Round, RoundReport } from './rounds';
import { BYTES_PER_FLOAT, disposeRecord, ForwardRecord, seeded, Stage } from './stage';

export interface PipelineOptions {
  /** Stages the model is cut into; divides hora.size() (size / stages replicas of each stage). */
  stages: number;
  /** Micro-batches per batch, integer >= 1 and <= the batch size. Default: 4 x stages. */
  microBatches?: number;
  /** 'gpipe' (all forwards, then all backwards) or '1f1b' (PipeDream-Flush). Default '1f1b'. */
  schedule?: ScheduleKind;
  /** 'auto' (profiled on rank 0, the plan broadcast) or layer counts per stage such as [4, 3]. Default 'auto'. */
  partition?: 'auto' | number[];
  /** Samples in the batch that 'auto' profiles each layer on. Default 32. */
  profileBatchSize?: number;
  /**
   * Backward by running the micro-batch's forward again (true: GPipe's re-materialization, less memory)
   * or from the forward's kept record (false, the default: no work repeated). docs/pipeline.md has the costs.
   */
  recompute?: boolean;
  /**
   * Compute each Dense layer's kernel gradient once per batch, from every micro-batch's layer input and
   * output gradient kept until the batch's last backward (true), instead of once per micro-batch (false,
   * the default). Faster (one product over the whole batch), but a stage holds those values for the
   * whole batch, as GPipe holds its records. docs/pipeline.md has the costs.
   */
  deferWeightGradients?: boolean;
}

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

/** What one batch cost, per stage. */
export interface BatchStats {
  /** Milliseconds each stage computed (forwards and backwards), by stage. */
  busyMs: number[];
  /** Milliseconds from the round's start to the last stage's last instruction. */
  wallMs: number;
  /** 1 - sum(busyMs) / (stages x wallMs): the share of stage-time spent waiting. */
  bubbleFraction: number;
}

export interface PipelineStats {
  /** Training batches run. */
  batches: number;
  /** The last training batch. */
  lastBatch: BatchStats | null;
  /** Summed over all training batches. */
  total: BatchStats;
  /** Bytes of this stage's weights. */
  weightBytes: number;
  /** The most bytes this stage held at once for backwards still to run (inputs, and kept records). */
  peakStashBytes: number;
  /** The most micro-batches this stage held stashed at once. */
  peakStashMicroBatches: number;
}

export interface PipelineFitArgs {
  /** Samples per batch (of one replica). Default 32. */
  batchSize?: number;
  epochs?: number;
  /** Shuffle the samples every epoch, the same way on every rank. Default true. */
  shuffle?: boolean;
  /** [xVal, yVal]: evaluated after every epoch, giving val_loss and val_<metric>. */
  validationData?: [tf.Tensor | null, tf.Tensor | null];
  /** Objects with any of onTrainBegin, onEpochBegin, onBatchBegin, onBatchEnd, onEpochEnd, onTrainEnd. */
  callbacks?: PipelineCallback | PipelineCallback[];
  /** 0: silent (default); 1: one line per epoch on rank 0. */
  verbose?: number;
}

type Logs = Record<string, number>;
export interface PipelineCallback {
  onTrainBegin?(logs?: Logs): unknown;
  onEpochBegin?(epoch: number, logs?: Logs): unknown;
  onBatchBegin?(batch: number, logs?: Logs): unknown;
  onBatchEnd?(batch: number, logs?: Logs): unknown;
  onEpochEnd?(epoch: number, logs?: Logs): unknown;
  onTrainEnd?(logs?: Logs): unknown;
  setParams?(params: Record<string, unknown>): unknown;
}

export interface PipelineHistory {
  epoch: number[];
  history: Record<string, number[]>;
  params: Record<string, unknown>;
}

const log = makeLogger('pipeline');
const SCHEDULE_CODES: Record<string, number> = { gpipe: 1, '1f1b': 2 };
/** Tags of pipelines live above the ones users pick for their own messages first (0, 1, ...). */
const TAG_BASE = 2 ** 30;
let pipelinesMade = 0;

function shown(v: unknown): string {
  if (typeof v === 'string') return `'${v}'`;
  if (Array.isArray(v)) return `[${v.map(shown).join(', ')}]`;
  if (v === null) return 'null';
  if (typeof v === 'object') return 'an object';
  return String(v);
}

function invalid(option: string, expected: string, received: unknown, why = ''): HoraError {
  return new HoraError('ERR_INVALID_ARGUMENT', `pipeline: option '${option}' must be ${expected}; received ${shown(received)}${why}`, hora.rank());
}

/** FNV-1a of a string, as a number a float64 holds exactly. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

const shapeText = (s: ReadonlyArray<number | null>) => `[${s.map((d) => (d === null ? 'null' : String(d))).join(', ')}]`;

function concatenated(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

/** Micro-batch sizes for n samples in m micro-batches: the first n % m one larger. */
export function microBatchSizes(n: number, m: number): number[] {
  const base = Math.floor(n / m);
  return Array.from({ length: m }, (_, k) => base + (k < n % m ? 1 : 0));
}

interface Checked {
  stages: number;
  microBatches: number;
  schedule: ScheduleKind;
  partition: 'auto' | number[];
  profileBatchSize: number;
  recompute: boolean;
  deferWeightGradients: boolean;
}

/** Why a world of one cannot hold `stages` stages, and how to start more ranks. */
function aloneHint(stages: number): string {
  const script = process.argv[1] ? process.argv[1].split(/[\\/]/).pop() : 'train.js';
  return `: this job has one rank (started without a launcher, it runs alone). Start a rank per stage, or a multiple of ${stages}, ` +
    `with the launcher: npx hora run -np ${stages} node ${script}`;
}

const OPTIONS = knownOptions<PipelineOptions>({
  stages: true, microBatches: true, schedule: true, partition: true, profileBatchSize: true, recompute: true, deferWeightGradients: true,
}, '');

const EVALUATE_OPTIONS = knownOptions<{ batchSize?: number }>({ batchSize: true }, '');
const FIT_OPTIONS = knownOptions<PipelineFitArgs>({
  batchSize: true, epochs: true, shuffle: true, validationData: true, callbacks: true, verbose: true,
}, '');

function checkOptions(options: unknown, layerCount: number, size: number): Checked {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) throw invalid('options', 'an object such as {stages: 2}', options);
  const o = options as PipelineOptions;
  checkOptionKeys('pipeline', o, OPTIONS, hora.rank());
  const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 1;
  const { stages } = o;
  if (!isCount(stages)) throw invalid('stages', 'an integer >= 1', stages);
  if (size % stages !== 0) throw invalid('stages', `a divisor of hora.size() (${size})`, stages, size === 1 ? aloneHint(stages) : '');
  if (stages > layerCount) throw invalid('stages', `at most the model's ${layerCount} layers (a stage cannot be empty)`, stages);
  const microBatches = o.microBatches ?? 4 * stages;
  if (!isCount(microBatches)) throw invalid('microBatches', 'an integer >= 1', microBatches);
  const schedule = o.schedule ?? '1f1b';
  if (schedule !== 'gpipe' && schedule !== '1f1b') throw invalid('schedule', "'gpipe' or '1f1b'", schedule);
  const partition = o.partition ?? 'auto';
  if (partition !== 'auto') validatePartition(partition, layerCount, stages, hora.rank());
  const profileBatchSize = o.profileBatchSize ?? 32;
  if (!isCount(profileBatchSize)) throw invalid('profileBatchSize', 'an integer >= 1', profileBatchSize);
  const recompute = o.recompute ?? !Stage.canRecord();
  if (typeof recompute !== 'boolean') throw invalid('recompute', 'true or false', recompute);
  if (!recompute && !Stage.canRecord()) throw invalid('recompute', 'true with this version of tfjs (its engine has no tape to keep)', recompute);
  const deferWeightGradients = o.deferWeightGradients ?? false;
  if (typeof deferWeightGradients !== 'boolean') throw invalid('deferWeightGradients', 'true or false', deferWeightGradients);
  if (deferWeightGradients && !Stage.canRecord()) throw invalid('deferWeightGradients', 'false with this version of tfjs (its engine has no tape to replay)', deferWeightGradients);
  return { stages, microBatches, schedule, partition: partition === 'auto' ? 'auto' : partition.slice(), profileBatchSize, recompute, deferWeightGradients };
}

/** What every rank must agree on, as numbers (hashes where the field is large). */
const FIELDS = ['refused', 'layer count', 'layer shapes', 'stages', 'microBatches', 'schedule', 'partition', 'profileBatchSize', 'recompute', 'deferWeightGradients'] as const;

function shapesOf(layers: Layer[]): string[] {
  return layers.map((l) => JSON.stringify([l.getClassName(), l.outputShape, l.weights.map((w) => w.shape)]));
}

/**
 * Every rank's model and options, compared. Ranks that refused their options throw their own error; the
 * others say which rank refused. Blocks (Work.wait) until every rank has called pipeline().
 */
function agree(layers: Layer[] | null, opts: Checked | null, refused: unknown): void {
  const mine = new Float64Array(FIELDS.length).fill(NaN);
  mine[0] = refused ? 1 : 0;
  if (layers) {
    mine[1] = layers.length;
    mine[2] = hash(shapesOf(layers).join('|'));
  }
  if (opts) {
    mine[3] = opts.stages;
    mine[4] = opts.microBatches;
    mine[5] = SCHEDULE_CODES[opts.schedule];
    mine[6] = opts.partition === 'auto' ? 0 : hash(opts.partition.join(','));
    mine[7] = opts.profileBatchSize;
    mine[8] = opts.recompute ? 1 : 0;
    mine[9] = opts.deferWeightGradients ? 1 : 0;
  }
  const size = hora.size();
  const all = hora.allgather(mine, { name: 'pipeline.agree' }).wait();
  const row = (r: number) => all.subarray(r * FIELDS.length, (r + 1) * FIELDS.length);
  if (refused) throw refused;
  const refusers = Array.from({ length: size }, (_, r) => r).filter((r) => row(r)[0] === 1);
  if (refusers.length > 0) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: rank ${refusers.join(', ')} refused its model or options (its own error says why); ` +
      'every rank must call pipeline() with the same model and options', hora.rank(), refusers[0]);
  }
  const show = (f: number, v: number) => {
    if (f === 5) return shown(Object.keys(SCHEDULE_CODES).find((k) => SCHEDULE_CODES[k] === v));
    if (f === 8 || f === 9) return String(v === 1);
    if (f === 2 || f === 6) return v === 0 && f === 6 ? "'auto'" : `#${v.toString(16)}`;
    return String(v);
  };
  for (let f = 1; f < FIELDS.length; f++) {
    const values = Array.from({ length: size }, (_, r) => row(r)[f]);
    if (values.every((v) => Object.is(v, values[0]))) continue;
    let detail = values.map((v, r) => `rank ${r}: ${show(f, v)}`).join(', ');
    if (f === 2 && layers) {
      // Same count, different shapes: find the first layer that differs.
      const per = Float64Array.from(shapesOf(layers).map(hash));
      const allPer = hora.allgather(per, { name: 'pipeline.agree.layers' }).wait();
      for (let i = 0; i < layers.length; i++) {
        const byRank = Array.from({ length: size }, (_, r) => allPer[r * layers.length + i]);
        if (byRank.some((v) => v !== byRank[0])) {
          detail = `layer ${i} ('${layers[i].name}' here: output ${shapeText(layers[i].outputShape as number[])}, weights ` +
            `${layers[i].weights.map((w) => shapeText(w.shape)).join(' ') || 'none'}) differs between ranks ` +
            `${Array.from(new Set(byRank)).map((h) => byRank.map((v, r) => (v === h ? r : -1)).filter((r) => r >= 0).join(', ')).join(' and ')}`;
          break;
        }
      }
    }
    throw new HoraError('ERR_MISMATCH', `pipeline: the ranks were given different ${FIELDS[f] === 'layer shapes' || FIELDS[f] === 'layer count' ? 'models' : 'options'}: ` +
      `'${FIELDS[f]}' differs (${detail}); every rank must call pipeline() with the same model and options`, hora.rank());
  }
}

/** A tensor given to fit/evaluate/predict, checked; null where this stage does not read it. */
function checkData(call: string, name: string, v: unknown, needed: boolean): tf.Tensor | null {
  if (v === null || v === undefined) {
    if (needed) throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: argument '${name}' must be a tf.Tensor on this stage; received ${String(v)}`, hora.rank());
    return null;
  }
  if (!(v instanceof tf.Tensor) || v.rank < 1) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: argument '${name}' must be a tf.Tensor with a batch axis; received ${v instanceof tf.Tensor ? `a scalar` : typeof v}`, hora.rank());
  }
  return v;
}

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
  /** inputShapes[s]: what stage s's first layer takes (batch axis null). */
  private readonly inputShapes: Array<Array<number | null>>;
  private readonly outputShape: Array<number | null>;
  private readonly firstLayerName: string[];
  private readonly lastLayerName: string[];
  private readonly topology: unknown;
  /** For each of the whole model's weights in model.getWeights() order: [stage, index in the stage model's weights]. */
  private readonly weightOwner: Array<[number, number]>;
  private readonly weightShapes: number[][];
  private readonly tags: { activation: number; gradient: number; control: number; output: number };
  /** The ranks holding this stage in every replica (null with one replica): their gradients are averaged. */
  private readonly group: hora.Group | null = null;
  private optimizer: tf.Optimizer | null = null;
  private batchesRun = 0;
  private broken: HoraError | null = null;

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
    this.tags = { activation: TAG_BASE + 4 * id, gradient: TAG_BASE + 4 * id + 1, control: TAG_BASE + 4 * id + 2, output: TAG_BASE + 4 * id + 3 };

    const inputShape = (model.inputs[0].shape as Array<number | null>).slice();
    const shapes = [inputShape, ...chain.map((l) => (l.outputShape as Array<number | null>).slice())];
    this.plan = this.cut(chain, o, inputShape);
    const { counts, firstLayer } = this.plan;
    this.inputShapes = firstLayer.map((a) => shapes[a]);
    this.outputShape = shapes[shapes.length - 1];
    for (let s = 1; s < this.stages; s++) {
      const cutShape = this.inputShapes[s];
      if (cutShape.slice(1).some((d) => d === null)) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: option 'partition' cuts after layer '${chain[firstLayer[s] - 1].name}', whose output shape ` +
          `${shapeText(cutShape)} is not fixed (only the batch axis may be null); received ${shown(counts)}`, rank);
      }
    }
    this.firstLayerName = firstLayer.map((a) => chain[a].name);
    this.lastLayerName = firstLayer.map((a, s) => chain[a + counts[s] - 1].name);
    const mine = chain.slice(firstLayer[this.stage], firstLayer[this.stage] + counts[this.stage]);
    this.stageOf = new Stage(mine, this.inputShapes[this.stage], this.stage === 0, this.stage === this.stages - 1, o.deferWeightGradients);
    if (this.replicas > 1) {
      // Every rank makes every stage's group, in stage order (newGroup is a world collective); a stage's
      // replicas then start from replica 0's weights.
      for (let s = 0; s < this.stages; s++) {
        const g = hora.newGroup(Array.from({ length: this.replicas }, (_, r) => r * this.stages + s)).wait();
        if (g) this.group = g;
      }
      const group = this.group as hora.Group;
      const weights = this.stageOf.model.weights;
      const flat = concatenated(weights.map((w) => w.read().dataSync() as Float32Array));
      const root = group.broadcast(flat, { root: 0, name: 'pipeline.replicas.weights' }).wait();
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
    this.stats = {
      batches: 0, lastBatch: null, total: { busyMs: new Array(this.stages).fill(0), wallMs: 0, bubbleFraction: 0 },
      weightBytes: this.stageOf.weightBytes, peakStashBytes: 0, peakStashMicroBatches: 0,
    };
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

  private rankOf(stage: number): number {
    return this.replica * this.stages + stage;
  }

  private describe = (rank: number): string => {
    const stage = rank % this.stages;
    return this.replicas > 1 ? `stage ${stage} of replica ${Math.floor(rank / this.stages)} (rank ${rank})` : `stage ${stage} (rank ${rank})`;
  };

  /** The optimizer, loss and metrics, as LayersModel.compile takes them. Every rank calls it. */
  compile(args: { optimizer: tf.Optimizer | string; loss: string | ((yTrue: tf.Tensor, yPred: tf.Tensor) => tf.Tensor); metrics?: unknown }): void {
    if (args === null || typeof args !== 'object') throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.compile: argument 'args' must be an object {optimizer, loss, metrics}; received ${shown(args)}`, this.rank);
    const optimizer = typeof args.optimizer === 'string' ? null : args.optimizer;
    this.stageOf.compile(args as { optimizer: tf.Optimizer; loss: unknown; metrics?: unknown });
    this.optimizer = optimizer ?? (this.stageOf.model as unknown as { optimizer: tf.Optimizer }).optimizer;
  }

  private ready(call: string): tf.Optimizer {
    if (this.broken) throw new HoraError(this.broken.code, `pipeline.${call}: the pipeline failed earlier and cannot go on (${this.broken.message})`, this.rank);
    if (!this.optimizer) throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: call pipe.compile({optimizer, loss}) first`, this.rank);
    return this.optimizer;
  }

  private sizeOf(call: string, x: tf.Tensor | null, y: tf.Tensor | null): number {
    const n = (x ?? y)?.shape[0];
    if (x && y && x.shape[0] !== y.shape[0]) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: x has ${x.shape[0]} samples but y has ${y.shape[0]}`, this.rank);
    }
    if (n === undefined) throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: pass x or y (or both) on every rank: their batch size sets the micro-batches`, this.rank);
    return n;
  }

  /**
   * One round: this stage's instructions for one batch of n samples (x on the first stage, y on the
   * last). train: forwards and backwards, then the update; otherwise forwards only. Resolves with every
   * rank's report.
   */
  private async round(x: tf.Tensor | null, y: tf.Tensor | null, n: number, train: boolean, keepOutput: boolean): Promise<{ reports: RoundReport[]; output: tf.Tensor | null; grads: Float32Array[] | null; busyMs: number; wallMs: number; stashBytes: number }> {
    const S = this.stages;
    const s = this.stage;
    const first = s === 0;
    const last = s === S - 1;
    const m = Math.min(this.microBatches, n);
    const sizes = microBatchSizes(n, m);
    const offsets = sizes.map((_, k) => sizes.slice(0, k).reduce((a, b) => a + b, 0));
    const list: Instruction[] = train
      ? stageSchedule(this.schedule, s, S, m)
      : stageSchedule('gpipe', s, S, m).filter((i) => i.op === 'forward');
    const peers = Array.from({ length: hora.size() }, (_, r) => r).filter((r) => r !== this.rank);
    const round = new Round(this.tags.control, peers, this.describe);
    const t0 = performance.now();
    const tracing = timelineOn();
    const stash = new Map<number, { input: tf.Tensor; record: ForwardRecord | null; bytes: number }>();
    const sends: Array<PromiseLike<void>> = [];
    const outputs: tf.Tensor[] = [];
    let busy = 0;
    let stashBytes = 0;
    let batchPeak = 0;
    let lossSum = 0;
    let metricSums: number[] = [];
    const batchNo = this.batchesRun;
    const seedOf = (k: number) => (hash(`${batchNo}/${k}/${s}/${this.replica}`) || 1);
    const peerWork = <T>(peer: number, w: PromiseLike<T>): Promise<T> => round.guard(Promise.resolve(w).then(undefined, (e) => { throw round.lost(peer, e); }));
    const send = (data: Float32Array, stage: number, tag: number) => {
      const to = this.rankOf(stage);
      const w = hora.send(data, { to, tag });
      // Out now: batched calls otherwise leave at the end of this run of JavaScript, and a first stage's
      // forwards (or a last stage's backwards) run back to back without yielding, so the next stage would
      // wait for all of them.
      flushCollectives();
      const p = Promise.resolve(w).then(undefined, (e) => { throw round.lost(to, e); });
      p.catch(() => undefined);
      sends.push(p);
    };
    const receive = async (stage: number, tag: number, shape: number[]): Promise<tf.Tensor> => {
      const from = this.rankOf(stage);
      const count = shape.reduce((a, b) => a * b, 1);
      // The stage idles until the message comes: in a training step, communication time (the dashboard's split).
      const data = await steps.wait(peerWork(from, hora.recv(new Float32Array(count), { from, tag })));
      return tf.tensor(data, shape, 'float32');
    };
    const now = () => Number(process.hrtime.bigint());
    const span = (name: string, k: number, startNs: number, endNs = now()) => {
      busy += (endNs - startNs) / 1e6;
      if (tracing) timelineSpan(k < 0 ? name : `${name} ${k}`, startNs, endNs, { stage: s, microBatch: k, batch: batchNo });
    };
    // Bytes held for backwards still to run: the stash, and what deferred kernel gradients keep.
    const held = () => {
      const bytes = stashBytes + this.stageOf.deferredBytes;
      batchPeak = Math.max(batchPeak, bytes);
      this.stats.peakStashBytes = Math.max(this.stats.peakStashBytes, bytes);
    };
    // This stage's last backward; on the first stage its result goes to no other stage, and nothing waits for it.
    const lastBackward = list[list.map((i) => i.op).lastIndexOf('backward')];
    try {
      for (const ins of list) {
        const k = ins.microBatch;
        const shapeIn = [sizes[k], ...this.inputShapes[s].slice(1)] as number[];
        if (ins.op === 'forward') {
          let input: tf.Tensor;
          if (first) {
            input = tf.slice(x as tf.Tensor, offsets[k], sizes[k]);
            const want = this.inputShapes[0];
            if (input.shape.length !== want.length || input.shape.slice(1).some((d, i) => want[i + 1] !== null && d !== want[i + 1])) {
              const got = shapeText(input.shape);
              input.dispose();
              throw new HoraError('ERR_INVALID_ARGUMENT', `argument 'x' must have samples of shape ${shapeText(want.slice(1))} (the input of layer '${this.firstLayerName[0]}'); received ${got} for a micro-batch`, this.rank);
            }
          } else {
            input = await receive(s - 1, this.tags.activation, shapeIn);
          }
          const start = now();
          if (last) {
            const yk = y ? tf.slice(y, offsets[k], sizes[k]) : null;
            if (train) {
              const r = this.stageOf.lossAndBackward(input, yk as tf.Tensor, sizes[k] / n, seedOf(k));
              lossSum += r.loss * sizes[k];
              if (metricSums.length === 0) metricSums = r.metrics.map(() => 0);
              r.metrics.forEach((v, i) => { metricSums[i] += v * sizes[k]; });
              // The last stage's forward and backward are one gradient call, so its input's gradient
              // leaves at once, in both schedules: holding it for the schedule's backward slot would
              // only keep the previous stage waiting (with GPipe, until every forward here had run),
              // and the order of messages on the link is the schedule's either way. Nothing is
              // stashed here; the schedule's backward slot on this stage has nothing left to do.
              span('forward', k, start, r.forwardEndNs);
              if (r.dx) {
                send(Float32Array.from(r.dx.dataSync() as Float32Array), s - 1, this.tags.gradient);
                r.dx.dispose();
              }
              span('backward', k, r.forwardEndNs);
              held();
              yk?.dispose();
              input.dispose();
              continue;
            } else {
              const out = this.stageOf.forward(input, null);
              if (yk) {
                const values = this.stageOf.lossOf(out, yk);
                lossSum += values[0] * sizes[k];
                if (metricSums.length === 0) metricSums = values.slice(1).map(() => 0);
                values.slice(1).forEach((v, i) => { metricSums[i] += v * sizes[k]; });
              }
              if (keepOutput) outputs.push(out); else out.dispose();
            }
            yk?.dispose();
            input.dispose();
          } else {
            const record = train && !this.recompute ? this.stageOf.forwardRecorded(input, seedOf(k)) : null;
            const out = record ? record.y : this.stageOf.forward(input, train ? seedOf(k) : null);
            const want = [sizes[k], ...this.inputShapes[s + 1].slice(1)] as number[];
            if (out.shape.length !== want.length || out.shape.some((d, i) => d !== want[i])) {
              const got = shapeText(out.shape);
              if (record) disposeRecord(record); else out.dispose();
              input.dispose();
              throw new HoraError('ERR_MISMATCH', `pipeline: stage ${s + 1}'s first layer '${this.firstLayerName[s + 1]}' expects input of shape ${shapeText(want)} ` +
                `but stage ${s}'s last layer '${this.lastLayerName[s]}' (rank ${this.rank}) gave ${got} for micro-batch ${k}`, this.rank, this.rankOf(s + 1));
            }
            send(Float32Array.from(out.dataSync() as Float32Array), s + 1, this.tags.activation);
            if (!record) out.dispose();
            if (train) {
              const bytes = input.size * BYTES_PER_FLOAT + (record ? record.bytes : 0);
              stash.set(k, { input, record, bytes });
              stashBytes += bytes;
              held();
              this.stats.peakStashMicroBatches = Math.max(this.stats.peakStashMicroBatches, stash.size);
            } else {
              input.dispose();
            }
          }
          span('forward', k, start);
        } else {
          // The last stage ran its backward with its forward (above).
          if (last) continue;
          if (first && ins === lastBackward && train && this.stageOf.deferredKernels > 0) {
            // The kernel gradients of the micro-batches so far, while the last gradient is still on its
            // way: with 1F1B the first stage would otherwise wait a whole round trip of the last
            // micro-batch, idle, before its last backward and the batch's kernel gradients. Done here in
            // every schedule, so that every schedule sums the same products.
            const start = now();
            this.stageOf.finishWeightGradients();
            span('weight gradients', -1, start);
          }
          const dy = await receive(s + 1, this.tags.gradient, [sizes[k], ...this.inputShapes[s + 1].slice(1)] as number[]);
          const start = now();
          const { input, record, bytes } = stash.get(k) as { input: tf.Tensor; record: ForwardRecord | null; bytes: number };
          stash.delete(k);
          stashBytes -= bytes;
          const dx = record ? this.stageOf.backwardRecorded(record, input, dy) : this.stageOf.backward(input, dy, seedOf(k));
          held();
          input.dispose();
          dy.dispose();
          if (dx) {
            send(Float32Array.from(dx.dataSync() as Float32Array), s - 1, this.tags.gradient);
            dx.dispose();
          }
          span('backward', k, start);
        }
      }
      if (train && this.stageOf.deferredKernels > 0) {
        const start = now();
        this.stageOf.finishWeightGradients();
        span('weight gradients', -1, start);
      }
      // A stage before the last adds its layers' regularization penalty (the last counts its own in its
      // loss); its value goes with the batch's report, into the loss every rank returns.
      const penalty = train && !last ? this.stageOf.penaltyOfBatch() : 0;
      let grads: Float32Array[] | null = null;
      if (train && this.group) {
        // This stage's backwards are done: average its gradients with its replicas while the other
        // stages may still be working.
        const own = this.stageOf.gradientArrays();
        const mean = await steps.wait(round.guard(this.group.allreduce(concatenated(own), { op: 'avg', name: 'pipeline.gradients' })));
        let at = 0;
        grads = own.map((g) => { const part = mean.subarray(at, at + g.length); at += g.length; return part; });
      }
      await steps.wait(round.guard(Promise.all(sends)));
      const wallMs = performance.now() - t0;
      const payload: Record<string, unknown> = { busy, wallMs, stage: s, replica: this.replica, n };
      if (last) Object.assign(payload, { loss: lossSum / n, metrics: metricSums.map((v) => v / n) });
      if (penalty !== 0) payload.penalty = penalty;
      const reports = await steps.wait(round.finish(this.rank, payload));
      return { reports, output: keepOutput && last ? tf.concat(outputs) : null, grads, busyMs: busy, wallMs, stashBytes: batchPeak };
    } catch (e) {
      stash.forEach(({ input, record }) => { input.dispose(); if (record) disposeRecord(record); });
      outputs.forEach((t) => t.dispose());
      this.stageOf.resetGradients();
      this.broken = round.abort(this.rank, s, e);
      throw this.broken;
    } finally {
      if (keepOutput) outputs.forEach((t) => t.dispose());
    }
  }

  /** Loss and metric values of the batch: the last stages' reports, averaged over replicas by samples. */
  private lastStageValues(reports: RoundReport[]): number[] {
    type Payload = { loss: number; metrics: number[]; n: number; replica: number; penalty?: number };
    // The regularization penalties of a replica's other stages belong to its loss.
    const penalties = new Map<number, number>();
    for (const r of reports) {
      const p = r.payload as Payload;
      if (p.penalty) penalties.set(p.replica, (penalties.get(p.replica) ?? 0) + p.penalty);
    }
    const lasts = reports.filter((r) => r.rank % this.stages === this.stages - 1).map((r) => r.payload as Payload);
    const total = lasts.reduce((a, p) => a + p.n, 0);
    const values = new Array(1 + lasts[0].metrics.length).fill(0);
    for (const p of lasts) [p.loss + (penalties.get(p.replica) ?? 0), ...p.metrics].forEach((v, i) => { values[i] += v * p.n / total; });
    return values;
  }

  private recordStats(reports: RoundReport[]): void {
    const busyMs = new Array(this.stages).fill(0);
    let wallMs = 0;
    for (const r of reports) {
      const p = r.payload as { busy: number; wallMs: number; stage: number; replica: number };
      if (p.replica !== this.replica) continue;
      busyMs[p.stage] = p.busy;
      wallMs = Math.max(wallMs, p.wallMs);
    }
    const bubble = (busy: number[], wall: number) => (wall > 0 ? 1 - busy.reduce((a, b) => a + b, 0) / (this.stages * wall) : 0);
    this.stats.batches += 1;
    this.stats.lastBatch = { busyMs, wallMs, bubbleFraction: bubble(busyMs, wallMs) };
    const total = this.stats.total;
    busyMs.forEach((b, i) => { total.busyMs[i] += b; });
    total.wallMs += wallMs;
    total.bubbleFraction = bubble(total.busyMs, total.wallMs);
  }

  /** One training batch; the update applied once. Resolves with the loss ([loss, ...metrics] with metrics), on every rank. */
  async trainOnBatch(x: tf.Tensor | null, y: tf.Tensor | null): Promise<number | number[]> {
    const optimizer = this.ready('trainOnBatch');
    const xs = checkData('trainOnBatch', 'x', x, this.stage === 0);
    const ys = checkData('trainOnBatch', 'y', y, this.stage === this.stages - 1);
    const n = this.sizeOf('trainOnBatch', xs, ys);
    if (n < this.microBatches) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: option 'microBatches' must be at most the batch size (${n} samples); received ${this.microBatches}`, this.rank);
    }
    return this.trainBatch(optimizer, xs, ys, n);
  }

  private async trainBatch(optimizer: tf.Optimizer, x: tf.Tensor | null, y: tf.Tensor | null, n: number): Promise<number | number[]> {
    // A batch is a training step in hora's stats; its stage's busy and wall time go to the launcher's
    // reports too (the dashboard's Pipeline panel).
    steps.begin();
    const { reports, grads, busyMs, wallMs, stashBytes } = await this.round(x, y, n, true, false);
    this.batchesRun += 1;
    this.stageOf.update(optimizer, grads);
    steps.end();
    reportPipelineBatch({
      stage: this.stage, stages: this.stages, replica: this.replica, replicas: this.replicas, busyMs, wallMs,
      weightBytes: this.stageOf.weightBytes, peakStashBytes: stashBytes,
    });
    this.recordStats(reports);
    const values = this.lastStageValues(reports);
    return values.length === 1 ? values[0] : values;
  }

  /** Loss (and metrics) over x, y in batches of batchSize, as scalars on every rank (model.evaluate). */
  async evaluate(x: tf.Tensor | null, y: tf.Tensor | null, args: { batchSize?: number } = {}): Promise<tf.Scalar | tf.Scalar[]> {
    this.ready('evaluate');
    if (args === null || typeof args !== 'object') throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.evaluate: argument 'args' must be an object; received ${shown(args)}`, this.rank);
    checkOptionKeys('pipeline.evaluate', args, EVALUATE_OPTIONS, this.rank);
    const values = await this.evaluateValues('evaluate', x, y, args.batchSize ?? 32);
    const scalars = values.map((v) => tf.scalar(v));
    return scalars.length === 1 ? scalars[0] : scalars;
  }

  private async evaluateValues(call: string, x: tf.Tensor | null | undefined, y: tf.Tensor | null | undefined, batchSize: number): Promise<number[]> {
    const xs = checkData(call, 'x', x, this.stage === 0);
    const ys = checkData(call, 'y', y, this.stage === this.stages - 1);
    const n = this.sizeOf(call, xs, ys);
    this.checkBatchSize(call, batchSize);
    let sums: number[] = [];
    for (let at = 0; at < n; at += batchSize) {
      const b = Math.min(batchSize, n - at);
      const xb = xs ? tf.slice(xs, at, b) : null;
      const yb = ys ? tf.slice(ys, at, b) : null;
      try {
        const { reports } = await this.round(xb, yb, b, false, false);
        const values = this.lastStageValues(reports);
        if (sums.length === 0) sums = values.map(() => 0);
        values.forEach((v, i) => { sums[i] += v * b; });
      } finally {
        tf.dispose([xb, yb].filter((t): t is tf.Tensor => t !== null));
      }
    }
    return sums.map((v) => v / n);
  }

  private checkBatchSize(call: string, batchSize: unknown): void {
    if (typeof batchSize !== 'number' || !Number.isInteger(batchSize) || batchSize < 1) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.${call}: option 'batchSize' must be an integer >= 1; received ${shown(batchSize)}`, this.rank);
    }
  }

  /** The model's output for x, in batches of batchSize, on every rank of the replica. */
  async predict(x: tf.Tensor | null, args: { batchSize?: number } = {}): Promise<tf.Tensor> {
    this.ready('predict');
    const xs = checkData('predict', 'x', x, true);
    const n = (xs as tf.Tensor).shape[0];
    const batchSize = args.batchSize ?? 32;
    this.checkBatchSize('predict', batchSize);
    const parts: tf.Tensor[] = [];
    const rowShape = this.outputShape.slice(1) as number[];
    const rowSize = rowShape.reduce((a, b) => a * b, 1);
    try {
      for (let at = 0; at < n; at += batchSize) {
        const b = Math.min(batchSize, n - at);
        const xb = this.stage === 0 ? tf.slice(xs as tf.Tensor, at, b) : null;
        let output: tf.Tensor | null;
        try {
          ({ output } = await this.round(xb, null, b, false, true));
        } finally {
          xb?.dispose();
        }
        // The last stage of the replica holds the output; it sends it to the replica's other stages.
        const lastRank = this.rankOf(this.stages - 1);
        let got: Float32Array;
        if (this.rank === lastRank) {
          got = Float32Array.from((output as tf.Tensor).dataSync() as Float32Array);
          const copies = Array.from({ length: this.stages - 1 }, (_, s) => hora.send(got, { to: this.rankOf(s), tag: this.tags.output }));
          await Promise.all(copies);
        } else {
          got = await hora.recv(new Float32Array(b * rowSize), { from: lastRank, tag: this.tags.output });
        }
        output?.dispose();
        parts.push(tf.tensor(got, [b, ...rowShape], 'float32'));
      }
      return tf.concat(parts);
    } finally {
      tf.dispose(parts);
    }
  }

  /**
   * Trains for `epochs` over x, y in batches of batchSize (model.fit): per-epoch logs (loss, metrics,
   * val_ ones) on every rank, callbacks called on every rank.
   */
  async fit(x: tf.Tensor | null, y: tf.Tensor | null, args: PipelineFitArgs = {}): Promise<PipelineHistory> {
    const optimizer = this.ready('fit');
    if (args === null || typeof args !== 'object') throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.fit: argument 'args' must be an object; received ${shown(args)}`, this.rank);
    checkOptionKeys('pipeline.fit', args, FIT_OPTIONS, this.rank);
    const { batchSize = 32, epochs = 1, shuffle = true, validationData, verbose = 0 } = args;
    const xs = checkData('fit', 'x', x, this.stage === 0);
    const ys = checkData('fit', 'y', y, this.stage === this.stages - 1);
    const n = this.sizeOf('fit', xs, ys);
    this.checkBatchSize('fit', batchSize);
    if (typeof epochs !== 'number' || !Number.isInteger(epochs) || epochs < 0) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.fit: option 'epochs' must be an integer >= 0; received ${shown(epochs)}`, this.rank);
    }
    if (Math.min(batchSize, n) < this.microBatches) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline: option 'microBatches' must be at most the batch size (batchSize ${batchSize}, ${n} samples); received ${this.microBatches}`, this.rank);
    }
    if (validationData !== undefined && !(Array.isArray(validationData) && validationData.length === 2)) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `pipeline.fit: option 'validationData' must be [x, y]; received ${shown(validationData)}`, this.rank);
    }
    // Every rank runs the same rounds: the same samples, batches and epochs everywhere (a replica's shard
    // of the data is the same size as any other's with shard()).
    const validationSize = validationData ? this.sizeOf('fit', validationData[0] ?? null, validationData[1] ?? null) : 0;
    const mine = Float64Array.of(n, batchSize, epochs, shuffle ? 1 : 0, validationSize);
    const all = await hora.allgather(mine, { name: 'pipeline.fit.agree' });
    const fields = ['samples', 'batchSize', 'epochs', 'shuffle', 'validation samples'];
    for (let f = 0; f < fields.length; f++) {
      const values = Array.from({ length: hora.size() }, (_, r) => all[r * fields.length + f]);
      if (values.some((v) => v !== values[0])) {
        throw new HoraError('ERR_MISMATCH', `pipeline.fit: every rank must train on as many samples with the same options, but '${fields[f]}' differs ` +
          `(${values.map((v, r) => `rank ${r}: ${v}`).join(', ')})`, this.rank);
      }
    }
    const callbacks = args.callbacks === undefined ? [] : Array.isArray(args.callbacks) ? args.callbacks : [args.callbacks];
    const names = ['loss', ...this.metricNames()];
    const params = { epochs, batchSize, samples: n, steps: Math.ceil(n / batchSize), metrics: names };
    for (const cb of callbacks) await cb.setParams?.(params);
    const history: PipelineHistory = { epoch: [], history: {}, params };
    // Every rank of a replica shuffles alike: the seed is rank 0's.
    const seed = shuffle ? (await hora.broadcast(Int32Array.of(Math.floor(Math.random() * 2 ** 31)), { root: 0, name: 'pipeline.fit.seed' }))[0] : 0;
    for (const cb of callbacks) await cb.onTrainBegin?.({});
    for (let epoch = 0; epoch < epochs; epoch++) {
      for (const cb of callbacks) await cb.onEpochBegin?.(epoch, {});
      let order: tf.Tensor1D | null = null;
      if (shuffle) {
        const next = seeded(seed + epoch);  // the shuffle every rank of a replica does alike
        const idx = Array.from({ length: n }, (_, i) => i);
        for (let i = n - 1; i > 0; i--) { const j = Math.floor(next() * (i + 1)); [idx[i], idx[j]] = [idx[j], idx[i]]; }
        order = tf.tensor1d(idx, 'int32');
      }
      const sums = new Array(names.length).fill(0);
      let batch = 0;
      try {
        for (let at = 0; at < n; at += batchSize, batch++) {
          const b = Math.min(batchSize, n - at);
          const take = (t: tf.Tensor | null) => {
            if (!t) return null;
            if (!order) return tf.slice(t, at, b);
            return tf.tidy(() => tf.gather(t, tf.slice(order as tf.Tensor1D, at, b)));
          };
          for (const cb of callbacks) await cb.onBatchBegin?.(batch, { batch, size: b });
          const xb = take(xs);
          const yb = take(ys);
          let values: number[];
          try {
            const r = await this.trainBatch(optimizer, xb, yb, b);
            values = Array.isArray(r) ? r : [r];
          } finally {
            tf.dispose([xb, yb].filter((t): t is tf.Tensor => t !== null));
          }
          values.forEach((v, i) => { sums[i] += v * b; });
          const logs: Logs = { batch, size: b };
          names.forEach((k, i) => { logs[k] = values[i]; });
          for (const cb of callbacks) await cb.onBatchEnd?.(batch, logs);
        }
      } finally {
        order?.dispose();
      }
      const logs: Logs = {};
      names.forEach((k, i) => { logs[k] = sums[i] / n; });
      if (validationData) {
        const values = await this.evaluateValues('fit', validationData[0], validationData[1], batchSize);
        names.forEach((k, i) => { logs[`val_${k}`] = values[i]; });
      }
      for (const cb of callbacks) await cb.onEpochEnd?.(epoch, logs);
      history.epoch.push(epoch);
      for (const [k, v] of Object.entries(logs)) (history.history[k] ??= []).push(v);
      if (verbose > 0 && this.rank === 0) {
        process.stdout.write(`Epoch ${epoch + 1} / ${epochs}: ${Object.entries(logs).map(([k, v]) => `${k}=${v.toFixed(4)}`).join(' ')}\n`);
      }
    }
    for (const cb of callbacks) await cb.onTrainEnd?.({});
    return history;
  }

  private metricNames(): string[] {
    return this.stageOf.metricNames;
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
