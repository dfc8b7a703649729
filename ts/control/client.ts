// Rendezvous client: one worker's side of proto/hora.proto.
//
// register() connects (retrying while the server is not up yet: workers and
// the server start at the same time), answers the Challenge with
// HMAC-SHA256(secret, nonce), waits for the PeerTable, and returns it with the
// still-open connection. That connection then carries Abort from the launcher
// for the life of the job; it is unref'd, so it never keeps a finished
// training script alive.
//
// A server that cannot be reached is not waited for in silence: after a short
// grace a WARN names the address, the OS error and what chose the address,
// again every WARN_EVERY_MS, and the connect deadline (connectTimeoutMs, well
// under the overall timeout under `hora run`) ends the wait with advice.

import * as crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import * as net from 'node:net';
import * as os from 'node:os';
import { WAIT_WARN_EVERY_MS } from '../config';
import type { Logger } from '../config';
import { ControlConnection } from './frame';
import { Abort, ControlMessage, ElasticEvent, Membership, MembershipEvent, Peer, PeerTable, PROTOCOL_VERSION } from './messages';

export interface RegisterOptions {
  /** Rendezvous server address. */
  addr: string;
  /** Rendezvous server port. */
  port: number;
  /** Job secret (HORA_SECRET); the HMAC key is its UTF-8 bytes (or the Buffer as is). */
  secret: string | Buffer;
  /** Rank to claim, or -1 to let the server assign one. */
  rank: number;
  /** Host identity (HORA_HOST_ID); equal ids share a host. */
  hostId: string;
  /** Address peers use to reach this worker's data plane. */
  dataAddr: string;
  /** Port of this worker's data-plane listener (0 if not listening yet). */
  dataPort: number;
  /** Milliseconds for the whole registration, retries and waiting for all ranks included. */
  timeoutMs: number;
  /**
   * Milliseconds to keep trying to reach the server, until its Challenge arrives (at most timeoutMs, the
   * default). Past it register() fails with ERR_PEER_LOST; past timeoutMs, with ERR_TIMEOUT.
   */
  connectTimeoutMs?: number;
  /** What chose addr, named in warnings and errors, e.g. "hora run (--iface eth1)" or "MASTER_ADDR". */
  addrSource?: string;
  /** What to try when the server cannot be reached, appended to the error (who can change the address differs by launcher). */
  unreachableHint?: string;
  /** Delay before the first retry; doubles up to 1 s. Default 50. */
  retryIntervalMs?: number;
  /** Reported to the server for diagnostics. Defaults: os.hostname(), process.pid. */
  hostname?: string;
  pid?: number;
  log?: Logger;
  /**
   * An elastic job's worker (HORA_WORKER_ID): register() then resolves with the connection once the
   * server assigns a place in a world (Membership ASSIGN), and waits for that as long as it takes: the
   * launcher bounds the wait (--elastic-timeout) and ends the job when it passes.
   */
  elasticWorkerId?: number;
}

export interface RegisterResult {
  /** Every peer, indexed by rank. */
  table: PeerTable;
  /** This worker's entry: table.peers[self.rank] (the rank is final, even when -1 was asked). */
  self: Peer;
  /** The open control connection: abort notifications, close(). */
  connection: RendezvousConnection;
}

/** An elastic worker's registration: its place in the world being formed, before the PeerTable. */
export interface ElasticRegisterResult {
  assignment: Membership;
  connection: RendezvousConnection;
}

/** Error from registration or the control connection; `code` is a HoraError code. */
export class RendezvousError extends Error {
  constructor(
    message: string,
    readonly code: string,
    readonly rank?: number,
  ) {
    super(message);
    this.name = 'RendezvousError';
  }
}

/**
 * A registered worker's control connection.
 * Events: 'abort' (Abort), 'close' (error: Error | undefined) when the launcher goes away.
 */
export class RendezvousConnection extends EventEmitter {
  private lastAbort: Abort | undefined;
  private closedByUs = false;

  /** Elastic: the newest generation the server said was over (-1: none). */
  endedGeneration = -1;
  /** Elastic: the server announced new workers waiting to join (reset at each new world). */
  growPending = false;

  /** Messages received from the server so far (the heartbeat's sign of life). */
  private heard = 0;
  private heartbeat: NodeJS.Timeout | undefined;

  constructor(private readonly conn: ControlConnection) {
    super();
    conn.on('message', (msg: ControlMessage) => {
      this.heard++;
      if (msg.kind === 'abort') {
        const { kind: _kind, ...abort } = msg;
        this.lastAbort = abort;
        this.emit('abort', abort);
      } else if (msg.kind === 'membership') {
        const { kind: _kind, ...m } = msg;
        if (m.event === MembershipEvent.Ended) this.endedGeneration = Math.max(this.endedGeneration, m.generation);
        if (m.event === MembershipEvent.Grow) this.growPending = true;
        this.emit('membership', m);
      } else if (msg.kind === 'peerTable') {
        const { kind: _kind, ...table } = msg;
        this.emit('peerTable', table);
      }
    });
    conn.on('close', (err) => {
      this.stopHeartbeat();
      if (!this.closedByUs) this.emit('close', err);
    });
    conn.socket.unref();
  }

  /**
   * Sends a Heartbeat every intervalMs, which the server answers, and takes silence from the server for
   * silentMs as the launcher lost: 'close' with the reason. A worker whose host is cut off from the
   * network sees no error on its control connection (nothing is sent to it), so without this it would
   * wait for the next world for ever. Elastic workers use it; the timer does not keep the process up.
   */
  startHeartbeat(intervalMs: number, silentMs: number): void {
    if (this.heartbeat) return;
    let seq = 0;
    // Silence is counted in this process's own time: a tick adds at most one interval, however late it
    // comes. A training step that holds the event loop for a minute leaves the launcher's answers unread
    // in the socket; that is this process being busy, not the launcher being gone.
    let silent = 0;
    let heardAtTick = this.heard;
    let lastTick = Date.now();
    this.heartbeat = setInterval(() => {
      const now = Date.now();
      if (this.heard !== heardAtTick) silent = 0;
      else silent += Math.min(now - lastTick, intervalMs);
      heardAtTick = this.heard;
      lastTick = now;
      if (silent > silentMs) {
        this.stopHeartbeat();
        const reason = new Error(`the hora launcher has not answered for ${Math.round(silent / 1000)} s (its host, or the network to it, is down)`);
        if (!this.closedByUs) this.emit('close', reason);
        this.closedByUs = true;
        this.conn.close();
        return;
      }
      this.conn.send({ kind: 'heartbeat', seq: seq++, timeMs: Date.now() });
    }, intervalMs);
    this.heartbeat.unref();
  }

  private stopHeartbeat(): void {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
  }

  /** Sends a message to the server (a Stats report); false when the connection is closed. */
  send(msg: ControlMessage): boolean {
    return this.conn.send(msg);
  }

  /** Elastic: tells the server where this worker stands (proto/hora.proto ElasticReport). */
  report(event: ElasticEvent, generation: number, fields: { dataAddr?: string; dataPort?: number; reason?: string; keptWorld?: number } = {}): boolean {
    return this.conn.send({
      kind: 'elasticReport', event, generation, dataAddr: fields.dataAddr ?? '', dataPort: fields.dataPort ?? 0,
      reason: (fields.reason ?? '').slice(0, 4096), keptWorld: fields.keptWorld ?? 0,
    });
  }

  /**
   * Elastic: resolves with the next message `pick` accepts (Membership or PeerTable); rejects when the
   * job is aborted or the connection closes. Messages that arrived before the call are not seen: call
   * it before the request whose answer it waits for.
   */
  next<T>(pick: (msg: { membership?: Membership; table?: PeerTable }) => T | undefined): Promise<T> {
    return new Promise((resolve, reject) => {
      // The connection is unref'd: something must keep the process alive while it waits for the server.
      const keepAlive = setInterval(() => undefined, 1 << 30);
      const done = () => {
        clearInterval(keepAlive);
        this.off('membership', onMembership);
        this.off('peerTable', onTable);
        this.off('abort', onAbort);
        this.off('close', onClose);
      };
      const offer = (msg: { membership?: Membership; table?: PeerTable }) => {
        let v: T | undefined;
        try {
          v = pick(msg);
        } catch (e) {
          done();
          reject(e);
          return;
        }
        if (v === undefined) return;
        done();
        resolve(v);
      };
      const onMembership = (membership: Membership) => offer({ membership });
      const onTable = (table: PeerTable) => offer({ table });
      const onAbort = (a: Abort) => {
        done();
        reject(new RendezvousError(`the job was aborted: ${a.reason}`, 'ERR_SHUTDOWN', a.rank));
      };
      const onClose = () => {
        done();
        reject(new RendezvousError('lost the connection to the hora launcher', 'ERR_PEER_LOST'));
      };
      this.on('membership', onMembership);
      this.on('peerTable', onTable);
      this.on('abort', onAbort);
      this.on('close', onClose);
    });
  }

  /** Abort received so far, if any. */
  get abortReceived(): Abort | undefined {
    return this.lastAbort;
  }

  /** Calls cb on Abort (at once if one already arrived). Returns a function that unsubscribes. */
  onAbort(cb: (abort: Abort) => void): () => void {
    this.on('abort', cb);
    if (this.lastAbort) cb(this.lastAbort);
    return () => this.off('abort', cb);
  }

  /** Calls cb when the connection to the launcher closes without close() being called. */
  onClose(cb: (err: Error | undefined) => void): () => void {
    this.on('close', cb);
    return () => this.off('close', cb);
  }

  close(): void {
    this.stopHeartbeat();
    this.closedByUs = true;
    this.conn.close();
  }
}

// Errors that mean "nobody is listening yet" (or the listener is restarting): worth retrying.
const RETRYABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN', 'ENOTFOUND']);

// A TCP connect that has no answer yet is abandoned after this long and counted as a failed attempt
// (ETIMEDOUT): where a firewall drops packets the kernel would otherwise keep one attempt pending for
// about two minutes, and nothing would fail that could be reported. The next attempt sends a new SYN.
const ATTEMPT_CONNECT_MS = 3000;
// Failed attempts are only worth a warning once they last: under launchers other than `hora run` the
// workers may try a moment before rank 0 has its server up. Then once in a while, not on every attempt.
const WARN_AFTER_MS = 2000;
const WARN_EVERY_MS = WAIT_WARN_EVERY_MS;

/**
 * Registers this worker and resolves once every rank has registered.
 * Rejects with a RendezvousError: ERR_AUTH (wrong secret), ERR_INVALID_ARGUMENT
 * (rank taken or out of range, protocol mismatch), ERR_TIMEOUT, ERR_SHUTDOWN
 * (the job was aborted meanwhile), ERR_PEER_LOST (server unreachable within
 * connectTimeoutMs, or went away).
 */
export async function register(opts: RegisterOptions): Promise<RegisterResult> {
  return (await registerAny(opts)) as RegisterResult;
}

/** register() for an elastic job's worker (opts.elasticWorkerId set): resolves at Membership ASSIGN. */
export async function registerElastic(opts: RegisterOptions): Promise<ElasticRegisterResult> {
  return (await registerAny(opts)) as ElasticRegisterResult;
}

async function registerAny(opts: RegisterOptions): Promise<RegisterResult | ElasticRegisterResult> {
  const started = Date.now();
  const deadline = started + opts.timeoutMs;
  const connectMs = Math.min(opts.connectTimeoutMs ?? opts.timeoutMs, opts.timeoutMs);
  // When the connect deadline is the overall one, running out of time is ERR_TIMEOUT as for any wait.
  const ownConnectDeadline = connectMs < opts.timeoutMs;
  const connectDeadline = started + connectMs;
  const log = opts.log ?? (() => undefined);
  const where = `${opts.addr}:${opts.port}`;
  const source = opts.addrSource ? `; the address comes from ${opts.addrSource}` : '';
  const seconds = (ms: number) => `${Math.round(ms / 100) / 10} s`;
  let delay = opts.retryIntervalMs ?? 50;
  let attempt = 0;
  let nextWarn = started + WARN_AFTER_MS;
  const giveUp = (last: string): RendezvousError => {
    const hint = opts.unreachableHint ? ` ${opts.unreachableHint}` : '';
    if (!ownConnectDeadline) {
      return new RendezvousError(
        `rank ${opts.rank}: could not reach the rendezvous server at ${where} within ${opts.timeoutMs} ms (${attempt} attempts; last: ${last})${source}. ` +
          `Is the launcher running, and is HORA_RENDEZVOUS_ADDR reachable from this host?${hint}`,
        'ERR_TIMEOUT',
        opts.rank,
      );
    }
    return new RendezvousError(
      `rank ${opts.rank}: cannot reach the rendezvous server at ${where}: gave up after ${seconds(Date.now() - started)} and ${attempt} attempts ` +
        `(connect deadline ${seconds(connectMs)}, HORA_CONNECT_TIMEOUT_S); last error: ${last}${source}. ` +
        `Check that the server's process is running (the launcher under hora run, else rank 0) and that this host reaches ${opts.addr} on TCP port ${opts.port} (a firewall may drop or refuse it).${hint}`,
      'ERR_PEER_LOST',
      opts.rank,
    );
  };
  for (;;) {
    attempt++;
    const outcome = await attemptRegistration(opts, deadline, connectDeadline);
    if (outcome.ok) return outcome.result;
    if (!outcome.retryable) throw outcome.error;
    const last = outcome.error.message;
    const now = Date.now();
    if (now >= connectDeadline) throw giveUp(last);
    if (now >= nextWarn) {
      nextWarn = now + WARN_EVERY_MS;
      log('WARN', `rank ${opts.rank}: cannot reach the rendezvous server at ${where} (${attempt} attempts in ${seconds(now - started)}; ` +
        `last: ${last})${source}; still trying, giving up in ${seconds(connectDeadline - now)}`);
    } else {
      log('TRACE', `rendezvous attempt ${attempt} failed (${last}); retrying in ${delay} ms`);
    }
    await sleep(Math.min(delay, connectDeadline - now));
    // An attempt begun at the deadline could only time out at once: report what the last one met.
    if (Date.now() >= connectDeadline) throw giveUp(last);
    delay = Math.min(delay * 2, 1000);
  }
}

type Attempt = { ok: true; result: RegisterResult | ElasticRegisterResult } | { ok: false; retryable: boolean; error: RendezvousError };

// What an OS error means for reaching a server, for users who meet it here first.
const SOCKET_ERROR_MEANING: Record<string, string> = {
  ECONNREFUSED: 'nothing listens on that port there: the server is not up yet or has exited, or the address is not its machine',
  ENETUNREACH: 'this host has no route to that network',
  EHOSTUNREACH: 'no host answers at that address',
  ETIMEDOUT: 'no answer: packets dropped by a firewall, or no host at that address',
  ENOTFOUND: 'the name does not resolve on this host',
  EAI_AGAIN: 'the name server did not answer',
  ECONNRESET: 'the connection was reset',
};

/** "ECONNREFUSED (nothing listens ...)": the OS code first, for the eye and for grep. */
function describeSocketError(err: Error | undefined): string {
  if (err === undefined) return 'connection closed before the Challenge';
  const code = (err as NodeJS.ErrnoException).code;
  if (code === undefined) return err.message;
  return `${code} (${SOCKET_ERROR_MEANING[code] ?? err.message})`;
}

function attemptRegistration(opts: RegisterOptions, deadline: number, connectDeadline: number): Promise<Attempt> {
  return new Promise((resolve) => {
    const secret = typeof opts.secret === 'string' ? Buffer.from(opts.secret, 'utf8') : opts.secret;
    const socket = net.connect({ host: opts.addr, port: opts.port });
    const conn = new ControlConnection(socket);
    let connected = false;
    let challenged = false;
    let settled = false;
    const finish = (a: Attempt) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearInterval(timer);
      clearTimeout(connectTimer);
      if (!a.ok) conn.close();
      resolve(a);
    };
    const fail = (retryable: boolean, message: string, code: string) =>
      finish({ ok: false, retryable, error: new RendezvousError(message, code, opts.rank) });
    const after = (at: number, cb: () => void) => setTimeout(cb, Math.max(0, at - Date.now()));

    // Until the Challenge the attempt answers to the connect deadline; register() turns its failure into
    // the final error. After the Challenge it waits for the other ranks, up to the overall deadline.
    let timer = after(connectDeadline, () => {
      fail(true, connected ? 'connected, but no Challenge came: is a hora rendezvous server on that port?'
        : `ETIMEDOUT (${SOCKET_ERROR_MEANING.ETIMEDOUT})`, 'ERR_PEER_LOST');
    });
    const connectTimer = after(Math.min(Date.now() + ATTEMPT_CONNECT_MS, connectDeadline), () => {
      fail(true, `ETIMEDOUT (no answer within ${ATTEMPT_CONNECT_MS / 1000} s: packets dropped by a firewall, or no host at that address)`, 'ERR_PEER_LOST');
    });
    socket.once('connect', () => {
      connected = true;
      clearTimeout(connectTimer);
    });

    conn.on('message', (msg: ControlMessage) => {
      switch (msg.kind) {
        case 'challenge': {
          if (challenged) return fail(false, 'rendezvous server sent a second Challenge', 'ERR_INTERNAL');
          challenged = true;
          clearTimeout(timer);
          // An elastic worker may wait long for its world (a joiner waits for the ranks' next commit);
          // the launcher bounds that wait, and the connection's close ends it. The timer keeps the process up.
          if (opts.elasticWorkerId !== undefined) timer = setInterval(() => undefined, 1 << 30);
          else timer = after(deadline, () => {
            fail(false, `rank ${opts.rank}: rendezvous at ${opts.addr}:${opts.port} did not complete within ${opts.timeoutMs} ms` +
              ' (registered, but not every rank did; check the other workers\' logs)', 'ERR_TIMEOUT');
          });
          if (msg.protocolVersion !== PROTOCOL_VERSION) {
            return fail(false, `rendezvous server speaks protocol ${msg.protocolVersion}, this worker ${PROTOCOL_VERSION}: use the same hora version everywhere`, 'ERR_INVALID_ARGUMENT');
          }
          conn.send({
            kind: 'register',
            protocolVersion: PROTOCOL_VERSION,
            rank: opts.rank,
            hostId: opts.hostId,
            dataAddr: opts.dataAddr,
            dataPort: opts.dataPort,
            pid: opts.pid ?? process.pid,
            hostname: opts.hostname ?? os.hostname(),
            auth: crypto.createHmac('sha256', secret).update(msg.nonce).digest(),
            elastic: opts.elasticWorkerId !== undefined,
            workerId: opts.elasticWorkerId ?? 0,
          });
          return;
        }
        case 'membership': {
          if (opts.elasticWorkerId === undefined || msg.event !== MembershipEvent.Assign) return;
          const { kind: _kind, ...assignment } = msg;
          return finish({ ok: true, result: { assignment, connection: new RendezvousConnection(conn) } });
        }
        case 'peerTable': {
          const { kind: _kind, ...table } = msg;
          const problem = checkTable(table);
          if (problem) return fail(false, `rendezvous server sent a bad peer table: ${problem}`, 'ERR_INTERNAL');
          const self = findSelf(table, opts);
          if (!self) return fail(false, `peer table gives this worker rank ${table.yourRank}, but it asked for ${opts.rank}`, 'ERR_INTERNAL');
          return finish({ ok: true, result: { table, self, connection: new RendezvousConnection(conn) } });
        }
        case 'error':
          return fail(false, `rank ${opts.rank}: rendezvous refused: ${msg.message}`, msg.code || 'ERR_INTERNAL');
        case 'abort':
          return fail(false, `rank ${opts.rank}: job aborted during rendezvous: ${msg.reason}`, 'ERR_SHUTDOWN');
        default:
          return;
      }
    });
    conn.on('invalid', (err) => fail(false, `rendezvous server at ${opts.addr}:${opts.port} sent bad data: ${err.message}`, 'ERR_INTERNAL'));
    conn.on('close', (err) => {
      const code = (err as NodeJS.ErrnoException | undefined)?.code;
      // Before the Challenge the server may simply not be up yet (or be restarting): retry.
      // After it, the server saw us and chose to hang up, or died: do not hammer it.
      if (!challenged) {
        const retryable = code === undefined || RETRYABLE.has(code);
        const what = describeSocketError(err);
        return fail(retryable, retryable ? what : `rank ${opts.rank}: cannot connect to the rendezvous server at ${opts.addr}:${opts.port}: ${what}`, 'ERR_PEER_LOST');
      }
      fail(false, `rank ${opts.rank}: rendezvous server at ${opts.addr}:${opts.port} closed the connection during registration${err ? `: ${err.message}` : ''}`, 'ERR_PEER_LOST');
    });
  });
}

function checkTable(table: PeerTable): string | undefined {
  if (table.peers.length !== table.size) return `${table.peers.length} peers for size ${table.size}`;
  for (let i = 0; i < table.peers.length; i++) if (table.peers[i].rank !== i) return `entry ${i} has rank ${table.peers[i].rank}`;
  return undefined;
}

function findSelf(table: PeerTable, opts: RegisterOptions): Peer | undefined {
  if (opts.rank >= 0 && table.yourRank !== opts.rank) return undefined;
  return table.peers[table.yourRank];
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
