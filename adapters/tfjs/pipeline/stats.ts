/**
 * What a pipeline stage tells the launcher about itself: the totals of this rank's stage (its place, its
 * batches, busy and wall time, weight bytes and peak stash), carried by every stats report as its
 * `pipeline` section (the dashboard's Pipeline panel, ts/control/monitor.ts). The core's reports
 * (ts/stats.ts) know nothing of pipelines: this module adds the section to them.
 */
import { FIELD_LIMITS, HoraError, addStatsSection, describeValue, reportIfDue } from '../../../ts/internal';
import type { PipelineStats } from '../../../ts/internal';


/** One training batch of a pipeline stage on this rank, as reportPipelineBatch() takes it. */
export interface PipelineBatch {
  /** This rank's stage, 0..stages-1, and the number of stages. */
  stage: number;
  stages: number;
  /** This rank's data-parallel replica of its stage, 0..replicas-1, and the number of replicas. */
  replica: number;
  replicas: number;
  /** Milliseconds the stage computed during the batch (its forwards and backwards). */
  busyMs: number;
  /** The batch's wall time in milliseconds, from its start to the last step of this stage. */
  wallMs: number;
  /** Bytes of the stage's weights. */
  weightBytes: number;
  /** Most bytes of activations the stage kept for its backwards at once, during the batch. */
  peakStashBytes: number;
}

/** This rank's stage: its place and the totals of its batches there. */
let pipeline: { stage: number; stages: number; replica: number; replicas: number; batches: number; busyMs: number; wallMs: number; weightBytes: number; peakStashBytes: number } | null = null;

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;
const isDuration = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;

/**
 * The executor calls it once after each training batch of this rank's stage.
 * The reports to the launcher then carry the stage's totals (the dashboard's Pipeline panel). A batch
 * with another place (stage, stages, replica, replicas) than the one before starts new totals.
 */
export function reportPipelineBatch(batch: PipelineBatch): void {
  const bad = (field: string, expected: string, value: unknown): never => {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.reportPipelineBatch: argument '${field}' must be ${expected}; received ${describeValue(value)}`);
  };
  if (batch === null || typeof batch !== 'object') bad('batch', 'an object', batch);
  const { stage, stages, replica, replicas, busyMs, wallMs, weightBytes, peakStashBytes } = batch;
  // The server refuses a report beyond its limits, and with it the rank.
  if (!isCount(stages) || stages < 1 || stages > FIELD_LIMITS.pipelineStages) bad('batch.stages', `an integer in 1..${FIELD_LIMITS.pipelineStages}`, stages);
  if (!isCount(stage) || stage >= stages) bad('batch.stage', `an integer in 0..${stages - 1}`, stage);
  if (!isCount(replicas) || replicas < 1 || replicas > FIELD_LIMITS.pipelineReplicas) bad('batch.replicas', `an integer in 1..${FIELD_LIMITS.pipelineReplicas}`, replicas);
  if (!isCount(replica) || replica >= replicas) bad('batch.replica', `an integer in 0..${replicas - 1}`, replica);
  if (!isDuration(busyMs)) bad('batch.busyMs', 'a finite number >= 0', busyMs);
  if (!isDuration(wallMs)) bad('batch.wallMs', 'a finite number >= 0', wallMs);
  if (!isCount(weightBytes)) bad('batch.weightBytes', 'an integer >= 0', weightBytes);
  if (!isCount(peakStashBytes)) bad('batch.peakStashBytes', 'an integer >= 0', peakStashBytes);
  let p = pipeline;
  if (!p || p.stage !== stage || p.stages !== stages || p.replica !== replica || p.replicas !== replicas) {
    p = pipeline = { stage, stages, replica, replicas, batches: 0, busyMs: 0, wallMs: 0, weightBytes: 0, peakStashBytes: 0 };
  }
  p.batches++;
  // Two clocks read a few microseconds apart can make busy exceed wall; a stage is never busier than the batch.
  p.busyMs += Math.min(busyMs, wallMs);
  p.wallMs += wallMs;
  p.weightBytes = weightBytes;
  p.peakStashBytes = Math.max(p.peakStashBytes, peakStashBytes);
  reportIfDue();
}

function pipelineReport(): PipelineStats | undefined {
  if (!pipeline) return undefined;
  const { stage, stages, replica, replicas, batches, weightBytes, peakStashBytes } = pipeline;
  const wallUs = Math.floor(1000 * pipeline.wallMs);
  return { stage, stages, replica, replicas, batches, busyUs: Math.min(wallUs, Math.floor(1000 * pipeline.busyMs)), wallUs, weightBytes, peakStashBytes };
}

addStatsSection('pipeline', pipelineReport);
