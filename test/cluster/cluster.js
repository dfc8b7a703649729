'use strict';
// Node side of cluster.sh, for tests: bring a simulated cluster up and down, and look inside its hosts.
//
//   canRun()            '' when this machine can run a cluster, else the reason it cannot (print it, skip)
//   await up(k, {rate, name, subnet, timeoutMs})   (subnet N: hosts get 10.77.N.x, default 0)
//       -> {name, hosts: ['10.77.0.1', ...], sshConfig, identity, stateDir, bridgeAddr, subnet: '10.77.0.0/24',
//           processes(i) -> [{pid, cmdline}] of host i, down() -> Promise (idempotent)}
//   await down(name)    takes a cluster down whether or not this process brought it up
const fs = require('node:fs');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');

const SCRIPT = path.join(__dirname, 'cluster.sh');

function onPath(command) {
  return (process.env.PATH || '/usr/sbin:/usr/bin:/sbin:/bin')
    .split(':')
    .concat(['/usr/sbin', '/sbin'])
    .some((dir) => dir && fs.existsSync(path.join(dir, command)));
}

function canRun() {
  if (process.platform !== 'linux') return `network namespaces need Linux (this is ${process.platform})`;
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return 'not root: network namespaces and sshd need root';
  for (const command of ['ip', 'ssh', 'ssh-keygen', 'bash']) {
    if (!onPath(command)) return `no '${command}' command (apt-get install iproute2 openssh-client)`;
  }
  if (!fs.existsSync('/usr/sbin/sshd') && !onPath('apt-get')) return 'no /usr/sbin/sshd and no apt-get to install openssh-server';
  // Root in a container may still lack the capability to make namespaces and bridges: try both.
  const probe = `hcprobe${process.pid % 100000}`;
  const r = spawnSync('bash', ['-c', `ip netns add ${probe} && ip netns del ${probe} && ip link add ${probe}br type bridge && ip link del ${probe}br`], {
    encoding: 'utf8',
    timeout: 10000,
  });
  spawnSync('bash', ['-c', `ip netns del ${probe}; ip link del ${probe}br`], { stdio: 'ignore', timeout: 10000 });
  if (r.status !== 0) return `cannot create network namespaces or bridges here: ${(r.stderr || r.error?.message || '').trim()}`;
  return '';
}

function runScript(args, timeoutMs) {
  return new Promise((resolve) => {
    const child = spawn('bash', [SCRIPT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    // SIGTERM first: up's trap then removes what it made.
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

async function down(name = 'hc') {
  const r = await runScript(['down', '--name', name], 60000);
  if (r.code !== 0) throw new Error(`cluster.sh down --name ${name} failed (${r.code ?? r.signal}): ${r.stderr.trim()}`);
}

/** Process ids and command lines of everything running in host i of cluster `name`. */
function processes(name, i) {
  const r = spawnSync('ip', ['netns', 'pids', `${name}${i}`], { encoding: 'utf8', timeout: 10000 });
  if (r.status !== 0) return [];
  const out = [];
  for (const pid of r.stdout.split(/\s+/).filter(Boolean)) {
    try {
      const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
      if (cmdline !== '') out.push({ pid: Number(pid), cmdline }); // zombies have an empty command line
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

async function up(k, { rate, name = 'hc', subnet, timeoutMs = 120000 } = {}) {
  const args = ['up', String(k), '--name', name];
  if (rate) args.push('--rate', rate);
  if (subnet !== undefined) args.push('--subnet', String(subnet));
  const r = await runScript(args, timeoutMs);
  if (r.code !== 0) {
    await down(name).catch(() => undefined);
    throw new Error(`cluster.sh ${args.join(' ')} failed (${r.code ?? r.signal}): ${r.stderr.trim()}`);
  }
  const vars = {};
  for (const line of r.stdout.split('\n')) {
    const m = /^(HORA_CLUSTER_\w+)=(.*)$/.exec(line);
    if (m) vars[m[1]] = m[2];
  }
  return {
    name,
    hosts: vars.HORA_CLUSTER_HOSTS.split(','),
    sshConfig: vars.HORA_CLUSTER_SSH_CONFIG,
    identity: vars.HORA_CLUSTER_IDENTITY,
    stateDir: vars.HORA_CLUSTER_DIR,
    bridgeAddr: vars.HORA_CLUSTER_BRIDGE_ADDR,
    subnet: vars.HORA_CLUSTER_SUBNET,
    processes: (i) => processes(name, i),
    down: () => down(name),
  };
}

module.exports = { canRun, up, down };
