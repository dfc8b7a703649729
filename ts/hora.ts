/**
 * The core's calls in one module: ts/index.ts takes the public API from here, ts/elastic/ and process
 * groups the internal calls (adapters take theirs from ts/internal.ts). Each job has a module of its own:
 *
 *   ts/world.ts          the World: ranks and topology, current(), the native settings of init's options
 *   ts/init.ts           init() and shutdown(): joining a fixed world, the checks of the launcher's layout
 *   ts/elastic/world.ts  an elastic job's worlds: joining, forming, re-forming; collectives only in elastic.run
 *   ts/arguments.ts      the argument checks that collectives and messages share
 *   ts/collectives.ts    allreduce, broadcast, allgather, reduceScatter, reduce, gather, barrier, failPeers (submitCollective(), Plan)
 *   ts/messages.ts       send and recv (runMessage())
 *   ts/objects.ts        broadcastObject and allgatherObject (one allgather of serialized values)
 *   ts/grouped.ts        hora.grouped: allreduce, allgather and reduceScatter of a list, as one piece of a batch
 *   ts/alltoall.ts       alltoall and scatter (per-rank splits)
 *
 * Plain values, not `export { x } from`: that compiles to a getter on the module object, run on every call
 * of an importer (see ts/index.ts).
 */
import * as alltoalls from './alltoall';
import * as collectives from './collectives';
import * as groupedCalls from './grouped';
import * as lifecycle from './init';
import * as messages from './messages';
import * as objects from './objects';
import * as world from './world';

export type { Topology, Scope, World } from './world';
export type { Plan } from './collectives';

export const init = lifecycle.init;
export const shutdown = lifecycle.shutdown;

export const current = world.current;
export const rank = world.rank;
export const size = world.size;
export const localRank = world.localRank;
export const localSize = world.localSize;
export const crossRank = world.crossRank;
export const crossSize = world.crossSize;
export const isInitialized = world.isInitialized;
export const flushCollectives = world.flushCollectives;
export const timelineOn = world.timelineOn;
export const timelineSpan = world.timelineSpan;
export const nativeCommunicator = world.nativeCommunicator;


export const submitCollective = collectives.submitCollective;
export const allreduce = collectives.allreduce;
export const allreducePlan = collectives.allreducePlan;
export const broadcast = collectives.broadcast;
export const broadcastPlan = collectives.broadcastPlan;
export const allgather = collectives.allgather;
export const allgatherPlan = collectives.allgatherPlan;
export const reduceScatter = collectives.reduceScatter;
export const reduceScatterPlan = collectives.reduceScatterPlan;
export const reduce = collectives.reduce;
export const reducePlan = collectives.reducePlan;
export const gather = collectives.gather;
export const gatherPlan = collectives.gatherPlan;
export const barrier = collectives.barrier;
export const barrierPlan = collectives.barrierPlan;
export const join = collectives.join;
export const joinIn = collectives.joinIn;
export const failPeers = collectives.failPeers;
export const submitInvalid = collectives.submitInvalid;
export const allreduceEstimate = collectives.allreduceEstimate;

export const broadcastObject = objects.broadcastObject;
export const planBroadcastObject = objects.planBroadcastObject;
export const allgatherObject = objects.allgatherObject;
export const planAllgatherObject = objects.planAllgatherObject;

export const grouped = groupedCalls.grouped;
export const groupedOf = groupedCalls.groupedOf;
export type { Grouped } from './grouped';
export const alltoall = alltoalls.alltoall;
export const planAlltoall = alltoalls.planAlltoall;
export const scatter = alltoalls.scatter;
export const planScatter = alltoalls.planScatter;

export const runMessage = messages.runMessage;
export const send = messages.send;
export const sendPlan = messages.sendPlan;
export const recv = messages.recv;
export const recvPlan = messages.recvPlan;
