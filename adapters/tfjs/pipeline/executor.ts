/**
 * The executor: what runs one batch of the pipeline on this rank (docs/internals.md section 3).
 *
 * One batch is one round (rounds.ts): each stage runs its schedule's instructions (schedule.ts), an
 * activation coming in from the stage before under one tag and a gradient from the stage after under
 * another, its sends posted without waiting on them (1F1B deadlocks otherwise); with replicas, each
 * stage averages its gradients with its replicas; then the ranks end the batch in the engine's
 * agreement, the last stage's loss riding in it, and each stage applies the sum of its micro-batches'
 * gradients once. A failure anywhere ends the round on every rank with an error naming the stage and
 * rank where it began (notices on the links, the agreement failed with it), and the pipeline cannot run
 * another batch.
 */
import { tf } from '../framework';
import * as hora from '../../../ts/index';
import { HoraError, flushCollectives, timelineOn, timelineSpan, steps } from '../../../ts/internal';
import { reportPipelineBatch } from './stats';
import { Instruction, Message, ScheduleKind, stageSchedule } from './schedule';
import { notice, Round, RoundReport } from './rounds';
import { BYTES_PER_FLOAT, disposeRecord, ForwardRecord, Stage } from './stage';
import { hash, shapeText } from './options';

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

/** Micro-batch sizes for n samples in m micro-batches: the first n % m one larger. */
export function microBatchSizes(n: number, m: number): number[] {
  const base = Math.floor(n / m);
  return Array.from({ length: m }, (_, k) => base + (k < n % m ? 1 : 0));
}

export function concatenated(parts: Float32Array[]): Float32Array {
  const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

/**
 * A tensor's values to send: dataSync()'s own array when it is float32 (the copy out of the backend is
 * the one tfjs needs; the message is sent from it, and tensors are never written), else a float32 copy.
 */
function sendable(t: tf.Tensor): Float32Array {
  const data = t.dataSync();
  return data instanceof Float32Array ? data : Float32Array.from(data as ArrayLike<number>);
}

/** The pipeline's four message tags: activations, gradients, control (kept, unused since rounds went to the engine), predict's output. */
export interface PipelineTags {
  activation: number;
  gradient: number;
  control: number;
  output: number;
}

/** Where this rank sits in the pipeline and what it holds: fixed when the pipeline is made. */
export interface ExecutorSetup {
  rank: number;
  stage: number;
  stages: number;
  replica: number;
  replicas: number;
  microBatches: number;
  schedule: ScheduleKind;
  recompute: boolean;
  /** This rank's stage of the model. */
  stageModel: Stage;
  /** inputShapes[s]: what stage s's first layer takes (batch axis null). */
  inputShapes: Array<Array<number | null>>;
  /** What the whole model gives (batch axis null). */
  outputShape: Array<number | null>;
  firstLayerName: string[];
  lastLayerName: string[];
  tags: PipelineTags;
  /** The ranks holding this stage in every replica (null with one replica): their gradients are averaged. */
  group: hora.Group | null;
}

/** What one batch gave this rank. */
export interface BatchResult {
  /** Every rank's report at the end of the round. */
  reports: RoundReport[];
  /** The last stage's output over the batch when asked to keep it, else null. */
  output: tf.Tensor | null;
  /** This stage's gradients averaged with its replicas (training with replicas), else null. */
  grads: Float32Array[] | null;
  /** Milliseconds this stage computed. */
  busyMs: number;
  /** Milliseconds from the round's start to this stage's end. */
  wallMs: number;
  /** The most bytes this stage held at once in the batch for backwards still to run. */
  stashBytes: number;
}

/** Runs this rank's share of each batch, and keeps the pipeline's stats. */
export class Executor implements ExecutorSetup {
  readonly rank: number;
  readonly stage: number;
  readonly stages: number;
  readonly replica: number;
  readonly replicas: number;
  readonly microBatches: number;
  readonly schedule: ScheduleKind;
  readonly recompute: boolean;
  readonly stageModel: Stage;
  readonly inputShapes: Array<Array<number | null>>;
  readonly outputShape: Array<number | null>;
  readonly firstLayerName: string[];
  readonly lastLayerName: string[];
  readonly tags: PipelineTags;
  readonly group: hora.Group | null;
  readonly stats: PipelineStats;
  /** Training batches run: with the stage and replica, it seeds each micro-batch's dropout alike on every run. */
  batchesRun = 0;
  /** The failure that ended a round; once set, the pipeline runs no more batches. */
  broken: HoraError | null = null;

  constructor(setup: ExecutorSetup) {
    this.rank = setup.rank;
    this.stage = setup.stage;
    this.stages = setup.stages;
    this.replica = setup.replica;
    this.replicas = setup.replicas;
    this.microBatches = setup.microBatches;
    this.schedule = setup.schedule;
    this.recompute = setup.recompute;
    this.stageModel = setup.stageModel;
    this.inputShapes = setup.inputShapes;
    this.outputShape = setup.outputShape;
    this.firstLayerName = setup.firstLayerName;
    this.lastLayerName = setup.lastLayerName;
    this.tags = setup.tags;
    this.group = setup.group;
    this.stats = {
      batches: 0, lastBatch: null, total: { busyMs: new Array(this.stages).fill(0), wallMs: 0, bubbleFraction: 0 },
      weightBytes: this.stageModel.weightBytes, peakStashBytes: 0, peakStashMicroBatches: 0,
    };
  }

  /** The rank of `stage` in this rank's replica. */
  rankOf(stage: number): number {
    return this.replica * this.stages + stage;
  }

  describe = (rank: number): string => {
    const stage = rank % this.stages;
    return this.replicas > 1 ? `stage ${stage} of replica ${Math.floor(rank / this.stages)} (rank ${rank})` : `stage ${stage} (rank ${rank})`;
  };

  /**
   * One round: this stage's instructions for one batch of n samples (x on the first stage, y on the
   * last). train: forwards and backwards (the update is trainBatch's); otherwise forwards only, the last
   * stage's output kept with keepOutput. Resolves with every rank's report.
   */
  async runBatch(x: tf.Tensor | null, y: tf.Tensor | null, n: number, train: boolean, keepOutput: boolean): Promise<BatchResult> {
    return new BatchRun(this, x, y, n, train, keepOutput).execute();
  }

  /** One training batch, the update applied once. Resolves with the loss ([loss, ...metrics] with metrics), on every rank. */
  async trainBatch(optimizer: tf.Optimizer, x: tf.Tensor | null, y: tf.Tensor | null, n: number): Promise<number | number[]> {
    // A batch is a training step in hora's stats; its stage's busy and wall time go to the launcher's
    // reports too (the dashboard's Pipeline panel).
    steps.begin();
    const { reports, grads, busyMs, wallMs, stashBytes } = await this.runBatch(x, y, n, true, false);
    this.batchesRun += 1;
    this.stageModel.update(optimizer, grads);
    steps.end();
    reportPipelineBatch({
      stage: this.stage, stages: this.stages, replica: this.replica, replicas: this.replicas, busyMs, wallMs,
      weightBytes: this.stageModel.weightBytes, peakStashBytes: stashBytes,
    });
    this.recordStats(reports);
    const values = this.lastStageValues(reports);
    return values.length === 1 ? values[0] : values;
  }

  /** Loss and metric values of the batch: the last stages' reports, averaged over replicas by samples. */
  lastStageValues(reports: RoundReport[]): number[] {
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
}

/** What a stage keeps of a micro-batch's forward for its backward. */
interface Stashed {
  input: tf.Tensor;
  record: ForwardRecord | null;
  bytes: number;
}

const now = () => Number(process.hrtime.bigint());

/**
 * One batch on this rank: its instructions run in order, each step below one kind of instruction. Only
 * the receives wait (the loop in execute()); every step is synchronous, so a stage's forwards (or a last
 * stage's backwards) run back to back as the schedule lists them. What an instruction receives and
 * sends (the peer stage, and so the rank, the tag and the shape) is read from its own recv and send.
 */
class BatchRun {
  private readonly s: number;
  private readonly first: boolean;
  private readonly last: boolean;
  private readonly sizes: number[];
  private readonly offsets: number[];
  private readonly list: Instruction[];
  private readonly round: Round;
  private readonly t0: number;
  private readonly tracing: boolean;
  private readonly stash = new Map<number, Stashed>();
  private readonly sends: Array<PromiseLike<void>> = [];
  private readonly outputs: tf.Tensor[] = [];
  private readonly batchNo: number;
  /** This stage's last backward; on the first stage its result goes to no other stage, and nothing waits for it. */
  private readonly lastBackward: Instruction;
  /** By micro-batch, what each backward sends: the last stage sends it from its forward (lossAndBackward). */
  private readonly backwardSends = new Map<number, Message>();
  /** By link ("kind peer"), the messages this batch sends on it, and those sent so far: a failure sends a notice on each link still owed one. */
  private readonly owed = new Map<string, { message: Message; count: number; sent: number }>();
  /** Whether this rank joined its group's gradient allreduce this batch. */
  private joinedGroup = false;
  private busy = 0;
  private stashBytes = 0;
  private batchPeak = 0;
  private lossSum = 0;
  private metricSums: number[] = [];

  constructor(
    private readonly ex: Executor,
    private readonly x: tf.Tensor | null,
    private readonly y: tf.Tensor | null,
    private readonly n: number,
    private readonly train: boolean,
    private readonly keepOutput: boolean,
  ) {
    const S = ex.stages;
    const s = ex.stage;
    this.s = s;
    this.first = s === 0;
    this.last = s === S - 1;
    const m = Math.min(ex.microBatches, n);
    const sizes = microBatchSizes(n, m);
    this.sizes = sizes;
    this.offsets = sizes.map((_, k) => sizes.slice(0, k).reduce((a, b) => a + b, 0));
    this.list = train
      ? stageSchedule(ex.schedule, s, S, m)
      : stageSchedule('gpipe', s, S, m).filter((i) => i.op === 'forward');
    this.batchNo = ex.batchesRun;
    this.round = new Round(`pipeline.batch ${this.batchNo} ${train ? 'train' : 'forward'}: ${n} samples in ${m} micro-batches`,
      ex.stageModel.metricNames.length, S - 1, ex.describe);
    this.t0 = performance.now();
    this.tracing = timelineOn();
    this.lastBackward = this.list[this.list.map((i) => i.op).lastIndexOf('backward')];
    for (const i of this.list) if (i.op === 'backward' && i.send) this.backwardSends.set(i.microBatch, i.send);
    for (const { send } of this.list) {
      if (!send) continue;
      const key = `${send.kind} ${send.peer}`;
      const link = this.owed.get(key) ?? { message: send, count: 0, sent: 0 };
      link.count += 1;
      this.owed.set(key, link);
    }
  }

  async execute(): Promise<BatchResult> {
    const { ex, s, round, train } = this;
    try {
      for (const ins of this.list) {
        const k = ins.microBatch;
        if (ins.op === 'forward') {
          const input = ins.recv ? await this.receive(ins.recv, k) : this.sliceInput(k);
          if (ins.send) this.forwardAndSend(k, input, ins.send);
          else if (train) this.lossAndBackward(k, input);
          else this.forwardLast(k, input);
        } else if (ins.recv) {
          // (The last stage, whose backwards receive nothing, ran them with its forwards, in lossAndBackward.)
          if (this.first && ins === this.lastBackward) this.weightGradientsEarly();
          const dy = await this.receive(ins.recv, k);
          this.backward(k, dy, ins.send);
        }
      }
      if (train && ex.stageModel.deferredKernels > 0) this.weightGradients();
      // A stage before the last adds its layers' regularization penalty (the last counts its own in its
      // loss); its value goes with the batch's report, into the loss every rank returns.
      const penalty = train && !this.last ? ex.stageModel.penaltyOfBatch() : 0;
      let grads: Float32Array[] | null = null;
      if (train && ex.group) {
        // This stage's backwards are done: average its gradients with its replicas while the other
        // stages may still be working.
        const own = ex.stageModel.gradientArrays();
        this.joinedGroup = true;
        const mean = await steps.wait(ex.group.allreduce(concatenated(own), { op: 'avg', name: 'pipeline.gradients' }));
        let at = 0;
        grads = own.map((g) => { const part = mean.subarray(at, at + g.length); at += g.length; return part; });
      }
      const wallMs = performance.now() - this.t0;
      // Every rank's share is done once the agreement ends, so every message sent has been taken.
      const reports = await steps.wait(round.finish(ex.rank, this.report(wallMs, penalty)));
      await steps.wait(Promise.all(this.sends));
      return { reports, output: this.keepOutput && this.last ? tf.concat(this.outputs) : null, grads, busyMs: this.busy, wallMs, stashBytes: this.batchPeak };
    } catch (e) {
      this.stash.forEach(({ input, record }) => { input.dispose(); if (record) disposeRecord(record); });
      this.outputs.forEach((t) => t.dispose());
      ex.stageModel.resetGradients();
      ex.broken = await round.abort(ex.rank, s, e, () => this.notify());
      throw ex.broken;
    } finally {
      if (this.keepOutput) this.outputs.forEach((t) => t.dispose());
    }
  }

  /** Micro-batch k's shape at the input of `stage`. */
  private shapeAt(stage: number, k: number): number[] {
    return [this.sizes[k], ...this.ex.inputShapes[stage].slice(1)] as number[];
  }

  private seedOf(k: number): number {
    return hash(`${this.batchNo}/${k}/${this.s}/${this.ex.replica}`) || 1;
  }

  /** The first stage's input of micro-batch k: its slice of x, checked against the first layer. */
  private sliceInput(k: number): tf.Tensor {
    const input = tf.slice(this.x as tf.Tensor, this.offsets[k], this.sizes[k]);
    const want = this.ex.inputShapes[0];
    if (input.shape.length !== want.length || input.shape.slice(1).some((d, i) => want[i + 1] !== null && d !== want[i + 1])) {
      const got = shapeText(input.shape);
      input.dispose();
      throw new HoraError('ERR_INVALID_ARGUMENT', `argument 'x' must have samples of shape ${shapeText(want.slice(1))} (the input of layer '${this.ex.firstLayerName[0]}'); received ${got} for a micro-batch`, this.ex.rank);
    }
    return input;
  }

  /** A stage before the last: forward, the output to the next stage, the input (and record) stashed for the backward. */
  private forwardAndSend(k: number, input: tf.Tensor, to: Message): void {
    const { ex, s, train } = this;
    const start = now();
    const record = train && !ex.recompute ? ex.stageModel.forwardRecorded(input, this.seedOf(k)) : null;
    const out = record ? record.y : ex.stageModel.forward(input, train ? this.seedOf(k) : null);
    const want = this.shapeAt(s + 1, k);
    if (out.shape.length !== want.length || out.shape.some((d, i) => d !== want[i])) {
      const got = shapeText(out.shape);
      if (record) disposeRecord(record); else out.dispose();
      input.dispose();
      throw new HoraError('ERR_MISMATCH', `pipeline: stage ${s + 1}'s first layer '${ex.firstLayerName[s + 1]}' expects input of shape ${shapeText(want)} ` +
        `but stage ${s}'s last layer '${ex.lastLayerName[s]}' (rank ${ex.rank}) gave ${got} for micro-batch ${k}`, ex.rank, ex.rankOf(s + 1));
    }
    this.send(sendable(out), to);
    if (!record) out.dispose();
    if (train) {
      const bytes = input.size * BYTES_PER_FLOAT + (record ? record.bytes : 0);
      this.stash.set(k, { input, record, bytes });
      this.stashBytes += bytes;
      this.held();
      ex.stats.peakStashMicroBatches = Math.max(ex.stats.peakStashMicroBatches, this.stash.size);
    } else {
      input.dispose();
    }
    this.span('forward', k, start);
  }

  /** The last stage, training: forward, loss and backward in one gradient call; the input's gradient back at once. */
  private lossAndBackward(k: number, input: tf.Tensor): void {
    const { ex, sizes } = this;
    const start = now();
    const yk = this.y ? tf.slice(this.y, this.offsets[k], sizes[k]) : null;
    const r = ex.stageModel.lossAndBackward(input, yk as tf.Tensor, sizes[k] / this.n, this.seedOf(k));
    this.lossSum += r.loss * sizes[k];
    if (this.metricSums.length === 0) this.metricSums = r.metrics.map(() => 0);
    r.metrics.forEach((v, i) => { this.metricSums[i] += v * sizes[k]; });
    // The last stage's forward and backward are one gradient call, so its input's gradient
    // leaves at once, in both schedules: holding it for the schedule's backward slot would
    // only keep the previous stage waiting (with GPipe, until every forward here had run),
    // and the order of messages on the link is the schedule's either way. Nothing is
    // stashed here; the schedule's backward slot on this stage has nothing left to do.
    this.span('forward', k, start, r.forwardEndNs);
    if (r.dx) {
      const to = this.backwardSends.get(k);
      if (to) this.send(sendable(r.dx), to);
      r.dx.dispose();
    }
    this.span('backward', k, r.forwardEndNs);
    this.held();
    yk?.dispose();
    input.dispose();
  }

  /** The last stage, not training: forward, the loss where y is given, the output kept for predict. */
  private forwardLast(k: number, input: tf.Tensor): void {
    const { ex, sizes } = this;
    const start = now();
    const yk = this.y ? tf.slice(this.y, this.offsets[k], sizes[k]) : null;
    const out = ex.stageModel.forward(input, null);
    if (yk) {
      const values = ex.stageModel.lossOf(out, yk);
      this.lossSum += values[0] * sizes[k];
      if (this.metricSums.length === 0) this.metricSums = values.slice(1).map(() => 0);
      values.slice(1).forEach((v, i) => { this.metricSums[i] += v * sizes[k]; });
    }
    if (this.keepOutput) this.outputs.push(out); else out.dispose();
    yk?.dispose();
    input.dispose();
    this.span('forward', k, start);
  }

  /** A stage before the last: micro-batch k's backward from its stash, the input's gradient to the stage before. */
  private backward(k: number, dy: tf.Tensor, to: Message | null): void {
    const { ex } = this;
    const start = now();
    const { input, record, bytes } = this.stash.get(k) as Stashed;
    this.stash.delete(k);
    this.stashBytes -= bytes;
    const dx = record ? ex.stageModel.backwardRecorded(record, input, dy) : ex.stageModel.backward(input, dy, this.seedOf(k));
    this.held();
    input.dispose();
    dy.dispose();
    if (dx) {
      if (to) this.send(sendable(dx), to);
      dx.dispose();
    }
    this.span('backward', k, start);
  }

  /** Before the first stage's last backward. */
  private weightGradientsEarly(): void {
    if (!this.train || this.ex.stageModel.deferredKernels === 0) return;
    // The kernel gradients of the micro-batches so far, while the last gradient is still on its
    // way: with 1F1B the first stage would otherwise wait a whole round trip of the last
    // micro-batch, idle, before its last backward and the batch's kernel gradients. Done here in
    // every schedule, so that every schedule sums the same products.
    this.weightGradients();
  }

  /** The deferred Dense kernel gradients of the micro-batches run so far (deferWeightGradients). */
  private weightGradients(): void {
    const start = now();
    this.ex.stageModel.finishWeightGradients();
    this.span('weight gradients', -1, start);
  }

  /**
   * This rank failed: a notice on each link that still owes a message (the neighbour waiting on it fails
   * at once and passes the failure on), and this rank's part in its group's gradient allreduce (zeros),
   * which its replicas may be waiting on.
   */
  private notify(): void {
    for (const { message, count, sent } of this.owed.values()) {
      if (sent >= count) continue;
      hora.send(notice(), { to: this.ex.rankOf(message.peer), tag: this.ex.tags[message.kind] }).then(undefined, () => undefined);
    }
    const { ex } = this;
    if (this.train && ex.group && !this.joinedGroup) {
      this.joinedGroup = true;
      const length = ex.stageModel.variables.reduce((a, v) => a + v.size, 0);
      ex.group.allreduce(new Float32Array(length), { op: 'avg', name: 'pipeline.gradients' }).then(undefined, () => undefined);
    }
    flushCollectives();
  }

  /** What this rank tells the others at the end of the round: its times, and on the last stage the loss. */
  private report(wallMs: number, penalty: number): Record<string, number | number[]> {
    const payload: Record<string, number | number[]> = { busy: this.busy, wallMs, stage: this.s, replica: this.ex.replica, n: this.n };
    if (this.last) Object.assign(payload, { loss: this.lossSum / this.n, metrics: this.metricSums.map((v) => v / this.n) });
    if (penalty !== 0) payload.penalty = penalty;
    return payload;
  }

  /** A wait on `peer`, failing the round if the peer is lost and ending early if the round fails. */
  private peerWork<T>(peer: number, w: PromiseLike<T>): Promise<T> {
    return Promise.resolve(w).then(undefined, (e) => { throw this.round.lost(peer, e); });
  }

  /** Posts an instruction's send (to its peer stage of this replica, on its kind's tag); awaited at the end of the round, never inside the loop. */
  private send(data: Float32Array, message: Message): void {
    const to = this.ex.rankOf(message.peer);
    const w = hora.send(data, { to, tag: this.ex.tags[message.kind] });
    (this.owed.get(`${message.kind} ${message.peer}`) as { sent: number }).sent += 1;
    // Out now: batched calls otherwise leave at the end of this run of JavaScript, and a first stage's
    // forwards (or a last stage's backwards) run back to back without yielding, so the next stage would
    // wait for all of them.
    flushCollectives();
    const p = Promise.resolve(w).then(undefined, (e) => { throw this.round.lost(to, e); });
    p.catch(() => undefined);
    this.sends.push(p);
  }

  /**
   * An instruction's receive of micro-batch k: from its peer stage of this replica, on its kind's tag; the
   * values cross the boundary between the two stages, so their shape is the later stage's input.
   */
  private async receive(message: Message, k: number): Promise<tf.Tensor> {
    const from = this.ex.rankOf(message.peer);
    const shape = this.shapeAt(Math.max(this.s, message.peer), k);
    const count = shape.reduce((a, b) => a * b, 1);
    // The stage idles until the message comes: in a training step, communication time (the dashboard's split).
    const data = await steps.wait(this.peerWork(from, hora.recv(new Float32Array(count), { from, tag: this.ex.tags[message.kind] })));
    return tf.tensor(data, shape, 'float32');
  }

  private span(name: string, k: number, startNs: number, endNs = now()): void {
    this.busy += (endNs - startNs) / 1e6;
    if (this.tracing) timelineSpan(k < 0 ? name : `${name} ${k}`, startNs, endNs, { stage: this.s, microBatch: k, batch: this.batchNo });
  }

  /** Bytes held for backwards still to run: the stash, and what deferred kernel gradients keep. */
  private held(): void {
    const bytes = this.stashBytes + this.ex.stageModel.deferredBytes;
    this.batchPeak = Math.max(this.batchPeak, bytes);
    this.ex.stats.peakStashBytes = Math.max(this.ex.stats.peakStashBytes, bytes);
  }
}
