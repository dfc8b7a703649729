#!/usr/bin/env node
'use strict';
// Fuzzer for everything the control plane reads from the network: the frame
// decoder (ts/control/frame.ts) and the protobuf messages with their
// validation (ts/control/messages.ts), run against dist/ (build first).
//
// How it works: case i of seed s draws all its randomness from caseSeed(s, i),
// so any case can be replayed alone (--case i). A case picks one generator:
//   random      random bytes, as a payload and as a raw stream
//   mutated     a valid message from the real encoder, then 1..8 byte-level mutations
//   structured  protobuf written by hand: edge values, wrong wire types, overlong
//               varints, duplicated/shuffled/unknown fields, deep groups, lying lengths
//   semantic    a valid message broken in one field (rank, size, port, topology,
//               string length, control characters); the error must name that field
//   stream      several frames (some with corrupt length prefixes, up to 0xFFFFFFFF)
//               cut at random chunk boundaries, compared against a reference parser
// Each decode must return a message that keeps the protocol's invariants or
// throw ControlProtocolError; anything else is a failure. The run happens in
// a worker with a capped heap, watched by the main thread: a case that does
// not finish within --hang-s is a hang; one whose decoding takes over --slow-ms
// (re-timed twice, to rule out GC and scheduling) is a failure too. The largest Buffer allocated
// inside the decoders is recorded and must stay within the frame limit.
//
// Usage: node test/fuzz/fuzz-control.js [--seed N] [--cases N] [--time S] [--case I] [--json]
//        [--slow-ms 50] [--hang-s 10] [--heap-mb 256]

const path = require('node:path');
const util = require('node:util');
const { Worker, isMainThread, workerData, parentPort } = require('node:worker_threads');
const { performance } = require('node:perf_hooks');
const { caseSeed, Rng } = require('./wire');
const gen = require('./generators');

const CONTROL = path.join(__dirname, '..', '..', 'dist', 'ts', 'control');
const GENERATORS = ['random', 'mutated', 'structured', 'semantic', 'stream'];
const WEIGHTS = [20, 30, 25, 10, 15];
const HEADER = 4;

function loadControl() {
  const frame = require(path.join(CONTROL, 'frame.js'));
  const messages = require(path.join(CONTROL, 'messages.js'));
  const server = require(path.join(CONTROL, 'server.js'));
  const topology = require(path.join(CONTROL, 'topology.js'));
  // The first decode loads proto/hora.proto: a one-time read that is not the decoder's allocation.
  messages.encodeEnvelope({ kind: 'heartbeat', seq: 0, timeMs: 0 });
  return {
    FrameDecoder: frame.FrameDecoder,
    MAX_FRAME_BYTES: frame.MAX_FRAME_BYTES,
    SERVER_MAX_FRAME_BYTES: server.SERVER_MAX_FRAME_BYTES ?? 16 * 1024,
    computeTopology: topology.computeTopology,
    encodeEnvelope: messages.encodeEnvelope,
    decodeEnvelope: messages.decodeEnvelope,
    ControlProtocolError: messages.ControlProtocolError,
  };
}

// ---------------------------------------------------------------------------
// Allocation tracking: the largest Buffer created while `tracking` is on.

const alloc = { tracking: false, largest: 0, peak: 0 }; // largest: this decode; peak: the whole run

function trackBufferAllocations() {
  const note = (n) => {
    if (!alloc.tracking) return;
    if (n > alloc.largest) alloc.largest = n;
    if (n > alloc.peak) alloc.peak = n;
  };
  for (const name of ['alloc', 'allocUnsafe', 'allocUnsafeSlow']) {
    const original = Buffer[name];
    Buffer[name] = function (size, ...rest) {
      note(size);
      return original.call(this, size, ...rest);
    };
  }
  const concat = Buffer.concat;
  Buffer.concat = function (list, totalLength) {
    note(totalLength ?? list.reduce((n, b) => n + b.length, 0));
    return concat.call(this, list, totalLength);
  };
  const from = Buffer.from;
  Buffer.from = function (value, ...rest) {
    if (!(value instanceof ArrayBuffer || value instanceof SharedArrayBuffer)) note(value?.length ?? 0); // a view of an ArrayBuffer copies nothing
    return from.call(this, value, ...rest);
  };
}

// ---------------------------------------------------------------------------
// Oracles.

const NAME_MAX = 1024;
const TEXT_MAX = 64 * 1024;
const isPort = (p) => Number.isInteger(p) && p >= 0 && p <= 65535;
const isName = (s) => typeof s === 'string' && Buffer.byteLength(s) <= NAME_MAX && !/[\x00-\x1f\x7f]/.test(s);
const isText = (s) => typeof s === 'string' && Buffer.byteLength(s) <= TEXT_MAX;
const isRankOrNone = (r) => Number.isInteger(r) && r >= -1;

/**
 * What a decoded message must satisfy, written apart from the validation in
 * messages.ts so that a hole there shows up here. Returns a problem or null.
 */
function invariantProblem(m) {
  switch (m.kind) {
    case 'challenge':
      return Buffer.isBuffer(m.nonce) && m.nonce.length >= 16 && m.nonce.length <= 1024 ? null : `nonce of ${m.nonce?.length} bytes`;
    case 'register':
      if (!isRankOrNone(m.rank)) return `rank ${m.rank}`;
      if (!isPort(m.dataPort)) return `dataPort ${m.dataPort}`;
      if (![m.hostId, m.dataAddr, m.hostname].every(isName)) return 'a name field';
      return Buffer.isBuffer(m.auth) && m.auth.length <= 1024 ? null : 'auth';
    case 'peerTable': {
      if (!Number.isInteger(m.size) || m.size < 1 || m.peers.length !== m.size) return `size ${m.size} with ${m.peers.length} peers`;
      if (!(m.yourRank >= 0 && m.yourRank < m.size)) return `yourRank ${m.yourRank}`;
      if (!isName(m.jobId)) return 'jobId';
      const byHost = new Map();
      for (let i = 0; i < m.peers.length; i++) {
        const p = m.peers[i];
        if (p.rank !== i) return `peers[${i}].rank ${p.rank}`;
        if (!isPort(p.dataPort)) return `peers[${i}].dataPort ${p.dataPort}`;
        if (![p.hostId, p.dataAddr, p.hostname].every(isName)) return `peers[${i}] name field`;
        if (!(p.localRank >= 0 && p.localRank < p.localSize && p.localSize <= m.size)) return `peers[${i}] local ${p.localRank}/${p.localSize}`;
        if (!(p.crossRank >= 0 && p.crossRank < p.crossSize && p.crossSize <= m.size)) return `peers[${i}] cross ${p.crossRank}/${p.crossSize}`;
        const h = byHost.get(p.hostId) ?? { n: 0, localSize: p.localSize, crossRank: p.crossRank };
        if (h.localSize !== p.localSize || h.crossRank !== p.crossRank || p.localRank !== h.n) return `peers[${i}] disagrees with its host`;
        h.n++;
        byHost.set(p.hostId, h);
      }
      for (const h of byHost.values()) if (h.n !== h.localSize) return 'a host with a wrong localSize';
      return null;
    }
    case 'abort':
      return isText(m.reason) && isName(m.code) && isRankOrNone(m.rank) ? null : 'abort fields';
    case 'heartbeat':
      return Number.isFinite(m.seq) && Number.isFinite(m.timeMs) && m.seq >= 0 && m.timeMs >= 0 ? null : 'heartbeat fields';
    case 'error':
      return isName(m.code) && isText(m.message) ? null : 'error fields';
    case 'stats': {
      const count = (n) => Number.isFinite(n) && n >= 0;
      const counters = [m.timeMs, m.submitted, m.completed, m.steps, m.stepUs, m.commWaitUs];
      if (!counters.every(count)) return 'a stats counter';
      if (m.completed > m.submitted || m.commWaitUs > m.stepUs) return 'stats counters disagree';
      const collectives = ['allreduce', 'broadcast', 'allgather', 'reduceScatter', 'barrier', 'alltoall', 'reduce', 'gather', 'scatter'];
      const kinds = [...collectives, 'send', 'recv'];
      if (m.kinds.length > kinds.length || new Set(m.kinds.map((k) => k.kind)).size !== m.kinds.length) return 'stats kinds';
      for (const k of m.kinds) if (!kinds.includes(k.kind) || ![k.count, k.bytes, k.busyUs].every(count)) return `stats kind ${k.kind}`;
      if (m.pending.length > 8) return `${m.pending.length} pending`;
      let last = 0;
      for (const p of m.pending) {
        if (!(p.seq > last && p.seq <= m.submitted)) return `pending seq ${p.seq}`;
        last = p.seq;
        if (!isName(p.name) || Buffer.byteLength(p.name) > 256) return 'pending name';
        if (![...collectives, 'invalid'].includes(p.kind) || !count(p.ageMs)) return 'pending kind or age';
      }
      const pipe = m.pipeline;
      if (pipe === undefined) return null;
      if (!(pipe.stages >= 1 && pipe.stages <= 65536 && pipe.stage < pipe.stages)) return `pipeline stage ${pipe.stage}/${pipe.stages}`;
      if (!(pipe.replicas >= 1 && pipe.replicas <= 65536 && pipe.replica < pipe.replicas)) return `pipeline replica ${pipe.replica}/${pipe.replicas}`;
      if (![pipe.batches, pipe.busyUs, pipe.wallUs, pipe.weightBytes, pipe.peakStashBytes].every(count) || pipe.busyUs > pipe.wallUs) return 'pipeline counters';
      return null;
    }
    default:
      return `unknown kind ${m.kind}`;
  }
}

function hexHead(buf, n = 96) {
  const head = buf.subarray(0, n).toString('hex');
  return buf.length > n ? `${head}... (${buf.length} bytes)` : `${head} (${buf.length} bytes)`;
}

// ---------------------------------------------------------------------------
// One case.

class Run {
  constructor(control, seed) {
    this.c = control;
    this.seed = seed;
    this.stats = Object.fromEntries(GENERATORS.map((g) => [g, { cases: 0, decoded: 0, rejected: 0, frames: 0 }]));
    this.failures = [];
    this.failureCount = 0;
    this.largestPending = 0;
    this.current = { index: -1, generator: '' };
    this.recording = true;
    /** Time spent inside the decoders in this case: what the slow-case limit applies to. */
    this.decoderMs = 0;
  }

  fail(what, detail) {
    if (!this.recording) return;
    this.failureCount++;
    if (this.failures.length < 20) this.failures.push({ case: this.current.index, generator: this.current.generator, what, detail });
  }

  /** decodeEnvelope must give a message within the invariants, or a ControlProtocolError. */
  decode(payload, st) {
    const { decodeEnvelope, ControlProtocolError } = this.c;
    alloc.tracking = true;
    alloc.largest = 0;
    let msg;
    const t0 = performance.now();
    try {
      msg = decodeEnvelope(payload);
    } catch (e) {
      if (e instanceof ControlProtocolError) st.rejected++;
      else this.fail(`decodeEnvelope threw ${e?.name ?? typeof e} instead of ControlProtocolError: ${e?.message ?? e}`, hexHead(payload));
      return undefined;
    } finally {
      this.decoderMs += performance.now() - t0;
      alloc.tracking = false;
      if (alloc.largest > Math.max(payload.length, 64)) this.fail(`decodeEnvelope allocated ${alloc.largest} bytes for a ${payload.length}-byte payload`, hexHead(payload));
    }
    st.decoded++;
    const problem = invariantProblem(msg);
    if (problem) this.fail(`decoded a ${msg.kind} that breaks the protocol: ${problem}`, hexHead(payload));
    return msg;
  }

  roundTrip(msg, st) {
    const back = this.decode(this.c.encodeEnvelope(msg), st);
    if (!back || !util.isDeepStrictEqual(back, msg)) this.fail(`valid ${msg.kind} did not round-trip`, util.inspect(msg, { depth: 1, maxStringLength: 80 }));
  }

  /** Feeds `stream` in random pieces to a FrameDecoder and compares with a reference parser. */
  stream(rng, stream, limit, st) {
    const { FrameDecoder, ControlProtocolError } = this.c;
    const ref = [];
    let off = 0;
    let failEnd = -1; // bytes needed for the decoder to see the first oversized length
    while (off + HEADER <= stream.length) {
      const len = stream.readUInt32BE(off);
      if (len > limit) {
        failEnd = off + HEADER;
        break;
      }
      if (off + HEADER + len > stream.length) break;
      ref.push({ end: off + HEADER + len, payload: stream.subarray(off + HEADER, off + HEADER + len) });
      off += HEADER + len;
    }
    const decoder = new FrameDecoder(limit);
    const got = [];
    let pushed = 0;
    let before = 0;
    let threw = false;
    const chunks = gen.chunked(rng, stream);
    alloc.tracking = true;
    alloc.largest = 0;
    const t0 = performance.now();
    try {
      for (const chunk of chunks) {
        before = pushed;
        pushed += chunk.length;
        try {
          got.push(...decoder.push(chunk));
        } catch (e) {
          if (!(e instanceof ControlProtocolError)) this.fail(`FrameDecoder threw ${e?.name}: ${e?.message}`, hexHead(stream));
          threw = true;
          break;
        }
        if (decoder.pendingBytes > this.largestPending) this.largestPending = decoder.pendingBytes;
        if (decoder.pendingBytes >= HEADER + limit) this.fail(`FrameDecoder holds ${decoder.pendingBytes} bytes with a limit of ${limit}`, hexHead(stream));
      }
    } finally {
      this.decoderMs += performance.now() - t0;
      alloc.tracking = false;
    }
    if (alloc.largest > limit) this.fail(`FrameDecoder allocated ${alloc.largest} bytes with a limit of ${limit}`, hexHead(stream));
    let expected = ref;
    if (failEnd >= 0) {
      if (!threw) this.fail(`FrameDecoder accepted a length above its limit of ${limit}`, hexHead(stream));
      else if (!(before < failEnd && failEnd <= pushed)) this.fail(`FrameDecoder failed after byte ${pushed}, the oversized length ends at byte ${failEnd}`, hexHead(stream));
      let stillFailed = false;
      try {
        decoder.push(Buffer.from([0, 0, 0, 0]));
      } catch (e) {
        stillFailed = e instanceof ControlProtocolError;
      }
      if (!stillFailed || decoder.pendingBytes !== 0) this.fail('FrameDecoder took input after failing', hexHead(stream));
      expected = ref.filter((r) => r.end <= before);
    } else {
      if (threw) this.fail('FrameDecoder failed on a stream with no oversized length', hexHead(stream));
      else if (decoder.pendingBytes !== stream.length - off) this.fail(`FrameDecoder holds ${decoder.pendingBytes} bytes, expected ${stream.length - off}`, hexHead(stream));
    }
    if (got.length !== expected.length || got.some((f, i) => !f.equals(expected[i].payload))) {
      this.fail(`FrameDecoder returned ${got.length} frames, the reference ${expected.length} (or different bytes)`, hexHead(stream));
    }
    st.frames += got.length;
    // A connection stops at its first bad frame; a stream of 0x00 bytes is thousands of empty
    // frames, and creating thousands of errors is the test's cost, not the decoder's.
    for (const f of got.slice(0, 64)) this.decode(f, st);
  }

  pickLimit(rng) {
    const r = rng.int(10);
    if (r < 4) return this.c.MAX_FRAME_BYTES;
    if (r < 7) return this.c.SERVER_MAX_FRAME_BYTES;
    return rng.int(300);
  }

  valid(rng) {
    return gen.validMessage(rng, this.c.computeTopology);
  }

  /** Runs case `index`; everything it does follows from (seed, index). */
  runCase(index) {
    this.decoderMs = 0;
    try {
      this.runCaseUnguarded(index);
    } catch (e) {
      // Every decoder call above catches its own errors: this one came from the harness (or escaped a decoder).
      this.fail(`uncaught ${e?.name}: ${e?.message}`, e?.stack?.split('\n').slice(1, 4).join(' | ') ?? '');
    }
  }

  runCaseUnguarded(index) {
    const rng = new Rng(caseSeed(this.seed, index));
    const generator = GENERATORS[rng.weighted(WEIGHTS)];
    this.current = { index, generator };
    const st = this.stats[generator];
    st.cases++;
    const enc = this.c.encodeEnvelope;
    switch (generator) {
      case 'random': {
        this.decode(rng.bytes(rng.length(rng.chance(0.99) ? 512 : 70000)), st);
        this.stream(rng, rng.bytes(rng.length(1024)), this.pickLimit(rng), st);
        return;
      }
      case 'mutated': {
        const msg = this.valid(rng);
        if (rng.chance(0.2)) this.roundTrip(msg, st);
        const bytes = enc(msg);
        const other = rng.chance(0.1) ? enc(this.valid(rng)) : bytes;
        this.decode(gen.mutate(rng, bytes, other), st);
        return;
      }
      case 'structured':
        this.decode(gen.structuredEnvelope(rng), st);
        return;
      case 'semantic': {
        let msg;
        let broken;
        for (let tries = 0; !broken && tries < 10; tries++) {
          msg = this.valid(rng);
          broken = gen.semanticCorruption(rng, msg);
        }
        if (!broken) return;
        this.roundTrip(msg, st);
        let bytes;
        try {
          bytes = enc(broken.msg);
        } catch (e) {
          this.fail(`harness: the real encoder refused a corrupted ${msg.kind}: ${e.message}`, broken.field);
          return;
        }
        try {
          const got = this.c.decodeEnvelope(bytes);
          st.decoded++;
          this.fail(`${broken.field} broken, but the ${got.kind} was accepted`, hexHead(bytes));
        } catch (e) {
          st.rejected++;
          if (!(e instanceof this.c.ControlProtocolError)) this.fail(`threw ${e?.name} instead of ControlProtocolError: ${e?.message}`, broken.field);
          else if (!e.message.startsWith(`${broken.field} `)) this.fail(`${broken.field} broken, but the error says: ${e.message.slice(0, 200)}`, hexHead(bytes));
        }
        return;
      }
      default: {
        const limit = this.pickLimit(rng);
        const payloadOf = (r) => {
          const k = r.int(4);
          if (k === 0) return enc(this.valid(r));
          if (k === 1) return gen.mutate(r, enc(this.valid(r)), Buffer.alloc(0));
          if (k === 2) return gen.structuredEnvelope(r);
          return r.bytes(r.length(256));
        };
        this.stream(rng, gen.framedStream(rng, limit, payloadOf), limit, st);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// The worst inputs at the frame limits, measured once per run: how long one
// frame can keep the event loop busy and how much heap it can make.

function worstCases(control) {
  const out = {};
  const varint = (n) => {
    const b = [];
    while (n > 127) {
      b.push((n & 127) | 128);
      n = Math.floor(n / 128);
    }
    b.push(n);
    return Buffer.from(b);
  };
  for (const [label, limit] of [['client', control.MAX_FRAME_BYTES], ['server', control.SERVER_MAX_FRAME_BYTES]]) {
    // A PeerTable of empty Peer entries: the most objects per byte protobuf can be made to build.
    const entries = Math.floor((limit - 8) / 2);
    const inner = Buffer.alloc(entries * 2);
    for (let i = 0; i < entries; i++) inner[2 * i] = 0x1a;
    const payload = Buffer.concat([Buffer.from([0x1a]), varint(inner.length), inner]);
    const heap0 = process.memoryUsage().heapUsed;
    const t0 = performance.now();
    let outcome = 'accepted';
    try {
      control.decodeEnvelope(payload);
    } catch (e) {
      outcome = e instanceof control.ControlProtocolError ? 'rejected' : `threw ${e.name}`;
    }
    out[label] = { limit, payloadBytes: payload.length, decodeMs: +(performance.now() - t0).toFixed(1), heapGrowthMB: +((process.memoryUsage().heapUsed - heap0) / 2 ** 20).toFixed(1), outcome };
  }
  return out;
}

// ---------------------------------------------------------------------------
// Worker side.

function gcFunction() {
  try {
    require('node:v8').setFlagsFromString('--expose-gc');
    return require('node:vm').runInNewContext('gc');
  } catch {
    return () => undefined;
  }
}

function workerMain({ seed, cases, timeS, slowMs, progress }) {
  trackBufferAllocations();
  const control = loadControl();
  const gc = gcFunction();
  const run = new Run(control, seed);
  const counter = new Int32Array(progress);
  const worst = worstCases(control);
  const started = performance.now();
  const deadline = timeS ? started + timeS * 1000 : Infinity;
  const limit = cases ?? Infinity;
  const mem = { peakHeapUsed: 0, peakArrayBuffers: 0, baseline: undefined };
  let slowest = { ms: 0 };
  let slowFlagged = 0;
  let lastReport = started;
  let i = 0;
  const sample = () => {
    const m = process.memoryUsage();
    mem.peakHeapUsed = Math.max(mem.peakHeapUsed, m.heapUsed);
    mem.peakArrayBuffers = Math.max(mem.peakArrayBuffers, m.arrayBuffers);
  };
  for (; i < limit; i++) {
    Atomics.store(counter, 0, i);
    run.runCase(i);
    let ms = run.decoderMs;
    if (ms > slowMs) {
      // Re-time it without recording: GC pauses and a busy machine are not the decoder's fault.
      slowFlagged++;
      const { current, stats } = run;
      run.recording = false;
      run.stats = JSON.parse(JSON.stringify(stats)); // a scratch copy: re-runs do not count
      for (let k = 0; k < 2 && ms > slowMs; k++) {
        run.runCase(i);
        ms = Math.min(ms, run.decoderMs);
      }
      run.recording = true;
      run.current = current;
      run.stats = stats;
      if (ms > slowMs) run.fail(`decoding took ${ms.toFixed(1)} ms (limit ${slowMs} ms) three times`, `replay: node test/fuzz/fuzz-control.js --seed ${seed} --case ${i}`);
    }
    if (ms > slowest.ms) slowest = { ms, case: i, generator: run.current.generator };
    if ((i & 4095) === 0) {
      sample();
      const now = performance.now();
      if (now > deadline) {
        i++;
        break;
      }
      if (mem.baseline === undefined && i >= Math.min(20000, (cases ?? Infinity) / 5)) {
        gc();
        mem.baseline = process.memoryUsage();
      }
      if (now - lastReport > 5000) {
        lastReport = now;
        parentPort.postMessage({ type: 'progress', cases: i, seconds: (now - started) / 1000 });
      }
    }
  }
  const seconds = (performance.now() - started) / 1000;
  sample();
  gc();
  const end = process.memoryUsage();
  const mb = (n) => +(n / 2 ** 20).toFixed(1);
  parentPort.postMessage({
    type: 'done',
    result: {
      seed, cases: i, seconds: +seconds.toFixed(2), casesPerSecond: Math.round(i / seconds),
      generators: run.stats, failureCount: run.failureCount, failures: run.failures,
      slowest: { ...slowest, ms: +slowest.ms.toFixed(2) }, slowFlagged,
      largestPendingBytes: run.largestPending, largestDecoderAllocation: alloc.peak,
      memoryMB: {
        workerPeakHeapUsed: mb(mem.peakHeapUsed), workerPeakArrayBuffers: mb(mem.peakArrayBuffers),
        heapGrowthAfterGc: mem.baseline ? mb(end.heapUsed - mem.baseline.heapUsed) : null,
        arrayBuffersGrowthAfterGc: mem.baseline ? mb(end.arrayBuffers - mem.baseline.arrayBuffers) : null,
      },
      worstCases: worst,
    },
  });
}

// ---------------------------------------------------------------------------
// Main side.

/**
 * Runs the fuzzer in a worker with a capped heap and resolves with its result;
 * a case that runs longer than hangS, or a worker that dies, becomes a failure.
 */
function fuzz({ seed = require('node:crypto').randomInt(2 ** 32 - 1), cases, timeS, slowMs = 50, hangS = 10, heapMb = 256, onProgress } = {}) {
  if (cases === undefined && timeS === undefined) cases = 1_000_000;
  const progress = new SharedArrayBuffer(4);
  const counter = new Int32Array(progress);
  return new Promise((resolve) => {
    const worker = new Worker(__filename, {
      workerData: { fuzz: true, seed, cases, timeS, slowMs, progress },
      execArgv: [], // not the test runner's loaders and source maps: they triple the time per case
      resourceLimits: { maxOldGenerationSizeMb: heapMb },
    });
    let peakRss = process.memoryUsage.rss();
    let last = -1;
    let lastChange = Date.now();
    let settled = false;
    const finish = (result) => {
      if (settled) return;
      settled = true;
      clearInterval(watch);
      result.memoryMB = { ...result.memoryMB, processPeakRss: +(peakRss / 2 ** 20).toFixed(1) };
      resolve(result);
    };
    const broken = (what) => {
      const at = Atomics.load(counter, 0);
      finish({ seed, cases: at, failureCount: 1, failures: [{ case: at, generator: generatorOf(seed, at), what, detail: `replay: node test/fuzz/fuzz-control.js --seed ${seed} --case ${at}` }] });
    };
    const watch = setInterval(() => {
      peakRss = Math.max(peakRss, process.memoryUsage.rss());
      const at = Atomics.load(counter, 0);
      if (at !== last) {
        last = at;
        lastChange = Date.now();
      } else if (Date.now() - lastChange > hangS * 1000) {
        worker.terminate();
        broken(`hang: case ${at} ran for more than ${hangS} s`);
      }
    }, 100);
    worker.on('message', (m) => {
      if (m.type === 'progress') onProgress?.(m);
      else if (m.type === 'done') finish(m.result);
    });
    worker.on('error', (e) => broken(`worker died: ${e.code ?? e.name}: ${e.message}`));
    worker.on('exit', (code) => {
      if (!settled) broken(`worker exited with code ${code}`);
    });
  });
}

function generatorOf(seed, index) {
  return GENERATORS[new Rng(caseSeed(seed, index)).weighted(WEIGHTS)];
}

/** Runs one case on this thread, printing what it fed in: for reproducers. */
function replay(seed, index) {
  trackBufferAllocations();
  const run = new Run(loadControl(), seed);
  run.runCase(index);
  return { case: index, generator: run.current.generator, failures: run.failures, stats: run.stats[run.current.generator] };
}

function parseArgs(argv) {
  const opts = {};
  const num = (s, flag) => {
    const n = Number(s);
    if (!Number.isFinite(n) || n < 0) throw new Error(`${flag} takes a non-negative number, got ${JSON.stringify(s)}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = () => argv[++i];
    if (flag === '--seed') opts.seed = num(value(), flag) >>> 0;
    else if (flag === '--cases') opts.cases = Math.floor(num(value(), flag));
    else if (flag === '--time') opts.timeS = num(value(), flag);
    else if (flag === '--case') opts.replay = Math.floor(num(value(), flag));
    else if (flag === '--slow-ms') opts.slowMs = num(value(), flag);
    else if (flag === '--hang-s') opts.hangS = num(value(), flag);
    else if (flag === '--heap-mb') opts.heapMb = num(value(), flag);
    else if (flag === '--json') opts.json = true;
    else throw new Error(`unknown option ${flag}; see the usage at the top of ${__filename}`);
  }
  return opts;
}

async function cli() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.seed === undefined) opts.seed = require('node:crypto').randomInt(2 ** 32 - 1);
  if (opts.replay !== undefined) {
    const r = replay(opts.seed, opts.replay);
    console.log(util.inspect(r, { depth: 4 }));
    process.exitCode = r.failures.length ? 1 : 0;
    return;
  }
  console.log(`fuzz-control: seed ${opts.seed} (replay a case with --seed ${opts.seed} --case I)`);
  const result = await fuzz({ ...opts, onProgress: opts.json ? undefined : (p) => console.log(`  ${p.cases} cases, ${p.seconds.toFixed(0)} s`) });
  if (opts.json) console.log(JSON.stringify(result, null, 2));
  else {
    console.log(`${result.cases} cases in ${result.seconds} s (${result.casesPerSecond} cases/s)`);
    for (const [g, s] of Object.entries(result.generators ?? {})) {
      console.log(`  ${g.padEnd(10)} ${String(s.cases).padStart(9)} cases ${String(s.decoded).padStart(9)} decoded ${String(s.rejected).padStart(9)} rejected ${String(s.frames).padStart(9)} frames`);
    }
    console.log(`slowest case ${result.slowest?.ms} ms (case ${result.slowest?.case}, ${result.slowest?.generator}); ${result.slowFlagged} re-timed`);
    console.log(`largest decoder allocation ${result.largestDecoderAllocation} B, largest pending ${result.largestPendingBytes} B`);
    console.log(`memory (MB): ${JSON.stringify(result.memoryMB)}`);
    console.log(`worst frames: ${JSON.stringify(result.worstCases)}`);
    console.log(result.failureCount ? `FAILED: ${result.failureCount} failures` : 'no failures');
    for (const f of result.failures ?? []) console.log(`  case ${f.case} (${f.generator}): ${f.what}\n    ${f.detail}`);
  }
  process.exitCode = result.failureCount ? 1 : 0;
}

if (!isMainThread && workerData?.fuzz) workerMain(workerData);
else if (require.main === module) {
  cli().catch((e) => {
    console.error(e.message);
    process.exitCode = 2;
  });
}

module.exports = { fuzz, replay, invariantProblem, GENERATORS };
