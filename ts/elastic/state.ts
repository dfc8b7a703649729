/**
 * The state an elastic job rolls back to and hands to new workers.
 *
 * A State holds named fields of two kinds: JSON values (numbers, strings, booleans, null, and arrays and
 * plain objects of them) and typed arrays. commit() copies them in memory; restore() goes back to that
 * copy; sync(root) makes every rank's fields and rollback point equal to root's. Typed arrays are copied
 * into buffers kept from one commit to the next, so a commit costs one memory copy of the arrays and no
 * allocation while their lengths stay the same, and restore() writes back into the arrays the script
 * holds, so references to them stay valid.
 */
import * as path from 'node:path';
import { latestStep, load as loadCheckpoint, save as saveCheckpoint } from '../checkpoint';
import type { CheckpointEntry, LoadedShard } from '../checkpoint';
import { HoraError, checkOptionKeys, describeValue, knownOptions } from '../errors';
import { allgatherObject, broadcast, current } from '../hora';
import { KeptArray as TypedArray, broadcastHeader, differsFromRoot, keepCopy, ranksThatDiffer } from './sync';

const TYPED_ARRAYS: Record<string, new (n: number) => TypedArray> = {
  Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
  Float32Array, Float64Array, BigInt64Array, BigUint64Array,
};

/** Called at the end of every commit(); elastic.run installs the membership check here. */
type CommitHook = (state: State) => Promise<void>;
let commitHook: CommitHook | null = null;

/** @internal Installed by elastic.run for the length of a run. */
export function setCommitHook(hook: CommitHook | null): void {
  commitHook = hook;
}

type ResetCallback = () => void | Promise<void>;

interface Field {
  kind: 'json' | 'typed';
  value: unknown;
  /** The committed copy: a deep copy of a JSON value, or a typed array of the same type. */
  saved: unknown;
}

const RESERVED = new Set(['commit', 'restore', 'sync', 'onReset', 'fieldNames', 'runResetCallbacks', 'resumeFromCheckpoint', 'reloadCheckpoint',
  'commitCount', 'diskEntries', 'loadDiskEntries', 'constructor']);

/** The second argument of new State(fields, options). */
export interface StateOptions {
  /** Commits also go to disk (hora.checkpoint.save) every `everySteps` commits, into `dir`; keep as for save (default: all). */
  checkpoint?: { dir: string; everySteps: number; keep?: number };
}

const STATE_OPTIONS = knownOptions<StateOptions>({ checkpoint: true }, '');
const CHECKPOINT_OPTIONS = knownOptions<Required<StateOptions>['checkpoint']>({ dir: true, everySteps: true, keep: true }, '');
/** The entry that holds the JSON fields, the typed fields' types and lengths, and the commit count. */
const STATE_ENTRY = 'state';
const FIELD_ENTRY = 'field/';

interface CheckpointHeader {
  commits: number;
  json: Record<string, unknown>;
  typed: Array<[name: string, type: string, length: number]>;
}

function checkpointOptionsOf(options: unknown): Required<StateOptions>['checkpoint'] | null {
  const bad = (key: string, expected: string, v: unknown) => new HoraError('ERR_INVALID_ARGUMENT',
    `hora.elastic.State: argument '${key}' must be ${expected}; received ${describeValue(v)}`);
  if (options === undefined) return null;
  if (options === null || typeof options !== 'object') throw bad('options', 'an object', options);
  checkOptionKeys('hora.elastic.State', options, STATE_OPTIONS);
  const c = (options as StateOptions).checkpoint;
  if (c === undefined) return null;
  if (c === null || typeof c !== 'object') throw bad('options.checkpoint', 'an object {dir, everySteps, keep?}', c);
  for (const k of Object.keys(c)) {
    if (!CHECKPOINT_OPTIONS.keys.includes(k)) throw bad(`options.checkpoint.${k}`, `absent (options.checkpoint takes ${CHECKPOINT_OPTIONS.keys.join(', ')})`, (c as Record<string, unknown>)[k]);
  }
  if (typeof c.dir !== 'string' || c.dir === '') throw bad('options.checkpoint.dir', 'a non-empty string (a directory path)', c.dir);
  if (typeof c.everySteps !== 'number' || !Number.isSafeInteger(c.everySteps) || c.everySteps < 1) {
    throw bad('options.checkpoint.everySteps', 'an integer >= 1 (commits between checkpoints)', c.everySteps);
  }
  if (c.keep !== undefined && (typeof c.keep !== 'number' || !Number.isSafeInteger(c.keep) || c.keep < 1)) throw bad('options.checkpoint.keep', 'an integer >= 1', c.keep);
  return { dir: c.dir, everySteps: c.everySteps, keep: c.keep };
}

function isTypedArray(v: unknown): v is TypedArray {
  return ArrayBuffer.isView(v) && !(v instanceof DataView) && (v as TypedArray).constructor.name in TYPED_ARRAYS;
}

/** Why `v` is not a JSON value that survives a round trip unchanged, or null when it is. */
function notJson(v: unknown, where: string, seen: Set<object>): string | null {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return null;
  if (typeof v === 'number') return Number.isFinite(v) ? null : `${where} is ${v}, which JSON cannot hold`;
  if (typeof v !== 'object') return `${where} is ${describeValue(v)}`;
  if (seen.has(v)) return `${where} refers back to itself`;
  const proto = Object.getPrototypeOf(v);
  if (!Array.isArray(v) && proto !== Object.prototype && proto !== null) return `${where} is ${describeValue(v)}`;
  seen.add(v);
  try {
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const why = notJson(v[i], `${where}[${i}]`, seen);
        if (why) return why;
      }
      return null;
    }
    for (const [k, x] of Object.entries(v)) {
      const why = notJson(x, `${where}.${k}`, seen);
      if (why) return why;
    }
    return null;
  } finally {
    seen.delete(v);
  }
}

function checkField(name: string, value: unknown, what: string): 'json' | 'typed' {
  if (isTypedArray(value)) return 'typed';
  const why = notJson(value, name, new Set());
  if (why === null) return 'json';
  throw new HoraError('ERR_INVALID_ARGUMENT',
    `hora.elastic.State: ${what} '${name}' must be a JSON value (numbers, strings, booleans, null, arrays and ` +
    `plain objects of them) or a typed array; ${why}`);
}

function copyJson(v: unknown): unknown {
  return v === null || typeof v !== 'object' ? v : JSON.parse(JSON.stringify(v));
}

function bytesOf(a: TypedArray): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** What root tells the others before the arrays' bytes: JSON values, and the arrays' types and lengths. */
interface SyncHeader {
  json: Record<string, unknown>;
  typed: Array<[name: string, type: string, length: number]>;
  /** Root's count of commits, so that every rank reaches options.checkpoint's next save at the same commit. */
  commits: number;
}

export class State {
  /** The fields, read and written as properties (`state.step`, `state.w`). */
  [field: string]: unknown;

  #fields = new Map<string, Field>();
  #resetCallbacks: ResetCallback[] = [];
  #checkpoint: Required<StateOptions>['checkpoint'] | null;
  /** Commits since the job began (carried over by a checkpoint and by sync): the step number of the checkpoints. */
  #commits = 0;
  /** Whether resumeFromCheckpoint has run: the job's start loads from disk once, never a later run(). */
  #resumed = false;

  constructor(fields: Record<string, unknown>, options?: StateOptions) {
    this.#checkpoint = checkpointOptionsOf(options);
    if (fields === null || typeof fields !== 'object' || Array.isArray(fields)) {
      throw new HoraError('ERR_INVALID_ARGUMENT',
        `hora.elastic.State: argument 'fields' must be an object of named values; received ${describeValue(fields)}`);
    }
    for (const [name, value] of Object.entries(fields)) {
      if (RESERVED.has(name)) {
        throw new HoraError('ERR_INVALID_ARGUMENT', `hora.elastic.State: field '${name}' has the name of a State method; rename it`);
      }
      const kind = checkField(name, value, 'field');
      this.#fields.set(name, { kind, value: kind === 'json' ? copyJson(value) : value, saved: undefined });
      Object.defineProperty(this, name, {
        enumerable: true,
        get: () => this.#fields.get(name)!.value,
        set: (v: unknown) => this.#assign(name, v),
      });
    }
    // The values given here are the first rollback point.
    this.#save();
  }

  /** The names of the fields, in the order they were given. */
  fieldNames(): string[] {
    return [...this.#fields.keys()];
  }

  #assign(name: string, v: unknown): void {
    const f = this.#fields.get(name)!;
    const kind = checkField(name, v, 'field');
    if (kind !== f.kind) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `hora.elastic.State: field '${name}' holds ${f.kind === 'typed' ?
        'a typed array' : 'a JSON value'} and cannot become ${describeValue(v)}`);
    }
    if (kind === 'typed' && (v as TypedArray).constructor !== (f.value as TypedArray).constructor) {
      throw new HoraError('ERR_INVALID_ARGUMENT', `hora.elastic.State: field '${name}' holds a ` +
        `${(f.value as TypedArray).constructor.name}; received ${describeValue(v)}`);
    }
    f.value = v;
  }

  #save(): void {
    for (const [name, f] of this.#fields) {
      if (f.kind === 'json') {
        // A JSON value may have been changed in place (state.cfg.lr = 0.1) since it was assigned.
        checkField(name, f.value, 'field');
        f.saved = copyJson(f.value);
        continue;
      }
      f.saved = keepCopy(f.value as TypedArray, f.saved as TypedArray | undefined);
    }
  }

  /**
   * Makes the fields' current values the rollback point. In an elastic run this is also where every rank
   * learns that workers are joining: the world then re-forms right after this commit, without a rollback.
   *
   * Commit a step's update together with the counter that says it is done: `state.step++` first, then
   * commit. A commit taken before the counter moves (in the body of `for (...; state.step++)`) holds step
   * N's update with `step` still N, and step N runs again after a rollback or a join (docs/elastic.md).
   */
  async commit(): Promise<void> {
    this.#save();
    this.#commits++;
    const c = this.#checkpoint;
    if (c && this.#commits % c.everySteps === 0) await this.#saveToDisk(c);
    if (commitHook) await commitHook(this);
  }

  /** Writes the committed copy (every field is the same on every rank: replicated entries, rank 0 writes them). */
  async #saveToDisk(c: Required<StateOptions>['checkpoint']): Promise<void> {
    const header: CheckpointHeader = { commits: this.#commits, json: {}, typed: [] };
    const entries: Record<string, CheckpointEntry> = {};
    for (const [name, f] of this.#fields) {
      if (f.kind === 'json') {
        header.json[name] = f.saved;
        continue;
      }
      const a = f.saved as TypedArray;
      header.typed.push([name, a.constructor.name, a.length]);
      entries[FIELD_ENTRY + name] = bytesOf(a);
    }
    // A subclass's own committed copy (an adapter's model and optimizer), under names of its own.
    for (const [name, e] of Object.entries(await this.diskEntries())) entries[name] = e;
    entries[STATE_ENTRY] = new Uint8Array(Buffer.from(JSON.stringify(header)));
    await saveCheckpoint(c.dir, entries, c.keep === undefined ? { step: this.#commits } : { step: this.#commits, keep: c.keep });
  }

  /**
   * @internal For hora.elastic.run, when the job starts: every rank loads the last complete checkpoint of
   * options.checkpoint.dir, if there is one, into the fields, and makes it the rollback point. Resolves to
   * the commit count it holds, or null (no checkpoint option, or none on disk yet).
   */
  async resumeFromCheckpoint(): Promise<number | null> {
    const c = this.#checkpoint;
    if (!c || this.#resumed) return null;
    this.#resumed = true;
    return this.#loadFromDisk(c);
  }

  /**
   * @internal For an adapter whose committed copy is sharded (hora/tfjs ElasticState with a sharded
   * optimizer), when a lost rank's part exists nowhere else: every rank loads the last complete checkpoint,
   * fields and the subclass's entries together, and makes it the rollback point. Null when there is no
   * checkpoint option or none on disk yet.
   */
  async reloadCheckpoint(): Promise<number | null> {
    const c = this.#checkpoint;
    return c ? this.#loadFromDisk(c) : null;
  }

  /** @internal Commits since the job began, as the checkpoints number them (synced from root, loaded from disk). */
  get commitCount(): number {
    return this.#commits;
  }

  /** @internal A subclass's committed copy as checkpoint entries (replicated or sharded), saved beside the fields. */
  protected async diskEntries(): Promise<Record<string, CheckpointEntry>> {
    return {};
  }

  /**
   * @internal Takes back what diskEntries() saved (every entry of the checkpoint is given; sharded ones as
   * this rank's part at the current world size); called once the fields are known to fit, before they are written.
   */
  protected async loadDiskEntries(_entries: Record<string, CheckpointEntry | LoadedShard>, _step: number): Promise<void> {
    return undefined;
  }

  async #loadFromDisk(c: Required<StateOptions>['checkpoint']): Promise<number | null> {
    // Every rank reads `latest` itself; load then agrees that all loaded the same step.
    const step = await latestStep(c.dir);
    const seen = await allgatherObject(step, { name: 'elastic.State checkpoint' });
    const newest = seen.find((s) => s !== null);
    if (newest === undefined || newest === null) return null;
    // Ranks that see no checkpoint, or another step, fail the load with the file they cannot read.
    const loaded = await loadCheckpoint(c.dir, { step: newest });
    const manifest = path.join(path.resolve(c.dir), `step-${loaded.step}`, 'manifest.json');
    const other = (why: string) => new HoraError('ERR_MISMATCH', `hora.elastic.State: ${manifest} is a checkpoint of another State: ${why}`, current('elastic.State').rank);
    const bytes = loaded.entries[STATE_ENTRY];
    if (!(bytes instanceof Uint8Array)) throw other(`it has no '${STATE_ENTRY}' entry`);
    const header = JSON.parse(Buffer.from(bytes).toString('utf8')) as CheckpointHeader;
    // Every check before the first write, so that a wrong checkpoint changes nothing.
    const saved = new Map<string, string>([...Object.keys(header.json).map((n): [string, string] => [n, 'a JSON value']),
      ...header.typed.map(([n, type]): [string, string] => [n, `a ${type}`])]);
    for (const [name, f] of this.#fields) {
      const mine = f.kind === 'json' ? 'a JSON value' : `a ${(f.value as TypedArray).constructor.name}`;
      if (!saved.has(name)) throw other(`it has no field '${name}'`);
      if (saved.get(name) !== mine) throw other(`field '${name}' is ${saved.get(name)} there, ${mine} here`);
    }
    for (const name of saved.keys()) if (!this.#fields.has(name)) throw other(`it has a field '${name}' this State lacks`);
    await this.loadDiskEntries(loaded.entries, loaded.step);
    for (const [name, value] of Object.entries(header.json)) this.#fields.get(name)!.value = value;
    for (const [name, type, length] of header.typed) {
      const f = this.#fields.get(name)!;
      const src = loaded.entries[FIELD_ENTRY + name] as Uint8Array;
      if ((f.value as TypedArray).length !== length) f.value = new TYPED_ARRAYS[type](length);
      bytesOf(f.value as TypedArray).set(src);
    }
    this.#commits = header.commits;
    this.#save();
    return header.commits;
  }

  /** Goes back to the last commit. Typed arrays of an unchanged length are written back in place. */
  restore(): void {
    for (const f of this.#fields.values()) {
      if (f.kind === 'json') {
        f.value = copyJson(f.saved);
        continue;
      }
      const a = f.value as TypedArray;
      const s = f.saved as TypedArray;
      if (a.length === s.length) (a as unknown as { set(x: ArrayLike<unknown>): void }).set(s as ArrayLike<unknown>);
      else f.value = s.slice();
    }
  }

  /**
   * Gives every rank root's fields (typed arrays of another length are replaced by ones of root's length)
   * and makes them the rollback point everywhere. Every rank must call it with the same root; a rank whose
   * fields differ from root's in names or array types fails with ERR_MISMATCH, as do the others.
   */
  async sync(root = 0): Promise<void> {
    const w = current('elastic.State.sync');
    if (!Number.isSafeInteger(root) || root < 0 || root >= w.size) {
      throw new HoraError('ERR_INVALID_ARGUMENT',
        `hora.elastic.State.sync: argument 'root' must be a rank, 0 <= root < ${w.size}; received ${describeValue(root)}`, w.rank);
    }
    if (w.size > 1) {
      const header = await broadcastHeader(() => this.#header(), root, w.rank === root, 'elastic.State.sync header');
      await this.#checkHeader(header, root);
      const arrays: Array<[string, TypedArray]> = [];
      for (const [name, type, length] of header.typed) {
        const f = this.#fields.get(name)!;
        if ((f.value as TypedArray).length !== length) f.value = new TYPED_ARRAYS[type](length);
        if (length > 0) arrays.push([name, f.value as TypedArray]);
      }
      if (w.rank !== root) for (const [name, value] of Object.entries(header.json)) this.#fields.get(name)!.value = value;
      this.#commits = header.commits;
      // One name each: the broadcasts go in one batch, whose collectives must differ by name.
      await Promise.all(arrays.map(([name, a]) => broadcast(bytesOf(a), { root, inplace: true, name: `elastic.State.sync ${name}` })));
    }
    this.#save();
  }

  /** What root holds: its JSON values, and its arrays' types and lengths. */
  #header(): SyncHeader {
    const header: SyncHeader = { json: {}, typed: [], commits: this.#commits };
    for (const [name, f] of this.#fields) {
      if (f.kind === 'json') header.json[name] = f.value;
      else header.typed.push([name, (f.value as TypedArray).constructor.name, (f.value as TypedArray).length]);
    }
    return header;
  }

  /** Every rank learns whether all ranks' fields match root's, so that all fail together if not. */
  async #checkHeader(header: SyncHeader, root: number): Promise<void> {
    const theirs = new Map<string, string>();
    for (const name of Object.keys(header.json)) theirs.set(name, 'a JSON value');
    for (const [name, type] of header.typed) theirs.set(name, `a ${type}`);
    const ours = new Map<string, string>();
    for (const [name, f] of this.#fields) ours.set(name, f.kind === 'json' ? 'a JSON value' : `a ${(f.value as TypedArray).constructor.name}`);
    const diffs: string[] = [];
    for (const [name, what] of theirs) {
      const mine = ours.get(name);
      if (mine === undefined) diffs.push(`'${name}' (${what} on rank ${root}) is not a field here`);
      else if (mine !== what) diffs.push(`'${name}' is ${what} on rank ${root} but ${mine} here`);
    }
    for (const name of ours.keys()) if (!theirs.has(name)) diffs.push(`'${name}' is a field here but not on rank ${root}`);
    const bad = await ranksThatDiffer(diffs.length === 0, 'elastic.State.sync check');
    if (bad.length === 0) return;
    throw differsFromRoot('hora.elastic.State.sync', 'fields', 'differ', bad, root, diffs.join('; '), current('elastic.State.sync').rank);
  }

  /** Registers a callback run after each re-forming of the world, once the state is synced. */
  onReset(fn: ResetCallback): void {
    if (typeof fn !== 'function') {
      throw new HoraError('ERR_INVALID_ARGUMENT', `hora.elastic.State.onReset: argument 'fn' must be a function; received ${describeValue(fn)}`);
    }
    this.#resetCallbacks.push(fn);
  }

  /** @internal Runs the reset callbacks in order, each awaited. */
  async runResetCallbacks(): Promise<void> {
    for (const fn of this.#resetCallbacks) await fn();
  }
}
