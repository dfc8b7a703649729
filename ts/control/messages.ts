// Typed codec for the control-plane messages of proto/hora.proto.
//
// The .proto file is the contract and is loaded at run time with protobufjs
// (no generated code to keep in sync). Callers only see the plain objects
// below; decodeEnvelope() turns anything malformed into a ControlProtocolError.
// Nothing read from the network is trusted (docs/internals.md, "What the code
// relies on"): after protobuf decoding, validateMessage() holds every field to
// the bounds in FIELD_LIMITS and a PeerTable to its own invariants, so that the
// server, the client and the native core never index or allocate by an
// unchecked number.

import * as fs from 'node:fs';
import * as path from 'node:path';
import * as protobuf from 'protobufjs';
import { KIND_NAMES, NativeKind, valuesOf } from '../native';
import type { CollectiveNativeKind } from '../native';

/** Bumped when a change would be misread by an older peer; see proto/hora.proto. */
export const PROTOCOL_VERSION = 1;

export interface Challenge {
  /** Random bytes the client authenticates with HMAC-SHA256(secret, nonce). */
  nonce: Buffer;
  protocolVersion: number;
}

export interface Register {
  protocolVersion: number;
  /** Requested rank, or -1 to have the server assign one. */
  rank: number;
  hostId: string;
  dataAddr: string;
  dataPort: number;
  pid: number;
  hostname: string;
  auth: Buffer;
  /** An elastic job's worker (answered with Membership ASSIGN first). */
  elastic?: boolean;
  /** Elastic: start order; the oldest survivor becomes rank 0. */
  workerId?: number;
}

export interface Peer {
  rank: number;
  hostId: string;
  dataAddr: string;
  dataPort: number;
  localRank: number;
  localSize: number;
  crossRank: number;
  crossSize: number;
  hostname: string;
  pid: number;
}

export interface PeerTable {
  jobId: string;
  size: number;
  /** Exactly `size` entries; peers[i].rank === i. */
  peers: Peer[];
  /** The recipient's own rank (final, also when it registered with -1). */
  yourRank: number;
  /** Elastic: which world this is, from 0. */
  generation?: number;
  /** Elastic, by rank: the worker's start order, its id across worlds. */
  workerIds?: number[];
  /** Elastic, by rank: ElasticReport.keptWorld as the worker sent it; two that say the same (not 0) take over their pair. */
  keptWorlds?: number[];
}

export const enum MembershipEvent { Ended = 1, Grow = 2, Assign = 3 }

export interface Membership {
  event: MembershipEvent;
  generation: number;
  rank: number;
  size: number;
  jobId: string;
  reason: string;
  lostRank: number;
}

export const enum ElasticEvent { Entered = 1, Finished = 2, Rejoin = 3, Listening = 4 }

export interface ElasticReport {
  event: ElasticEvent;
  generation: number;
  dataAddr: string;
  dataPort: number;
  reason: string;
  /** LISTENING: 1 + the generation of the world whose connections the worker holds for the next one; 0: none. */
  keptWorld?: number;
}

export interface Abort {
  reason: string;
  /** Rank that caused the abort, -1 when none. */
  rank: number;
  /** HoraError code, e.g. ERR_PEER_LOST. */
  code: string;
}

export interface Heartbeat {
  seq: number;
  timeMs: number;
}

/** Kinds of collective a Stats message may name (the API's names): every kind but Invalid and the messages. */
export const COLLECTIVE_KINDS = valuesOf(KIND_NAMES, (k) => k.api).filter((_, kind) =>
  kind !== NativeKind.Invalid && kind !== NativeKind.Send && kind !== NativeKind.Recv) as readonly CollectiveKind[];
export type CollectiveKind = (typeof KIND_NAMES)[CollectiveNativeKind]['api'];
/** Point-to-point calls, counted beside the collectives (but outside their order: no sequence numbers). */
export const MESSAGE_KINDS = [KIND_NAMES[NativeKind.Send].api, KIND_NAMES[NativeKind.Recv].api] as const;
export type MessageKind = (typeof MESSAGE_KINDS)[number];
/** Every kind a Stats message may total. */
export const STATS_KINDS = [...COLLECTIVE_KINDS, ...MESSAGE_KINDS] as const;
export type StatsKind = CollectiveKind | MessageKind;

export interface KindStats {
  kind: StatsKind;
  count: number;
  bytes: number;
  /** Microseconds with at least one collective of this kind in flight; 0 for send and recv (not timed). */
  busyUs: number;
}

export interface PendingCollective {
  /** Place in the job's order of collectives, from 1. */
  seq: number;
  name: string;
  /** A CollectiveKind, or 'invalid' for a placeholder. */
  kind: CollectiveKind | 'invalid';
  ageMs: number;
}

/** A pipeline-parallel rank's place and its stage's batches so far (proto/hora.proto PipelineStats). */
export interface PipelineStats {
  stage: number;
  stages: number;
  replica: number;
  replicas: number;
  batches: number;
  /** Microseconds the stage computed in those batches; at most wallUs. */
  busyUs: number;
  wallUs: number;
  weightBytes: number;
  peakStashBytes: number;
}

export interface Stats {
  timeMs: number;
  submitted: number;
  completed: number;
  kinds: KindStats[];
  /** Oldest first, at most FIELD_LIMITS.statsPending. */
  pending: PendingCollective[];
  steps: number;
  stepUs: number;
  commWaitUs: number;
  /** Only from a rank that runs a pipeline stage. */
  pipeline?: PipelineStats;
}

export interface ErrorMessage {
  code: string;
  message: string;
}

/** One decoded Envelope: `kind` names the oneof member that was set. */
export type ControlMessage =
  | ({ kind: 'challenge' } & Challenge)
  | ({ kind: 'register' } & Register)
  | ({ kind: 'peerTable' } & PeerTable)
  | ({ kind: 'abort' } & Abort)
  | ({ kind: 'heartbeat' } & Heartbeat)
  | ({ kind: 'error' } & ErrorMessage)
  | ({ kind: 'stats' } & Stats)
  | ({ kind: 'membership' } & Membership)
  | ({ kind: 'elasticReport' } & ElasticReport);

export type ControlMessageKind = ControlMessage['kind'];

/** A frame that does not decode, or a conversation that breaks the protocol. */
export class ControlProtocolError extends Error {
  readonly code = 'ERR_INVALID_ARGUMENT';
  constructor(message: string) {
    super(message);
    this.name = 'ControlProtocolError';
  }
}

const KINDS: readonly ControlMessageKind[] = ['challenge', 'register', 'peerTable', 'abort', 'heartbeat', 'error', 'stats', 'membership', 'elasticReport'];

/** Walks up from this file to the folder that holds proto/hora.proto (the package root). */
export function findProtoFile(startDir: string = __dirname): string {
  const tried: string[] = [];
  let dir = startDir;
  for (;;) {
    const candidate = path.join(dir, 'proto', 'hora.proto');
    tried.push(candidate);
    if (fs.existsSync(candidate)) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new Error(`hora: cannot find proto/hora.proto (looked at ${tried.join(', ')}); the package is incomplete, reinstall it`);
}

let envelopeType: protobuf.Type | undefined;

function envelope(): protobuf.Type {
  if (envelopeType === undefined) {
    const root = protobuf.loadSync(findProtoFile());
    envelopeType = root.lookupType('hora.v1.Envelope');
  }
  return envelopeType;
}

const TO_OBJECT: protobuf.IConversionOptions = { longs: Number, bytes: Buffer, defaults: true, arrays: true, oneofs: true };

/** Envelope bytes for one message (without the frame length prefix). */
export function encodeEnvelope(msg: ControlMessage): Buffer {
  const { kind, ...body } = msg;
  const type = envelope();
  const payload = { [kind]: body };
  const err = type.verify(payload);
  if (err) throw new ControlProtocolError(`cannot encode ${kind}: ${err}`);
  return Buffer.from(type.encode(type.fromObject(payload)).finish());
}

/** Parses Envelope bytes; throws ControlProtocolError when they are not a valid Envelope. */
export function decodeEnvelope(bytes: Uint8Array): ControlMessage {
  const type = envelope();
  let obj: Record<string, unknown>;
  try {
    obj = type.toObject(type.decode(bytes), TO_OBJECT) as Record<string, unknown>;
  } catch (e) {
    throw new ControlProtocolError(`malformed control message (${bytes.length} bytes): ${(e as Error).message}`);
  }
  const kind = obj.msg as ControlMessageKind | undefined;
  if (kind === undefined || !KINDS.includes(kind)) {
    throw new ControlProtocolError(`control message (${bytes.length} bytes) carries no known message`);
  }
  const body = obj[kind] as Record<string, unknown>;
  // An unset message field decodes as null; a report without one has no such key, as it was sent.
  if (kind === 'stats' && body.pipeline == null) delete body.pipeline;
  // Fields only elastic jobs use are left out at their defaults, as a non-elastic peer sends them.
  if (kind === 'register' && !body.elastic && !body.workerId) {
    delete body.elastic;
    delete body.workerId;
  }
  if (kind === 'peerTable') {
    if (!body.generation) delete body.generation;
    for (const key of ['workerIds', 'keptWorlds']) {
      if ((body[key] as unknown[]).length === 0) delete body[key];
    }
  }
  if (kind === 'elasticReport' && !body.keptWorld) delete body.keptWorld;
  const msg = { kind, ...body } as ControlMessage;
  validateMessage(msg);
  return msg;
}

// ---------------------------------------------------------------------------
// Field bounds. protobuf only says "a uint32" or "a string"; these say what a
// hora peer can actually mean. Job-dependent checks (rank < the job's size,
// the protocol version, the HMAC) stay with the server and the client, which
// can explain them better.

/** Bounds validateMessage() applies to every message received. */
export const FIELD_LIMITS = {
  /** UTF-8 bytes of an identifier: host id, data address, host name, job id, error code. */
  nameBytes: 1024,
  /** UTF-8 bytes of free text: Abort.reason, Error.message. */
  textBytes: 64 * 1024,
  /** Challenge.nonce length: enough randomness, and no more than a nonce needs. */
  nonceMinBytes: 16,
  nonceMaxBytes: 1024,
  /** Register.auth length (an HMAC-SHA256 is 32; the server checks the exact value). */
  authMaxBytes: 1024,
  /** Largest TCP port. */
  port: 65535,
  /** Stats.pending entries: the oldest few pending collectives are enough to explain a stall. */
  statsPending: 8,
  /** UTF-8 bytes of PendingCollective.name (workers cut longer names). */
  collectiveNameBytes: 256,
  /** PipelineStats.stages and .replicas: the monitor keeps a row per stage. */
  pipelineStages: 65536,
  pipelineReplicas: 65536,
} as const;

/**
 * Throws ControlProtocolError, naming the field and its value, when a decoded
 * message breaks the bounds of FIELD_LIMITS, or a PeerTable its invariants:
 * 1 <= size, exactly `size` peers, peers[i].rank === i, your_rank < size, and
 * local/cross ranks and sizes that agree with the host ids.
 */
export function validateMessage(msg: ControlMessage): void {
  switch (msg.kind) {
    case 'challenge':
      checkBytes('Challenge.nonce', msg.nonce, FIELD_LIMITS.nonceMinBytes, FIELD_LIMITS.nonceMaxBytes);
      return;
    case 'register':
      if (!Number.isInteger(msg.rank) || msg.rank < -1) {
        fieldError('Register.rank', msg.rank, 'is out of range: must be -1 (assign one) or a rank >= 0');
      }
      checkName('Register.hostId', msg.hostId);
      checkName('Register.dataAddr', msg.dataAddr);
      checkPort('Register.dataPort', msg.dataPort);
      checkName('Register.hostname', msg.hostname);
      checkBytes('Register.auth', msg.auth, 0, FIELD_LIMITS.authMaxBytes);
      return;
    case 'peerTable':
      checkPeerTable(msg);
      return;
    case 'abort':
      checkText('Abort.reason', msg.reason);
      if (!Number.isInteger(msg.rank) || msg.rank < -1) fieldError('Abort.rank', msg.rank, 'is out of range: must be -1 (none) or a rank >= 0');
      checkName('Abort.code', msg.code);
      return;
    case 'heartbeat':
      return; // two uint64 counters: any value means something
    case 'stats':
      checkStats(msg);
      return;
    case 'error':
      checkName('Error.code', msg.code);
      checkText('Error.message', msg.message);
      return;
    case 'membership':
      if (msg.event < 1 || msg.event > 3) fieldError('Membership.event', msg.event, 'is not 1 (ENDED), 2 (GROW) or 3 (ASSIGN)');
      if (msg.event === 3 && (msg.size < 1 || msg.rank < 0 || msg.rank >= msg.size)) {
        fieldError('Membership.rank', msg.rank, `is out of range for size ${msg.size}`);
      }
      checkName('Membership.jobId', msg.jobId);
      checkText('Membership.reason', msg.reason);
      return;
    case 'elasticReport':
      if (msg.event < 1 || msg.event > 4) fieldError('ElasticReport.event', msg.event, 'is not 1 (ENTERED), 2 (FINISHED), 3 (REJOIN) or 4 (LISTENING)');
      checkName('ElasticReport.dataAddr', msg.dataAddr);
      checkPort('ElasticReport.dataPort', msg.dataPort);
      checkText('ElasticReport.reason', msg.reason);
      return;
  }
}

function checkPeerTable(table: PeerTable): void {
  checkName('PeerTable.jobId', table.jobId);
  if (!Number.isInteger(table.size) || table.size < 1) fieldError('PeerTable.size', table.size, 'is out of range: a job has at least 1 rank');
  if (table.peers.length !== table.size) {
    fieldError('PeerTable.peers', `${table.peers.length} entries`, `does not match PeerTable.size ${table.size}`);
  }
  for (const key of ['workerIds', 'keptWorlds'] as const) {
    const list = table[key];
    if (list !== undefined && list.length !== table.size) {
      fieldError(`PeerTable.${key}`, `${list.length} entries`, `does not match PeerTable.size ${table.size}`);
    }
  }
  if (!Number.isInteger(table.yourRank) || table.yourRank < 0 || table.yourRank >= table.size) {
    fieldError('PeerTable.yourRank', table.yourRank, `is out of range for size ${table.size}`);
  }
  // The topology must be the one the host ids give (see computeTopology in topology.ts):
  // local ranks count the ranks of a host in rank order, cross ranks the hosts in order of their lowest rank.
  const hostIndex = new Map<string, number>();
  const hostCount = new Map<string, number>();
  for (const p of table.peers) {
    if (!hostIndex.has(p.hostId)) hostIndex.set(p.hostId, hostIndex.size);
    hostCount.set(p.hostId, (hostCount.get(p.hostId) ?? 0) + 1);
  }
  const seen = new Map<string, number>();
  table.peers.forEach((p, i) => {
    const at = `PeerTable.peers[${i}]`;
    if (p.rank !== i) fieldError(`${at}.rank`, p.rank, `must equal its index ${i} (peers are ordered by rank, one per rank)`);
    checkName(`${at}.hostId`, p.hostId);
    checkName(`${at}.dataAddr`, p.dataAddr);
    checkPort(`${at}.dataPort`, p.dataPort);
    checkName(`${at}.hostname`, p.hostname);
    const localRank = seen.get(p.hostId) ?? 0;
    seen.set(p.hostId, localRank + 1);
    const expect: [string, number, number][] = [
      ['localRank', p.localRank, localRank],
      ['localSize', p.localSize, hostCount.get(p.hostId) as number],
      ['crossRank', p.crossRank, hostIndex.get(p.hostId) as number],
      ['crossSize', p.crossSize, hostIndex.size],
    ];
    for (const [field, got, want] of expect) {
      if (got !== want) fieldError(`${at}.${field}`, got, `disagrees with the host ids, which give ${want}`);
    }
  });
}

function checkStats(stats: Stats): void {
  // uint64 counters arrive as Numbers (above 2^53 rounded): any finite value >= 0 is a count.
  if (stats.completed > stats.submitted) fieldError('Stats.completed', stats.completed, `exceeds Stats.submitted ${stats.submitted}`);
  if (stats.kinds.length > STATS_KINDS.length) {
    fieldError('Stats.kinds', `${stats.kinds.length} entries`, `exceeds the ${STATS_KINDS.length} kinds of collective and message`);
  }
  const seen = new Set<string>();
  stats.kinds.forEach((k, i) => {
    if (!(STATS_KINDS as readonly string[]).includes(k.kind)) fieldError(`Stats.kinds[${i}].kind`, quote(k.kind), `is not one of ${STATS_KINDS.join(', ')}`);
    if (seen.has(k.kind)) fieldError(`Stats.kinds[${i}].kind`, quote(k.kind), 'appears twice');
    seen.add(k.kind);
  });
  if (stats.pending.length > FIELD_LIMITS.statsPending) {
    fieldError('Stats.pending', `${stats.pending.length} entries`, `exceeds the limit of ${FIELD_LIMITS.statsPending}`);
  }
  let previous = 0;
  stats.pending.forEach((p, i) => {
    const at = `Stats.pending[${i}]`;
    if (p.seq < 1 || p.seq > stats.submitted || p.seq <= previous) {
      fieldError(`${at}.seq`, p.seq, `is out of range: must be 1..Stats.submitted (${stats.submitted}) and above the entry before it`);
    }
    previous = p.seq;
    if (p.kind !== 'invalid' && !(COLLECTIVE_KINDS as readonly string[]).includes(p.kind)) {
      fieldError(`${at}.kind`, quote(p.kind), `is not one of ${COLLECTIVE_KINDS.join(', ')}, invalid`);
    }
    checkText(`${at}.name`, p.name, FIELD_LIMITS.collectiveNameBytes);
    checkName(`${at}.name`, p.name);
  });
  if (stats.commWaitUs > stats.stepUs) fieldError('Stats.commWaitUs', stats.commWaitUs, `exceeds Stats.stepUs ${stats.stepUs}`);
  if (stats.pipeline) checkPipeline(stats.pipeline);
}

function checkPipeline(p: PipelineStats): void {
  if (p.stages < 1 || p.stages > FIELD_LIMITS.pipelineStages) fieldError('Stats.pipeline.stages', p.stages, `is out of range: must be 1..${FIELD_LIMITS.pipelineStages}`);
  if (p.stage >= p.stages) fieldError('Stats.pipeline.stage', p.stage, `is out of range for ${p.stages} stages`);
  if (p.replicas < 1 || p.replicas > FIELD_LIMITS.pipelineReplicas) {
    fieldError('Stats.pipeline.replicas', p.replicas, `is out of range: must be 1..${FIELD_LIMITS.pipelineReplicas}`);
  }
  if (p.replica >= p.replicas) fieldError('Stats.pipeline.replica', p.replica, `is out of range for ${p.replicas} replicas`);
  if (p.busyUs > p.wallUs) fieldError('Stats.pipeline.busyUs', p.busyUs, `exceeds Stats.pipeline.wallUs ${p.wallUs}`);
}

function checkPort(field: string, port: number): void {
  if (!Number.isInteger(port) || port < 0 || port > FIELD_LIMITS.port) fieldError(field, port, `is not a TCP port (0..${FIELD_LIMITS.port})`);
}

function checkName(field: string, value: string): void {
  checkText(field, value, FIELD_LIMITS.nameBytes);
  // Identifiers end up in log lines, file names and getaddrinfo(): no control characters.
  const bad = /[\u0000-\u001f\u007f]/.exec(value);
  if (bad) fieldError(field, quote(value), `contains the control character U+${bad[0].charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function checkText(field: string, value: string, maxBytes: number = FIELD_LIMITS.textBytes): void {
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes > maxBytes) fieldError(field, `${bytes} bytes`, `exceeds the limit of ${maxBytes} bytes`);
}

function checkBytes(field: string, value: Buffer, min: number, max: number): void {
  if (value.length < min || value.length > max) fieldError(field, `${value.length} bytes`, `must be ${min}..${max} bytes`);
}

/** A string from the network as it may appear in a log line: quoted, escaped, cut short. */
function quote(value: string): string {
  return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}...` : value);
}

// `shown` is the offending value as the message should show it: a number, quote(text), "N bytes".
function fieldError(field: string, shown: number | string, problem: string): never {
  throw new ControlProtocolError(`${field} ${shown} ${problem}`);
}
