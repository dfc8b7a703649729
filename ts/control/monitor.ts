// The job as the rendezvous server sees it through the workers' Stats reports:
// rates per rank, bus bandwidth per kind of collective, counts and bytes of
// point-to-point messages (send, recv), the compute / communication split of
// training steps, the utilization of pipeline stages, and stalls.
//
// Stall inspector. Every collective has a sequence number, the same on every
// rank because all ranks issue collectives in the same order. Each report
// says how many collectives the rank has submitted and which of its own are
// still pending, with their ages. When a collective has been pending on some
// rank for at least the warning time while another rank's count shows that it
// has not submitted it yet, that other rank is holding the job up: the
// collective cannot complete anywhere until it arrives. Only the lowest such
// sequence number is reported; those behind it wait for the same ranks.
//
// Rates come from the difference of a rank's last two reports, timed by the
// rank's own clock. A rank that has not reported for a while (its JS thread
// blocked, or busy in a long synchronous computation) shows stale figures;
// the stall message says so, since such a rank may have submitted more than
// its last report knows.

import type { CollectiveKind, Stats, StatsKind } from './messages';
import { MESSAGE_KINDS, STATS_KINDS } from './messages';

/** Samples of rate history kept per rank: a minute at one report a second. */
const HISTORY = 60;
/** A rank silent this long gets "no report for N s" in a stall message. */
const SILENT_MS = 5000;
/** Rates older than this are shown as 0: the rank stopped reporting. */
const STALE_MS = 3000;
/** Rates span at least this much of the rank's clock: two reports sent close together say little. */
const RATE_SPAN_MS = 500;
/** Reports kept per rank to find one RATE_SPAN_MS back. */
const RECENT_REPORTS = 8;

/** bus bandwidth = algorithm bandwidth * factor, as nccl-tests defines it. */
export function busBandwidthFactor(kind: CollectiveKind, size: number): number {
  if (size <= 1) return kind === 'broadcast' ? 1 : 0;
  switch (kind) {
    case 'allreduce':
      return (2 * (size - 1)) / size;
    case 'allgather':
    case 'reduceScatter':
      return (size - 1) / size;
    case 'broadcast':
    case 'reduce':
      return 1;
    case 'gather':
      return (size - 1) / size;
    default:
      return 0;
  }
}

export interface Stall {
  seq: number;
  kind: string;
  name: string;
  /** Milliseconds since the first rank submitted it (as far as the reports tell). */
  ageMs: number;
  /** Ranks whose count shows they have not submitted it. */
  missing: number[];
  /** Ranks that have. */
  submittedBy: number[];
  /** Missing ranks that have not reported for a while, with how long (ms). */
  silent: { rank: number; ms: number }[];
}

export interface RankSnapshot {
  rank: number;
  /** Still connected to the server. */
  up: boolean;
  /** Milliseconds since its last report; null before the first. */
  reportAgeMs: number | null;
  submitted: number;
  completed: number;
  collectivesPerS: number;
  /** send and recv calls completed per second. */
  messagesPerS: number;
  /** Bytes of its collectives and messages per second. */
  bytesPerS: number;
  steps: number;
  stepS: number;
  commWaitS: number;
  /** Oldest pending collectives: seq, kind, name, age. */
  pending: { seq: number; kind: string; name: string; ageMs: number }[];
  /** Rates of the last reports, oldest first: [ms since epoch, collectives/s, bytes/s]. */
  history: [number, number, number][];
}

export interface KindSnapshot {
  kind: StatsKind;
  /** Completed on all ranks together. */
  count: number;
  bytes: number;
  busyS: number;
  /**
   * Since the start: bytes / busy time, averaged over ranks; bytes per second. Null for send and recv,
   * which are not timed (a receive is in flight from the moment it is posted, waiting for its sender).
   */
  algbw: number | null;
  busbw: number | null;
  /** The same over the last two reports of each rank (null when nothing ran meanwhile). */
  recentAlgbw: number | null;
  recentBusbw: number | null;
}

export interface PipelineStageSnapshot {
  stage: number;
  /** Ranks whose reports place them on this stage (one per replica). */
  ranks: number[];
  /** Batches finished, the most of any replica. */
  batches: number;
  /**
   * Busy time / wall time of the stage's batches since the rank's previous report (since the start before
   * there is one), averaged over its replicas; null before any batch.
   */
  utilization: number | null;
  /** 1 - utilization: the share of the batches' time the stage waited (the pipeline bubble). */
  bubble: number | null;
  /** Since the start, summed over replicas. */
  busyS: number;
  wallS: number;
  /** Bytes of the stage's weights and most bytes of stashed activations, the most of any replica. */
  weightBytes: number;
  peakStashBytes: number;
}

export interface PipelineSnapshot {
  /** As the reports say (the largest, should ranks disagree). */
  stages: number;
  replicas: number;
  byStage: PipelineStageSnapshot[];
}

export interface JobSnapshot {
  timeMs: number;
  size: number;
  ranksUp: number;
  collectivesPerS: number;
  messagesPerS: number;
  /** send and recv calls completed so far, all ranks together. */
  messages: number;
  bytesPerS: number;
  ranks: RankSnapshot[];
  kinds: KindSnapshot[];
  steps: {
    /** Steps summed over ranks. */
    count: number;
    stepS: number;
    commWaitS: number;
    computeS: number;
    /** Share of step time spent waiting for communication over the last reports, or since the start. */
    commShare: number | null;
  };
  stalls: Stall[];
  /** Null unless some rank reports a pipeline stage. */
  pipeline: PipelineSnapshot | null;
}

interface Report {
  stats: Stats;
  receivedAt: number;
}

interface RankState {
  last?: Report;
  /** The latest report at least RATE_SPAN_MS older than `last`: the base of its rates. */
  previous?: Report;
  /** The last few reports, oldest first (`last` included). */
  recent: Report[];
  lost: boolean;
  history: [number, number, number][];
}

const totalBytes = (s: Stats) => s.kinds.reduce((n, k) => n + k.bytes, 0);
const isMessage = (kind: string) => (MESSAGE_KINDS as readonly string[]).includes(kind);
const totalMessages = (s: Stats) => s.kinds.reduce((n, k) => n + (isMessage(k.kind) ? k.count : 0), 0);

export class JobMonitor {
  private readonly ranks: RankState[];

  constructor(readonly size: number) {
    this.ranks = Array.from({ length: size }, () => ({ lost: false, history: [], recent: [] }));
  }

  /** Takes a rank's report. */
  record(rank: number, stats: Stats, now = Date.now()): void {
    const r = this.ranks[rank];
    if (!r) return;
    // A report older than the last one (by the rank's clock) is out of order: keep the newer.
    if (r.last && stats.timeMs < r.last.stats.timeMs) return;
    r.last = { stats, receivedAt: now };
    r.recent.push(r.last);
    if (r.recent.length > RECENT_REPORTS) r.recent.shift();
    r.previous = undefined;
    for (let i = r.recent.length - 2; i >= 0; i--) {
      if (stats.timeMs - r.recent[i].stats.timeMs >= RATE_SPAN_MS) {
        r.previous = r.recent[i];
        break;
      }
    }
    const rates = this.rates(r);
    if (rates) {
      r.history.push([stats.timeMs, rates.collectivesPerS, rates.bytesPerS]);
      if (r.history.length > HISTORY) r.history.shift();
    }
  }

  /**
   * Forgets every rank's reports: an elastic job's new world numbers its ranks and its collectives
   * afresh, and what the old world's ranks had pending would read as a stall of the new one.
   */
  reset(): void {
    for (let i = 0; i < this.ranks.length; i++) this.ranks[i] = { lost: false, history: [], recent: [] };
  }

  /** The rank's connection is gone. */
  markLost(rank: number): void {
    const r = this.ranks[rank];
    if (r) r.lost = true;
  }

  /** Stalls older than warnMs, lowest sequence number first (at most one: see the top of the file). */
  stalls(warnMs: number, now = Date.now()): Stall[] {
    let oldest: { seq: number; kind: string; name: string; ageMs: number } | undefined;
    for (const r of this.ranks) {
      if (!r.last) continue;
      const since = now - r.last.receivedAt;
      for (const p of r.last.stats.pending) {
        const ageMs = p.ageMs + since;
        if (ageMs < warnMs || (oldest && p.seq > oldest.seq)) continue;
        if (oldest && p.seq === oldest.seq) {
          oldest.ageMs = Math.max(oldest.ageMs, ageMs);
          continue;
        }
        if (this.missing(p.seq).length > 0) oldest = { seq: p.seq, kind: p.kind, name: p.name, ageMs };
      }
    }
    if (!oldest) return [];
    const missing = this.missing(oldest.seq);
    const submittedBy = this.ranks.map((_, rank) => rank).filter((rank) => !missing.includes(rank));
    const silent = missing
      .map((rank) => ({ rank, ms: this.ranks[rank].last ? now - (this.ranks[rank].last as Report).receivedAt : Infinity }))
      .filter((s) => s.ms >= SILENT_MS);
    return [{ ...oldest, missing, submittedBy, silent }];
  }

  /** Everything the dashboard and the status line show. */
  snapshot(ranksUp: number, warnMs: number, now = Date.now()): JobSnapshot {
    const ranks: RankSnapshot[] = this.ranks.map((r, rank) => {
      const s = r.last?.stats;
      const fresh = r.last !== undefined && now - r.last.receivedAt < STALE_MS;
      const rates = fresh ? this.rates(r) : undefined;
      const since = r.last ? now - r.last.receivedAt : 0;
      return {
        rank,
        up: !r.lost,
        reportAgeMs: r.last ? since : null,
        submitted: s?.submitted ?? 0,
        completed: s?.completed ?? 0,
        collectivesPerS: rates?.collectivesPerS ?? 0,
        messagesPerS: rates?.messagesPerS ?? 0,
        bytesPerS: rates?.bytesPerS ?? 0,
        steps: s?.steps ?? 0,
        stepS: (s?.stepUs ?? 0) / 1e6,
        commWaitS: (s?.commWaitUs ?? 0) / 1e6,
        pending: (s?.pending ?? []).map((p) => ({ seq: p.seq, kind: p.kind, name: p.name, ageMs: p.ageMs + since })),
        history: r.history.slice(),
      };
    });
    const kinds: KindSnapshot[] = [];
    for (const kind of STATS_KINDS) {
      let count = 0, bytes = 0, busyUs = 0, recentBytes = 0, recentBusyUs = 0, reporting = 0;
      for (const r of this.ranks) {
        const k = r.last?.stats.kinds.find((x) => x.kind === kind);
        if (!k) continue;
        reporting++;
        count += k.count;
        bytes += k.bytes;
        busyUs += k.busyUs;
        const before = r.previous?.stats.kinds.find((x) => x.kind === kind);
        if (r.last && now - r.last.receivedAt < STALE_MS) {
          recentBytes += k.bytes - (before?.bytes ?? 0);
          recentBusyUs += k.busyUs - (before?.busyUs ?? 0);
        }
      }
      if (reporting === 0) continue;
      if (isMessage(kind)) {
        kinds.push({ kind, count, bytes, busyS: 0, algbw: null, busbw: null, recentAlgbw: null, recentBusbw: null });
        continue;
      }
      const factor = busBandwidthFactor(kind as CollectiveKind, this.size);
      const algbw = busyUs > 0 ? bytes / (busyUs / 1e6) : 0;
      const recentAlgbw = recentBusyUs > 0 && recentBytes > 0 ? recentBytes / (recentBusyUs / 1e6) : null;
      kinds.push({
        kind, count, bytes, busyS: busyUs / 1e6, algbw, busbw: algbw * factor,
        recentAlgbw, recentBusbw: recentAlgbw === null ? null : recentAlgbw * factor,
      });
    }
    let stepCount = 0, stepUs = 0, waitUs = 0, recentStepUs = 0, recentWaitUs = 0;
    for (const r of this.ranks) {
      const s = r.last?.stats;
      if (!s) continue;
      stepCount += s.steps;
      stepUs += s.stepUs;
      waitUs += s.commWaitUs;
      if (r.previous && now - (r.last as Report).receivedAt < STALE_MS) {
        recentStepUs += s.stepUs - r.previous.stats.stepUs;
        recentWaitUs += s.commWaitUs - r.previous.stats.commWaitUs;
      }
    }
    const commShare = recentStepUs > 0 ? recentWaitUs / recentStepUs : stepUs > 0 ? waitUs / stepUs : null;
    return {
      timeMs: now,
      size: this.size,
      ranksUp,
      collectivesPerS: ranks.reduce((n, r) => n + r.collectivesPerS, 0),
      messagesPerS: ranks.reduce((n, r) => n + r.messagesPerS, 0),
      messages: this.ranks.reduce((n, r) => n + (r.last ? totalMessages(r.last.stats) : 0), 0),
      bytesPerS: ranks.reduce((n, r) => n + r.bytesPerS, 0),
      ranks,
      kinds,
      steps: { count: stepCount, stepS: stepUs / 1e6, commWaitS: waitUs / 1e6, computeS: (stepUs - waitUs) / 1e6, commShare },
      stalls: warnMs > 0 ? this.stalls(warnMs, now) : [],
      pipeline: this.pipeline(now),
    };
  }

  private pipeline(now: number): PipelineSnapshot | null {
    let stages = 0, replicas = 0;
    for (const r of this.ranks) {
      const p = r.last?.stats.pipeline;
      if (p) {
        stages = Math.max(stages, p.stages);
        replicas = Math.max(replicas, p.replicas);
      }
    }
    if (stages === 0) return null;
    // A job of N ranks has at most N stages: a larger claim gets no more rows than there are ranks.
    const byStage: PipelineStageSnapshot[] = Array.from({ length: Math.min(stages, this.size) }, (_, stage) => ({
      stage, ranks: [], batches: 0, utilization: null, bubble: null, busyS: 0, wallS: 0, weightBytes: 0, peakStashBytes: 0,
    }));
    const shares: number[][] = byStage.map(() => []);
    this.ranks.forEach((r, rank) => {
      const p = r.last?.stats.pipeline;
      const row = p && byStage[p.stage];
      if (!p || !row) return;
      row.ranks.push(rank);
      row.batches = Math.max(row.batches, p.batches);
      row.busyS += p.busyUs / 1e6;
      row.wallS += p.wallUs / 1e6;
      row.weightBytes = Math.max(row.weightBytes, p.weightBytes);
      row.peakStashBytes = Math.max(row.peakStashBytes, p.peakStashBytes);
      // Over the batches since the previous report at the same place while the rank reports; since the
      // start when there is no such report, or the rank went silent.
      const before = r.previous?.stats.pipeline;
      const recent = before !== undefined && now - (r.last as Report).receivedAt < STALE_MS && p.wallUs > before.wallUs &&
        before.stage === p.stage && before.stages === p.stages && before.replica === p.replica && before.replicas === p.replicas;
      const wall = recent ? p.wallUs - before.wallUs : p.wallUs;
      const busy = recent ? p.busyUs - before.busyUs : p.busyUs;
      if (wall > 0) shares[p.stage].push(Math.min(1, Math.max(0, busy / wall)));
    });
    byStage.forEach((row, i) => {
      if (shares[i].length === 0) return;
      row.utilization = shares[i].reduce((a, b) => a + b, 0) / shares[i].length;
      row.bubble = 1 - row.utilization;
    });
    return { stages, replicas, byStage };
  }

  // Ranks whose last report shows fewer than `seq` collectives submitted (or no report at all).
  private missing(seq: number): number[] {
    const out: number[] = [];
    this.ranks.forEach((r, rank) => {
      if ((r.last?.stats.submitted ?? 0) < seq) out.push(rank);
    });
    return out;
  }

  private rates(r: RankState): { collectivesPerS: number; messagesPerS: number; bytesPerS: number } | undefined {
    if (!r.last || !r.previous) return undefined;
    const dt = (r.last.stats.timeMs - r.previous.stats.timeMs) / 1000;
    if (dt <= 0) return undefined;
    return {
      collectivesPerS: Math.max(0, r.last.stats.completed - r.previous.stats.completed) / dt,
      messagesPerS: Math.max(0, totalMessages(r.last.stats) - totalMessages(r.previous.stats)) / dt,
      bytesPerS: Math.max(0, totalBytes(r.last.stats) - totalBytes(r.previous.stats)) / dt,
    };
  }
}

/** "rank 2" / "ranks 0, 1, 4-7": ranges for runs of three or more. */
export function formatRanks(ranks: number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < ranks.length; ) {
    let j = i;
    while (j + 1 < ranks.length && ranks[j + 1] === ranks[j] + 1) j++;
    if (j - i >= 2) parts.push(`${ranks[i]}-${ranks[j]}`);
    else for (let k = i; k <= j; k++) parts.push(String(ranks[k]));
    i = j + 1;
  }
  return `${ranks.length === 1 ? 'rank' : 'ranks'} ${parts.join(', ')}`;
}

/** The stall inspector's log line (without a prefix). */
export function describeStall(s: Stall): string {
  // Names in reports carry no control characters (validateMessage): safe to print as they are.
  const name = s.name === '' ? '' : ` '${s.name}'`;
  const verb = s.missing.length === 1 ? 'has' : 'have';
  const by = s.submittedBy.length > 0 ? ` that ${formatRanks(s.submittedBy)} submitted ${Math.round(s.ageMs / 1000)} s ago` : '';
  const silent = s.silent.length > 0
    ? `; no report from ${s.silent.map((x) => `rank ${x.rank} ${Number.isFinite(x.ms) ? `for ${Math.round(x.ms / 1000)} s` : 'yet'}`).join(', ')} (blocked or busy: it may have submitted it since)`
    : '';
  return `stall: ${formatRanks(s.missing)} ${verb} not submitted ${s.kind}${name} (#${s.seq})${by}${silent}`;
}
