/**
 * How an adapter's training step fails on every rank together.
 *
 * A step either fails inside a collective (hora already failed it on every rank: the error only needs the
 * adapter's context added) or fails locally (an exception in this rank's own code: the other ranks must
 * hear of it, or they wait in the step's next collective). collective() tells the two apart; error() turns
 * either into the error the step rejects with, signalling the other ranks with hora.failPeers() in the
 * second case. `signal` is the reason quoted to them, so a rank that receives it can say "rank N failed"
 * rather than repeat a validation message.
 */
import * as hora from '../ts/index';
import { HoraError } from '../ts/index';
import { steps } from '../ts/internal';

export class StepFailure {
  private fromCollective = false;

  constructor(private readonly signal: string) {}

  /** Awaits one of the step's collectives (time counted as waiting for communication), remembering when the failure came from hora. */
  async collective<T>(p: PromiseLike<T>): Promise<T> {
    try {
      return await steps.wait(p);
    } catch (e) {
      this.fromCollective = true;
      throw e;
    }
  }

  /**
   * The error the step rejects with. `where` names the step on this rank; `peerFailed` says what the failed
   * rank was doing, as in "failed inside its training loop".
   */
  error(e: unknown, where: string, peerFailed: string): unknown {
    if (this.fromCollective && e instanceof HoraError) {
      this.fromCollective = false;
      if (e.message.includes(this.signal)) {
        return new HoraError(e.code, `${where}: rank ${e.peer} ${peerFailed} (see that rank's error), so this rank stops too`, e.rank, e.peer);
      }
      return new HoraError(e.code, `${where}: ${e.message}`, e.rank, e.peer);
    }
    // failPeers() hands the signal to the communication thread before it returns, so it goes out even if
    // the caller exits on this error.
    hora.failPeers(this.signal);
    return e;
  }
}
