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

/** Splits a byte stream into frame payloads. */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private failed: ControlProtocolError | undefined;

  /** @param maxFrameBytes largest payload accepted; larger lengths fail before allocation. */
  constructor(readonly maxFrameBytes: number = MAX_FRAME_BYTES) {}

  /** Bytes received but not yet returned as a complete frame. */
  get pendingBytes(): number {
    return this.buffered;
  }

  /**
   * Adds bytes; returns every frame completed by them, in order.
   * Throws ControlProtocolError on an oversized length, and on every call after that.
   */
  push(chunk: Uint8Array): Buffer[] {
    if (this.failed) throw this.failed;
    if (chunk.length > 0) {
      this.chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length));
      this.buffered += chunk.length;
    }
    const frames: Buffer[] = [];
    for (;;) {
      if (this.buffered < HEADER_BYTES) break;
      const length = this.peekLength();
      if (length > this.maxFrameBytes) {
        this.failed = new ControlProtocolError(
          `control frame of ${length} bytes exceeds the limit of ${this.maxFrameBytes} bytes (not a hora peer, or a corrupted stream)`,
        );
        this.chunks = [];
        this.buffered = 0;
        throw this.failed;
      }
      if (this.buffered < HEADER_BYTES + length) break;
      this.consume(HEADER_BYTES);
      frames.push(this.consume(length));
    }
    return frames;
  }

  private peekLength(): number {
    const first = this.chunks[0];
    if (first.length >= HEADER_BYTES) return first.readUInt32BE(0);
    const head = Buffer.concat(this.chunks, HEADER_BYTES);
    return head.readUInt32BE(0);
  }

  // Removes and returns the next n bytes (n <= buffered); copies only when they span chunks.
  private consume(n: number): Buffer {
    this.buffered -= n;
    const first = this.chunks[0];
    if (first !== undefined && first.length >= n) {
      const out = first.subarray(0, n);
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return Buffer.from(out); // detach from the socket's buffer so the rest can be freed
    }
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const c = this.chunks[0];
      const take = Math.min(c.length, n - filled);
      c.copy(out, filled, 0, take);
      filled += take;
      if (take === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(take);
    }
    return out;
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

  /** "addr:port" of the other end, for log lines. */
  get remote(): string {
    return `${this.socket.remoteAddress ?? '?'}:${this.socket.remotePort ?? '?'}`;
  }

  /** Queues a message; returns false when the socket is already closed. */
  send(msg: ControlMessage): boolean {
    if (this.isClosed) return false;
    this.socket.write(encodeFrame(encodeEnvelope(msg)));
    return true;
  }

  /** Sends a last message, then closes once it is flushed. */
  sendAndEnd(msg: ControlMessage): void {
    if (this.isClosed) return;
    this.socket.end(encodeFrame(encodeEnvelope(msg)));
    // A peer that never reads must not keep the socket half-open forever.
    setTimeout(() => this.socket.destroy(), 2000).unref();
  }

  close(): void {
    this.socket.destroy();
  }

  private onData(chunk: Buffer): void {
    if (this.isClosed || this.invalidated) return;
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
      if (this.isClosed || this.invalidated) return;
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
