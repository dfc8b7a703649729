// What every `hora` command does with its command line: a mistake is a UsageError naming the flag and
// the value received (printed with the usage hint, exit status 2), and --help prints the usage. Shared by
// `hora run` (run-args.ts) and `hora rendezvous` (rendezvous.ts).

/** A command-line mistake: printed with the usage hint, exit status 2. */
export class UsageError extends Error {
  readonly code = 'ERR_INVALID_ARGUMENT';
  readonly exitCode = 2;
  constructor(
    readonly flag: string,
    readonly value: string | undefined,
    expected: string,
  ) {
    super(value === undefined ? `${flag}: ${expected}` : `${flag} ${JSON.stringify(value)} is invalid: expected ${expected}`);
    this.name = 'UsageError';
  }
}

/** The whole number >= 1 given for `flag` (a count of processes), undefined when not given. Throws UsageError. */
export function countFlag(values: Map<string, string>, flag: string): number | undefined {
  const text = values.get(flag);
  if (text === undefined) return undefined;
  if (!/^\d+$/.test(text.trim()) || Number(text) < 1 || !Number.isSafeInteger(Number(text))) {
    throw new UsageError(flag, text, 'a whole number of processes >= 1');
  }
  return Number(text);
}

/**
 * The options of `hora <command>` from parse(); or, having written the help or the usage error, the exit
 * status (0 for --help, 2 for a UsageError).
 */
export function parseCommand<T>(command: string, usage: string, parse: () => T | 'help'): T | number {
  let opts: T | 'help';
  try {
    opts = parse();
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`hora ${command}: ${e.message}\nRun 'hora ${command} --help' for usage.\n`);
      return 2;
    }
    throw e;
  }
  if (opts === 'help') {
    process.stdout.write(usage);
    return 0;
  }
  return opts;
}
