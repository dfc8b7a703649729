/** Errors that hora raises, with a code from a closed set (see docs/internals.md, "Errors"). */
import { CODE_NAMES } from './native';

/** The codes of ts/native.ts's table but 'OK'. */
export type HoraErrorCode = Exclude<(typeof CODE_NAMES)[number], 'OK'>;

const CODES: ReadonlySet<string> = new Set(CODE_NAMES.filter((c) => c !== 'OK'));

export class HoraError extends Error {
  /** What went wrong, from a closed set. */
  readonly code: HoraErrorCode;
  /** The rank that raised the error (this process), or -1 before init. */
  readonly rank: number;
  /** The other rank involved, where one is known (-1 otherwise). */
  readonly peer: number;
  /** ERR_IO: the operating system's code of the file operation that failed ('ENOSPC', 'EACCES', 'ENOTDIR', ...), as Node's fs error carried it. */
  readonly osCode?: string;
  /** ERR_IO: the file or directory it failed on. */
  readonly path?: string;

  constructor(code: string, message: string, rank = -1, peer = -1, io?: { osCode: string; path: string }) {
    super(message);
    this.name = 'HoraError';
    this.code = (CODES.has(code) ? code : 'ERR_INTERNAL') as HoraErrorCode;
    this.rank = rank;
    this.peer = peer;
    if (io) {
      this.osCode = io.osCode;
      this.path = io.path;
    }
  }
}

/**
 * A call site captured when a collective is submitted, so an error that the communication thread
 * reports later carries a stack that points at the user's line, not at the event loop.
 *
 * Capturing a stack costs 2-6 µs, more than a whole small collective on shared memory. An error that
 * wait() throws already has the caller's stack, so while a program waits with wait() the capture is
 * skipped (see Dispatcher.wantsCallSite); CallSite.none stands in and attach() leaves the stack alone.
 * Awaited collectives are captured within a budget (HORA_CALL_SITES, Dispatcher.callSite); one left out
 * gets CallSite.unsampled, whose attach() says so under the stack.
 */
export class CallSite {
  static readonly none = new CallSite();
  static readonly unsampled = new CallSite(undefined, true);
  stack?: string;
  constructor(skip?: Function, private readonly unsampled = false) {
    if (skip) Error.captureStackTrace(this, skip);
  }

  attach(err: HoraError): HoraError {
    const frames = this.stack ? this.stack.split('\n').slice(1).join('\n') : '';
    if (frames) err.stack = `${err.name} [${err.code}]: ${err.message}\n${frames}`;
    else if (this.unsampled) {
      err.stack = `${err.stack}\n    (the line that called this collective was not recorded: more than 4000 calls a second; ` +
        'HORA_CALL_SITES=all records every one)';
    }
    return err;
  }
}

export function invalidArgument(collective: string, argument: string, expected: string, received: unknown, rank = -1): HoraError {
  return new HoraError('ERR_INVALID_ARGUMENT',
    `hora.${collective}: argument '${argument}' must be ${expected}; received ${describeValue(received)}`, rank);
}

/**
 * ERR_IO for a file operation of `call` on `file` that failed with Node's fs error `e`: the message names the
 * rank, what it could not do, the file and the OS's code; the error carries the code (osCode) and the path
 * the system call failed on (Node's err.path: `file` itself or a directory on the way to it).
 */
export function ioError(call: string, what: string, file: string, e: unknown, rank = -1): HoraError {
  const err = e as NodeJS.ErrnoException;
  // Not a system call's error (no code such as 'ENOSPC'): a fault of hora's own, reported with its stack.
  if (typeof err?.code !== 'string') return new HoraError('ERR_INTERNAL', `hora.${call}: rank ${rank} failed to ${what} ${file}: ${err?.stack ?? String(e)}`, rank);
  const osCode = err.code;
  const detail = err.message ?? String(e);
  return new HoraError('ERR_IO', `hora.${call}: rank ${rank} could not ${what} ${file}: ${detail.startsWith(osCode) ? detail : `${osCode} ${detail}`}`, rank, -1,
    { osCode, path: typeof err?.path === 'string' ? err.path : file });
}

export function describeValue(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'undefined';
  if (typeof v === 'string') return `the string ${JSON.stringify(v.length > 40 ? v.slice(0, 40) + '...' : v)}`;
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint') return `${typeof v} ${String(v)}`;
  if (ArrayBuffer.isView(v)) return `${v.constructor.name}(${(v as { length?: number }).length ?? v.byteLength})`;
  if (Array.isArray(v)) return `an Array of length ${v.length}`;
  if (typeof v === 'function') return 'a function';
  const ctor = (v as object).constructor;
  return ctor && ctor.name ? `an object of type ${ctor.name}` : 'an object';
}

/**
 * The keys an options object of one call may have: made once per call with knownOptions(), checked on
 * every call with checkOptionKeys().
 */
export interface KnownOptions {
  /** Put before the call's name in messages: 'hora.' for the core API, '' for the adapters, which name themselves. */
  readonly namespace: string;
  /** An array, not a Set: a handful of comparisons of interned strings costs a third of Set.has. */
  readonly keys: readonly string[];
}

/**
 * The options of a call whose options type is T: every key of T, each given as `key: true`, so that the
 * compiler says when the list and the type differ.
 */
export function knownOptions<T>(keys: Record<keyof Required<T>, true>, namespace = 'hora.'): KnownOptions {
  // Not frozen: V8 reads a frozen array's elements on a slower path, which tripled the check's cost.
  return { namespace, keys: Object.keys(keys) };
}

/**
 * Throws ERR_INVALID_ARGUMENT for an own key of `options` that `known` lacks, naming it, listing the
 * options there are, and suggesting the likely one: a misspelt option, or another library's spelling
 * (Horovod's average=False), would otherwise be ignored without a word and the call run as if it were
 * absent. On the path of every collective: a for-in over the object's keys and a set lookup each, and
 * nothing allocated unless it throws.
 */
export function checkOptionKeys(call: string, options: object, known: KnownOptions, rank = -1): void {
  const keys = known.keys;
  next: for (const key in options) {
    for (let i = 0; i < keys.length; i++) if (keys[i] === key) continue next;
    if (Object.prototype.hasOwnProperty.call(options, key)) throw unknownOption(call, key, (options as Record<string, unknown>)[key], known, rank);
  }
}

function unknownOption(call: string, key: string, value: unknown, known: KnownOptions, rank: number): HoraError {
  const label = known.namespace + call;
  const hint = optionHint(key, value, known.keys);
  const takes = known.keys.length > 0 ? `${label} takes ${known.keys.join(', ')}` : `${label} takes no options`;
  const said = hint === undefined ? '.' : hint.endsWith('?') ? `: ${hint}` : `: ${hint}.`;
  return new HoraError('ERR_INVALID_ARGUMENT',
    `${label}: argument 'options.${key}' is not an option (received ${describeValue(value)})${said} ${takes}`, rank);
}

/** A key as the hints compare it: lower case, without '_' and '-' (Horovod's and torch's snake_case). */
function normalized(key: string): string {
  return key.toLowerCase().replace(/[_-]/g, '');
}

type Hint = (value: unknown, keys: readonly string[]) => string | undefined;

const useGroup: Hint = () => 'run it in a process group instead: const g = await hora.newGroup(ranks), then g.allreduce(x, ...) ' +
  'and the other collectives of g';
const useWork: Hint = () => 'every hora call returns a Work at once: await it, or call wait() to block';
const renamed = (to: string): Hint => (_v, keys) => (keys.includes(to) ? `did you mean '${to}'?` : undefined);

/** Other libraries' spellings (Horovod, torch.distributed), by normalized key. */
const FOREIGN_OPTIONS: Record<string, Hint> = {
  average: (v, keys) => {
    if (!keys.includes('op')) return undefined;
    if (v === true) return "for Horovod's average=True use op: 'avg'";
    if (v === false) return "for Horovod's average=False use op: 'sum'";
    return "Horovod's average is op here: op: 'avg' or op: 'sum'";
  },
  compression: (_v, keys) => (keys.includes('op') && !keys.includes('compression')
    ? 'a collective sends its array\'s own dtype: for half the bytes pass float16 or bfloat16 data (a Uint16Array with dtype), ' +
      "or use DistributedOptimizer(optimizer, {compression: 'fp16'}) from hora/tfjs"
    : undefined),
  processset: useGroup,
  processgroup: useGroup,
  group: useGroup,
  pg: useGroup,
  asyncop: useWork,
  async: useWork,
  blocking: useWork,
  rootrank: renamed('root'),
  src: (v, keys) => renamed('from')(v, keys) ?? renamed('root')(v, keys),
  dst: (v, keys) => renamed('to')(v, keys) ?? renamed('root')(v, keys),
  tensorname: renamed('name'),
  reduceop: renamed('op'),
  inputsplitsizes: renamed('splits'),
  outputsplitsizes: renamed('recvSplits'),
  timeout: (_v, keys) => (keys.includes('timeoutSeconds') ? 'use timeoutSeconds (seconds, for every collective)' : undefined),
  fusionthreshold: (_v, keys) => (keys.includes('fusionMB') ? 'use fusionMB (MiB; 0 turns fusion off)' : undefined),
  gradientpredividefactor: (_v, keys) => {
    if (keys.includes('prescaleFactor')) return "for Horovod's gradient_predivide_factor f use prescaleFactor: 1 / f and postscaleFactor: f with op: 'avg'";
    if (keys.includes('backwardPassesPerStep')) return 'DistributedOptimizer averages with one division by the world size, after the sum; it has no predivide';
    return undefined;
  },
};

function optionHint(key: string, value: unknown, keys: readonly string[]): string | undefined {
  const n = normalized(key);
  for (const k of keys) if (normalized(k) === n) return `did you mean '${k}'?`;
  const foreign = Object.prototype.hasOwnProperty.call(FOREIGN_OPTIONS, n) ? FOREIGN_OPTIONS[n](value, keys) : undefined;
  if (foreign) return foreign;
  // A typo: the nearest key within two edits (one for short keys), or a key this one begins.
  let best: string | undefined;
  let bestDistance = n.length <= 4 ? 2 : 3;
  for (const k of keys) {
    const d = editDistance(n, normalized(k));
    if (d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  if (best === undefined && n.length >= 4) for (const k of keys) if (normalized(k).startsWith(n)) return `did you mean '${k}'?`;
  return best === undefined ? undefined : `did you mean '${best}'?`;
}

/** Edit distance: insertions, deletions, substitutions and swaps of two neighbours ('tga' for 'tag'), one each. */
function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}
