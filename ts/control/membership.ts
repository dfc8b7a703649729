// Elastic membership: the worlds of an elastic job (hora run --min-np), one generation after another.
//
// How it works: every worker registers with `elastic` set and waits. Once enough are in, the server
// forms a world: ranks go by worker id (start order, so the oldest worker is rank 0), each worker gets
// Membership ASSIGN with its rank, the size and the generation's job id, opens its data-plane listener,
// answers ElasticReport LISTENING with the port, and once all have, everyone gets the PeerTable.
//
// A world ends when one of its workers is lost (its control connection closes, or the launcher saw
// its process exit) or when a survivor asks for a new one (REJOIN: its collective timed out, or its
// commit saw a joiner). Every member still connected gets Membership ENDED at once, so that their
// pending collectives fail now rather than at a timeout, and has `settleMs` to send REJOIN; one that
// has not (a stopped process) is evicted: the launcher kills it and it is left out. The next world
// forms from those that rejoined plus any new workers, as long as there are at least minSize; below
// it the server waits, says so every WAIT_LOG_MS, and gives up after waitMs ('elastic-timeout').
//
// New workers that register while a world runs wait; its members get Membership GROW and agree, at
// their next commit, to re-form with them (no rollback: the new worker gets the state by sync).
// Once a member reports FINISHED (its training function returned) the job is ending: losses no
// longer re-form anything.

import type { EventEmitter } from 'node:events';
import type { Logger } from '../config';
import type { ControlConnection } from './frame';
import { ElasticEvent, ElasticReport, MembershipEvent, PeerTable, Register } from './messages';
import { computeTopology } from './topology';

export interface ElasticMembershipOptions {
  /** Workers of the first world (hora run -np). */
  initialSize: number;
  /** Fewest workers a world may have. */
  minSize: number;
  /** Most workers a world may have. */
  maxSize: number;
  /** Milliseconds the members of an ended world have to rejoin before they are evicted. */
  settleMs: number;
  /** Milliseconds the job may wait below minSize before it fails; also the first world's deadline. */
  waitMs: number;
  /** The job's id; generation g's data plane is named `${jobId}-g${g}`. */
  jobId: string;
  /**
   * Number workers in the order they register, whatever id they send (`hora rendezvous`, whose workers
   * are started by others: pods). hora run numbers its workers itself, in start order.
   */
  assignWorkerIds?: boolean;
}

/** One registered worker of an elastic job. */
interface Member {
  conn: ControlConnection;
  reg: Register;
  workerId: number;
  /** Rank in the current world, -1 when not in it. */
  rank: number;
  entered: boolean;
  dataAddr: string;
  dataPort: number;
  /** Sent LISTENING for the world being formed. */
  listening: boolean;
  /** From LISTENING: 1 + the generation whose connections the worker holds (0: none). */
  keptWorld: number;
}

type Phase = 'forming' | 'connecting' | 'running';

const WAIT_LOG_MS = 10_000;

/**
 * What a worker that comes too late hears: it registered (or waited to join) after a training function
 * returned. Its hora.init() ends the process with status 0, as there is nothing left for it to do.
 */
export const JOB_FINISHED_REFUSAL = 'the job is ending (a worker\'s training function has returned); no new workers join now';

/**
 * Events, emitted on the server:
 *  'evict'           (workerId, pid, reason)  a member did not rejoin in time: kill it
 *  'below-min'       (have, need)             the next world waits for workers (the launcher may refill slots)
 *  'elastic-timeout' (message)                waited waitMs below minSize: the job fails
 *  'formed'          (generation, size)       a world's PeerTable went out
 *  'ended'           (generation, reason)     a world ended
 */
export class ElasticMembership {
  private readonly members = new Map<ControlConnection, Member>();
  private world: Member[] = [];
  private generation = -1;
  private phase: Phase = 'forming';
  /** Members of the ended world that have not rejoined yet. */
  private readonly expected = new Set<Member>();
  /** Ready for the next world: rejoined members and new workers. */
  private readonly waiting = new Set<Member>();
  private settleTimer: NodeJS.Timeout | undefined;
  private waitTimer: NodeJS.Timeout | undefined;
  private waitLog: NodeJS.Timeout | undefined;
  private finishing = false;
  private growAnnounced = false;
  private closed = false;

  constructor(
    private readonly opts: ElasticMembershipOptions,
    private readonly events: EventEmitter,
    private readonly log: Logger,
  ) {}

  get currentGeneration(): number {
    return this.generation;
  }

  /** Workers in the current world (0 while none is formed). */
  get worldSize(): number {
    return this.phase === 'running' ? this.world.length : 0;
  }

  /** Whether worker `workerId` is in the current world (once the job is ending: the world that finishes). */
  inWorld(workerId: number): boolean {
    return this.world.some((m) => m.workerId === workerId);
  }

  /** Rank of a connection in the current world, for Stats reports. */
  rankOf(conn: ControlConnection): number | undefined {
    const m = this.members.get(conn);
    return m && m.rank >= 0 ? m.rank : undefined;
  }

  /** Whether the worker with this id has entered hora.elastic.run (its failure re-forms the world). */
  hasEntered(workerId: number): boolean {
    for (const m of this.members.values()) if (m.workerId === workerId) return m.entered;
    return this.enteredGone.has(workerId);
  }

  private readonly enteredGone = new Set<number>();
  private nextWorkerId = 0;

  /** Workers registered and still connected, in a world or waiting for one. */
  get memberCount(): number {
    return this.members.size;
  }

  /** Whether some worker's training function returned: the job is ending. */
  get isFinishing(): boolean {
    return this.finishing;
  }

  /** Refusal text, or undefined when the registration is taken. */
  onRegister(conn: ControlConnection, reg: Register): string | undefined {
    if (!reg.elastic) return 'this job is elastic (hora run --min-np) but the worker did not register as elastic; use the same hora version everywhere';
    if (this.finishing) return JOB_FINISHED_REFUSAL;
    const workerId = this.opts.assignWorkerIds ? this.nextWorkerId++ : reg.workerId ?? 0;
    const member: Member = { conn, reg, workerId, rank: -1, entered: false, dataAddr: reg.dataAddr, dataPort: 0, listening: false, keptWorld: 0 };
    this.members.set(conn, member);
    this.waiting.add(member);
    this.log('INFO', `worker ${member.workerId} (pid ${reg.pid}, host ${reg.hostId}) registered; ${this.waiting.size} waiting for the next world`);
    if (this.phase === 'forming') this.tryForm();
    else this.announceGrow();
    return undefined;
  }

  onReport(conn: ControlConnection, report: ElasticReport): void {
    const m = this.members.get(conn);
    if (!m) return;
    switch (report.event) {
      case ElasticEvent.Entered:
        m.entered = true;
        return;
      case ElasticEvent.Finished:
        if (!this.finishing) this.log('INFO', `rank ${m.rank}'s training function returned; the job is ending`);
        this.finishing = true;
        this.clearTimers();
        // Workers still waiting to join (a refill that came late) are let go rather than left waiting.
        for (const w of [...this.waiting]) {
          if (w.entered || w.rank >= 0 || this.world.includes(w)) continue;
          this.log('INFO', `worker ${w.workerId} waited to join; the job is ending: letting it go`);
          this.waiting.delete(w);
          this.members.delete(w.conn);
          w.conn.sendAndEnd({ kind: 'error', code: 'ERR_SHUTDOWN', message: JOB_FINISHED_REFUSAL });
        }
        return;
      case ElasticEvent.Rejoin:
        if (this.finishing) return;
        if (report.generation === this.generation && this.phase !== 'forming' && m.rank >= 0) {
          this.endWorld(`rank ${m.rank} asked for a new world: ${report.reason}`, -1);
        }
        if (this.phase !== 'forming') return; // a stale request: this member is in the current world
        this.expected.delete(m);
        m.rank = -1;
        this.waiting.add(m);
        this.tryForm();
        return;
      case ElasticEvent.Listening:
        if (this.phase !== 'connecting' || report.generation !== this.generation || m.rank < 0) return;
        m.dataAddr = report.dataAddr || m.dataAddr;
        m.dataPort = report.dataPort;
        m.keptWorld = report.keptWorld ?? 0;
        m.listening = true;
        if (this.world.every((w) => w.listening)) this.sendTable();
        return;
    }
  }

  /** A worker's control connection closed, or the launcher saw its process end. */
  onLost(conn: ControlConnection, reason: string): void {
    const m = this.members.get(conn);
    if (!m) return;
    this.members.delete(conn);
    if (m.entered) this.enteredGone.add(m.workerId);
    this.waiting.delete(m);
    this.expected.delete(m);
    if (this.finishing || this.closed) return;
    if (m.rank >= 0 && this.phase !== 'forming') {
      this.endWorld(`rank ${m.rank} (worker ${m.workerId}, pid ${m.reg.pid}) was lost: ${reason}`, m.rank);
      return;
    }
    if (this.phase === 'forming') this.tryForm();
  }

  /** The launcher saw worker `workerId`'s process end; its connection may not have closed yet. */
  workerExited(workerId: number, reason: string): void {
    for (const [conn, m] of this.members) {
      if (m.workerId !== workerId) continue;
      this.onLost(conn, reason);
      conn.close();
    }
  }

  close(): void {
    this.closed = true;
    this.clearTimers();
  }

  // -------------------------------------------------------------------------

  private announceGrow(): void {
    if (this.phase !== 'running' || this.growAnnounced || this.waiting.size === 0) return;
    if (this.world.length >= this.opts.maxSize) return;
    this.growAnnounced = true;
    const reason = `${this.waiting.size} new worker(s) wait to join`;
    this.log('INFO', `${reason}; the world re-forms at the ranks' next commit`);
    for (const m of this.world) {
      m.conn.send({ kind: 'membership', event: MembershipEvent.Grow, generation: this.generation, rank: m.rank, size: this.world.length, jobId: '', reason, lostRank: -1 });
    }
  }

  private endWorld(reason: string, lostRank: number): void {
    const generation = this.generation;
    this.log('INFO', `world ${generation} ended: ${reason}`);
    this.phase = 'forming';
    this.growAnnounced = false;
    for (const m of this.world) {
      if (!this.members.has(m.conn)) continue;
      this.expected.add(m);
      m.conn.send({ kind: 'membership', event: MembershipEvent.Ended, generation, rank: m.rank, size: this.world.length, jobId: '', reason, lostRank });
    }
    this.world = [];
    this.events.emit('ended', generation, reason);
    if (this.settleTimer) clearTimeout(this.settleTimer);
    this.settleTimer = setTimeout(() => this.evictLate(), this.opts.settleMs);
    this.settleTimer.unref();
    this.tryForm();
  }

  // Members of the ended world that did not rejoin within settleMs are left out, and killed.
  private evictLate(): void {
    this.settleTimer = undefined;
    for (const m of [...this.expected]) {
      const reason = `worker ${m.workerId} (pid ${m.reg.pid}, rank ${m.rank} of the last world) did not re-register within ` +
        `${this.opts.settleMs / 1000} s (HORA_ELASTIC_SETTLE_S); leaving it out`;
      this.log('WARN', reason);
      this.expected.delete(m);
      this.members.delete(m.conn);
      if (m.entered) this.enteredGone.add(m.workerId);
      m.conn.close();
      this.events.emit('evict', m.workerId, m.reg.pid, reason);
    }
    this.tryForm();
  }

  private tryForm(): void {
    if (this.phase !== 'forming' || this.finishing || this.closed) return;
    if (this.expected.size > 0) return; // the settle timer bounds this wait
    const first = this.generation < 0;
    const need = first ? this.opts.initialSize : this.opts.minSize;
    if (this.waiting.size < need) {
      // With no worker left at all (they all ended) there is nothing to wait with until one registers.
      if (this.members.size > 0) this.startWaiting(this.waiting.size, need, first);
      return;
    }
    this.stopWaiting();
    const chosen = [...this.waiting].sort((a, b) => a.workerId - b.workerId).slice(0, this.opts.maxSize);
    this.generation++;
    this.phase = 'connecting';
    this.world = chosen;
    const jobId = `${this.opts.jobId}-g${this.generation}`;
    chosen.forEach((m, rank) => {
      this.waiting.delete(m);
      m.rank = rank;
      m.dataPort = 0;
      m.listening = false;
      m.keptWorld = 0;
      m.conn.send({ kind: 'membership', event: MembershipEvent.Assign, generation: this.generation, rank, size: chosen.length, jobId, reason: '', lostRank: -1 });
    });
    this.log('INFO', `forming world ${this.generation} of ${chosen.length} worker(s) (ids ${chosen.map((m) => m.workerId).join(', ')})`);
  }

  private sendTable(): void {
    const peers = computeTopology(this.world.map((m) => ({
      hostId: m.reg.hostId, dataAddr: m.dataAddr, dataPort: m.dataPort, hostname: m.reg.hostname, pid: m.reg.pid,
    })));
    const table: PeerTable = {
      jobId: `${this.opts.jobId}-g${this.generation}`, size: this.world.length, peers, yourRank: -1, generation: this.generation,
      workerIds: this.world.map((m) => m.workerId), keptWorlds: this.world.map((m) => m.keptWorld),
    };
    for (const m of this.world) m.conn.send({ kind: 'peerTable', ...table, yourRank: m.rank });
    this.phase = 'running';
    this.log('INFO', `world ${this.generation} of ${this.world.length} rank(s) formed`);
    this.events.emit('formed', this.generation, this.world.length);
    this.announceGrow();
  }

  private startWaiting(have: number, need: number, first: boolean): void {
    if (!first) this.events.emit('below-min', have, need);
    if (this.waitTimer) return;
    const started = Date.now();
    const what = first ? `the first world waits for all ${need} workers to register` : `the next world needs ${need} workers (--min-np)`;
    this.waitTimer = setTimeout(() => {
      const n = this.waiting.size;
      const message = first
        ? `only ${n} of ${need} workers registered within ${this.opts.waitMs / 1000} s`
        : `the job had ${n} rank(s) and needed ${need} (--min-np ${need}); no worker came within --elastic-timeout ${this.opts.waitMs / 1000} s`;
      this.log('WARN', message);
      this.events.emit('elastic-timeout', message);
    }, this.opts.waitMs);
    this.waitTimer.unref();
    this.waitLog = setInterval(() => {
      const left = Math.max(0, Math.round((this.opts.waitMs - (Date.now() - started)) / 1000));
      this.log('WARN', `${what}; ${this.waiting.size} ready; waiting up to ${left} s more`);
    }, WAIT_LOG_MS);
    this.waitLog.unref();
    if (!first) this.log('WARN', `${what}; ${have} ready; waiting up to ${this.opts.waitMs / 1000} s (--elastic-timeout)`);
  }

  private stopWaiting(): void {
    if (this.waitTimer) clearTimeout(this.waitTimer);
    if (this.waitLog) clearInterval(this.waitLog);
    this.waitTimer = undefined;
    this.waitLog = undefined;
  }

  private clearTimers(): void {
    this.stopWaiting();
    if (this.settleTimer) clearTimeout(this.settleTimer);
    this.settleTimer = undefined;
  }
}
