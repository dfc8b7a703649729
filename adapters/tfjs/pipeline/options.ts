/**
 * A pipeline's options: their type, their check on each rank, and the ranks' agreement that every
 * rank was given the same model and options (pipeline() blocks on it until every rank has called).
 * The error texts of argument checks (shown, shapeText) live here too; the executor and the loops
 * name shapes and values the same way.
 */
import * as hora from '../../../ts/index';
import { HoraError, checkOptionKeys, knownOptions } from '../../../ts/internal';
import { Layer } from './layers';
import { validatePartition } from './partition';
import { ScheduleKind } from './schedule';
import { Stage } from './stage';

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

const SCHEDULE_CODES: Record<string, number> = { gpipe: 1, '1f1b': 2 };

/** A received value as an error message shows it. */
export function shown(v: unknown): string {
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
export function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

export const shapeText = (s: ReadonlyArray<number | null>) => `[${s.map((d) => (d === null ? 'null' : String(d))).join(', ')}]`;

/** The options checked, with their defaults filled in. */
export interface Checked {
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

/** This rank's options, checked (each error names the option and what it received), defaults filled in. */
export function checkOptions(options: unknown, layerCount: number, size: number): Checked {
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
 * What every rank must agree on, worded: the name of the engine's agreement (docs/internals.md 1.5). The
 * engine compares its digest and, should ranks differ, says which; explain() then names the field.
 */
function termsOf(layers: Layer[] | null, opts: Checked | null, refused: unknown): string {
  if (refused || !layers || !opts) return 'pipeline.agree: refused';
  const partition = opts.partition === 'auto' ? 'auto' : opts.partition.join(',');
  return `pipeline.agree: ${layers.length} layers #${hash(shapesOf(layers).join('|')).toString(16)}, stages ${opts.stages}, ` +
    `microBatches ${opts.microBatches}, schedule ${opts.schedule}, partition ${partition}, profileBatchSize ${opts.profileBatchSize}, ` +
    `recompute ${opts.recompute}, deferWeightGradients ${opts.deferWeightGradients}`;
}

/**
 * Every rank's model and options, compared: the engine's agreement on their terms (a barrier named by
 * them). Ranks that refused their options throw their own error; the others say which rank refused.
 * Blocks (Work.wait) until every rank has called pipeline(). Only when the ranks differ does a second
 * round (explain) find what differs, to name it.
 */
export function agree(layers: Layer[] | null, opts: Checked | null, refused: unknown): void {
  try {
    hora.barrier({ name: termsOf(layers, opts, refused) }).wait();
  } catch (e) {
    if (!(e instanceof HoraError) || e.code !== 'ERR_MISMATCH') throw e;
    explain(layers, opts, refused);
    throw e;
  }
  if (refused) throw refused;
}

/** After the ranks disagreed: every rank's fields, compared, the first that differs named (with its values on every rank). */
function explain(layers: Layer[] | null, opts: Checked | null, refused: unknown): void {
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
