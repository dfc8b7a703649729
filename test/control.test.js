'use strict';
// Control plane: framing, message codec, rendezvous server and client, config parsing.
const t = require('tap');
const crypto = require('node:crypto');
const net = require('node:net');
const path = require('node:path');
const { startProcess, spawnAndCollect } = require('./support/spawn');

const dist = path.join(__dirname, '..', 'dist', 'ts');
const { FrameDecoder, encodeFrame, ControlConnection, MAX_FRAME_BYTES } = require(path.join(dist, 'control', 'frame.js'));
const { encodeEnvelope, decodeEnvelope, ControlProtocolError, PROTOCOL_VERSION } = require(path.join(dist, 'control', 'messages.js'));
const { RendezvousServer, MAX_UNREGISTERED } = require(path.join(dist, 'control', 'server.js'));
const { computeTopology } = require(path.join(dist, 'control', 'topology.js'));
const { register } = require(path.join(dist, 'control', 'client.js'));
const config = require(path.join(dist, 'config.js'));

const SECRET = 'test-secret';

function frameOf(msg) {
  return encodeFrame(encodeEnvelope(msg));
}

async function startServer(t, opts = {}) {
  const server = new RendezvousServer({ size: 3, secret: SECRET, timeoutMs: 10000, ...opts });
  const { port } = await server.listen();
  t.teardown(() => server.close());
  return { server, port };
}

function client(port, rank, extra = {}) {
  return register({
    addr: '127.0.0.1',
    port,
    secret: SECRET,
    rank,
    hostId: 'host-a',
    dataAddr: '127.0.0.1',
    dataPort: 40000 + (rank < 0 ? 0 : rank),
    timeoutMs: 5000,
    ...extra,
  });
}

// Connects raw and returns {conn, messages: Promise-returning next()}.
function rawConnect(port) {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const conn = new ControlConnection(socket);
    const queue = [];
    const waiters = [];
    conn.on('message', (m) => (waiters.length ? waiters.shift()(m) : queue.push(m)));
    conn.on('close', () => {
      while (waiters.length) waiters.shift()({ kind: 'closed' });
      queue.push({ kind: 'closed' });
    });
    socket.once('connect', () => resolve({ conn, socket, next: () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((r) => waiters.push(r))) }));
    socket.once('error', reject);
  });
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

t.test('frame decoder', async (t) => {
  t.test('reassembles frames split at every byte', async (t) => {
    const a = frameOf({ kind: 'heartbeat', seq: 7, timeMs: 123 });
    const b = frameOf({ kind: 'error', code: 'ERR_AUTH', message: 'nope' });
    const stream = Buffer.concat([a, b]);
    const d = new FrameDecoder();
    const out = [];
    for (const byte of stream) out.push(...d.push(Buffer.from([byte])));
    t.equal(out.length, 2);
    t.same(decodeEnvelope(out[0]), { kind: 'heartbeat', seq: 7, timeMs: 123 });
    t.same(decodeEnvelope(out[1]), { kind: 'error', code: 'ERR_AUTH', message: 'nope' });
    t.equal(d.pendingBytes, 0);
  });

  t.test('returns several frames from one chunk and keeps a partial one', async (t) => {
    const f = frameOf({ kind: 'abort', reason: 'r', rank: 2, code: 'ERR_PEER_LOST' });
    const d = new FrameDecoder();
    const out = d.push(Buffer.concat([f, f, f.subarray(0, 5)]));
    t.equal(out.length, 2);
    t.equal(d.pendingBytes, 5);
    t.equal(d.push(f.subarray(5)).length, 1);
  });

  t.test('rejects an oversized length before the payload arrives, then stays failed', async (t) => {
    const d = new FrameDecoder(1024);
    const header = Buffer.alloc(4);
    header.writeUInt32BE(0xfffffff0, 0);
    t.throws(() => d.push(header), ControlProtocolError);
    t.throws(() => d.push(header), /exceeds the limit of 1024 bytes/);
    t.equal(d.pendingBytes, 0);
    t.equal(MAX_FRAME_BYTES, 1 << 20);
  });

  t.test('garbage payloads decode to a message or a ControlProtocolError, nothing else', async (t) => {
    let seed = 1;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    let errors = 0;
    for (let i = 0; i < 3000; i++) {
      const payload = Buffer.alloc(Math.floor(rand() * 64));
      for (let j = 0; j < payload.length; j++) payload[j] = Math.floor(rand() * 256);
      try {
        const m = decodeEnvelope(payload);
        t.ok(typeof m.kind === 'string');
      } catch (e) {
        errors++;
        if (!(e instanceof ControlProtocolError)) t.fail(`unexpected ${e && e.name}: ${e && e.message}`);
      }
    }
    t.ok(errors > 0, 'some garbage was rejected');
    t.throws(() => decodeEnvelope(Buffer.alloc(0)), /carries no known message/);
    t.throws(() => decodeEnvelope(Buffer.from([0x0a, 0xff])), ControlProtocolError);
  });

  t.test('round-trips every message kind', async (t) => {
    const msgs = [
      { kind: 'challenge', nonce: crypto.randomBytes(32), protocolVersion: PROTOCOL_VERSION },
      { kind: 'register', protocolVersion: 1, rank: -1, hostId: 'h', dataAddr: '10.0.0.1', dataPort: 5000, pid: 42, hostname: 'n', auth: Buffer.from([1, 2, 3]) },
      {
        kind: 'peerTable', jobId: 'j', size: 1, yourRank: 0,
        peers: [{ rank: 0, hostId: 'h', dataAddr: 'a', dataPort: 1, localRank: 0, localSize: 1, crossRank: 0, crossSize: 1, hostname: 'n', pid: 3 }],
      },
      { kind: 'abort', reason: 'x', rank: -1, code: 'ERR_SHUTDOWN' },
      { kind: 'heartbeat', seq: 2 ** 40, timeMs: Date.now() },
      { kind: 'error', code: 'ERR_AUTH', message: 'm' },
    ];
    for (const m of msgs) t.same(decodeEnvelope(encodeEnvelope(m)), m, m.kind);
  });
});

t.test('three clients register and get the same table', async (t) => {
  const { server, port } = await startServer(t);
  const complete = new Promise((r) => server.once('complete', r));
  const results = await Promise.all([2, 0, 1].map((rank) => client(port, rank)));
  const table = await complete;
  for (const r of results) {
    t.equal(r.table.size, 3);
    t.same(r.table.peers, table.peers);
    t.equal(r.table.jobId, server.jobId);
    t.equal(r.self, r.table.peers[r.self.rank]);
    t.equal(r.self.dataPort, 40000 + r.self.rank);
    t.equal(r.self.localSize, 3);
    t.equal(r.self.crossSize, 1);
  }
  t.same(results.map((r) => r.self.rank), [2, 0, 1]);
  for (const r of results) r.connection.close();
});

t.test('wrong secret is rejected with ERR_AUTH and the server keeps serving', async (t) => {
  const { server, port } = await startServer(t, { size: 1 });
  const rejected = [];
  server.on('rejected', (info) => rejected.push(info.code));
  await t.rejects(client(port, 0, { secret: 'wrong' }), { code: 'ERR_AUTH' });
  const ok = await client(port, 0);
  t.equal(ok.self.rank, 0);
  t.same(rejected, ['ERR_AUTH']);
  ok.connection.close();
});

t.test('idle connections beyond the cap push out the oldest; real workers still register', async (t) => {
  const { server, port } = await startServer(t, { size: 2, log: () => undefined });
  const rejected = [];
  server.on('rejected', (info) => rejected.push(info));
  const idle = [];
  for (let i = 0; i < MAX_UNREGISTERED + 6; i++) idle.push(await rawConnect(port));
  // Every idle connection got its Challenge; the six oldest were then dropped with an Error.
  for (const c of idle) t.equal((await c.next()).kind, 'challenge');
  const dropped = [];
  for (let i = 0; i < 6; i++) dropped.push(await idle[i].next());
  t.same(dropped.map((m) => m.kind), new Array(6).fill('error'), 'the 6 oldest are told why and closed');
  t.match(dropped[0].message, /waiting to register/);
  t.equal(rejected.length, 6, 'six rejections, logged');
  // Two real workers still get in, pushing out two more idle ones.
  const workers = await Promise.all([client(port, 0), client(port, 1)]);
  t.same(workers.map((w) => w.self.rank), [0, 1], 'both workers registered');
  t.equal(rejected.length, 8);
  for (const w of workers) w.connection.close();
  for (const c of idle) c.socket.destroy();
});

t.test('bad input gets an Error and does not stop the server', async (t) => {
  const { server, port } = await startServer(t, { size: 1 });

  // Garbage that is not even a valid frame length.
  const a = await rawConnect(port);
  t.equal((await a.next()).kind, 'challenge');
  a.socket.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 1, 2, 3]));
  const errA = await a.next();
  t.same([errA.kind, errA.code], ['error', 'ERR_INVALID_ARGUMENT']);
  t.match(errA.message, /exceeds the limit/);
  t.equal((await a.next()).kind, 'closed');

  // A well-framed payload that is not protobuf.
  const b = await rawConnect(port);
  await b.next();
  b.socket.write(encodeFrame(Buffer.from([0x0a, 0xff, 0xff])));
  t.match(await b.next(), { kind: 'error', code: 'ERR_INVALID_ARGUMENT' });

  // Another protocol version.
  const c = await rawConnect(port);
  const challenge = await c.next();
  c.conn.send({
    kind: 'register', protocolVersion: 99, rank: 0, hostId: 'h', dataAddr: '', dataPort: 0, pid: 1, hostname: 'x',
    auth: crypto.createHmac('sha256', SECRET).update(challenge.nonce).digest(),
  });
  const errC = await c.next();
  t.match(errC, { kind: 'error', code: 'ERR_INVALID_ARGUMENT', message: /protocol version 99/ });

  // Not starting with Register.
  const d = await rawConnect(port);
  await d.next();
  d.conn.send({ kind: 'heartbeat', seq: 1, timeMs: 1 });
  t.match(await d.next(), { kind: 'error', code: 'ERR_INVALID_ARGUMENT', message: /expected Register/ });

  const ok = await client(port, 0);
  t.equal(ok.table.size, 1);
  ok.connection.close();
});

t.test('duplicate and out-of-range ranks are refused', async (t) => {
  const { server, port } = await startServer(t, { size: 2 });
  const registered = new Promise((r) => server.once('registered', r));
  const first = client(port, 0);
  await registered;
  await t.rejects(client(port, 0, { hostId: 'other' }), { code: 'ERR_INVALID_ARGUMENT', message: /rank 0 is already registered/ });
  await t.rejects(client(port, 2), { code: 'ERR_INVALID_ARGUMENT', message: /out of range/ });
  await t.rejects(client(port, -5), { code: 'ERR_INVALID_ARGUMENT', message: /out of range/ });
  const second = await client(port, 1);
  const r0 = await first;
  t.equal(r0.self.rank, 0);
  t.equal(second.self.rank, 1);
  r0.connection.close();
  second.connection.close();
});

t.test('unassigned ranks are filled in arrival order grouped by host', async (t) => {
  const { server, port } = await startServer(t, { size: 4 });
  const hosts = ['B', 'A', 'B', 'A'];
  const pending = [];
  for (let i = 0; i < 4; i++) {
    const registered = new Promise((r) => server.once('registered', r));
    pending.push(client(port, -1, { hostId: hosts[i], dataPort: 100 + i }));
    await registered; // fixes the arrival order
  }
  const results = await Promise.all(pending);
  // B arrived first: its two workers get ranks 0,1 in arrival order; A's get 2,3.
  t.same(results.map((r) => r.self.rank), [0, 2, 1, 3]);
  t.same(results.map((r) => r.self.dataPort), [100, 101, 102, 103]);
  t.same(results[0].table.peers.map((p) => [p.hostId, p.localRank, p.crossRank]), [['B', 0, 0], ['B', 1, 0], ['A', 0, 1], ['A', 1, 1]]);
  for (const r of results) r.connection.close();
});

t.test('topology with mixed host ids', async (t) => {
  const reg = (hostId) => ({ hostId, dataAddr: '', dataPort: 0, hostname: '', pid: 0 });
  const peers = computeTopology(['x', 'y', 'x', 'z', 'y', 'x'].map(reg));
  t.same(peers.map((p) => [p.rank, p.localRank, p.localSize, p.crossRank, p.crossSize]), [
    [0, 0, 3, 0, 3],
    [1, 0, 2, 1, 3],
    [2, 1, 3, 0, 3],
    [3, 0, 1, 2, 3],
    [4, 1, 2, 1, 3],
    [5, 2, 3, 0, 3],
  ]);
});

t.test('abort reaches every worker; a closed worker is reported as lost', async (t) => {
  const { server, port } = await startServer(t, { size: 2 });
  const [r0, r1] = await Promise.all([client(port, 0), client(port, 1)]);
  const got = new Promise((r) => r1.connection.onAbort(r));
  server.abort('rank 0 exited with code 3', 0, 'ERR_PEER_LOST');
  t.same(await got, { reason: 'rank 0 exited with code 3', rank: 0, code: 'ERR_PEER_LOST' });
  t.same(r1.connection.abortReceived, { reason: 'rank 0 exited with code 3', rank: 0, code: 'ERR_PEER_LOST' });
  const lost = new Promise((r) => server.once('worker-lost', (rank) => r(rank)));
  r0.connection.close();
  t.equal(await lost, 0);
  r1.connection.close();
});

t.test('client retries until the server is up', async (t) => {
  const port = await freePort();
  const pending = register({ addr: '127.0.0.1', port, secret: SECRET, rank: 0, hostId: 'h', dataAddr: '', dataPort: 0, timeoutMs: 5000 });
  await new Promise((r) => setTimeout(r, 400));
  const server = new RendezvousServer({ size: 1, secret: SECRET, port });
  await server.listen();
  t.teardown(() => server.close());
  const r = await pending;
  t.equal(r.self.rank, 0);
  r.connection.close();
});

t.test('client gives up with ERR_TIMEOUT naming the address', async (t) => {
  const port = await freePort();
  const started = Date.now();
  await t.rejects(
    register({ addr: '127.0.0.1', port, secret: SECRET, rank: 1, hostId: 'h', dataAddr: '', dataPort: 0, timeoutMs: 500 }),
    { code: 'ERR_TIMEOUT', message: new RegExp(`127\\.0\\.0\\.1:${port}`) },
  );
  t.ok(Date.now() - started < 3000);
});

t.test('server registration deadline fails waiting workers with ERR_TIMEOUT', async (t) => {
  const { server, port } = await startServer(t, { size: 2, timeoutMs: 300 });
  const timedOut = new Promise((r) => server.once('timeout', (missing) => r(missing)));
  await t.rejects(client(port, 0), { code: 'ERR_TIMEOUT' });
  t.same(await timedOut, [1]);
});

t.test('while ranks are missing the server says every interval who registered, from where, who is missing and when it gives up', async (t) => {
  const lines = [];
  const log = (level, message) => lines.push(`${level}: ${message}`);
  const { server, port } = await startServer(t, { size: 4, timeoutMs: 5000, stallWarnMs: 200, log });
  const pending = [
    client(port, 0, { hostname: 'node1', pid: 101 }),
    client(port, 1, { hostname: 'node1', pid: 102 }),
    client(port, 3, { hostname: 'node2', pid: 301 }),
  ].map((p) => p.catch((e) => e));
  await new Promise((r) => setTimeout(r, 700));
  const warnings = lines.filter((l) => l.startsWith('WARN: still waiting'));
  t.ok(warnings.length >= 2, `warned again while waiting (${warnings.length} warnings in 0.7 s at a 0.2 s interval)`, { lines });
  t.match(warnings[warnings.length - 1], /3 of 4 ranks registered \(ranks 0-1 from node1; rank 3 from node2, pid 301\); missing: rank 2\. Giving up in [1-5] s \(HORA_TIMEOUT_S\)/);
  t.match(warnings[warnings.length - 1], new RegExp(`reach 127\\.0\\.0\\.1:${port}\\?`), 'names the address the missing rank must reach');
  const last = client(port, 2, { hostname: 'node3' });
  await last;
  await Promise.all(pending);
  const count = lines.filter((l) => l.startsWith('WARN: still waiting')).length;
  await new Promise((r) => setTimeout(r, 500));
  t.equal(lines.filter((l) => l.startsWith('WARN: still waiting')).length, count, 'no warning once every rank has registered');
  t.ok(server.peerTable, 'the table went out');
});

t.test('a registered client does not keep the process alive', async (t) => {
  const { server, port } = await startServer(t, { size: 1 });
  const script = `
    const { register } = require(${JSON.stringify(path.join(dist, 'control', 'client.js'))});
    register({ addr: '127.0.0.1', port: ${port}, secret: ${JSON.stringify(SECRET)}, rank: 0, hostId: 'h', dataAddr: '', dataPort: 0, timeoutMs: 5000 })
      .then((r) => console.log('registered', r.self.rank));`;
  const { code, signal, stdout: out } = await spawnAndCollect(process.execPath, ['-e', script], { stderr: 'inherit', timeoutMs: 5000 });
  t.equal(signal, null, 'exited by itself');
  t.equal(code, 0);
  t.match(out, /registered 0/);
  t.ok(server.peerTable);
});

t.test('a process hosting an unref\'d server and registering with it exits by itself', async (t) => {
  const script = `
    const { RendezvousServer } = require(${JSON.stringify(path.join(dist, 'control', 'server.js'))});
    const { register } = require(${JSON.stringify(path.join(dist, 'control', 'client.js'))});
    const server = new RendezvousServer({ size: 1, secret: 's' });
    server.listen().then(({ port }) => {
      server.unref();
      return register({ addr: '127.0.0.1', port, secret: 's', rank: 0, hostId: 'h', dataAddr: '', dataPort: 0, timeoutMs: 5000 });
    }).then((r) => console.log('registered', r.self.rank));`;
  const { code, signal, stdout: out } = await spawnAndCollect(process.execPath, ['-e', script], { stderr: 'inherit', timeoutMs: 5000 });
  t.same([code, signal], [0, null], 'exited by itself');
  t.match(out, /registered 0/);
});

t.test('config', async (t) => {
  t.test('no launcher variables: a single process', async (t) => {
    const l = config.resolveLaunch({});
    t.match(l, { source: 'single', rank: 0, size: 1, isRendezvousHost: false });
    t.equal(l.rendezvousAddr, undefined);
  });

  t.test('hora run variables', async (t) => {
    const l = config.resolveLaunch({
      HORA_RANK: '2', HORA_SIZE: '4', HORA_LOCAL_RANK: '0', HORA_LOCAL_SIZE: '2', HORA_CROSS_RANK: '1', HORA_CROSS_SIZE: '2',
      HORA_RENDEZVOUS_ADDR: '10.1.2.3', HORA_RENDEZVOUS_PORT: '29500', HORA_SECRET: 's', HORA_JOB_ID: 'job1',
      MASTER_ADDR: 'ignored', RANK: '9',
    });
    t.match(l, {
      source: 'hora', rank: 2, size: 4, localRank: 0, localSize: 2, crossRank: 1, crossSize: 2,
      rendezvousAddr: '10.1.2.3', rendezvousPort: 29500, secret: 's', secretDerived: false, isRendezvousHost: false, jobId: 'job1',
    });
  });

  t.test('HORA_* set by hand without a launcher: rank 0 hosts', async (t) => {
    const env = { HORA_RANK: '0', HORA_SIZE: '2', HORA_RENDEZVOUS_PORT: '29501', HORA_SECRET: 'x' };
    t.match(config.resolveLaunch(env), { rendezvousAddr: '127.0.0.1', isRendezvousHost: true });
    t.match(config.resolveLaunch({ ...env, HORA_RANK: '1' }), { isRendezvousHost: false });
  });

  t.test('Open MPI', async (t) => {
    const env = {
      OMPI_COMM_WORLD_RANK: '0', OMPI_COMM_WORLD_SIZE: '8', OMPI_COMM_WORLD_LOCAL_RANK: '0', OMPI_COMM_WORLD_LOCAL_SIZE: '8',
      OMPI_MCA_ess_base_jobid: '123456',
    };
    const l0 = config.resolveLaunch(env);
    const l5 = config.resolveLaunch({ ...env, OMPI_COMM_WORLD_RANK: '5', OMPI_COMM_WORLD_LOCAL_RANK: '1' });
    t.match(l0, { source: 'ompi', rank: 0, size: 8, localRank: 0, localSize: 8, rendezvousAddr: '127.0.0.1', isRendezvousHost: true, secretDerived: true });
    t.match(l5, { rank: 5, localRank: 1, isRendezvousHost: false });
    t.equal(l0.rendezvousPort, l5.rendezvousPort, 'every rank derives the same port');
    t.equal(l0.secret, l5.secret, 'and the same secret');
    t.ok(l0.rendezvousPort >= 20000 && l0.rendezvousPort <= 60000);
    const other = config.resolveLaunch({ ...env, OMPI_MCA_ess_base_jobid: '654321' });
    t.not(other.secret, l0.secret);
    t.match(config.resolveLaunch({ ...env, MASTER_ADDR: '10.0.0.9', HORA_SECRET: 'given' }), { rendezvousAddr: '10.0.0.9', secret: 'given', secretDerived: false });
    t.match(config.resolveLaunch({ ...env, HORA_RENDEZVOUS_ADDR: '10.0.0.7', HORA_RENDEZVOUS_PORT: '1234' }), { rendezvousAddr: '10.0.0.7', rendezvousPort: 1234 });
  });

  t.test('PMI', async (t) => {
    t.match(config.resolveLaunch({ PMI_RANK: '1', PMI_SIZE: '2', PMIX_NAMESPACE: 'ns-1' }), { source: 'pmi', rank: 1, size: 2, isRendezvousHost: false });
    t.throws(() => config.resolveLaunch({ PMI_RANK: '1', PMI_SIZE: '2' }), /HORA_RENDEZVOUS_PORT/, 'no job id: must be told where to meet');
  });

  t.test('Slurm', async (t) => {
    const l = config.resolveLaunch({ SLURM_PROCID: '3', SLURM_NTASKS: '4', SLURM_LOCALID: '1', SLURM_NODEID: '1', SLURM_NNODES: '2', SLURM_JOB_ID: '777', SLURM_STEP_NODELIST: 'n[1-2]' });
    t.match(l, { source: 'slurm', rank: 3, size: 4, localRank: 1, crossRank: 1, crossSize: 2, rendezvousAddr: 'n1', isRendezvousHost: false, secretDerived: true });
    const step1 = config.resolveLaunch({ SLURM_PROCID: '3', SLURM_NTASKS: '4', SLURM_JOB_ID: '777', SLURM_STEP_ID: '1' });
    t.not(step1.rendezvousPort === l.rendezvousPort && step1.secret === l.secret, true, 'job steps do not share a secret');
  });

  t.test('torchrun', async (t) => {
    const env = { RANK: '0', WORLD_SIZE: '2', LOCAL_RANK: '0', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: '10.0.0.1', MASTER_PORT: '29500' };
    t.match(config.resolveLaunch(env), { source: 'torchrun', rank: 0, size: 2, localRank: 0, rendezvousAddr: '10.0.0.1', rendezvousPort: 29500, isRendezvousHost: true });
    t.match(config.resolveLaunch({ ...env, RANK: '1', LOCAL_RANK: '1' }), { rank: 1, isRendezvousHost: false });
    t.throws(() => config.resolveLaunch({ RANK: '0', WORLD_SIZE: '2' }), /MASTER_PORT/);
  });

  t.test('precedence: HORA_* over Open MPI over Slurm over torchrun', async (t) => {
    const all = { HORA_RANK: '0', HORA_SIZE: '1', OMPI_COMM_WORLD_RANK: '1', OMPI_COMM_WORLD_SIZE: '2', OMPI_MCA_ess_base_jobid: '1', SLURM_PROCID: '1', SLURM_NTASKS: '2', SLURM_JOB_ID: '1', RANK: '1', WORLD_SIZE: '2', MASTER_PORT: '1' };
    t.equal(config.resolveLaunch(all).source, 'hora');
    delete all.HORA_RANK; delete all.HORA_SIZE;
    t.equal(config.resolveLaunch(all).source, 'ompi');
    delete all.OMPI_COMM_WORLD_RANK; delete all.OMPI_COMM_WORLD_SIZE;
    t.equal(config.resolveLaunch(all).source, 'slurm');
    delete all.SLURM_PROCID;
    t.equal(config.resolveLaunch(all).source, 'torchrun');
  });

  t.test('bad values name the variable and the value', async (t) => {
    const base = { HORA_RENDEZVOUS_PORT: '1000', HORA_SECRET: 's' };
    const cases = [
      [{ ...base, HORA_RANK: '0', HORA_SIZE: 'abc' }, 'HORA_SIZE', 'abc'],
      [{ ...base, HORA_RANK: '0', HORA_SIZE: '0' }, 'HORA_SIZE', '0'],
      [{ ...base, HORA_RANK: '4', HORA_SIZE: '4' }, 'HORA_RANK', '4'],
      [{ ...base, HORA_RANK: '-1', HORA_SIZE: '4' }, 'HORA_RANK', '-1'],
      [{ ...base, HORA_RANK: '1.5', HORA_SIZE: '4' }, 'HORA_RANK', '1.5'],
      [{ ...base, HORA_SIZE: '4' }, 'HORA_RANK', undefined],
      [{ ...base, HORA_RANK: '0', HORA_SIZE: '2', HORA_LOCAL_RANK: '2', HORA_LOCAL_SIZE: '2' }, 'HORA_LOCAL_RANK', '2'],
      [{ ...base, HORA_RANK: '0', HORA_SIZE: '2', HORA_RENDEZVOUS_PORT: '70000' }, 'HORA_RENDEZVOUS_PORT', '70000'],
      [{ OMPI_COMM_WORLD_RANK: '2', OMPI_COMM_WORLD_SIZE: '2', OMPI_MCA_ess_base_jobid: '1' }, 'OMPI_COMM_WORLD_RANK', '2'],
      [{ SLURM_PROCID: 'x', SLURM_NTASKS: '2', SLURM_JOB_ID: '1' }, 'SLURM_PROCID', 'x'],
      [{ RANK: '0', WORLD_SIZE: 'two', MASTER_PORT: '1' }, 'WORLD_SIZE', 'two'],
    ];
    for (const [env, variable, value] of cases) {
      const err = t.throws(() => config.resolveLaunch(env), undefined, `${variable}=${value}`);
      t.equal(err && err.code, 'ERR_INVALID_ARGUMENT');
      t.equal(err && err.variable, variable);
      t.match(err && err.message, variable);
      if (value !== undefined) t.match(err && err.message, JSON.stringify(value));
    }
    const settingCases = [
      ['HORA_TIMEOUT_S', '-1'], ['HORA_TIMEOUT_S', '0'], ['HORA_TIMEOUT_S', 'soon'],
      ['HORA_DEBUG', 'LOUD'], ['HORA_FUSION_MB', '-3'], ['HORA_ALGO', 'bogus'], ['HORA_TRANSPORT', 'udp'],
      ['HORA_IFACE', 'no-such-interface0'],
    ];
    for (const [variable, value] of settingCases) {
      const err = t.throws(() => config.readSettings({ [variable]: value }), undefined, `${variable}=${value}`);
      t.equal(err && err.variable, variable);
      t.match(err && err.message, `${variable}=${JSON.stringify(value)}`);
      t.ok(err instanceof config.HoraConfigError);
    }
  });

  t.test('settings defaults and parsing', async (t) => {
    const s = config.readSettings({});
    t.match(s, { timeoutS: 300, debug: 'WARN', fusionMb: 64, algo: 'auto', transport: 'auto', ifaceAddr: undefined, timeline: undefined });
    t.equal(s.hostId, config.defaultHostId());
    t.match(config.readSettings({ HORA_DEBUG: 'trace', HORA_TIMEOUT_S: '2.5', HORA_ALGO: 'ring', HORA_IFACE: '127.0.0.1', HORA_HOST_ID: 'ns1' }), {
      debug: 'TRACE', timeoutS: 2.5, algo: 'ring', ifaceAddr: '127.0.0.1', hostId: 'ns1',
    });
    const lo = Object.entries(require('node:os').networkInterfaces()).find(([, a]) => a.some((x) => x.internal && x.family === 'IPv4'));
    if (lo) t.equal(config.resolveIface(lo[0]), '127.0.0.1');
    t.ok(config.HORA_VARIABLES.every((v) => v.name.startsWith('HORA_') && v.help.length > 0));
    for (const name of ['HORA_RANK', 'HORA_SIZE', 'HORA_LOCAL_RANK', 'HORA_LOCAL_SIZE', 'HORA_CROSS_RANK', 'HORA_CROSS_SIZE', 'HORA_RENDEZVOUS_ADDR',
      'HORA_RENDEZVOUS_PORT', 'HORA_SECRET', 'HORA_TIMEOUT_S', 'HORA_DEBUG', 'HORA_FUSION_MB', 'HORA_ALGO', 'HORA_TRANSPORT', 'HORA_IFACE', 'HORA_TIMELINE', 'HORA_HOST_ID']) {
      t.ok(config.HORA_VARIABLES.some((v) => v.name === name), name);
    }
  });
});

t.test('elastic heartbeat: a worker whose own event loop is held up does not take the launcher for gone', async (t) => {
  const { registerElastic } = require(path.join(dist, 'control', 'client.js'));
  // The launcher's server in a process of its own, so that it can be stopped (SIGSTOP): silent, connection open.
  const script = `const { RendezvousServer } = require(${JSON.stringify(path.join(dist, 'control', 'server.js'))});
    const s = new RendezvousServer({ size: 1, secret: ${JSON.stringify(SECRET)}, timeoutMs: 0,
      elastic: { minSize: 1, maxSize: 1, settleMs: 1000, waitMs: 60000 } });
    s.listen().then(({ port }) => console.log('port ' + port));`;
  const launcher = startProcess(process.execPath, ['-e', script], { stderr: 'inherit' });
  t.teardown(() => launcher.kill('SIGKILL'));
  await launcher.waitFor(/port \d+/, 30000);
  const port = Number(/port (\d+)/.exec(launcher.stdout)[1]);
  const { connection } = await registerElastic({
    addr: '127.0.0.1', port, secret: SECRET, rank: -1, hostId: 'h', dataAddr: '127.0.0.1', dataPort: 0, timeoutMs: 10000, elasticWorkerId: 0,
  });
  let closed;
  connection.onClose((err) => (closed = err));
  // Heartbeat every 50 ms; 400 ms without an answer would mean the launcher is gone.
  connection.startHeartbeat(50, 400);
  await new Promise((r) => setTimeout(r, 200));
  // A training step that never yields, ten times longer than the silence allowed.
  for (const until = Date.now() + 4000; Date.now() < until;);
  await new Promise((r) => setTimeout(r, 600));
  t.equal(closed, undefined, 'still connected: the answers were waiting in the socket');
  // The launcher stops (its host hangs): no answer comes, and the worker gives up.
  const stoppedAt = Date.now();
  launcher.kill('SIGSTOP');
  const deadline = Date.now() + 5000;
  while (closed === undefined && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  t.match(closed && closed.message, /the hora launcher has not answered for \d+ s/, `a silent launcher is taken for gone (after ${Date.now() - stoppedAt} ms; 5 s at most)`);
  connection.close();
});
