/**
 * Cutting a chain of layers into pipeline stages: the planner behind `partition: 'auto'` and the
 * checks on a manual `partition: [4, 3]`.
 *
 * The cost model (PipeDream's planner, without its overlap of communication and compute): every time
 * is per micro-batch. Stage j holding layers [a, e) costs
 *
 *   compute   sum over its layers of forward + backward
 * + input     if j > 0:     2 x (latency + outputBytes[a - 1] / bandwidth) of link j - 1
 *             (the activation that comes in, and its gradient going back: the same size)
 * + output    if j < S - 1: 2 x (latency + outputBytes[e - 1] / bandwidth) of link j
 * + recompute if j < S - 1 and options.rematerialize: the forward again, which the backward runs
 *             to rebuild the values it needs (every stage but the last: see stage.ts)
 * + replicas  if R > 1: one ring allreduce of its layers' paramBytes per batch among its R replicas,
 *             2(R - 1) latency + 2(R - 1)/R paramBytes / bandwidth over `replicaLink`, divided by the
 *             m micro-batches that share it.
 *
 * A transfer is charged to both stages on its link, in full: the stage spends it copying in or out
 * while it could compute, which overstates the cost where the communication thread hides it. The
 * slowest stage sets the pipeline's pace (every stage handles every micro-batch once), so the planner
 * minimizes the largest stage time over all contiguous cuts with no empty stage.
 *
 * It is exact: a dynamic program over (stage, first layer) that for every suffix of layers and stages
 * knows the best bottleneck, O(S L^2). Among cuts with the same bottleneck it takes the one whose layer
 * counts are smallest lexicographically, i.e. the earliest stages as small as the optimum allows: under
 * 1F1B stage s stashes S - s micro-batches, so the early stages are the ones short of memory. Every
 * rank given the same costs arrives at the same cut (the pipeline still broadcasts rank 0's plan,
 * since measured costs differ from rank to rank).
 */
import { HoraError } from '../../../ts/internal';

/** What the planner knows of one layer, measured on one micro-batch. */
export interface LayerCost {
  /** Seconds for the forward of one micro-batch. */
  forward: number;
  /** Seconds for its backward (gradients of the weights and of the input). */
  backward: number;
  /** Bytes of its output for one micro-batch: what crosses a cut placed after it, each way. */
  outputBytes: number;
  /** Bytes of its trainable weights: what its replicas average once per batch. */
  paramBytes: number;
}

/** A link: bytes per second and seconds per message. */
export interface Link {
  bandwidth: number;
  latency: number;
}

export interface PlanOptions {
  /** How many stages; integer from 1 to the layer count. */
  stages: number;
  /** The link between stages s and s + 1: one for all, or one per boundary (S - 1). Default: free. */
  link?: Link | Link[];
  /** Micro-batches per batch, which share one allreduce of the weights; integer >= 1. Default 1. */
  microBatches?: number;
  /** Data-parallel replicas of each stage; integer >= 1. Default 1 (no allreduce). */
  replicas?: number;
  /** The link among a stage's replicas. Default: the first stage link. */
  replicaLink?: Link;
  /** Charge every stage but the last a second forward (re-materialization). Default false. */
  rematerialize?: boolean;
}

/** A cut and what the cost model predicts for it. */
export interface Plan {
  /** Layers per stage. */
  counts: number[];
  /** Index of each stage's first layer. */
  firstLayer: number[];
  /** Predicted seconds per micro-batch for each stage. */
  stageTimes: number[];
  /** The largest of stageTimes: the pipeline's predicted pace. */
  bottleneck: number;
  /** Bytes of trainable weights per stage. */
  paramBytes: number[];
}

const FREE: Link = { bandwidth: Infinity, latency: 0 };

function shown(v: unknown): string {
  if (typeof v === 'string') return `'${v}'`;
  if (Array.isArray(v)) return v.length <= 16 ? `[${v.map(shown).join(', ')}]` : `an Array of length ${v.length}`;
  if (v !== null && typeof v === 'object') return 'an object';
  return String(v);
}

function invalid(option: string, expected: string, received: unknown, why = '', rank = -1): HoraError {
  return new HoraError('ERR_INVALID_ARGUMENT', `pipeline: option '${option}' must be ${expected}; received ${shown(received)}${why}`, rank);
}

function raise(message: string): never {
  throw new HoraError('ERR_INVALID_ARGUMENT', message);
}

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 1;
const isTime = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;

function checkLink(option: string, v: unknown): Link {
  const l = v as Link;
  if (l === null || typeof l !== 'object' || typeof l.bandwidth !== 'number' || !(l.bandwidth > 0) || !isTime(l.latency)) {
    const received = v === null || typeof v !== 'object' ? shown(v) : `{bandwidth: ${shown(l.bandwidth)}, latency: ${shown(l.latency)}}`;
    return raise(`pipeline: option '${option}' must be a link {bandwidth > 0 (bytes/s), latency >= 0 (s)}; received ${received}`);
  }
  return l;
}

function checkLayers(layers: readonly LayerCost[]): void {
  if (!Array.isArray(layers) || layers.length === 0) throw invalid('layers', 'a non-empty array of layer costs', layers);
  layers.forEach((c, i) => {
    for (const field of ['forward', 'backward', 'outputBytes', 'paramBytes'] as const) {
      const v = c === null || typeof c !== 'object' ? undefined : c[field];
      if (!isTime(v)) throw invalid(`layers[${i}].${field}`, 'a finite number >= 0', v);
    }
  });
}

/**
 * Checks a manual partition: one integer >= 1 per stage, adding up to the layer count. Returns it as
 * a plain array. `rank`: the rank that checks it, which its errors carry (HoraError.rank).
 */
export function validatePartition(partition: unknown, layerCount: number, stages: number, rank = -1): number[] {
  if (!Array.isArray(partition)) throw invalid('partition', `'auto' or an array of ${stages} layer counts`, partition, '', rank);
  if (partition.length !== stages) {
    throw invalid('partition', `an array of ${stages} layer counts, one per stage`, partition, ` (${partition.length} entries)`, rank);
  }
  partition.forEach((n, s) => {
    if (!isCount(n)) throw invalid('partition', 'layer counts that are integers >= 1 (no stage may be empty)', partition, ` (stage ${s}: ${shown(n)})`, rank);
  });
  const sum = (partition as number[]).reduce((a, b) => a + b, 0);
  if (sum !== layerCount) {
    throw invalid('partition', `layer counts adding up to the model's ${layerCount} layers`, partition, ` (they add up to ${sum})`, rank);
  }
  return (partition as number[]).slice();
}

type StageTime = (stage: number, first: number, end: number) => number;

/** Checks the options and returns the cost of stage `stage` holding layers [first, end). */
function costModel(layers: readonly LayerCost[], options: PlanOptions): { S: number; stageTime: StageTime; params: StageTime } {
  checkLayers(layers);
  if (options === null || typeof options !== 'object') throw invalid('options', 'an object', options);
  const L = layers.length;
  const { stages: S, link = FREE, microBatches = 1, replicas = 1, rematerialize = false } = options;
  if (typeof rematerialize !== 'boolean') throw invalid('rematerialize', 'true or false', rematerialize);
  if (!isCount(S) || S > L) throw invalid('stages', `an integer from 1 to ${L} (the layer count: a stage cannot be empty)`, S);
  if (!isCount(microBatches)) throw invalid('microBatches', 'an integer >= 1', microBatches);
  if (!isCount(replicas)) throw invalid('replicas', 'an integer >= 1', replicas);
  let links: Link[];
  if (Array.isArray(link)) {
    if (link.length !== S - 1) throw invalid('link', `one link or an array of ${S - 1} (one per boundary between stages)`, link);
    links = link.map((l, i) => checkLink(`link[${i}]`, l));
  } else {
    links = new Array(S - 1).fill(checkLink('link', link));
  }
  const replicaLink = checkLink('replicaLink', options.replicaLink ?? links[0] ?? FREE);

  const prefixCompute = [0];
  const prefixForward = [0];
  const prefixParams = [0];
  for (const c of layers) {
    prefixCompute.push(prefixCompute[prefixCompute.length - 1] + c.forward + c.backward);
    prefixForward.push(prefixForward[prefixForward.length - 1] + c.forward);
    prefixParams.push(prefixParams[prefixParams.length - 1] + c.paramBytes);
  }
  const transfer = (l: Link, bytes: number) => 2 * (l.latency + bytes / l.bandwidth);
  const params: StageTime = (_stage, first, end) => prefixParams[end] - prefixParams[first];
  const stageTime: StageTime = (stage, first, end) => {
    let t = prefixCompute[end] - prefixCompute[first];
    if (rematerialize && stage < S - 1) t += prefixForward[end] - prefixForward[first];
    if (stage > 0) t += transfer(links[stage - 1], layers[first - 1].outputBytes);
    if (stage < S - 1) t += transfer(links[stage], layers[end - 1].outputBytes);
    if (replicas > 1) {
      const R = replicas;
      t += (2 * (R - 1) * replicaLink.latency + (2 * (R - 1) / R) * params(stage, first, end) / replicaLink.bandwidth) / microBatches;
    }
    return t;
  };
  return { S, stageTime, params };
}

function describe(counts: number[], stageTime: StageTime, params: StageTime): Plan {
  const firstLayer: number[] = [];
  let at = 0;
  for (const n of counts) { firstLayer.push(at); at += n; }
  const stageTimes = counts.map((n, s) => stageTime(s, firstLayer[s], firstLayer[s] + n));
  return {
    counts: counts.slice(),
    firstLayer,
    stageTimes,
    bottleneck: Math.max(...stageTimes),
    paramBytes: counts.map((n, s) => params(s, firstLayer[s], firstLayer[s] + n)),
  };
}

/** What the cost model predicts for a given cut (a manual partition, or one to compare with). */
export function evaluatePartition(layers: readonly LayerCost[], counts: unknown, options: PlanOptions): Plan {
  const { S, stageTime, params } = costModel(layers, options);
  return describe(validatePartition(counts, layers.length, S), stageTime, params);
}

/** The cut with the smallest bottleneck; among equals, the lexicographically smallest counts. */
export function planPartition(layers: readonly LayerCost[], options: PlanOptions): Plan {
  const { S, stageTime, params } = costModel(layers, options);
  const L = layers.length;
  // best[j][i]: the smallest bottleneck of layers [i, L) on stages j..S-1, none empty.
  const best: number[][] = Array.from({ length: S + 1 }, () => new Array(L + 1).fill(Infinity));
  best[S][L] = -Infinity;
  for (let j = S - 1; j >= 0; j--) {
    const stagesAfter = S - j - 1;
    for (let i = j; i + stagesAfter < L; i++) {
      let b = Infinity;
      for (let e = i + 1; e <= L - stagesAfter; e++) {
        const v = Math.max(stageTime(j, i, e), best[j + 1][e]);
        if (v < b) b = v;
      }
      best[j][i] = b;
    }
  }
  const target = best[0][0];
  const counts: number[] = [];
  let i = 0;
  for (let j = 0; j < S; j++) {
    let e = i + 1;
    while (Math.max(stageTime(j, i, e), best[j + 1][e]) > target) e++;
    counts.push(e - i);
    i = e;
  }
  return describe(counts, stageTime, params);
}
