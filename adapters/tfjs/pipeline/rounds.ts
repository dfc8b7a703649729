/**
 * Rounds: how the ranks of a pipeline finish a batch together, or fail it together, through the
 * engine's agreement (docs/internals.md 1.5), as collectives do.
 *
 * - A rank that finishes its share joins one allreduce named by the batch's terms (its number, whether
 *   it trains, its samples and micro-batches): the engine's agreement checks those terms on every rank,
 *   and the batch's reports ride in it, each rank's row of a matrix summed with the others' zeros (the
 *   last stage's loss and metrics, every stage's busy time). Its end is the round's barrier.
 * - A rank that fails (the origin) calls hora.failPeers with its error, so the agreement fails on every
 *   rank with ERR_INVALID_ARGUMENT naming it; every rank words the origin's error from its text.
 * - A stage spends a batch waiting on messages from its neighbours, not in a collective, so a failure
 *   must also reach the stages that wait on the failed one: a failing rank sends a notice (one uint8,
 *   which no float32 receive takes: it fails at once) on every link that still owes a message, in place
 *   of that message. A stage whose receive fails on a notice (a consequence) does the same to its own
 *   neighbours and joins the agreement, where it learns the origin's error. With replicas, a failing
 *   rank also joins its group's gradient allreduce (zeros), which its replicas would otherwise wait on.
 * - A rank whose neighbour died (ERR_PEER_LOST) says so at once: the world is broken, no agreement can
 *   finish; its neighbours learn it from their own links, or from the launcher.
 */
import * as hora from '../../../ts/index';
import { HoraError } from '../../../ts/internal';

/** Each rank's row of the reports matrix: these values, then the last stage's metrics. */
const FIELDS = ['busy', 'wallMs', 'stage', 'replica', 'n', 'loss', 'penalty'] as const;
/** How a failing rank's text starts, so that every rank finds the code and the message in the verdict. */
const FAILURE = 'pipeline failure ';
const VERDICT = new RegExp(`made an invalid call: ${FAILURE}(ERR_[A-Z_]+): ([\\s\\S]*)$`);
/** What a receive says when its message was a failing neighbour's notice (engine/p2p.cc's words). */
const NOTICE = / sent 1 x uint8 with tag \d+/;

/** What a rank says at the end of a round. */
export interface RoundReport {
  /** The rank that sent it. */
  rank: number;
  ok: boolean;
  /** Its busy time, wall time, stage, replica and samples; on the last stage the loss and metrics; any penalty. */
  payload?: Record<string, unknown>;
}

/** Names a rank by its place in the pipeline, for error messages. */
export type Describe = (rank: number) => string;

/** How this rank came to fail. */
type Cause = 'origin' | 'notice' | 'lost';

export class Round {
  private failure: HoraError | null = null;
  /** The agreement ended well: this rank joins no other collective for this batch, whatever fails after. */
  private agreed = false;

  /**
   * @param terms the batch's terms, every rank's alike: the name of its agreement
   * @param metrics the metrics the last stage reports
   * @param lastStage the stage whose reports carry the loss and metrics
   */
  constructor(private readonly terms: string, private readonly metrics: number, private readonly lastStage: number, private readonly describe: Describe) {}

  /** The error of the round, once it failed. */
  get error(): HoraError | null {
    return this.failure;
  }

  /**
   * Ends this rank's share: the agreement on the batch's terms, carrying every rank's report. Resolves
   * with every rank's report, in rank order; rejects with the origin's error when a rank failed.
   */
  async finish(rank: number, payload: Record<string, number | number[]>): Promise<RoundReport[]> {
    const size = hora.size();
    const width = FIELDS.length + this.metrics;
    const rows = new Float64Array(size * width);
    FIELDS.forEach((f, i) => { rows[rank * width + i] = (payload[f] as number | undefined) ?? 0; });
    ((payload.metrics as number[] | undefined) ?? []).slice(0, this.metrics).forEach((v, i) => { rows[rank * width + FIELDS.length + i] = v; });
    let all: Float64Array;
    try {
      all = await hora.allreduce(rows, { op: 'sum', name: this.terms });
    } catch (e) {
      const origin = this.verdict(e);
      if (origin) await this.failedTogether();
      throw this.settle(origin ?? this.lost(-1, e));
    }
    this.agreed = true;
    return Array.from({ length: size }, (_, r) => {
      const row = all.subarray(r * width, (r + 1) * width);
      const p: Record<string, unknown> = { busy: row[0], wallMs: row[1], stage: row[2], replica: row[3], n: row[4] };
      if (row[2] === this.lastStage) Object.assign(p, { loss: row[5], metrics: Array.from(row.subarray(FIELDS.length)) });
      if (row[6] !== 0) p.penalty = row[6];
      return { rank: r, ok: true, payload: p };
    });
  }

  /**
   * This rank cannot go on. notify() sends the notices (and joins the group's allreduce) first; then the
   * origin fails the agreement with its error and answers it at once, a consequence joins the agreement
   * and answers the origin's error from it, and a rank whose neighbour died answers that.
   */
  async abort(rank: number, stage: number, e: unknown, notify: () => void): Promise<HoraError> {
    if (this.failure || this.agreed) return this.settle(this.failure ?? this.ownFailure(rank, stage, e));
    const cause: Cause = e instanceof NoticeReceived ? 'notice' : e instanceof HoraError && (e.code === 'ERR_PEER_LOST' || e.code === 'ERR_SHUTDOWN') ? 'lost' : 'origin';
    const own = this.ownFailure(rank, stage, e);
    notify();
    if (cause === 'lost') return this.settle(own);
    if (cause === 'origin') {
      hora.failPeers(`${FAILURE}${own.code}: ${own.message}`);
      await this.failedTogether();
      return this.settle(own);
    }
    try {
      await hora.allreduce(new Float64Array(1), { op: 'sum', name: `${this.terms} (failed)` });
    } catch (failed) {
      const origin = this.verdict(failed);
      if (origin) await this.failedTogether();
      return this.settle(origin ?? this.lost(-1, failed));
    }
    return this.settle(own);  // (no rank failed the agreement: the notice was all there was to say)
  }

  /**
   * After an agreement that a rank failed, every rank (the origin too) joins one barrier: the origin then
   * knows that every rank has its error before it goes on (its program may exit at once, and the launcher
   * would then end the job before the others heard why).
   */
  private async failedTogether(): Promise<void> {
    await hora.barrier({ name: `${this.terms} failed` }).then(undefined, () => undefined);
  }

  /** The origin's error, from an agreement that failed because of it; null for any other failure. */
  private verdict(e: unknown): HoraError | null {
    if (!(e instanceof HoraError) || e.code !== 'ERR_INVALID_ARGUMENT') return null;
    const m = VERDICT.exec(e.message);
    return m ? new HoraError(m[1], m[2], hora.rank(), e.peer) : null;
  }

  private settle(e: HoraError): HoraError {
    if (!this.failure) this.failure = e;
    return this.failure;
  }

  private ownFailure(rank: number, stage: number, e: unknown): HoraError {
    const message = (e as Error)?.message ?? String(e);
    const code = e instanceof HoraError ? e.code : 'ERR_INVALID_ARGUMENT';
    if (message.startsWith('pipeline: stage ')) return e instanceof HoraError ? e : new HoraError(code, message, rank);
    const err = new HoraError(code, `pipeline: ${this.describe(rank)} failed: ${message}`, rank, e instanceof HoraError ? e.peer : -1);
    (err as Error & { cause?: unknown }).cause = e;
    return err;
  }

  /**
   * A message to or from a peer failed: it died (or the job is going down), the two disagreed, or the
   * peer failed and sent a notice instead (then a NoticeReceived, which is no failure of this rank's own).
   */
  lost(peer: number, e: unknown): HoraError {
    if (e instanceof HoraError && e.code === 'ERR_MISMATCH' && NOTICE.test(e.message)) return new NoticeReceived(peer, e);
    const code = e instanceof HoraError ? e.code : 'ERR_PEER_LOST';
    // When the launcher ends the job it fails every pending message at once, whichever peer it is with:
    // name the rank the launcher names, not the peer of the first message to fail.
    const culprit = /the job was aborted because of rank (\d+)/.exec((e as Error)?.message ?? '');
    if (culprit && Number(culprit[1]) !== hora.rank()) peer = Number(culprit[1]);
    if (peer < 0 && e instanceof HoraError && e.peer >= 0) peer = e.peer;
    const what = code === 'ERR_PEER_LOST' || code === 'ERR_SHUTDOWN' ? 'was lost' : 'could not exchange a message with this rank';
    const who = peer >= 0 ? this.describe(peer) : 'a rank';
    return new HoraError(code, `pipeline: ${who} ${what}: ${(e as Error)?.message ?? String(e)}`, hora.rank(), peer);
  }
}

/** A receive that met a failing neighbour's notice: this rank fails as a consequence, and learns why in the agreement. */
class NoticeReceived extends HoraError {
  constructor(peer: number, error: HoraError) {
    super('ERR_MISMATCH', `pipeline: rank ${peer} failed this batch and sent a notice in place of a message: ${error.message}`, hora.rank(), peer);
  }
}

/** The notice a failing rank sends in place of a message it owes. */
export function notice(): Uint8Array {
  return new Uint8Array(1);
}
