/**
 * The manifest of a checkpoint step (dir/step-N/manifest.json, ts/checkpoint.ts): its format, the byte
 * layout it describes (chunks, dtypes), and its reading (load checks it against what the caller expects).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { HoraError, ioError } from './errors';
import { DTYPE_BYTES, DTYPE_NAMES, NativeDType } from './native';
import type { DType, Tensor } from './types';
import { mismatch } from './checkpoint-errors';

/** Bytes per checksum: a rank that reads part of a range reads and checks the whole chunks around it. */
export const CHUNK_BYTES = 4 * 1024 * 1024;
/** Bytes per write and per read call (a large single write blocks one libuv thread for its whole length); a multiple of CHUNK_BYTES. */
export const IO_BYTES = 16 * 1024 * 1024;
export const FORMAT = 'hora-checkpoint';
export const VERSION = 1;
export const MANIFEST = 'manifest.json';

/** manifest.json. */
export interface Manifest {
  format: string;
  version: number;
  step: number;
  worldSize: number;
  token: string;
  chunkBytes: number;
  byteOrder: 'little';
  /** By rank: each rank's file, relative to the step's directory, and its length. */
  files: { name: string; bytes: number }[];
  entries: Record<string, ManifestEntry>;
}
export interface ManifestEntry {
  dtype: DType;
  length: number;
  sharded: boolean;
  /** In order of offset; file indexes files[]. */
  parts: { file: number; offset: number; length: number; byteOffset: number; sha256: string[] }[];
}

export const DTYPES = Object.values(DTYPE_NAMES) as DType[];
export const DTYPE_LIST = DTYPES.map((d) => `'${d}'`).join(', ');

export function bytesOf(dtype: DType): number {
  return DTYPE_BYTES[DTYPES.indexOf(dtype) as NativeDType];
}

export function arrayOf(dtype: DType, length: number): Tensor {
  switch (dtype) {
    case 'float32': return new Float32Array(length);
    case 'float64': return new Float64Array(length);
    case 'int32': return new Int32Array(length);
    case 'int64': return new BigInt64Array(length);
    case 'uint8': return new Uint8Array(length);
    case 'int8': return new Int8Array(length);
    case 'int16': return new Int16Array(length);
    default: return new Uint16Array(length);
  }
}

export function bytesView(x: ArrayBufferView): Uint8Array {
  return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
}

export async function readManifest(stepDir: string, step: number, rank: number): Promise<Manifest> {
  const file = path.join(stepDir, MANIFEST);
  let text: string;
  try {
    text = await fs.promises.readFile(file, 'utf8');
  } catch (e) {
    // No manifest: no such step, or an unfinished save of it. Any other failure is the filesystem's.
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw ioError('checkpoint.load', 'read', file, e, rank);
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.checkpoint.load: step ${step} is not a complete checkpoint: rank ${rank} cannot read ` +
      `${file} (ENOENT)`, rank);
  }
  let m: Manifest;
  try {
    m = JSON.parse(text) as Manifest;
  } catch (e) {
    throw mismatch(`${file} is not valid JSON (${(e as Error).message}): the manifest is corrupt`, rank);
  }
  if (m === null || typeof m !== 'object' || m.format !== FORMAT || m.version !== VERSION || !Array.isArray(m.files) ||
      typeof m.entries !== 'object' || typeof m.chunkBytes !== 'number' || m.chunkBytes % 8 !== 0) {
    throw mismatch(`${file} is not a hora checkpoint manifest of version ${VERSION}`, rank);
  }
  return m;
}
