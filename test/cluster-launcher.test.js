'use strict';
// `hora run` across hosts: a simulated cluster (network namespaces with real sshds, test/cluster/cluster.sh)
// and jobs launched into it over real ssh. Needs root; skipped with the reason otherwise.
const t = require('tap');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const cluster = require('./cluster/cluster');
const { ROOT, HORA, NODE, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'cluster', 'worker.js');
// Its own name and subnet: never takes down, nor collides with, a cluster somebody else brought up.
const NAME = 'hlt';
const SUBNET = 41;
const UNREACHABLE = `10.77.${SUBNET}.99`; // on the cluster's subnet, no host there

const reason = cluster.canRun();
if (reason) {
  t.comment(`skipping multi-host launcher tests: ${reason}`);
  t.plan(0, reason);
  return;
}

// A literal string inside a RegExp.
const esc = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs `hora run ...launcherArgs node worker.js` from the repository root with a fresh result dir;
 * resolves {code, signal, stdout, stderr, reports, seconds}. onSpawn(child, resultDir) may signal the launcher.
 */
function job(launcherArgs, { env = {}, timeoutMs = 40000, onSpawn } = {}) {
  const resultDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-cluster-test-'));
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(NODE, [HORA, 'run', ...launcherArgs, '--', 'node', WORKER], {
      cwd: ROOT,
      env: { ...process.env, HORA_TIMEOUT_S: '30', ...env, HORA_TEST_RESULT_DIR: resultDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    if (onSpawn) onSpawn(child, resultDir);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const reports = [];
      for (const name of fs.readdirSync(resultDir)) {
        const report = JSON.parse(fs.readFileSync(path.join(resultDir, name), 'utf8'));
        reports[report.rank] = report;
      }
      fs.rmSync(resultDir, { recursive: true, force: true });
      resolve({ code, signal, stdout, stderr, reports, seconds: (Date.now() - started) / 1000 });
    });
  });
}

async function waitForReports(resultDir, n, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (fs.existsSync(resultDir) && fs.readdirSync(resultDir).length >= n) return true;
    await sleep(50);
  }
  return false;
}

let c;
t.before(async () => {
  c = await cluster.up(3, { name: NAME, subnet: SUBNET });
});
t.teardown(async () => {
  await cluster.down(NAME);
});

const sshOpts = () => ['--ssh-opts', `-F ${c.sshConfig}`];

// Worker processes (wrapper or worker) still running in any host of the cluster.
function leftovers() {
  return [0, 1, 2].flatMap((i) => c.processes(i).filter((p) => p.cmdline.includes(WORKER)).map((p) => `host ${i}: ${p.pid} ${p.cmdline.slice(0, 80)}`));
}

// Leftovers after allowing `ms` for processes being reaped.
async function leftoversAfter(ms) {
  const deadline = Date.now() + ms;
  let left = leftovers();
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(100);
    left = leftovers();
  }
  return left;
}

t.test('-H h0:2,h1:2: allreduce is right on every rank; host ids and local/cross ranks follow the hosts', async (t) => {
  const [h0, h1] = c.hosts;
  const r = await job(['-H', `${h0}:2,${h1}:2`, ...sshOpts()]);
  t.equal(r.code, 0, 'exit status', { output: tail(r) });
  t.equal(r.reports.filter(Boolean).length, 4, 'every rank reported');
  const hostOf = [h0, h0, h1, h1];
  r.reports.forEach((rep, rank) => {
    t.match(rep, { rank, size: 4, wrong: 0, localRank: rank % 2, localSize: 2, crossRank: rank >> 1, crossSize: 2, hostId: hostOf[rank], cwd: ROOT }, `rank ${rank}`);
    t.same(rep.addresses, [hostOf[rank]], `rank ${rank} ran in the namespace of ${hostOf[rank]}`);
    t.match(r.stdout, new RegExp(`^\\[${rank}@${esc(hostOf[rank])}\\] pid \\d+ rank ${rank}$`, 'm'), 'output is prefixed [rank@host]');
  });
  t.same(leftovers(), [], 'nothing left running');
});

t.test('--hostfile with 3 hosts, -i and -p instead of an ssh config, --iface for the rendezvous', async (t) => {
  const [h0, h1, h2] = c.hosts;
  const file = path.join(c.stateDir, 'hostfile');
  fs.writeFileSync(file, `# the test cluster\n${h0} slots=1\n\n${h1} slots=2   # two here\n${h2}\n`);
  const opts = '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o IdentitiesOnly=yes -o User=root';
  const r = await job(['--hostfile', file, '-i', c.identity, '-p', '22', '--ssh-opts', opts, '--iface', c.bridgeAddr, '--debug', 'INFO']);
  t.equal(r.code, 0, 'exit status', { output: tail(r) });
  t.match(r.stderr, new RegExp(`rendezvous server listening on ${esc(c.bridgeAddr)}:`), 'bound to --iface');
  const expected = [
    [h0, 0, 1, 0],
    [h1, 0, 2, 1],
    [h1, 1, 2, 1],
    [h2, 0, 1, 2],
  ];
  t.equal(r.reports.filter(Boolean).length, 4);
  r.reports.forEach((rep, rank) => {
    const [host, localRank, localSize, crossRank] = expected[rank];
    t.match(rep, { size: 4, wrong: 0, hostId: host, localRank, localSize, crossRank, crossSize: 3 }, `rank ${rank}`);
  });
});

t.test('a local host and a remote host in one job', async (t) => {
  const r = await job(['-H', `localhost:1,${c.hosts[0]}:1`, ...sshOpts()]);
  t.equal(r.code, 0, 'exit status', { output: tail(r) });
  t.match(r.reports[0], { wrong: 0, crossRank: 0, crossSize: 2, localSize: 1 });
  t.match(r.reports[1], { wrong: 0, crossRank: 1, crossSize: 2, hostId: c.hosts[0] });
  t.match(r.stdout, /^\[0@localhost\] pid/m);
});

t.test('--output-filename and --bind-to core across hosts: files written here, each remote rank bound on its host', async (t) => {
  const [h0, h1] = c.hosts;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-cluster-output-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  // The network namespaces share this machine's CPUs: the cores a remote host binds to are this machine's.
  const { readCores, bindingFor, cpuList } = require(path.join(ROOT, 'dist', 'ts', 'cli', 'bind.js'));
  const cores = readCores();
  const r = await job(['-H', `${h0}:2,${h1}:1`, ...sshOpts(), '--bind-to', 'core', '--output-filename', dir]);
  t.equal(r.code, 0, 'exit status', { output: tail(r) });
  t.same(fs.readdirSync(dir).sort(), ['rank.0', 'rank.1', 'rank.2']);
  [0, 1, 0].forEach((localRank, rank) => {
    t.equal(r.reports[rank].cpus, cpuList(bindingFor(cores, localRank, 'core')), `rank ${rank} (local rank ${localRank} of its host) is bound to its core`);
    t.match(fs.readFileSync(path.join(dir, `rank.${rank}`, 'stdout'), 'utf8'), new RegExp(`^pid \\d+ rank ${rank}\n$`), `rank ${rank}'s stdout, unlabelled`);
    t.match(r.stdout, new RegExp(`^\\[${rank}@`, 'm'), 'the terminal keeps its labels');
  });
});

t.test('an unreachable host fails the job within seconds, naming the host', async (t) => {
  const r = await job(['-H', `${c.hosts[0]}:1,${UNREACHABLE}:1`, ...sshOpts()]);
  t.not(r.code, 0);
  t.ok(r.seconds < 15, `ended after ${r.seconds} s`);
  t.match(r.stderr, new RegExp(`hora run: rank 1 on ${esc(UNREACHABLE)}: ssh to ${esc(UNREACHABLE)} failed \\(exit 255\\): .*${esc(UNREACHABLE)}`), 'the message names the host', { output: tail(r) });
  t.same(await leftoversAfter(2000), [], 'the reachable host has no worker left');
});

t.test('an ssh login that is refused fails the job, naming the host', async (t) => {
  // A key that is not authorized: ssh exits 255 with "Permission denied".
  const opts = `-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o IdentitiesOnly=yes -o User=root`;
  const r = await job(['-H', `${c.hosts[1]}:2`, '-i', path.join(c.stateDir, 'host0', 'ssh_host_ed25519_key'), '--ssh-opts', opts]);
  t.equal(r.code, 255);
  t.match(r.stderr, new RegExp(`ssh to ${esc(c.hosts[1])} failed \\(exit 255\\): .*Permission denied`), 'the message names the host', { output: tail(r) });
  t.ok(r.seconds < 15, `ended after ${r.seconds} s`);
});

t.test('a remote worker exiting with 3 stops the job; no worker is left in any host', async (t) => {
  // The others ignore SIGTERM: only the SIGKILL sent through the wrapper stops them.
  const r = await job(['--grace', '0.5', '-H', `${c.hosts[0]}:2,${c.hosts[1]}:2`, ...sshOpts()], {
    env: { HORA_TEST_FAIL_RANK: '3', HORA_TEST_HANG: 'stubborn' },
  });
  t.equal(r.code, 3, 'exit status', { output: tail(r) });
  t.match(r.stderr, new RegExp(`hora run: rank 3 on ${esc(c.hosts[1])} exited with code 3`));
  t.equal((r.stdout.match(/ignoring SIGTERM/g) || []).length, 3, 'the others got SIGTERM first');
  t.ok(r.seconds < 20, `ended after ${r.seconds} s`);
  t.same(await leftoversAfter(1000), []);
});

t.test('SIGTERM to the launcher reaches the remote workers; it exits 143', async (t) => {
  const r = await job(['-H', `${c.hosts[0]}:1,${c.hosts[2]}:1`, ...sshOpts()], {
    env: { HORA_TEST_HANG: '1' },
    onSpawn: async (child, resultDir) => {
      if (await waitForReports(resultDir, 2)) child.kill('SIGTERM');
    },
  });
  t.equal(r.code, 143, 'exit status', { output: tail(r) });
  t.same(await leftoversAfter(1000), []);
});

t.test('when the launcher is killed outright, the remote workers die too', async (t) => {
  const r = await job(['-H', `${c.hosts[1]}:2,${c.hosts[2]}:1`, ...sshOpts()], {
    env: { HORA_TEST_HANG: 'stubborn' },
    onSpawn: async (child, resultDir) => {
      if (await waitForReports(resultDir, 3)) child.kill('SIGKILL');
    },
  });
  t.equal(r.signal, 'SIGKILL');
  t.equal(r.reports.filter(Boolean).length, 3, 'the workers were running');
  // End of input reaches each wrapper: SIGTERM (ignored here), SIGKILL 3 s later.
  t.same(await leftoversAfter(8000), [], 'no worker left after the launcher died');
});
