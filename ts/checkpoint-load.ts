/**
 * hora.checkpoint.load (ts/checkpoint.ts says how a load works): the options, this rank's part of each entry
 * at the current world size, read by byte ranges and checked chunk by chunk, and the agreement of the outcome.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { HoraError, describeValue, invalidArgument, ioError, knownOptions, checkOptionKeys } from './errors';
import { allgatherObject } from './hora';
import type { DType, Tensor } from './types';
import { current } from './world';
import { type ErrorInfo, agreedFailure, dirOf, errorInfo, mismatch, stepOf } from './checkpoint-errors';
import { DTYPES, DTYPE_LIST, IO_BYTES, MANIFEST, type Manifest, type ManifestEntry, arrayOf, bytesOf, bytesView, chunkChecksum, readManifest } from './checkpoint-manifest';
import { latestOf } from './checkpoint-dir';

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

const LOAD_OPTIONS = knownOptions<CheckpointLoadOptions>({ step: true, expect: true, ranges: true });

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
        if (chunkChecksum(this.m.checksum, span.subarray(a, b)) !== p.checksums[k]) {
          const at = p.byteOffset + spanStart + a;
          throw mismatch(`${this.path(p.file)} is corrupt: bytes ${at} to ${at + b - a} (chunk ${k} of entry '${name}', ` +
            `elements from ${p.offset + k * perChunk}) do not match the manifest's ${this.m.checksum}`, this.rank);
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
      // A missing file is a damaged checkpoint; any other failure to open it is the filesystem's.
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw ioError('checkpoint.load', 'open', this.path(file), e, this.rank);
      throw mismatch(`${this.path(file)} is missing: the manifest names it as rank ${file}'s file of step ${this.m.step}`, this.rank);
    }
    this.open.set(file, fh);
    const { size } = await fh.stat().catch((e) => {
      throw ioError('checkpoint.load', 'stat', this.path(file), e, this.rank);
    });
    if (size !== f.bytes) {
      throw mismatch(`${this.path(file)} is ${size < f.bytes ? 'truncated' : 'longer than written'}: it has ${size} bytes, the manifest says ${f.bytes}`, this.rank);
    }
    return fh;
  }

  private async readAt(file: number, fh: fs.promises.FileHandle, into: Uint8Array, position: number): Promise<void> {
    for (let done = 0; done < into.byteLength;) {
      const n = Math.min(IO_BYTES, into.byteLength - done);
      const { bytesRead } = await fh.read(into, done, n, position + done).catch((e) => {
        throw ioError('checkpoint.load', 'read', this.path(file), e, this.rank);
      });
      if (bytesRead === 0) throw mismatch(`${this.path(file)} is truncated: it ends before byte ${position + into.byteLength}`, this.rank);
      done += bytesRead;
    }
  }
}
