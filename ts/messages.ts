/**
 * Point-to-point messages: send and recv (native/src/engine/p2p.h), for the world and, through runMessage()
 * with a group's Scope, for process groups (ts/group.ts).
 *
 * send and recv have no order across ranks to keep, so a bad call fails on its own rank only (the
 * returned Work is rejected) and nothing reaches the engine.
 */
import { dtypeOf, optionsObject } from './arguments';
import type { Plan } from './collectives';
import { DeviceBuffer, hostArray } from './device-buffer';
import { requireElasticRun } from './elastic/world';
import { CallSite, HoraError, invalidArgument, knownOptions } from './errors';
import { DTYPE_OF_NAME, NativeDType, NativeKind, NativeOp, lookupName, nativeItem } from './native';
import type { DType, RecvOptions, SendOptions, Tensor } from './types';
import { Work } from './work';
import { Scope, current } from './world';
import { Lend } from './lend';

// The options send and recv take (ts/types.ts); any other key is refused (checkOptionKeys).
const SEND_OPTIONS = knownOptions<SendOptions>({ to: true, tag: true, dtype: true });
const RECV_OPTIONS = knownOptions<RecvOptions>({ from: true, tag: true, dtype: true, count: true });

const TAG_LIMIT = 2 ** 31;
const P2P_TYPES = "a Float32Array, Float64Array, Int32Array, BigInt64Array, Uint8Array, Int8Array, Int16Array or Uint16Array (with dtype 'uint16', 'float16' or 'bfloat16'); " +
  'send and recv take typed arrays, not hora.cuda.DeviceBuffer';

function peerOf(call: string, key: string, v: unknown, w: Scope): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= w.size || v === w.rank) {
    const expected = w.size > 1
      ? `an integer rank from 0 to ${w.size - 1} other than this rank (${w.rank})`
      : `another rank, but this ${w.members ? 'group' : 'job'} has one rank only`;
    throw invalidArgument(call, `options.${key}`, expected, v, w.self);
  }
  return w.members ? w.members[v] : v;
}

function tagOf(call: string, v: unknown, rank: number): number {
  if (v === undefined) return 0;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= TAG_LIMIT) {
    throw invalidArgument(call, 'options.tag', `an integer from 0 to ${TAG_LIMIT - 1}`, v, rank);
  }
  return v;
}

function messageDtype(call: string, argument: string, x: unknown, dtype: unknown, rank: number): NativeDType {
  if (x instanceof DeviceBuffer || !ArrayBuffer.isView(x) || x instanceof DataView) throw invalidArgument(call, argument, P2P_TYPES, x, rank);
  return dtypeOf(call, x, dtype, rank);
}

/** Runs send or recv: validation failures reject the returned Work on this rank only. */
/** @internal */
export function runMessage<T>(scope: Scope | null, call: string, callee: Function, plan: (w: Scope) => Plan<T>): Work<T> {
  const w = scope ?? current(call);
  requireElasticRun(w, call);
  const site = w.dispatcher ? w.dispatcher.callSite(callee) : new CallSite(callee);
  let p: Plan<T>;
  try {
    p = plan(w);
  } catch (e) {
    const err = e instanceof HoraError ? e : new HoraError('ERR_INVALID_ARGUMENT', String(e), w.self);
    const failed = new Work<T>(null);
    failed.reject(site.attach(err));
    return failed;
  }
  if (!w.dispatcher) throw new HoraError('ERR_INTERNAL', `hora.${w.prefix}${call}: no engine in a world of one`, w.self);
  return w.dispatcher.submit(w.group ? { ...p.item, group: w.group } : p.item, p.finish, site, p.keep ?? p.value, p.value, p.lends);
}

/**
 * Sends x to rank `to` with `tag` (default 0). The Work settles once a matching receive has taken the
 * message (x may then be reused); until then x belongs to the engine. Messages from one rank to another
 * with one tag are received in the order sent; other tags and peers never wait on them.
 */
export function send(x: Tensor, options: SendOptions): Work<void> {
  return runMessage(null, 'send', send, sendPlan(x, options));
}

/** @internal */
export function sendPlan(x: Tensor, options: SendOptions): (w: Scope) => Plan<void> {
  return (w) => {
    const c = w.prefix + 'send';
    const o = optionsObject<SendOptions>(c, options, SEND_OPTIONS, w.self);
    const dtype = messageDtype(c, 'x', x, o.dtype, w.self);
    const peer = peerOf(c, 'to', o.to, w);
    const tag = tagOf(c, o.tag, w.self);
    return {
      item: nativeItem(NativeKind.Send, NativeOp.Sum, dtype, 0, '', x, null, peer, tag),
      finish: () => undefined, keep: [x], local: () => undefined, value: undefined, lends: Lend.Reads,
    };
  };
}

/**
 * Receives the next message from rank `from` with `tag` (default 0) into `into`, and answers `into`; or,
 * given only options with `dtype` and `count`, into a new array. The message must have the same dtype and
 * count, or both ends fail with ERR_MISMATCH.
 */
export function recv<T extends Tensor>(into: T, options: RecvOptions): Work<T>;
export function recv(options: RecvOptions): Work<Tensor>;
export function recv(first: unknown, second?: unknown): Work<Tensor> {
  return runMessage(null, 'recv', recv, recvPlan(first, second));
}

/** @internal */
export function recvPlan(first: unknown, second: unknown): (w: Scope) => Plan<Tensor> {
  return (w) => {
    const c = w.prefix + 'recv';
    const fresh = second === undefined && first !== null && typeof first === 'object' && !ArrayBuffer.isView(first) &&
      !(first instanceof DeviceBuffer);
    const o = optionsObject<RecvOptions>(c, fresh ? first : second, RECV_OPTIONS, w.self);
    let into: Tensor;
    if (fresh) {
      if (lookupName(DTYPE_OF_NAME, o.dtype) === undefined) {
        throw invalidArgument(c, 'options.dtype', `one of ${Object.keys(DTYPE_OF_NAME).join(', ')} (no array was given to receive into)`, o.dtype, w.self);
      }
      if (typeof o.count !== 'number' || !Number.isInteger(o.count) || o.count < 0 || o.count > 2 ** 32) {
        throw invalidArgument(c, 'options.count', 'an integer from 0 to 2^32 (no array was given to receive into)', o.count, w.self);
      }
      into = hostArray(o.dtype as DType, o.count);
    } else {
      if (o.count !== undefined) throw invalidArgument(c, 'options.count', 'undefined when an array is given (its length is the count)', o.count, w.self);
      into = first as Tensor;
    }
    const dtype = messageDtype(c, 'into', into, o.dtype, w.self);
    const peer = peerOf(c, 'from', o.from, w);
    const tag = tagOf(c, o.tag, w.self);
    return {
      item: nativeItem(NativeKind.Recv, NativeOp.Sum, dtype, 0, '', into, null, peer, tag),
      finish: () => into, keep: [into], local: () => into, value: undefined, lends: fresh ? Lend.None : Lend.Writes,
    };
  };
}
