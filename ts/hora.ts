/**
 * The public API: joining a job, the topology, the collectives, and point-to-point messages.
 *
 * Validation happens here, on the calling rank, and an invalid call is still sent to the engine as a
 * placeholder so that the other ranks fail the same collective with ERR_INVALID_ARGUMENT instead of
 * waiting for it: the order of collectives stays aligned and nothing after it is lost.
 *
 * A collective given a hora.cuda.DeviceBuffer submits a device item (see ts/native.ts) and answers with
 * device memory: any new buffer is allocated here, before submission, except an allgather's, which the
 * engine allocates. The buffers are lent to the engine until the work settles (free() refuses meanwhile).
 *
 * send and recv have no order across ranks to keep, so a bad call fails on its own rank only (the
 * returned Work is rejected) and nothing reaches the engine.
 */
import { advertiseAddress, connectTimeoutS, makeLogger, readSettings, readTopologyText, resolveLaunch, HoraSettings, LaunchInfo } from './config';
import type { Peer } from './control/messages';
import { register, registerElastic, RendezvousConnection } from './control/client';
import { ElasticEvent, Membership, MembershipEvent, PeerTable } from './control/messages';
import { RendezvousServer } from './control/server';
import { DeviceBuffer, adoptDevicePointer, collectivePointer, deviceAlloc, deviceCopy, hostArray, lend } from './device-buffer';
import { CallSite, HoraError, KnownOptions, checkOptionKeys, describeValue, invalidArgument, knownOptions } from './errors';
import { loadNative } from './loader';
import {
  ALGORITHM_NAMES, DTYPE_OF_NAME, NativeAlgorithm, NativeCommunicator, NativeEstimate, NativeDType, NativeItem, NativeKeptConnections,
  NativeKind, NativeOp, NativeResult, NativeTransport, OP_NAMES, lookupName, valueOfName, valuesOf,
} from './native';
import type {
  AllgatherOptions, AllreduceOptions, BarrierOptions, BroadcastOptions, CollectiveInput, DType, InitOptions, ReduceOp,
  RecvOptions, ReduceScatterOptions, SendOptions, Tensor,
} from './types';
import { startReporting, stopReporting } from './stats';
import { openTimeline, TimelineWriter } from './timeline';
import { JOB_FINISHED_REFUSAL } from './control/membership';
import { Dispatcher, invalidItem, Work } from './work';
import { Lend } from './lend';

export interface Topology {
  rank: number;
  size: number;
  localRank: number;
  localSize: number;
  crossRank: number;
  crossSize: number;
}

/**
 * Where a collective runs: the world, or a process group. rank and size are the scope's own (group ranks
 * inside a group); errors carry self, this process's world rank.
 */
export interface Scope {
  rank: number;
  size: number;
  self: number;
  /** null for a world of one: collectives return their input without touching native code. */
  dispatcher: Dispatcher | null;
  /** The engine's group id (native/src/engine/group.h); 0: the world. */
  group: number;
  /** World rank of each rank of the scope; null for the world. */
  members: readonly number[] | null;
  /** How calls are named in errors: 'allreduce' (hora.allreduce) or 'group.allreduce'. */
  prefix: string;
}

export interface World extends Topology, Scope {
  control: RendezvousConnection | null;
  server: RendezvousServer | null;
  /** The GPU of this rank's first device collective; the engine sets its paths up for that one (-1: none yet). */
  gpu?: number;
  /** newGroup calls so far: the next group's id is one more (the same on every rank). */
  groupsMade: number;
  /** An elastic job's world (hora run --min-np): which generation, from 0, and each rank's worker id. */
  elastic?: { generation: number; workers?: number[] };
}

let world: World | null = null;
let initializing: Promise<void> | null = null;
let shutDown = false;

const OPS = valueOfName(OP_NAMES) as Record<ReduceOp, NativeOp>;
const OP_LIST = valuesOf(OP_NAMES).map((op) => `'${op}'`).join(', ');
const ALGORITHMS = valueOfName(ALGORITHM_NAMES) as Record<string, NativeAlgorithm>;
const LOG_LEVELS: Record<string, number> = { WARN: 0, INFO: 1, TRACE: 2 };

// The options each call takes (ts/types.ts); any other key is refused (checkOptionKeys).
const INIT_OPTIONS = knownOptions<InitOptions>({ timeoutSeconds: true, fusionMB: true, algorithm: true, transport: true });
const ALLREDUCE_OPTIONS = knownOptions<AllreduceOptions>({
  op: true, name: true, inplace: true, dtype: true, prescaleFactor: true, postscaleFactor: true,
});
const BROADCAST_OPTIONS = knownOptions<BroadcastOptions>({ root: true, name: true, inplace: true, dtype: true });
const ALLGATHER_OPTIONS = knownOptions<AllgatherOptions>({ name: true, dtype: true });
const REDUCE_SCATTER_OPTIONS = knownOptions<ReduceScatterOptions>({
  op: true, name: true, dtype: true, prescaleFactor: true, postscaleFactor: true,
});
const BARRIER_OPTIONS = knownOptions<BarrierOptions>({ name: true });
const SEND_OPTIONS = knownOptions<SendOptions>({ to: true, tag: true, dtype: true });
const RECV_OPTIONS = knownOptions<RecvOptions>({ from: true, tag: true, dtype: true, count: true });

/**
 * Joins the job described by the environment: `hora run` (HORA_*), mpirun (OMPI_COMM_WORLD_*, PMI_*),
 * Slurm, or torchrun-style variables (rank 0 then hosts the rendezvous). With none of them the process
 * is a world of one, where every collective returns its input. Calling it again is harmless.
 */
export function init(options: InitOptions = {}): Promise<void> {
  if (world) return Promise.resolve();
  if (shutDown) return Promise.reject(new HoraError('ERR_SHUTDOWN', 'hora.init: hora was shut down in this process; it cannot be initialized again'));
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
  if (settings.elastic) return joinElastic(options, launch, settings);
  if (launch.size === 1) {
    world = {
      rank: 0, size: 1, localRank: 0, localSize: 1, crossRank: 0, crossSize: 1, dispatcher: null, control: null, server: null,
      ...worldScope(0), groupsMade: 0,
    };
    return;
  }
  const timeoutMs = Math.round(1000 * (options.timeoutSeconds ?? settings.timeoutS));
  const fusionBytes = Math.round((options.fusionMB ?? settings.fusionMb) * 1024 * 1024);
  const algorithm = ALGORITHMS[options.algorithm ?? settings.algo];
  const transportName = options.transport ?? settings.transport;
  // 'shm' is 'auto' on a job that has passed requireOneHost: every pair then shares memory.
  const transport = transportName === 'tcp' ? NativeTransport.Tcp : NativeTransport.Auto;

  const addon = loadNative();
  const dataAddr = advertiseAddress(settings, launch.rendezvousAddr);
  const dispatcher = new Dispatcher(addon, (onComplete) => new addon.Communicator({
    rank: launch.rank, size: launch.size, timeoutMs, fusionBytes, algorithm, transport,
    bindHost: dataAddr, secret: launch.secret as string, logLevel: LOG_LEVELS[settings.debug] ?? 0,
    grid: settings.topology, costLocal: settings.costLocal, costCross: settings.costCross,
    timeline: settings.timeline !== undefined,
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
    world = {
      rank: self.rank, size: reg.table.size, localRank: self.localRank, localSize: self.localSize,
      crossRank: self.crossRank, crossSize: self.crossSize, dispatcher, control, server, ...worldScope(self.rank), groupsMade: 0,
    };
    watchControl(world, launch);
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

// ---------------------------------------------------------------------------------------------------
// Elastic worlds (hora run --min-np; docs/elastic.md). The launcher's server assigns each world's ranks
// (ts/control/membership.ts); a world is a native Communicator of its own, made anew at each re-forming,
// so the native core never changes size under a running engine.

/** What every world of an elastic job is made with. */
interface ElasticParams {
  addon: ReturnType<typeof loadNative>;
  settings: HoraSettings;
  timeoutMs: number;
  fusionBytes: number;
  algorithm: NativeAlgorithm;
  transport: NativeTransport;
  dataAddr: string;
  secret: string;
  control: RendezvousConnection;
  /** HORA_TIMELINE: one file per worker (named by its worker id), across the worlds it is in. */
  timeline: TimelineWriter | null;
  /** The connections the last world left for the next one; the next connect takes them. */
  kept: KeptWorld | null;
}

/**
 * The connections of an ended elastic world, held for the next: the next world takes over the pairs
 * between survivors instead of connecting anew (docs/elastic.md). A pair is taken over only when both of
 * its workers hold the same world's connections, which each says in its LISTENING report.
 */
interface KeptWorld {
  handle: NativeKeptConnections;
  generation: number;
  /** Worker id by rank in that world. */
  workers: number[];
}

/** An elastic worker's heartbeat to the launcher, and the silence after which it takes the launcher as lost. */
const ELASTIC_HEARTBEAT_MS = 2000;
const ELASTIC_LAUNCHER_SILENT_MS = 15_000;

let elasticParams: ElasticParams | null = null;
/** Inside hora.elastic.run: collectives are allowed. */
let elasticRunning = false;

async function joinElastic(options: InitOptions, launch: LaunchInfo, settings: HoraSettings): Promise<void> {
  if (launch.source !== 'hora' || !(launch.launcherHostsServer || launch.elasticService)) {
    throw new HoraError('ERR_INVALID_ARGUMENT', 'hora.init: HORA_ELASTIC=1 needs a job started by `hora run --min-np`, or a `hora rendezvous` service, to re-form the world');
  }
  const timeoutMs = Math.round(1000 * (options.timeoutSeconds ?? settings.timeoutS));
  const transportName = options.transport ?? settings.transport;
  const addon = loadNative();
  const dataAddr = advertiseAddress(settings, launch.rendezvousAddr);
  const reg = await registerElastic({
    addr: launch.rendezvousAddr as string, port: launch.rendezvousPort as number, secret: launch.secret as string,
    rank: -1, hostId: settings.hostId, dataAddr, dataPort: 0, timeoutMs,
    connectTimeoutMs: Math.round(1000 * connectTimeoutS(settings, launch, timeoutMs / 1000)),
    addrSource: launch.rendezvousAddrSource, unreachableHint: unreachableHint(launch), log: makeLogger('init', settings.debug),
    elasticWorkerId: settings.workerId ?? 0,
  }).catch((e: Error & { code?: string }) => {
    if (e.code === 'ERR_SHUTDOWN' && e.message.includes(JOB_FINISHED_REFUSAL)) {
      // Started to refill a slot, but the training finished first: nothing is left to do.
      process.stderr.write(`hora: elastic worker ${settings.workerId ?? 0}: the job finished before this worker could join; exiting\n`);
      process.exit(0);
    }
    throw new HoraError(e.code ?? 'ERR_INTERNAL', `hora.init (elastic worker ${settings.workerId ?? 0}): ${e.message}`);
  });
  const worker = settings.workerId ?? process.pid;
  const params: ElasticParams = {
    addon, settings, timeoutMs, dataAddr, secret: launch.secret as string, control: reg.connection,
    timeline: settings.timeline
      ? openTimeline(settings.timeline, worker, addon.clocks(), () => ({ rows: new Float64Array(0), strings: [] }), `worker ${worker}`)
      : null,
    fusionBytes: Math.round((options.fusionMB ?? settings.fusionMb) * 1024 * 1024),
    algorithm: ALGORITHMS[options.algorithm ?? settings.algo],
    transport: transportName === 'tcp' ? NativeTransport.Tcp : NativeTransport.Auto,
    kept: null,
  };
  elasticParams = params;
  watchElasticControl(params.control);
  params.control.startHeartbeat(ELASTIC_HEARTBEAT_MS, ELASTIC_LAUNCHER_SILENT_MS);
  try {
    world = await openElasticWorld(params, reg.assignment);
  } catch (e) {
    // The world ended while it formed (a worker lost meanwhile): the next one is made inside elastic.run.
    if (!(e instanceof HoraError) || e.code !== 'ERR_PEER_LOST' || params.control.endedGeneration < reg.assignment.generation) {
      params.control.close();
      throw e;
    }
    world = await reformElasticWorld(reg.assignment.generation, `world ${reg.assignment.generation} ended while it formed`);
  }
}

/** Builds world `a.generation`: listens, tells the server where, waits for the table, connects. */
async function openElasticWorld(p: ElasticParams, a: Membership): Promise<World> {
  const ended = (m: Membership | undefined) => m?.event === MembershipEvent.Ended && m.generation >= a.generation;
  const endedError = (m: Membership) => new HoraError('ERR_PEER_LOST', `world ${a.generation} ended while it formed: ${m.reason}`, a.rank);
  const scope = { ...worldScope(a.rank), groupsMade: 0, elastic: { generation: a.generation }, control: p.control, server: null };
  if (a.size === 1) {
    // Alone: nothing to take over, now or later (workers that join later are new).
    p.kept = null;
    const table = p.control.next(({ membership, table }) => {
      if (membership && ended(membership)) throw endedError(membership);
      if (!table || (table.generation ?? 0) !== a.generation) return undefined;
      // A GROW for this world can only come after its table: what came before was for an older one.
      p.control.growPending = false;
      return table;
    });
    p.control.report(ElasticEvent.Listening, a.generation, { dataAddr: p.dataAddr, dataPort: 0 });
    await table;
    return { rank: 0, size: 1, localRank: 0, localSize: 1, crossRank: 0, crossSize: 1, dispatcher: null, ...scope };
  }
  const grid = p.settings.topology.reduce((x, y) => x * y, 1) === a.size ? p.settings.topology : [];
  const dispatcher = new Dispatcher(p.addon, (onComplete) => new p.addon.Communicator({
    rank: a.rank, size: a.size, timeoutMs: p.timeoutMs, fusionBytes: p.fusionBytes, algorithm: p.algorithm, transport: p.transport,
    bindHost: p.dataAddr, secret: p.secret, logLevel: LOG_LEVELS[p.settings.debug] ?? 0,
    grid, costLocal: p.settings.costLocal, costCross: p.settings.costCross, timeline: p.timeline !== null, elastic: true,
  }, onComplete), a.rank, p.fusionBytes, p.settings.callSites);
  const comm = dispatcher.comm;
  if (p.timeline) {
    dispatcher.timeline = p.timeline;
    p.timeline.nextWorld(() => comm.takeTimeline(), { generation: a.generation, rank: a.rank, size: a.size });
  }
  let endedWhileConnecting: ((m: Membership) => void) | null = null;
  const onMembership = (m: Membership) => {
    if (ended(m)) endedWhileConnecting?.(m);
  };
  p.control.on('membership', onMembership);
  try {
    const tableWait = p.control.next<PeerTable>(({ membership, table }) => {
      if (membership && ended(membership)) throw endedError(membership);
      if (!table || (table.generation ?? 0) !== a.generation) return undefined;
      // A GROW for this world can only come after its table: what came before was for an older one.
      p.control.growPending = false;
      return table;
    });
    const port = comm.listen();
    const keptWorld = p.kept ? p.kept.generation + 1 : 0;
    p.control.report(ElasticEvent.Listening, a.generation, { dataAddr: p.dataAddr, dataPort: port, keptWorld });
    const table = await tableWait;
    // The connect takes the kept connections, whether or not it succeeds: a later world connects anew.
    const kept = p.kept;
    p.kept = null;
    const workerOf = (r: number) => table.workerIds?.[r] ?? 0;
    const takeOver = (q: Peer) => (kept && keptWorld !== 0 && q.rank !== a.rank && table.keptWorlds?.[q.rank] === keptWorld
      ? kept.workers.indexOf(workerOf(q.rank)) : -1);
    const peers = table.peers.map((q) => ({
      rank: q.rank, hostId: q.hostId, addr: q.dataAddr, port: q.dataPort, localRank: q.localRank, keptRank: takeOver(q),
    }));
    const connecting = dispatcher.track((r: NativeResult) => r, new CallSite(join), (id) => comm.connect(id, peers, table.jobId, kept?.handle));
    // When the world ends meanwhile (a peer died), the abort makes the native connect give up within a
    // second; the communicator is closed once it has, while this process goes on to the next world.
    const endedNow = new Promise<never>((_, reject) => {
      endedWhileConnecting = (m) => reject(endedError(m));
      if (p.control.endedGeneration >= a.generation) reject(endedError({ reason: 'a worker was lost' } as Membership));
    });
    try {
      await Promise.race([connecting, endedNow]);
    } catch (e) {
      abortQuietly(comm, 'ERR_PEER_LOST', (e as Error).message);
      connecting.then(() => closeQuietly(comm), () => closeQuietly(comm));
      throw e;
    }
    const self = table.peers[a.rank];
    dispatcher.peerPlaces = table.peers.map((q) => `host ${q.hostId}, pid ${q.pid}`);
    const w: World = {
      rank: a.rank, size: a.size, localRank: self.localRank, localSize: self.localSize, crossRank: self.crossRank, crossSize: self.crossSize,
      dispatcher, ...scope, elastic: { generation: a.generation, workers: table.peers.map((q) => workerOf(q.rank)) },
    };
    startReporting(dispatcher.stats, (stats) => p.control.send({ kind: 'stats', ...stats }));
    if (p.control.endedGeneration >= a.generation) abortQuietly(comm, 'ERR_PEER_LOST', `world ${a.generation} ended as it formed`);
    return w;
  } catch (e) {
    if (!(e instanceof HoraError && e.code === 'ERR_PEER_LOST')) closeQuietly(comm);
    if (e instanceof HoraError) throw e;
    const err = e as Error & { code?: string };
    throw new HoraError(err.code ?? 'ERR_INTERNAL', `hora: forming world ${a.generation}: ${err.message}`, a.rank);
  } finally {
    p.control.off('membership', onMembership);
  }
}

// A closed communicator's native state is gone: abort() on it would touch freed memory.
const closedComms = new WeakSet<NativeCommunicator>();

function abortQuietly(comm: NativeCommunicator | undefined, code: string, message: string, peer = -1): void {
  if (comm && !closedComms.has(comm)) comm.abort(code, message, peer);
}

function closeQuietly(comm: NativeCommunicator, keep = false): NativeKeptConnections | undefined {
  if (closedComms.has(comm)) return undefined;
  closedComms.add(comm);
  try {
    return comm.close(keep ? { keep } : undefined);
  } catch { /* already closed */ }
  return undefined;
}

/** Aborts the world's collectives when the server ends it; leaves when the launcher is gone. */
function watchElasticControl(control: RendezvousConnection): void {
  control.on('membership', (m: Membership) => {
    const w = world;
    if (m.event !== MembershipEvent.Ended || !w?.elastic || w.elastic.generation !== m.generation) return;
    abortQuietly(w.dispatcher?.comm, 'ERR_PEER_LOST', `the world re-forms${m.lostRank >= 0 ? ` without rank ${m.lostRank}` : ''}: ${m.reason}`, m.lostRank);
  });
  control.onAbort((a) => {
    abortQuietly(world?.dispatcher?.comm, a.code || 'ERR_PEER_LOST', `the job was aborted${a.rank >= 0 ? ` because of rank ${a.rank}` : ''}: ${a.reason}`);
  });
  control.onClose((err) => {
    abortQuietly(world?.dispatcher?.comm, 'ERR_PEER_LOST', 'lost the connection to the hora launcher');
    const why = err?.message ?? 'it exited or was killed';
    process.stderr.write(`hora: elastic worker: lost the connection to the hora launcher (${why}); exiting\n`);
    setTimeout(() => process.exit(1), 1000).unref();
  });
}

/**
 * @internal For hora.elastic.run: leaves world `generation` (its collectives fail at once, its
 * communicator closes although its peers may be dead) and joins the next one the launcher forms.
 * Worlds that end while they form are passed over. Resolves once this process is in a new world.
 */
export async function reformElasticWorld(generation: number, reason: string): Promise<World> {
  const p = elasticParams;
  if (!p) throw new HoraError('ERR_INTERNAL', 'hora.elastic: not an elastic job');
  const old = world;
  if (old?.dispatcher && old.elastic?.generation === generation) {
    stopReporting();
    abortQuietly(old.dispatcher.comm, 'ERR_PEER_LOST', `the world re-forms: ${reason}`);
    // Outstanding works settle (rejected) before the communicator goes: their completions touch it.
    await old.dispatcher.drain();
    // What the engine completed in this world goes to the timeline before its communicator closes.
    old.dispatcher.timeline?.flush();
    // The connections between survivors are kept for the next world to take over.
    const handle = closeQuietly(old.dispatcher.comm, true);
    p.kept = handle && old.elastic.workers ? { handle, generation, workers: old.elastic.workers } : null;
  }
  for (;;) {
    const assigned = p.control.next<Membership>(({ membership }) => (membership?.event === MembershipEvent.Assign ? membership : undefined));
    p.control.report(ElasticEvent.Rejoin, generation, { reason });
    // The wait may be long (below --min-np the launcher waits for workers): say so now and then.
    const since = Date.now();
    const log = makeLogger('elastic', p.settings.debug);
    const waiting = setInterval(() => log('WARN', `worker ${p.settings.workerId ?? 0}: still waiting, after ` +
      `${Math.round((Date.now() - since) / 1000)} s, for the launcher to form the world after world ${generation} (its log says why)`), 10_000);
    const a = await assigned.catch((e: Error & { code?: string }) => {
      throw new HoraError(e.code ?? 'ERR_PEER_LOST', `hora.elastic: waiting for the next world: ${e.message}`);
    }).finally(() => clearInterval(waiting));
    try {
      world = await openElasticWorld(p, a);
      return world;
    } catch (e) {
      if (!(e instanceof HoraError) || e.code !== 'ERR_PEER_LOST') throw e;
      generation = a.generation;
      reason = e.message;
    }
  }
}

/** @internal For hora.elastic.run. */
export function elasticState(): { control: RendezvousConnection; world: World } | null {
  return elasticParams && world ? { control: elasticParams.control, world } : null;
}

/** @internal For hora.elastic.run: collectives are allowed while it runs. */
export function setElasticRunning(on: boolean): void {
  elasticRunning = on;
}

function worldScope(self: number): Pick<Scope, 'self' | 'group' | 'members' | 'prefix'> {
  return { self, group: 0, members: null, prefix: '' };
}

/** What the user can change when the rendezvous server cannot be reached; who chose its address differs. */
function unreachableHint(launch: LaunchInfo): string {
  if (launch.elasticService) {
    return 'Check that `hora rendezvous` runs and that HORA_RENDEZVOUS_ADDR and HORA_RENDEZVOUS_PORT name its service ' +
      '(in Kubernetes, the Service in front of its pod); raise HORA_CONNECT_TIMEOUT_S if it starts much later than the workers.';
  }
  if (launch.launcherHostsServer) {
    return 'If the launcher\'s address is on a network this host is not on, start `hora run` with --iface naming the launcher\'s ' +
      'interface on the hosts\' network.';
  }
  return 'Set HORA_RENDEZVOUS_ADDR (or MASTER_ADDR) to an address of rank 0\'s host that every host reaches, and make sure rank 0 ' +
    'calls hora.init(): it hosts the server. Raise HORA_CONNECT_TIMEOUT_S if rank 0 starts much later than the others.';
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
      if (world !== w) return;
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
  const w = world;
  world = null;
  shutDown = true;
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
  elasticParams?.timeline?.close();
  elasticParams = null;
}

/** @internal */
export function current(collective: string): World {
  if (world) return world;
  if (shutDown) throw new HoraError('ERR_SHUTDOWN', `hora.${collective}: hora was shut down`);
  throw new HoraError('ERR_NOT_INITIALIZED', `hora.${collective}: call 'await hora.init()' first`);
}

/** This process's rank in the job, 0 <= rank() < size(). */
export function rank(): number { return current('rank').rank; }
/** Number of processes in the job. */
export function size(): number { return current('size').size; }
/** Rank among the processes on this host. */
export function localRank(): number { return current('localRank').localRank; }
/** Number of processes on this host. */
export function localSize(): number { return current('localSize').localSize; }
/** Index of this host among the job's hosts. */
export function crossRank(): number { return current('crossRank').crossRank; }
/** Number of hosts in the job. */
export function crossSize(): number { return current('crossSize').crossSize; }
/** True once init() has completed and shutdown() has not been called. */
export function isInitialized(): boolean { return world !== null; }

// ---------------------------------------------------------------------------------------------------
// Validation helpers.

const TYPE_LIST = 'a Float32Array, Float64Array, Int32Array, BigInt64Array, Uint8Array, Uint16Array (with dtype float16 or bfloat16) ' +
  'or hora.cuda.DeviceBuffer';

function dtypeOf(collective: string, x: unknown, dtype: unknown, rank: number): NativeDType {
  // The typed arrays first: they are the usual input, and each test of an instanceof walks x's prototypes.
  let natural: NativeDType | undefined;
  if (x instanceof Float32Array) natural = NativeDType.Float32;
  else if (x instanceof Float64Array) natural = NativeDType.Float64;
  else if (x instanceof Int32Array) natural = NativeDType.Int32;
  else if (x instanceof BigInt64Array) natural = NativeDType.Int64;
  else if (x instanceof Uint8Array) natural = NativeDType.Uint8;
  else if (x instanceof Uint16Array) {
    if (dtype === 'float16') return NativeDType.Float16;
    if (dtype === 'bfloat16') return NativeDType.BFloat16;
    throw invalidArgument(collective, 'options.dtype', "'float16' or 'bfloat16' for a Uint16Array", dtype, rank);
  } else if (x instanceof DeviceBuffer) {
    return deviceDtypeOf(collective, x, dtype, rank);
  } else {
    throw invalidArgument(collective, 'x', TYPE_LIST, x, rank);
  }
  if (dtype !== undefined && DTYPE_OF_NAME[dtype as DType] !== natural) {
    throw invalidArgument(collective, 'options.dtype', `undefined or the array's own type`, dtype, rank);
  }
  const view = x as ArrayBufferView;
  if (view.byteLength === 0 && view.buffer.byteLength === 0) {
    try {
      new Uint8Array(view.buffer);
    } catch {
      throw new HoraError('ERR_INVALID_ARGUMENT',
        `hora.${collective}: argument 'x' must be an array whose buffer is not detached; received ${x.constructor.name} over a detached ArrayBuffer`, rank);
    }
  }
  return natural;
}

function deviceDtypeOf(collective: string, x: DeviceBuffer, dtype: unknown, rank: number): NativeDType {
  collectivePointer(collective, x, rank);
  if (dtype !== undefined && dtype !== x.dtype) {
    throw invalidArgument(collective, 'options.dtype', `undefined or the DeviceBuffer's own dtype ('${x.dtype}')`, dtype, rank);
  }
  // One GPU per rank, as in Horovod: the engine's streams, IPC and NCCL state belong to the device of
  // the first device collective.
  const w = world;
  if (w?.dispatcher) {
    if (w.gpu === undefined) w.gpu = x.device;
    else if (x.device !== w.gpu) {
      throw invalidArgument(collective, 'x', `a DeviceBuffer on device ${w.gpu}, the GPU of this rank's earlier ` +
        'device collectives (hora runs one GPU per rank)', x, rank);
    }
  }
  return DTYPE_OF_NAME[x.dtype];
}

function optionsObject<T extends object>(collective: string, options: unknown, known: KnownOptions, rank: number): Partial<T> {
  if (options === undefined) return {};
  if (options === null || typeof options !== 'object') throw invalidArgument(collective, 'options', 'an object', options, rank);
  checkOptionKeys(collective, options, known, rank);
  return options as Partial<T>;
}

/**
 * prescaleFactor and postscaleFactor of an allreduce or reducescatter of x (dtype): [pre, post], or
 * undefined when both are 1. Float dtypes of host memory only: the device kernels do not scale yet.
 */
function scaleOf(collective: string, o: Partial<AllreduceOptions>, x: unknown, dtype: NativeDType, rank: number): [number, number] | undefined {
  const pre = factorOf(collective, 'prescaleFactor', o.prescaleFactor, rank);
  const post = factorOf(collective, 'postscaleFactor', o.postscaleFactor, rank);
  if (pre === 1 && post === 1) return undefined;
  const key = pre !== 1 ? 'prescaleFactor' : 'postscaleFactor';
  if (dtype !== NativeDType.Float32 && dtype !== NativeDType.Float64 && dtype !== NativeDType.Float16 && dtype !== NativeDType.BFloat16) {
    throw invalidArgument(collective, `options.${key}`, '1 or absent for an integer dtype (the factors scale float32, float64, ' +
      `float16 and bfloat16 data; x is ${describeValue(x)})`, o[key], rank);
  }
  if (!ArrayBuffer.isView(x)) {
    throw invalidArgument(collective, `options.${key}`, '1 or absent for a hora.cuda.DeviceBuffer (the device kernels do not scale yet: ' +
      'pass a host array, or scale on the device before and after)', o[key], rank);
  }
  return [pre, post];
}

function factorOf(collective: string, key: string, v: unknown, rank: number): number {
  if (v === undefined) return 1;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw invalidArgument(collective, `options.${key}`, 'a finite number', v, rank);
  return v;
}

/** A world of one's result with factors: nothing is combined, x is scaled alone (native, as a group of one is). */
function scaledAlone<T extends Tensor>(x: T, dtype: NativeDType, scale: [number, number] | undefined): T {
  if (scale) loadNative().scaleAlone(x, dtype, scale[0], scale[1]);
  return x;
}

function opOf(collective: string, op: unknown, fallback: ReduceOp, rank: number): NativeOp {
  const name = op === undefined ? fallback : op;
  const v = lookupName(OPS, name);
  if (v === undefined) throw invalidArgument(collective, 'options.op', `one of ${OP_LIST}`, op, rank);
  return v;
}

function nameOf(collective: string, name: unknown, rank: number): string {
  if (name === undefined) return '';
  if (typeof name !== 'string') throw invalidArgument(collective, 'options.name', 'a string', name, rank);
  return name;
}

function booleanOf(collective: string, key: string, v: unknown, rank: number): boolean {
  if (v === undefined) return false;
  if (typeof v !== 'boolean') throw invalidArgument(collective, `options.${key}`, 'a boolean', v, rank);
  return v;
}

function copyOf<T extends Tensor>(x: T): T {
  return x.slice() as T;
}

/** The item for a collective on device memory: x's, and out for a reducescatter's block. */
function deviceItem(kind: NativeKind, op: NativeOp, dtype: NativeDType, root: number, name: string, x: DeviceBuffer,
  out: DeviceBuffer | null = null): Omit<NativeItem, 'id'> {
  const item: Omit<NativeItem, 'id'> = {
    kind, op, dtype, root, algorithm: NativeAlgorithm.Auto, name, data: null, out: null,
    device: x.device, devicePtr: x.pointer, count: x.count, stream: x.stream,
  };
  if (out) item.outPtr = out.pointer;
  return item;
}

function blockRange(count: number, size: number, block: number): [number, number] {
  const base = Math.floor(count / size), extra = count % size;
  const start = (b: number) => b * base + Math.min(b, extra);
  return [start(block), start(block + 1)];
}

// In an elastic job the world may re-form under any collective; only hora.elastic.run can roll the
// state back and go on, so collectives outside it would be lost in a re-forming.
function requireElasticRun(w: Scope, call: string): void {
  if (elasticParams === null) return;
  if (w.dispatcher && closedComms.has(w.dispatcher.comm)) {
    throw new HoraError('ERR_PEER_LOST', `hora.${w.prefix}${call}: this ${w.members ? 'group' : 'world'} belongs to a world that has ` +
      're-formed since; make process groups again in a state.onReset callback', w.self);
  }
  if (elasticRunning) return;
  throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${w.prefix}${call}: this is an elastic job (hora run --min-np): collectives run ` +
    'inside hora.elastic.run(state, fn), which restores the state and re-forms the world when a worker is lost; call it there', w.self);
}

/** @internal */
export type Plan<T> = {
  item: Omit<NativeItem, 'id'>;
  /** The call's result from the engine's; null: `value` (an array reduced or received in place). */
  finish: ((r: NativeResult) => T) | null;
  /** What the engine points into, referenced until completion; null: `value`. */
  keep: unknown[] | null;
  /** The result in a world of one; null: `value`. */
  local: (() => T) | null;
  value?: T;
  /** What the engine does with item.data when it is the user's array (ts/lend.ts); absent: it is hora's, or none. */
  lends?: Lend;
};

/**
 * Runs one collective: validates through `plan` (which throws HoraError on bad input), then either
 * answers locally (world of one) or submits to the engine. Invalid input still reaches the engine as a
 * placeholder so every rank fails this collective together; it carries the call's name (b.name, when b,
 * the call's options, has a string there), so that a batch ordered by name keeps its order on every rank.
 */
/** @internal */
export function run<T, A = undefined, B = undefined>(
  scope: Scope | null, collective: string, callee: Function, plan: (w: Scope, a: A, b: B) => Plan<T>, a?: A, b?: B,
): Work<T> {
  const w = scope ?? current(collective);
  requireElasticRun(w, collective);
  // A world of one completes here and now: its call site is wanted only for a bad call, and taking it
  // (2-3 µs) on every call made its collectives slower than a world of two's.
  const site = w.dispatcher ? w.dispatcher.callSite(callee) : CallSite.none;
  let p: Plan<T>;
  try {
    // The call's arguments travel beside the plan rather than in a closure made for each call.
    p = plan(w, a as A, b as B);
  } catch (e) {
    const err = e instanceof HoraError ? e : new HoraError('ERR_INVALID_ARGUMENT', String(e), w.self);
    (w.dispatcher ? site : new CallSite(callee)).attach(err);
    if (w.dispatcher) submitInvalid(w.dispatcher, err.message, site, w.group, nameOfFailed(b));
    const failed = new Work<T>(null);
    failed.reject(err);
    return failed;
  }
  if (!w.dispatcher) {
    const done = new Work<T>(null);
    done.fulfil(p.local !== null ? p.local() : p.value as T);
    return done;
  }
  const work = w.dispatcher.submit(w.group ? { ...p.item, group: w.group } : p.item, p.finish, site, p.keep ?? p.value, p.value, p.lends);
  if (p.item.device !== undefined && p.keep !== null) for (const k of p.keep) if (k instanceof DeviceBuffer) work.onSettled(lend(k));
  return work;
}

// ---------------------------------------------------------------------------------------------------
// Collectives. Each returns a Work: await it, or call wait() to block until it completes.

/**
 * Reduces x element-wise across all ranks (default op 'avg'). Returns a new array with the result, or x
 * itself with `inplace: true`. Every rank receives identical bytes. A DeviceBuffer gives a new DeviceBuffer
 * on the same device and stream (or x itself with `inplace: true`).
 */
export function allreduce<T extends CollectiveInput>(x: T, options?: AllreduceOptions): Work<T> {
  return run(null, 'allreduce', allreduce, planAllreduce<T>, x, options);
}

/** @internal */
export function allreducePlan<T extends CollectiveInput>(x: T, options?: AllreduceOptions): (w: Scope) => Plan<T> {
  return (w) => planAllreduce(w, x, options);
}

function planAllreduce<T extends CollectiveInput>(w: Scope, x: T, options?: AllreduceOptions): Plan<T> {
  const c = w.prefix + 'allreduce';
  const o = optionsObject<AllreduceOptions>(c, options, ALLREDUCE_OPTIONS, w.self);
  const dtype = dtypeOf(c, x, o.dtype, w.self);
  const op = opOf(c, o.op, 'avg', w.self);
  const name = nameOf(c, o.name, w.self);
  const inplace = booleanOf(c, 'inplace', o.inplace, w.self);
  const scale = o.prescaleFactor === undefined && o.postscaleFactor === undefined ? undefined : scaleOf(c, o, x, dtype, w.self);
  // dtypeOf took x: a typed array or else a DeviceBuffer (a test cheaper than instanceof's walk).
  if (!ArrayBuffer.isView(x)) {
    const out = (inplace ? x : deviceCopy(c, x as DeviceBuffer)) as T & DeviceBuffer;
    return { item: deviceItem(NativeKind.Allreduce, op, dtype, 0, name, out), finish: null, keep: [out], local: null, value: out };
  }
  const out = inplace ? x : copyOf(x as Tensor) as T;
  const item: Omit<NativeItem, 'id'> = {
    kind: NativeKind.Allreduce, op, dtype, root: 0, algorithm: NativeAlgorithm.Auto, name, data: out as Tensor, out: null,
  };
  if (scale) {
    item.scale = scale;
    if (!w.dispatcher) scaledAlone(out as Tensor, dtype, scale);
  }
  return { item, finish: null, keep: null, local: null, value: out, lends: inplace ? Lend.ReadsWrites : Lend.None };
}

/**
 * Sends root's x to every rank. Returns a new array (or x itself with `inplace: true`); for a DeviceBuffer, a
 * new DeviceBuffer on the same device and stream (or x itself).
 */
export function broadcast<T extends CollectiveInput>(x: T, options?: BroadcastOptions): Work<T> {
  return run(null, 'broadcast', broadcast, broadcastPlan(x, options), undefined, options);
}

/** @internal */
export function broadcastPlan<T extends CollectiveInput>(x: T, options?: BroadcastOptions): (w: Scope) => Plan<T> {
  return (w) => {
    const c = w.prefix + 'broadcast';
    const o = optionsObject<BroadcastOptions>(c, options, BROADCAST_OPTIONS, w.self);
    const dtype = dtypeOf(c, x, o.dtype, w.self);
    const root = o.root === undefined ? 0 : o.root;
    if (typeof root !== 'number' || !Number.isInteger(root) || root < 0 || root >= w.size) {
      throw invalidArgument(c, 'options.root', `an integer rank from 0 to ${w.size - 1}`, o.root, w.self);
    }
    const name = nameOf(c, o.name, w.self);
    const inplace = booleanOf(c, 'inplace', o.inplace, w.self);
    if (x instanceof DeviceBuffer) {
      const out = (inplace ? x : deviceCopy(c, x)) as T & DeviceBuffer;
      return { item: deviceItem(NativeKind.Broadcast, NativeOp.Sum, dtype, root, name, out), finish: () => out, keep: [out], local: () => out };
    }
    const out = inplace ? x : copyOf(x as Tensor) as T;
    return {
      item: { kind: NativeKind.Broadcast, op: NativeOp.Sum, dtype, root, algorithm: NativeAlgorithm.Auto, name, data: out as Tensor, out: null },
      finish: null, keep: null, local: null, value: out, lends: inplace ? Lend.ReadsWrites : Lend.None,
    };
  };
}

/**
 * Concatenates every rank's x in rank order. Ranks may contribute different lengths. Returns a new array
 * of the same type; for a DeviceBuffer, a new DeviceBuffer on the same device and stream.
 */
export function allgather<T extends CollectiveInput>(x: T, options?: AllgatherOptions): Work<T> {
  return run(null, 'allgather', allgather, allgatherPlan(x, options), undefined, options);
}

/** @internal */
export function allgatherPlan<T extends CollectiveInput>(x: T, options?: AllgatherOptions): (w: Scope) => Plan<T> {
  return (w) => {
    const c = w.prefix + 'allgather';
    const o = optionsObject<AllgatherOptions>(c, options, ALLGATHER_OPTIONS, w.self);
    const dtype = dtypeOf(c, x, o.dtype, w.self);
    const name = nameOf(c, o.name, w.self);
    if (x instanceof DeviceBuffer) {
      const adopt = (r: NativeResult) => {
        if (r.devicePtr === undefined || !r.counts) throw new Error('a device allgather came back without device memory');
        const count = r.counts.reduce((a, b) => a + b, 0);
        return adoptDevicePointer(r.devicePtr, x.dtype, count, x.device, x.stream) as T & DeviceBuffer;
      };
      return {
        item: deviceItem(NativeKind.Allgather, NativeOp.Sum, dtype, 0, name, x), finish: adopt, keep: [x],
        local: () => deviceCopy(c, x) as T & DeviceBuffer,
      };
    }
    const Ctor = x.constructor as new (buffer: ArrayBuffer) => T;
    return {
      item: { kind: NativeKind.Allgather, op: NativeOp.Sum, dtype, root: 0, algorithm: NativeAlgorithm.Auto, name, data: x as Tensor, out: null },
      finish: (r) => new Ctor(r.gathered as ArrayBuffer), keep: [x], local: () => copyOf(x as Tensor) as T, lends: Lend.Reads,
    };
  };
}

/**
 * Reduces x element-wise across ranks (default op 'sum') and returns this rank's block of the result:
 * x is cut into size() blocks, the first x.length % size() of them one element longer. For a DeviceBuffer
 * the block is a new DeviceBuffer on the same device and stream.
 */
export function reduceScatter<T extends CollectiveInput>(x: T, options?: ReduceScatterOptions): Work<T> {
  return run(null, 'reduceScatter', reduceScatter, reduceScatterPlan(x, options), undefined, options);
}

/** @internal */
export function reduceScatterPlan<T extends CollectiveInput>(x: T, options?: ReduceScatterOptions): (w: Scope) => Plan<T> {
  return (w) => {
    const c = w.prefix + 'reduceScatter';
    const o = optionsObject<ReduceScatterOptions>(c, options, REDUCE_SCATTER_OPTIONS, w.self);
    const dtype = dtypeOf(c, x, o.dtype, w.self);
    const op = opOf(c, o.op, 'sum', w.self);
    const name = nameOf(c, o.name, w.self);
    const scale = o.prescaleFactor === undefined && o.postscaleFactor === undefined ? undefined : scaleOf(c, o, x, dtype, w.self);
    if (x instanceof DeviceBuffer) {
      const local = () => deviceCopy(c, x) as T & DeviceBuffer;
      if (!w.dispatcher) return { item: deviceItem(NativeKind.ReduceScatter, op, dtype, 0, name, x), finish: local, keep: [], local };
      const [begin, end] = blockRange(x.count, w.size, w.rank);
      const out = deviceAlloc(c, x.dtype, end - begin, x.device, x.stream) as T & DeviceBuffer;
      return { item: deviceItem(NativeKind.ReduceScatter, op, dtype, 0, name, x, out), finish: () => out, keep: [x, out], local };
    }
    const [begin, end] = blockRange((x as Tensor).length, w.size, w.rank);
    const Ctor = x.constructor as new (length: number) => T;
    const out = new Ctor(end - begin);
    const item: Omit<NativeItem, 'id'> = {
      kind: NativeKind.ReduceScatter, op, dtype, root: 0, algorithm: NativeAlgorithm.Auto, name, data: x as Tensor, out: out as Tensor,
    };
    if (scale) item.scale = scale;
    return { item, finish: () => out, keep: [x, out], local: () => scaledAlone(copyOf(x as Tensor), dtype, scale) as T, lends: Lend.Reads };
  };
}

/** Completes once every rank has called it. */
export function barrier(options?: BarrierOptions): Work<void> {
  return run(null, 'barrier', barrier, barrierPlan(options), undefined, options);
}

/** @internal */
export function barrierPlan(options?: BarrierOptions): (w: Scope) => Plan<void> {
  return (w) => {
    const c = w.prefix + 'barrier';
    const o = optionsObject<BarrierOptions>(c, options, BARRIER_OPTIONS, w.self);
    const name = nameOf(c, o.name, w.self);
    return {
      item: { kind: NativeKind.Barrier, op: NativeOp.Sum, dtype: NativeDType.Uint8, root: 0, algorithm: NativeAlgorithm.Auto, name, data: null, out: null },
      finish: () => undefined, keep: [], local: () => undefined,
    };
  };
}

/**
 * Tells the other ranks that this rank cannot go on (say, its training step threw): takes the next place
 * in the order of collectives, and every other rank's collective at that place fails with
 * ERR_INVALID_ARGUMENT naming this rank and quoting `reason`, instead of waiting for it. No-op in a world
 * of one. Returns once the signal is queued.
 */
export function failPeers(reason: string): void {
  const w = current('failPeers');
  if (typeof reason !== 'string') throw invalidArgument('failPeers', 'reason', 'a string', reason, w.rank);
  if (!w.dispatcher) return;
  submitInvalid(w.dispatcher, reason, new CallSite(failPeers));
  w.dispatcher.flush();
}

/** The placeholder that keeps the ranks in step when this rank's call cannot run; see failPeers(). */
/** @internal */
export function submitInvalid(dispatcher: Dispatcher, reason: string, site: CallSite, group = 0, name = ''): void {
  dispatcher.submit(invalidItem(reason, group, name), () => undefined, site, []);
}

/** options.name of a call that failed validation, when it is a string; else ''. Reading it may throw (a getter). */
function nameOfFailed(options: unknown): string {
  try {
    const name = typeof options === 'object' && options !== null ? (options as { name?: unknown }).name : undefined;
    return typeof name === 'string' ? name : '';
  } catch {
    return '';
  }
}

/**
 * @internal For the adapters: hands the collectives batched so far to the engine now. Batches otherwise
 * go at the end of the current run of JavaScript, which a framework's backward pass may hold for seconds.
 */
export function flushCollectives(): void {
  world?.dispatcher?.flush();
}

/** @internal For the adapters: whether HORA_TIMELINE is writing this rank's timeline. */
export function timelineOn(): boolean {
  return Boolean(world?.dispatcher?.timeline);
}

/** @internal For the adapters: a slice on the timeline's training lane (process.hrtime nanoseconds). */
export function timelineSpan(name: string, startNs: number, endNs: number, args?: object): void {
  world?.dispatcher?.timeline?.span(name, startNs, endNs, args);
}

// ---------------------------------------------------------------------------------------------------
// Point-to-point messages (native/src/engine/p2p.h).

const TAG_LIMIT = 2 ** 31;
const P2P_TYPES = 'a Float32Array, Float64Array, Int32Array, BigInt64Array, Uint8Array or Uint16Array (with dtype float16 or bfloat16); ' +
  'send and recv take typed arrays, not hora.cuda.DeviceBuffer';

function peerOf(call: string, key: string, v: unknown, w: Scope): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= w.size || v === w.rank) {
    const expected = w.size > 1
      ? `an integer rank from 0 to ${w.size - 1} other than this rank (${w.rank})`
      : `another rank, but this ${w.members ? 'group' : 'job'} has one rank only`;
    throw invalidArgument(call, `options.${key}`, expected, v, w.self);
  }
  return w.members ? w.members[v] : v;
}

function tagOf(call: string, v: unknown, rank: number): number {
  if (v === undefined) return 0;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= TAG_LIMIT) {
    throw invalidArgument(call, 'options.tag', `an integer from 0 to ${TAG_LIMIT - 1}`, v, rank);
  }
  return v;
}

function messageDtype(call: string, argument: string, x: unknown, dtype: unknown, rank: number): NativeDType {
  if (x instanceof DeviceBuffer || !ArrayBuffer.isView(x) || x instanceof DataView) throw invalidArgument(call, argument, P2P_TYPES, x, rank);
  return dtypeOf(call, x, dtype, rank);
}

/** Runs send or recv: validation failures reject the returned Work on this rank only. */
/** @internal */
export function runMessage<T>(scope: Scope | null, call: string, callee: Function, plan: (w: Scope) => Plan<T>): Work<T> {
  const w = scope ?? current(call);
  requireElasticRun(w, call);
  const site = w.dispatcher ? w.dispatcher.callSite(callee) : new CallSite(callee);
  let p: Plan<T>;
  try {
    p = plan(w);
  } catch (e) {
    const err = e instanceof HoraError ? e : new HoraError('ERR_INVALID_ARGUMENT', String(e), w.self);
    const failed = new Work<T>(null);
    failed.reject(site.attach(err));
    return failed;
  }
  if (!w.dispatcher) throw new HoraError('ERR_INTERNAL', `hora.${w.prefix}${call}: no engine in a world of one`, w.self);
  return w.dispatcher.submit(w.group ? { ...p.item, group: w.group } : p.item, p.finish, site, p.keep ?? p.value, p.value, p.lends);
}

/**
 * Sends x to rank `to` with `tag` (default 0). The Work settles once a matching receive has taken the
 * message (x may then be reused); until then x belongs to the engine. Messages from one rank to another
 * with one tag are received in the order sent; other tags and peers never wait on them.
 */
export function send(x: Tensor, options: SendOptions): Work<void> {
  return runMessage(null, 'send', send, sendPlan(x, options));
}

/** @internal */
export function sendPlan(x: Tensor, options: SendOptions): (w: Scope) => Plan<void> {
  return (w) => {
    const c = w.prefix + 'send';
    const o = optionsObject<SendOptions>(c, options, SEND_OPTIONS, w.self);
    const dtype = messageDtype(c, 'x', x, o.dtype, w.self);
    const peer = peerOf(c, 'to', o.to, w);
    const tag = tagOf(c, o.tag, w.self);
    return {
      item: { kind: NativeKind.Send, op: NativeOp.Sum, dtype, root: 0, algorithm: NativeAlgorithm.Auto, name: '', data: x, out: null, peer, tag },
      finish: () => undefined, keep: [x], local: () => undefined, lends: Lend.Reads,
    };
  };
}

/**
 * Receives the next message from rank `from` with `tag` (default 0) into `into`, and answers `into`; or,
 * given only options with `dtype` and `count`, into a new array. The message must have the same dtype and
 * count, or both ends fail with ERR_MISMATCH.
 */
export function recv<T extends Tensor>(into: T, options: RecvOptions): Work<T>;
export function recv(options: RecvOptions): Work<Tensor>;
export function recv(first: unknown, second?: unknown): Work<Tensor> {
  return runMessage(null, 'recv', recv, recvPlan(first, second));
}

/** @internal */
export function recvPlan(first: unknown, second: unknown): (w: Scope) => Plan<Tensor> {
  return (w) => {
    const c = w.prefix + 'recv';
    const fresh = second === undefined && first !== null && typeof first === 'object' && !ArrayBuffer.isView(first) &&
      !(first instanceof DeviceBuffer);
    const o = optionsObject<RecvOptions>(c, fresh ? first : second, RECV_OPTIONS, w.self);
    let into: Tensor;
    if (fresh) {
      if (lookupName(DTYPE_OF_NAME, o.dtype) === undefined) {
        throw invalidArgument(c, 'options.dtype', `one of ${Object.keys(DTYPE_OF_NAME).join(', ')} (no array was given to receive into)`, o.dtype, w.self);
      }
      if (typeof o.count !== 'number' || !Number.isInteger(o.count) || o.count < 0 || o.count > 2 ** 32) {
        throw invalidArgument(c, 'options.count', 'an integer from 0 to 2^32 (no array was given to receive into)', o.count, w.self);
      }
      into = hostArray(o.dtype as DType, o.count);
    } else {
      if (o.count !== undefined) throw invalidArgument(c, 'options.count', 'undefined when an array is given (its length is the count)', o.count, w.self);
      into = first as Tensor;
    }
    const dtype = messageDtype(c, 'into', into, o.dtype, w.self);
    const peer = peerOf(c, 'from', o.from, w);
    const tag = tagOf(c, o.tag, w.self);
    return {
      item: { kind: NativeKind.Recv, op: NativeOp.Sum, dtype, root: 0, algorithm: NativeAlgorithm.Auto, name: '', data: into, out: null, peer, tag },
      finish: () => into, keep: [into], local: () => into, lends: fresh ? Lend.None : Lend.Writes,
    };
  };
}

/** @internal For hora bench and tests: the engine's communicator (null in a world of one). */
/**
 * The cost model's predicted seconds of a float32 allreduce of `bytes` with each algorithm, and which one
 * `algorithm` (default: this job's setting) resolves to; null in a world of one. For `hora bench`.
 */
export function allreduceEstimate(bytes: number, algorithm: string): NativeEstimate | null {
  const comm = current('allreduceEstimate').dispatcher?.comm;
  if (!comm) return null;
  if (lookupName(ALGORITHMS, algorithm) === undefined) throw invalidArgument('allreduceEstimate', 'algorithm', `one of ${Object.keys(ALGORITHMS).join(', ')}`, algorithm, rank());
  return comm.estimate(bytes, ALGORITHMS[algorithm]);
}

/** @internal For hora bench and tests: the engine's communicator (null in a world of one). */
export function nativeCommunicator(): NativeCommunicator | null {
  return world?.dispatcher?.comm ?? null;
}
