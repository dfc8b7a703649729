/**
 * Collectives of JavaScript values: broadcastObject and allgatherObject (Horovod's broadcast_object and
 * allgather_object, torch's broadcast_object_list and all_gather_object), for the world and, through a
 * group's Scope, for process groups (ts/group.ts).
 *
 * How it works: each call is ONE allgather of bytes (ts/collectives.ts's Plan, through submitCollective),
 * not a collective of lengths followed by one of bytes. A second collective could only be submitted once
 * the first had completed, and by then each rank's program may have called other collectives, in a
 * different place on each rank; one collective takes its place in the order of collectives when it is
 * called, as every other call does. The allgather takes different lengths from different ranks, so no rank
 * needs to know another's size beforehand.
 *
 * Every rank contributes a header (HEADER_BYTES: which call, the root, maxBytes) and then its value,
 * serialized with node:v8 (the structured clone algorithm): allgatherObject every rank's value,
 * broadcastObject the root's only (the others contribute the header alone). When the allgather completes,
 * every rank reads every header, so a difference (another root, another call, another maxBytes) fails the
 * call with ERR_MISMATCH on every rank, naming the ranks, as newGroup compares its lists. The engine's own
 * agreement has already matched kind, dtype and name; the name it sees is the call's (engineName: the call,
 * then the user's name), so an object call where another rank makes a plain allgather of bytes is
 * ERR_MISMATCH on every rank before any data moves.
 *
 * A value that cannot be serialized (a function, a symbol), or that serializes to more than maxBytes,
 * fails the call on its rank before anything is sent; submitCollective then submits the placeholder that
 * fails the other ranks' call at the same place with ERR_INVALID_ARGUMENT, quoting this rank's message.
 *
 * A broadcastObject moves the root's bytes around the allgather's ring: size - 1 hops of the whole value,
 * where broadcast pipelines its blocks. Objects are small next to tensors; send tensors with broadcast.
 */
import { deserialize, serialize } from 'node:v8';
import { optionsObject, nameOf, rootOf } from './arguments';
import { HoraError, describeValue, invalidArgument, knownOptions } from './errors';
import { NativeDType, NativeKind, NativeOp, NativeResult, nativeItem } from './native';
import type { AllgatherObjectOptions, BroadcastObjectOptions } from './types';
import { Plan, submitCollective } from './collectives';
import { Scope } from './world';
import { Work } from './work';
import { Lend } from './lend';

const BROADCAST_OBJECT_OPTIONS = knownOptions<BroadcastObjectOptions>({ root: true, maxBytes: true, name: true });
const ALLGATHER_OBJECT_OPTIONS = knownOptions<AllgatherObjectOptions>({ maxBytes: true, name: true });

/** The default bound on a value's serialized size, in bytes (64 MiB). */
export const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;

/** Header of each rank's contribution: byte 0 the call (Call), bytes 4-7 the root (uint32), 8-15 maxBytes (float64). */
const HEADER_BYTES = 16;
const enum Call { Broadcast = 1, Allgather = 2 }
const CALL_NAMES: Record<number, string> = { [Call.Broadcast]: 'broadcastObject', [Call.Allgather]: 'allgatherObject' };

interface Header { call: number; root: number; maxBytes: number }

/**
 * Sends root's `value` to every rank: the Work resolves, on every rank, to a copy of it made by the
 * structured clone algorithm (node:v8 serialize and deserialize), the root's included (as broadcast gives
 * the root a new array). Other ranks' `value` is not read. Options: root (default 0), maxBytes (default
 * 64 MiB: the bound on the serialized value, the same on every rank), name.
 */
export function broadcastObject<T = unknown>(value: T, options?: BroadcastObjectOptions): Work<T> {
  return submitCollective(null, 'broadcastObject', broadcastObject, planBroadcastObject as (w: Scope, a: unknown, b: unknown) => Plan<T>, value, options);
}

/**
 * Gathers every rank's `value`: the Work resolves to an array of copies (structured clones) in rank
 * order, this rank's included. Options: maxBytes (default 64 MiB: the bound on each rank's serialized
 * value, the same on every rank), name.
 */
export function allgatherObject<T = unknown>(value: T, options?: AllgatherObjectOptions): Work<T[]> {
  return submitCollective(null, 'allgatherObject', allgatherObject, planAllgatherObject as (w: Scope, a: unknown, b: unknown) => Plan<T[]>, value, options);
}

/** @internal For process groups: the plan of a broadcastObject, submitted with the group's Scope. */
export function planBroadcastObject(w: Scope, value: unknown, options: BroadcastObjectOptions | undefined): Plan<unknown> {
  const c = w.prefix + 'broadcastObject';
  const o = optionsObject<BroadcastObjectOptions>(c, options, BROADCAST_OBJECT_OPTIONS, w.self);
  const root = rootOf(c, o.root, w.size, w.self);
  const maxBytes = maxBytesOf(c, o.maxBytes, w.self);
  const name = engineName('broadcastObject', nameOf(c, o.name, w.self));
  const payload = w.rank === root ? serialized(c, value, maxBytes, w.self) : null;
  const mine = { call: Call.Broadcast, root, maxBytes };
  if (!w.dispatcher) return localPlan(() => deserialize(payload as Uint8Array));
  const bytes = contribution(mine, payload);
  return {
    item: nativeItem(NativeKind.Allgather, NativeOp.Sum, NativeDType.Uint8, 0, name, bytes, null),
    finish: (r) => {
      const parts = partsOf(c, w, mine, r);
      return deserialize(parts[root]);
    },
    keep: [bytes], local: null, value: undefined, lends: Lend.None,
  };
}

/** @internal For process groups: the plan of an allgatherObject, submitted with the group's Scope. */
export function planAllgatherObject(w: Scope, value: unknown, options: AllgatherObjectOptions | undefined): Plan<unknown[]> {
  const c = w.prefix + 'allgatherObject';
  const o = optionsObject<AllgatherObjectOptions>(c, options, ALLGATHER_OBJECT_OPTIONS, w.self);
  const maxBytes = maxBytesOf(c, o.maxBytes, w.self);
  const name = engineName('allgatherObject', nameOf(c, o.name, w.self));
  const payload = serialized(c, value, maxBytes, w.self);
  const mine = { call: Call.Allgather, root: 0, maxBytes };
  if (!w.dispatcher) return localPlan(() => [deserialize(payload)]);
  const bytes = contribution(mine, payload);
  return {
    item: nativeItem(NativeKind.Allgather, NativeOp.Sum, NativeDType.Uint8, 0, name, bytes, null),
    finish: (r) => partsOf(c, w, mine, r).map((part) => deserialize(part)),
    keep: [bytes], local: null, value: undefined, lends: Lend.None,
  };
}

/**
 * The name the engine agrees on for an object call: the call, then the user's name ("allgatherObject",
 * "broadcastObject:config"). A plain allgather of bytes at the same place has another name (its own, or
 * none), so the agreement tells the two apart, on every rank.
 */
function engineName(call: string, name: string): string {
  return name === '' ? call : `${call}:${name}`;
}

/** A world of one: nothing is sent, the result is a structured clone (a new array is what broadcast gives there). */
function localPlan<T>(local: () => T): Plan<T> {
  return { item: nativeItem(NativeKind.Allgather, NativeOp.Sum, NativeDType.Uint8, 0, '', null, null), finish: null, keep: null, local, value: undefined, lends: Lend.None };
}

function maxBytesOf(c: string, v: unknown, rank: number): number {
  if (v === undefined) return DEFAULT_MAX_BYTES;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw invalidArgument(c, 'options.maxBytes', 'a positive integer (bytes)', v, rank);
  return v;
}

/** value through node:v8's serializer, refused (ERR_INVALID_ARGUMENT) when it cannot be cloned or exceeds maxBytes. */
function serialized(c: string, value: unknown, maxBytes: number, rank: number): Uint8Array {
  let bytes: Uint8Array;
  try {
    bytes = serialize(value);
  } catch (e) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${c}: argument 'value' must be a value the structured clone algorithm can copy ` +
      `(no functions, symbols, class instances with private state, WeakMaps or Promises, at any depth); received ${describeValue(value)}, ` +
      `which node:v8 serialize refused: ${(e as Error).message}`, rank);
  }
  if (bytes.byteLength > maxBytes) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${c}: argument 'value' must serialize to at most options.maxBytes = ${maxBytes} bytes ` +
      `(raise maxBytes, the same on every rank, to send more); received ${describeValue(value)}, which serializes to ${bytes.byteLength} bytes`, rank);
  }
  return bytes;
}

/** This rank's contribution to the allgather: the header, then the serialized value (if any). */
function contribution(h: Header, payload: Uint8Array | null): Uint8Array {
  const bytes = new Uint8Array(HEADER_BYTES + (payload ? payload.byteLength : 0));
  const view = new DataView(bytes.buffer);
  view.setUint8(0, h.call);
  view.setUint32(4, h.root, true);
  view.setFloat64(8, h.maxBytes, true);
  if (payload) bytes.set(payload, HEADER_BYTES);
  return bytes;
}

/**
 * Every rank's serialized value (empty where it sent none) from the allgather's result, once every rank's
 * header agrees with this rank's; else ERR_MISMATCH, the same on every rank (each reads the same headers).
 */
function partsOf(c: string, w: Scope, mine: Header, r: NativeResult): Uint8Array[] {
  const all = new Uint8Array(r.gathered as ArrayBuffer);
  const counts = r.counts ?? [];
  const headers: (Header | null)[] = [];
  const parts: Uint8Array[] = [];
  let at = 0;
  for (const n of counts) {
    const block = all.subarray(at, at + n);
    at += n;
    if (n < HEADER_BYTES) {
      headers.push(null);
      parts.push(block);
      continue;
    }
    const view = new DataView(block.buffer, block.byteOffset, n);
    headers.push({ call: view.getUint8(0), root: view.getUint32(4, true), maxBytes: view.getFloat64(8, true) });
    parts.push(block.subarray(HEADER_BYTES));
  }
  const same = (h: Header | null) => h !== null && h.call === mine.call && h.root === mine.root && h.maxBytes === mine.maxBytes;
  const differ = headers.findIndex((h) => !same(h));
  if (differ >= 0 || counts.length !== w.size) {
    const shown = headers.map((h, q) => `rank ${q}: ${describeHeader(h)}`).join('; ');
    throw new HoraError('ERR_MISMATCH', `rank ${w.rank}: hora.${c}: every rank must make the same call with the same root and maxBytes, ` +
      `but rank ${w.rank} and rank ${differ} differ (${shown})`, w.self, w.members ? w.members[differ] ?? -1 : differ);
  }
  return parts;
}

function describeHeader(h: Header | null): string {
  if (h === null || !(h.call in CALL_NAMES)) return 'another collective (an allgather of bytes that is not an object call)';
  return h.call === Call.Broadcast ? `broadcastObject root ${h.root} maxBytes ${h.maxBytes}` : `allgatherObject maxBytes ${h.maxBytes}`;
}
