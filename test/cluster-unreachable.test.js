'use strict';
// `hora run -H` with an --iface the hosts cannot reach, in a simulated cluster (network namespaces with real
// sshds): the launcher warns before it starts anything, the remote worker's warning reaches the launcher's
// output through ssh, and the job ends at HORA_CONNECT_TIMEOUT_S, not HORA_TIMEOUT_S.
// Traffic stays on this machine: the namespaces' own loopback, or an address of an interface this test
// makes, to which the namespaces have no route. Needs root; skipped with the reason otherwise.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const cluster = require('./cluster/cluster');
const { ROOT, HORA, NODE, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'cluster', 'worker.js');
// Its own name and subnet: never takes down, nor collides with, a cluster somebody else brought up.
const NAME = 'hur';
const SUBNET = 47;
// A launcher interface on a network the hosts are not on (the namespaces have no route to it): a bridge
// with no ports, which any kernel that runs the cluster can make.
const DUMMY = 'hurother0';
const DUMMY_ADDR = `10.177.${SUBNET}.1`;

const reason = cluster.canRun();
if (reason) {
  t.comment(`skipping: ${reason}`);
  t.plan(0, reason);
  return;
}

const esc = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** `hora run ...launcherArgs node worker.js`; resolves {code, stdout, stderr, seconds, lines: [{ms, line}] of stderr}. */
function job(launcherArgs, env, timeoutMs = 240000) {
  const resultDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-unreachable-test-'));
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(NODE, [HORA, 'run', ...launcherArgs, '--', 'node', WORKER], {
      cwd: ROOT,
      env: { ...process.env, HORA_TIMEOUT_S: '600', ...env, HORA_TEST_RESULT_DIR: resultDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let partial = '';
    const lines = [];
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => {
      stderr += d;
      const parts = (partial + d).split('\n');
      partial = parts.pop();
      for (const line of parts) lines.push({ ms: Date.now() - started, line });
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      fs.rmSync(resultDir, { recursive: true, force: true });
      resolve({ code, signal, stdout, stderr, lines, seconds: (Date.now() - started) / 1000 });
    });
  });
}

let c;
t.before(async () => {
  c = await cluster.up(1, { name: NAME, subnet: SUBNET });
});
t.teardown(async () => {
  spawnSync('ip', ['link', 'del', DUMMY], { stdio: 'ignore' });
  await cluster.down(NAME);
});

const sshOpts = () => ['--ssh-opts', `-F ${c.sshConfig}`];

function checkJob(t, r, { host, flag, addrPattern, errors }) {
  const output = { output: tail(r) };
  const launcherWarn = r.lines.findIndex((l) => /^hora run WARN: /.test(l.line));
  const firstWorkerLine = r.lines.findIndex((l) => l.line.startsWith('['));
  t.ok(launcherWarn >= 0, 'the launcher warned', output);
  t.ok(firstWorkerLine < 0 || launcherWarn < firstWorkerLine, 'before any worker output');
  t.match(r.lines[launcherWarn]?.line, new RegExp(`${esc(flag)} is .*${esc(host)}`), 'naming the interface and the host');

  const workerWarn = r.lines.find((l) => l.line.startsWith(`[0@${host}] hora init WARN: rank 0: cannot reach the rendezvous server at `));
  t.ok(workerWarn, 'the worker\'s warning came through ssh', output);
  if (workerWarn) {
    // The worker counts from its first attempt; ssh login and node's start-up come before that, and take
    // seconds on a loaded machine.
    const since = Number(/ attempts in ([\d.]+) s;/.exec(workerWarn.line)?.[1]);
    t.ok(since <= 5, `the worker warned ${since} s after its first attempt`);
    t.ok(workerWarn.ms < 200000, `it reached the launcher's output ${workerWarn.ms} ms after the launcher started`);
    t.comment(workerWarn.line);
    t.match(workerWarn.line, new RegExp(`at ${addrPattern}:\\d+ `), 'names the address and port');
    t.match(workerWarn.line, errors, 'names the OS error');
    t.match(workerWarn.line, new RegExp(`the address comes from hora run \\(${esc(flag)}\\)`), 'names what chose the address');
  }
  t.not(r.code, 0, 'the job failed');
  t.match(r.stderr, /ERR_PEER_LOST/, 'with ERR_PEER_LOST', output);
  const gaveUp = Number(/cannot reach the rendezvous server at \S+: gave up after ([\d.]+) s/.exec(r.stderr)?.[1]);
  t.ok(gaveUp >= 6 && gaveUp < 12, `the worker gave up ${gaveUp} s after its first attempt (deadline 6 s)`);
  t.match(r.stderr, /--iface naming the launcher's interface on the hosts' network/, 'saying what to try');
  // ssh logins and node's start-up take seconds each on a loaded machine; HORA_TIMEOUT_S is far off.
  t.ok(r.seconds < 200, `ended after ${r.seconds} s (connect deadline 6 s; HORA_TIMEOUT_S 600)`);
}

t.test('--iface lo: the remote worker dials its own loopback, is refused, and says so', async (t) => {
  const [h0] = c.hosts;
  const r = await job(['-H', `${h0}:2`, '--iface', 'lo', ...sshOpts()], { HORA_CONNECT_TIMEOUT_S: '6' });
  checkJob(t, r, { host: h0, flag: '--iface lo', addrPattern: '127\\.0\\.0\\.1', errors: /ECONNREFUSED/ });
  t.match(r.stderr, /--iface lo is 127\.0\.0\.1\/8, a loopback address/);
});

t.test('--iface on another network than the hosts (the rendezvous binds an address they have no route to)', async (t) => {
  const add = spawnSync('bash', ['-c', `ip link add ${DUMMY} type bridge && ip addr add ${DUMMY_ADDR}/24 dev ${DUMMY} && ip link set ${DUMMY} up`], { encoding: 'utf8' });
  if (add.status !== 0) return t.skip(`cannot make a spare interface: ${add.stderr.trim()}`);
  t.teardown(() => spawnSync('ip', ['link', 'del', DUMMY], { stdio: 'ignore' }));
  const route = spawnSync('ip', ['-n', `${NAME}0`, 'route', 'get', DUMMY_ADDR], { encoding: 'utf8' });
  if (route.status === 0) return t.skip(`the test's hosts have a route to ${DUMMY_ADDR} (${route.stdout.trim()}): nothing to show`);
  const [h0] = c.hosts;
  // By address: an interface name would be passed to the workers, and the hosts have no such interface.
  const r = await job(['-H', `${h0}:2`, '--iface', DUMMY_ADDR, ...sshOpts()], { HORA_CONNECT_TIMEOUT_S: '6' });
  checkJob(t, r, { host: h0, flag: `--iface ${DUMMY_ADDR}`, addrPattern: esc(DUMMY_ADDR), errors: /ENETUNREACH|EHOSTUNREACH/ });
  t.match(r.stderr, new RegExp(`--iface ${esc(DUMMY_ADDR)} is ${esc(DUMMY_ADDR)}/24 on ${DUMMY}, a subnet none of the hosts is on \\(${esc(h0)}\\)`));
});

t.test('--iface on the hosts\' network: no warning, and the job runs', async (t) => {
  const [h0] = c.hosts;
  const r = await job(['-H', `${h0}:2`, '--iface', c.bridgeAddr, ...sshOpts()], { HORA_CONNECT_TIMEOUT_S: '20' });
  t.equal(r.code, 0, 'exit status', { output: tail(r) });
  t.notMatch(r.stderr, /WARN/, 'nothing to warn about');
});
