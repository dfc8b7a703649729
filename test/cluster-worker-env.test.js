'use strict';
// What remote workers of `hora run -H` get in their environment, and how it gets there: -x NAME,
// -x NAME=VALUE and HORA_RUN_EXPORT reach workers on other hosts (a simulated cluster of network
// namespaces with real sshds, test/cluster/cluster.sh), and while the job runs no process on this
// machine, the hosts' included, has the job secret or a forwarded value on its command line.
// Needs root; skipped with the reason otherwise.
const t = require('tap');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const cluster = require('./cluster/cluster');
const { ROOT, HORA, NODE, tail } = require('./support/hora-job');

const WORKER = path.join(__dirname, 'cluster', 'env-worker.js');
// Its own name and subnet: never takes down, nor collides with, another test's cluster.
const NAME = 'hwe';
const SUBNET = 52;

const reason = cluster.canRun();
if (reason) {
  t.comment(`skipping remote worker environment tests: ${reason}`);
  t.plan(0, reason);
  return;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let c;
t.before(async () => {
  c = await cluster.up(2, { name: NAME, subnet: SUBNET });
});
t.teardown(async () => {
  await cluster.down(NAME);
});

/** Every process of this machine (the hosts are network namespaces in the same pid namespace): pid and argv. */
function allCommandLines() {
  const out = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      out.push({ pid: Number(name), cmdline: fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').join(' ') });
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

function readReports(dir, np) {
  const out = [];
  for (let r = 0; r < np; r++) {
    const file = path.join(dir, `rank-${r}.json`);
    out.push(fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')) : null);
  }
  return out;
}

t.test('-x and HORA_RUN_EXPORT reach remote workers; no command line holds the secret while the job runs', async (t) => {
  const [h0, h1] = c.hosts;
  const resultDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hora-worker-env-'));
  t.teardown(() => fs.rmSync(resultDir, { recursive: true, force: true }));
  // Values no process would have by chance; the forwarded one stands for a secret of the user's.
  const forwarded = `fwd-${crypto.randomBytes(12).toString('hex')}`;
  const listed = `list-${crypto.randomBytes(12).toString('hex')}`;
  const args = [HORA, 'run', '-H', `localhost:1,${h0}:1,${h1}:1`, '--ssh-opts', `-F ${c.sshConfig}`,
    '-x', 'HWE_FORWARDED', '-x', 'HWE_SET=set on the command line', '--', 'node', WORKER];
  const env = {
    ...process.env, HORA_TIMEOUT_S: '60', HORA_TEST_RESULT_DIR: resultDir,
    HWE_FORWARDED: forwarded, HWE_LIST: listed, HWE_NOT_EXPORTED: 'only here', HORA_RUN_EXPORT: 'HWE_LIST, HWE_LIST_SET=a list value',
  };
  const child = spawn(NODE, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  const run = { stdout: '', stderr: '' };
  child.stdout.on('data', (d) => (run.stdout += d));
  child.stderr.on('data', (d) => (run.stderr += d));
  const killer = setTimeout(() => child.kill('SIGKILL'), 90000);
  const closed = new Promise((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));

  // Every rank has joined and is waiting for the go file: the job is running.
  const deadline = Date.now() + 60000;
  while (readReports(resultDir, 3).some((r) => r === null) && Date.now() < deadline) await sleep(100);
  const reports = readReports(resultDir, 3);
  t.ok(reports.every(Boolean), 'every rank joined', { output: tail(run) });
  const secret = reports[0]?.secret;
  t.match(secret, /^[0-9a-f]{64}$/, 'the workers have the secret');

  const lines = allCommandLines();
  if (reports.every(Boolean)) {
    // The scan saw the remote workers themselves, in their hosts' namespaces.
    for (const [rank, host] of [[1, 0], [2, 1]]) {
      const pid = reports[rank].pid;
      t.ok(lines.some((p) => p.pid === pid && p.cmdline.includes(WORKER)), `rank ${rank}'s process ${pid} was among those read`);
      t.ok(c.processes(host).some((p) => p.pid === pid), `rank ${rank}'s process ${pid} runs in host ${host}'s namespace`);
      // It holds the secret in its environment, which only its own user can read.
      t.ok(fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(`HORA_SECRET=${secret}`), `rank ${rank} has the secret in its environment`);
    }
    t.ok(lines.some((p) => /\bssh\b/.test(p.cmdline) && p.cmdline.includes(h0)), 'the ssh processes were among those read');
    t.ok(lines.length > 10, `${lines.length} command lines read`);
  }
  for (const [what, value] of [['the job secret', secret], ['the value of -x HWE_FORWARDED', forwarded], ['a HORA_RUN_EXPORT value', listed]]) {
    if (!value) continue;
    const holders = lines.filter((p) => p.cmdline.includes(value)).map((p) => `${p.pid}: ${p.cmdline.slice(0, 200)}`);
    t.same(holders, [], `no command line holds ${what}`);
  }
  fs.writeFileSync(path.join(resultDir, 'go'), '');

  const { code } = await closed;
  clearTimeout(killer);
  t.equal(code, 0, 'the job succeeded', { output: tail(run) });
  const expected = { HWE_FORWARDED: forwarded, HWE_SET: 'set on the command line', HWE_LIST: listed, HWE_LIST_SET: 'a list value' };
  t.same(reports[0]?.vars, { ...expected, HWE_NOT_EXPORTED: 'only here' }, 'the local worker inherits the whole environment');
  for (const rank of [1, 2]) {
    t.same(reports[rank]?.vars, { ...expected, HWE_NOT_EXPORTED: null }, `rank ${rank} (remote) gets -x and HORA_RUN_EXPORT variables, not the rest`);
    t.equal(reports[rank]?.hostId, c.hosts[rank - 1], `rank ${rank} ran on ${c.hosts[rank - 1]}`);
  }
});
