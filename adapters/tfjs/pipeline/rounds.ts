/**
 * Rounds: how the ranks of a pipeline finish a batch together, or fail it together.
 *
 * A stage spends a batch waiting on messages from its neighbours, not in a collective, so the way
 * collectives spread a failure (failPeers, the engine's agreement) does not reach it: a stage waiting
 * for the gradient of a micro-batch that its neighbour will never send would wait for the deadline.
 * So every batch (a round) carries one control message from every rank to every other rank, on a tag
 * of its own:
 *
 * - when the round starts, each rank posts a receive for the control message of every other rank;
 * - a rank that finishes its share sends each of them "done" with a small payload (the last stage's
 *   loss and metrics, every stage's busy time) and waits for theirs: the round's end is a barrier that
 *   also hands out the loss;
 * - a rank that fails sends "failed" with its stage, rank, error code and message instead; every rank
 *   that receives it stops waiting on its neighbours and fails with an error naming that stage and
 *   rank, and sends its own "failed" to the ranks it had not yet sent to, so that every posted receive
 *   is matched and no rank is left waiting;
 * - a rank that dies fails the receives posted for it with ERR_PEER_LOST within seconds, which also
 *   ends the round on every rank with an error naming it.
 *
 * Every wait of a stage inside a round goes through guard(), which races it against the round's
 * failure. Control messages have a fixed size (a small JSON text, zero-padded) so that they always go
 * out at once and never fail for a count that differs.
 */
import * as hora from '../../../ts/index';
import { HoraError } from '../../../ts/internal';

const CONTROL_BYTES = 2048;

/** What a rank says at the end of a round. */
export interface RoundReport {
  /** The rank that sent it. */
  rank: number;
  ok: boolean;
  /** ok: whatever the stage hands out (loss, metrics, busy time). */
  payload?: Record<string, unknown>;
  /** !ok: the error's code and message, and the stage that failed. */
  code?: string;
  message?: string;
  stage?: number;
  /** !ok: the rank where the failure began (this one, or the one whose report it passes on). */
  origin?: number;
}

function encode(report: RoundReport): Uint8Array {
  const out = new Uint8Array(CONTROL_BYTES);
  let text = JSON.stringify(report);
  let bytes = Buffer.from(text, 'utf8');
  if (bytes.length > CONTROL_BYTES && report.message !== undefined) {
    // A long message is cut, not the report: the code and the stage matter more than its tail.
    text = JSON.stringify({ ...report, message: report.message.slice(0, CONTROL_BYTES / 2) + '...' });
    bytes = Buffer.from(text, 'utf8');
  }
  if (bytes.length > CONTROL_BYTES) throw new HoraError('ERR_INTERNAL', `pipeline: a round report of ${bytes.length} bytes does not fit in ${CONTROL_BYTES}`);
  out.set(bytes);
  return out;
}

function decode(bytes: Uint8Array): RoundReport {
  let end = bytes.indexOf(0);
  if (end < 0) end = bytes.length;
  return JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, end).toString('utf8')) as RoundReport;
}

/** Names a rank by its place in the pipeline, for error messages. */
export type Describe = (rank: number) => string;

export class Round {
  /** Rejects with the first failure: a peer's report, a lost peer, or this rank's own. */
  readonly failed: Promise<never>;
  private fail!: (e: unknown) => void;
  private readonly sentTo = new Set<number>();
  private readonly reports: Array<Promise<RoundReport>>;
  private failure: HoraError | null = null;

  constructor(private readonly tag: number, private readonly peers: number[], private readonly describe: Describe) {
    this.failed = new Promise<never>((_, reject) => { this.fail = reject; });
    // Nothing may be left unhandled: a round that ends well never rejects, one that fails is awaited.
    this.failed.catch(() => undefined);
    this.reports = peers.map((peer) => {
      const work = hora.recv(new Uint8Array(CONTROL_BYTES), { from: peer, tag });
      const report = (async () => {
        let r: RoundReport;
        try {
          r = decode(await work);
        } catch (e) {
          throw this.lost(peer, e);
        }
        if (!r.ok) throw this.peerFailed(r);
        return r;
      })();
      report.catch((e) => this.setFailure(e));
      return report;
    });
  }

  /** The error of the round, once it failed. */
  get error(): HoraError | null {
    return this.failure;
  }

  /** Waits for p, or rejects as soon as the round fails. */
  guard<T>(p: PromiseLike<T>): Promise<T> {
    return Promise.race([Promise.resolve(p), this.failed]);
  }

  /**
   * Ends this rank's share: tells every other rank it is done, with `payload`, and waits for theirs.
   * Resolves with every rank's report (this rank's included), in rank order.
   */
  async finish(rank: number, payload: Record<string, unknown>): Promise<RoundReport[]> {
    const mine: RoundReport = { rank, ok: true, payload };
    this.sendAll(mine);
    const theirs = await this.guard(Promise.all(this.reports));
    return [mine, ...theirs].sort((a, b) => a.rank - b.rank);
  }

  /**
   * This rank cannot go on: tells every rank it has not yet told, and answers the error to throw.
   * After a peer's failure, answers that failure (this rank's own is only a consequence of it).
   */
  abort(rank: number, stage: number, e: unknown): HoraError {
    const own = this.failure ?? this.ownFailure(rank, stage, e);
    const origin = this.failure ? this.failure.peer : rank;
    this.sendAll({ rank, ok: false, stage, code: own.code, message: own.message, origin });
    this.setFailure(own);
    return this.failure as HoraError;
  }

  private ownFailure(rank: number, stage: number, e: unknown): HoraError {
    const message = (e as Error)?.message ?? String(e);
    const code = e instanceof HoraError ? e.code : 'ERR_INVALID_ARGUMENT';
    if (message.startsWith('pipeline: stage ')) return e instanceof HoraError ? e : new HoraError(code, message, rank);
    const err = new HoraError(code, `pipeline: ${this.describe(rank)} failed: ${message}`, rank, e instanceof HoraError ? e.peer : -1);
    (err as Error & { cause?: unknown }).cause = e;
    return err;
  }

  private sendAll(report: RoundReport): void {
    const bytes = encode(report);
    for (const peer of this.peers) {
      if (this.sentTo.has(peer)) continue;
      this.sentTo.add(peer);
      // Not awaited: the receive for it is posted (or the peer is gone, and the round fails anyway).
      hora.send(bytes.slice(), { to: peer, tag: this.tag }).then(undefined, () => undefined);
    }
  }

  private setFailure(e: unknown): void {
    if (this.failure) return;
    this.failure = e instanceof HoraError ? e : new HoraError('ERR_INTERNAL', String((e as Error)?.message ?? e));
    this.fail(this.failure);
  }

  private peerFailed(r: RoundReport): HoraError {
    const message = r.message ?? 'failed';
    return new HoraError(r.code ?? 'ERR_INVALID_ARGUMENT',
      message.startsWith('pipeline: stage ') ? message : `pipeline: ${this.describe(r.rank)} failed: ${message}`, hora.rank(), r.origin ?? r.rank);
  }

  /** A message to or from a peer failed: it died (or the job is going down), or the two disagreed. */
  lost(peer: number, e: unknown): HoraError {
    const code = e instanceof HoraError ? e.code : 'ERR_PEER_LOST';
    // When the launcher ends the job it fails every pending message at once, whichever peer it is with:
    // name the rank the launcher names, not the peer of the first message to fail.
    const culprit = /the job was aborted because of rank (\d+)/.exec((e as Error)?.message ?? '');
    if (culprit && Number(culprit[1]) !== hora.rank()) peer = Number(culprit[1]);
    const what = code === 'ERR_PEER_LOST' || code === 'ERR_SHUTDOWN' ? 'was lost' : 'could not exchange a message with this rank';
    return new HoraError(code, `pipeline: ${this.describe(peer)} ${what}: ${(e as Error)?.message ?? String(e)}`, hora.rank(), peer);
  }
}
