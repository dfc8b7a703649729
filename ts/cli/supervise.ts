// The supervision of a `hora run` job. launch() hosts the rendezvous server (and the dashboard), starts
// the workers through a Spawner with their HORA_* variables, shows their output, and ends the job as a
// whole: when one worker fails the others get an Abort at once, SIGTERM after a grace period and SIGKILL
// after another, and the launcher exits with the failed worker's code (128 + signal number when a signal
// killed it). Signals sent to the launcher are forwarded the same way. In an elastic job (--min-np) a lost
// worker need not end the job: elastic-supervision.ts decides what happens instead.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Logger, makeLogger, readHostId, readTimeline, DebugLevel, DEBUG_LEVELS } from '../config';
import { RendezvousServer } from '../control/server';
import { mergeTimelines, rankTimelinePath } from '../timeline';
import { BindRequest } from './bind';
import { Dashboard, startDashboard } from './dashboard';
import { ElasticSupervisor, WorkerPool } from './elastic-supervision';
import { HostSpawner } from './host-spawner';
import { checkLocalBinding, place } from './placement';
import type { RunOptions } from './run-args';
import { formatStatus, StatusLine } from './status-line';
import { LaunchError, Spawner, WorkerHandle, WorkerSpec } from './spawn';
import { copyToFile, outputFolder, prefixLines } from './worker-output';

/** 128 + signal number, as shells report a death by signal. */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (os.constants.signals[signal] ?? 0);
}

interface Failure {
  rank: number;
  exitCode: number;
  description: string;
}

/** A worker before the launcher adds the command and the rendezvous variables (placement.ts). */
type PlacedWorker = Omit<WorkerSpec, 'command' | 'args'>;

/** Runs the job to completion; resolves with the launcher's exit status. */
export async function launch(opts: RunOptions, spawner?: Spawner): Promise<number> {
  let server: RendezvousServer | undefined;
  const out = launcherOutput(opts.debug, () => formatStatus((server as RendezvousServer).snapshot()));
  const { status, log } = out;
  spawner ??= new HostSpawner(opts.ssh, opts.iface, log, opts.ifaceFrom);
  const baseHostId = readHostId();
  const rendezvous = await openRendezvous(opts, spawner, log);
  server = rendezvous.server;
  const dashboard = await openDashboard(opts, server);
  status?.start();

  // `hora run ... | head` closes our stdout early: keep supervising the job rather than crash on EPIPE.
  const ignoreOutputError = () => undefined;
  process.stdout.on('error', ignoreOutputError);
  process.stderr.on('error', ignoreOutputError);

  const timeline = timelineFile(opts);
  let placement: PlacedWorker[];
  try {
    placement = placeWorkers(opts, baseHostId);
  } catch (e) {
    await server.close();
    await dashboard?.close();
    status?.stop();
    throw e;
  }

  const supervisor = new Supervisor(opts, spawner, rendezvous, baseHostId, timeline, out);
  supervisor.start(placement);
  await supervisor.allDone;

  supervisor.stopDiscovery();
  await Promise.all(supervisor.outputs);
  status?.stop();
  await dashboard?.close();
  supervisor.stopWatching();
  process.stdout.off('error', ignoreOutputError);
  process.stderr.off('error', ignoreOutputError);
  await server.close();
  removeSharedMemory(rendezvous.jobId, log);
  if (timeline) await finishTimeline(timeline, opts.elastic ? supervisor.nextWorkerId : opts.np, opts.elastic ? 'worker' : 'rank');
  return supervisor.exitStatus();
}

/** Where the launcher writes: on a terminal, a status line below the workers' output, and a log that draws around it. */
interface LauncherOutput {
  status: StatusLine | undefined;
  log: Logger;
}

function launcherOutput(debug: DebugLevel, statusText: () => string): LauncherOutput {
  // On a terminal, one status line below the output; launcher messages go above it too.
  const status = process.stdout.isTTY ? new StatusLine(process.stdout, statusText) : undefined;
  const printLog: Logger = makeLogger('run', debug);
  const shown = (level: DebugLevel) => DEBUG_LEVELS.indexOf(level) <= DEBUG_LEVELS.indexOf(debug);
  const log: Logger = status ? (level, message) => (shown(level) ? status.around(() => printLog(level, message)) : undefined) : printLog;
  return { status, log };
}

/** The job's rendezvous server, listening, and what a worker needs to find and join it. */
interface Rendezvous {
  server: RendezvousServer;
  jobId: string;
  secret: string;
  addr: string;
  port: number;
  /** What chose addr, in words: HORA_RENDEZVOUS_ADDR_SOURCE. */
  source: string;
}

/** Starts the rendezvous server where the spawner says every worker can reach it. */
async function openRendezvous(opts: RunOptions, spawner: Spawner, log: Logger): Promise<Rendezvous> {
  const jobId = crypto.randomBytes(8).toString('hex');
  const secret = crypto.randomBytes(32).toString('hex');
  const binding = await spawner.rendezvousBindAddress(opts.hosts);
  const server = new RendezvousServer({
    size: opts.np,
    secret,
    host: binding.addr,
    port: 0,
    timeoutMs: opts.timeoutS * 1000,
    jobId,
    log,
    stallWarnMs: opts.stallWarnS * 1000,
    elastic: opts.elastic && {
      minSize: opts.elastic.minNp, maxSize: opts.elastic.maxNp, settleMs: opts.elastic.settleS * 1000, waitMs: opts.elastic.timeoutS * 1000,
    },
  });
  const { host, port } = await server.listen();
  return { server, jobId, secret, addr: host, port, source: binding.source };
}

/** --dashboard: the job's live page, its URL printed. Throws LaunchError (the server closed) when it cannot listen. */
async function openDashboard(opts: RunOptions, server: RendezvousServer): Promise<Dashboard | undefined> {
  if (opts.dashboard === undefined) return undefined;
  let dashboard: Dashboard;
  try {
    dashboard = await startDashboard(() => server.snapshot(), opts.dashboard);
  } catch (e) {
    await server.close();
    throw new LaunchError(`--dashboard ${opts.dashboard}: cannot listen on 127.0.0.1:${opts.dashboard}: ${(e as Error).message}`);
  }
  process.stderr.write(`hora run: dashboard on ${dashboard.url}\n`);
  return dashboard;
}

/** --timeline or HORA_TIMELINE: every rank writes its own file next to FILE; they are merged at the end. */
function timelineFile(opts: RunOptions): string | undefined {
  const timelineText = opts.workerEnv.HORA_TIMELINE !== undefined ? readTimeline(opts.workerEnv) : readTimeline();
  const timeline = timelineText ? path.resolve(timelineText) : undefined;
  // (An elastic job's files are named by worker id; each is removed as its worker starts.)
  if (timeline) for (let r = 0; r < opts.np; r++) fs.rmSync(rankTimelinePath(timeline, r), { force: true });
  return timeline;
}

/** The workers of the job's start, once binding can work here and the --output-filename folder exists. Throws LaunchError. */
function placeWorkers(opts: RunOptions, baseHostId: string): PlacedWorker[] {
  const placement = place(opts, baseHostId);
  try {
    if (opts.bindTo === 'core') checkLocalBinding(placement, (message) => process.stderr.write(`hora run: ${message}\n`));
    if (opts.outputDir !== undefined) fs.mkdirSync(opts.outputDir, { recursive: true });
  } catch (e) {
    if (e instanceof LaunchError) throw e;
    throw new LaunchError(`--output-filename ${opts.outputDir}: cannot make the folder: ${(e as Error).message}`);
  }
  return placement;
}

/**
 * The workers of one job while it runs: starts each, shows its output, watches how it ends, and stops the
 * job as a whole when one fails or the launcher is signalled.
 */
class Supervisor implements WorkerPool {
  readonly running = new Set<WorkerHandle>();
  /** Every worker's output, copied until its streams end. */
  readonly outputs: Promise<void>[] = [];
  /** Resolves when every worker started has exited and its output is drained. */
  readonly allDone: Promise<void>;
  nextWorkerId = 0;
  private readonly workers: WorkerHandle[] = [];
  private readonly byWorkerId = new Map<number, WorkerHandle>();
  private readonly hostOfWorker = new Map<WorkerHandle, string>();
  private readonly timers: NodeJS.Timeout[] = [];
  private readonly signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  private readonly multiHost: boolean;
  private readonly elastic: ElasticSupervisor | undefined;
  private failure: Failure | undefined;
  private interrupted: NodeJS.Signals | undefined;
  private stopping = false;
  private remaining = 0;
  private resolveAll: () => void = () => undefined;

  constructor(
    private readonly opts: RunOptions,
    private readonly spawner: Spawner,
    private readonly rendezvous: Rendezvous,
    baseHostId: string,
    private readonly timeline: string | undefined,
    private readonly out: LauncherOutput,
  ) {
    this.multiHost = opts.hosts.some((h) => h.remote);
    this.allDone = new Promise<void>((resolve) => {
      this.resolveAll = resolve;
    });
    this.elastic = opts.elastic && new ElasticSupervisor(opts, opts.elastic, rendezvous.server, this, baseHostId, out.log);
  }

  /** Forwards the launcher's signals to the job, starts the elastic supervision, then the workers. */
  start(placement: PlacedWorker[]): void {
    for (const s of this.signals) process.on(s, this.onSignal);
    this.elastic?.start();
    for (const spec of placement) this.startWorker(spec);
  }

  stopDiscovery(): void {
    this.elastic?.stop();
  }

  /** After the job: no more kills pending, the launcher's signals its own again. */
  stopWatching(): void {
    for (const t of this.timers) clearTimeout(t);
    for (const s of this.signals) process.off(s, this.onSignal);
  }

  /** The failed worker's status, 128 + signal number when the launcher was signalled, else as the elastic job ended (0 otherwise). */
  exitStatus(): number {
    if (this.failure) return this.failure.exitCode;
    if (this.interrupted) return signalExitCode(this.interrupted);
    return this.elastic?.exitStatus() ?? 0;
  }

  hostOf(w: WorkerHandle): string {
    return this.hostOfWorker.get(w) as string;
  }

  worker(workerId: number): WorkerHandle | undefined {
    return this.byWorkerId.get(workerId);
  }

  workerIdOf(w: WorkerHandle): number | undefined {
    return [...this.byWorkerId].find(([, x]) => x === w)?.[0];
  }

  refusesNewWorkers(): boolean {
    return this.stopping || this.failure !== undefined || this.interrupted !== undefined || this.rendezvous.server.elastic?.isFinishing === true;
  }

  startWorker(spec: PlacedWorker): void {
    const { opts, timeline } = this;
    const workerId = this.nextWorkerId++;
    const env = this.environment(spec, workerId);
    if (timeline && opts.elastic) fs.rmSync(rankTimelinePath(timeline, workerId), { force: true });
    const bind: BindRequest | undefined = opts.bindTo === 'core'
      ? { mapBy: opts.mapBy, localRank: Number(spec.env.HORA_LOCAL_RANK), localSize: Number(spec.env.HORA_LOCAL_SIZE) }
      : undefined;
    const w = this.spawner.spawn({ ...spec, env, bind, command: opts.command, args: opts.args });
    this.remaining++;
    this.workers.push(w);
    this.running.add(w);
    this.hostOfWorker.set(w, spec.host);
    this.byWorkerId.set(workerId, w);
    this.showOutput(w, workerId, spec);
    w.onExit((code, signal) => this.onWorkerExit(w, workerId, spec, code, signal));
    w.onDone(() => {
      if (--this.remaining === 0) this.resolveAll();
    });
  }

  /** A worker's variables: -x and tuning flags, its placement, and the rendezvous it joins. */
  private environment(spec: PlacedWorker, workerId: number): Record<string, string> {
    const { opts, timeline, rendezvous } = this;
    const env: Record<string, string> = {
      ...opts.exportEnv,
      ...opts.workerEnv,
      ...(timeline ? { HORA_TIMELINE: timeline } : {}),
      ...spec.env,
      HORA_RENDEZVOUS_ADDR: rendezvous.addr,
      HORA_RENDEZVOUS_ADDR_SOURCE: rendezvous.source,
      HORA_RENDEZVOUS_PORT: String(rendezvous.port),
      HORA_SECRET: rendezvous.secret,
      HORA_JOB_ID: rendezvous.jobId,
      ...(opts.elastic ? { HORA_ELASTIC: '1', HORA_WORKER_ID: String(workerId) } : {}),
    };
    // Local workers of a multi-host job must advertise an address the remote hosts reach, not loopback.
    if (this.multiHost && !spec.remote && opts.iface === undefined) env.HORA_IFACE = rendezvous.addr;
    return env;
  }

  /** The worker's output on the terminal, each line prefixed, and with --output-filename in its own files too. */
  private showOutput(w: WorkerHandle, workerId: number, spec: PlacedWorker): void {
    const { opts, outputs } = this;
    const { status, log } = this.out;
    // In an elastic job ranks change as the world re-forms: output is labelled with the worker id.
    const label = opts.elastic ? workerId : w.rank;
    const prefix = this.multiHost ? `[${label}@${spec.host}] ` : `[${label}] `;
    outputs.push(prefixLines(w.stdout, status ? status.streamTo(process.stdout) : process.stdout, prefix));
    outputs.push(prefixLines(w.stderr, status ? status.streamTo(process.stderr) : process.stderr, prefix));
    if (opts.outputDir === undefined) return;
    // The worker's own bytes, unprefixed, as Open MPI and horovodrun write them (remote output arrives through ssh).
    const folder = outputFolder(opts.outputDir, w.rank, opts.np, opts.elastic ? workerId : undefined);
    const failed = (err: Error) => log('WARN', `--output-filename: cannot write ${folder}: ${err.message}; that output goes to the terminal only`);
    try {
      fs.mkdirSync(folder, { recursive: true });
      outputs.push(copyToFile(w.stdout, path.join(folder, 'stdout'), failed));
      outputs.push(copyToFile(w.stderr, path.join(folder, 'stderr'), failed));
    } catch (e) {
      failed(e as Error);
    }
  }

  /** A worker ended: a success, or a failure that stops the job unless the elastic supervision takes it. */
  private onWorkerExit(w: WorkerHandle, workerId: number, spec: PlacedWorker, code: number | null, signal: NodeJS.Signals | null): void {
    this.running.delete(w);
    const left = this.elastic?.noteExit(w);
    if ((code === 0 && signal === null) || this.failure || this.interrupted) return;
    const exitCode = signal ? signalExitCode(signal) : (code ?? 1);
    const who = this.opts.elastic ? `worker ${workerId}` : this.multiHost ? `rank ${w.rank} on ${spec.host}` : `rank ${w.rank}`;
    const cause = w.describeFailure?.(code, signal);
    const description = cause ?? (signal ? `was killed by ${signal}` : `exited with code ${code}`);
    const what = cause ? `${who}: ${cause}` : `${who} ${description}`;
    if (this.elastic && left && this.elastic.absorbsFailure({ workerId, spec, what, description }, left)) return;
    this.failure = { rank: w.rank, exitCode, description };
    process.stderr.write(`hora run: ${what}; stopping the other workers\n`);
    this.stopJob(what, w.rank, 'ERR_PEER_LOST', undefined);
  }

  /** The elastic job waited too long with too few workers: it fails. */
  timeOut(message: string): void {
    if (this.failure || this.interrupted) return;
    this.failure = { rank: -1, exitCode: 1, description: message };
    process.stderr.write(`hora run: ${message}; stopping the job\n`);
    this.stopJob(message, -1, 'ERR_TIMEOUT', undefined);
  }

  private killAll(signal: NodeJS.Signals): void {
    for (const w of this.workers) if (this.running.has(w)) w.kill(signal);
  }

  /** Abort now, SIGTERM after one grace period, SIGKILL after another. */
  private stopJob(reason: string, rank: number, code: string, firstSignal: NodeJS.Signals | undefined): void {
    if (this.stopping) return;
    this.stopping = true;
    this.rendezvous.server.abort(reason, rank, code);
    const graceMs = this.opts.graceS * 1000;
    if (firstSignal) this.killAll(firstSignal);
    else this.timers.push(setTimeout(() => this.killAll('SIGTERM'), graceMs));
    this.timers.push(setTimeout(() => this.killAll('SIGKILL'), firstSignal ? graceMs : 2 * graceMs));
  }

  private readonly onSignal = (signal: NodeJS.Signals): void => {
    if (this.interrupted) {
      this.out.log('WARN', `second ${signal}: killing all workers`);
      this.killAll('SIGKILL');
      return;
    }
    this.interrupted = signal;
    process.stderr.write(`hora run: received ${signal}, stopping ${this.running.size} worker(s) (send it again to kill them at once)\n`);
    this.stopJob(`launcher received ${signal}`, -1, 'ERR_SHUTDOWN', signal);
  };
}

/** Merges the ranks' timeline files into `file`, whether the job succeeded or not, and says what it did. */
async function finishTimeline(file: string, np: number, who: 'rank' | 'worker'): Promise<void> {
  try {
    const m = await mergeTimelines(file, np);
    if (m.merged.length === 0) {
      process.stderr.write(`hora run: no ${who} wrote a timeline file (looked for ${rankTimelinePath(file, 0)} and the like)\n`);
      return;
    }
    const missing = m.missing.length === 0 ? ''
      : `; no file from ${who}(s) ${m.missing.join(', ')} here (a ${who} on another host writes ${rankTimelinePath(file, m.missing[0])} there)`;
    process.stderr.write(`hora run: timeline of ${m.merged.length} ${who}(s), ${m.events} events, written to ${file}${missing}\n`);
  } catch (e) {
    process.stderr.write(`hora run: could not merge the timeline into ${file}: ${(e as Error).message}; ` +
      `the rank files (${rankTimelinePath(file, 0)} ...) are left as they are\n`);
  }
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
