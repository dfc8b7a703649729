/**
 * Elastic worlds (hora run --min-np; docs/elastic.md): the core's part of elastic training. The launcher's
 * server assigns each world's ranks (ts/control/membership.ts); a world is a native Communicator of its own,
 * made anew at each re-forming, so the native core never changes size under a running engine. Here: an
 * elastic worker's joining (for init), the forming of each world, its re-forming (for hora.elastic.run,
 * ./run.ts), and the rule that collectives and messages run inside hora.elastic.run only.
 */
import { advertiseAddress, connectTimeoutS, makeLogger, HoraSettings, LaunchInfo } from '../config';
import type { Peer } from '../control/messages';
import { registerElastic, RendezvousConnection } from '../control/client';
import { ElasticEvent, Membership, MembershipEvent, PeerTable } from '../control/messages';
import { JOB_FINISHED_REFUSAL } from '../control/membership';
import { CallSite, HoraError } from '../errors';
import { loadNative } from '../loader';
import { NativeKeptConnections, NativeResult } from '../native';
import type { InitOptions } from '../types';
import { startReporting, stopReporting } from '../stats';
import { openTimeline, TimelineWriter } from '../timeline';
import { Dispatcher } from '../dispatcher';
import {
  NativeSettings, Scope, World, abortQuietly, closeQuietly, isClosed, joinedWorld, nativeSettings, setWorld, unreachableHint, worldScope,
} from '../world';

/** What every world of an elastic job is made with. */
interface ElasticParams {
  addon: ReturnType<typeof loadNative>;
  settings: HoraSettings;
  native: NativeSettings;
  dataAddr: string;
  secret: string;
  control: RendezvousConnection;
  /** HORA_TIMELINE: one file per worker (named by its worker id), across the worlds it is in. */
  timeline: TimelineWriter | null;
  /** The connections the last world left for the next one; the next connect takes them. */
  kept: KeptWorld | null;
  /** init's join(): a failed connect's stack starts at its caller, as a fixed world's does. */
  connectSite: Function;
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
/** Inside hora.elastic.run (./run.ts): collectives are allowed, and a second run is refused. */
let elasticRunning = false;

/** @internal For init(), with HORA_ELASTIC=1: registers this worker and joins its first world. */
export async function joinElastic(options: InitOptions, launch: LaunchInfo, settings: HoraSettings, connectSite: Function): Promise<void> {
  if (launch.source !== 'hora' || !(launch.launcherHostsServer || launch.elasticService)) {
    throw new HoraError('ERR_INVALID_ARGUMENT', 'hora.init: HORA_ELASTIC=1 needs a job started by `hora run --min-np`, or a `hora rendezvous` service, to re-form the world');
  }
  const native = nativeSettings(options, settings);
  const timeoutMs = native.timeoutMs;
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
    addon, settings, native, dataAddr, secret: launch.secret as string, control: reg.connection,
    timeline: settings.timeline
      ? openTimeline(settings.timeline, worker, addon.clocks(), () => ({ rows: new Float64Array(0), strings: [] }), `worker ${worker}`)
      : null,
    kept: null, connectSite,
  };
  elasticParams = params;
  watchElasticControl(params.control);
  params.control.startHeartbeat(ELASTIC_HEARTBEAT_MS, ELASTIC_LAUNCHER_SILENT_MS);
  try {
    setWorld(await openElasticWorld(params, reg.assignment));
  } catch (e) {
    // The world ended while it formed (a worker lost meanwhile): the next one is made inside elastic.run.
    if (!(e instanceof HoraError) || e.code !== 'ERR_PEER_LOST' || params.control.endedGeneration < reg.assignment.generation) {
      params.control.close();
      throw e;
    }
    await reformElasticWorld(reg.assignment.generation, `world ${reg.assignment.generation} ended while it formed`);
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
    rank: a.rank, size: a.size, timeoutMs: p.native.timeoutMs, fusionBytes: p.native.fusionBytes, algorithm: p.native.algorithm,
    transport: p.native.transport, bindHost: p.dataAddr, secret: p.secret, logLevel: p.native.logLevel,
    grid, costLocal: p.settings.costLocal, costCross: p.settings.costCross, timeline: p.timeline !== null, ipcSlots: p.settings.ipcSlots,
    nccl: p.settings.nccl, shmSingleCopy: p.settings.shmSingleCopy, elastic: true,
  }, onComplete), a.rank, p.native.fusionBytes, p.settings.callSites);
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
    const connecting = dispatcher.track((r: NativeResult) => r, new CallSite(p.connectSite), (id) => comm.connect(id, peers, table.jobId, kept?.handle));
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

/** Aborts the world's collectives when the server ends it; leaves when the launcher is gone. */
function watchElasticControl(control: RendezvousConnection): void {
  control.on('membership', (m: Membership) => {
    const w = joinedWorld();
    if (m.event !== MembershipEvent.Ended || !w?.elastic || w.elastic.generation !== m.generation) return;
    abortQuietly(w.dispatcher?.comm, 'ERR_PEER_LOST', `the world re-forms${m.lostRank >= 0 ? ` without rank ${m.lostRank}` : ''}: ${m.reason}`, m.lostRank);
  });
  control.onAbort((a) => {
    abortQuietly(joinedWorld()?.dispatcher?.comm, a.code || 'ERR_PEER_LOST', `the job was aborted${a.rank >= 0 ? ` because of rank ${a.rank}` : ''}: ${a.reason}`);
  });
  control.onClose((err) => {
    abortQuietly(joinedWorld()?.dispatcher?.comm, 'ERR_PEER_LOST', 'lost the connection to the hora launcher');
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
  const old = joinedWorld();
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
      const w = await openElasticWorld(p, a);
      setWorld(w);
      return w;
    } catch (e) {
      if (!(e instanceof HoraError) || e.code !== 'ERR_PEER_LOST') throw e;
      generation = a.generation;
      reason = e.message;
    }
  }
}

/** @internal For hora.elastic.run. */
export function elasticState(): { control: RendezvousConnection; world: World } | null {
  const world = joinedWorld();
  return elasticParams && world ? { control: elasticParams.control, world } : null;
}

/** @internal For hora.elastic.run: collectives are allowed while it runs. */
export function setElasticRunning(on: boolean): void {
  elasticRunning = on;
}

/** @internal For hora.elastic.run: whether a run is under way (runs do not nest). */
export function isElasticRunning(): boolean {
  return elasticRunning;
}

/** @internal For shutdown(): an elastic worker's timeline outlives its worlds (the last may have had no communicator). */
export function leaveElastic(): void {
  elasticParams?.timeline?.close();
  elasticParams = null;
}

// In an elastic job the world may re-form under any collective; only hora.elastic.run can roll the
// state back and go on, so collectives outside it would be lost in a re-forming.
/** @internal */
export function requireElasticRun(w: Scope, call: string): void {
  if (elasticParams === null) return;
  if (w.dispatcher && isClosed(w.dispatcher.comm)) {
    throw new HoraError('ERR_PEER_LOST', `hora.${w.prefix}${call}: this ${w.members ? 'group' : 'world'} belongs to a world that has ` +
      're-formed since; make process groups again in a state.onReset callback', w.self);
  }
  if (elasticRunning) return;
  throw new HoraError('ERR_INVALID_ARGUMENT', `hora.${w.prefix}${call}: this is an elastic job (hora run --min-np): collectives run ` +
    'inside hora.elastic.run(state, fn), which restores the state and re-forms the world when a worker is lost; call it there', w.self);
}
