/**
 * Arrays lent to the engine: what keeps a pending work's memory valid whatever JavaScript does meanwhile.
 *
 * The engine reads and writes a work's arrays on its own thread while JavaScript runs on. JavaScript can
 * take an ArrayBuffer's memory away at any moment: a transfer (structuredClone or postMessage with
 * `transfer`, ArrayBuffer.prototype.transfer where Node has it) detaches it and the memory is freed when
 * the new owner is collected; an addon's napi_detach_arraybuffer frees it at once; resize() of a resizable
 * ArrayBuffer decommits the pages past the new length. Node-API can neither hold that memory nor refuse
 * a detach; V8's own API can (a BackingStore held, a detach key), but an addon that calls it is built for
 * one Node ABI, not the single Node-API build hora ships (docs/failures.md, "Arrays that change while a
 * collective is pending"). So the engine only ever touches memory that no JavaScript can take from it:
 *
 * - a work run by wait() alone (collective() or message() with Manner.WaitNow): the JS thread is inside the addon from the
 *   submission to the completion, so no JavaScript runs;
 * - an array hora made (the result of a collective that is not inplace, a new array for recv): nobody else
 *   holds it until the work settles;
 * - a view of a SharedArrayBuffer: one cannot be detached or shrunk, and the work keeps it referenced;
 * - where the addon holds a pending work's memory (NativeAddon.holdsArrayBuffers: V8 lets it keep a share
 *   of an ArrayBuffer's BackingStore, see native/binding/backing_store.h), any array whose buffer is not
 *   resizable: a detach leaves the memory valid until the result is taken, and the work then fails here
 *   with its result dropped, as below;
 * - anything else, given to a work that stays pending while JavaScript runs (awaited, or not yet waited
 *   for): the engine gets a stage, an array of hora's with the same contents, and the result is copied
 *   back when the work settles, if the user's array still has its length.
 *
 * A lent array whose length changed before the work reached the engine fails the work (a collective
 * through the invalid placeholder, so every rank fails it); one that changed while it was pending fails
 * the work on this rank after the collective completed, its result dropped.
 */
import { HoraError } from './errors';
import { KIND_NAMES, NativeKind } from './native';
import type { NativeItem } from './native';

/** What a work does with the array the user gave it (a bit set). */
export const enum Lend {
  /** The array is hora's own, or there is none. */
  None = 0,
  /** The engine reads it (allgather, reduceScatter and send inputs; an inplace collective). */
  Reads = 1,
  /** The engine writes the result into it (an inplace collective, recv into an array). */
  Writes = 2,
  ReadsWrites = 3,
}

/** A typed array (the engine's arrays are always one). */
type View = Float32Array | Float64Array | Int32Array | BigInt64Array | Uint8Array | Uint16Array | Int8Array | Int16Array;

/** Stages kept for reuse, at most this many bytes in all: a loop of awaited collectives reuses one. */
const SPARE_BYTES = 256 * 1024 * 1024;

/** Stages, kept for reuse by byte length. */
export class Stages {
  // The last stage given back: a loop of one awaited collective takes and gives back the same one, and a
  // Map lookup each way was most of what a small awaited collective paid for its stage.
  private last: View | null = null;
  private spare = new Map<number, View[]>();
  private spareBytes = 0;

  /** An array of like's type and length (contents undefined). */
  take(like: View): View {
    const last = this.last;
    if (last !== null && last.length === like.length && last.constructor === like.constructor) {
      this.last = null;
      return last;
    }
    const list = this.spare.get(like.byteLength);
    if (list !== undefined) {
      for (let i = list.length - 1; i >= 0; i--) {
        const s = list[i];
        if (s.constructor === like.constructor) {
          list[i] = list[list.length - 1];
          list.pop();
          this.spareBytes -= s.byteLength;
          return s;
        }
      }
    }
    return new (like.constructor as new (length: number) => View)(like.length);
  }

  /** Takes back a stage the engine is done with. */
  give(stage: View): void {
    if (this.last === null && stage.byteLength <= SPARE_BYTES) {
      this.last = stage;
      return;
    }
    if (this.spareBytes + stage.byteLength > SPARE_BYTES) return;
    let list = this.spare.get(stage.byteLength);
    if (list === undefined) this.spare.set(stage.byteLength, (list = []));
    list.push(stage);
    this.spareBytes += stage.byteLength;
  }
}

/**
 * Whether the engine may use `view` itself while JavaScript runs: it belongs to a SharedArrayBuffer, or
 * the addon holds its memory (`held`: native/binding/backing_store.h) and no resize() can shrink it.
 */
export function cannotBeTaken(view: ArrayBufferView, held: boolean): boolean {
  const buffer = view.buffer as ArrayBuffer & { resizable?: boolean };
  return held ? buffer.resizable !== true : buffer instanceof SharedArrayBuffer;
}

/** Copies the stage's result into the user's array. */
export function copyBack(view: ArrayBufferView, stage: ArrayBufferView): void {
  (view as Float32Array).set(stage as Float32Array);
}

/** Copies the user's array into a stage. */
export function copyIn(stage: ArrayBufferView, view: ArrayBufferView): void {
  (stage as Float32Array).set(view as Float32Array);
}

/** The API's name of an item's kind: allreduce, reduceScatter, recv, ...; collective for a placeholder. */
function kindCall(kind: NativeKind): string {
  return kind === NativeKind.Invalid ? 'collective' : KIND_NAMES[kind]?.api ?? 'collective';
}

/** The user's name of an item's call: hora.allreduce, hora.group.recv, ... */
export function callName(item: Omit<NativeItem, 'id'>): string {
  return `hora.${item.group ? 'group.' : ''}${kindCall(item.kind)}`;
}

/**
 * The error of a work whose lent array no longer has the `bytes` it had at the call. pending: the change
 * came while the work was pending (its result is lost), else before the work reached the engine.
 */
export function changedArray(item: Omit<NativeItem, 'id'>, view: ArrayBufferView, bytes: number, pending: boolean, rank: number): HoraError {
  const call = callName(item);
  const argument = item.kind === NativeKind.Recv ? 'into' : 'x';
  const what = view.byteLength === 0
    ? `was detached (its ArrayBuffer was transferred, e.g. by structuredClone or postMessage, detached, or resized below it)`
    : `changed from ${bytes} to ${view.byteLength} bytes (its ArrayBuffer was resized)`;
  const kind = kindCall(item.kind);
  const then = pending
    ? item.kind === NativeKind.Recv
      ? `while the recv was pending; the message was received, but could not be written into it and is lost`
      : `while the ${kind} was pending; the ${kind} itself completed, but this rank's result could not be written back and is lost`
    : `after the call and before the ${kind} was submitted; nothing was ${item.kind === NativeKind.Send || item.kind === NativeKind.Recv ? 'sent or received' : 'reduced or moved'}`;
  return new HoraError('ERR_INVALID_ARGUMENT',
    `${call}: argument '${argument}' ${what} ${then}. An array given to a collective or message belongs to hora until its Work settles`, rank);
}
