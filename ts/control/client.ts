// Rendezvous client: one worker's side of proto/hora.proto.
//
// register() connects (retrying while the server is not up yet: workers and
// the server start at the same time), answers the Challenge with
// HMAC-SHA256(secret, nonce), waits for the PeerTable, and returns it with the
// still-open connection. That connection then carries Abort from the launcher
// for the life of the job; it is unref'd, so it never keeps a finished
// training script alive.

import * as crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import * as net from 'node:net';
import * as os from 'node:os';
import type { Logger } from '../config';
import { ControlConnection } from './frame';
import { Abort, ControlMessage, Peer, PeerTable, PROTOCOL_VERSION } from './messages';

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
  /** Delay before the first retry; doubles up to 1 s. Default 50. */
  retryIntervalMs?: number;
  /** Reported to the server for diagnostics. Defaults: os.hostname(), process.pid. */
  hostname?: string;
  pid?: number;
  log?: Logger;
}

export interface RegisterResult {
  /** Every peer, indexed by rank. */
  table: PeerTable;
  /** This worker's entry: table.peers[self.rank] (the rank is final, even when -1 was asked). */
  self: Peer;
  /** The open control connection: abort notifications, close(). */
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

  constructor(private readonly conn: ControlConnection) {
    super();
    conn.on('message', (msg: ControlMessage) => {
      if (msg.kind === 'abort') {
        const { kind: _kind, ...abort } = msg;
        this.lastAbort = abort;
        this.emit('abort', abort);
      }
    });
    conn.on('close', (err) => {
      if (!this.closedByUs) this.emit('close', err);
    });
    conn.socket.unref();
  }

  /** Sends a message to the server (a Stats report); false when the connection is closed. */
  send(msg: ControlMessage): boolean {
    return this.conn.send(msg);
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
    this.closedByUs = true;
    this.conn.close();
  }
}

// Errors that mean "nobody is listening yet" (or the listener is restarting): worth retrying.
const RETRYABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'EPIPE', 'EAI_AGAIN', 'ENOTFOUND']);

/**
 * Registers this worker and resolves once every rank has registered.
 * Rejects with a RendezvousError: ERR_AUTH (wrong secret), ERR_INVALID_ARGUMENT
 * (rank taken or out of range, protocol mismatch), ERR_TIMEOUT, ERR_SHUTDOWN
 * (the job was aborted meanwhile), ERR_PEER_LOST (server went away).
 */
export async function register(opts: RegisterOptions): Promise<RegisterResult> {
  const deadline = Date.now() + opts.timeoutMs;
  const log = opts.log ?? (() => undefined);
  let delay = opts.retryIntervalMs ?? 50;
  let attempt = 0;
  for (;;) {
    attempt++;
    const outcome = await attemptRegistration(opts, deadline);
    if (outcome.ok) return outcome.result;
    const remaining = deadline - Date.now();
    if (!outcome.retryable || remaining <= 0) {
      if (outcome.retryable) {
        throw new RendezvousError(
          `rank ${opts.rank}: could not reach the rendezvous server at ${opts.addr}:${opts.port} within ${opts.timeoutMs} ms (${attempt} attempts; last: ${outcome.error.message}). Is the launcher running, and is HORA_RENDEZVOUS_ADDR reachable from this host?`,
          'ERR_TIMEOUT',
          opts.rank,
        );
      }
      throw outcome.error;
    }
    log('TRACE', `rendezvous attempt ${attempt} failed (${outcome.error.message}); retrying in ${delay} ms`);
    await sleep(Math.min(delay, remaining));
    delay = Math.min(delay * 2, 1000);
  }
}

type Attempt = { ok: true; result: RegisterResult } | { ok: false; retryable: boolean; error: RendezvousError };

function attemptRegistration(opts: RegisterOptions, deadline: number): Promise<Attempt> {
  return new Promise((resolve) => {
    const secret = typeof opts.secret === 'string' ? Buffer.from(opts.secret, 'utf8') : opts.secret;
    const socket = net.connect({ host: opts.addr, port: opts.port });
    const conn = new ControlConnection(socket);
    let challenged = false;
    let settled = false;
    const finish = (a: Attempt) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (!a.ok) conn.close();
      resolve(a);
    };
    const fail = (retryable: boolean, message: string, code: string) =>
      finish({ ok: false, retryable, error: new RendezvousError(message, code, opts.rank) });

    const timer = setTimeout(() => {
      fail(false, `rank ${opts.rank}: rendezvous at ${opts.addr}:${opts.port} did not complete within ${opts.timeoutMs} ms` +
        (challenged ? ' (registered, but not every rank did; check the other workers\' logs)' : ''), 'ERR_TIMEOUT');
    }, Math.max(0, deadline - Date.now()));

    conn.on('message', (msg: ControlMessage) => {
      switch (msg.kind) {
        case 'challenge': {
          if (challenged) return fail(false, 'rendezvous server sent a second Challenge', 'ERR_INTERNAL');
          challenged = true;
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
          });
          return;
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
      if (!challenged) return fail(code === undefined || RETRYABLE.has(code), err ? err.message : 'connection closed before the challenge', 'ERR_PEER_LOST');
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
