/**
 * The manifest of a checkpoint step (dir/step-N/manifest.json, ts/checkpoint.ts): its format, the byte
 * layout it describes (chunks, dtypes, the checksum of each chunk), and its reading (load checks it
 * against what the caller expects).
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { HoraError, ioError } from './errors';
import { DTYPE_BYTES, DTYPE_NAMES, NativeDType } from './native';
import type { DType, Tensor } from './types';
import { mismatch } from './checkpoint-errors';
import { loadNative } from './loader';

/** Bytes per checksum: a rank that reads part of a range reads and checks the whole chunks around it. */
export const CHUNK_BYTES = 4 * 1024 * 1024;
/** Bytes per write and per read call (a large single write blocks one libuv thread for its whole length); a multiple of CHUNK_BYTES. */
export const IO_BYTES = 16 * 1024 * 1024;
export const FORMAT = 'hora-checkpoint';
/**
 * 2: the manifest names its checksum (`checksum`) and each part lists `checksums`; save writes crc32c.
 * 1: sha256 only, in each part's `sha256`; still read (readManifest turns it into version 2's shape).
 */
export const VERSION = 2;
/**
 * The checksums a manifest may name. crc32c (CRC-32C, native/src/common/crc32c.h) is what save writes: it
 * finds accidental damage (every burst of up to 32 bits, any other change but one in 2^32), as sha256 does,
 * at a fraction of the time (the CPU's crc32 instruction against Node's sha256 on one thread). Neither
 * guards against a deliberate change: the manifest beside the files is not signed, so whoever can rewrite
 * a shard can rewrite its checksum too.
 */
export type Checksum = 'crc32c' | 'sha256';
export const CHECKSUM: Checksum = 'crc32c';
const CHECKSUMS: readonly Checksum[] = ['crc32c', 'sha256'];
export const MANIFEST = 'manifest.json';

/** manifest.json. */
export interface Manifest {
  format: string;
  version: number;
  step: number;
  worldSize: number;
  token: string;
  chunkBytes: number;
  /** The checksum of each chunk of each part. */
  checksum: Checksum;
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
  parts: { file: number; offset: number; length: number; byteOffset: number; checksums: string[] }[];
}

/** The checksum of one chunk, in hex: save computes it, load compares it with the manifest's. */
export function chunkChecksum(checksum: Checksum, bytes: Uint8Array): string {
  if (checksum === 'crc32c') return (loadNative().crc32c(bytes) >>> 0).toString(16).padStart(8, '0');
  return createHash('sha256').update(bytes).digest('hex');
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
  if (m === null || typeof m !== 'object' || m.format !== FORMAT || (m.version !== 1 && m.version !== VERSION) || !Array.isArray(m.files) ||
      m.entries === null || typeof m.entries !== 'object' || typeof m.chunkBytes !== 'number' || m.chunkBytes % 8 !== 0) {
    throw mismatch(`${file} is not a hora checkpoint manifest of version 1 to ${VERSION}`, rank);
  }
  if (m.version === 1) return fromVersion1(m, file, rank);
  if (!CHECKSUMS.includes(m.checksum)) {
    throw mismatch(`${file} names the checksum ${JSON.stringify(m.checksum)}, which this hora does not know (it knows ${CHECKSUMS.join(', ')})`, rank);
  }
  for (const e of Object.values(m.entries)) partsOf(e, file, rank).forEach((p) => checksumsOf(p.checksums, file, rank));
  return m;
}

/** A version 1 manifest in version 2's shape: sha256, each part's `sha256` as its `checksums`. */
function fromVersion1(m: Manifest, file: string, rank: number): Manifest {
  const entries: Record<string, ManifestEntry> = {};
  for (const [name, e] of Object.entries(m.entries)) {
    const parts = partsOf(e, file, rank).map((p) => {
      const { sha256, ...rest } = p as unknown as ManifestEntry['parts'][number] & { sha256: unknown };
      return { ...rest, checksums: checksumsOf(sha256, file, rank) };
    });
    entries[name] = { ...e, parts };
  }
  return { ...m, version: VERSION, checksum: 'sha256', entries };
}

function partsOf(e: ManifestEntry, file: string, rank: number): ManifestEntry['parts'] {
  if (e === null || typeof e !== 'object' || !Array.isArray(e.parts) || e.parts.some((p) => p === null || typeof p !== 'object')) {
    throw mismatch(`${file} has an entry without its parts: the manifest is corrupt`, rank);
  }
  return e.parts;
}

function checksumsOf(sums: unknown, file: string, rank: number): string[] {
  if (!Array.isArray(sums) || sums.some((x) => typeof x !== 'string')) throw mismatch(`${file} has a part without its checksums: the manifest is corrupt`, rank);
  return sums as string[];
}
