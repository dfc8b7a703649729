'use strict';
// Point-to-point messages (hora.send / hora.recv) between real ranks under `hora run`, over shared memory
// and over TCP (HORA_TRANSPORT=tcp): contents across dtypes and sizes, tag matching and order, independence
// of peers, mixing with collectives, bad input, mismatched ends, a killed peer and a deadline.
// test/workers/sendrecv-worker.js runs each scenario inside the ranks; this file asserts on their reports.
const t = require('tap');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { runProcess, runScenario, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'workers', 'sendrecv-worker.js');
const TRANSPORTS = [['shm', {}], ['tcp', { HORA_TRANSPORT: 'tcp' }]];

/** Runs a scenario and returns each rank's result, after asserting that every rank reported. */
function scenario(t, np, name, env = {}, options = {}) {
  return runScenario(t, np, WORKER, name, env, options);
}

for (const [transport, env] of TRANSPORTS) {
  t.test(`${transport}: every dtype and size, both ways, both recv forms`, async (t) => {
    const { results, job } = await scenario(t, 3, 'sweep', env);
    for (const [rank, r] of results.entries()) {
      t.ok(r, `rank ${rank} reported`, { output: tail(job) });
      if (!r) continue;
      t.same(r.failures, [], `rank ${rank}: every message arrived intact`);
      // rank 0 exchanges with both peers; each peer with rank 0: 10 dtypes x 7 sizes.
      t.equal(r.checked, rank === 0 ? 140 : 70, `rank ${rank}: checked every message`);
    }
  });

  t.test(`${transport}: a receive posted for tag 1 first gets tag 1, though tag 0 was sent first`, async (t) => {
    const { results } = await scenario(t, 2, 'out-of-order', env);
    for (const n of ['3', '200000']) {
      t.same(results[1] && results[1][n], { tag1: true, tag0: true }, `${n} elements: each receive got its own tag's message`);
      t.same(results[0] && results[0][n], { sends: ['fulfilled', 'fulfilled'] }, `${n} elements: both sends completed`);
    }
  });

  t.test(`${transport}: a window of 64 sends met by receives posted one by one`, async (t) => {
    const { results } = await scenario(t, 2, 'window', env);
    t.same(results[1] && results[1].bad, [], 'every message arrived intact and in order');
  });

  t.test(`${transport}: Work.wait() on sends and receives, prompt and late`, async (t) => {
    const { results } = await scenario(t, 2, 'blocking', env);
    for (const [rank, r] of results.entries()) t.same(r && r.bad, [], `rank ${rank}: every blocking exchange right`);
    t.ok(results[1] && results[1].lateMs >= 250, `the wait for a late message lasted until it came (${results[1] && Math.round(results[1].lateMs)} ms)`);
  });

  t.test(`${transport}: messages of one tag arrive in the order sent`, async (t) => {
    const { results } = await scenario(t, 2, 'in-order', env);
    t.same(results[1] && results[1].order, Array.from({ length: 40 }, (_, i) => i), '40 messages, small and large, in order');
  });

  t.test(`${transport}: sends and receives mixed with collectives`, async (t) => {
    const { results } = await scenario(t, 3, 'interleave', env);
    for (const [rank, r] of results.entries()) t.same(r && r.bad, [], `rank ${rank}: every message and collective right`);
  });

  t.test(`${transport}: a mismatched dtype or count fails both ends, naming both sides`, async (t) => {
    const { results } = await scenario(t, 2, 'mismatch', env);
    const [sender, receiver] = results;
    for (const name of ['count', 'dtype', 'large count', 'large dtype']) {
      const s = sender && sender[name], r = receiver && receiver[name];
      t.equal(s && s.code, 'ERR_MISMATCH', `${name}: the send fails with ERR_MISMATCH`, { s });
      t.equal(r && r.code, 'ERR_MISMATCH', `${name}: the recv fails with ERR_MISMATCH`, { r });
      t.equal(s && s.peer, 1, `${name}: the send's error names rank 1`);
      t.equal(r && r.peer, 0, `${name}: the recv's error names rank 0`);
    }
    t.match(sender && sender.count.message, /rank 1's receive for tag 3 is for 12 x float32, but this rank sent 10 x float32/, 'send: both sides');
    t.match(receiver && receiver.dtype.message, /rank 0 sent 10 x float32 with tag 3, but this rank's receive is for 10 x int32/, 'recv: both sides');
    t.same(receiver && receiver.after, { ok: true, value: ['42'] }, 'the next message of the pair arrives');
    t.same(sender && sender.after, { ok: true, value: null }, 'and its send completes');
  });
}

t.test('shm: one 64 MiB message each way', async (t) => {
  const { results } = await scenario(t, 2, 'large');
  t.ok(results[0] && results[0].ok, 'the returned 64 MiB carry the receiver\'s changes', { r: results[0] });
});

t.test('tcp: a send to a rank that receives late does not hold up another peer', async (t) => {
  const { results } = await scenario(t, 3, 'independent', { HORA_TRANSPORT: 'tcp' });
  const [r0, r1, r2] = results;
  t.ok(r1 && r1.ok && r2 && r2.ok, 'both peers got their message', { r1, r2 });
  // rank 2 posts its receive 1.5 s late; rank 1 must not wait for that.
  t.ok(r1 && r1.ms < 1200, `rank 1 received within 1.2 s (${r1 && Math.round(r1.ms)} ms)`);
  t.ok(r0 && r0.to1Ms < 1200, `the send to rank 1 completed within 1.2 s (${r0 && Math.round(r0.to1Ms)} ms)`);
  t.ok(r0 && r0.to2Ms >= 1400, `the send to rank 2 completed only once rank 2 received (${r0 && Math.round(r0.to2Ms)} ms)`);
});

t.test('bad arguments are rejected on the calling rank only, naming the argument', async (t) => {
  const { results } = await scenario(t, 2, 'invalid');
  for (const [rank, r] of results.entries()) {
    t.ok(r, `rank ${rank} reported`);
    if (!r) continue;
    t.ok(r.results.length >= 24, `rank ${rank}: every case ran`);
    for (const { name, argument, got } of r.results) {
      t.notOk(got.sync, `rank ${rank}, ${name}: reported through the Work, not thrown`);
      t.equal(got.code, 'ERR_INVALID_ARGUMENT', `rank ${rank}, ${name}: ERR_INVALID_ARGUMENT`, { got });
      t.match(got.message, `argument '${argument}'`, `rank ${rank}, ${name}: names the argument`);
      t.match(got.message, /received /, `rank ${rank}, ${name}: says what was received`);
      t.equal(got.rank, rank, `rank ${rank}, ${name}: error.rank is this rank`);
    }
    t.same(r.after, { got: 1 - rank, sum: 2 }, `rank ${rank}: a message and a collective work afterwards`);
  }
});

// The launcher's Abort and the engine's own look at the connection race to fail the operation: whichever
// wins, error.peer is the killed rank. A few runs each, as either may win any one.
for (const [transport, env] of TRANSPORTS) {
  for (const [name, what] of [['kill', 'receive'], ['kill-send', 'send']]) {
    t.test(`${transport}: a peer killed during a ${what}: ERR_PEER_LOST naming it, no hang`, async (t) => {
      for (let run = 1; run <= 3; run++) {
        const { results } = await scenario(t, 2, name, env, { exitZero: false });
        const r = results[0];
        t.equal(r && r.got.code, 'ERR_PEER_LOST', `run ${run}: the ${what} fails with ERR_PEER_LOST`, { r });
        t.equal(r && r.got.peer, 1, `run ${run}: error.peer is rank 1`, { r });
        t.match(r && r.got.message, /rank 1/, `run ${run}: the error names rank 1`);
        t.ok(r && r.ms < 30000, `run ${run}: within 30 s (${r && Math.round(r.ms)} ms)`);
      }
    });
  }

  // Only the launcher tells ranks 0 and 2 why their receive from each other fails: the rank it lost.
  t.test(`${transport}: a rank killed while two others wait on each other: their error.peer is the lost rank`, async (t) => {
    const { results } = await scenario(t, 3, 'kill-bystander', env, { exitZero: false });
    for (const rank of [0, 2]) {
      const r = results[rank];
      t.equal(r && r.got.code, 'ERR_PEER_LOST', `rank ${rank}: the receive fails with ERR_PEER_LOST`, { r });
      t.equal(r && r.got.peer, 1, `rank ${rank}: error.peer is rank 1, the rank lost`, { r });
      t.match(r && r.got.message, /because of rank 1/, `rank ${rank}: the error names rank 1`);
    }
  });
}

// Without a launcher nobody else reports the death: the engine must see it on the connection itself.
for (const [transport, env] of TRANSPORTS) {
  t.test(`${transport}, no launcher: a peer killed during a receive is seen by the engine itself`, async (t) => {
    const port = await new Promise((resolve) => {
      const srv = net.createServer().listen(0, '127.0.0.1', () => {
        const p = srv.address().port;
        srv.close(() => resolve(p));
      });
    });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-test-'));
    const rankEnv = (rank) => ({
      ...process.env, ...env, RANK: String(rank), WORLD_SIZE: '2', LOCAL_RANK: String(rank), MASTER_ADDR: '127.0.0.1',
      MASTER_PORT: String(port), HORA_TIMEOUT_S: '60', HORA_TEST_RESULT_DIR: dir,
    });
    const ranks = await Promise.all([0, 1].map((r) => runProcess([WORKER, 'kill'], rankEnv(r), 90000)));
    const file = path.join(dir, 'rank-0.json');
    const r = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')).result : null;
    fs.rmSync(dir, { recursive: true, force: true });
    t.equal(ranks[1].signal, 'SIGKILL', 'rank 1 was killed');
    t.equal(r && r.got.code, 'ERR_PEER_LOST', 'the receive fails with ERR_PEER_LOST', { r, stderr: ranks[0].stderr.slice(-2000) });
    t.match(r && r.got.message, /rank 1/, 'the error names rank 1');
    t.equal(r && r.got.peer, 1, 'error.peer is rank 1');
    t.ok(r && r.ms < 30000, `within 30 s (${r && Math.round(r.ms)} ms)`);
  });
}

t.test('a deadline: ERR_TIMEOUT naming peer and tag, and collectives go on', async (t) => {
  const { results } = await scenario(t, 2, 'timeout', { HORA_TIMEOUT_S: '2' });
  const [r0, r1] = results;
  t.equal(r0 && r0.got.code, 'ERR_TIMEOUT', 'the receive times out', { r0 });
  t.match(r0 && r0.got.message, /message from rank 1 with tag 7/, 'its error names the peer and the tag');
  t.equal(r0 && r0.got.peer, 1, 'error.peer is the sender');
  t.equal(r1 && r1.got.code, 'ERR_TIMEOUT', 'the unreceived send times out', { r1 });
  t.match(r1 && r1.got.message, /rank 0 did not receive .* with tag 9/, 'its error names the peer and the tag');
  t.ok(r0 && r0.ms >= 1900, `not before the deadline (${r0 && Math.round(r0.ms)} ms)`);
  for (const [rank, r] of results.entries()) t.same(r && r.after, { ok: true, value: ['2'] }, `rank ${rank}: an allreduce works afterwards`);
});

t.test('the timeline shows each send and recv with its peer and tag', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-test-'));
  const file = path.join(dir, 'trace.json');
  await scenario(t, 2, 'in-order', { HORA_TIMELINE: file });
  const trace = fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : {};
  fs.rmSync(dir, { recursive: true, force: true });
  const events = (trace.traceEvents || []).filter((e) => e.ph === 'X' && e.args && (e.args.kind === 'send' || e.args.kind === 'recv'));
  const sends = events.filter((e) => e.args.kind === 'send'), recvs = events.filter((e) => e.args.kind === 'recv');
  t.equal(sends.length, 40, '40 send slices');
  t.equal(recvs.length, 40, '40 recv slices');
  t.ok(sends.every((e) => e.args.to === 1 && e.args.tag === 5 && e.args.status === 'ok'), 'each send names its peer and tag');
  t.ok(recvs.every((e) => e.args.from === 0 && e.args.tag === 5 && e.args.status === 'ok'), 'each recv names its peer and tag');
});
