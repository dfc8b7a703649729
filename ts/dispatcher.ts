/**
 * The dispatcher: hands collectives to the native engine and settles their Works (work.ts).
 *
 * Batching. Calls made in one synchronous run of JavaScript are collected and submitted together at the
 * end of it (a microtask), when their bytes reach the fusion buffer size, or when wait() needs them. The
 * engine fuses runs of small allreduces inside a batch. Because batches follow program order and sizes,
 * every rank running the same program forms the same batches; the engine's agreement step turns any
 * difference into ERR_MISMATCH rather than wrong numbers, tensor by tensor inside a fused run.
 *
 * A batch whose collectives are all named is matched by name, as Horovod matches tensors: it is ordered by
 * name before it is submitted (orderByName), so ranks that call the same named collectives in a different
 * order within one synchronous run get the right results. Its cut by size is left to the end of the run,
 * where it is the same on every rank whatever the order (see submit()).
 */
import { invalidItem, orderByName } from './batch-order';
import { CallSite, HoraError } from './errors';
import { callName, cannotBeTaken, changedArray, copyBack, copyIn, Lend, Stages } from './lend';
import { itemBytes, Manner, NativeKind, packCode } from './native';
import { OutstandingTable } from './outstanding';
import type { NativeAddon, NativeCommunicator, NativeItem, NativeResult } from './native';
import { CollectiveStats, SubmittedCollective } from './stats';
import type { TimelineWriter } from './timeline';
import type { CallSites } from './config';
import { OnAwait, Work } from './work';
import type { Finish, WorkDriver } from './work';

/** One item of a grouped call (Dispatcher.submitGroup): the fields of a collective's Plan that submit() takes. */
export interface GroupCall {
  item: Omit<NativeItem, 'id'>;
  finish: Finish<unknown> | null;
  keep: unknown;
  value: unknown;
  lends: Lend;
}

const SUCCESS: NativeResult = Object.freeze({});
/** What submit() hangs its flush on (see there). */
const SETTLED = Promise.resolve();
/** How long an awaited small collective is watched for before the event loop sleeps (Dispatcher.spinFor). */
const SPIN_MICROS = 50;
const SPIN_MAX_BYTES = 64 * 1024;
/**
 * HORA_CALL_SITES=sampled: call sites recorded at once at most, and per millisecond after that. A record
 * costs 2-3 µs (V8 walks and decodes the optimized frames), so 4 per millisecond is at most 1% of a core;
 * a training step's few hundred collectives fit the burst, a loop of tiny collectives gets every few
 * dozenth recorded instead of paying for each.
 */
const SITE_BURST = 256;
const SITES_PER_MS = 4;
/**
 * With the budget spent, the clock (what refills it) is read on every this many calls only: in a loop of
 * small awaited collectives a read on each call was a tenth of the JavaScript a call runs.
 */
const SITE_CLOCK_EVERY = 16;
/** Dispatcher.batchNames: a collective of the batch is named; one is not. */
const NAMED = 1;
const UNNAMED = 2;

/** A send or receive of host memory: message() takes it without an item object to read. */
function isHostMessage(item: NativeItem): boolean {
  return (item.kind === NativeKind.Send || item.kind === NativeKind.Recv) && item.device === undefined && !!item.data;
}

/** A send or receive: not in the order of collectives, so no placeholder takes its place when it fails. */
function isMessage(item: NativeItem): boolean {
  return item.kind === NativeKind.Send || item.kind === NativeKind.Recv;
}

/**
 * A host collective of the world that collective() takes as positional arguments: an alltoall's splits
 * go in root's place (it has none); a scatter, which has both, goes as an item object.
 */
function isLoneCollective(item: NativeItem): boolean {
  return item.device === undefined && item.kind !== NativeKind.Invalid && item.kind !== NativeKind.Send &&
    item.kind !== NativeKind.Recv && !item.group && item.scale === undefined &&
    (item.splits === undefined || item.kind === NativeKind.Alltoall);
}

interface Outstanding {
  id: number;
  work: Work<any>;
  /** The result from the engine's; null: `value`. */
  finish: Finish<any> | null;
  value: unknown;
  site: CallSite;
  /** What the native side points into (an array, or an array of them), kept referenced until completion. */
  keep: unknown;
  /** For the Stats report; absent for connect. */
  stats?: SubmittedCollective;
  /** The user's array the item's data is (see ts/lend.ts), and its bytes at the call; null: none lent. */
  lent: ArrayBufferView | null;
  lentBytes: number;
  lends: Lend;
  /** What the engine got in place of `lent`, until the work settles; null: `lent` itself, or nothing. */
  stage: ArrayBufferView | null;
  /** The item as called (for the errors about `lent`); null unless lent. */
  item: Omit<NativeItem, 'id'> | null;
}

/** The lent array (o.lent, not null) is not the size it was at the call: detached, or a resizable buffer shrunk. */
function arrayChanged(o: Outstanding): boolean {
  return o.lent!.byteLength !== o.lentBytes;
}

/** An error the binding threw, as the HoraError of the works it was to take. */
function refusal(call: string, e: unknown, rank: number): HoraError {
  const err = e as { code?: unknown; message?: unknown } | null;
  const message = err && typeof err.message === 'string' ? err.message : String(e);
  const code = e instanceof TypeError || e instanceof RangeError ? 'ERR_INVALID_ARGUMENT'
    : err && typeof err.code === 'string' ? err.code : 'ERR_INTERNAL';
  return new HoraError(code, `${call}: the native binding refused the call: ${message}`, rank);
}

export class Dispatcher implements WorkDriver {
  private nextId = 1;
  private outstanding = new OutstandingTable<Outstanding>();
  // What is submitted but not yet handed to the engine, in order: the first item (its id beside it), and
  // the rest. A lone item (the usual call, and every call of a wait() loop) takes no array, and no id
  // property added to its object (a property added to an object literal takes an allocation of its own).
  private first: NativeItem | null = null;
  private firstId = 0;
  private rest: NativeItem[] = [];
  private batchBytes = 0;
  /** Copies of lent arrays for works that stay pending while JavaScript runs (ts/lend.ts). */
  private readonly stages = new Stages();
  /** The addon keeps a pending work's ArrayBuffer memory valid (ts/lend.ts): no stage is needed. */
  private readonly holdsMemory: boolean;
  /** The batch's collectives: NAMED when one is named, UNNAMED when one is not (see orderByName). */
  private batchNames = 0;
  /** A grouped call's items are going in (submitGroup): no cut by size falls between them. */
  private wholeGroup = false;
  /** A join is pending (hora.join() or group.join(), ts/collectives.ts): the call that made it; null: none. */
  joining: string | null = null;
  private flushScheduled = false;
  // A flush microtask is queued and has not run yet. A wait() loop never lets microtasks run, and each
  // wait() flushes the batch itself; queuing a new microtask per call would pile them up without bound.
  private flushQueued = false;
  private readonly flushLater = () => {
    this.flushQueued = false;
    this.flush();
  };
  /**
   * Whether collectives capture their call site (see CallSite): not while the program waits with
   * wait(), whose errors carry the caller's stack anyway; again once it awaits a Work.
   */
  wantsCallSite = true;
  private siteTokens = SITE_BURST;
  private siteSkips = 0;
  private siteTokensAt = performance.now();
  readonly comm: NativeCommunicator;
  /** What the Stats control message reports. */
  readonly stats = new CollectiveStats(() => this.pendingStats());
  /** Where each rank runs ("host node1, pid 4321": its host id), from the peer table; named in errors about a peer. */
  peerPlaces: string[] = [];
  /** HORA_TIMELINE: told of every call; null when off. */
  timeline: TimelineWriter | null = null;

  constructor(
    private readonly addon: NativeAddon,
    createComm: (onComplete: (id: number) => void) => NativeCommunicator,
    private readonly rank: number,
    private readonly fusionBytes: number,
    private readonly callSites: CallSites = 'sampled',
  ) {
    this.comm = createComm((id) => this.onComplete(id));
    this.holdsMemory = addon.holdsArrayBuffers === true;
    // A process that ends while collectives are outstanding (its event loop ran dry, or it called
    // process.exit) leaves its peers waiting for it: say so, or the peers' errors are all there is.
    process.once('exit', (code) => {
      // A call refused here (bad input, failPeers) has already failed for the program; its placeholder
      // only holds its place in the order for the other ranks: not a collective the program left behind.
      let left = 0;
      for (const o of this.outstanding.values()) if (o.stats?.kind !== 'invalid') left++;
      if (left > 0) process.stderr.write(`hora: rank ${this.rank} is exiting (code ${code}) with ${left} collective(s) outstanding\n`);
    });
  }

  /**
   * The call site of a collective called through `callee` (see CallSite), or CallSite.none: while the
   * program waits with wait(), with HORA_CALL_SITES=off, and with sampled once its budget is spent.
   */
  callSite(callee: Function): CallSite {
    if (!this.wantsCallSite || this.callSites === 'off') return CallSite.none;
    if (this.callSites === 'sampled') {
      if (this.siteTokens < 1 && ++this.siteSkips < SITE_CLOCK_EVERY) return CallSite.unsampled;
      this.siteSkips = 0;
      const now = performance.now();
      this.siteTokens = Math.min(SITE_BURST, this.siteTokens + (now - this.siteTokensAt) * SITES_PER_MS);
      this.siteTokensAt = now;
      if (this.siteTokens < 1) return CallSite.unsampled;
      this.siteTokens -= 1;
    }
    return new CallSite(callee);
  }

  /** The Stats records of the outstanding collectives, in submission order. */
  private *pendingStats(): Iterable<SubmittedCollective> {
    for (const o of this.outstanding.values()) if (o.stats) yield o.stats;
  }

  get pending(): number {
    return this.outstanding.size;
  }

  /** Queues one item; returns its Work. */
  submit<T>(item: Omit<NativeItem, 'id'>, finish: Finish<T> | null, site: CallSite, keep: unknown, value?: T, lends = Lend.None): Work<T> {
    const id = this.nextId++;
    const bytes = itemBytes(item);
    const spins = bytes <= SPIN_MAX_BYTES && item.kind !== NativeKind.Send && item.kind !== NativeKind.Recv;
    const work = new Work<T>(this, id, spins ? OnAwait.Spin : OnAwait.Awaited);
    // Messages are not collectives: the stall inspector's view of the ordered queue leaves them out (no
    // sequence number), but the job's figures count them.
    const p2p = item.kind === NativeKind.Send || item.kind === NativeKind.Recv;
    // A join (hora.join()) takes none either: it stands for every collective the others run meanwhile.
    const stats = this.stats.submitted(item.kind, item.name, bytes, item.dtype, !item.group && !p2p && item.kind !== NativeKind.Join);
    const lent = lends !== Lend.None ? item.data : null;
    this.outstanding.add({ id, work, finish, value, site, keep, stats, lent, lentBytes: bytes, lends, stage: null, item: lent ? item : null });
    if (this.timeline) this.timeline.called(id, item);
    if (this.first === null) {
      this.first = item as NativeItem;
      this.firstId = id;
    } else {
      (item as NativeItem).id = id;
      this.rest.push(item as NativeItem);
    }
    this.batchBytes += bytes;
    if (!p2p) this.batchNames |= item.name ? NAMED : UNNAMED;
    // A batch ordered by name is cut at the end of the run only: a cut by size here would fall at a
    // different call on a rank whose program called the same collectives in another order. A call alone
    // is not cut either: handed over now, its array would be lent while JavaScript runs (a copy, see
    // ts/lend.ts) even when wait() comes next; the next call, or the end of the run, hands it over.
    if (this.full()) {
      this.flush();
    } else if (!this.flushScheduled) {
      this.flushScheduled = true;
      if (!this.flushQueued) {
        this.flushQueued = true;
        // A reaction to a settled promise rather than queueMicrotask(): the same place in the microtask
        // queue, without the async resource Node makes for each queueMicrotask() (about 50 ns of an
        // awaited small collective's 3 µs on this machine).
        SETTLED.then(this.flushLater);
      }
    }
    return work;
  }

  /** The batch is to be cut by size now (see submit()). */
  private full(): boolean {
    return this.fusionBytes > 0 && this.batchBytes >= this.fusionBytes && this.batchNames !== NAMED && this.rest.length > 0 &&
      !this.wholeGroup;
  }

  /**
   * Queues the items of a grouped call (ts/grouped.ts) as one piece of the batch, in the order given: the
   * cut by size falls before or after them, never between, so the engine gets the group in one batch (and
   * every rank the same batches). Returns their Works, in order.
   */
  submitGroup(calls: readonly GroupCall[], site: CallSite): Work<unknown>[] {
    const works: Work<unknown>[] = [];
    this.wholeGroup = true;
    try {
      for (const c of calls) works.push(this.submit(c.item, c.finish, site, c.keep ?? c.value, c.value, c.lends));
    } finally {
      this.wholeGroup = false;
    }
    if (this.full()) this.flush();
    return works;
  }

  /** Registers a work whose native side is started by `start(id)` (connect). */
  track<T>(finish: Finish<T>, site: CallSite, start: (id: number) => void): Work<T> {
    const id = this.nextId++;
    const work = new Work<T>(this, id);
    this.outstanding.add({ id, work, finish, value: undefined, site, keep: null, stats: undefined, lent: null, lentBytes: 0, lends: Lend.None, stage: null, item: null });
    start(id);
    return work;
  }

  /** willWait: the caller goes on to wait() at once (and runs the batch itself when the engine is idle). */
  flush(willWait = false): void {
    this.flushScheduled = false;
    const one = this.first;
    if (one === null) return;
    this.first = null;
    this.batchBytes = 0;
    const names = this.batchNames;
    this.batchNames = 0;
    const id = this.firstId;
    if (this.rest.length === 0 && (isHostMessage(one) || isLoneCollective(one))) {
      this.handLone(id, one, willWait ? Manner.WillWait : Manner.Awaited);
      return;
    }
    one.id = id;
    const items = [one, ...this.rest];
    this.rest = [];
    if (names & NAMED) orderByName(items, names === NAMED);
    this.submitBatch(items, willWait);
  }

  /**
   * One host collective or message alone in its batch, handed in with positional arguments (no item object
   * to read): from flush() (Manner.Awaited or WillWait: it stays pending while JavaScript runs), or from
   * waitFor() (Manner.WaitNow: handed in and waited for in one call, in which no JavaScript runs: no stage).
   */
  private handLone(id: number, one: NativeItem, manner: Manner): void {
    const now = manner === Manner.WaitNow;
    const data = this.lendLone(id, one, !now);
    if (data === undefined) return;
    let result: NativeResult | true | number | undefined;
    try {
      if (isHostMessage(one)) result = this.comm.message(id, packCode(one, manner), data!, one.peer!, one.tag!, one.group ?? 0);
      else {
        if (!now) this.started(id, performance.now());
        result = this.comm.collective(id, packCode(one, manner), one.splits ?? one.root, data, one.out, one.name || null);
      }
    } catch (e) {
      one.id = id;
      this.refused([one], e);
      return;
    }
    // A result back from the same call: no JavaScript ran while the engine had the array.
    if (result !== undefined) this.settle(id, result, true);
  }

  /** flush() of a batch: messages are posted each alone, collectives go to the engine together. */
  private submitBatch(items: NativeItem[], willWait: boolean): void {
    let lost = 0;
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      const data = this.lend(item.id, item.data, true);
      if (!(data instanceof HoraError)) item.data = data;
      else if (!isMessage(item)) items[i] = { ...invalidItem(data.message, item.group, item.name), id: item.id };
      else lost++;
    }
    // A message that failed here is not posted at all; a collective's place is held.
    if (lost > 0) items = items.filter((item) => !isMessage(item) || this.outstanding.get(item.id) !== undefined);
    if (items.length === 0) return;
    if (items.every(isHostMessage)) {
      for (const m of items) {
        try {
          this.comm.message(m.id, packCode(m, willWait ? Manner.WillWait : Manner.Awaited), m.data!, m.peer!, m.tag!, m.group ?? 0);
        } catch (e) {
          this.refused([m], e);
        }
      }
    } else {
      const now = performance.now();
      for (const item of items) this.started(item.id, now);
      try {
        this.comm.submit(items, willWait);
      } catch (e) {
        this.refused(items, e);
      }
    }
  }

  /**
   * The array the engine is to use for work `id`, whose item's data is `data`: the array itself, or its
   * stage when the work stays pending while JavaScript runs (`pending`) and the addon cannot hold the
   * array's memory (see ts/lend.ts). A HoraError: the
   * user's array changed since the call, and the work has failed with it here (a collective still has to
   * take its place in the order: the caller submits the invalid placeholder).
   */
  private lend(id: number, data: ArrayBufferView | null, pending: boolean): ArrayBufferView | null | HoraError {
    if (data === null) return data;
    const o = this.outstanding.get(id);
    if (o === undefined || o.lent === null) return data;
    const lent = o.lent;
    if (arrayChanged(o)) {
      const err = changedArray(o.item!, lent, o.lentBytes, false, this.rank);
      this.failHere(id, err);
      return err;
    }
    if (!pending || cannotBeTaken(lent, this.holdsMemory)) return lent;
    const stage = this.stages.take(lent as Float32Array);
    if (o.lends & Lend.Reads) copyIn(stage, lent);
    o.stage = stage;
    return stage;
  }

  /** lend() for an item alone in its batch; undefined when its array changed (its place is then held). */
  private lendLone(id: number, one: NativeItem, pending: boolean): ArrayBufferView | null | undefined {
    // What nearly every call finds, written out here because it is on every such call: nothing lent, or the
    // array as it was and usable as it is (waited for in the same call, or memory the engine can keep).
    const o = this.outstanding.get(id);
    if (o === undefined || o.lent === null) return one.data;
    if (!arrayChanged(o) && (!pending || cannotBeTaken(o.lent, this.holdsMemory))) return one.data;
    const data = this.lend(id, one.data, pending);
    if (!(data instanceof HoraError)) return data;
    if (!isMessage(one)) this.holdPlaces([{ ...invalidItem(data.message, one.group, one.name), id }]);
    return undefined;
  }

  /**
   * The binding threw instead of taking `items` (nothing of that call reached the engine): each work fails
   * with a HoraError, and each collective's place in the order is taken by the invalid placeholder, so the
   * other ranks fail it too instead of waiting for it. Nothing escapes: this runs in a microtask.
   */
  private refused(items: NativeItem[], e: unknown): void {
    const placeholders: NativeItem[] = [];
    for (const item of items) {
      const err = refusal(callName(item), e, this.rank);
      this.failHere(item.id, err);
      if (!isMessage(item)) placeholders.push({ ...invalidItem(err.message, item.group, item.name), id: item.id });
    }
    this.holdPlaces(placeholders);
  }

  /** Submits invalid placeholders (their works have failed here already: their completions find nothing). */
  private holdPlaces(placeholders: NativeItem[]): void {
    if (placeholders.length === 0) return;
    try {
      this.comm.submit(placeholders, false);
    } catch {
      // The communicator is closed: no rank waits for these any more.
    }
  }

  /** Fails work `id` on this rank now, before (or instead of) the engine's answer. */
  private failHere(id: number, err: HoraError): void {
    const o = this.outstanding.take(id);
    if (!o) return;
    if (o.stats) this.stats.settled(o.stats, { code: err.code, message: err.message });
    if (o.stage !== null) this.stages.give(o.stage as Float32Array);
    o.work.reject(o.site.attach(err));
  }

  /** Submits what is batched and resolves once every outstanding work has settled, either way. */
  async drain(): Promise<void> {
    this.flush();
    await Promise.allSettled([...this.outstanding.values()].map((o) => o.work));
  }

  /** WorkDriver: a work of this dispatcher is awaited. */
  awaited(id: number, spin: boolean): void {
    if (spin) this.spinFor(id);
    else this.wantsCallSite = true;
  }

  /**
   * A small collective being awaited: before the event loop sleeps, watch for its completion a little
   * while. Completions otherwise come back through a thread-safe function, whose wake-up of the event
   * loop cost ~20 µs of an awaited small collective's ~40 µs
   * (docs/notes/2026-11-23-small-collectives-on-the-waiting-thread.md).
   */
  private spinFor(id: number): void {
    this.wantsCallSite = true;
    // Not while calls are still being batched (then() in the same run of JS as the call): the batch is
    // submitted at the end of the run, and must stay whole.
    if (this.first !== null) return;
    const result = this.comm.result(id, SPIN_MICROS);
    if (result) this.settle(id, result);
  }

  /** WorkDriver: blocks until the work of this id has settled. */
  waitFor(id: number): void {
    this.wantsCallSite = false;
    const one = this.rest.length === 0 ? this.first : null;
    if (one !== null && this.firstId === id && (isLoneCollective(one) || isHostMessage(one))) {
      // Submitted and waited for in one crossing into the addon.
      this.first = null;
      this.batchBytes = 0;
      this.batchNames = 0;
      this.flushScheduled = false;
      this.handLone(id, one, Manner.WaitNow);
      return;
    }
    this.flush(true);
    const result = this.comm.result(id, -1);
    if (result) this.settle(id, result);
  }

  /** Tells the Stats counters that the collective `id` (not a message) is handed to the engine. */
  private started(id: number, now: number): void {
    const stats = this.outstanding.get(id)?.stats;
    if (stats) this.stats.started(stats, now);
  }

  private onComplete(id: number): void {
    const result = this.comm.result(id, 0);
    if (result) this.settle(id, result);
  }

  /**
   * taken: a result; true for plain success; a number for plain success that took that many nanoseconds
   * (Manner.WaitNow). held: the result came back from the call that handed the work in, so no JavaScript
   * ran while the engine had the array, and it cannot have changed since lend() looked.
   */
  private settle(id: number, taken: NativeResult | true | number, held = false): void {
    const o = this.outstanding.take(id);
    if (!o) return;
    const result = typeof taken === 'object' ? taken : SUCCESS;
    if (o.stats) this.stats.settled(o.stats, result, typeof taken === 'number' ? taken / 1e6 : 0);
    if (o.stage !== null ? this.giveBack(o, !result.code) : o.lent !== null && !held && !result.code && this.lost(o)) return;
    if (result.code) {
      const peer = result.peer ?? -1;
      const place = peer >= 0 && peer !== this.rank ? this.peerPlaces[peer] : undefined;
      const message = (result.message ?? result.code) + (place ? ` [rank ${peer}: ${place}]` : '');
      o.work.reject(o.site.attach(new HoraError(result.code, message, this.rank, peer)));
      return;
    }
    try {
      o.work.fulfil(o.finish !== null ? o.finish(result) : o.value);
    } catch (e) {
      // A finish may refuse a result with a HoraError of its own (an object call whose ranks differ: ts/objects.ts).
      o.work.reject(o.site.attach(e instanceof HoraError ? e : new HoraError('ERR_INTERNAL', `hora: could not unpack a result: ${(e as Error).message}`, this.rank)));
    }
  }

  /**
   * A work lent the user's array itself (its memory held by the addon): true when the array changed while
   * the work was pending, and the work has failed here, its result lost (the memory it went to stayed valid).
   */
  private lost(o: Outstanding): boolean {
    if (!arrayChanged(o) || !(o.lends & Lend.Writes)) return false;
    o.work.reject(o.site.attach(changedArray(o.item!, o.lent!, o.lentBytes, true, this.rank)));
    return true;
  }

  /**
   * A settled work's stage: the result copied into the user's array (succeeded), and the stage kept for
   * reuse. True when the work failed here instead: the user's array changed while the work was pending.
   */
  private giveBack(o: Outstanding, succeeded: boolean): boolean {
    const lent = o.lent!, stage = o.stage!;
    o.stage = null;
    let failed = false;
    if (succeeded && o.lends & Lend.Writes) {
      if (!arrayChanged(o)) copyBack(lent, stage);
      else {
        o.work.reject(o.site.attach(changedArray(o.item!, lent, o.lentBytes, true, this.rank)));
        failed = true;
      }
    }
    this.stages.give(stage as Float32Array);
    return failed;
  }
}
