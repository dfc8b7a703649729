// Typed codec for the control-plane messages of proto/hora.proto.
//
// The .proto file is the contract and is loaded at run time with protobufjs
// (no generated code to keep in sync). Callers only see the plain objects
// below; decodeEnvelope() turns anything malformed into a ControlProtocolError.

import * as fs from 'node:fs';
import * as path from 'node:path';
import * as protobuf from 'protobufjs';

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
  | ({ kind: 'error' } & ErrorMessage);

export type ControlMessageKind = ControlMessage['kind'];

/** A frame that does not decode, or a conversation that breaks the protocol. */
export class ControlProtocolError extends Error {
  readonly code = 'ERR_INVALID_ARGUMENT';
  constructor(message: string) {
    super(message);
    this.name = 'ControlProtocolError';
  }
}

const KINDS: readonly ControlMessageKind[] = ['challenge', 'register', 'peerTable', 'abort', 'heartbeat', 'error'];

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
  return { kind, ...body } as ControlMessage;
}
