/**
 * Joining and leaving the job: hora.init() and hora.shutdown(). init() checks its options, reads the
 * launcher's environment (ts/config.ts) and joins a world of one, a fixed world through the rendezvous
 * (here, with the checks of the launcher's layout and the watch on the control connection), or an elastic
 * job's first world (ts/elastic/world.ts). The world itself is ts/world.ts.
 */
import { advertiseAddress, connectTimeoutS, makeLogger, readSettings, readTopologyText, resolveLaunch, HoraSettings, LaunchInfo } from './config';
import type { Peer } from './control/messages';
import { register, RendezvousConnection } from './control/client';
import { RendezvousServer } from './control/server';
import { joinElastic, leaveElastic } from './elastic/world';
import { CallSite, HoraError, checkOptionKeys, describeValue, knownOptions } from './errors';
import { loadNative } from './loader';
import { NativeResult, lookupName } from './native';
import type { InitOptions } from './types';
import { startReporting, stopReporting } from './stats';
import { openTimeline } from './timeline';
import { Dispatcher } from './dispatcher';
import {
  ALGORITHMS, World, closeQuietly, endWorld, isInitialized, isShutDown, joinedWorld, nativeSettings, setWorld, unreachableHint, worldScope,
} from './world';

let initializing: Promise<void> | null = null;

// The options init takes (ts/types.ts); any other key is refused (checkOptionKeys).
const INIT_OPTIONS = knownOptions<InitOptions>({ timeoutSeconds: true, fusionMB: true, algorithm: true, transport: true });

/**
 * Joins the job described by the environment: `hora run` (HORA_*), mpirun (OMPI_COMM_WORLD_*, PMI_*),
 * Slurm, or torchrun-style variables (rank 0 then hosts the rendezvous). With none of them the process
 * is a world of one, where every collective returns its input. Calling it again is harmless.
 */
export function init(options: InitOptions = {}): Promise<void> {
  if (isInitialized()) return Promise.resolve();
  if (isShutDown()) return Promise.reject(new HoraError('ERR_SHUTDOWN', 'hora.init: hora was shut down in this process; it cannot be initialized again'));
  if (!initializing) {
    initializing = join(options).finally(() => {
      initializing = null;
    });
  }
  return initializing;
}

async function join(options: InitOptions): Promise<void> {
  if (options === null || typeof options !== 'object') {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.init: argument 'options' must be an object; received ${describeValue(options)}`);
  }
  checkOptionKeys('init', options, INIT_OPTIONS);
  const bad = (field: string, expected: string, received: unknown) =>
    new HoraError('ERR_INVALID_ARGUMENT', `hora.init: option '${field}' must be ${expected}; received ${describeValue(received)}`);
  if (options.timeoutSeconds !== undefined && !(typeof options.timeoutSeconds === 'number' && options.timeoutSeconds > 0 && Number.isFinite(options.timeoutSeconds))) {
    throw bad('timeoutSeconds', 'a positive number of seconds', options.timeoutSeconds);
  }
  if (options.fusionMB !== undefined && !(typeof options.fusionMB === 'number' && options.fusionMB >= 0 && Number.isFinite(options.fusionMB))) {
    throw bad('fusionMB', 'a number of MiB >= 0', options.fusionMB);
  }
  if (options.algorithm !== undefined && lookupName(ALGORITHMS, options.algorithm) === undefined) {
    throw bad('algorithm', `one of ${Object.keys(ALGORITHMS).join(', ')}`, options.algorithm);
  }
  if (options.transport !== undefined && options.transport !== 'auto' && options.transport !== 'tcp' && options.transport !== 'shm') {
    throw bad('transport', "'auto', 'tcp' or 'shm'", options.transport);
  }
  let launch: LaunchInfo;
  let settings: HoraSettings;
  try {
    launch = resolveLaunch(process.env);
    settings = readSettings(process.env);
  } catch (e) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.init: ${(e as Error).message}`);
  }
  const gridSize = settings.topology.reduce((a, b) => a * b, 1);
  if (settings.topology.length > 0 && gridSize !== launch.size) {
    throw new HoraError('ERR_INVALID_ARGUMENT', `hora.init: HORA_TOPOLOGY=${JSON.stringify(readTopologyText())} ` +
      `has ${gridSize} positions but the job has ${launch.size} ranks: the product of the dimensions must be the world size`);
  }
  if (settings.elastic) return joinElastic(options, launch, settings, join);
  if (launch.size === 1) {
    setWorld({
      rank: 0, size: 1, localRank: 0, localSize: 1, crossRank: 0, crossSize: 1, dispatcher: null, control: null, server: null,
      ...worldScope(0), groupsMade: 0,
    });
    return;
  }
  const { timeoutMs, fusionBytes, algorithm, transportName, transport, logLevel } = nativeSettings(options, settings);

  const addon = loadNative();
  const dataAddr = advertiseAddress(settings, launch.rendezvousAddr);
  const dispatcher = new Dispatcher(addon, (onComplete) => new addon.Communicator({
    rank: launch.rank, size: launch.size, timeoutMs, fusionBytes, algorithm, transport,
    bindHost: dataAddr, secret: launch.secret as string, logLevel,
    grid: settings.topology, costLocal: settings.costLocal, costCross: settings.costCross,
    timeline: settings.timeline !== undefined, ipcSlots: settings.ipcSlots, nccl: settings.nccl,
    shmSingleCopy: settings.shmSingleCopy,
  }, onComplete), launch.rank, fusionBytes, settings.callSites);
  const comm = dispatcher.comm;
  if (settings.timeline) dispatcher.timeline = openTimeline(settings.timeline, launch.rank, addon.clocks(), () => comm.takeTimeline());
  let server: RendezvousServer | null = null;
  let control: RendezvousConnection | null = null;
  try {
    const dataPort = comm.listen();
    if (launch.isRendezvousHost) {
      server = new RendezvousServer({
        size: launch.size, secret: launch.secret as string, host: launch.rendezvousBindAddr ?? launch.rendezvousAddr, port: launch.rendezvousPort,
        timeoutMs, jobId: launch.jobId, log: makeLogger('rendezvous', settings.debug), stallWarnMs: settings.stallWarnS * 1000,
      });
      await server.listen();
      server.unref();
    }
    const reg = await register({
      addr: launch.rendezvousAddr as string, port: launch.rendezvousPort as number, secret: launch.secret as string,
      rank: launch.rank, hostId: settings.hostId, dataAddr, dataPort, timeoutMs,
      connectTimeoutMs: Math.round(1000 * connectTimeoutS(settings, launch, timeoutMs / 1000)),
      addrSource: launch.rendezvousAddrSource, unreachableHint: unreachableHint(launch), log: makeLogger('init', settings.debug),
    });
    control = reg.connection;
    if (transportName === 'shm') {
      requireOneHost(reg.table.peers, launch.rank, options.transport === undefined ? 'HORA_TRANSPORT=shm' : "init option transport 'shm'");
    }
    const peers = reg.table.peers.map((p) => ({
      rank: p.rank, hostId: p.hostId, addr: p.dataAddr, port: p.dataPort, localRank: p.localRank,
    }));
    await dispatcher.track((r: NativeResult) => r, new CallSite(join), (id) => comm.connect(id, peers, reg.table.jobId));
    dispatcher.peerPlaces = reg.table.peers.map((p) => `host ${p.hostId}, pid ${p.pid}`);
    const self = reg.self;
    checkLauncherLayout(launch, self, settings);
    const w: World = {
      rank: self.rank, size: reg.table.size, localRank: self.localRank, localSize: self.localSize,
      crossRank: self.crossRank, crossSize: self.crossSize, dispatcher, control, server, ...worldScope(self.rank), groupsMade: 0,
    };
    setWorld(w);
    watchControl(w, launch);
    const connection = control;
    startReporting(dispatcher.stats, (stats) => connection.send({ kind: 'stats', ...stats }));
  } catch (e) {
    control?.close();
    // Rank 0 hosts the server: who never registered is known here, and says more than "not every rank did".
    const missing = server && !server.peerTable && (e as { code?: string }).code === 'ERR_TIMEOUT' ? `. This rank's rendezvous server: ${server.registrationStatus()}` : '';
    if (server) await server.close().catch(() => undefined);
    try { comm.close(); } catch { /* already closed */ }
    if (e instanceof HoraError) throw e;
    const err = e as Error & { code?: string };
    throw new HoraError(err.code ?? 'ERR_INTERNAL', `hora.init on rank ${launch.rank}: ${err.message.replace(/^rank -?\d+: /, '')}${missing}`, launch.rank);
  }
}

/**
 * Shared memory only (HORA_TRANSPORT=shm) cannot connect ranks on different hosts. Every rank has the
 * same peer table, so every rank fails here, before opening a connection, with the same message.
 */
function requireOneHost(peers: Peer[], rank: number, setting: string): void {
  const ranksOf = new Map<string, number[]>();
  for (const p of peers) ranksOf.set(p.hostId, [...(ranksOf.get(p.hostId) ?? []), p.rank]);
  if (ranksOf.size <= 1) return;
  const where = [...ranksOf].map(([hostId, ranks]) => `rank${ranks.length > 1 ? 's' : ''} ${ranks.join(', ')} on ${JSON.stringify(hostId)}`).join('; ');
  throw new HoraError('ERR_INVALID_ARGUMENT', `hora.init on rank ${rank}: ${setting} needs every rank on one host, but the job ` +
    `spans ${ranksOf.size} hosts (${where}); use auto (shared memory within a host, TCP across) or tcp`, rank);
}

/**
 * Local and cross ranks come from the host ids in the peer table (docs/internals.md, "What the code relies
 * on"), not from the launcher's variables. A launcher that counts hosts differently points at wrong host ids
 * (two machines with one id would try shared memory; one machine with two ids uses TCP), so say so.
 */
function checkLauncherLayout(launch: LaunchInfo, self: Peer, settings: HoraSettings): void {
  const agrees = (said: number | undefined, got: number) => said === undefined || said === got;
  if (agrees(launch.localSize, self.localSize) && agrees(launch.crossSize, self.crossSize)) return;
  makeLogger('init', settings.debug)('WARN', `rank ${self.rank}: the launcher (${launch.source}) puts ${launch.localSize ?? '?'} ranks on ` +
    `this host and ${launch.crossSize ?? '?'} hosts in the job, but the host ids give ${self.localSize} and ${self.crossSize} ` +
    `(this host's id: ${JSON.stringify(self.hostId)}); hora goes by the host ids: set HORA_HOST_ID where they are wrong`);
}

/** Aborts in-flight collectives when the launcher says the job is over, or when the launcher is gone. */
function watchControl(w: World, launch: LaunchInfo): void {
  const comm = w.dispatcher?.comm;
  if (!w.control || !comm) return;
  w.control.onAbort((a) => {
    comm.abort(a.code || 'ERR_PEER_LOST', `the job was aborted${a.rank >= 0 ? ` because of rank ${a.rank}` : ''}: ${a.reason}`, a.rank);
  });
  if (launch.source === 'hora') {
    // The launcher owns the job: when it is gone (killed, even with SIGKILL, or its host lost), nobody
    // will collect this worker, so after failing what is pending it leaves instead of running on as an
    // orphan. The second's grace lets rejections be handled and logged.
    w.control.onClose(() => {
      comm.abort('ERR_PEER_LOST', 'lost the connection to the hora launcher');
      if (joinedWorld() !== w) return;
      process.stderr.write(`hora: rank ${w.rank}: lost the connection to the hora launcher (it exited or was killed); exiting\n`);
      setTimeout(() => process.exit(1), 1000).unref();
    });
  }
}

/**
 * Leaves the job: waits for outstanding collectives, stops the communication thread and closes every
 * connection. A process that exits without calling it leaves nothing behind either.
 */
export async function shutdown(): Promise<void> {
  if (initializing) await initializing.catch(() => undefined);
  const w = endWorld();
  if (!w) return;
  if (w.dispatcher) {
    // Wait for outstanding collectives without blocking the event loop; close() then finds the queue
    // empty and only joins an idle thread.
    await w.dispatcher.drain();
    w.dispatcher.timeline?.close();
    closeQuietly(w.dispatcher.comm);
  }
  stopReporting();
  w.control?.close();
  if (w.server) await w.server.close();
  // An elastic worker's timeline outlives its worlds (the last may have had no communicator).
  leaveElastic();
}
