// Host discovery for elastic jobs (hora run --min-np --host-discovery-script S).
//
// The script prints the hosts that may run workers now, one "host[:slots]" a line (slots default 1;
// blank lines and "#" comments are skipped), and exits 0. hora run runs it once before anything starts,
// where any fault is a usage error, and then every DISCOVERY_INTERVAL_MS while the job runs, where a
// fault keeps the last good answer and is reported with the script's stderr.

import * as child_process from 'node:child_process';
import * as fs from 'node:fs';

/** One host as the script listed it. */
export interface DiscoveredHost {
  host: string;
  slots: number;
}

/** How often a running job asks the script again. */
export const DISCOVERY_INTERVAL_MS = 1000;
/** How long one run of the script may take before it counts as failed. */
export const DISCOVERY_TIMEOUT_MS = 10_000;
/** Most output read from one run of the script. */
const MAX_OUTPUT_BYTES = 1 << 20;

// The same names -H takes: [user@]host of letters, digits, ".", "-", "_".
const HOST_PATTERN = /^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9_][A-Za-z0-9._-]*$/;

/** A fault in the script or its output: what was expected, what was received, and where. */
export class DiscoveryError extends Error {
  constructor(
    /** Where: the script, or "the script's line N". */
    readonly where: string,
    readonly received: string | undefined,
    readonly expected: string,
  ) {
    super(received === undefined ? `${where}: ${expected}` : `${where} ${JSON.stringify(received)} is invalid: expected ${expected}`);
    this.name = 'DiscoveryError';
  }
}

/** Parses the script's output; a host listed twice has its slots added up. Throws DiscoveryError naming the line. */
export function parseDiscoveryOutput(text: string, script: string): DiscoveredHost[] {
  const slots = new Map<string, number>();
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') return;
    const m = /^([^\s:]+)(?::(\d+))?$/.exec(line);
    const where = `--host-discovery-script ${script} output line ${index + 1}`;
    if (!m) throw new DiscoveryError(where, raw.trim(), '"host" or "host:slots", e.g. "node1:4"');
    if (!HOST_PATTERN.test(m[1])) throw new DiscoveryError(where, raw.trim(), 'a host name of letters, digits, ".", "-", "_" (optionally user@host)');
    const n = m[2] === undefined ? 1 : Number(m[2]);
    if (!Number.isSafeInteger(n) || n < 1) throw new DiscoveryError(where, raw.trim(), `at least 1 slot for ${m[1]}`);
    slots.set(m[1], (slots.get(m[1]) ?? 0) + n);
  });
  return [...slots].map(([host, n]) => ({ host, slots: n }));
}

/** Refuses a script that is not an executable file, before it is run. */
export function checkDiscoveryScript(script: string): void {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(script);
  } catch (e) {
    throw new DiscoveryError('--host-discovery-script', script, `an executable file (${(e as Error).message})`);
  }
  if (!stat.isFile()) throw new DiscoveryError('--host-discovery-script', script, 'an executable file, not a directory or device');
  try {
    fs.accessSync(script, fs.constants.X_OK);
  } catch {
    throw new DiscoveryError('--host-discovery-script', script, 'an executable file (it is not executable: chmod +x it)');
  }
}

// What a run of the script gave: its hosts, or why it failed with the tail of its stderr.
function interpret(script: string, status: number | null, signal: string | null, error: Error | undefined, stdout: string, stderr: string): DiscoveredHost[] {
  const tail = stderr.trim().split('\n').slice(-5).join(' | ');
  const said = tail === '' ? '' : `; its stderr: ${tail}`;
  const where = `--host-discovery-script ${script}`;
  if (error && (error as NodeJS.ErrnoException).code === 'ETIMEDOUT') {
    throw new DiscoveryError(where, undefined, `did not finish within ${DISCOVERY_TIMEOUT_MS / 1000} s and was killed${said}`);
  }
  if (error) throw new DiscoveryError(where, undefined, `could not be run: ${error.message}${said}`);
  if (signal !== null) throw new DiscoveryError(where, undefined, `was killed by ${signal}; it must exit 0${said}`);
  if (status !== 0) throw new DiscoveryError(where, undefined, `exited with ${status}; it must exit 0 after printing "host:slots" lines${said}`);
  const hosts = parseDiscoveryOutput(stdout, script);
  if (hosts.length === 0) throw new DiscoveryError(where, undefined, `printed no host; it must print at least one "host:slots" line${said}`);
  return hosts;
}

/** Runs the script and waits: for the check before a job starts. Throws DiscoveryError. */
export function discoverHostsSync(script: string): DiscoveredHost[] {
  checkDiscoveryScript(script);
  const r = child_process.spawnSync(script, [], {
    encoding: 'utf8', timeout: DISCOVERY_TIMEOUT_MS, killSignal: 'SIGKILL', maxBuffer: MAX_OUTPUT_BYTES, stdio: ['ignore', 'pipe', 'pipe'],
  });
  return interpret(script, r.status, r.signal, r.error, r.stdout ?? '', r.stderr ?? '');
}

/** Runs the script without blocking the launcher. Rejects with DiscoveryError. */
export function discoverHosts(script: string): Promise<DiscoveredHost[]> {
  return new Promise((resolve, reject) => {
    child_process.execFile(script, [], {
      encoding: 'utf8', timeout: DISCOVERY_TIMEOUT_MS, killSignal: 'SIGKILL', maxBuffer: MAX_OUTPUT_BYTES,
    }, (error, stdout, stderr) => {
      try {
        // execFile reports a nonzero exit and a kill through `error`; pull them apart as spawnSync does.
        const e = error as (child_process.ExecFileException & { code?: number | string }) | null;
        const timedOut = e?.killed === true && e.signal === 'SIGKILL';
        const status = e === null ? 0 : typeof e.code === 'number' ? e.code : null;
        const spawnError = e !== null && typeof e.code === 'string' ? e : timedOut ? Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' }) : undefined;
        const signal = !timedOut && e?.signal ? e.signal : null;
        resolve(interpret(script, status, signal, spawnError, stdout, stderr));
      } catch (err) {
        reject(err);
      }
    });
  });
}
