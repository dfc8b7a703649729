/**
 * hora.checkpoint.save (ts/checkpoint.ts says how a save works and why a crash leaves the previous step
 * whole): the ranks' plans and their agreement, this rank's file, the manifest and the commit by rank 0.
 */
import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { dtypeOf } from './arguments';
import { HoraError, invalidArgument, ioError, knownOptions, checkOptionKeys } from './errors';
import { DTYPE_NAMES } from './native';
import { allgatherObject, broadcastObject } from './hora';
import type { DType, Tensor } from './types';
import { current } from './world';
import { type ErrorInfo, agreedFailure, dirOf, errorInfo, stepOf } from './checkpoint-errors';
import { CHECKSUM, CHUNK_BYTES, FORMAT, IO_BYTES, MANIFEST, type Manifest, type ManifestEntry, VERSION, bytesView, chunkChecksum } from './checkpoint-manifest';
import { LATEST, probePath, prune, readProbe, removeQuietly, syncDir, writeDurably, writeProbe } from './checkpoint-dir';

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

const SAVE_OPTIONS = knownOptions<CheckpointSaveOptions>({ step: true, keep: true });
const SHARD_KEYS = ['data', 'dtype', 'globalLength', 'offset'];

/** One entry's part on one rank, as the first collective of a save shares it. */
interface PartPlan { name: string; dtype: DType; sharded: boolean; globalLength: number; offset: number; length: number }
interface SavePlan { error: ErrorInfo | null; step: number; keep: number; parts: PartPlan[]; token: string }

/** Where a range landed in a rank's file. */
interface WrittenPart { name: string; byteOffset: number; checksums: string[] }
interface WriteResult { error: ErrorInfo | null; file: string; bytes: number; parts: WrittenPart[] }

/**
 * Saves `entries` as step `options.step` of the checkpoint in `dir`; every rank calls it with the same
 * names, dtypes, global lengths, step and keep. Resolves once the step is durable and `dir/latest` names
 * it; rejects on every rank (ERR_INVALID_ARGUMENT, ERR_MISMATCH) when any rank's call is wrong, or (ERR_IO)
 * when a rank cannot write, leaving the previous checkpoint as it was.
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
        const checksums: string[] = [];
        written.push({ name: part.name, byteOffset: at, checksums });
        // Each piece's checksums are computed on this thread while a libuv thread writes the piece.
        for (let done = 0; done < bytes.byteLength;) {
          const n = Math.min(IO_BYTES, bytes.byteLength - done);
          const writing = writeAll(fh, bytes.subarray(done, done + n), at + done);
          checksums.push(...chunkChecksums(bytes.subarray(done, done + n)));
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
    throw ioError('checkpoint.save', 'write', temp, e, rank);
  }
  return { error: null, file, bytes: at, parts: written };
}

async function writeAll(fh: fs.promises.FileHandle, bytes: Uint8Array, position: number): Promise<void> {
  for (let done = 0; done < bytes.byteLength;) {
    const { bytesWritten } = await fh.write(bytes, done, bytes.byteLength - done, position + done);
    done += bytesWritten;
  }
}

/** The checksum of each CHUNK_BYTES of `bytes` (which starts at a chunk boundary). */
function chunkChecksums(bytes: Uint8Array): string[] {
  const out: string[] = [];
  for (let i = 0; i < bytes.byteLength; i += CHUNK_BYTES) {
    out.push(chunkChecksum(CHECKSUM, bytes.subarray(i, Math.min(i + CHUNK_BYTES, bytes.byteLength))));
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
      parts.push({ file: q, offset: part.offset, length: part.length, byteOffset: at.byteOffset, checksums: at.checksums });
    }
    parts.sort((a, b) => a.offset - b.offset);
    entries[p.name] = { dtype: p.dtype, length: p.globalLength, sharded: p.sharded, parts };
  }
  return {
    format: FORMAT, version: VERSION, step, worldSize: plans.length, token, chunkBytes: CHUNK_BYTES, checksum: CHECKSUM, byteOrder: 'little',
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
