// Length-prefixed framing of control messages over a TCP socket.
//
// Wire format: u32 big-endian payload length, then that many bytes of an
// encoded hora.v1.Envelope. The decoder accepts bytes in arbitrary pieces,
// rejects a length above its limit before allocating anything for it, and
// after the first error refuses further input: the connection is finished.
// ControlConnection wraps a socket so that no bad input ever throws out of a
// socket event handler: it becomes an 'invalid' event and the socket closes.

import { EventEmitter } from 'node:events';
import type * as net from 'node:net';
import { ControlMessage, ControlProtocolError, decodeEnvelope, encodeEnvelope } from './messages';

/** Largest frame payload accepted by default: 1 MiB is ~10,000 peers in a table. */
export const MAX_FRAME_BYTES = 1 << 20;

const HEADER_BYTES = 4;

/** Length prefix + payload, ready to write. */
export function encodeFrame(payload: Uint8Array): Buffer {
  if (payload.length > 0xffffffff) throw new RangeError(`frame payload of ${payload.length} bytes does not fit a u32 length`);
  const out = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  out.writeUInt32BE(payload.length, 0);
  out.set(payload, HEADER_BYTES);
  return out;
}

/**
 * Splits a byte stream into frame payloads.
 *
 * Bytes are copied out of each chunk as they arrive, into the 4-byte header
 * and then into a payload buffer that grows by doubling up to the length the
 * header announced. So the work per byte is constant however the stream is
 * cut (a 16 KiB frame sent one byte at a time once took 14 s to reassemble,
 * re-reading every held chunk per byte), the memory held is at most twice
 * what was received and never above the limit, and no socket buffer is kept
 * alive by a slice of it.
 */
export class FrameDecoder {
  private readonly header = Buffer.alloc(HEADER_BYTES);
  private headerFill = 0;
  /** Payload being received, once its header is in; its length is the capacity so far. */
  private payload: Buffer | undefined;
  private payloadLength = 0;
  private payloadFill = 0;
  private failed: ControlProtocolError | undefined;

  /** @param maxFrameBytes largest payload accepted; larger lengths fail before allocation. */
  constructor(readonly maxFrameBytes: number = MAX_FRAME_BYTES) {}

  /** Bytes received but not yet returned as a complete frame (header included). */
  get pendingBytes(): number {
    return this.payload === undefined ? this.headerFill : HEADER_BYTES + this.payloadFill;
  }

  /**
   * Adds bytes; returns every frame completed by them, in order.
   * Throws ControlProtocolError on an oversized length, and on every call after that.
   */
  push(chunk: Uint8Array): Buffer[] {
    if (this.failed) throw this.failed;
    const frames: Buffer[] = [];
    let at = 0;
    while (at < chunk.length) {
      if (this.payload === undefined) {
        const take = Math.min(HEADER_BYTES - this.headerFill, chunk.length - at);
        this.header.set(chunk.subarray(at, at + take), this.headerFill);
        this.headerFill += take;
        at += take;
        if (this.headerFill < HEADER_BYTES) break;
        const length = this.header.readUInt32BE(0);
        if (length > this.maxFrameBytes) {
          this.failed = new ControlProtocolError(
            `control frame of ${length} bytes exceeds the limit of ${this.maxFrameBytes} bytes (not a hora peer, or a corrupted stream)`,
          );
          this.headerFill = 0;
          throw this.failed;
        }
        this.headerFill = 0;
        if (chunk.length - at >= length) {
          // The common case: the whole payload is in this chunk; one copy of exactly its size.
          frames.push(Buffer.from(chunk.subarray(at, at + length)));
          at += length;
          continue;
        }
        this.payloadLength = length;
        this.payloadFill = 0;
        this.payload = Buffer.allocUnsafe(Math.min(length, Math.max(256, chunk.length - at)));
      }
      const take = Math.min(this.payloadLength - this.payloadFill, chunk.length - at);
      this.reserve(this.payloadFill + take);
      this.payload.set(chunk.subarray(at, at + take), this.payloadFill);
      this.payloadFill += take;
      at += take;
      if (this.payloadFill === this.payloadLength) {
        frames.push(this.payload);
        this.payload = undefined;
        this.payloadFill = 0;
      }
    }
    return frames;
  }

  // Grows the payload buffer to hold n bytes: doubling, capped at the announced length,
  // so that it ends exactly that long.
  private reserve(n: number): void {
    const current = this.payload as Buffer;
    if (n <= current.length) return;
    const grown = Buffer.allocUnsafe(Math.min(this.payloadLength, Math.max(n, 2 * current.length)));
    current.copy(grown, 0, 0, this.payloadFill);
    this.payload = grown;
  }
}

export interface ControlConnectionEvents {
  message: [msg: ControlMessage];
  /** Input that broke the protocol; the socket is destroyed right after. */
  invalid: [err: ControlProtocolError];
  /** The socket closed, for whatever reason; `error` is the socket error if one occurred. */
  close: [error: Error | undefined];
}

/**
 * One control-plane peer: sends ControlMessages, emits 'message' for each one
 * received, 'invalid' for bad input (then closes), 'close' exactly once.
 */
export class ControlConnection extends EventEmitter {
  private readonly decoder: FrameDecoder;
  private socketError: Error | undefined;
  private closed = false;
  private invalidated = false;
  private ending = false;

  constructor(
    readonly socket: net.Socket,
    maxFrameBytes: number = MAX_FRAME_BYTES,
  ) {
    super();
    this.decoder = new FrameDecoder(maxFrameBytes);
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (err) => {
      this.socketError = err;
    });
    socket.on('close', () => {
      this.closed = true;
      this.emit('close', this.socketError);
    });
  }

  get isClosed(): boolean {
    return this.closed || this.socket.destroyed;
  }

  /** Closed, or closing after sendAndEnd(): takes no more messages in either direction. */
  get isFinished(): boolean {
    return this.isClosed || this.ending;
  }

  /** "addr:port" of the other end, for log lines. */
  get remote(): string {
    return `${this.socket.remoteAddress ?? '?'}:${this.socket.remotePort ?? '?'}`;
  }

  /** Queues a message; returns false when the socket is already closed. */
  send(msg: ControlMessage): boolean {
    if (this.isFinished) return false;
    this.socket.write(encodeFrame(encodeEnvelope(msg)));
    return true;
  }

  /** Sends a last message, then closes once it is flushed; nothing more is read or sent. */
  sendAndEnd(msg: ControlMessage): void {
    if (this.isClosed || this.ending) return;
    // Frames already received behind the one that got this answer must not be
    // handled (a second answer would be written after end() and cut off this one).
    this.ending = true;
    this.socket.end(encodeFrame(encodeEnvelope(msg)));
    // A peer that never reads must not keep the socket half-open forever.
    setTimeout(() => this.socket.destroy(), 2000).unref();
  }

  close(): void {
    this.socket.destroy();
  }

  private onData(chunk: Buffer): void {
    if (this.isFinished || this.invalidated) return;
    let frames: Buffer[];
    try {
      frames = this.decoder.push(chunk);
    } catch (e) {
      this.fail(e);
      return;
    }
    for (const frame of frames) {
      let msg: ControlMessage;
      try {
        msg = decodeEnvelope(frame);
      } catch (e) {
        this.fail(e);
        return;
      }
      this.emit('message', msg);
      if (this.isFinished || this.invalidated) return;
    }
  }

  private fail(e: unknown): void {
    if (this.invalidated) return;
    this.invalidated = true;
    const err = e instanceof ControlProtocolError ? e : new ControlProtocolError(String((e as Error)?.message ?? e));
    this.socket.pause();
    this.emit('invalid', err);
    // A listener may answer with sendAndEnd(); otherwise there is nothing more to say.
    if (!this.socket.writableEnded && !this.socket.destroyed) this.socket.destroy();
  }
}
