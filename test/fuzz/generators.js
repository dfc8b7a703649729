'use strict';
// Inputs for the control-plane fuzzer: valid messages (for the real encoder),
// their mutations, hand-written protobuf with the wrong shape, messages that
// are well formed but mean something impossible, and framed byte streams.
// Every generator takes a seeded Rng and nothing else, so a case is a pure
// function of (seed, case index).

const { Writer, WIRE } = require('./wire');

/** Varint values that sit on a boundary somewhere (as BigInt: some exceed 2^53). */
const EDGE_VALUES = [
  0n, 1n, 2n, 0x7fn, 0x80n, 0xffn, 65535n, 65536n, 0x7fffffffn, 0x80000000n, 0xffffffffn, 0x100000000n,
  2n ** 53n, 2n ** 63n - 1n, 2n ** 63n, 2n ** 64n - 1n,
  // negative int32 values travel as 10-byte varints
  BigInt.asUintN(64, -1n), BigInt.asUintN(64, -2n), BigInt.asUintN(64, -(2n ** 31n)), BigInt.asUintN(64, -(2n ** 31n) - 1n),
];

// proto/hora.proto, as field number -> type, for writing messages of the right (or wrong) shape.
const PEER_FIELDS = { 1: 'int32', 2: 'string', 3: 'string', 4: 'uint32', 5: 'int32', 6: 'int32', 7: 'int32', 8: 'int32', 9: 'string', 10: 'uint32' };
const BODIES = {
  1: { 1: 'bytes', 2: 'uint32' }, // Challenge
  2: { 1: 'uint32', 2: 'int32', 3: 'string', 4: 'string', 5: 'uint32', 6: 'uint32', 7: 'string', 8: 'bytes' }, // Register
  3: { 1: 'string', 2: 'uint32', 3: 'Peer', 4: 'int32' }, // PeerTable
  4: { 1: 'string', 2: 'int32', 3: 'string' }, // Abort
  5: { 1: 'uint64', 2: 'uint64' }, // Heartbeat
  6: { 1: 'string', 2: 'string' }, // Error
  7: { 1: 'uint64', 2: 'uint64', 3: 'uint64', 4: 'KindStats', 5: 'PendingCollective', 6: 'uint64', 7: 'uint64', 8: 'uint64', 9: 'PipelineStats' }, // Stats
};
// Messages nested in others, by the type name BODIES uses.
const NESTED = {
  Peer: PEER_FIELDS,
  KindStats: { 1: 'string', 2: 'uint64', 3: 'uint64', 4: 'uint64' },
  PendingCollective: { 1: 'uint64', 2: 'string', 3: 'string', 4: 'uint64' },
  PipelineStats: { 1: 'uint32', 2: 'uint32', 3: 'uint32', 4: 'uint32', 5: 'uint64', 6: 'uint64', 7: 'uint64', 8: 'uint64', 9: 'uint64' },
};

// ---------------------------------------------------------------------------
// Valid messages, in the shape encodeEnvelope() takes.

function text(rng, maxChars, alphabet) {
  const n = rng.int(maxChars + 1);
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[rng.int(alphabet.length)];
  return s;
}

const NAME_CHARS = 'abcdefghijklmnopqrstuvwxyz0123456789-._/:';
const TEXT_CHARS = [...`${NAME_CHARS} \n\tABCXYZé漢🙂`]; // by code point: no lone surrogates

function name(rng) {
  return text(rng, rng.chance(0.05) ? 200 : 16, NAME_CHARS);
}

function addr(rng) {
  return rng.chance(0.8) ? `${rng.int(256)}.${rng.int(256)}.${rng.int(256)}.${rng.int(256)}` : rng.pick(['', '::1', 'fe80::1%eth0', 'node-7.cluster']);
}

const COLLECTIVES = ['allreduce', 'broadcast', 'allgather', 'reduceScatter', 'barrier', 'alltoall', 'reduce', 'gather', 'scatter'];
/** What Stats.kinds may total: the collectives, and send and recv (which are never pending collectives). */
const KINDS = [...COLLECTIVES, 'send', 'recv'];

/** A Stats report as a worker sends it: counters, at most one entry per kind, a few pending collectives. */
function validStats(rng) {
  const submitted = rng.chance(0.1) ? rng.int(4) : rng.int(2 ** 40);
  const pendingCount = Math.min(submitted, rng.int(9));
  const pending = [];
  let seq = submitted - pendingCount;
  for (let i = 0; i < pendingCount; i++) {
    seq += 1;
    pending.push({ seq, name: rng.chance(0.2) ? '' : text(rng, 60, TEXT_CHARS.filter((c) => c !== '\n' && c !== '\t')), kind: rng.pick([...COLLECTIVES, 'invalid']), ageMs: rng.int(2 ** 32) });
  }
  const kinds = KINDS.filter(() => rng.chance(0.4)).map((kind) => ({ kind, count: rng.int(2 ** 40), bytes: rng.int(2 ** 53), busyUs: rng.int(2 ** 45) }));
  const stepUs = rng.int(2 ** 45);
  const stats = {
    kind: 'stats', timeMs: Date.UTC(2025, 0, 1) + rng.u32(), submitted, completed: rng.int(submitted + 1), kinds, pending,
    steps: rng.int(2 ** 32), stepUs, commWaitUs: rng.int(stepUs + 1),
  };
  if (rng.chance(0.3)) {
    const stages = rng.range(1, rng.chance(0.9) ? 8 : 65536), replicas = rng.range(1, rng.chance(0.9) ? 8 : 65536), wallUs = rng.int(2 ** 45);
    stats.pipeline = {
      stage: rng.int(stages), stages, replica: rng.int(replicas), replicas, batches: rng.int(2 ** 32), busyUs: rng.int(wallUs + 1), wallUs,
      weightBytes: rng.int(2 ** 40), peakStashBytes: rng.int(2 ** 40),
    };
  }
  return stats;
}

/** A random message every hora peer would accept. */
function validMessage(rng, computeTopology) {
  switch (rng.int(7)) {
    case 0:
      return { kind: 'challenge', nonce: rng.bytes(rng.chance(0.8) ? 32 : rng.range(16, 64)), protocolVersion: rng.chance(0.9) ? 1 : rng.u32() };
    case 1:
      return {
        kind: 'register', protocolVersion: rng.chance(0.9) ? 1 : rng.u32(), rank: rng.chance(0.3) ? -1 : rng.int(rng.chance(0.9) ? 16 : 0x7fffffff),
        hostId: name(rng), dataAddr: addr(rng), dataPort: rng.int(65536), pid: rng.u32(), hostname: name(rng), auth: rng.bytes(rng.chance(0.9) ? 32 : rng.int(65)),
      };
    case 2: {
      const size = rng.chance(0.9) ? rng.range(1, 8) : rng.range(1, rng.chance(0.9) ? 300 : 2000);
      const hosts = Array.from({ length: rng.range(1, Math.min(size, 6)) }, () => name(rng));
      const regs = Array.from({ length: size }, () => ({ hostId: rng.pick(hosts), dataAddr: addr(rng), dataPort: rng.int(65536), hostname: name(rng), pid: rng.u32() }));
      return { kind: 'peerTable', jobId: name(rng), size, peers: computeTopology(regs), yourRank: rng.int(size) };
    }
    case 3:
      return { kind: 'abort', reason: text(rng, 64, TEXT_CHARS), rank: rng.range(-1, 64), code: rng.pick(['ERR_PEER_LOST', 'ERR_SHUTDOWN', 'ERR_TIMEOUT', '']) };
    case 5:
      return validStats(rng);
    case 4:
      return { kind: 'heartbeat', seq: rng.int(2 ** 53), timeMs: rng.chance(0.5) ? Date.UTC(2025, 0, 1) + rng.u32() : rng.int(2 ** 53) };
    default:
      return { kind: 'error', code: rng.pick(['ERR_AUTH', 'ERR_INVALID_ARGUMENT', 'ERR_TIMEOUT', '']), message: text(rng, 128, TEXT_CHARS) };
  }
}

// ---------------------------------------------------------------------------
// Byte-level mutations of an encoded message.

const INTERESTING_BYTES = [0x00, 0x01, 0x02, 0x07, 0x08, 0x0a, 0x0f, 0x10, 0x12, 0x1a, 0x7f, 0x80, 0xff];

const MUTATIONS = [
  function flipBit(rng, b) {
    if (b.length === 0) return b;
    const out = Buffer.from(b);
    out[rng.int(out.length)] ^= 1 << rng.int(8);
    return out;
  },
  function setByte(rng, b) {
    if (b.length === 0) return b;
    const out = Buffer.from(b);
    out[rng.int(out.length)] = rng.chance(0.5) ? rng.pick(INTERESTING_BYTES) : rng.int(256);
    return out;
  },
  function insertBytes(rng, b) {
    const at = rng.int(b.length + 1);
    const ins = rng.chance(0.5) ? rng.bytes(rng.range(1, 16)) : Buffer.alloc(rng.range(1, 8), rng.pick(INTERESTING_BYTES));
    return Buffer.concat([b.subarray(0, at), ins, b.subarray(at)]);
  },
  function deleteRange(rng, b) {
    if (b.length === 0) return b;
    const at = rng.int(b.length);
    return Buffer.concat([b.subarray(0, at), b.subarray(at + rng.range(1, Math.min(32, b.length - at)))]);
  },
  function truncate(rng, b) {
    return b.subarray(0, rng.int(b.length + 1));
  },
  function extend(rng, b) {
    return Buffer.concat([b, rng.bytes(rng.range(1, rng.chance(0.9) ? 32 : 4096))]);
  },
  function duplicateSlice(rng, b) {
    if (b.length === 0) return b;
    const from = rng.int(b.length);
    const slice = b.subarray(from, from + rng.range(1, 64));
    const at = rng.int(b.length + 1);
    return Buffer.concat([b.subarray(0, at), slice, rng.chance(0.2) ? slice : Buffer.alloc(0), b.subarray(at)]);
  },
  function swapSlices(rng, b) {
    if (b.length < 4) return b;
    const cut1 = rng.int(b.length);
    const cut2 = rng.range(cut1, b.length);
    return Buffer.concat([b.subarray(cut2), b.subarray(cut1, cut2), b.subarray(0, cut1)]);
  },
  function overlongVarint(rng, b) {
    // 0x80 bytes continue a varint: 10 and more make it invalid, fewer make it overlong or shift it.
    const at = rng.int(b.length + 1);
    return Buffer.concat([b.subarray(0, at), Buffer.alloc(rng.range(1, 12), 0x80), b.subarray(at)]);
  },
  function hugeLength(rng, b) {
    // A varint of 2^32-1 or 2^64-1 where a length (or any varint) may be.
    const at = rng.int(b.length + 1);
    const huge = rng.chance(0.5) ? Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f]) : Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    return Buffer.concat([b.subarray(0, at), huge, b.subarray(at + rng.int(2))]);
  },
];

/** 1..8 random mutations; `other` is a second valid encoding to splice from. */
function mutate(rng, bytes, other) {
  let b = bytes;
  const n = rng.range(1, 8);
  for (let i = 0; i < n; i++) {
    if (rng.chance(0.05)) {
      const at = rng.int(b.length + 1);
      b = Buffer.concat([b.subarray(0, at), other.subarray(rng.int(other.length + 1))]);
    } else {
      b = rng.pick(MUTATIONS)(rng, b);
    }
  }
  return b;
}

// ---------------------------------------------------------------------------
// Hand-written protobuf: the schema's fields with edge values, wrong wire types,
// duplicates, shuffled order, unknown fields, groups and lying lengths.

function varintValue(rng) {
  return rng.chance(0.6) ? rng.pick(EDGE_VALUES) : BigInt(rng.chance(0.5) ? rng.int(100) : rng.u32());
}

function stringBytes(rng) {
  const r = rng.u32() / 0x100000000;
  if (r < 0.002) return Buffer.alloc(rng.range(64 * 1024, 300 * 1024), 0x61); // very long
  if (r < 0.05) return Buffer.alloc(rng.pick([1023, 1024, 1025, 4096, 65536, 65537]), rng.pick([0x61, 0x0a, 0x00])); // around the limits
  if (r < 0.2) return rng.bytes(rng.length(64)); // arbitrary bytes: invalid UTF-8, control characters
  return Buffer.from(text(rng, 24, TEXT_CHARS));
}

function writeValue(rng, w, field, type, depth) {
  let wireType;
  if (rng.chance(0.85)) wireType = type === 'string' || type === 'bytes' || type in NESTED ? WIRE.LEN : WIRE.VARINT;
  else wireType = rng.range(0, 7); // wrong, including the invalid 6 and 7
  switch (wireType) {
    case WIRE.VARINT:
      w.tag(field, wireType).varint(varintValue(rng), rng.chance(0.1) ? rng.range(1, 6) : 0);
      return;
    case WIRE.I64:
      w.fixed64(field, varintValue(rng));
      return;
    case WIRE.I32:
      w.fixed32(field, rng.u32());
      return;
    case WIRE.LEN: {
      let body;
      if (type in NESTED && rng.chance(0.8)) body = structuredBody(rng, NESTED[type], depth + 1);
      else if (type === 'string' || type === 'bytes') body = stringBytes(rng);
      else body = rng.chance(0.5) ? structuredBody(rng, PEER_FIELDS, depth + 1) : rng.bytes(rng.length(64));
      w.len(field, body, rng.chance(0.05) ? rng.range(-4, 4) : 0);
      return;
    }
    case WIRE.SGROUP:
      writeGroup(rng, w, field, depth);
      return;
    default:
      // EGROUP without a start, or the invalid wire types 6 and 7, then whatever follows.
      w.tag(field, wireType).raw(rng.bytes(rng.int(4)));
  }
}

function writeGroup(rng, w, field, depth) {
  w.tag(field, WIRE.SGROUP);
  if (depth < 150 && rng.chance(0.7)) {
    // Nest groups deeply: protobufjs must stop at its recursion limit, not the stack's.
    const nested = rng.chance(0.1) ? rng.range(50, 150) : 1;
    for (let i = 0; i < nested; i++) w.tag(rng.range(1, 20), WIRE.SGROUP);
    for (let i = 0; i < nested; i++) w.tag(rng.range(1, 20), WIRE.EGROUP);
  } else {
    w.raw(rng.bytes(rng.int(8)));
  }
  if (rng.chance(0.9)) w.tag(rng.chance(0.9) ? field : field + 1, WIRE.EGROUP);
}

/** One message body: known fields in any order, some twice, some missing, plus unknown ones. */
function structuredBody(rng, fields, depth = 0) {
  const w = new Writer();
  if (depth > 3) return rng.bytes(rng.length(32));
  const numbers = Object.keys(fields).map(Number).filter(() => rng.chance(0.7));
  for (let i = numbers.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    [numbers[i], numbers[j]] = [numbers[j], numbers[i]];
  }
  for (const f of numbers) {
    const times = fields[f] in NESTED ? rng.range(0, rng.chance(0.95) ? 8 : 300) : rng.chance(0.15) ? 2 : 1;
    for (let k = 0; k < times; k++) writeValue(rng, w, f, fields[f], depth);
  }
  const unknown = rng.chance(0.2) ? rng.range(1, 4) : 0;
  for (let i = 0; i < unknown; i++) {
    const field = rng.chance(0.5) ? rng.range(11, 100) : rng.range(1, 2 ** 29 - 1);
    writeValue(rng, w, field, rng.pick(['uint32', 'string', 'Peer']), depth);
  }
  return w.finish();
}

/** An Envelope written by hand: usually one oneof member, sometimes none, several or unknown ones. */
function structuredEnvelope(rng) {
  const w = new Writer();
  const members = rng.chance(0.85) ? 1 : rng.range(0, 3);
  for (let i = 0; i < members; i++) {
    const field = rng.chance(0.92) ? rng.range(1, 7) : rng.pick([0, 8, 15, 16, 2 ** 29 - 1]);
    if (field === 0) {
      w.raw(Buffer.from([0x02, 0x00])); // field number 0 is invalid
      continue;
    }
    const body = structuredBody(rng, BODIES[field] ?? PEER_FIELDS);
    if (rng.chance(0.9)) w.len(field, body, rng.chance(0.05) ? rng.range(-3, 3) : 0);
    else writeValue(rng, w, field, 'Peer', 0);
  }
  return w.finish();
}

// ---------------------------------------------------------------------------
// Well-formed messages that mean something impossible. Each returns the
// message and the field the validation error must name, or undefined when the
// corruption does not apply to this message.

const big = (n, ch = 'a') => ch.repeat(n);
const SEMANTIC = {
  challenge: [
    (rng, m) => ({ msg: { ...m, nonce: rng.bytes(rng.int(16)) }, field: 'Challenge.nonce' }),
    (rng, m) => ({ msg: { ...m, nonce: rng.bytes(rng.range(1025, 4096)) }, field: 'Challenge.nonce' }),
  ],
  register: [
    (rng, m) => ({ msg: { ...m, rank: rng.pick([-2, -3, -1000, -(2 ** 31)]) }, field: 'Register.rank' }),
    (rng, m) => ({ msg: { ...m, dataPort: rng.pick([65536, 70000, 2 ** 31, 2 ** 32 - 1]) }, field: 'Register.dataPort' }),
    (rng, m) => {
      const f = rng.pick(['hostId', 'dataAddr', 'hostname']);
      return { msg: { ...m, [f]: rng.chance(0.5) ? big(rng.range(1025, 70000)) : `x${rng.pick(['\u0000', '\n', '\r', '\u001b', '\u007f'])}y` }, field: `Register.${f}` };
    },
    (rng, m) => ({ msg: { ...m, auth: rng.bytes(rng.range(1025, 3000)) }, field: 'Register.auth' }),
  ],
  peerTable: [
    (rng, m) => ({ msg: { ...m, size: 0, peers: [], yourRank: 0 }, field: 'PeerTable.size' }),
    (rng, m) => ({ msg: { ...m, size: m.size + rng.range(1, 5) }, field: 'PeerTable.peers' }),
    (rng, m) => (m.size > 1 ? { msg: { ...m, size: m.size - 1, yourRank: 0 }, field: 'PeerTable.peers' } : undefined),
    (rng, m) => ({ msg: { ...m, yourRank: rng.pick([-1, -2, m.size, m.size + 1, 2 ** 31 - 1]) }, field: 'PeerTable.yourRank' }),
    (rng, m) => ({ msg: { ...m, jobId: rng.chance(0.5) ? big(2000) : 'job\u0000' }, field: 'PeerTable.jobId' }),
    (rng, m) => {
      if (m.size < 2) return undefined;
      const j = rng.range(1, m.size - 1);
      const peers = m.peers.map((p) => ({ ...p }));
      peers[j].rank = peers[rng.int(j)].rank; // duplicate of an earlier rank
      return { msg: { ...m, peers }, field: `PeerTable.peers[${j}].rank` };
    },
    (rng, m) => {
      const i = rng.int(m.size);
      const peers = m.peers.map((p) => ({ ...p }));
      peers[i].rank = rng.pick([-1, m.size, m.size + 7, 2 ** 31 - 1, -(2 ** 31)]);
      return { msg: { ...m, peers }, field: `PeerTable.peers[${i}].rank` };
    },
    (rng, m) => {
      const i = rng.int(m.size);
      const peers = m.peers.map((p) => ({ ...p }));
      peers[i].dataPort = rng.pick([65536, 99999, 2 ** 32 - 1]);
      return { msg: { ...m, peers }, field: `PeerTable.peers[${i}].dataPort` };
    },
    (rng, m) => {
      const i = rng.int(m.size);
      const f = rng.pick(['localRank', 'localSize', 'crossRank', 'crossSize']);
      const peers = m.peers.map((p) => ({ ...p }));
      peers[i][f] = rng.chance(0.5) ? peers[i][f] + rng.pick([1, -1, 1000]) : rng.pick([-1, 2 ** 31 - 1, -(2 ** 31)]);
      return { msg: { ...m, peers }, field: `PeerTable.peers[${i}].${f}` };
    },
    (rng, m) => {
      const i = rng.int(m.size);
      const f = rng.pick(['dataAddr', 'hostname']);
      const peers = m.peers.map((p) => ({ ...p }));
      peers[i][f] = rng.chance(0.5) ? big(1025) : 'a\nb';
      return { msg: { ...m, peers }, field: `PeerTable.peers[${i}].${f}` };
    },
  ],
  abort: [
    (rng, m) => ({ msg: { ...m, rank: rng.pick([-2, -(2 ** 31)]) }, field: 'Abort.rank' }),
    (rng, m) => ({ msg: { ...m, reason: big(64 * 1024 + 1) }, field: 'Abort.reason' }),
    (rng, m) => ({ msg: { ...m, code: 'ERR\nFORGED' }, field: 'Abort.code' }),
  ],
  error: [
    (rng, m) => ({ msg: { ...m, message: big(rng.range(64 * 1024 + 1, 100000)) }, field: 'Error.message' }),
    (rng, m) => ({ msg: { ...m, code: big(1025) }, field: 'Error.code' }),
  ],
  heartbeat: [],
  stats: [
    (rng, m) => ({ msg: { ...m, completed: m.submitted + rng.range(1, 1000) }, field: 'Stats.completed' }),
    (rng, m) => {
      const kinds = [...KINDS, 'recv'].map((kind) => ({ kind, count: 1, bytes: 1, busyUs: 1 }));
      return { msg: { ...m, kinds }, field: 'Stats.kinds' };
    },
    (rng, m) => {
      if (m.kinds.length >= KINDS.length) return undefined; // one more would break the count first
      const kinds = m.kinds.map((k) => ({ ...k }));
      const i = rng.int(kinds.length + 1);
      kinds.splice(i, 0, { kind: rng.pick(['', 'allReduce', 'invalid', 'reduce_scatter', 'x\u0000', big(2000)]), count: 0, bytes: 0, busyUs: 0 });
      return { msg: { ...m, kinds }, field: `Stats.kinds[${i}].kind` };
    },
    (rng, m) => {
      if (m.kinds.length === 0 || m.kinds.length >= KINDS.length) return undefined;
      const kinds = [...m.kinds, { ...m.kinds[0] }];
      return { msg: { ...m, kinds }, field: `Stats.kinds[${m.kinds.length}].kind` };
    },
    (rng, m) => {
      const pending = Array.from({ length: rng.range(9, 40) }, (_, i) => ({ seq: i + 1, name: '', kind: 'allreduce', ageMs: 0 }));
      return { msg: { ...m, submitted: Math.max(m.submitted, pending.length), completed: 0, pending }, field: 'Stats.pending' };
    },
    (rng, m) => {
      if (m.pending.length === 0) return undefined;
      const pending = m.pending.map((p) => ({ ...p }));
      const i = rng.int(pending.length);
      pending[i].seq = rng.pick([0, m.submitted + 1, m.submitted + 1000, i > 0 ? pending[i - 1].seq : 0]);
      return { msg: { ...m, pending }, field: `Stats.pending[${i}].seq` };
    },
    (rng, m) => {
      if (m.pending.length === 0) return undefined;
      const pending = m.pending.map((p) => ({ ...p }));
      const i = rng.int(pending.length);
      pending[i].name = rng.chance(0.5) ? big(rng.range(257, 5000)) : `grad${rng.pick(['\n', '\r', '\u001b[2J', '\u0000'])}x`;
      return { msg: { ...m, pending }, field: `Stats.pending[${i}].name` };
    },
    (rng, m) => {
      if (m.pending.length === 0) return undefined;
      const pending = m.pending.map((p) => ({ ...p }));
      const i = rng.int(pending.length);
      pending[i].kind = rng.pick(['', 'allReduce', 'x'.repeat(300), 'barrier\n']);
      return { msg: { ...m, pending }, field: `Stats.pending[${i}].kind` };
    },
    (rng, m) => ({ msg: { ...m, commWaitUs: m.stepUs + rng.range(1, 1e6) }, field: 'Stats.commWaitUs' }),
    (rng, m) => {
      if (!m.pipeline) return undefined;
      const p = m.pipeline;
      return rng.pick([
        () => ({ msg: { ...m, pipeline: { ...p, stage: p.stages + rng.int(3) } }, field: 'Stats.pipeline.stage' }),
        () => ({ msg: { ...m, pipeline: { ...p, stages: rng.pick([0, 65537, 0xffffffff]), stage: 0 } }, field: 'Stats.pipeline.stages' }),
        () => ({ msg: { ...m, pipeline: { ...p, replica: p.replicas + rng.int(3) } }, field: 'Stats.pipeline.replica' }),
        () => ({ msg: { ...m, pipeline: { ...p, replicas: rng.pick([0, 65537, 0xffffffff]), replica: 0 } }, field: 'Stats.pipeline.replicas' }),
        () => ({ msg: { ...m, pipeline: { ...p, busyUs: p.wallUs + rng.range(1, 1e6) } }, field: 'Stats.pipeline.busyUs' }),
      ])();
    },
  ],
};

/** A valid message broken in one field, or undefined if none of the corruptions applies. */
function semanticCorruption(rng, m) {
  const list = SEMANTIC[m.kind];
  if (list.length === 0) return undefined;
  return rng.pick(list)(rng, m);
}

// ---------------------------------------------------------------------------
// Framed streams for the incremental decoder.

/** Payload lengths that put a frame exactly at, or one past, the limit are the interesting ones. */
function framedStream(rng, limit, payloadOf) {
  const parts = [];
  const n = rng.range(1, rng.chance(0.9) ? 6 : 40);
  for (let i = 0; i < n; i++) {
    let payload;
    const r = rng.u32() / 0x100000000;
    if (r < 0.05 && limit <= 20000) payload = rng.bytes(Math.max(0, limit - rng.int(2))); // at or just under the limit
    else if (r < 0.1) payload = Buffer.alloc(0);
    else payload = payloadOf(rng);
    const header = Buffer.alloc(4);
    let length = payload.length;
    if (rng.chance(0.08)) {
      length = rng.pick([0xffffffff, 0x80000000, limit + 1, limit, limit + 1000, payload.length + 1, Math.max(0, payload.length - 1), rng.u32()]);
    }
    header.writeUInt32BE(Math.min(length, 0xffffffff) >>> 0, 0);
    parts.push(header, payload);
  }
  if (rng.chance(0.2)) parts.push(rng.bytes(rng.int(8))); // a partial frame at the end
  return Buffer.concat(parts);
}

/** Cuts a stream into the pieces a socket might deliver. */
function chunked(rng, stream) {
  const mode = rng.int(4);
  if (mode === 0 || stream.length === 0) return [stream];
  const out = [];
  let at = 0;
  while (at < stream.length) {
    let n;
    if (mode === 1) n = stream.length <= 4096 ? 1 : rng.range(1, stream.length <= 65536 ? 8 : 512);
    else if (mode === 2) n = rng.range(1, 64);
    else n = rng.range(1, stream.length - at);
    out.push(stream.subarray(at, at + n));
    at += n;
  }
  if (rng.chance(0.1)) out.splice(rng.int(out.length + 1), 0, Buffer.alloc(0)); // empty reads happen too
  return out;
}

module.exports = { validMessage, mutate, structuredEnvelope, semanticCorruption, framedStream, chunked, EDGE_VALUES };
