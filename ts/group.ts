/**
 * Process groups: hora.newGroup(ranks) and the Group it gives its members.
 *
 * A group is a communicator of its own over the world's connections (native/src/engine/group.h): its
 * collectives take the same arguments, validation and error codes as the world's, with group ranks
 * wherever a rank is named (root, to, from), and keep their own order and agreement check, so a mismatch
 * inside a group fails its members only and names the group.
 *
 * Making one is a world collective: every rank calls newGroup with the same list in the same place of its
 * order of world collectives (as torch's new_group and MPI_Comm_create ask). The ranks exchange their
 * lists in an allgather and every rank compares all of them, so different lists fail with ERR_MISMATCH
 * on every rank, naming the ranks and their lists, before any group exists. Only then do the members
 * register the group with the engine; so a group is never used by one rank and missing on another.
 */
import { CallSite, HoraError, checkOptionKeys, describeValue, invalidArgument, knownOptions } from './errors';
import {
  Grouped, Plan, Scope, World, allgatherPlan, allreducePlan, barrierPlan, broadcastPlan, current, gatherPlan, joinIn, planAllgatherObject,
  planAlltoall, planBroadcastObject, planScatter, groupedOf, recvPlan, reducePlan, reduceScatterPlan, runMessage, sendPlan, submitCollective,
  submitInvalid,
} from './hora';
import { DeviceBuffer } from './device-buffer';
import { NativeDType, NativeKind, NativeOp, NativeResult, nativeItem } from './native';
import type {
  AllgatherObjectOptions, AllgatherOptions, AllreduceOptions, AlltoallOptions, AlltoallResult, BarrierOptions, BroadcastObjectOptions,
  BroadcastOptions, GatherOptions, NewGroupOptions, RecvOptions, ReduceOptions, ReduceScatterOptions, ScatterOptions, SendOptions, Tensor,
} from './types';
import { Work } from './work';

/**
 * A process group: some of the world's ranks, with collectives and messages of their own. Group rank i is
 * world rank ranks[i]. Collectives of groups with no member in common run at the same time; a rank's
 * world and group collectives run in the order it calls them, so any two ranks must call the collectives
 * they share (world and groups) in the same relative order.
 */
export class Group {
  /** World rank of each member, by group rank (the list given to newGroup). */
  readonly ranks: readonly number[];
  private readonly scope: Scope;
  /** hora.grouped's allreduce, allgather and reduceScatter over the group (ts/grouped.ts). */
  readonly grouped: Grouped = groupedOf((call) => this.live(call));

  /** @internal */
  constructor(private readonly world: World, id: number, ranks: readonly number[]) {
    this.ranks = Object.freeze([...ranks]);
    this.scope = {
      rank: ranks.indexOf(world.rank), size: ranks.length, self: world.rank, dispatcher: world.dispatcher, group: id,
      members: this.ranks, prefix: 'group.',
    };
  }

  /** This process's rank in the group, 0 <= rank() < size(). */
  rank(): number { return this.scope.rank; }
  /** Number of ranks in the group. */
  size(): number { return this.scope.size; }

  /** hora.allreduce over the group's ranks (default op 'avg': divided by the group's size). */
  allreduce<T extends Tensor>(x: T, options?: AllreduceOptions): Work<T> {
    return submitCollective(this.live('allreduce'), 'allreduce', this.allreduce, hostOnly('allreduce', x, allreducePlan(x, options)), undefined, options);
  }

  /** hora.broadcast from group rank `root` (default 0) to the group. */
  broadcast<T extends Tensor>(x: T, options?: BroadcastOptions): Work<T> {
    return submitCollective(this.live('broadcast'), 'broadcast', this.broadcast, hostOnly('broadcast', x, broadcastPlan(x, options)), undefined, options);
  }

  /** hora.allgather over the group: every member's x, in group rank order. */
  allgather<T extends Tensor>(x: T, options?: AllgatherOptions): Work<T> {
    return submitCollective(this.live('allgather'), 'allgather', this.allgather, hostOnly('allgather', x, allgatherPlan(x, options)), undefined, options);
  }

  /** hora.reduceScatter over the group: this member's block (by group rank) of the reduction. */
  reduceScatter<T extends Tensor>(x: T, options?: ReduceScatterOptions): Work<T> {
    return submitCollective(this.live('reduceScatter'), 'reduceScatter', this.reduceScatter, hostOnly('reduceScatter', x, reduceScatterPlan(x, options)), undefined, options);
  }

  /** hora.reduce to group rank `root` (default 0): the reduction there, null on the other members. */
  reduce<T extends Tensor>(x: T, options?: ReduceOptions): Work<T | null> {
    return submitCollective(this.live('reduce'), 'reduce', this.reduce, reducePlan(x, options), undefined, options);
  }

  /** hora.gather to group rank `root` (default 0): every member's x in group rank order there, null on the others. */
  gather<T extends Tensor>(x: T, options?: GatherOptions): Work<T | null> {
    return submitCollective(this.live('gather'), 'gather', this.gather, gatherPlan(x, options), undefined, options);
  }

  /** Completes once every member has called it. */
  barrier(options?: BarrierOptions): Work<void> {
    return submitCollective(this.live('barrier'), 'barrier', this.barrier, barrierPlan(options), undefined, options);
  }

  /**
   * hora.join() among the group's members: this member has run out of data and takes part in the group's
   * collectives with a neutral contribution until every member has joined; resolves to the group rank that
   * joined last. While it is pending, this process's collectives (world and groups) are refused.
   */
  join(): Work<number> {
    return joinIn(this.live('join'), this.join);
  }

  /** hora.alltoall over the group: splits and recvSplits by group rank, data in group rank order. */
  alltoall<T extends Tensor>(x: T, options?: AlltoallOptions): Work<AlltoallResult<T>> {
    return submitCollective(this.live('alltoall'), 'alltoall', this.alltoall,
      planAlltoall as (w: Scope, a: unknown, b: unknown) => Plan<AlltoallResult<T>>, x, options);
  }

  /** hora.scatter from group rank `root` (default 0): splits by group rank. */
  scatter<T extends Tensor>(x: T, options?: ScatterOptions): Work<T> {
    return submitCollective(this.live('scatter'), 'scatter', this.scatter, planScatter as (w: Scope, a: unknown, b: unknown) => Plan<T>, x, options);
  }

  /** hora.broadcastObject from group rank `root` (default 0) to the group. */
  broadcastObject<T = unknown>(value: T, options?: BroadcastObjectOptions): Work<T> {
    return submitCollective(this.live('broadcastObject'), 'broadcastObject', this.broadcastObject,
      planBroadcastObject as (w: Scope, a: unknown, b: unknown) => Plan<T>, value, options);
  }

  /** hora.allgatherObject over the group: every member's value, in group rank order. */
  allgatherObject<T = unknown>(value: T, options?: AllgatherObjectOptions): Work<T[]> {
    return submitCollective(this.live('allgatherObject'), 'allgatherObject', this.allgatherObject,
      planAllgatherObject as (w: Scope, a: unknown, b: unknown) => Plan<T[]>, value, options);
  }

  /** hora.send to group rank `to`. */
  send(x: Tensor, options: SendOptions): Work<void> {
    return runMessage(this.live('send'), 'send', this.send, sendPlan(x, options));
  }

  /** hora.recv from group rank `from`. */
  recv<T extends Tensor>(into: T, options: RecvOptions): Work<T>;
  recv(options: RecvOptions): Work<Tensor>;
  recv(first: unknown, second?: unknown): Work<Tensor> {
    return runMessage(this.live('recv'), 'recv', this.recv, recvPlan(first, second));
  }

  /** The scope, once hora is still the one this group was made in (shutdown ends every group). */
  private live(call: string): Scope {
    const w = current(`group.${call}`);
    if (w !== this.world) throw new HoraError('ERR_SHUTDOWN', `hora.group.${call}: this group belongs to an earlier hora.init`, w.rank);
    return this.scope;
  }
}

/** Device memory stays with the world's collectives (its paths are set up for the world's ranks). */
function hostOnly<T>(call: string, x: unknown, plan: (w: Scope) => Plan<T>): (w: Scope) => Plan<T> {
  return (w) => {
    if (x instanceof DeviceBuffer) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `hora.group.${call}: argument 'x' must be a typed array: group collectives ` +
        `take host memory, not a hora.cuda.DeviceBuffer (use the world's collectives for device memory)`, w.self);
    }
    return plan(w);
  };
}

/**
 * Makes a process group of the world ranks `ranks` (group rank i is ranks[i]). Every rank must call it,
 * with the same list, in the same place of its order of world collectives. The Work gives members their
 * Group and other ranks null: await it, or wait() for it. Different lists on different ranks fail it with
 * ERR_MISMATCH on every rank; a bad list fails it with ERR_INVALID_ARGUMENT (on the other ranks too).
 */
export function newGroup(ranks: readonly number[], options?: NewGroupOptions): Work<Group | null> {
  const w = current('newGroup');
  const site = new CallSite(newGroup);
  // Counted for every call, valid or not, so that the ids stay the same on every rank.
  const id = ++w.groupsMade;
  const problem = listProblem(ranks, w.size);
  const bad = problem
    ? new HoraError('ERR_INVALID_ARGUMENT', `hora.newGroup: argument 'ranks' must be ${problem}; received ${describeList(ranks)}`, w.rank)
    : optionsError(options, w.rank);
  if (bad) {
    const err = site.attach(bad);
    if (w.dispatcher) submitInvalid(w.dispatcher, err.message, site);
    const failed = new Work<Group | null>(null);
    failed.reject(err);
    return failed;
  }
  const list = [...ranks];
  const make = () => (list.includes(w.rank) ? new Group(w, id, list) : null);
  if (!w.dispatcher) {
    const done = new Work<Group | null>(null);
    done.fulfil(make());
    return done;
  }
  const dispatcher = w.dispatcher;
  const mine = Int32Array.from([id, ...list]);
  // Numbered: two newGroup calls in one synchronous run are two collectives of one batch, which must
  // differ by name (see orderByName in batch-order.ts).
  const item = nativeItem(NativeKind.Allgather, NativeOp.Sum, NativeDType.Int32, 0, `hora.newGroup ${id}`, mine, null);
  const lists = dispatcher.submit(item, (r: NativeResult) => splitLists(new Int32Array(r.gathered as ArrayBuffer), r.counts ?? []), site, [mine]);
  const made = new Work<Group | null>({
    waitFor: () => {
      try { lists.wait(); } catch { /* settles `made` below */ }
    },
    awaited: () => {},
  });
  lists.onSettled(() => {
    let all: number[][];
    try {
      all = lists.wait();
    } catch (e) {
      made.reject(e as HoraError);
      return;
    }
    const differ = all.findIndex((l) => !sameList(l, all[0]));
    if (differ >= 0) {
      const shown = all.map((l, r) => `rank ${r}: ${l.length ? `group ${l[0]} of [${l.slice(1).join(', ')}]` : 'nothing'}`).join('; ');
      made.reject(site.attach(new HoraError('ERR_MISMATCH', `rank ${w.rank}: hora.newGroup: every rank must give the same ranks, ` +
        `in the same order of newGroup calls, but rank 0 and rank ${differ} differ (${shown})`, w.rank, differ)));
      return;
    }
    try {
      if (list.includes(w.rank)) dispatcher.comm.addGroup(id, list);
      made.fulfil(make());
    } catch (e) {
      made.reject(site.attach(new HoraError('ERR_INTERNAL', `rank ${w.rank}: hora.newGroup: ${(e as Error).message}`, w.rank)));
    }
  });
  return made;
}

const NEW_GROUP_OPTIONS = knownOptions<NewGroupOptions>({});

/** newGroup takes no options yet: any key (torch's timeout or backend, say) is refused rather than ignored. */
function optionsError(options: unknown, rank: number): HoraError | null {
  if (options === undefined) return null;
  if (options === null || typeof options !== 'object') return invalidArgument('newGroup', 'options', 'an object or undefined', options, rank);
  try {
    checkOptionKeys('newGroup', options, NEW_GROUP_OPTIONS, rank);
  } catch (e) {
    return e as HoraError;
  }
  return null;
}

function listProblem(ranks: unknown, size: number): string | null {
  const expected = `a non-empty array of distinct integer ranks from 0 to ${size - 1}`;
  if (!Array.isArray(ranks) || ranks.length === 0) return expected;
  const seen = new Set<number>();
  for (const r of ranks) {
    if (typeof r !== 'number' || !Number.isInteger(r) || r < 0 || r >= size) return `${expected} (${describeValue(r)} is not one)`;
    if (seen.has(r)) return `${expected} (${r} appears twice)`;
    seen.add(r);
  }
  return null;
}

function describeList(ranks: unknown): string {
  if (Array.isArray(ranks) && ranks.length <= 16) {
    return `[${ranks.map((r) => (typeof r === 'number' ? String(r) : describeValue(r))).join(', ')}]`;
  }
  return describeValue(ranks);
}

function splitLists(all: Int32Array, counts: number[]): number[][] {
  const out: number[][] = [];
  let at = 0;
  for (const n of counts) {
    out.push(Array.from(all.subarray(at, at + n)));
    at += n;
  }
  return out;
}

function sameList(a: number[], b: number[]): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
