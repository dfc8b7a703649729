// Where a worker's output goes: to the terminal, each line prefixed with [rank] (prefixLines), and with
// --output-filename also to files of its own, as the worker wrote it (copyToFile, outputFolder).

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Readable, Writable } from 'node:stream';

const MAX_PENDING_LINE = 64 * 1024;

/**
 * Copies a worker stream to dest with `prefix` before every line. Only whole
 * lines are written (so ranks never interleave mid-line); a very long line is
 * cut at 64 KiB; the last partial line is written, newline added, at end.
 */
export function prefixLines(src: Readable, dest: Writable, prefix: string): Promise<void> {
  const prefixBytes = Buffer.from(prefix);
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const write = (buf: Buffer) => {
    // Output nobody reads any more (closed pipe) is dropped, so that workers never block on it.
    if (dest.destroyed || dest.writableEnded) return;
    if (!dest.write(buf)) {
      src.pause();
      const resume = () => {
        dest.off('drain', resume);
        dest.off('close', resume);
        dest.off('error', resume);
        src.resume();
      };
      dest.on('drain', resume);
      dest.on('close', resume);
      dest.on('error', resume);
    }
  };
  return new Promise((resolve) => {
    src.on('data', (chunk: Buffer) => {
      const out: Buffer[] = [];
      let start = 0;
      for (;;) {
        const nl = chunk.indexOf(0x0a, start);
        if (nl < 0) break;
        out.push(prefixBytes, ...pending, chunk.subarray(start, nl + 1));
        pending = [];
        pendingBytes = 0;
        start = nl + 1;
      }
      if (start < chunk.length) {
        pending.push(chunk.subarray(start));
        pendingBytes += chunk.length - start;
        if (pendingBytes >= MAX_PENDING_LINE) {
          out.push(prefixBytes, ...pending, Buffer.from('\n'));
          pending = [];
          pendingBytes = 0;
        }
      }
      if (out.length > 0) write(Buffer.concat(out));
    });
    const finish = () => {
      if (pendingBytes > 0) write(Buffer.concat([prefixBytes, ...pending, Buffer.from('\n')]));
      pending = [];
      pendingBytes = 0;
      resolve();
    };
    src.once('end', finish);
    src.once('close', finish);
    src.once('error', finish);
  });
}

/**
 * Copies a worker stream's bytes, as they come, to `file` (created, or emptied), beside whatever else
 * reads the stream; resolves once all are written. A file that cannot be written is given up, with one
 * call of onError: the job and the terminal output go on.
 */
export function copyToFile(src: Readable, file: string, onError: (err: Error) => void): Promise<void> {
  return new Promise((resolve) => {
    const out = fs.createWriteStream(file);
    let state: 'open' | 'ending' | 'failed' = 'open';
    out.on('error', (err) => {
      if (state === 'failed') return;
      state = 'failed';
      onError(err);
      resolve();
    });
    src.on('data', (chunk: Buffer) => {
      if (state === 'open') out.write(chunk);
    });
    const finish = () => {
      if (state !== 'open') return;
      state = 'ending';
      out.end(() => resolve());
    };
    src.once('end', finish);
    src.once('close', finish);
    src.once('error', finish);
  });
}

/** A worker's folder under --output-filename: rank.N with N padded to the width of the largest rank, as horovodrun does. */
export function outputFolder(dir: string, rank: number, np: number, elasticWorker?: number): string {
  if (elasticWorker !== undefined) return path.join(dir, `worker.${elasticWorker}`);
  return path.join(dir, `rank.${String(rank).padStart(String(Math.max(np - 1, 0)).length, '0')}`);
}
