/**
 * The collectives: allreduce, broadcast, allgather, reduceScatter and barrier (and failPeers), for the world
 * and, through submitCollective() with a group's Scope, for process groups (ts/group.ts).
 *
 * Validation happens here, on the calling rank, and an invalid call is still sent to the engine as a
 * placeholder so that the other ranks fail the same collective with ERR_INVALID_ARGUMENT instead of
 * waiting for it: the order of collectives stays aligned and nothing after it is lost.
 *
 * A collective given a hora.cuda.DeviceBuffer submits a device item (see ts/native.ts) and answers with
 * device memory: any new buffer is allocated here, before submission, except an allgather's, which the
 * engine allocates. The buffers are lent to the engine until the work settles (free() refuses meanwhile).
 */
import { booleanOf, dtypeOf, nameOf, opOf, optionsObject, rootOf, scaleOf } from './arguments';
import { DeviceBuffer, adoptDevicePointer, deviceAlloc, deviceCopy, lend } from './device-buffer';
import { requireElasticRun } from './elastic/world';
import { CallSite, HoraError, invalidArgument, knownOptions } from './errors';
import { loadNative } from './loader';
import { NativeDType, NativeEstimate, NativeItem, NativeKind, NativeOp, NativeResult, lookupName, nativeItem } from './native';
import type {
  AllgatherOptions, AllreduceOptions, BarrierOptions, BroadcastOptions, CollectiveInput, GatherOptions, ReduceOptions,
  ReduceScatterOptions, Tensor,
} from './types';
import { invalidItem } from './batch-order';
import { Dispatcher } from './dispatcher';
import { Work } from './work';
import { ALGORITHMS, Scope, current, rank } from './world';
import { Lend } from './lend';

// The options each collective takes (ts/types.ts; a grouped call, ts/grouped.ts, takes its collective's); any
// other key is refused (checkOptionKeys).
/** @internal */
export const ALLREDUCE_OPTIONS = knownOptions<AllreduceOptions>({
  op: true, name: true, inplace: true, dtype: true, prescaleFactor: true, postscaleFactor: true,
});
const BROADCAST_OPTIONS = knownOptions<BroadcastOptions>({ root: true, name: true, inplace: true, dtype: true });
/** @internal */
export const ALLGATHER_OPTIONS = knownOptions<AllgatherOptions>({ name: true, dtype: true });
/** @internal */
export const REDUCE_SCATTER_OPTIONS = knownOptions<ReduceScatterOptions>({
  op: true, name: true, dtype: true, prescaleFactor: true, postscaleFactor: true,
});
const BARRIER_OPTIONS = knownOptions<BarrierOptions>({ name: true });
const REDUCE_OPTIONS = knownOptions<ReduceOptions>({
  root: true, op: true, name: true, dtype: true, prescaleFactor: true, postscaleFactor: true,
});
const GATHER_OPTIONS = knownOptions<GatherOptions>({ root: true, name: true, dtype: true });

/** A world of one's result with factors: nothing is combined, x is scaled alone (native, as a group of one is). */
function scaledAlone<T extends Tensor>(x: T, dtype: NativeDType, scale: [number, number] | undefined): T {
  if (scale) loadNative().scaleAlone(x, dtype, scale[0], scale[1]);
  return x;
}

function copyOf<T extends Tensor>(x: T): T {
  return x.slice() as T;
}

/** The item for a collective on device memory: x's, and out for a reducescatter's block. */
function deviceItem(kind: NativeKind, op: NativeOp, dtype: NativeDType, root: number, name: string, x: DeviceBuffer,
  out: DeviceBuffer | null = null): Omit<NativeItem, 'id'> {
  const item = Object.assign(nativeItem(kind, op, dtype, root, name, null, null),
    { device: x.device, devicePtr: x.pointer, count: x.count, stream: x.stream });
  if (out) item.outPtr = out.pointer;
  return item;
}

/** @internal Block `block` of `count` elements cut into `size` blocks, the first count % size one longer: [begin, end). */
export function blockRange(count: number, size: number, block: number): [number, number] {
  const base = Math.floor(count / size), extra = count % size;
  const start = (b: number) => b * base + Math.min(b, extra);
  return [start(block), start(block + 1)];
}

/** @internal */
export type Plan<T> = {
  item: Omit<NativeItem, 'id'>;
  /** The call's result from the engine's; null: `value` (an array reduced or received in place). */
  finish: ((r: NativeResult) => T) | null;
  /** What the engine points into, referenced until completion; null: `value`. */
  keep: unknown[] | null;
  /** The result in a world of one; null: `value`. */
  local: (() => T) | null;
  value: T | undefined;
  /** What the engine does with item.data when it is the user's array (ts/lend.ts); None: it is hora's, or none. */
  lends: Lend;
};
// Every plan literal lists the same keys in this order, so that V8 gives them one shape and the code that
// reads a plan (submitCollective, runMessage) stays monomorphic across collectives.

/**
 * Starts one collective: validates through `plan` (which throws HoraError on bad input), then either
 * answers locally (world of one) or submits to the engine. Invalid input still reaches the engine as a
 * placeholder so every rank fails this collective together; it carries the call's name (b.name, when b,
 * the call's options, has a string there), so that a batch ordered by name keeps its order on every rank.
 */
/** @internal */
export function submitCollective<T, A = undefined, B = undefined>(
  scope: Scope | null, collective: string, callee: Function, plan: (w: Scope, a: A, b: B) => Plan<T>, a?: A, b?: B,
): Work<T> {
  const w = scope ?? current(collective);
  requireElasticRun(w, collective);
  if (w.dispatcher?.joining) return refusedWhileJoining(w, collective, callee);
  // A world of one completes here and now: its call site is wanted only for a bad call, and taking it
  // (2-3 µs) on every call made its collectives slower than a world of two's.
  const site = w.dispatcher ? w.dispatcher.callSite(callee) : CallSite.none;
  let p: Plan<T>;
  try {
    // The call's arguments travel beside the plan rather than in a closure made for each call.
    p = plan(w, a as A, b as B);
  } catch (e) {
    const err = e instanceof HoraError ? e : new HoraError('ERR_INVALID_ARGUMENT', String(e), w.self);
    (w.dispatcher ? site : new CallSite(callee)).attach(err);
    if (w.dispatcher) submitInvalid(w.dispatcher, err.message, site, w.group, nameOfFailed(b));
    const failed = new Work<T>(null);
    failed.reject(err);
    return failed;
  }
  if (!w.dispatcher) {
    const done = new Work<T>(null);
    done.fulfil(p.local !== null ? p.local() : p.value as T);
    return done;
  }
  const work = w.dispatcher.submit(w.group ? { ...p.item, group: w.group } : p.item, p.finish, site, p.keep ?? p.value, p.value, p.lends);
  if (p.item.device !== undefined && p.keep !== null) for (const k of p.keep) if (k instanceof DeviceBuffer) work.onSettled(lend(k));
  return work;
}

// ---------------------------------------------------------------------------------------------------
// Collectives. Each returns a Work: await it, or call wait() to block until it completes.

/**
 * Reduces x element-wise across all ranks (default op 'avg'). Returns a new array with the result, or x
 * itself with `inplace: true`. Every rank receives identical bytes. A DeviceBuffer gives a new DeviceBuffer
 * on the same device and stream (or x itself with `inplace: true`).
 */
export function allreduce<T extends CollectiveInput>(x: T, options?: AllreduceOptions): Work<T> {
  return submitCollective(null, 'allreduce', allreduce, planAllreduce<T>, x, options);
}

/** @internal */
export function allreducePlan<T extends CollectiveInput>(x: T, options?: AllreduceOptions): (w: Scope) => Plan<T> {
  return (w) => planAllreduce(w, x, options);
}

function planAllreduce<T extends CollectiveInput>(w: Scope, x: T, options?: AllreduceOptions): Plan<T> {
  const c = w.prefix + 'allreduce';
  const o = optionsObject<AllreduceOptions>(c, options, ALLREDUCE_OPTIONS, w.self);
  const dtype = dtypeOf(c, x, o.dtype, w.self);
  const op = opOf(c, o.op, 'avg', w.self);
  const name = nameOf(c, o.name, w.self);
  const inplace = booleanOf(c, 'inplace', o.inplace, w.self);
  const scale = o.prescaleFactor === undefined && o.postscaleFactor === undefined ? undefined : scaleOf(c, o, x, dtype, w.self);
  // dtypeOf took x: a typed array or else a DeviceBuffer (a test cheaper than instanceof's walk).
  if (!ArrayBuffer.isView(x)) {
    const out = (inplace ? x : deviceCopy(c, x as DeviceBuffer)) as T & DeviceBuffer;
    return { item: deviceItem(NativeKind.Allreduce, op, dtype, 0, name, out), finish: null, keep: [out], local: null, value: out, lends: Lend.None };
  }
  const out = inplace ? x : copyOf(x as Tensor) as T;
  const item = nativeItem(NativeKind.Allreduce, op, dtype, 0, name, out as Tensor, null);
  if (scale) {
    item.scale = scale;
    if (!w.dispatcher) scaledAlone(out as Tensor, dtype, scale);
  }
  return { item, finish: null, keep: null, local: null, value: out, lends: inplace ? Lend.ReadsWrites : Lend.None };
}

/**
 * Sends root's x to every rank. Returns a new array (or x itself with `inplace: true`); for a DeviceBuffer, a
 * new DeviceBuffer on the same device and stream (or x itself).
 */
export function broadcast<T extends CollectiveInput>(x: T, options?: BroadcastOptions): Work<T> {
  return submitCollective(null, 'broadcast', broadcast, broadcastPlan(x, options), undefined, options);
}

/** @internal */
export function broadcastPlan<T extends CollectiveInput>(x: T, options?: BroadcastOptions): (w: Scope) => Plan<T> {
  return (w) => {
    const c = w.prefix + 'broadcast';
    const o = optionsObject<BroadcastOptions>(c, options, BROADCAST_OPTIONS, w.self);
    const dtype = dtypeOf(c, x, o.dtype, w.self);
    const root = rootOf(c, o.root, w.size, w.self);
    const name = nameOf(c, o.name, w.self);
    const inplace = booleanOf(c, 'inplace', o.inplace, w.self);
    if (x instanceof DeviceBuffer) {
      const out = (inplace ? x : deviceCopy(c, x)) as T & DeviceBuffer;
      return { item: deviceItem(NativeKind.Broadcast, NativeOp.Sum, dtype, root, name, out), finish: () => out, keep: [out], local: () => out, value: undefined, lends: Lend.None };
    }
    const out = inplace ? x : copyOf(x as Tensor) as T;
    return {
      item: nativeItem(NativeKind.Broadcast, NativeOp.Sum, dtype, root, name, out as Tensor, null),
      finish: null, keep: null, local: null, value: out, lends: inplace ? Lend.ReadsWrites : Lend.None,
    };
  };
}

/**
 * Concatenates every rank's x in rank order. Ranks may contribute different lengths. Returns a new array
 * of the same type; for a DeviceBuffer, a new DeviceBuffer on the same device and stream.
 */
export function allgather<T extends CollectiveInput>(x: T, options?: AllgatherOptions): Work<T> {
  return submitCollective(null, 'allgather', allgather, allgatherPlan(x, options), undefined, options);
}

/** @internal */
export function allgatherPlan<T extends CollectiveInput>(x: T, options?: AllgatherOptions): (w: Scope) => Plan<T> {
  return (w) => {
    const c = w.prefix + 'allgather';
    const o = optionsObject<AllgatherOptions>(c, options, ALLGATHER_OPTIONS, w.self);
    const dtype = dtypeOf(c, x, o.dtype, w.self);
    const name = nameOf(c, o.name, w.self);
    if (x instanceof DeviceBuffer) {
      const adopt = (r: NativeResult) => {
        if (r.devicePtr === undefined || !r.counts) throw new Error('a device allgather came back without device memory');
        const count = r.counts.reduce((a, b) => a + b, 0);
        return adoptDevicePointer(r.devicePtr, x.dtype, count, x.device, x.stream) as T & DeviceBuffer;
      };
      return {
        item: deviceItem(NativeKind.Allgather, NativeOp.Sum, dtype, 0, name, x), finish: adopt, keep: [x],
        local: () => deviceCopy(c, x) as T & DeviceBuffer, value: undefined, lends: Lend.None,
      };
    }
    const Ctor = x.constructor as new (buffer: ArrayBuffer) => T;
    return {
      item: nativeItem(NativeKind.Allgather, NativeOp.Sum, dtype, 0, name, x as Tensor, null),
      finish: (r) => new Ctor(r.gathered as ArrayBuffer), keep: [x], local: () => copyOf(x as Tensor) as T, value: undefined, lends: Lend.Reads,
    };
  };
}

/**
 * Reduces x element-wise across ranks (default op 'sum') and returns this rank's block of the result:
 * x is cut into size() blocks, the first x.length % size() of them one element longer. For a DeviceBuffer
 * the block is a new DeviceBuffer on the same device and stream.
 */
export function reduceScatter<T extends CollectiveInput>(x: T, options?: ReduceScatterOptions): Work<T> {
  return submitCollective(null, 'reduceScatter', reduceScatter, reduceScatterPlan(x, options), undefined, options);
}

/** @internal */
export function reduceScatterPlan<T extends CollectiveInput>(x: T, options?: ReduceScatterOptions): (w: Scope) => Plan<T> {
  return (w) => {
    const c = w.prefix + 'reduceScatter';
    const o = optionsObject<ReduceScatterOptions>(c, options, REDUCE_SCATTER_OPTIONS, w.self);
    const dtype = dtypeOf(c, x, o.dtype, w.self);
    const op = opOf(c, o.op, 'sum', w.self);
    const name = nameOf(c, o.name, w.self);
    const scale = o.prescaleFactor === undefined && o.postscaleFactor === undefined ? undefined : scaleOf(c, o, x, dtype, w.self);
    if (x instanceof DeviceBuffer) {
      const local = () => deviceCopy(c, x) as T & DeviceBuffer;
      if (!w.dispatcher) return { item: deviceItem(NativeKind.ReduceScatter, op, dtype, 0, name, x), finish: local, keep: [], local, value: undefined, lends: Lend.None };
      const [begin, end] = blockRange(x.count, w.size, w.rank);
      const out = deviceAlloc(c, x.dtype, end - begin, x.device, x.stream) as T & DeviceBuffer;
      return { item: deviceItem(NativeKind.ReduceScatter, op, dtype, 0, name, x, out), finish: () => out, keep: [x, out], local, value: undefined, lends: Lend.None };
    }
    const [begin, end] = blockRange((x as Tensor).length, w.size, w.rank);
    const Ctor = x.constructor as new (length: number) => T;
    const out = new Ctor(end - begin);
    const item = nativeItem(NativeKind.ReduceScatter, op, dtype, 0, name, x as Tensor, out as Tensor);
    if (scale) item.scale = scale;
    return { item, finish: () => out, keep: [x, out], local: () => scaledAlone(copyOf(x as Tensor), dtype, scale) as T, value: undefined, lends: Lend.Reads };
  };
}

/**
 * Reduces x element-wise across ranks (default op 'sum') into a new array at `root` (default 0); on every
 * other rank the Work resolves to null. Every rank's x has the same length. Host arrays only: a
 * DeviceBuffer is refused with ERR_INVALID_ARGUMENT.
 */
export function reduce<T extends Tensor>(x: T, options?: ReduceOptions): Work<T | null> {
  return submitCollective(null, 'reduce', reduce, reducePlan(x, options), undefined, options);
}

/** @internal */
export function reducePlan<T extends Tensor>(x: T, options?: ReduceOptions): (w: Scope) => Plan<T | null> {
  return (w) => {
    const c = w.prefix + 'reduce';
    const o = optionsObject<ReduceOptions>(c, options, REDUCE_OPTIONS, w.self);
    hostArray(c, x, w.self);
    const dtype = dtypeOf(c, x, o.dtype, w.self);
    const root = rootOf(c, o.root, w.size, w.self);
    const op = opOf(c, o.op, 'sum', w.self);
    const name = nameOf(c, o.name, w.self);
    const scale = o.prescaleFactor === undefined && o.postscaleFactor === undefined ? undefined : scaleOf(c, o, x, dtype, w.self);
    const out = w.rank === root ? new (x.constructor as new (length: number) => T)(x.length) : null;
    const item = nativeItem(NativeKind.Reduce, op, dtype, root, name, x, out);
    if (scale) item.scale = scale;
    return {
      item, finish: () => out, keep: out ? [x, out] : [x], local: () => scaledAlone(copyOf(x), dtype, scale),
      value: undefined, lends: Lend.Reads,
    };
  };
}

/**
 * Concatenates every rank's x in rank order into a new array at `root` (default 0); on every other rank
 * the Work resolves to null. Ranks may contribute different lengths, zero included; the result says
 * nothing of where one rank's part ends (send the lengths too, or gather equal lengths, when the root
 * needs them). Host arrays only: a DeviceBuffer is refused with ERR_INVALID_ARGUMENT.
 */
export function gather<T extends Tensor>(x: T, options?: GatherOptions): Work<T | null> {
  return submitCollective(null, 'gather', gather, gatherPlan(x, options), undefined, options);
}

/** @internal */
export function gatherPlan<T extends Tensor>(x: T, options?: GatherOptions): (w: Scope) => Plan<T | null> {
  return (w) => {
    const c = w.prefix + 'gather';
    const o = optionsObject<GatherOptions>(c, options, GATHER_OPTIONS, w.self);
    hostArray(c, x, w.self);
    const dtype = dtypeOf(c, x, o.dtype, w.self);
    const root = rootOf(c, o.root, w.size, w.self);
    const name = nameOf(c, o.name, w.self);
    const Ctor = x.constructor as new (buffer: ArrayBuffer) => T;
    const mine = w.rank === root;
    return {
      item: nativeItem(NativeKind.Gather, NativeOp.Sum, dtype, root, name, x, null),
      finish: (r) => (mine ? new Ctor(r.gathered as ArrayBuffer) : null), keep: [x], local: () => copyOf(x),
      value: undefined, lends: Lend.Reads,
    };
  };
}

/** reduce and gather take host arrays (their device paths are not written); a DeviceBuffer is refused by name. */
function hostArray(c: string, x: unknown, rank: number): void {
  if (x instanceof DeviceBuffer) {
    throw invalidArgument(c, 'x', 'a typed array (this call takes host memory; copy a hora.cuda.DeviceBuffer to the host first)', x, rank);
  }
}

/**
 * For uneven data: this rank has run out of batches. From now on it takes part in the other ranks'
 * collectives with a neutral contribution (the identity of the op, nothing for an allgather), until every
 * rank has joined; the Work then resolves on every rank to the rank that joined last (of ranks that joined
 * at the same place of the order, the highest). While the join is pending this rank's own collectives are
 * refused (ERR_INVALID_ARGUMENT); messages still run. See docs/join.md.
 */
export function join(): Work<number> {
  return joinIn(null, join);
}

/** hora.join() or group.join(): the pending join refuses every collective of its dispatcher (one engine thread) until it settles. */
/** @internal */
export function joinIn(scope: Scope | null, callee: Function): Work<number> {
  const work = submitCollective(scope, 'join', callee, planJoin);
  const w = scope ?? current('join');
  if (w.dispatcher && !work.done) {
    const dispatcher = w.dispatcher;
    dispatcher.joining = w.prefix + 'join';
    work.onSettled(() => { dispatcher.joining = null; });
  }
  return work;
}

function planJoin(w: Scope): Plan<number> {
  return {
    item: nativeItem(NativeKind.Join, NativeOp.Sum, NativeDType.Uint8, 0, '', null, null),
    finish: (r) => r.lastJoined ?? -1, keep: [], local: () => w.rank, value: undefined, lends: Lend.None,
  };
}

/** @internal A call of a rank whose join is pending (w.dispatcher.joining set): refused, and nothing is queued. */
export function refusedWhileJoining<T>(w: Scope, collective: string, callee: Function): Work<T> {
  const err = new HoraError('ERR_INVALID_ARGUMENT', `hora.${w.prefix}${collective}: this rank (${w.self}) called ` +
    `hora.${(w.dispatcher as Dispatcher).joining}() and it has not resolved; a rank that has joined takes part in the others' ` +
    'collectives by itself and calls none of its own until its join resolves (await it first)', w.self);
  new CallSite(callee).attach(err);
  const failed = new Work<T>(null);
  failed.reject(err);
  return failed;
}

/** Completes once every rank has called it. */
export function barrier(options?: BarrierOptions): Work<void> {
  return submitCollective(null, 'barrier', barrier, barrierPlan(options), undefined, options);
}

/** @internal */
export function barrierPlan(options?: BarrierOptions): (w: Scope) => Plan<void> {
  return (w) => {
    const c = w.prefix + 'barrier';
    const o = optionsObject<BarrierOptions>(c, options, BARRIER_OPTIONS, w.self);
    const name = nameOf(c, o.name, w.self);
    return {
      item: nativeItem(NativeKind.Barrier, NativeOp.Sum, NativeDType.Uint8, 0, name, null, null),
      finish: () => undefined, keep: [], local: () => undefined, value: undefined, lends: Lend.None,
    };
  };
}

/**
 * Tells the other ranks that this rank cannot go on (say, its training step threw): takes the next place
 * in the order of collectives, and every other rank's collective at that place fails with
 * ERR_INVALID_ARGUMENT naming this rank and quoting `reason`, instead of waiting for it. No-op in a world
 * of one. Returns once the signal is queued.
 */
export function failPeers(reason: string): void {
  const w = current('failPeers');
  if (typeof reason !== 'string') throw invalidArgument('failPeers', 'reason', 'a string', reason, w.rank);
  if (!w.dispatcher) return;
  submitInvalid(w.dispatcher, reason, new CallSite(failPeers));
  w.dispatcher.flush();
}

/** The placeholder that keeps the ranks in step when this rank's call cannot run; see failPeers(). */
/** @internal */
export function submitInvalid(dispatcher: Dispatcher, reason: string, site: CallSite, group = 0, name = ''): void {
  dispatcher.submit(invalidItem(reason, group, name), () => undefined, site, []);
}

/** options.name of a call that failed validation, when it is a string; else ''. Reading it may throw (a getter). */
function nameOfFailed(options: unknown): string {
  try {
    const name = typeof options === 'object' && options !== null ? (options as { name?: unknown }).name : undefined;
    return typeof name === 'string' ? name : '';
  } catch {
    return '';
  }
}

/**
 * The cost model's predicted seconds of a float32 allreduce of `bytes` with each algorithm, and which one
 * `algorithm` (default: this job's setting) resolves to; null in a world of one. For `hora bench`.
 */
export function allreduceEstimate(bytes: number, algorithm: string): NativeEstimate | null {
  const comm = current('allreduceEstimate').dispatcher?.comm;
  if (!comm) return null;
  if (lookupName(ALGORITHMS, algorithm) === undefined) throw invalidArgument('allreduceEstimate', 'algorithm', `one of ${Object.keys(ALGORITHMS).join(', ')}`, algorithm, rank());
  return comm.estimate(bytes, ALGORITHMS[algorithm]);
}

