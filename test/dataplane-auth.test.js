'use strict';
// The data-plane handshake end to end (docs/security.md, "Data plane"): a job of 3 whose last rank holds
// back its init while the test, as a rogue who knows the job id, opens connections to rank 0's data-plane
// port: silent ones, ones that send random bytes, and ones that answer the challenge with a Hello for
// rank 1 of this very job with a wrong proof. Then the last rank is let go. The job must complete its
// allreduces with the right sums, rank 0 must log a WARN for each kind of rogue connection, the
// wrong-proof Hellos must get the verdict "bad proof", and once the mesh is up (rank 0 waits there for
// the test) the port must refuse connections. The native side is covered in more depth by native/test/connect_test.cc.
const t = require('tap');
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { startProcess } = require('./support/spawn');
const { HORA, NODE, ROOT } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'dataplane-auth-worker.js');
const NP = 3;

// The wire format of native/src/transport/tcp/handshake.h.
const MAGIC = 0x41524f48;
const VERSION = 2;
const CHALLENGE_BYTES = 44;
const ANSWER_BYTES = 44;
const VERDICT_BAD_PROOF = 1;

// The job tag: native/src/common/hash.h's fnv1a64 of the job id (FNV-1a, 64 bits).
function jobTagOf(jobId) {
  let h = 14695981039346656037n;
  for (const b of Buffer.from(jobId, 'utf8')) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h;
}

t.test('the job tag is FNV-1a 64 as published', async (t) => {
  t.equal(jobTagOf(''), 0xcbf29ce484222325n, 'of "": the offset basis');
  t.equal(jobTagOf('a'), 0xaf63dc4c8601ec8cn, 'of "a"');
  t.equal(jobTagOf('foobar'), 0x85944171f73967e8n, 'of "foobar"');
});

function hello(rank, size, jobTag) {
  const b = Buffer.alloc(88);
  b.writeUInt32LE(MAGIC, 0);
  b.writeUInt16LE(VERSION, 4);
  b.writeInt32LE(rank, 8);
  b.writeInt32LE(size, 12);
  b.writeBigUInt64LE(jobTag, 16);
  crypto.randomFillSync(b, 24, 64);  // a nonce, and a proof made without the secret
  return b;
}

/** Opens a connection; resolves {socket, closed: Promise, received: () => Buffer} once connected. */
function dial(port) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.on('data', (d) => chunks.push(d));
    const closed = new Promise((r) => socket.on('close', r));
    socket.on('error', () => undefined);
    socket.once('connect', () => resolve({ socket, closed, received: () => Buffer.concat(chunks) }));
    socket.once('error', reject);
  });
}

async function until(cond, timeoutMs, what) {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// The worker job over TCP, with INFO logs and a result folder of its own (removed at the test's end).
function startJob(t, prefix) {
  const resultDir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  t.teardown(() => fs.rmSync(resultDir, { recursive: true, force: true }));
  const job = startProcess(NODE, [HORA, 'run', '-np', String(NP), '--', NODE, WORKER], {
    cwd: ROOT,
    env: { ...process.env, HORA_TIMEOUT_S: '60', HORA_DEBUG: 'INFO', HORA_TRANSPORT: 'tcp', HORA_TEST_RESULT_DIR: resultDir },
    timeoutMs: 120000,
  });
  return { resultDir, job };
}

t.test('rogue connections during init are dropped and logged; the job completes', async (t) => {
  const { resultDir, job } = startJob(t, 'hora-dpauth-');
  const exited = job.done;
  const started = Date.now();

  const jobIdFile = path.join(resultDir, 'job-id');
  await until(() => /rank 0 hora INFO data plane listening on [\d.]+:\d+/.test(job.output) && fs.existsSync(jobIdFile), 30000,
    "rank 0's data port and the job id");
  const port = Number(/rank 0 hora INFO data plane listening on [\d.]+:(\d+)/.exec(job.output)[1]);
  const jobTag = jobTagOf(fs.readFileSync(jobIdFile, 'utf8'));

  // Rank 0 is waiting in init for the last rank, so these queue at its listener until the mesh forms.
  const silent = await Promise.all([0, 1, 2, 3].map(() => dial(port)));
  const noisy = await Promise.all([0, 1, 2, 3].map(async () => {
    const c = await dial(port);
    c.socket.write(crypto.randomBytes(500));
    return c;
  }));
  // The forged Hello goes out before the challenge has come (its proof is made up anyway), so rank 0
  // judges it as soon as it accepts the connection, before the real ranks can complete the mesh.
  const forgers = await Promise.all([0, 1, 2, 3].map(async () => {
    const c = await dial(port);
    c.socket.write(hello(1, NP, jobTag));
    return c;
  }));
  fs.writeFileSync(path.join(resultDir, 'gate'), '');

  // The listener is closed once the mesh is complete: a late stranger is refused by the kernel.
  await until(() => fs.existsSync(path.join(resultDir, 'connected')), 60000, 'rank 0 to finish init');
  const lateError = await dial(port).then((c) => { c.socket.destroy(); return 'accepted'; }, (e) => e.code);
  fs.writeFileSync(path.join(resultDir, 'gate-after-init'), '');
  t.equal(lateError, 'ECONNREFUSED', "after init, rank 0's data port refuses connections");

  const { code, signal } = await exited;
  const seconds = (Date.now() - started) / 1000;
  const tailOf = () => job.output.slice(-6000);
  t.equal(signal, null, 'the job was not killed', { output: tailOf() });
  t.equal(code, 0, 'hora run exits 0', { output: tailOf() });
  t.ok(seconds < 60, `the job took ${seconds.toFixed(1)} s, far from its 60 s deadline`);
  for (let r = 0; r < NP; r++) {
    const file = path.join(resultDir, `rank-${r}.json`);
    t.ok(fs.existsSync(file), `rank ${r} reported`, { output: tailOf() });
    if (!fs.existsSync(file)) continue;
    const rep = JSON.parse(fs.readFileSync(file, 'utf8'));
    const want = (NP * (NP + 1)) / 2;
    t.same(rep.sums.map((s) => [s.first, s.last, s.allEqual]), rep.sums.map(() => [want, want, true]),
      `rank ${r}: every allreduce sums to ${want}`, { rep });
  }

  await Promise.all([...silent, ...noisy, ...forgers].map((c) => c.closed));
  t.pass('rank 0 closed every rogue connection');
  for (const [i, c] of forgers.entries()) {
    const got = c.received();
    const answer = got.subarray(CHALLENGE_BYTES, CHALLENGE_BYTES + ANSWER_BYTES);
    t.equal(answer.length, ANSWER_BYTES, `forger ${i} got an answer`);
    if (answer.length === ANSWER_BYTES) {
      t.equal(answer.readUInt16LE(6), VERDICT_BAD_PROOF, `forger ${i}: the verdict is "bad proof"`);
      t.ok(answer.subarray(12).equals(Buffer.alloc(32)), `forger ${i}: the answer carries no proof`);
    }
  }

  const warns = job.output.split('\n').filter((l) => /rank 0 hora WARN dropped data-plane connection from 127\.0\.0\.1:\d+: /.test(l));
  t.ok(warns.some((l) => /wrong magic/.test(l)), 'rank 0 logs the random bytes', { warns });
  t.equal(warns.filter((l) => /claims rank 1 but its proof does not verify/.test(l)).length, forgers.length,
    'rank 0 logs each Hello with a wrong proof', { warns });
  t.ok(warns.some((l) => /still unauthenticated when the mesh was complete|no complete handshake/.test(l)),
    'rank 0 logs the silent connections', { warns });
  t.equal(warns.length, silent.length + noisy.length + forgers.length, 'one WARN line per rogue connection', { warns });
  t.notMatch(job.output, /rank [12] hora WARN dropped/, 'ranks 1 and 2 saw no rogue connection');
});

// docs/security.md: a burst of strangers held on a rank's data port before its handshake loop starts must
// not push the real ranks into the kernel's SYN retry (1 s). 300 connections are made and held while
// rank 0 waits in init for the last rank; then the last rank is let go. The listener's backlog (ss -ltn's
// Send-Q) has room for all of them and the peers, all 300 complete their TCP handshake at once (none waits
// on a SYN retry), and every rank connects its mesh in well under the 1 s a SYN retry would cost. Three
// jobs, as the retry came in 2 of 6 runs before.
const FLOOD = 300;
const RETRY_FREE_MS = 500;

/** The listening socket on 127.0.0.1/0.0.0.0:port as ss shows it: {queued (Recv-Q), backlog (Send-Q)}, or null. */
function listenerOf(port) {
  const { spawnSync } = require('node:child_process');
  const r = spawnSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' });
  if (r.status !== 0) return null;
  const line = r.stdout.split('\n').find((l) => l.trim().startsWith('LISTEN'));
  if (!line) return null;
  const [, queued, backlog] = line.trim().split(/\s+/);
  return { queued: Number(queued), backlog: Number(backlog) };
}

const somaxconn = (() => {
  try {
    return Number(fs.readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));
  } catch {
    return NaN;
  }
})();
const hasSs = require('node:child_process').spawnSync('ss', ['-V']).status === 0;

t.test(`${FLOOD} connections held on rank 0's data port before its loop starts do not delay the mesh`, {
  skip: !hasSs ? 'no ss command (iproute2) to read the listen backlog'
    : !(somaxconn >= FLOOD + NP) ? `net.core.somaxconn is ${somaxconn}: the kernel caps every listen backlog below ${FLOOD + NP}` : false,
}, async (t) => {
  for (let run = 1; run <= 3; run++) {
    const { resultDir, job } = startJob(t, 'hora-dpflood-');
    const exited = job.done;
    await until(() => /rank 0 hora INFO data plane listening on [\d.]+:\d+/.test(job.output), 30000, "rank 0's data port");
    const port = Number(/rank 0 hora INFO data plane listening on [\d.]+:(\d+)/.exec(job.output)[1]);

    // Rank 0 waits in init for the last rank: its loop has not started, so these wait in its accept queue.
    const sockets = [];
    let connected = 0;
    for (let i = 0; i < FLOOD; i++) {
      const s = net.connect({ host: '127.0.0.1', port });
      s.on('error', () => undefined);
      s.once('connect', () => connected++);
      sockets.push(s);
    }
    t.teardown(() => sockets.forEach((s) => s.destroy()));
    await until(() => connected === FLOOD, 800, `all ${FLOOD} connections to complete`).catch(() => undefined);
    const listener = listenerOf(port);
    t.equal(connected, FLOOD, `run ${run}: all ${FLOOD} stranger connections completed within 800 ms (no SYN dropped)`);
    t.ok(listener && listener.backlog >= FLOOD + NP, `run ${run}: rank 0's listen backlog has room for them and the peers`, { listener });
    t.equal(listener && listener.queued, FLOOD, `run ${run}: all ${FLOOD} wait in rank 0's accept queue`, { listener });
    fs.writeFileSync(path.join(resultDir, 'gate'), '');
    await until(() => fs.existsSync(path.join(resultDir, 'connected')), 60000, 'rank 0 to finish init').catch(() => undefined);
    fs.writeFileSync(path.join(resultDir, 'gate-after-init'), '');

    const { code, signal } = await exited;
    t.equal(code, 0, `run ${run}: hora run exits 0`, { signal, output: job.output.slice(-4000) });
    const times = [...job.output.matchAll(/rank (\d) hora INFO connected to 2 peers in ([\d.]+) ms/g)].map((m) => [Number(m[1]), Number(m[2])]);
    t.equal(times.length, NP, `run ${run}: every rank connected`, { output: job.output.slice(-4000) });
    for (const [rank, ms] of times) {
      t.ok(ms < RETRY_FREE_MS, `run ${run}: rank ${rank} connected its mesh in ${ms} ms, well under a SYN retry`);
    }
  }
});
