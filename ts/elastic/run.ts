/**
 * hora.elastic.run: the training function of an elastic job, run again after every re-forming of the world.
 *
 * How it works: run() syncs the state from rank 0 and calls fn(state). When a worker is lost the launcher
 * ends the world; the collective outstanding here then fails at once with ERR_PEER_LOST (a stopped worker
 * shows as ERR_TIMEOUT). run() catches it, restores the state to its last commit, joins the next world
 * (./world.ts, reformElasticWorld), syncs the state from the new rank 0 (the oldest surviving worker), runs the
 * reset callbacks and calls fn again. No committed step is lost and none is applied twice.
 *
 * A State made with {checkpoint: {dir, everySteps}} also goes to disk every everySteps commits; when the
 * job starts (its first world), run() loads the last complete checkpoint there before the first sync, so
 * a job started again by hand, at any size, goes on from it.
 *
 * New workers join at a commit. The launcher announces a waiting worker to every rank; as the announcement
 * reaches ranks at different moments, the commit hook allreduces a flag so that every rank decides at the
 * same commit, and then throws GrowSignal from commit(). run() catches it and re-forms without a rollback:
 * the committed state is the current one, and the new worker gets it by the sync.
 */
import type { RendezvousConnection } from '../control/client';
import { ElasticEvent } from '../control/messages';
import { HoraError, describeValue } from '../errors';
import { allreduce, current } from '../hora';
import { setCommitHook, State } from './state';
import { elasticState, isElasticRunning, reformElasticWorld, setElasticRunning } from './world';

/** Thrown from commit() when every rank agreed to take in new workers; caught by run(). */
class GrowSignal extends Error {
  constructor() {
    super('hora.elastic: the world grows at this commit (caught by hora.elastic.run)');
    this.name = 'GrowSignal';
  }
}

/**
 * Runs `fn(state)` and resolves with what it returns. In an elastic job (hora run --min-np), when a worker
 * is lost (ERR_PEER_LOST, or ERR_TIMEOUT from a stopped one) the state goes back to its last commit, the
 * world re-forms with new ranks, the state is synced from the new rank 0, the reset callbacks run, and fn is
 * called again; new workers join at a commit. Outside an elastic job it syncs the state and calls fn once.
 * Call it after `await hora.init()`, once per process at a time.
 */
export async function run<T>(state: State, fn: (state: State) => T | Promise<T>): Promise<T> {
  if (!(state instanceof State)) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.elastic.run: argument 'state' must be a hora.elastic.State; received ${describeValue(state)}`);
  }
  if (typeof fn !== 'function') {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.elastic.run: argument 'fn' must be a function; received ${describeValue(fn)}`);
  }
  current('elastic.run');
  if (isElasticRunning()) throw new HoraError('ERR_INVALID_ARGUMENT', 'hora.elastic.run: already running in this process; runs do not nest');
  const elastic = elasticState();
  setElasticRunning(true);
  try {
    if (!elastic) {
      await state.resumeFromCheckpoint();
      await state.sync(0);
      return await fn(state);
    }
    return await runElastic(state, fn, elastic.control);
  } finally {
    setElasticRunning(false);
    setCommitHook(null);
  }
}

async function runElastic<T>(state: State, fn: (state: State) => T | Promise<T>, control: RendezvousConnection): Promise<T> {
  control.report(ElasticEvent.Entered, generation());
  setCommitHook(membershipCheck);
  // The job's first world (generation 0): every worker started together, so each loads the last
  // checkpoint on disk (new State(fields, {checkpoint})). A worker that joins later gets the state by the
  // sync below, from ranks that went on past it.
  if (generation() === 0) await state.resumeFromCheckpoint();
  let reset = false;
  for (;;) {
    try {
      await state.sync(0);
      if (reset) await state.runResetCallbacks();
      const result = await fn(state);
      control.report(ElasticEvent.Finished, generation());
      return result;
    } catch (e) {
      reset = true;
      if (e instanceof GrowSignal) {
        await reformElasticWorld(generation(), 'new workers join at this commit');
        continue;
      }
      if (!(e instanceof HoraError) || (e.code !== 'ERR_PEER_LOST' && e.code !== 'ERR_TIMEOUT')) throw e;
      state.restore();
      await reformElasticWorld(generation(), `${e.code}: ${e.message}`);
    }
  }
}

function generation(): number {
  return elasticState()?.world.elastic?.generation ?? 0;
}

// Every rank must take new workers in at the same commit: the flag each has is allreduced (max).
async function membershipCheck(): Promise<void> {
  const e = elasticState();
  if (!e || e.world.size === 0) return;
  // A world of one rank has no collective that waits for I/O: a training loop can run for good on
  // promises alone, and the server's GROW would never be read. Let the event loop read it here.
  if (e.world.size === 1) await new Promise((resolve) => setImmediate(resolve));
  const flag = new Int32Array([e.control.growPending ? 1 : 0]);
  const agreed = e.world.size > 1 ? await allreduce(flag, { op: 'max', name: 'elastic.commit membership' }) : flag;
  if (agreed[0] > 0) throw new GrowSignal();
}
