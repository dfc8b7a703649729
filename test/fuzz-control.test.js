'use strict';
// Untrusted input on the control plane: a short run of the fuzzer
// (test/fuzz/fuzz-control.js; the long one is `npm run fuzz`), reproducers
// for what it found, field validation, and a live rendezvous server under a
// crowd of bad connections that must still form a job of 2.
const t = require('tap');
const crypto = require('node:crypto');
const net = require('node:net');
const path = require('node:path');

const dist = path.join(__dirname, '..', 'dist', 'ts', 'control');
const { FrameDecoder, encodeFrame, MAX_FRAME_BYTES } = require(path.join(dist, 'frame.js'));
const { encodeEnvelope, decodeEnvelope, ControlProtocolError, PROTOCOL_VERSION } = require(path.join(dist, 'messages.js'));
const { RendezvousServer, SERVER_MAX_FRAME_BYTES } = require(path.join(dist, 'server.js'));
const { computeTopology } = require(path.join(dist, 'topology.js'));
const { register } = require(path.join(dist, 'client.js'));
const { fuzz } = require('./fuzz/fuzz-control.js');
const { Rng } = require('./fuzz/wire.js');

const SECRET = 'fuzz-secret';
const SEED = process.env.HORA_FUZZ_SEED ? Number(process.env.HORA_FUZZ_SEED) >>> 0 : 20250101;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const hmac = (nonce, secret = SECRET) => crypto.createHmac('sha256', secret).update(nonce).digest();

function registerMsg(nonce, extra = {}) {
  return { kind: 'register', protocolVersion: PROTOCOL_VERSION, rank: -1, hostId: 'h', dataAddr: '127.0.0.1', dataPort: 1234, pid: 1, hostname: 'x', auth: hmac(nonce), ...extra };
}

function validTable(size = 3) {
  const regs = Array.from({ length: size }, (_, i) => ({ hostId: `host-${i % 2}`, dataAddr: '10.0.0.1', dataPort: 5000 + i, hostname: 'n', pid: i }));
  return { kind: 'peerTable', jobId: 'job', size, peers: computeTopology(regs), yourRank: 0 };
}

t.test(`short fuzz run (seed ${SEED}; HORA_FUZZ_SEED=N to change it)`, async (t) => {
  const r = await fuzz({ seed: SEED, cases: 20000 });
  t.equal(r.failureCount, 0, 'no crash, no unexpected exception, no hang, no slow case, no broken invariant');
  for (const f of r.failures ?? []) t.comment(`case ${f.case} (${f.generator}): ${f.what} ${f.detail}`);
  t.equal(r.cases, 20000);
  for (const [name, s] of Object.entries(r.generators)) {
    t.ok(s.cases > 1000, `${name} ran (${s.cases} cases)`);
    t.ok(s.rejected > 0, `${name} produced rejected input`);
    if (name !== 'random') t.ok(s.decoded > 0, `${name} produced valid input too`);
  }
  t.ok(r.largestPendingBytes < MAX_FRAME_BYTES + 4, `decoder held at most ${r.largestPendingBytes} bytes`);
  t.ok(r.largestDecoderAllocation <= MAX_FRAME_BYTES, `largest decoder allocation ${r.largestDecoderAllocation} bytes`);
  t.ok(r.memoryMB.heapGrowthAfterGc < 32, `heap after GC grew ${r.memoryMB.heapGrowthAfterGc} MB`);
  t.ok(r.worstCases.server.decodeMs < 500, `a full server-limit frame decodes in ${r.worstCases.server.decodeMs} ms`);
  t.comment(`${r.casesPerSecond} cases/s; slowest ${r.slowest.ms} ms; memory ${JSON.stringify(r.memoryMB)}`);
});

t.test('reproducers', async (t) => {
  t.test('a frame sent one byte at a time takes linear time (was quadratic: 14 s for 16 KiB)', async (t) => {
    const n = 64 * 1024;
    const frame = Buffer.alloc(4 + n, 7);
    frame.writeUInt32BE(n, 0);
    const d = new FrameDecoder();
    const started = Date.now();
    const out = [];
    for (let i = 0; i < frame.length; i++) out.push(...d.push(frame.subarray(i, i + 1)));
    t.ok(Date.now() - started < 3000, `took ${Date.now() - started} ms`);
    t.equal(out.length, 1);
    t.ok(out[0].equals(frame.subarray(4)));
    t.equal(d.pendingBytes, 0);
  });

  t.test('a silent sender of a partial frame holds at most twice what it sent', async (t) => {
    const d = new FrameDecoder();
    const header = Buffer.alloc(4);
    header.writeUInt32BE(MAX_FRAME_BYTES, 0);
    d.push(header);
    d.push(Buffer.alloc(10));
    t.equal(d.pendingBytes, 14);
    t.ok(d.payload.length <= 256, `payload buffer of ${d.payload.length} bytes for 10 received`); // private, looked at on purpose
  });

  t.test('frames behind a rejected one are not handled: one Error, one log line', async (t) => {
    const logs = [];
    const server = new RendezvousServer({ size: 2, secret: SECRET, log: (level, msg) => logs.push(`${level} ${msg}`) });
    const { port } = await server.listen();
    t.teardown(() => server.close());
    let rejected = 0;
    server.on('rejected', () => rejected++);
    const heartbeat = encodeFrame(encodeEnvelope({ kind: 'heartbeat', seq: 1, timeMs: 1 }));
    const got = await talk(port, () => Buffer.concat(Array(500).fill(heartbeat)));
    t.same(got.messages.map((m) => m.kind), ['challenge', 'error']);
    t.equal(rejected, 1);
    t.equal(logs.filter((l) => l.includes('rejected control connection')).length, 1);
  });

  t.test('the server takes frames up to SERVER_MAX_FRAME_BYTES, not the client\'s 1 MiB', async (t) => {
    t.equal(SERVER_MAX_FRAME_BYTES, 16 * 1024);
    const server = new RendezvousServer({ size: 1, secret: SECRET });
    const { port } = await server.listen();
    t.teardown(() => server.close());
    const header = Buffer.alloc(4);
    header.writeUInt32BE(SERVER_MAX_FRAME_BYTES + 1, 0);
    const got = await talk(port, () => header);
    t.match(got.messages[1], { kind: 'error', code: 'ERR_INVALID_ARGUMENT', message: /exceeds the limit of 16384 bytes/ });
  });
});

t.test('validation names the field and the value', async (t) => {
  const nonce = crypto.randomBytes(32);
  const table = validTable(3);
  const peersWith = (i, change) => table.peers.map((p, k) => (k === i ? { ...p, ...change } : p));
  const cases = [
    [registerMsg(nonce, { rank: -2 }), /^Register\.rank -2 is out of range/],
    [registerMsg(nonce, { dataPort: 65536 }), /^Register\.dataPort 65536 is not a TCP port/],
    [registerMsg(nonce, { hostId: 'a'.repeat(1025) }), /^Register\.hostId 1025 bytes exceeds the limit of 1024/],
    [registerMsg(nonce, { hostname: 'evil\nWARN forged log line' }), /^Register\.hostname "evil\\nWARN forged log line" contains the control character U\+000a/],
    [registerMsg(nonce, { auth: Buffer.alloc(2000) }), /^Register\.auth 2000 bytes must be 0\.\.1024 bytes/],
    [{ kind: 'challenge', nonce: Buffer.alloc(4), protocolVersion: 1 }, /^Challenge\.nonce 4 bytes/],
    [{ ...table, size: 0, peers: [] }, /^PeerTable\.size 0 is out of range/],
    [{ ...table, size: 4 }, /^PeerTable\.peers 3 entries does not match PeerTable\.size 4/],
    [{ ...table, yourRank: 3 }, /^PeerTable\.yourRank 3 is out of range for size 3/],
    [{ ...table, peers: peersWith(2, { rank: 1 }) }, /^PeerTable\.peers\[2\]\.rank 1 must equal its index 2/],
    [{ ...table, peers: peersWith(1, { rank: 7 }) }, /^PeerTable\.peers\[1\]\.rank 7/],
    [{ ...table, peers: peersWith(0, { dataPort: 70000 }) }, /^PeerTable\.peers\[0\]\.dataPort 70000 is not a TCP port/],
    [{ ...table, peers: peersWith(2, { localRank: 5 }) }, /^PeerTable\.peers\[2\]\.localRank 5 disagrees with the host ids, which give 1/],
    [{ ...table, peers: peersWith(1, { crossSize: 1 }) }, /^PeerTable\.peers\[1\]\.crossSize 1 disagrees/],
    [{ kind: 'abort', reason: 'r', rank: -3, code: 'ERR_PEER_LOST' }, /^Abort\.rank -3/],
    [{ kind: 'error', code: 'ERR_AUTH', message: 'm'.repeat(70000) }, /^Error\.message 70000 bytes exceeds the limit of 65536/],
  ];
  for (const [msg, want] of cases) {
    const err = t.throws(() => decodeEnvelope(encodeEnvelope(msg)), ControlProtocolError, String(want));
    t.match(err?.message, want);
  }
  t.same(decodeEnvelope(encodeEnvelope(table)), table, 'a valid table passes');
  t.same(decodeEnvelope(encodeEnvelope(validTable(1))), validTable(1), 'a table of one passes');
  t.same(decodeEnvelope(encodeEnvelope(registerMsg(nonce, { rank: -1, dataPort: 65535 }))), registerMsg(nonce, { rank: -1, dataPort: 65535 }));
});

t.test('a client refuses a bad peer table from the server', async (t) => {
  const fake = net.createServer((socket) => {
    socket.on('error', () => undefined);
    socket.write(encodeFrame(encodeEnvelope({ kind: 'challenge', nonce: crypto.randomBytes(32), protocolVersion: PROTOCOL_VERSION })));
    socket.once('data', () => {
      const table = validTable(2);
      table.peers[1] = { ...table.peers[1], dataPort: 70000 };
      socket.write(encodeFrame(encodeEnvelope(table)));
    });
  });
  await new Promise((r) => fake.listen(0, '127.0.0.1', r));
  t.teardown(() => fake.close());
  await t.rejects(
    register({ addr: '127.0.0.1', port: fake.address().port, secret: SECRET, rank: 0, hostId: 'h', dataAddr: '', dataPort: 0, timeoutMs: 3000 }),
    { code: 'ERR_INTERNAL', message: /PeerTable\.peers\[1\]\.dataPort 70000 is not a TCP port/ },
  );
});

t.test('a registered-looking Register with a bad field is refused, naming it', async (t) => {
  const server = new RendezvousServer({ size: 1, secret: SECRET });
  const { port } = await server.listen();
  t.teardown(() => server.close());
  const got = await talk(port, (challenge) => encodeFrame(encodeEnvelope(registerMsg(challenge.nonce, { rank: -7 }))));
  t.match(got.messages[1], { kind: 'error', code: 'ERR_INVALID_ARGUMENT', message: /Register\.rank -7 is out of range/ });
});

// ---------------------------------------------------------------------------
// Live server fuzz.

/**
 * Connects, reads the Challenge, writes what `send(challenge)` returns (a
 * Buffer, or a function that takes the socket for slow senders), and resolves
 * when the socket closes with what the server said.
 */
function talk(port, send, { closeAtOnce = false } = {}) {
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = net.connect({ host: '127.0.0.1', port });
    const decoder = new FrameDecoder();
    const out = { messages: [], serverEnded: false, localPort: 0, ms: 0 };
    let timer;
    socket.on('connect', () => {
      out.localPort = socket.localPort;
      if (closeAtOnce) socket.destroy();
    });
    socket.on('data', (chunk) => {
      let frames = [];
      try {
        frames = decoder.push(chunk);
      } catch {
        out.badReply = true;
      }
      for (const f of frames) {
        const msg = decodeEnvelope(f);
        out.messages.push(msg);
        if (msg.kind === 'challenge' && out.messages.length === 1) {
          const what = send(msg);
          if (typeof what === 'function') timer = what(socket);
          else if (what) socket.write(what);
        }
      }
    });
    socket.on('end', () => {
      out.serverEnded = true;
    });
    socket.on('error', (e) => {
      out.error = e.code;
    });
    socket.on('close', () => {
      clearInterval(timer);
      out.ms = Date.now() - started;
      resolve(out);
    });
  });
}

t.test('live server: a crowd of bad connections cannot stop a job of 2', async (t) => {
  const HANDSHAKE_MS = 1500;
  const logs = [];
  const server = new RendezvousServer({
    size: 2, secret: SECRET, timeoutMs: 20000, handshakeTimeoutMs: HANDSHAKE_MS,
    log: (level, msg) => logs.push({ level, msg }),
  });
  const { port } = await server.listen();
  t.teardown(() => server.close());

  const rng = new Rng(SEED);
  const huge = Buffer.alloc(MAX_FRAME_BYTES - 1, 0x5a); // shared by every sender: the test's own memory stays flat
  huge.writeUInt32BE(MAX_FRAME_BYTES - 8, 0);
  let capturedNonce; // an eavesdropper's capture, replayed on another connection
  const attacks = {
    random: () => rng.bytes(rng.range(1, 2000)),
    partial: (ch) => encodeFrame(encodeEnvelope(registerMsg(ch.nonce))).subarray(0, rng.range(1, 20)),
    bigPartial: () => { // announce the largest frame the server takes, send most of it, go silent
      const b = Buffer.alloc(4 + SERVER_MAX_FRAME_BYTES - 100);
      b.writeUInt32BE(SERVER_MAX_FRAME_BYTES, 0);
      return b;
    },
    hugePartial: () => huge, // announce ~1 MiB (a worker's limit) and send nearly all of it
    oversized: () => {
      const b = Buffer.alloc(4 + rng.int(64));
      b.writeUInt32BE(rng.pick([0xffffffff, 0x80000000, SERVER_MAX_FRAME_BYTES + 1, MAX_FRAME_BYTES]), 0);
      return b;
    },
    wrongSecret: (ch) => encodeFrame(encodeEnvelope({ ...registerMsg(ch.nonce), auth: hmac(ch.nonce, 'not-the-secret') })),
    noAuth: (ch) => encodeFrame(encodeEnvelope({ ...registerMsg(ch.nonce), auth: Buffer.alloc(0) })),
    replayed: (ch) => {
      if (!capturedNonce) capturedNonce = ch.nonce;
      return encodeFrame(encodeEnvelope(registerMsg(capturedNonce === ch.nonce ? crypto.randomBytes(32) : capturedNonce)));
    },
    badFields: (ch) => encodeFrame(encodeEnvelope(registerMsg(ch.nonce, rng.pick([{ rank: -9 }, { dataPort: 99999 }, { hostId: 'x\u0000' }])))),
    flood: () => Buffer.concat(Array(300).fill(encodeFrame(encodeEnvelope({ kind: 'heartbeat', seq: 1, timeMs: 1 })))),
    slowloris: (ch) => (socket) => {
      const frame = encodeFrame(encodeEnvelope(registerMsg(ch.nonce)));
      let at = 0;
      return setInterval(() => at < frame.length && socket.write(frame.subarray(at, ++at)), 100);
    },
    connectClose: null,
  };
  const kinds = Object.keys(attacks);
  const N = 22 * kinds.length;

  const mem = () => {
    const m = process.memoryUsage();
    return m.heapUsed + m.arrayBuffers;
  };
  // Bytes the server's frame decoders hold for unfinished frames (private fields, looked at on purpose):
  // what a crowd of senders can make the server keep, whatever the garbage collector is doing.
  const pending = () => [...server.connections].map((c) => c.decoder.pendingBytes);
  const before = mem();
  let peak = before;
  let peakHeld = 0;
  let peakOne = 0;
  const sampler = setInterval(() => {
    peak = Math.max(peak, mem());
    const p = pending();
    peakHeld = Math.max(peakHeld, p.reduce((a, b) => a + b, 0));
    peakOne = Math.max(peakOne, ...p);
  }, 20);

  const bad = [];
  for (let i = 0; i < N; i++) {
    const kind = kinds[i % kinds.length];
    const attack = attacks[kind];
    bad.push(talk(port, attack ?? (() => undefined), { closeAtOnce: attack === null }).then((r) => ({ kind, ...r })));
  }
  await sleep(300); // the crowd is in; the silent ones are still held

  const legit = (rank) => register({
    addr: '127.0.0.1', port, secret: SECRET, rank, hostId: 'good', dataAddr: '127.0.0.1', dataPort: 41000 + (rank < 0 ? 9 : rank), timeoutMs: 5000,
  });
  const started = Date.now();
  const [a, b] = await Promise.all([legit(0), legit(-1)]);
  const formedMs = Date.now() - started;
  t.ok(formedMs < 3000, `the job formed ${formedMs} ms after its workers started`);
  t.same([a.self.rank, b.self.rank], [0, 1]);
  t.equal(a.table.size, 2);
  t.same(b.table.peers, a.table.peers);

  let giveUp;
  const results = await Promise.race([Promise.all(bad), new Promise((r) => (giveUp = setTimeout(r, HANDSHAKE_MS + 8000, null)))]);
  clearTimeout(giveUp);
  clearInterval(sampler);
  t.ok(results, 'every bad connection was closed');
  if (!results) return;

  const growthMB = (peak - before) / 2 ** 20;
  t.ok(growthMB < 64, `process memory grew at most ${growthMB.toFixed(1)} MB during the attack`);
  const perSender = SERVER_MAX_FRAME_BYTES + 4;
  t.ok(peakOne <= perSender, `one connection made the server hold at most ${peakOne} bytes of an unfinished frame (limit ${perSender})`);
  t.ok(peakHeld <= 2 * 22 * perSender, `all of them at most ${peakHeld} bytes`);
  const rejectionsOf = (p) => logs.filter((l) => l.level === 'WARN' && l.msg.includes(`rejected control connection from 127.0.0.1:${p}:`));
  const expectCode = {
    random: /ERR_INVALID_ARGUMENT|ERR_TIMEOUT|ERR_AUTH/, partial: /ERR_TIMEOUT/, bigPartial: /ERR_TIMEOUT/, hugePartial: /ERR_INVALID_ARGUMENT/, oversized: /ERR_INVALID_ARGUMENT/,
    wrongSecret: /ERR_AUTH/, noAuth: /ERR_AUTH/, replayed: /ERR_AUTH/, badFields: /ERR_INVALID_ARGUMENT/, flood: /ERR_INVALID_ARGUMENT/, slowloris: /ERR_TIMEOUT/,
  };
  const summary = {};
  const problems = [];
  for (const r of results) {
    summary[r.kind] = (summary[r.kind] ?? 0) + 1;
    const label = `${r.kind} from port ${r.localPort}`;
    const logged = rejectionsOf(r.localPort).length;
    if (r.kind === 'connectClose') {
      if (logged !== 0) problems.push(`${label}: ${logged} log lines for a connection that said nothing`);
      continue;
    }
    const errors = r.messages.filter((m) => m.kind === 'error');
    // More than MAX_UNREGISTERED of the crowd wait at once, so the oldest are pushed out before their own
    // error could come: that is an answer too, with its own message.
    const capped = errors.length === 1 && errors[0].code === 'ERR_AUTH' && /waiting to register/.test(errors[0].message);
    if (capped) summary.pushedOut = (summary.pushedOut ?? 0) + 1;
    if (!capped && (errors.length !== 1 || !expectCode[r.kind].test(errors[0].code))) problems.push(`${label}: got ${JSON.stringify(r.messages.map((m) => [m.kind, m.code]))}`);
    if (!r.serverEnded && !r.error) problems.push(`${label}: closed without the server ending it`);
    if (r.ms > HANDSHAKE_MS + 3000) problems.push(`${label}: held for ${r.ms} ms`);
    if (logged !== 1) problems.push(`${label}: ${logged} log lines instead of 1`);
  }
  t.same(problems, [], 'each bad connection: the expected Error, closed by the server in time, one log line');
  t.pass(`${results.length} bad connections dropped and logged: ${JSON.stringify(summary)}`);
  // A rejected socket lingers up to 2 s for its Error to flush; then only the workers are left.
  for (let i = 0; i < 60 && server.connections.size > 2; i++) await sleep(50);
  t.equal(server.connections.size, 2, 'the server holds only the two workers'); // private, looked at on purpose
  a.connection.close();
  b.connection.close();
});
