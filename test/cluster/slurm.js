'use strict';
// A Slurm cluster on the simulated hosts of cluster.sh, for tests: one munged (in this machine's network
// namespace: it listens on a Unix socket only), one slurmctld on host 0 and one slurmd on every host.
// Node i is called NAMEi (hslurmc0, hslurmc1, ...; test/cluster-env.test.js has a cluster called hslurm)
// and runs in its own network, UTS (hostname) and mount namespace, where /etc/hosts names every node; so
// a command run "on" node i sees what a process on a real compute node sees. Root only.
//
//   canRunSlurm()   '' when this machine can run it, else the reason it cannot (print it, skip); upSlurm
//                   throws SlurmPrerequisiteError when slurmd finds the cgroups unusable (skip as well)
//   await upSlurm({ nodes, cpus, name, subnet })
//       -> {nodes: ['hslurmc0', ...], addrs, dir, conf, version: 'slurm-wlm 22.05.8', daemons,
//           env(extra) -> an environment for Slurm's commands (SLURM_CONF, no launcher variables),
//           start(i, cmd, args, opts) -> test/support/spawn.js's handle of `cmd` run on node i,
//           run(i, cmd, args, opts) -> its result,
//           leftovers(i) -> [{pid, cmdline}] on node i that are not the cluster's own daemons,
//           down() -> Promise (idempotent): every daemon ended by its PID, then cluster.sh down}
//
// Daemons are started in the foreground (-D, -F) by test/support/spawn.js, so the test holds each one's PID
// and ends it by that PID. Each node has its own spool, pid and log files, below the cluster's state
// directory, which cluster.sh down removes. Why the configuration is what it is:
// - ProctrackType=proctrack/linuxproc and TaskPlugin=task/none: no cgroup hierarchy of Slurm's own, which
//   CI machines may not allow. slurmd 22.05 still loads its cgroup plugin at start and fails without a
//   cgroup file system on /sys/fs/cgroup, so the nodes are entered with nsenter --net (which keeps this
//   machine's /sys) rather than `ip netns exec` (which mounts a sysfs of the namespace, without cgroups).
// - Two CPUs declared per node (CPUs=2, SlurmdParameters=config_overrides: the machine may have fewer or
//   more), and OverSubscribe=FORCE so that steps that overlap still start.
// - SlurmUser=root: the tests run as root, and so does every job.
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const cluster = require('./cluster.js');
const { startProcess } = require('../support/spawn');
// The test's environment less any launcher's or Slurm job's variables, which would reach the jobs.
const { cleanEnv } = require('../support/hora-job');

const COMMANDS = ['munged', 'slurmctld', 'slurmd', 'srun', 'sbatch', 'sinfo', 'scontrol', 'scancel', 'nsenter', 'unshare'];

function onPath(command) {
  return (process.env.PATH || '/usr/bin:/bin').split(':').concat(['/usr/sbin', '/sbin']).some((dir) => dir && fs.existsSync(path.join(dir, command)));
}

function canRunSlurm() {
  const cannot = cluster.canRun();
  if (cannot) return cannot;
  for (const command of COMMANDS) {
    if (!onPath(command)) return `no '${command}' command (apt-get install slurm-wlm munge util-linux)`;
  }
  const cgroup = spawnSync('findmnt', ['-n', '-o', 'FSTYPE', '--target', '/sys/fs/cgroup'], { encoding: 'utf8' });
  if (cgroup.status !== 0 || !/^(cgroup2?|tmpfs)$/m.test(cgroup.stdout.trim())) {
    return 'no cgroup file system on /sys/fs/cgroup: slurmd 22.05 cannot start without one, even with proctrack/linuxproc';
  }
  return '';
}

// argv that runs `cmd args...` on node `node`: its network namespace, its hostname, its /etc/hosts. Every
// step execs the next, so the PID of the returned process is the PID of cmd.
function onNode(netns, node, hostsFile, cmd, args) {
  const script = 'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"';
  return ['nsenter', [`--net=/run/netns/${netns}`, 'unshare', '--uts', '--mount', 'sh', '-c', script, node, hostsFile, cmd, ...args]];
}

/** What upSlurm throws when this machine cannot run slurmd after all (its cgroups): a reason to skip, not a failure. */
class SlurmPrerequisiteError extends Error {}

function slurmConf({ dir, nodes, addrs, cpus }) {
  return `# Written by test/cluster/slurm.js for one test run.
ClusterName=${nodes[0].replace(/\d+$/, '')}
SlurmctldHost=${nodes[0]}(${addrs[0]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${dir}/munge.sock
StateSaveLocation=${dir}/state
SlurmdSpoolDir=${dir}/%n/spool
SlurmctldPidFile=${dir}/slurmctld.pid
SlurmdPidFile=${dir}/%n/slurmd.pid
SlurmctldLogFile=${dir}/slurmctld.log
SlurmdLogFile=${dir}/%n/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
InactiveLimit=0
KillWait=5
${nodes.map((n, i) => `NodeName=${n} NodeAddr=${addrs[i]} CPUs=${cpus} State=UNKNOWN`).join('\n')}
PartitionName=hora Nodes=${nodes.join(',')} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
`;
}

/**
 * The munged of an earlier run of this cluster that ended without its teardown (the test runner was
 * killed): cluster.sh ends what runs in the hosts, but munged runs outside them. Found by its pid file.
 */
function endStrayMunged(name) {
  const pidFile = `/tmp/hora-cluster-${name}/slurm/munged.pid`;
  try {
    const pid = Number(fs.readFileSync(pidFile, 'utf8').trim());
    if (pid > 0 && fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'munged') process.kill(pid, 'SIGKILL');
  } catch {
    // no such file or process: nothing to end
  }
}

async function upSlurm({ nodes: count = 2, cpus = 2, name = 'hslurmc', subnet = 42, timeoutMs = 60000 } = {}) {
  endStrayMunged(name);
  const c = await cluster.up(count, { name, subnet });
  const dir = path.join(c.stateDir, 'slurm');
  const nodes = c.hosts.map((_, i) => `${name}${i}`);
  const conf = path.join(dir, 'slurm.conf');
  const hostsFile = path.join(dir, 'hosts');
  const daemons = [];
  const env = (extra = {}) => cleanEnv({ SLURM_CONF: conf, ...extra });
  const start = (i, cmd, args = [], opts = {}) => {
    const [prog, argv] = onNode(`${name}${i}`, nodes[i], hostsFile, cmd, args);
    return startProcess(prog, argv, { env: env(), ...opts });
  };
  let downing;
  const down = () => {
    downing ??= (async () => {
      // Clients first, munged last: a daemon that is stopping still authenticates its last messages.
      for (const d of [...daemons].reverse()) {
        d.kill('SIGTERM');
        const ended = await Promise.race([d.done.then(() => true), new Promise((r) => setTimeout(() => r(false), 5000))]);
        if (!ended) d.kill('SIGKILL');
        await d.done;
      }
      await c.down(); // whatever is left in the hosts (slurmstepd, tasks), the namespaces, the state directory
    })();
    return downing;
  };
  try {
    fs.mkdirSync(path.join(dir, 'state'), { recursive: true });
    fs.chmodSync(dir, 0o755); // munged wants everyone to reach its socket
    for (const n of nodes) fs.mkdirSync(path.join(dir, n, 'spool'), { recursive: true });
    fs.writeFileSync(hostsFile, `127.0.0.1 localhost\n${nodes.map((n, i) => `${c.hosts[i]} ${n}`).join('\n')}\n`);
    fs.writeFileSync(conf, slurmConf({ dir, nodes, addrs: c.hosts, cpus }));
    // slurmd reads it beside slurm.conf. On cgroup v2 it would ask systemd (over D-Bus) for a scope,
    // and a container has no systemd: IgnoreSystemd makes the scope itself.
    fs.writeFileSync(path.join(dir, 'cgroup.conf'), 'CgroupPlugin=autodetect\nIgnoreSystemd=yes\n');
    // One key, made here, for this cluster only.
    fs.writeFileSync(path.join(dir, 'munge.key'), require('node:crypto').randomBytes(1024), { mode: 0o400 });
    const daemon = (label, handle) => {
      handle.label = label;
      daemons.push(handle);
      return handle;
    };
    // --force: munged refuses a socket below /tmp (world-writable) otherwise.
    daemon('munged', startProcess('munged', [
      '-F', '--force', `--socket=${dir}/munge.sock`, `--key-file=${dir}/munge.key`, `--pid-file=${dir}/munged.pid`,
      `--log-file=${dir}/munged.log`, `--seed-file=${dir}/munged.seed`,
    ], { env: env() }));
    const socketBy = Date.now() + 10000;
    while (!fs.existsSync(path.join(dir, 'munge.sock'))) {
      if (Date.now() > socketBy || daemons[0].exited()) throw new Error(`munged did not start: ${daemons[0].output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    daemon('slurmctld', start(0, 'slurmctld', ['-D', '-i']));
    nodes.forEach((n, i) => daemon(`slurmd ${n}`, start(i, 'slurmd', ['-D', '-N', n])));
    // Up when every node is idle.
    const by = Date.now() + timeoutMs;
    for (;;) {
      const dead = daemons.find((d) => d.exited());
      const errors = dead ? dead.output.split('\n').filter((l) => /\b(error|fatal)\b/i.test(l)).map((l) => l.trim()) : [];
      if (errors.some((l) => /cgroup/i.test(l))) throw new SlurmPrerequisiteError(`${dead.label} cannot use this machine's cgroups: ${errors.join(' | ')}`);
      if (dead) throw new Error(`${dead.label} exited at start: ${dead.output.trim()}`);
      const r = await start(0, 'sinfo', ['-h', '-N', '-o', '%N %T']).done;
      const idle = r.stdout.split('\n').filter((l) => /^\S+ idle$/.test(l.trim())).length;
      if (idle === nodes.length) break;
      if (Date.now() > by) throw new Error(`the nodes are not idle after ${timeoutMs / 1000} s: ${r.output.trim()}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  } catch (e) {
    await down();
    throw e;
  }
  const version = (await start(0, 'sinfo', ['-V']).done).stdout.trim();
  const daemonPids = new Set(daemons.map((d) => d.pid));
  const controller = daemons.find((d) => d.label === 'slurmctld').pid;
  return {
    nodes, addrs: c.hosts, dir, conf, version, daemons, env, start,
    run: (i, cmd, args, opts) => start(i, cmd, args, opts).done,
    /** What runs on node i besides its slurmd (and slurmctld with its slurmscriptd) and the cluster's sshd. */
    leftovers: (i) => c.processes(i).filter((p) => !daemonPids.has(p.pid) && parentPid(p.pid) !== controller && !/^(\/usr\/sbin\/)?sshd\b/.test(p.cmdline)),
    down,
  };
}

function parentPid(pid) {
  try {
    return Number(/^PPid:\s*(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
  } catch {
    return 0; // gone meanwhile
  }
}

/** Open MPI's version as `mpirun --version` says it (its first line), or '' without mpirun. */
function mpirunVersion() {
  const r = spawnSync('mpirun', ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.split('\n')[0].trim() : '';
}

module.exports = { canRunSlurm, upSlurm, mpirunVersion, SlurmPrerequisiteError };
