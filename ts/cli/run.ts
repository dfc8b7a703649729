// `hora run`: start N workers as one job and supervise them.
//
// The launcher hosts the rendezvous server, gives each worker its HORA_*
// variables, prefixes their output with [rank], and ends the job as a whole:
// when one worker fails the others get an Abort at once, SIGTERM after a grace
// period and SIGKILL after another, and the launcher exits with the failed
// worker's code (128 + signal number when a signal killed it). Signals sent
// to the launcher are forwarded the same way.
//
// Workers are started through a Spawner. LocalSpawner starts them on this
// machine; an ssh spawner for remote hosts slots in behind the same interface
// (it must also choose a rendezvous address the remote hosts can reach).

import * as child_process from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { defaultHostId, HoraConfigError, isLoopback, Logger, makeLogger, readSettings, DebugLevel, DEBUG_LEVELS } from '../config';
import { RendezvousServer } from '../control/server';

// ---------------------------------------------------------------------------
// Arguments.

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

export interface HostSlots {
  /** Host name or address as written in -H. */
  host: string;
  /** Workers that may run there. */
  slots: number;
}

export interface RunOptions {
  /** Number of workers. */
  np: number;
  /** Where workers go, filled in order; default one local host with np slots. */
  hosts: HostSlots[];
  /** Treat every -H entry as its own host (own HORA_HOST_ID) although all are local. */
  simulateHosts: boolean;
  /** Seconds for all workers to register with the rendezvous server. */
  timeoutS: number;
  /** Seconds between Abort, SIGTERM and SIGKILL when the job ends early. */
  graceS: number;
  /** Extra environment for every worker (from tuning flags). */
  workerEnv: Record<string, string>;
  /** Launcher log level. */
  debug: DebugLevel;
  command: string;
  args: string[];
}

export const RUN_USAGE = `Usage: hora run -np N [options] [--] command [args...]

Starts N copies of command as one hora job: hosts the rendezvous server, sets
HORA_RANK, HORA_SIZE, ... in each worker, prefixes worker output with [rank],
and stops every worker when one fails. Exits with the failed worker's status
(128 + signal number when it was killed by a signal), 0 when all succeed.

Job layout:
  -np, -n, --num-proc N      number of worker processes (required unless -H gives slots)
  -H, --hosts HOST:SLOTS,...  hosts and worker slots, filled in order
                              (default localhost:N; only this machine for now)
  --simulate-hosts            treat every -H entry as a separate host with its own
                              HORA_HOST_ID, to exercise multi-host code on one machine

Timeouts and shutdown:
  --timeout S                 seconds, from the first registration, for all workers to
                              register (default HORA_TIMEOUT_S, 300)
  --grace S                   seconds between Abort, SIGTERM and SIGKILL when the job
                              ends early (default 5)

Tuning (passed to workers as HORA_* variables, see \`hora env\`):
  --fusion-mb MB              HORA_FUSION_MB, fusion buffer size
  --algo NAME                 HORA_ALGO, allreduce algorithm
  --transport T               HORA_TRANSPORT: auto, tcp or shm
  --iface NAME|ADDR           HORA_IFACE, interface for the data plane

Logging and timeline:
  --debug LEVEL               HORA_DEBUG for launcher and workers: WARN, INFO, TRACE
  --timeline FILE             HORA_TIMELINE, write a Chrome-trace timeline

  -h, --help                  show this help

Example:
  hora run -np 4 node train.js --epochs 3
`;

// Flags that take a value, by every spelling.
const VALUE_FLAGS: Record<string, string> = {
  '-np': '-np', '-n': '-np', '--num-proc': '-np', '--np': '-np',
  '-H': '-H', '--hosts': '-H',
  '--timeout': '--timeout', '--grace': '--grace',
  '--fusion-mb': '--fusion-mb', '--algo': '--algo', '--transport': '--transport', '--iface': '--iface',
  '--debug': '--debug', '--timeline': '--timeline',
};

const TUNING_FLAGS: Record<string, string> = {
  '--fusion-mb': 'HORA_FUSION_MB',
  '--algo': 'HORA_ALGO',
  '--transport': 'HORA_TRANSPORT',
  '--iface': 'HORA_IFACE',
  '--debug': 'HORA_DEBUG',
  '--timeline': 'HORA_TIMELINE',
};

/** Returns options, or 'help'. Throws UsageError naming the flag and the value received. */
export function parseRunArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): RunOptions | 'help' {
  const values = new Map<string, string>();
  let simulateHosts = false;
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--') {
      i++;
      break;
    }
    if (arg === '-h' || arg === '--help') return 'help';
    if (arg === '--simulate-hosts') {
      simulateHosts = true;
      continue;
    }
    if (!arg.startsWith('-') || arg === '-') break;
    const eq = arg.indexOf('=');
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const flag = VALUE_FLAGS[name];
    if (flag === undefined) throw new UsageError(arg, undefined, 'unknown option (see hora run --help)');
    let value: string | undefined;
    if (eq > 0) value = arg.slice(eq + 1);
    else {
      value = argv[i + 1];
      if (value === undefined) throw new UsageError(name, undefined, 'missing value');
      i++;
    }
    values.set(flag, value);
  }
  const command = argv[i];
  const args = argv.slice(i + 1);

  let hosts: HostSlots[] | undefined;
  const hostsText = values.get('-H');
  if (hostsText !== undefined) hosts = parseHosts(hostsText);

  const npText = values.get('-np');
  let np: number;
  if (npText !== undefined) {
    if (!/^\d+$/.test(npText.trim()) || Number(npText) < 1 || !Number.isSafeInteger(Number(npText))) {
      throw new UsageError('-np', npText, 'a whole number of processes >= 1');
    }
    np = Number(npText);
  } else if (hosts !== undefined) {
    np = hosts.reduce((n, h) => n + h.slots, 0);
  } else {
    throw new UsageError('-np', undefined, 'missing: say how many workers to start, e.g. hora run -np 2 node train.js');
  }
  if (hosts === undefined) hosts = [{ host: 'localhost', slots: np }];
  const slots = hosts.reduce((n, h) => n + h.slots, 0);
  if (np > slots) throw new UsageError('-np', npText, `at most ${slots}, the slots given by -H ${hostsText}`);

  let timeoutS: number;
  const timeoutText = values.get('--timeout');
  if (timeoutText !== undefined) timeoutS = positiveNumber('--timeout', timeoutText, false);
  else {
    timeoutS = readSettingsSubset(env, 'HORA_TIMEOUT_S', 'HORA_TIMEOUT_S').timeoutS;
  }
  const graceText = values.get('--grace');
  const graceS = graceText === undefined ? 5 : positiveNumber('--grace', graceText, true);

  const workerEnv: Record<string, string> = {};
  for (const [flag, variable] of Object.entries(TUNING_FLAGS)) {
    const v = values.get(flag);
    if (v === undefined) continue;
    readSettingsSubset({ [variable]: v }, variable, flag);
    workerEnv[variable] = v;
  }
  let debug: DebugLevel = 'WARN';
  const debugText = workerEnv.HORA_DEBUG ?? env.HORA_DEBUG;
  const level = debugText?.trim().toUpperCase();
  if (level && (DEBUG_LEVELS as readonly string[]).includes(level)) debug = level as DebugLevel;

  if (command === undefined || command === '') {
    throw new UsageError('command', undefined, 'missing: give the program to run after the options, e.g. hora run -np 2 node train.js');
  }
  return { np, hosts, simulateHosts, timeoutS, graceS, workerEnv, debug, command, args };
}

// Validates one variable through the shared config parser; errors name `flag`.
function readSettingsSubset(env: NodeJS.ProcessEnv, variable: string, flag: string) {
  try {
    return readSettings({ HORA_HOST_ID: 'unused', [variable]: env[variable] });
  } catch (e) {
    if (e instanceof HoraConfigError) throw new UsageError(flag, e.value, e.expected);
    throw e;
  }
}

function positiveNumber(flag: string, text: string, allowZero: boolean): number {
  const n = Number(text);
  if (text.trim() === '' || !Number.isFinite(n) || n < 0 || (!allowZero && n === 0)) {
    throw new UsageError(flag, text, allowZero ? 'a number of seconds >= 0' : 'a number of seconds > 0');
  }
  return n;
}

function parseHosts(text: string): HostSlots[] {
  const out: HostSlots[] = [];
  for (const entry of text.split(',')) {
    const trimmed = entry.trim();
    const m = /^(.+?)(?::(\d+))?$/.exec(trimmed);
    if (!m || trimmed === '') throw new UsageError('-H', text, 'host[:slots][,host[:slots]...], e.g. localhost:4');
    const slots = m[2] === undefined ? 1 : Number(m[2]);
    if (slots < 1) throw new UsageError('-H', text, `at least 1 slot for ${m[1]}`);
    if (!isLocalHost(m[1])) {
      throw new UsageError('-H', text, `hosts on this machine: ${m[1]} is remote, and launching over ssh is not implemented yet`);
    }
    out.push({ host: m[1], slots });
  }
  return out;
}

function isLocalHost(host: string): boolean {
  if (isLoopback(host) || host === os.hostname()) return true;
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) if (a.address === host) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// Spawning.

export interface WorkerSpec {
  rank: number;
  /** The -H entry this worker runs on. */
  host: string;
  /** Variables added to the launcher's environment. */
  env: Record<string, string>;
  command: string;
  args: string[];
}

export interface WorkerHandle {
  readonly rank: number;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Signals the worker and everything it started; no-op once it has exited. */
  kill(signal: NodeJS.Signals): void;
  /** Called once, when the worker has exited and its output is drained. code 127 = could not start. */
  onDone(cb: (code: number | null, signal: NodeJS.Signals | null) => void): void;
  /** Called once, as soon as the worker exits (output may still be in flight). */
  onExit(cb: (code: number | null, signal: NodeJS.Signals | null) => void): void;
}

export interface Spawner {
  /** Address to bind the rendezvous server to: one every worker can reach. */
  rendezvousBindAddress(hosts: HostSlots[]): string;
  spawn(spec: WorkerSpec): WorkerHandle;
}

/** Runs workers on this machine, each in its own process group so that kill() reaches its children too. */
export class LocalSpawner implements Spawner {
  rendezvousBindAddress(): string {
    return '127.0.0.1';
  }

  spawn(spec: WorkerSpec): WorkerHandle {
    const child = child_process.spawn(spec.command, spec.args, {
      env: { ...process.env, ...spec.env },
      // Workers get no stdin: they are in their own process group (a terminal read would stop them).
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let exited: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    const exitCbs: ((code: number | null, signal: NodeJS.Signals | null) => void)[] = [];
    const doneCbs: ((code: number | null, signal: NodeJS.Signals | null) => void)[] = [];
    let done = false;
    const markExit = (code: number | null, signal: NodeJS.Signals | null) => {
      if (exited) return;
      exited = { code, signal };
      for (const cb of exitCbs) cb(code, signal);
      // A grandchild that inherited stdout can hold the pipe open after the worker is gone.
      setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
      }, 2000).unref();
    };
    const markDone = () => {
      if (done || !exited) return;
      done = true;
      for (const cb of doneCbs) cb(exited.code, exited.signal);
    };
    child.on('exit', (code, signal) => markExit(code, signal));
    child.on('close', (code, signal) => {
      markExit(code, signal);
      markDone();
    });
    child.on('error', (err) => {
      if (child.pid === undefined) {
        process.stderr.write(`hora run: cannot start ${JSON.stringify(spec.command)} for rank ${spec.rank}: ${err.message}\n`);
        markExit(127, null);
        markDone();
      }
    });
    return {
      rank: spec.rank,
      stdout: child.stdout as Readable,
      stderr: child.stderr as Readable,
      kill(signal: NodeJS.Signals) {
        if (exited || child.pid === undefined) return;
        try {
          process.kill(-child.pid, signal);
        } catch {
          try {
            child.kill(signal);
          } catch {
            // already gone
          }
        }
      },
      onExit(cb) {
        if (exited) cb(exited.code, exited.signal);
        else exitCbs.push(cb);
      },
      onDone(cb) {
        if (done && exited) cb(exited.code, exited.signal);
        else doneCbs.push(cb);
      },
    };
  }
}

// ---------------------------------------------------------------------------
// Output.

const MAX_PENDING_LINE = 64 * 1024;

/**
 * Copies a worker stream to dest with `prefix` before every line. Only whole
 * lines are written (so ranks never interleave mid-line); a very long line is
 * cut at 64 KiB; the last partial line is written, newline added, at end.
 */
export function prefixLines(src: Readable, dest: Writable, prefix: string): Promise<void> {
  const prefixBytes = Buffer.from(prefix);
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const write = (buf: Buffer) => {
    // Output nobody reads any more (closed pipe) is dropped, so that workers never block on it.
    if (dest.destroyed || dest.writableEnded) return;
    if (!dest.write(buf)) {
      src.pause();
      const resume = () => {
        dest.off('drain', resume);
        dest.off('close', resume);
        dest.off('error', resume);
        src.resume();
      };
      dest.on('drain', resume);
      dest.on('close', resume);
      dest.on('error', resume);
    }
  };
  return new Promise((resolve) => {
    src.on('data', (chunk: Buffer) => {
      const out: Buffer[] = [];
      let start = 0;
      for (;;) {
        const nl = chunk.indexOf(0x0a, start);
        if (nl < 0) break;
        out.push(prefixBytes, ...pending, chunk.subarray(start, nl + 1));
        pending = [];
        pendingBytes = 0;
        start = nl + 1;
      }
      if (start < chunk.length) {
        pending.push(chunk.subarray(start));
        pendingBytes += chunk.length - start;
        if (pendingBytes >= MAX_PENDING_LINE) {
          out.push(prefixBytes, ...pending, Buffer.from('\n'));
          pending = [];
          pendingBytes = 0;
        }
      }
      if (out.length > 0) write(Buffer.concat(out));
    });
    const finish = () => {
      if (pendingBytes > 0) write(Buffer.concat([prefixBytes, ...pending, Buffer.from('\n')]));
      pending = [];
      pendingBytes = 0;
      resolve();
    };
    src.once('end', finish);
    src.once('close', finish);
    src.once('error', finish);
  });
}

// ---------------------------------------------------------------------------
// Supervision.

/** 128 + signal number, as shells report a death by signal. */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (os.constants.signals[signal] ?? 0);
}

interface Failure {
  rank: number;
  exitCode: number;
  description: string;
}

/** Runs the job to completion; resolves with the launcher's exit status. */
export async function launch(opts: RunOptions, spawner: Spawner = new LocalSpawner()): Promise<number> {
  const log: Logger = makeLogger('run', opts.debug);
  const jobId = crypto.randomBytes(8).toString('hex');
  const secret = crypto.randomBytes(32).toString('hex');
  const baseHostId = process.env.HORA_HOST_ID?.trim() || defaultHostId();

  const server = new RendezvousServer({
    size: opts.np,
    secret,
    host: spawner.rendezvousBindAddress(opts.hosts),
    port: 0,
    timeoutMs: opts.timeoutS * 1000,
    jobId,
    log,
  });
  const { host: rvAddr, port: rvPort } = await server.listen();
  server.on('worker-lost', (_rank: number, reason: string) => log('INFO', reason));

  // `hora run ... | head` closes our stdout early: keep supervising the job rather than crash on EPIPE.
  const ignoreOutputError = () => undefined;
  process.stdout.on('error', ignoreOutputError);
  process.stderr.on('error', ignoreOutputError);

  const placement = place(opts, baseHostId);
  const workers: WorkerHandle[] = [];
  const outputs: Promise<void>[] = [];
  let failure: Failure | undefined;
  let interrupted: NodeJS.Signals | undefined;
  const timers: NodeJS.Timeout[] = [];
  let stopping = false;

  const running = new Set<number>();
  const killAll = (signal: NodeJS.Signals) => {
    for (const w of workers) if (running.has(w.rank)) w.kill(signal);
  };
  // Abort now, SIGTERM after one grace period, SIGKILL after another.
  const stopJob = (reason: string, rank: number, code: string, firstSignal: NodeJS.Signals | undefined) => {
    if (stopping) return;
    stopping = true;
    server.abort(reason, rank, code);
    const graceMs = opts.graceS * 1000;
    if (firstSignal) killAll(firstSignal);
    else timers.push(setTimeout(() => killAll('SIGTERM'), graceMs));
    timers.push(setTimeout(() => killAll('SIGKILL'), firstSignal ? graceMs : 2 * graceMs));
  };

  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) {
      log('WARN', `second ${signal}: killing all workers`);
      killAll('SIGKILL');
      return;
    }
    interrupted = signal;
    process.stderr.write(`hora run: received ${signal}, stopping ${running.size} worker(s) (send it again to kill them at once)\n`);
    stopJob(`launcher received ${signal}`, -1, 'ERR_SHUTDOWN', signal);
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  for (const s of signals) process.on(s, onSignal);

  const allDone = new Promise<void>((resolve) => {
    let remaining = opts.np;
    for (const spec of placement) {
      const env: Record<string, string> = {
        ...opts.workerEnv,
        ...spec.env,
        HORA_RENDEZVOUS_ADDR: rvAddr,
        HORA_RENDEZVOUS_PORT: String(rvPort),
        HORA_SECRET: secret,
        HORA_JOB_ID: jobId,
      };
      const w = spawner.spawn({ ...spec, env, command: opts.command, args: opts.args });
      workers.push(w);
      running.add(w.rank);
      outputs.push(prefixLines(w.stdout, process.stdout, `[${w.rank}] `));
      outputs.push(prefixLines(w.stderr, process.stderr, `[${w.rank}] `));
      w.onExit((code, signal) => {
        running.delete(w.rank);
        if ((code === 0 && signal === null) || failure || interrupted) return;
        const exitCode = signal ? signalExitCode(signal) : (code ?? 1);
        const description = signal ? `was killed by ${signal}` : `exited with code ${code}`;
        failure = { rank: w.rank, exitCode, description };
        process.stderr.write(`hora run: rank ${w.rank} ${description}; stopping the other workers\n`);
        stopJob(`rank ${w.rank} ${description}`, w.rank, 'ERR_PEER_LOST', undefined);
      });
      w.onDone(() => {
        if (--remaining === 0) resolve();
      });
    }
  });

  await allDone;
  await Promise.all(outputs);
  for (const t of timers) clearTimeout(t);
  for (const s of signals) process.off(s, onSignal);
  process.stdout.off('error', ignoreOutputError);
  process.stderr.off('error', ignoreOutputError);
  await server.close();
  removeSharedMemory(jobId, log);

  if (failure) return failure.exitCode;
  if (interrupted) return signalExitCode(interrupted);
  return 0;
}

/** Worker specs (without rendezvous variables): ranks fill -H entries in order. */
function place(opts: RunOptions, baseHostId: string): Omit<WorkerSpec, 'command' | 'args'>[] {
  // Every local -H entry is the same machine unless --simulate-hosts asks otherwise.
  const hostKey = (index: number) => (opts.simulateHosts ? index : 0);
  const hostIdOf = (index: number) => (opts.simulateHosts ? `${baseHostId}#${index}` : baseHostId);
  const entries: { index: number; host: string }[] = [];
  opts.hosts.forEach((h, index) => {
    for (let s = 0; s < h.slots && entries.length < opts.np; s++) entries.push({ index, host: h.host });
  });
  const keys = [...new Set(entries.map((e) => hostKey(e.index)))];
  const localSize = new Map<number, number>();
  for (const e of entries) localSize.set(hostKey(e.index), (localSize.get(hostKey(e.index)) ?? 0) + 1);
  const seen = new Map<number, number>();
  return entries.map((e, rank) => {
    const key = hostKey(e.index);
    const localRank = seen.get(key) ?? 0;
    seen.set(key, localRank + 1);
    return {
      rank,
      host: e.host,
      env: {
        HORA_RANK: String(rank),
        HORA_SIZE: String(opts.np),
        HORA_LOCAL_RANK: String(localRank),
        HORA_LOCAL_SIZE: String(localSize.get(key)),
        HORA_CROSS_RANK: String(keys.indexOf(key)),
        HORA_CROSS_SIZE: String(keys.length),
        HORA_HOST_ID: hostIdOf(e.index),
      },
    };
  });
}

/** Removes /dev/shm/hora-<jobId>* left behind by workers that died before cleaning up. */
export function removeSharedMemory(jobId: string, log: Logger, dir = '/dev/shm'): void {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return; // no /dev/shm on this system
  }
  for (const name of names) {
    if (!name.startsWith(`hora-${jobId}`)) continue;
    try {
      fs.unlinkSync(`${dir}/${name}`);
      log('INFO', `removed leftover shared memory ${dir}/${name}`);
    } catch (e) {
      log('WARN', `could not remove ${dir}/${name}: ${(e as Error).message}`);
    }
  }
}

/** `hora run ...`: parses argv (after "run") and runs the job; resolves with the exit status. */
export async function runMain(argv: string[]): Promise<number> {
  let opts: RunOptions | 'help';
  try {
    opts = parseRunArgs(argv);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`hora run: ${e.message}\nRun 'hora run --help' for usage.\n`);
      return 2;
    }
    throw e;
  }
  if (opts === 'help') {
    process.stdout.write(RUN_USAGE);
    return 0;
  }
  return launch(opts);
}
