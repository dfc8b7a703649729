/**
 * The world this process is in: its ranks and topology, and the state that init() and shutdown() change
 * (ts/init.ts) and every call reads (current()). Also what the two ways into a world share, the fixed one
 * (ts/init.ts) and an elastic job's (ts/elastic/world.ts): the native settings made of init's options, the
 * closing of a communicator, and what to check when the rendezvous cannot be reached.
 */
import type { HoraSettings, LaunchInfo } from './config';
import type { RendezvousConnection } from './control/client';
import type { RendezvousServer } from './control/server';
import { HoraError } from './errors';
import { ALGORITHM_NAMES, NativeAlgorithm, NativeCommunicator, NativeKeptConnections, NativeTransport, valueOfName } from './native';
import type { InitOptions } from './types';
import type { Dispatcher } from './dispatcher';

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

// The world init() joined; null before, and after shutdown(). Only setWorld() and endWorld() change it.
// Variables of this module, not exports: current() reads world on every call.
let world: World | null = null;
// shutdown() was called: init() refuses from then on.
let shutDown = false;

/** @internal The world this process is in, or null (current() throws instead). */
export function joinedWorld(): World | null {
  return world;
}

/** @internal Whether shutdown() was called in this process. */
export function isShutDown(): boolean {
  return shutDown;
}

/** @internal For init() and the elastic re-forming: this process is now in world w. */
export function setWorld(w: World): void {
  world = w;
}

/** @internal For shutdown(): leaves the world for good. Answers the world left (null: none). */
export function endWorld(): World | null {
  const w = world;
  world = null;
  shutDown = true;
  return w;
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

/** The Scope fields of the world itself: group 0, no member list, calls named hora.<call>. */
export function worldScope(self: number): Pick<Scope, 'self' | 'group' | 'members' | 'prefix'> {
  return { self, group: 0, members: null, prefix: '' };
}

/** What the user can change when the rendezvous server cannot be reached; who chose its address differs. */
export function unreachableHint(launch: LaunchInfo): string {
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

export const ALGORITHMS = valueOfName(ALGORITHM_NAMES) as Record<string, NativeAlgorithm>;
const LOG_LEVELS: Record<string, number> = { WARN: 0, INFO: 1, TRACE: 2 };

/** The native communicator's settings that init's options (checked by init()) and the HORA_* variables give. */
export interface NativeSettings {
  timeoutMs: number;
  fusionBytes: number;
  algorithm: NativeAlgorithm;
  /** As asked: 'auto', 'tcp' or 'shm'. */
  transportName: string;
  transport: NativeTransport;
  logLevel: number;
}

/** The one place init's options become native settings: an option wins over its variable. */
export function nativeSettings(options: InitOptions, settings: HoraSettings): NativeSettings {
  const transportName = options.transport ?? settings.transport;
  return {
    timeoutMs: Math.round(1000 * (options.timeoutSeconds ?? settings.timeoutS)),
    fusionBytes: Math.round((options.fusionMB ?? settings.fusionMb) * 1024 * 1024),
    algorithm: ALGORITHMS[options.algorithm ?? settings.algo],
    transportName,
    // 'shm' is 'auto' on a job that has passed requireOneHost: every pair then shares memory.
    transport: transportName === 'tcp' ? NativeTransport.Tcp : NativeTransport.Auto,
    logLevel: LOG_LEVELS[settings.debug] ?? 0,
  };
}

// A closed communicator's native state is gone: abort() on it would touch freed memory.
const closedComms = new WeakSet<NativeCommunicator>();

export function isClosed(comm: NativeCommunicator): boolean {
  return closedComms.has(comm);
}

export function abortQuietly(comm: NativeCommunicator | undefined, code: string, message: string, peer = -1): void {
  if (comm && !closedComms.has(comm)) comm.abort(code, message, peer);
}

export function closeQuietly(comm: NativeCommunicator, keep = false): NativeKeptConnections | undefined {
  if (closedComms.has(comm)) return undefined;
  closedComms.add(comm);
  try {
    return comm.close(keep ? { keep } : undefined);
  } catch { /* already closed */ }
  return undefined;
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

export function nativeCommunicator(): NativeCommunicator | null {
  return world?.dispatcher?.comm ?? null;
}
