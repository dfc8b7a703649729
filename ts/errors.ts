/** Errors that hora raises, with a code from a closed set (see ARCHITECTURE.md). */

export type HoraErrorCode =
  | 'ERR_TIMEOUT'
  | 'ERR_PEER_LOST'
  | 'ERR_MISMATCH'
  | 'ERR_INVALID_ARGUMENT'
  | 'ERR_NOT_INITIALIZED'
  | 'ERR_SHUTDOWN'
  | 'ERR_AUTH'
  | 'ERR_INTERNAL';

const CODES: ReadonlySet<string> = new Set([
  'ERR_TIMEOUT', 'ERR_PEER_LOST', 'ERR_MISMATCH', 'ERR_INVALID_ARGUMENT',
  'ERR_NOT_INITIALIZED', 'ERR_SHUTDOWN', 'ERR_AUTH', 'ERR_INTERNAL',
]);

export class HoraError extends Error {
  /** What went wrong, from a closed set. */
  readonly code: HoraErrorCode;
  /** The rank that raised the error (this process), or -1 before init. */
  readonly rank: number;
  /** The other rank involved, where one is known (-1 otherwise). */
  readonly peer: number;

  constructor(code: string, message: string, rank = -1, peer = -1) {
    super(message);
    this.name = 'HoraError';
    this.code = (CODES.has(code) ? code : 'ERR_INTERNAL') as HoraErrorCode;
    this.rank = rank;
    this.peer = peer;
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
