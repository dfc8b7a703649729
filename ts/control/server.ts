// Rendezvous server: collects one registration per rank, then tells every
// worker about all the others.
//
// How it works: each accepted connection gets a Challenge with a fresh nonce;
// the worker proves it knows the job secret by answering Register with
// HMAC-SHA256(secret, nonce). Bad proofs, versions, ranks or frames get an
// Error and a closed connection, and the server keeps serving: one stray
// client must not sink the job. Once `size` workers are in, ranks left as -1
// are filled in arrival order grouped by host, the topology (local and cross
// ranks) is computed from the host ids, and the PeerTable goes to everyone.
// The connections stay open for the life of the job so that the launcher can
// broadcast Abort, and so that a worker that disappears is noticed at once
// ('worker-lost') rather than at the next collective timeout. Over them the
// workers send Stats reports, which feed the JobMonitor (monitor.ts): the
// launcher's dashboard and status line read it, and the stall inspector here
// checks it every second and logs ranks that hold a collective up.

import * as crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import * as net from 'node:net';
import { WAIT_WARN_EVERY_MS } from '../config';
import type { Logger } from '../config';
import { ControlConnection } from './frame';
import { ControlMessage, PeerTable, PROTOCOL_VERSION, Register } from './messages';
import { ElasticMembership, ElasticMembershipOptions, JOB_FINISHED_REFUSAL } from './membership';
import { describeStall, JobMonitor, JobSnapshot, Stall } from './monitor';
import { computeTopology } from './topology';

export interface RendezvousServerOptions {
  /** Number of ranks to wait for (>= 1). */
  size: number;
  /** Job secret; the HMAC key is its UTF-8 bytes (or the Buffer as is). */
  secret: string | Buffer;
  /** Address to bind: the one workers will reach. Default 127.0.0.1. */
  host?: string;
  /** Port to bind; 0 (default) picks a free one, see `port` after listen(). */
  port?: number;
  /** Milliseconds from the first registration until all ranks must have registered; 0 = no deadline. Default 300000. */
  timeoutMs?: number;
  /** Milliseconds a connection may take to send Register after the Challenge. Default 30000. */
  handshakeTimeoutMs?: number;
  /** Goes into PeerTable.job_id. Default: random hex. */
  jobId?: string;
  /** Limit on frames received (workers send only Register and Heartbeat). Default SERVER_MAX_FRAME_BYTES. */
  maxFrameBytes?: number;
  /** Where diagnostics go. Default: nowhere. */
  log?: Logger;
  /**
   * Milliseconds a collective may wait for ranks that have not submitted it before a stall is logged; 0 = never.
   * Default 60000. Until every rank has registered, the ranks still missing are logged every
   * min(stallWarnMs, WAIT_WARN_EVERY_MS) (every WAIT_WARN_EVERY_MS when it is 0).
   */
  stallWarnMs?: number;
  /**
   * An elastic job (hora run --min-np): worlds re-form as workers come and go (membership.ts); `size`
   * is then the first world's. initialSize and jobId come from size and jobId.
   */
  elastic?: Omit<ElasticMembershipOptions, 'initialSize' | 'jobId'>;
}

/**
 * Default limit on frames the server receives. A Register within FIELD_LIMITS
 * is under 5 KiB; the 1 MiB limit the workers need for a large PeerTable would
 * let every unauthenticated connection make the server buffer 1 MiB and spend
 * hundreds of milliseconds decoding it (measured: docs/security.md).
 */
export const SERVER_MAX_FRAME_BYTES = 16 * 1024;

/** One registered worker before the table is built. */
interface Registration {
  conn: ControlConnection;
  reg: Register;
  /** Registration order, used to place workers that asked for rank -1. */
  arrival: number;
}

export interface RejectionInfo {
  code: string;
  message: string;
  remote: string;
}

/**
 * Events:
 *  'listening' ({host, port})
 *  'registered' (rank: number | -1, remote: string)   a worker passed authentication
 *  'rejected'   (info: RejectionInfo)                  a connection was refused
 *  'complete'   (table: PeerTable)                     the table was sent to everyone
 *  'worker-lost'(rank: number, reason: string)         a connection closed after the table was sent
 *  'timeout'    (missingRanks: number[], registered)   the registration deadline passed
 *  'abort'      (reason, rank, code)                   abort() was called
 *  'stall'      (stall: Stall, line: string)           the stall inspector logged a stall
 */
/** Connections that may wait to register at once; beyond it the oldest is dropped. */
export const MAX_UNREGISTERED = 64;

export class RendezvousServer extends EventEmitter {
  readonly size: number;
  readonly jobId: string;
  private readonly secret: Buffer;
  private readonly host: string;
  private readonly requestedPort: number;
  private readonly timeoutMs: number;
  private readonly handshakeTimeoutMs: number;
  private readonly maxFrameBytes: number;
  private readonly log: Logger;
  private readonly server: net.Server;
  private readonly connections = new Set<ControlConnection>();
  /** Connections that have not registered yet, oldest first (a Set iterates in insertion order). */
  private readonly unregistered = new Set<ControlConnection>();
  // rank -> registration for explicit ranks; -1 registrations wait in `unassigned`.
  private readonly byRank = new Map<number, Registration>();
  private readonly unassigned: Registration[] = [];
  private arrivals = 0;
  private table: PeerTable | undefined;
  private rankOf = new Map<ControlConnection, number>();
  private deadline: NodeJS.Timeout | undefined;
  /** While ranks are missing: the warning that names them, every registrationWarnMs. */
  private registrationWarning: NodeJS.Timeout | undefined;
  private firstRegisteredAt = 0;
  private closing = false;
  private boundPort = 0;
  private unrefed = false;
  /** What the workers' Stats reports say about the job. */
  readonly monitor: JobMonitor;
  private readonly stallWarnMs: number;
  private stallTimer: NodeJS.Timeout | undefined;
  private lastStallWarning: { seq: number; at: number } | undefined;
  /** Set in an elastic job. */
  readonly elastic: ElasticMembership | undefined;

  constructor(opts: RendezvousServerOptions) {
    super();
    if (!Number.isSafeInteger(opts.size) || opts.size < 1) throw new RangeError(`RendezvousServer: size must be an integer >= 1, got ${opts.size}`);
    this.size = opts.size;
    this.secret = typeof opts.secret === 'string' ? Buffer.from(opts.secret, 'utf8') : opts.secret;
    if (this.secret.length === 0) throw new RangeError('RendezvousServer: secret must not be empty');
    this.host = opts.host ?? '127.0.0.1';
    this.requestedPort = opts.port ?? 0;
    this.timeoutMs = opts.timeoutMs ?? 300_000;
    this.handshakeTimeoutMs = opts.handshakeTimeoutMs ?? 30_000;
    this.jobId = opts.jobId ?? crypto.randomBytes(8).toString('hex');
    this.maxFrameBytes = opts.maxFrameBytes ?? SERVER_MAX_FRAME_BYTES;
    this.log = opts.log ?? (() => undefined);
    this.stallWarnMs = opts.stallWarnMs ?? 60_000;
    this.monitor = new JobMonitor(opts.elastic ? Math.max(this.size, opts.elastic.maxSize) : this.size);
    if (opts.elastic) {
      this.elastic = new ElasticMembership({ ...opts.elastic, initialSize: this.size, jobId: this.jobId }, this, this.log);
      this.on('formed', () => {
        this.monitor.reset();
        if (this.stallWarnMs > 0 && !this.stallTimer) {
          this.stallTimer = setInterval(() => this.inspectStalls(), Math.min(1000, this.stallWarnMs / 2));
          this.stallTimer.unref();
        }
      });
    }
    this.server = net.createServer((socket) => this.accept(socket));
    this.server.on('error', (err) => this.log('WARN', `rendezvous server error: ${err.message}`));
  }

  /** Port actually bound (after listen()). */
  get port(): number {
    return this.boundPort;
  }

  /** The table, once every rank has registered. */
  get peerTable(): PeerTable | undefined {
    return this.table;
  }

  /** Binds and starts accepting; resolves with the bound address. */
  listen(): Promise<{ host: string; port: number }> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.server.once('error', onError);
      this.server.listen({ host: this.host, port: this.requestedPort, exclusive: true }, () => {
        this.server.off('error', onError);
        this.boundPort = (this.server.address() as net.AddressInfo).port;
        const where = { host: this.host, port: this.boundPort };
        this.log('INFO', `rendezvous server listening on ${this.host}:${this.boundPort} for ${this.size} ranks`);
        this.emit('listening', where);
        resolve(where);
      });
    });
  }

  /** Resolves with the table once every rank has registered. */
  waitForTable(): Promise<PeerTable> {
    if (this.table) return Promise.resolve(this.table);
    return new Promise((resolve, reject) => {
      const onComplete = (table: PeerTable) => {
        this.off('timeout', onTimeout);
        resolve(table);
      };
      const onTimeout = (missing: number[]) => {
        this.off('complete', onComplete);
        const err = new Error(`rendezvous timed out: ${missing.length} of ${this.size} ranks never registered`) as Error & { code: string };
        err.code = 'ERR_TIMEOUT';
        reject(err);
      };
      this.once('complete', onComplete);
      this.once('timeout', onTimeout);
    });
  }

  /** Workers registered and, once the table is out, still connected. */
  get ranksUp(): number {
    if (this.elastic) return this.elastic.worldSize;
    return this.table ? this.rankOf.size : this.byRank.size + this.unassigned.length;
  }

  /** The job's figures as of now, for the dashboard and the status line. */
  snapshot(): JobSnapshot {
    return this.monitor.snapshot(this.ranksUp, this.stallWarnMs);
  }

  /** Sends Abort to every connected worker. */
  abort(reason: string, rank = -1, code = 'ERR_PEER_LOST'): void {
    this.log('INFO', `broadcasting abort: ${reason}`);
    this.emit('abort', reason, rank, code);
    for (const conn of this.connections) conn.send({ kind: 'abort', reason, rank, code });
  }

  /**
   * Lets the process exit while the server still runs (for rank 0 hosting it
   * inside a training script): the listener and every connection, present
   * and future, stop holding the event loop open.
   */
  unref(): void {
    this.unrefed = true;
    this.server.unref();
    for (const conn of this.connections) conn.socket.unref();
  }

  /** Stops listening and closes every connection. */
  close(): Promise<void> {
    this.closing = true;
    this.elastic?.close();
    if (this.deadline) clearTimeout(this.deadline);
    if (this.registrationWarning) clearInterval(this.registrationWarning);
    if (this.stallTimer) clearInterval(this.stallTimer);
    for (const conn of this.connections) conn.close();
    return new Promise((resolve) => {
      if (!this.server.listening) return resolve();
      this.server.close(() => resolve());
    });
  }

  // -------------------------------------------------------------------------

  private accept(socket: net.Socket): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    const conn = new ControlConnection(socket, this.maxFrameBytes);
    if (this.unrefed) socket.unref();
    // At the cap, the oldest connection that has not registered makes room. Refusing the newest instead
    // would let anyone who holds MAX_UNREGISTERED idle connections lock the real workers out; a worker
    // registers within one round trip, so it is never the oldest for long.
    if (this.unregistered.size >= MAX_UNREGISTERED) {
      const oldest = this.unregistered.values().next().value as ControlConnection;
      this.unregistered.delete(oldest);
      this.reject(oldest, 'ERR_AUTH', `dropped: ${MAX_UNREGISTERED} connections were waiting to register; the oldest makes room`);
    }
    this.connections.add(conn);
    this.unregistered.add(conn);
    const nonce = crypto.randomBytes(32);
    let registered = false;
    const handshake = setTimeout(() => {
      if (!registered) this.reject(conn, 'ERR_TIMEOUT', `no Register within ${this.handshakeTimeoutMs} ms of connecting`);
    }, this.handshakeTimeoutMs);
    handshake.unref();

    conn.on('message', (msg: ControlMessage) => {
      if (!registered) {
        if (msg.kind !== 'register') {
          this.reject(conn, 'ERR_INVALID_ARGUMENT', `expected Register as the first message, got ${msg.kind}`);
          return;
        }
        registered = this.onRegister(conn, msg, nonce);
        if (registered) {
          clearTimeout(handshake);
          this.unregistered.delete(conn);
        }
        return;
      }
      if (msg.kind === 'heartbeat') {
        conn.send({ kind: 'heartbeat', seq: msg.seq, timeMs: Date.now() });
        return;
      }
      if (msg.kind === 'elasticReport') {
        this.elastic?.onReport(conn, msg);
        return;
      }
      if (msg.kind === 'stats') {
        // Before the table a registered worker has no final rank yet; it does not report then.
        const rank = this.elastic ? this.elastic.rankOf(conn) : this.rankOf.get(conn);
        if (rank !== undefined) this.monitor.record(rank, msg);
        return;
      }
      this.log('TRACE', `ignoring ${msg.kind} from ${conn.remote}`);
    });
    conn.on('invalid', (err) => {
      this.reject(conn, 'ERR_INVALID_ARGUMENT', err.message);
    });
    conn.on('close', (err) => {
      clearTimeout(handshake);
      this.connections.delete(conn);
      this.unregistered.delete(conn);
      this.onClose(conn, err);
    });
    conn.send({ kind: 'challenge', nonce, protocolVersion: PROTOCOL_VERSION });
  }

  private reject(conn: ControlConnection, code: string, message: string): void {
    // Already answered (say, a bad frame, then the handshake timer before the socket is gone): once is enough.
    if (conn.isFinished) return;
    const info: RejectionInfo = { code, message, remote: conn.remote };
    this.log('WARN', `rejected control connection from ${info.remote}: ${code}: ${message}`);
    conn.sendAndEnd({ kind: 'error', code, message });
    this.emit('rejected', info);
  }

  // Returns true when the worker was accepted.
  private onRegister(conn: ControlConnection, reg: Register, nonce: Buffer): boolean {
    if (reg.protocolVersion !== PROTOCOL_VERSION) {
      this.reject(conn, 'ERR_INVALID_ARGUMENT', `protocol version ${reg.protocolVersion} is not supported (this server speaks ${PROTOCOL_VERSION}); use the same hora version on every host`);
      return false;
    }
    const expected = crypto.createHmac('sha256', this.secret).update(nonce).digest();
    if (reg.auth.length !== expected.length || !crypto.timingSafeEqual(reg.auth, expected)) {
      this.reject(conn, 'ERR_AUTH', 'authentication failed: the worker does not have this job\'s secret (HORA_SECRET)');
      return false;
    }
    const who = `${reg.hostname || reg.hostId} pid ${reg.pid}`;
    if (this.elastic) {
      const refusal = this.elastic.onRegister(conn, reg);
      if (refusal !== undefined) this.reject(conn, refusal === JOB_FINISHED_REFUSAL ? 'ERR_SHUTDOWN' : 'ERR_INVALID_ARGUMENT', `${who}: ${refusal}`);
      else this.emit('registered', reg.rank, conn.remote);
      return refusal === undefined;
    }
    if (reg.elastic) {
      this.reject(conn, 'ERR_INVALID_ARGUMENT', `${who} registered as an elastic worker (HORA_ELASTIC=1) but this job is not elastic (hora run without --min-np)`);
      return false;
    }
    if (this.table) {
      this.reject(conn, 'ERR_INVALID_ARGUMENT', `the job already has all ${this.size} ranks (rank ${reg.rank} from ${who} arrived late)`);
      return false;
    }
    if (reg.rank !== -1 && (!Number.isInteger(reg.rank) || reg.rank < 0 || reg.rank >= this.size)) {
      this.reject(conn, 'ERR_INVALID_ARGUMENT', `rank ${reg.rank} from ${who} is out of range for a job of size ${this.size}`);
      return false;
    }
    if (reg.rank !== -1 && this.byRank.has(reg.rank)) {
      const other = this.byRank.get(reg.rank) as Registration;
      this.reject(conn, 'ERR_INVALID_ARGUMENT', `rank ${reg.rank} is already registered by ${other.reg.hostname || other.reg.hostId} pid ${other.reg.pid}; ${who} asked for it too`);
      return false;
    }
    if (this.byRank.size + this.unassigned.length >= this.size) {
      this.reject(conn, 'ERR_INVALID_ARGUMENT', `the job already has all ${this.size} ranks; ${who} is one too many`);
      return false;
    }
    // The clock starts with the first worker: a job whose program never uses hora never times out.
    if (this.arrivals === 0) {
      this.firstRegisteredAt = Date.now();
      if (this.timeoutMs > 0) {
        this.deadline = setTimeout(() => this.onDeadline(), this.timeoutMs);
        this.deadline.unref();
      }
      // The ranks that came wait in silence for the others (a rank never started, one stuck before its
      // init()): say every few seconds who is missing, as a worker that cannot reach the server does.
      const every = this.stallWarnMs > 0 ? Math.min(this.stallWarnMs, WAIT_WARN_EVERY_MS) : WAIT_WARN_EVERY_MS;
      this.registrationWarning = setInterval(() => this.warnMissing(), every);
      this.registrationWarning.unref();
    }
    const entry: Registration = { conn, reg, arrival: this.arrivals++ };
    if (reg.rank === -1) this.unassigned.push(entry);
    else this.byRank.set(reg.rank, entry);
    this.log('INFO', `registered rank ${reg.rank} (${who}, host ${reg.hostId}) from ${conn.remote}; ${this.byRank.size + this.unassigned.length}/${this.size}`);
    this.emit('registered', reg.rank, conn.remote);
    if (this.byRank.size + this.unassigned.length === this.size) this.complete();
    return true;
  }

  private complete(): void {
    if (this.deadline) clearTimeout(this.deadline);
    if (this.registrationWarning) clearInterval(this.registrationWarning);
    const regs = assignRanks(this.size, this.byRank, this.unassigned);
    const table: PeerTable = { jobId: this.jobId, size: this.size, peers: computeTopology(regs.map((r) => r.reg)), yourRank: -1 };
    this.table = table;
    this.unassigned.length = 0;
    regs.forEach((r, rank) => {
      this.rankOf.set(r.conn, rank);
      this.byRank.set(rank, r);
    });
    regs.forEach((r, rank) => r.conn.send({ kind: 'peerTable', ...table, yourRank: rank }));
    this.log('INFO', `all ${this.size} ranks registered; peer table sent`);
    if (this.stallWarnMs > 0) {
      this.stallTimer = setInterval(() => this.inspectStalls(), Math.min(1000, this.stallWarnMs / 2));
      this.stallTimer.unref();
    }
    this.emit('complete', table);
  }

  private onClose(conn: ControlConnection, err: Error | undefined): void {
    if (this.closing) return;
    if (this.elastic) {
      this.elastic.onLost(conn, err ? `its control connection failed: ${err.message}` : 'its control connection closed');
      return;
    }
    if (this.table) {
      const rank = this.rankOf.get(conn);
      if (rank === undefined) return;
      this.rankOf.delete(conn);
      this.monitor.markLost(rank);
      const reason = err ? `control connection of rank ${rank} failed: ${err.message}` : `control connection of rank ${rank} closed`;
      this.log('INFO', reason);
      this.emit('worker-lost', rank, reason);
      return;
    }
    // Before the table: free the slot so that a restarted worker can take it.
    for (const [rank, r] of this.byRank) {
      if (r.conn === conn) {
        this.byRank.delete(rank);
        this.log('WARN', `rank ${rank} disconnected before the job was complete; waiting for it to register again`);
      }
    }
    const i = this.unassigned.findIndex((r) => r.conn === conn);
    if (i >= 0) this.unassigned.splice(i, 1);
  }

  // Logs the oldest stall once, then again every stallWarnMs while it lasts.
  private inspectStalls(): void {
    if (this.closing) return;
    const [stall]: (Stall | undefined)[] = this.monitor.stalls(this.stallWarnMs);
    if (!stall) return;
    const now = Date.now();
    const last = this.lastStallWarning;
    if (last && last.seq === stall.seq && now - last.at < this.stallWarnMs) return;
    this.lastStallWarning = { seq: stall.seq, at: now };
    const line = describeStall(stall);
    this.log('WARN', line);
    this.emit('stall', stall, line);
  }

  /**
   * Before the table: how many ranks have registered, from which hosts, and which are missing, in words:
   * "1 of 2 ranks registered (rank 0 from node1, pid 4321); missing: rank 1".
   */
  registrationStatus(): string {
    const registered = this.byRank.size + this.unassigned.length;
    const byHost = new Map<string, { ranks: number[]; pids: number[] }>();
    const entries = [...this.byRank].sort(([a], [b]) => a - b).map(([rank, r]) => ({ rank, reg: r.reg }))
      .concat(this.unassigned.map((r) => ({ rank: -1, reg: r.reg })));
    for (const { rank, reg } of entries) {
      const host = reg.hostname || reg.hostId;
      const h = byHost.get(host) ?? { ranks: [], pids: [] };
      h.ranks.push(rank);
      h.pids.push(reg.pid);
      byHost.set(host, h);
    }
    const SHOWN_HOSTS = 8;
    const hosts = [...byHost].slice(0, SHOWN_HOSTS).map(([host, h]) => {
      const ranks = h.ranks.filter((r) => r >= 0);
      const unranked = h.ranks.length - ranks.length;
      const what = [ranks.length > 0 ? `${ranks.length > 1 ? 'ranks' : 'rank'} ${rankRanges(ranks)}` : '', unranked > 0 ? `${unranked} without a rank yet` : '']
        .filter(Boolean).join(' and ');
      return `${what} from ${host}${h.pids.length === 1 ? `, pid ${h.pids[0]}` : ''}`;
    });
    if (byHost.size > SHOWN_HOSTS) hosts.push(`${byHost.size - SHOWN_HOSTS} more hosts`);
    const missing: number[] = [];
    for (let r = 0; r < this.size; r++) if (!this.byRank.has(r)) missing.push(r);
    // Workers without a rank take the free ranks in the end: only the count of the missing is known.
    const missingText = this.unassigned.length === 0
      ? `${missing.length > 1 ? 'ranks' : 'rank'} ${rankRanges(missing)}`
      : `${this.size - registered} more rank(s)`;
    return `${registered} of ${this.size} ranks registered${hosts.length > 0 ? ` (${hosts.join('; ')})` : ''}; missing: ${missingText}`;
  }

  // While ranks are missing: who is, and when the server gives up.
  private warnMissing(): void {
    if (this.table || this.closing) return;
    const now = Date.now();
    const waited = Math.round((now - this.firstRegisteredAt) / 1000);
    const left = this.timeoutMs > 0 ? Math.max(0, Math.round((this.firstRegisteredAt + this.timeoutMs - now) / 1000)) : undefined;
    this.log('WARN', `still waiting, ${waited} s after the first rank registered: ${this.registrationStatus()}. ` +
      (left !== undefined ? `Giving up in ${left} s (HORA_TIMEOUT_S). ` : '') +
      `Is every rank started, and does its hora.init() reach ${this.host}:${this.boundPort}?`);
  }

  private onDeadline(): void {
    if (this.registrationWarning) clearInterval(this.registrationWarning);
    if (this.table || this.closing) return;
    const missing: number[] = [];
    for (let r = 0; r < this.size; r++) if (!this.byRank.has(r)) missing.push(r);
    const registered = this.byRank.size + this.unassigned.length;
    const message = `rendezvous timed out: ${this.timeoutMs} ms after the first worker registered, ${registered} of ${this.size} ranks have` +
      (this.unassigned.length === 0 ? ` (missing ranks ${missing.join(', ')})` : '');
    this.log('WARN', message);
    for (const conn of this.connections) conn.sendAndEnd({ kind: 'error', code: 'ERR_TIMEOUT', message });
    this.emit('timeout', missing, registered);
  }
}

/** "0-3, 5, 7-8": ascending ranks with runs joined. */
function rankRanges(ranks: number[]): string {
  const parts: string[] = [];
  for (let i = 0; i < ranks.length; ) {
    let j = i;
    while (j + 1 < ranks.length && ranks[j + 1] === ranks[j] + 1) j++;
    parts.push(j === i ? String(ranks[i]) : `${ranks[i]}-${ranks[j]}`);
    i = j + 1;
  }
  return parts.join(', ');
}

/**
 * Returns registrations indexed by final rank: explicit ranks stay; workers
 * that asked for -1 fill the free ranks in ascending order, grouped by host
 * (hosts in order of their first arrival, workers of a host in arrival order),
 * so that the ranks of one host are contiguous where possible.
 */
function assignRanks(size: number, byRank: Map<number, Registration>, unassigned: Registration[]): Registration[] {
  const out: (Registration | undefined)[] = new Array(size).fill(undefined);
  for (const [rank, r] of byRank) out[rank] = r;
  const hostOrder: string[] = [];
  const perHost = new Map<string, Registration[]>();
  for (const r of [...unassigned].sort((a, b) => a.arrival - b.arrival)) {
    let list = perHost.get(r.reg.hostId);
    if (!list) {
      list = [];
      perHost.set(r.reg.hostId, list);
      hostOrder.push(r.reg.hostId);
    }
    list.push(r);
  }
  const queue = hostOrder.flatMap((h) => perHost.get(h) as Registration[]);
  let next = 0;
  for (let rank = 0; rank < size; rank++) if (out[rank] === undefined) out[rank] = queue[next++];
  return out as Registration[];
}
