'use strict';
// Allreduce across simulated hosts: network namespaces joined by a bridge, an sshd in each, workers started
// by `hora run -H` over ssh (test/cluster/cluster.sh). Every algorithm gives the same bits as the flat ring
// for exact inputs and matches the reference for the others; a host whose link goes down mid-allreduce
// makes every rank fail within the collective timeout instead of hanging.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const cluster = require('./cluster/cluster');
const { runProcess, tail, HORA, NODE } = require('./support/hora-job');
const { ssMissing, rankToRankEnds } = require('./support/congestion');

const reason = cluster.canRun();
if (reason) {
  t.plan(0, reason);
  return;
}

const NAME = 'hca';
const SUBNET = 43;
let c;
t.before(async () => {
  c = await cluster.up(3, { name: NAME, subnet: SUBNET });
});
t.teardown(() => c?.down());

async function job(hostSpec, worker, env, timeoutMs = 120000) {
  const resultDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-cluster-'));
  const run = runProcess([HORA, 'run', '-H', hostSpec, '--ssh-opts', `-F ${c.sshConfig}`, '--iface', c.bridgeAddr, '--', NODE, worker],
    { ...process.env, HORA_TIMEOUT_S: '60', ...env, HORA_TEST_RESULT_DIR: resultDir }, timeoutMs);
  return { run, resultDir };
}

function reports(resultDir, np) {
  const out = [];
  for (let r = 0; r < np; r++) {
    const file = path.join(resultDir, `rank-${r}.json`);
    out.push(fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : null);
  }
  return out;
}

const COLLECTIVES = path.join(__dirname, 'workers', 'collectives-worker.js');

for (const layout of [
  { name: '2 hosts x 2 ranks', spec: () => `${c.hosts[0]}:2,${c.hosts[1]}:2`, np: 4, grid: '2x2' },
  { name: '3 hosts x 1 rank', spec: () => c.hosts.map((h) => `${h}:1`).join(','), np: 3, grid: '1x3' },
  { name: '2 hosts x 3 ranks', spec: () => `${c.hosts[0]}:3,${c.hosts[1]}:3`, np: 6, grid: '3x2' },
]) {
  t.test(`${layout.name} over ssh: ring, hierarchical, multidim and auto agree`, async (t) => {
    const digests = {};
    for (const [label, env] of [
      ['ring', { HORA_ALGO: 'ring' }],
      ['hierarchical', { HORA_ALGO: 'hierarchical' }],
      ['multidim', { HORA_ALGO: 'multidim', HORA_TOPOLOGY: layout.grid }],
      ['auto', {}],
    ]) {
      const { run, resultDir } = await job(layout.spec(), COLLECTIVES, { HORA_TEST_COUNTS: '1,53,70001', ...env });
      const r = await run;
      t.equal(r.code, 0, `${label}: hora run exits 0`, { output: tail(r, 1500) });
      const reps = reports(resultDir, layout.np);
      fs.rmSync(resultDir, { recursive: true, force: true });
      t.ok(reps.every((rep) => rep && rep.failures === 0 && rep.checks > 100), `${label}: every rank matches the reference`,
        { firstFailures: reps.map((rep) => rep && rep.firstFailures) });
      digests[label] = reps.map((rep) => rep && rep.digest);
    }
    for (const label of ['hierarchical', 'multidim', 'auto']) t.same(digests[label], digests.ring, `${label}: same bits as the flat ring`);
  });
}

// TCP between ranks of one host (here by the host's own address, not loopback) uses Reno from the first
// packet; between hosts the system's congestion control stays (test/congestion.test.js for loopback).
t.test('over TCP, connections within a host use Reno and connections between hosts the system\'s choice', { skip: ssMissing() }, async (t) => {
  const { run, resultDir } = await job(`${c.hosts[0]}:2,${c.hosts[1]}:1`, path.join(__dirname, 'workers', 'congestion-worker.js'),
    { HORA_TRANSPORT: 'tcp' });
  const r = await run;
  t.equal(r.code, 0, 'hora run exits 0', { output: tail(r, 1500) });
  const reps = reports(resultDir, 3);
  fs.rmSync(resultDir, { recursive: true, force: true });
  const ends = rankToRankEnds(reps);
  const host = (address) => address.slice(0, address.lastIndexOf(':'));
  const within = ends.filter((e) => host(e.local) === host(e.peer));
  const between = ends.filter((e) => host(e.local) !== host(e.peer));
  t.ok(within.length >= 4 && within.every((e) => e.rank < 2 && e.peerRank < 2), `both ends of ranks 0 and 1's connections on host 0 (${within.length})`, { ends });
  t.ok(between.length >= 8, `both ends of the connections to rank 2 on host 1 (${between.length})`, { ends });
  t.same(within.filter((e) => e.cc !== 'reno'), [], 'within the host: reno');
  const system = reps[0] && reps[0].system;
  if (system === 'reno') {
    t.skip('the system\'s congestion control is reno itself: between hosts is not told apart');
  } else {
    t.same(between.filter((e) => e.cc !== system), [], `between hosts: the system's ${system}`);
  }
});

// The collective deadline is long on purpose: the loss must be seen from the connections (keepalive and
// unacknowledged data, about 4 s), not from the timeout.
t.test("a host's link taken down mid-allreduce: every rank fails with ERR_PEER_LOST within 5 s, none hangs", async (t) => {
  const timeoutS = 60;
  const detectS = 5;
  const { run, resultDir } = await job(`${c.hosts[0]}:2,${c.hosts[1]}:2`, path.join(__dirname, 'workers', 'link-down-worker.js'),
    { HORA_TIMEOUT_S: String(timeoutS), HORA_ALGO: 'hierarchical' }, 90000);
  // Wait until every rank has finished one allreduce, then cut host 1 off (its end of the veth).
  const deadline = Date.now() + 60000;
  while (Date.now() < deadline && ![0, 1, 2, 3].every((r) => fs.existsSync(path.join(resultDir, `started-${r}`)))) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const downAt = Date.now();
  const ip = spawnSync('ip', ['-n', `${NAME}1`, 'link', 'set', 'eth0', 'down'], { encoding: 'utf8' });
  t.equal(ip.status, 0, `link of host 1 taken down ${ip.stderr}`);
  const r = await run;
  const seconds = (Date.now() - downAt) / 1000;
  t.not(r.code, 0, `hora run exits non-zero (${r.code ?? r.signal}) ${seconds.toFixed(1)} s after the link went down`);
  t.equal(r.signal, null, 'on its own, not killed by the test');
  // Ranks on the cut-off host cannot tell the launcher; they write their reports to the shared disk.
  let reps = reports(resultDir, 4);
  for (const until = Date.now() + (detectS + 10) * 1000; reps.some((rep) => !rep) && Date.now() < until;) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    reps = reports(resultDir, 4);
  }
  fs.rmSync(resultDir, { recursive: true, force: true });
  for (let rank = 0; rank < 4; rank++) {
    const rep = reps[rank];
    if (!t.ok(rep, `rank ${rank} reported`, { output: tail(r, 1500) })) continue;
    t.ok(rep.rounds > 0, `rank ${rank} was allreducing (${rep.rounds} rounds)`);
    t.equal(rep.code, 'ERR_PEER_LOST', `rank ${rank}: ${rep.code}: ${String(rep.message).slice(0, 200)}`);
    const after = (rep.at - downAt) / 1000;
    // 4 s of silence, plus a loaded machine's scheduling.
    t.ok(after < detectS + 1.5, `rank ${rank} failed ${after.toFixed(1)} s after the link went down (within ${detectS} s)`);
  }
  spawnSync('ip', ['-n', `${NAME}1`, 'link', 'set', 'eth0', 'up']);
});
