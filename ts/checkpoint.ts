/**
 * hora.checkpoint: distributed checkpoints that every rank writes in parallel and that load at another
 * world size (docs/checkpoint.md).
 *
 * Layout of `dir`:
 *   dir/step-N/manifest.json        what the step holds: world size, each entry's dtype and global length,
 *                                   which rank's file holds which range at which byte offset, a sha256 per
 *                                   CHUNK_BYTES of every range
 *   dir/step-N/rank-RRRRR-T.bin     rank R's bytes (T: the save's token, chosen by rank 0)
 *   dir/latest                      "step-N": the last complete save
 *
 * How a save works, and why a crash leaves the previous checkpoint whole:
 *  1. Every rank checks its arguments; rank 0 also writes a probe file named by a fresh token. One
 *     allgatherObject shares every rank's plan (or its error), so every rank checks the same plans and
 *     agrees: an argument error on one rank is the error of every rank, and nothing is written.
 *  2. Every rank reads the probe (a rank that cannot see it is not on rank 0's filesystem), writes its file
 *     under a temporary name, fsyncs it, renames it to its final name and fsyncs the directory. A second
 *     allgatherObject shares where each range landed and its checksums (or the rank's error).
 *  3. Rank 0 writes the manifest under a temporary name, fsyncs and renames it: the step exists from this
 *     rename on. It then replaces `latest` the same way, removes files of the step that the manifest does
 *     not name (an earlier save of the same step) and the steps older than `keep`. A third collective
 *     (broadcastObject) shares rank 0's outcome, so the save resolves on every rank once the step is durable.
 * A step directory without a manifest is an unfinished save: load never reads it, a later save removes it.
 * Each save's files carry its token, so a save of a step that already exists never overwrites a file the
 * existing manifest names: until the new manifest's rename, the old step is whole.
 *
 * How a load works: every rank reads the manifest, works out its part of each entry at the CURRENT world
 * size (a sharded entry split evenly by the rule of reduceScatter's blocks, or the ranges the caller
 * passes), reads only the byte ranges of the chunks that overlap that part (at offsets, never a whole
 * file), checks each chunk's sha256, and copies the part out. One allgatherObject then agrees the outcome:
 * if any rank failed (a corrupt chunk, a truncated or missing file, another model than expected), every
 * rank throws that rank's error, naming the file, and no rank returns anything.
 *
 * Errors: ERR_INVALID_ARGUMENT for the arguments (and a `dir` that is not a checkpoint, not writable, or
 * not shared by every rank); ERR_MISMATCH for a checkpoint whose files do not match its manifest, or whose
 * manifest does not match what the caller expects, and for ranks whose calls differ.
 */
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { dtypeOf } from './arguments';
import { HoraError, describeValue, invalidArgument, knownOptions, checkOptionKeys } from './errors';
import { DTYPE_BYTES, DTYPE_NAMES, NativeDType } from './native';
import { allgatherObject, broadcastObject } from './hora';
import type { DType, Tensor } from './types';
import { current } from './world';

/** A sharded entry as saved: this rank's part `data` of an array of `globalLength` elements, from element `offset`. */
export interface CheckpointShard {
  data: Tensor;
  /** Element type of a Uint16Array ('uint16', 'float16' or 'bfloat16'); otherwise the array's own. */
  dtype?: DType;
  /** Elements in the whole array, the same on every rank. */
  globalLength: number;
  /** Index of data[0] in the whole array; the ranks' parts cover it exactly once. */
  offset: number;
}

/** A replicated entry with its dtype (needed for a Uint16Array): every rank holds it whole, rank 0 writes it. */
export interface CheckpointArray {
  data: Tensor;
  dtype?: DType;
}

/** What save takes for each name: a typed array (replicated), a CheckpointArray, or a CheckpointShard. */
export type CheckpointEntry = Tensor | CheckpointArray | CheckpointShard;

export interface CheckpointSaveOptions {
  /** The step number (an integer >= 0, the same on every rank): the directory is dir/step-<step>. */
  step: number;
  /** How many complete steps to keep, this one included (default: all); older ones are removed. */
  keep?: number;
}

/** What load may check: an entry's dtype and global length (and whether it was saved sharded). */
export interface CheckpointExpectation {
  dtype: DType;
  length: number;
  sharded?: boolean;
}

export interface CheckpointLoadOptions {
  /** The step to load (default: the one `dir/latest` names). */
  step?: number;
  /** Every entry the checkpoint must hold, and nothing else: another set, dtype or length is ERR_MISMATCH. */
  expect?: Record<string, CheckpointExpectation>;
  /** This rank's range of a sharded entry, in place of the even split (e.g. {offset: 0, length} for all of it). */
  ranges?: Record<string, { offset: number; length: number }>;
}

/** A sharded entry as loaded: this rank's part of it. */
export interface LoadedShard {
  data: Tensor;
  dtype: DType;
  globalLength: number;
  offset: number;
}

export interface LoadedCheckpoint {
  step: number;
  /** Replicated entries whole (typed arrays); sharded ones as this rank's part. */
  entries: Record<string, Tensor | LoadedShard>;
  /** Each entry's dtype (a Uint16Array's is 'uint16', 'float16' or 'bfloat16'). */
  dtypes: Record<string, DType>;
}

const SAVE_OPTIONS = knownOptions<CheckpointSaveOptions>({ step: true, keep: true });
const LOAD_OPTIONS = knownOptions<CheckpointLoadOptions>({ step: true, expect: true, ranges: true });
const SHARD_KEYS = ['data', 'dtype', 'globalLength', 'offset'];

/** Bytes per checksum: a rank that reads part of a range reads and checks the whole chunks around it. */
const CHUNK_BYTES = 4 * 1024 * 1024;
/** Bytes per write and per read call (a large single write blocks one libuv thread for its whole length); a multiple of CHUNK_BYTES. */
const IO_BYTES = 16 * 1024 * 1024;
const FORMAT = 'hora-checkpoint';
const VERSION = 1;
const MANIFEST = 'manifest.json';
const LATEST = 'latest';

/** One entry's part on one rank, as the first collective of a save shares it. */
interface PartPlan { name: string; dtype: DType; sharded: boolean; globalLength: number; offset: number; length: number }
interface SavePlan { error: ErrorInfo | null; step: number; keep: number; parts: PartPlan[]; token: string }
interface ErrorInfo { code: string; message: string }

/** Where a range landed in a rank's file. */
interface WrittenPart { name: string; byteOffset: number; sha256: string[] }
interface WriteResult { error: ErrorInfo | null; file: string; bytes: number; parts: WrittenPart[] }

/** manifest.json. */
interface Manifest {
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
interface ManifestEntry {
  dtype: DType;
  length: number;
  sharded: boolean;
  /** In order of offset; file indexes files[]. */
  parts: { file: number; offset: number; length: number; byteOffset: number; sha256: string[] }[];
}

const DTYPES = Object.values(DTYPE_NAMES) as DType[];
const DTYPE_LIST = DTYPES.map((d) => `'${d}'`).join(', ');

function bytesOf(dtype: DType): number {
  return DTYPE_BYTES[DTYPES.indexOf(dtype) as NativeDType];
}

function arrayOf(dtype: DType, length: number): Tensor {
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

function bytesView(x: ArrayBufferView): Uint8Array {
  return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
}

/** A HoraError from this rank's failure, for the collective that shares it. */
function errorInfo(e: unknown): ErrorInfo {
  if (e instanceof HoraError) return { code: e.code, message: e.message };
  return { code: 'ERR_INTERNAL', message: `hora.checkpoint: ${(e as Error)?.stack ?? String(e)}` };
}

/** The error of the lowest failed rank, thrown on every rank (each sees the same list). */
function agreedFailure(errors: (ErrorInfo | null)[], self: number): HoraError | null {
  const failed = errors.map((e, q) => (e ? q : -1)).filter((q) => q >= 0);
  if (failed.length === 0) return null;
  const first = errors[failed[0]] as ErrorInfo;
  const also = failed.length > 1 ? ` (ranks ${failed.slice(1).join(', ')} failed too)` : '';
  const where = failed[0] === self ? '' : `rank ${failed[0]} failed: `;
  return new HoraError(first.code, `${where}${first.message}${also}`, self, failed[0] === self ? -1 : failed[0]);
}

function ioError(call: string, what: string, file: string, e: unknown, rank: number): HoraError {
  const err = e as NodeJS.ErrnoException;
  return new HoraError('ERR_INVALID_ARGUMENT', `hora.checkpoint.${call}: rank ${rank} could not ${what} ${file}: ${err.code ?? ''} ${err.message}`.replace(/ {2,}/g, ' '), rank);
}

function mismatch(message: string, rank: number): HoraError {
  return new HoraError('ERR_MISMATCH', `hora.checkpoint.load: ${message}`, rank);
}

function stepOf(c: string, key: string, v: unknown, rank: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw invalidArgument(c, key, 'an integer >= 0', v, rank);
  return v;
}

function dirOf(c: string, dir: unknown, rank: number): string {
  if (typeof dir !== 'string' || dir === '') throw invalidArgument(c, 'dir', 'a non-empty string (a directory path)', dir, rank);
  return path.resolve(dir);
}

// ---------------------------------------------------------------------------------------------------
// save

/**
 * Saves `entries` as step `options.step` of the checkpoint in `dir`; every rank calls it with the same
 * names, dtypes, global lengths, step and keep. Resolves once the step is durable and `dir/latest` names
 * it; rejects on every rank (ERR_INVALID_ARGUMENT, ERR_MISMATCH) when any rank's call is wrong or a rank
 * cannot write, leaving the previous checkpoint as it was.
 */
export function save(dir: string, entries: Record<string, CheckpointEntry>, options: CheckpointSaveOptions): Promise<void> {
  return saveAgreed(dir, () => ({ entries, options }));
}

/** What a save writes: made on each rank by saveAgreed's `prepare`. */
export interface CheckpointSaveRequest {
  entries: Record<string, CheckpointEntry>;
  options: CheckpointSaveOptions;
}

/**
 * @internal save() for the adapters: `prepare` makes this rank's entries and options inside the save, so
 * that its error (an adapter's argument check) fails the save on every rank, as save's own checks do.
 */
export async function saveAgreed(dir: string, prepare: () => CheckpointSaveRequest | Promise<CheckpointSaveRequest>): Promise<void> {
  const c = 'checkpoint.save';
  const w = current(c);
  const self = w.rank;
  let plan: SavePlan = { error: null, step: -1, keep: 0, parts: [], token: '' };
  let root = '';
  let entries: Record<string, CheckpointEntry> = {};
  try {
    root = dirOf(c, dir, self);
    const request = await prepare();
    entries = request.entries;
    plan = savePlan(c, entries, request.options, self);
    if (self === 0) {
      plan.token = randomBytes(8).toString('hex');
      await writeProbe(root, plan.token, self);
    }
  } catch (e) {
    plan.error = errorInfo(e);
  }
  const plans = await allgatherObject(plan, { name: 'hora.checkpoint.save' });
  const failed = agreedFailure(plans.map((p) => p.error), self) ?? agreedPlans(plans, self);
  if (failed) {
    if (self === 0 && plan.token) await removeQuietly(probePath(root, plan.token));
    throw failed;
  }
  const token = plans[0].token;
  const step = plans[0].step;
  const stepDir = path.join(root, `step-${step}`);

  const file = `rank-${String(self).padStart(5, '0')}-${token}.bin`;
  let written: WriteResult = { error: null, file, bytes: 0, parts: [] };
  try {
    await readProbe(root, token, self);
    written = await writeShard(stepDir, file, entries, plan.parts, self);
  } catch (e) {
    written.error = errorInfo(e);
  }
  const results = await allgatherObject(written, { name: 'hora.checkpoint.save' });
  const writeFailed = agreedFailure(results.map((r) => r.error), self);
  if (writeFailed) {
    await removeQuietly(path.join(stepDir, file));
    if (self === 0) await removeQuietly(probePath(root, token));
    throw writeFailed;
  }

  let committed: ErrorInfo | null = null;
  if (self === 0) {
    try {
      await commit(root, stepDir, manifestOf(step, token, plans, results), plans[0].keep);
    } catch (e) {
      committed = errorInfo(e);
    }
    await removeQuietly(probePath(root, token));
  }
  const outcome = await broadcastObject(committed, { name: 'hora.checkpoint.save' });
  if (outcome) throw agreedFailure([outcome], self) as HoraError;
}

/** This rank's plan from its arguments; throws ERR_INVALID_ARGUMENT naming the argument. */
function savePlan(c: string, entries: unknown, options: unknown, rank: number): SavePlan {
  if (options === null || typeof options !== 'object') throw invalidArgument(c, 'options', 'an object with step (and keep)', options, rank);
  checkOptionKeys(c, options, SAVE_OPTIONS, rank);
  const o = options as Partial<CheckpointSaveOptions>;
  const step = stepOf(c, 'options.step', o.step, rank);
  let keep = 0;
  if (o.keep !== undefined) {
    if (typeof o.keep !== 'number' || !Number.isSafeInteger(o.keep) || o.keep < 1) throw invalidArgument(c, 'options.keep', 'an integer >= 1', o.keep, rank);
    keep = o.keep;
  }
  if (entries === null || typeof entries !== 'object' || Array.isArray(entries) || ArrayBuffer.isView(entries)) {
    throw invalidArgument(c, 'entries', 'an object mapping names to typed arrays or {data, globalLength, offset}', entries, rank);
  }
  const names = Object.keys(entries).sort();
  if (names.length === 0) throw invalidArgument(c, 'entries', 'an object with at least one entry', entries, rank);
  const parts = names.map((name) => partPlan(c, name, (entries as Record<string, unknown>)[name], rank));
  return { error: null, step, keep, parts, token: '' };
}

function partPlan(c: string, name: string, v: unknown, rank: number): PartPlan {
  const key = `entries[${JSON.stringify(name)}]`;
  if (ArrayBuffer.isView(v)) {
    const dtype = entryDtype(c, key, v, undefined, rank);
    return { name, dtype, sharded: false, globalLength: (v as Tensor).length, offset: 0, length: (v as Tensor).length };
  }
  if (v === null || typeof v !== 'object' || !ArrayBuffer.isView((v as CheckpointArray).data)) {
    throw invalidArgument(c, key, 'a typed array, {data, dtype?} or {data, dtype?, globalLength, offset}', v, rank);
  }
  for (const k of Object.keys(v)) {
    if (!SHARD_KEYS.includes(k)) throw invalidArgument(c, `${key}.${k}`, `absent (an entry takes ${SHARD_KEYS.join(', ')})`, (v as Record<string, unknown>)[k], rank);
  }
  const e = v as Partial<CheckpointShard>;
  const data = e.data as Tensor;
  const dtype = entryDtype(c, `${key}.data`, data, e.dtype, rank);
  if (e.globalLength === undefined && e.offset === undefined) {
    return { name, dtype, sharded: false, globalLength: data.length, offset: 0, length: data.length };
  }
  const globalLength = e.globalLength;
  if (typeof globalLength !== 'number' || !Number.isSafeInteger(globalLength) || globalLength < 0) {
    throw invalidArgument(c, `${key}.globalLength`, 'an integer >= 0 (the whole array\'s length)', globalLength, rank);
  }
  const offset = e.offset;
  if (typeof offset !== 'number' || !Number.isSafeInteger(offset) || offset < 0 || offset + data.length > globalLength) {
    throw invalidArgument(c, `${key}.offset`, `an integer from 0 to globalLength - data.length = ${globalLength - data.length}`, offset, rank);
  }
  return { name, dtype, sharded: true, globalLength, offset, length: data.length };
}

/** An entry's dtype as the collectives name it; a Uint16Array needs one (it may hold float16, bfloat16 or uint16). */
function entryDtype(c: string, key: string, data: ArrayBufferView, dtype: unknown, rank: number): DType {
  if (data instanceof Uint16Array && dtype === undefined) {
    throw invalidArgument(c, key, "an array with its dtype: {data, dtype: 'uint16' | 'float16' | 'bfloat16'} for a Uint16Array", data, rank);
  }
  try {
    return DTYPE_NAMES[dtypeOf(c, data, dtype, rank)];
  } catch (err) {
    if (!/options\.dtype/.test((err as Error).message)) {
      throw invalidArgument(c, key, 'a Float32Array, Float64Array, Int32Array, BigInt64Array, Uint8Array, Int8Array, Int16Array or Uint16Array', data, rank);
    }
    throw invalidArgument(c, key.replace(/\.data$/, '') + '.dtype', "'uint16', 'float16' or 'bfloat16' for a Uint16Array, else absent or the array's own type", dtype, rank);
  }
}

/** ERR_MISMATCH when the ranks' plans differ (step, keep, names, dtypes, lengths) or the shards do not tile their arrays. */
function agreedPlans(plans: SavePlan[], self: number): HoraError | null {
  const c = 'hora.checkpoint.save';
  const p0 = plans[0];
  for (let q = 1; q < plans.length; q++) {
    const p = plans[q];
    const differ = (what: string, a: unknown, b: unknown) => new HoraError('ERR_MISMATCH',
      `${c}: every rank must pass the same ${what}, but rank 0 passed ${a} and rank ${q} ${b}`, self, q);
    if (p.step !== p0.step) return differ('options.step', p0.step, p.step);
    if (p.keep !== p0.keep) return differ('options.keep', p0.keep || 'none', p.keep || 'none');
    const names = p.parts.map((x) => x.name).join(', '), names0 = p0.parts.map((x) => x.name).join(', ');
    if (names !== names0) return differ('entry names', `[${names0}]`, `[${names}]`);
    for (let i = 0; i < p.parts.length; i++) {
      const a = p0.parts[i], b = p.parts[i];
      const what = `for entry '${a.name}'`;
      if (a.sharded !== b.sharded) return differ(`kind of entry ${what}`, a.sharded ? 'a shard' : 'a whole array', b.sharded ? 'a shard' : 'a whole array');
      if (a.dtype !== b.dtype) return differ(`dtype ${what}`, a.dtype, b.dtype);
      if (a.globalLength !== b.globalLength) return differ(`${a.sharded ? 'globalLength' : 'length'} ${what}`, a.globalLength, b.globalLength);
    }
  }
  for (let i = 0; i < p0.parts.length; i++) {
    if (!p0.parts[i].sharded) continue;
    const ranges = plans.map((p, q) => ({ q, offset: p.parts[i].offset, end: p.parts[i].offset + p.parts[i].length }))
      .filter((r) => r.end > r.offset).sort((a, b) => a.offset - b.offset);
    let at = 0;
    for (const r of ranges) {
      if (r.offset !== at) {
        const shown = plans.map((p, q) => `rank ${q}: [${p.parts[i].offset}, ${p.parts[i].offset + p.parts[i].length})`).join(', ');
        return new HoraError('ERR_MISMATCH', `${c}: the shards of entry '${p0.parts[i].name}' must cover its ${p0.parts[i].globalLength} elements ` +
          `once each, but ${r.offset > at ? `elements [${at}, ${r.offset}) are in no shard` : `rank ${r.q}'s shard overlaps another at element ${r.offset}`} (${shown})`, self);
      }
      at = r.end;
    }
    if (at !== p0.parts[i].globalLength) {
      return new HoraError('ERR_MISMATCH', `${c}: the shards of entry '${p0.parts[i].name}' must cover its ${p0.parts[i].globalLength} elements, ` +
        `but elements [${at}, ${p0.parts[i].globalLength}) are in no shard`, self);
    }
  }
  return null;
}

function probePath(root: string, token: string): string {
  return path.join(root, `.probe-${token}`);
}

async function writeProbe(root: string, token: string, rank: number): Promise<void> {
  try {
    await fs.promises.mkdir(root, { recursive: true });
    await fs.promises.writeFile(probePath(root, token), token);
  } catch (e) {
    throw ioError('save', 'write to the directory (argument \'dir\')', root, e, rank);
  }
}

/** The shared filesystem check: rank 0's probe, seen by this rank. */
async function readProbe(root: string, token: string, rank: number): Promise<void> {
  let text = '';
  try {
    text = await fs.promises.readFile(probePath(root, token), 'utf8');
  } catch {
    text = '';
  }
  if (text !== token) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.checkpoint.save: argument 'dir' must be a directory on a filesystem shared by every rank, ` +
      `but rank ${rank} cannot see the file ${probePath(root, token)} that rank 0 wrote there: mount one shared filesystem (NFS, Lustre, ...) ` +
      'at the same path on every host, or pass a path on it', rank);
  }
}

/** Writes this rank's ranges (and, on rank 0, the replicated entries) under a temporary name, fsyncs, renames. */
async function writeShard(stepDir: string, file: string, entries: Record<string, CheckpointEntry>, parts: PartPlan[], rank: number): Promise<WriteResult> {
  const temp = path.join(stepDir, `.${file}.tmp`);
  const final = path.join(stepDir, file);
  const written: WrittenPart[] = [];
  let at = 0;
  try {
    await fs.promises.mkdir(stepDir, { recursive: true });
    const fh = await fs.promises.open(temp, 'w');
    try {
      for (const part of parts) {
        if (!part.sharded && rank !== 0) continue;
        const v = entries[part.name];
        const bytes = bytesView(ArrayBuffer.isView(v) ? v : (v as CheckpointArray).data);
        const sha256: string[] = [];
        written.push({ name: part.name, byteOffset: at, sha256 });
        // Each piece's checksums are computed on this thread while a libuv thread writes the piece.
        for (let done = 0; done < bytes.byteLength;) {
          const n = Math.min(IO_BYTES, bytes.byteLength - done);
          const writing = writeAll(fh, bytes.subarray(done, done + n), at + done);
          sha256.push(...chunkHashes(bytes.subarray(done, done + n)));
          await writing;
          done += n;
        }
        at += bytes.byteLength;
      }
      await fh.sync();
    } finally {
      await fh.close();
    }
    await fs.promises.rename(temp, final);
    await syncDir(stepDir);
  } catch (e) {
    await removeQuietly(temp);
    throw ioError('save', 'write', temp, e, rank);
  }
  return { error: null, file, bytes: at, parts: written };
}

async function writeAll(fh: fs.promises.FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  for (let done = 0; done < bytes.byteLength;) {
    const { bytesWritten } = await fh.write(bytes, done, bytes.byteLength - done, position + done);
    done += bytesWritten;
  }
}

/** sha256 of each CHUNK_BYTES of `bytes` (which starts at a chunk boundary). */
function chunkHashes(bytes: Uint8Array): string[] {
  const out: string[] = [];
  for (let i = 0; i < bytes.byteLength; i += CHUNK_BYTES) {
    out.push(createHash('sha256').update(bytes.subarray(i, Math.min(i + CHUNK_BYTES, bytes.byteLength))).digest('hex'));
  }
  return out;
}

function manifestOf(step: number, token: string, plans: SavePlan[], results: WriteResult[]): Manifest {
  const entries: Record<string, ManifestEntry> = {};
  for (const [i, p] of plans[0].parts.entries()) {
    const parts: ManifestEntry['parts'] = [];
    for (let q = 0; q < plans.length; q++) {
      if (!p.sharded && q !== 0) continue;
      const part = plans[q].parts[i];
      const at = results[q].parts.find((x) => x.name === p.name) as WrittenPart;
      parts.push({ file: q, offset: part.offset, length: part.length, byteOffset: at.byteOffset, sha256: at.sha256 });
    }
    parts.sort((a, b) => a.offset - b.offset);
    entries[p.name] = { dtype: p.dtype, length: p.globalLength, sharded: p.sharded, parts };
  }
  return {
    format: FORMAT, version: VERSION, step, worldSize: plans.length, token, chunkBytes: CHUNK_BYTES, byteOrder: 'little',
    files: results.map((r) => ({ name: r.file, bytes: r.bytes })), entries,
  };
}

/** Rank 0: the manifest (the step exists from its rename), then `latest`, then the removal of what is no longer named. */
async function commit(root: string, stepDir: string, manifest: Manifest, keep: number): Promise<void> {
  await writeDurably(path.join(stepDir, MANIFEST), JSON.stringify(manifest, null, 1) + '\n');
  await writeDurably(path.join(root, LATEST), `step-${manifest.step}\n`);
  const named = new Set(manifest.files.map((f) => f.name).concat(MANIFEST));
  for (const f of await fs.promises.readdir(stepDir)) {
    if (!named.has(f) && (f.startsWith('rank-') || f.startsWith('.rank-'))) await removeQuietly(path.join(stepDir, f));
  }
  await prune(root, manifest.step, keep);
}

async function writeDurably(file: string, text: string): Promise<void> {
  const temp = `${file}.tmp-${process.pid}`;
  try {
    const fh = await fs.promises.open(temp, 'w');
    try {
      await fh.writeFile(text);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await fs.promises.rename(temp, file);
    await syncDir(path.dirname(file));
  } catch (e) {
    await removeQuietly(temp);
    throw ioError('save', 'write', file, e, 0);
  }
}

/** Removes the steps below `step` past the newest keep - 1 complete ones, and every unfinished step below it. */
async function prune(root: string, step: number, keep: number): Promise<void> {
  const older: { n: number; dir: string; complete: boolean }[] = [];
  for (const name of await fs.promises.readdir(root)) {
    const m = /^step-(\d+)$/.exec(name);
    if (!m || Number(m[1]) >= step) continue;
    const dir = path.join(root, name);
    older.push({ n: Number(m[1]), dir, complete: fs.existsSync(path.join(dir, MANIFEST)) });
  }
  older.sort((a, b) => b.n - a.n);
  let kept = 1;
  for (const s of older) {
    if (s.complete && (keep === 0 || kept < keep)) {
      kept++;
      continue;
    }
    // The manifest first: a crash while removing leaves an unfinished step, never a corrupt complete one.
    await removeQuietly(path.join(s.dir, MANIFEST));
    await fs.promises.rm(s.dir, { recursive: true, force: true });
  }
}

async function syncDir(dir: string): Promise<void> {
  let fh: fs.promises.FileHandle | undefined;
  try {
    fh = await fs.promises.open(dir, 'r');
    await fh.sync();
  } catch {
    // Some filesystems refuse fsync on a directory; the rename is then as durable as they make it.
  } finally {
    await fh?.close();
  }
}

async function removeQuietly(file: string): Promise<void> {
  await fs.promises.rm(file, { force: true }).catch(() => undefined);
}

// ---------------------------------------------------------------------------------------------------
// load

/** The step `dir/latest` names, or null when there is none (this rank only: no collective). */
export async function latestStep(dir: string): Promise<number | null> {
  const root = dirOf('checkpoint.latestStep', dir, -1);
  let text: string;
  try {
    text = await fs.promises.readFile(path.join(root, LATEST), 'utf8');
  } catch {
    return null;
  }
  const m = /^step-(\d+)\s*$/.exec(text);
  return m ? Number(m[1]) : null;
}

/**
 * Loads step `options.step` (default: the latest) of the checkpoint in `dir`: this rank's part of each
 * entry at the current world size. Every rank calls it. Rejects on every rank, with nothing loaded, when
 * any rank finds a file missing, truncated or corrupt, or a manifest other than options.expect says.
 */
export function load(dir: string, options?: CheckpointLoadOptions): Promise<LoadedCheckpoint> {
  return loadAgreed(dir, () => options);
}

/**
 * @internal load() for the adapters: `prepare` gives the options and `verify` checks what was read (the
 * manifest's path given for messages) before the ranks agree, so that either one's error on any rank fails
 * the load on every rank, and no rank uses what it read.
 */
export async function loadAgreed(dir: string, prepare: () => CheckpointLoadOptions | undefined | Promise<CheckpointLoadOptions | undefined>,
  verify?: (loaded: LoadedCheckpoint, manifest: string) => void): Promise<LoadedCheckpoint> {
  const c = 'checkpoint.load';
  const w = current(c);
  const self = w.rank;
  let loaded: LoadedCheckpoint | null = null;
  let error: ErrorInfo | null = null;
  let token = '';
  try {
    const root = dirOf(c, dir, self);
    const o = loadOptions(c, await prepare(), self);
    const step = o.step ?? await latestOf(root, self);
    const stepDir = path.join(root, `step-${step}`);
    const manifest = await readManifest(stepDir, step, self);
    token = manifest.token;
    if (o.expect) checkExpected(manifest, o.expect, stepDir, self);
    const read = await readEntries(stepDir, manifest, o.ranges ?? {}, w.rank, w.size);
    if (verify) verify(read, path.join(stepDir, MANIFEST));
    loaded = read;
  } catch (e) {
    error = errorInfo(e);
  }
  const outcomes = await allgatherObject({ error, token, step: loaded ? loaded.step : -1 }, { name: 'hora.checkpoint.load' });
  const failed = agreedFailure(outcomes.map((x) => x.error), self);
  if (failed) throw failed;
  const other = outcomes.findIndex((x) => x.token !== token);
  if (other >= 0) {
    throw new HoraError('ERR_MISMATCH', `hora.checkpoint.load: every rank must load the same checkpoint, but rank ${self} read step ` +
      `${outcomes[self].step} (save ${token}) and rank ${other} step ${outcomes[other].step} (save ${outcomes[other].token}): ` +
      'pass options.step, or do not save while loading', self, other);
  }
  return loaded as LoadedCheckpoint;
}

function loadOptions(c: string, options: unknown, rank: number): CheckpointLoadOptions {
  if (options === undefined) return {};
  if (options === null || typeof options !== 'object') throw invalidArgument(c, 'options', 'an object', options, rank);
  checkOptionKeys(c, options, LOAD_OPTIONS, rank);
  const o = options as CheckpointLoadOptions;
  if (o.step !== undefined) stepOf(c, 'options.step', o.step, rank);
  if (o.expect !== undefined) {
    if (o.expect === null || typeof o.expect !== 'object') throw invalidArgument(c, 'options.expect', 'an object mapping names to {dtype, length}', o.expect, rank);
    for (const [name, x] of Object.entries(o.expect)) {
      const key = `options.expect[${JSON.stringify(name)}]`;
      if (x === null || typeof x !== 'object') throw invalidArgument(c, key, '{dtype, length, sharded?}', x, rank);
      if (!DTYPES.includes(x.dtype)) throw invalidArgument(c, `${key}.dtype`, `one of ${DTYPE_LIST}`, x.dtype, rank);
      if (typeof x.length !== 'number' || !Number.isSafeInteger(x.length) || x.length < 0) throw invalidArgument(c, `${key}.length`, 'an integer >= 0', x.length, rank);
      if (x.sharded !== undefined && typeof x.sharded !== 'boolean') throw invalidArgument(c, `${key}.sharded`, 'a boolean', x.sharded, rank);
    }
  }
  if (o.ranges !== undefined) {
    if (o.ranges === null || typeof o.ranges !== 'object') throw invalidArgument(c, 'options.ranges', 'an object mapping names to {offset, length}', o.ranges, rank);
    for (const [name, r] of Object.entries(o.ranges)) {
      const key = `options.ranges[${JSON.stringify(name)}]`;
      if (r === null || typeof r !== 'object') throw invalidArgument(c, key, '{offset, length}', r, rank);
      if (typeof r.offset !== 'number' || !Number.isSafeInteger(r.offset) || r.offset < 0) throw invalidArgument(c, `${key}.offset`, 'an integer >= 0', r.offset, rank);
      if (typeof r.length !== 'number' || !Number.isSafeInteger(r.length) || r.length < 0) throw invalidArgument(c, `${key}.length`, 'an integer >= 0', r.length, rank);
    }
  }
  return o;
}

async function latestOf(root: string, rank: number): Promise<number> {
  const file = path.join(root, LATEST);
  let text: string;
  try {
    text = await fs.promises.readFile(file, 'utf8');
  } catch (e) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.checkpoint.load: argument 'dir' must be a checkpoint directory, but rank ${rank} ` +
      `cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}): no save completed there`, rank);
  }
  const m = /^step-(\d+)\s*$/.exec(text);
  if (!m) throw mismatch(`${file} must hold 'step-<n>'; it holds ${describeValue(text)}`, rank);
  return Number(m[1]);
}

async function readManifest(stepDir: string, step: number, rank: number): Promise<Manifest> {
  const file = path.join(stepDir, MANIFEST);
  let text: string;
  try {
    text = await fs.promises.readFile(file, 'utf8');
  } catch (e) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.checkpoint.load: step ${step} is not a complete checkpoint: rank ${rank} cannot read ` +
      `${file} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`, rank);
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

/** ERR_MISMATCH naming the manifest when its entries are not exactly the expected ones. */
function checkExpected(m: Manifest, expect: Record<string, CheckpointExpectation>, stepDir: string, rank: number): void {
  const file = path.join(stepDir, MANIFEST);
  const have = Object.keys(m.entries), want = Object.keys(expect);
  const missing = want.filter((n) => !(n in m.entries)), extra = have.filter((n) => !(n in expect));
  if (missing.length || extra.length) {
    throw mismatch(`${file} is a checkpoint of another model: ` +
      [missing.length ? `it lacks ${missing.map((n) => `'${n}'`).join(', ')}` : '', extra.length ? `it has ${extra.map((n) => `'${n}'`).join(', ')}, which were not expected` : '']
        .filter(Boolean).join('; '), rank);
  }
  for (const n of want) {
    const e = m.entries[n], x = expect[n];
    if (e.dtype !== x.dtype) throw mismatch(`${file} is a checkpoint of another model: entry '${n}' is ${e.dtype}, expected ${x.dtype}`, rank);
    if (e.length !== x.length) throw mismatch(`${file} is a checkpoint of another model: entry '${n}' has ${e.length} elements, expected ${x.length}`, rank);
    if (x.sharded !== undefined && e.sharded !== x.sharded) {
      throw mismatch(`${file}: entry '${n}' was saved ${e.sharded ? 'sharded' : 'whole'}, expected ${x.sharded ? 'sharded' : 'whole'}`, rank);
    }
  }
}

/** Even split of `count` elements over `size` ranks: the blocks of reduceScatter (ts/collectives.ts blockRange). */
function evenRange(count: number, size: number, rank: number): [number, number] {
  const base = Math.floor(count / size), extra = count % size;
  const start = (b: number) => b * base + Math.min(b, extra);
  return [start(rank), start(rank + 1)];
}

async function readEntries(stepDir: string, m: Manifest, ranges: Record<string, { offset: number; length: number }>, rank: number, size: number): Promise<LoadedCheckpoint> {
  for (const name of Object.keys(ranges)) {
    const e = m.entries[name];
    if (!e) throw invalidArgument('checkpoint.load', `options.ranges[${JSON.stringify(name)}]`, `the range of an entry of the checkpoint (it has ${Object.keys(m.entries).join(', ')})`, ranges[name], rank);
    if (!e.sharded) throw invalidArgument('checkpoint.load', `options.ranges[${JSON.stringify(name)}]`, 'absent for an entry saved whole', ranges[name], rank);
    if (ranges[name].offset + ranges[name].length > e.length) {
      throw invalidArgument('checkpoint.load', `options.ranges[${JSON.stringify(name)}]`, `a range within the entry's ${e.length} elements`, ranges[name], rank);
    }
  }
  const reader = new ShardReader(stepDir, m, rank);
  const entries: Record<string, Tensor | LoadedShard> = {};
  const dtypes: Record<string, DType> = {};
  try {
    for (const [name, e] of Object.entries(m.entries)) {
      const [begin, end] = !e.sharded ? [0, e.length]
        : ranges[name] ? [ranges[name].offset, ranges[name].offset + ranges[name].length] : evenRange(e.length, size, rank);
      const out = arrayOf(e.dtype, end - begin);
      await reader.read(name, e, begin, end, bytesView(out));
      entries[name] = e.sharded ? { data: out, dtype: e.dtype, globalLength: e.length, offset: begin } : out;
      dtypes[name] = e.dtype;
    }
  } finally {
    await reader.close();
  }
  return { step: m.step, entries, dtypes };
}

/** Reads ranges of entries from the step's files, checking every chunk it reads against the manifest. */
class ShardReader {
  private readonly open = new Map<number, fs.promises.FileHandle>();
  constructor(private readonly stepDir: string, private readonly m: Manifest, private readonly rank: number) {}

  /** Elements [begin, end) of entry `name` into out (its bytes). */
  async read(name: string, e: ManifestEntry, begin: number, end: number, out: Uint8Array): Promise<void> {
    const elem = bytesOf(e.dtype);
    if (!elem) throw mismatch(`${path.join(this.stepDir, MANIFEST)}: entry '${name}' has an unknown dtype ${describeValue(e.dtype)}`, this.rank);
    const perChunk = this.m.chunkBytes / elem;
    for (const p of e.parts) {
      const lo = Math.max(begin, p.offset), hi = Math.min(end, p.offset + p.length);
      if (lo >= hi) continue;
      const c0 = Math.floor((lo - p.offset) / perChunk), c1 = Math.ceil((hi - p.offset) / perChunk);
      const spanStart = c0 * this.m.chunkBytes, spanEnd = Math.min(c1 * this.m.chunkBytes, p.length * elem);
      const wanted = (lo - p.offset) * elem, wantedEnd = (hi - p.offset) * elem;
      // Straight into the result when the chunks are exactly the wanted bytes (a load at the saved split).
      const direct = spanStart === wanted && spanEnd === wantedEnd;
      const span = direct ? out.subarray((lo - begin) * elem, (hi - begin) * elem) : new Uint8Array(spanEnd - spanStart);
      const file = await this.handle(p.file);
      await this.readAt(p.file, file, span, p.byteOffset + spanStart);
      for (let k = c0; k < c1; k++) {
        const a = (k - c0) * this.m.chunkBytes, b = Math.min(a + this.m.chunkBytes, span.byteLength);
        const sum = createHash('sha256').update(span.subarray(a, b)).digest('hex');
        if (sum !== p.sha256[k]) {
          const at = p.byteOffset + spanStart + a;
          throw mismatch(`${this.path(p.file)} is corrupt: bytes ${at} to ${at + b - a} (chunk ${k} of entry '${name}', ` +
            `elements from ${p.offset + k * perChunk}) do not match the manifest's sha256`, this.rank);
        }
      }
      if (!direct) out.set(span.subarray(wanted - spanStart, wantedEnd - spanStart), (lo - begin) * elem);
    }
  }

  async close(): Promise<void> {
    for (const fh of this.open.values()) await fh.close().catch(() => undefined);
  }

  private path(file: number): string {
    return path.join(this.stepDir, this.m.files[file]?.name ?? `(file ${file})`);
  }

  private async handle(file: number): Promise<fs.promises.FileHandle> {
    const have = this.open.get(file);
    if (have) return have;
    const f = this.m.files[file];
    if (!f || typeof f.name !== 'string' || f.name.includes('/')) throw mismatch(`${path.join(this.stepDir, MANIFEST)} names no file ${file}: the manifest is corrupt`, this.rank);
    let fh: fs.promises.FileHandle;
    try {
      fh = await fs.promises.open(this.path(file), 'r');
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      throw mismatch(`${this.path(file)} ${code === 'ENOENT' ? 'is missing' : `cannot be read (${code ?? (e as Error).message})`}: ` +
        `the manifest names it as rank ${file}'s file of step ${this.m.step}`, this.rank);
    }
    this.open.set(file, fh);
    const { size } = await fh.stat();
    if (size !== f.bytes) {
      throw mismatch(`${this.path(file)} is ${size < f.bytes ? 'truncated' : 'longer than written'}: it has ${size} bytes, the manifest says ${f.bytes}`, this.rank);
    }
    return fh;
  }

  private async readAt(file: number, fh: fs.promises.FileHandle, into: Uint8Array, position: number): Promise<void> {
    for (let done = 0; done < into.byteLength;) {
      const n = Math.min(IO_BYTES, into.byteLength - done);
      const { bytesRead } = await fh.read(into, done, n, position + done);
      if (bytesRead === 0) throw mismatch(`${this.path(file)} is truncated: it ends before byte ${position + into.byteLength}`, this.rank);
      done += bytesRead;
    }
  }
}
