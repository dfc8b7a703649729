/**
 * What this worker tells the launcher about itself, about once a second (the Stats control message):
 * per kind of collective how many completed, how many bytes and how long some were in flight; how many
 * were submitted, and the oldest still pending (the stall inspector compares these across ranks); and
 * the training steps the adapters mark, with the time they spent blocked on communication; and the sections
 * an adapter adds (a pipeline stage's totals, from adapters/tfjs/pipeline/stats.ts).
 *
 * Busy time is the union of the intervals during which at least one collective of a kind was in flight,
 * not the sum of their durations: collectives queue behind each other on the communication thread, and
 * summing would count the same second once per queued call. bytes / busy time is then the algorithm
 * bandwidth of a stream of collectives, the figure nccl-tests reports for one.
 */
import { performance } from 'node:perf_hooks';
import type { CollectiveKind, PendingCollective, Stats, StatsKind } from './control/messages';
import { DTYPE_BYTES, KIND_NAMES, NativeKind, valuesOf } from './native';
import type { NativeDType } from './native';
import type { NativeResult } from './native';

/** Entries of Stats.pending sent: enough to name a stall, small enough for every second. */
const PENDING_REPORTED = 4;
/** Code points of a collective name kept in a report (4 bytes each at most: within FIELD_LIMITS). */
const NAME_CODE_POINTS = 60;

/** The API's name of each NativeKind, by value. */
const KIND_API_NAMES: readonly (StatsKind | 'invalid' | 'join')[] = valuesOf(KIND_NAMES, (k) => k.api);

/** One submitted collective, from submission to completion. */
export interface SubmittedCollective {
  /** Position in this rank's order of world collectives, from 1; 0 for a process group's collective or a message. */
  seq: number;
  /** 'join': hora.join(), which has no totals and no sequence number (it stands for the others' collectives meanwhile). */
  kind: StatsKind | 'invalid' | 'join';
  name: string;
  bytes: number;
  /** Bytes per element, for an allgather's output counts. */
  elementBytes: number;
  /** performance.now() when handed to the engine (started()); -1 before, and for one that ran inside collective() with Manner.WaitNow. */
  at: number;
  /** The totals of its kind; null for an invalid call. */
  totals: KindTotals | null;
}

/** @internal */
export interface KindTotals {
  count: number;
  bytes: number;
  busyMs: number;
  inFlight: number;
  /** performance.now() when inFlight last went from 0 to 1. */
  busySince: number;
}

/** Counters of one Dispatcher's collectives. */
export class CollectiveStats {
  private submittedCount = 0;
  private completedCount = 0;
  private readonly kinds = new Map<StatsKind, KindTotals>();
  /** The same totals by NativeKind: a Map lookup on every call was a percent of a small collective. */
  private readonly byKind: Array<KindTotals | undefined> = [];

  /**
   * @param pending the records of the collectives not yet settled, oldest first: the Dispatcher keeps them
   * with its outstanding works, so they are not tracked twice.
   */
  constructor(private readonly pending: () => Iterable<SubmittedCollective>) {}

  /**
   * Notes a collective submitted; the returned record goes to started() when the batch holding it is handed
   * to the engine, and to settled() once. A process group's collective (inWorldOrder false) counts in the
   * totals of its kind but takes no sequence number: the stall inspector compares sequence numbers across
   * all ranks, and non-members never submit it. Reads no clock: a small collective waited with wait() costs
   * about a microsecond, and two clock reads from JS cost about a tenth of that.
   */
  submitted(kind: NativeKind, name: string, bytes: number, dtype: NativeDType, inWorldOrder = true): SubmittedCollective {
    const kindName = KIND_API_NAMES[kind] ?? 'invalid';
    return {
      seq: inWorldOrder ? ++this.submittedCount : 0, kind: kindName, name, bytes, elementBytes: DTYPE_BYTES[dtype] ?? 1, at: -1,
      totals: kindName === 'invalid' || kindName === 'join' ? null : this.byKind[kind] ?? (this.byKind[kind] = this.totals(kindName)),
    };
  }

  /**
   * Notes a collective handed to the engine at `now` (performance.now()): from then it is in flight. A
   * message is not timed: a receive is in flight from the moment it is posted, its sender's lateness
   * included, so its time says nothing of bandwidth.
   */
  started(c: SubmittedCollective, now: number): void {
    if (c.kind === 'send' || c.kind === 'recv') return;
    c.at = now;
    const k = c.totals;
    if (k !== null && k.inFlight++ === 0) k.busySince = now;
  }

  /**
   * Notes its completion, successful or not. ranMs: for one that ran inside a single call (collective() with Manner.WaitNow, for a
   * wait()), never started(), how long that call took; it counts as busy time unless others of its kind
   * were in flight meanwhile (their span covers it).
   */
  settled(c: SubmittedCollective, result: NativeResult, ranMs = 0): void {
    if (c.seq > 0) this.completedCount++;
    const k = c.totals;
    if (k === null) return;
    if (c.at >= 0) {
      if (--k.inFlight === 0) k.busyMs += performance.now() - k.busySince;
    } else if (k.inFlight === 0) {
      k.busyMs += ranMs;
    }
    if (result.code) return;
    k.count++;
    // Bus bandwidth counts an allgather by its output, which ranks may size differently: the element
    // count from each rank (host or device memory alike).
    k.bytes += (c.kind === 'allgather' || c.kind === 'gather') && result.counts ? result.counts.reduce((a, b) => a + b, 0) * c.elementBytes : c.bytes;
  }

  /** The Stats message body as of now. */
  snapshot(): Stats {
    const now = performance.now();
    const kinds = [...this.kinds].map(([kind, k]) => ({
      kind, count: k.count, bytes: k.bytes, busyUs: Math.floor(1000 * (k.busyMs + (k.inFlight > 0 ? now - k.busySince : 0))),
    }));
    const pending: PendingCollective[] = [];
    for (const c of this.pending()) {
      if (pending.length === PENDING_REPORTED) break;
      if (c.seq === 0) continue;
      // seq > 0: a collective of the world (messages and group collectives have none).
      pending.push({ seq: c.seq, name: reportableName(c.name), kind: c.kind as CollectiveKind | 'invalid', ageMs: c.at >= 0 ? Math.floor(now - c.at) : 0 });
    }
    const stepUs = Math.floor(1000 * steps.stepMs);
    const report: Stats = {
      timeMs: Date.now(), submitted: this.submittedCount, completed: this.completedCount, kinds, pending,
      steps: steps.count, stepUs, commWaitUs: Math.min(stepUs, Math.floor(1000 * steps.waitMs)),
    };
    addSections(report);
    return report;
  }

  private totals(kind: StatsKind): KindTotals {
    let k = this.kinds.get(kind);
    if (!k) {
      k = { count: 0, bytes: 0, busyMs: 0, inFlight: 0, busySince: 0 };
      this.kinds.set(kind, k);
    }
    return k;
  }
}

/** A collective name as a report may carry it: no control characters, at most NAME_CODE_POINTS long. */
function reportableName(name: string): string {
  const clean = name.replace(/[\u0000-\u001f\u007f]/g, '?');
  const points = Array.from(clean);
  return points.length <= NAME_CODE_POINTS ? clean : `${points.slice(0, NAME_CODE_POINTS - 3).join('')}...`;
}

// ---------------------------------------------------------------------------------------------------
// Training steps, as the adapters mark them.

export class StepClock {
  count = 0;
  stepMs = 0;
  waitMs = 0;
  private openAt: number | null = null;
  private openWaitMs = 0;

  /**
   * A step starts. A step left open (its code threw) is dropped, its time would mean nothing; with
   * `continueOpen` an open step goes on instead (several calls make up one step, as gradient accumulation).
   */
  begin(continueOpen = false): void {
    if (continueOpen && this.openAt !== null) return;
    this.openAt = performance.now();
    this.openWaitMs = 0;
  }

  /** The open step ends and counts. */
  end(): void {
    if (this.openAt === null) return;
    const ms = performance.now() - this.openAt;
    this.openAt = null;
    this.count++;
    this.stepMs += ms;
    this.waitMs += Math.min(ms, this.openWaitMs);
    reportIfDue();
  }

  /** Whether a step is open: waiting is timed only then. */
  get open(): boolean {
    return this.openAt !== null;
  }

  /** Time the JS thread spent waiting for collectives; counts only inside a step. */
  waited(ms: number): void {
    if (this.openAt !== null) this.openWaitMs += ms;
  }

  /** Awaits p, counting the time as waiting for communication. */
  async wait<T>(p: PromiseLike<T>): Promise<T> {
    const t0 = performance.now();
    try {
      return await p;
    } finally {
      this.waited(performance.now() - t0);
    }
  }
}

/**
 * @internal For the adapters: mark where a training step begins and ends (one applyGradients, one
 * mini-batch, one optimizer step). Work.wait() counts its blocked time by itself; an adapter that awaits
 * a collective inside a step wraps the await in steps.wait().
 */
export const steps = new StepClock();

// ---------------------------------------------------------------------------------------------------
// Sections of a report that an adapter fills (Stats.pipeline: adapters/tfjs/pipeline/stats.ts).

/** The sections of a report that adapters fill, by their key in Stats. */
export type StatsSections = Pick<Stats, 'pipeline'>;

const sections = new Map<keyof StatsSections, () => StatsSections[keyof StatsSections]>();

/**
 * @internal For the adapters: every report carries `report()` as its `key` section from now on, unless it
 * returns undefined (the section is left out). A second call for the same key replaces the first.
 */
export function addStatsSection<K extends keyof StatsSections>(key: K, report: () => StatsSections[K]): void {
  sections.set(key, report);
}

function addSections(report: Stats): void {
  for (const [key, section] of sections) {
    const value = section();
    if (value) report[key] = value;
  }
}

// ---------------------------------------------------------------------------------------------------
// Reporting.

const REPORT_INTERVAL_MS = 1000;
let reporter: { timer: NodeJS.Timeout; send: () => void; lastAt: number } | null = null;

// A training loop that keeps the JS thread busy (tfjs's fit() runs whole epochs with few turns of the event
// loop) would starve the timer; the end of each step sends the report when it is due. A socket write
// goes out at once, event loop or not.
/** @internal Sends a report now if one is due (an adapter calls it where a step or batch ends). */
export function reportIfDue(sinceLastMs = REPORT_INTERVAL_MS): void {
  if (reporter && performance.now() - reporter.lastAt >= sinceLastMs) reporter.send();
}

/** Sends a report now and then every second until stopReporting(); the timer never holds the process. */
export function startReporting(stats: CollectiveStats, send: (s: Stats) => boolean): void {
  stopReporting(false);
  const report = () => {
    if (reporter) reporter.lastAt = performance.now();
    try {
      send(stats.snapshot());
    } catch {
      // A report that cannot go out is not worth failing training for.
    }
  };
  // The timer leaves out a report that a step end has just sent.
  const timer = setInterval(() => reportIfDue(REPORT_INTERVAL_MS / 2), REPORT_INTERVAL_MS);
  timer.unref();
  reporter = { timer, send: report, lastAt: 0 };
  report();
}

/** Stops the reports, sending a last one first (its totals are the job's final figures). */
export function stopReporting(final = true): void {
  if (!reporter) return;
  clearInterval(reporter.timer);
  if (final) reporter.send();
  reporter = null;
}
