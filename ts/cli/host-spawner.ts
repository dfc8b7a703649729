// The spawner `hora run` uses: each worker through LocalSpawner (spawn.ts) or SshSpawner (ssh.ts) as its
// host is this machine or not, and the rendezvous server bound where every worker can reach it.

import { firstExternalIPv4, isLoopback, Logger, resolveIface, slurmHostlist } from '../config';
import { ifaceSubnetWarning } from './iface-check';
import { hostPart, localAddressToward, SshOptions, SshSpawner } from './ssh';
import { HostSlots, LaunchError, LocalSpawner, RendezvousBinding, Spawner, WorkerHandle, WorkerSpec } from './spawn';
import type { RunOptions } from './run-args';

/**
 * The nodes of the Slurm allocation this runs in (SLURM_JOB_NODELIST of a batch script or salloc shell),
 * empty outside one or when the list does not parse (hora run's host list then said so already).
 */
function allocationNodes(env: NodeJS.ProcessEnv): Set<string> {
  if (!env.SLURM_JOB_ID?.trim()) return new Set();
  try {
    return new Set(slurmHostlist(env, env.SLURM_JOB_NODELIST?.trim() ? 'SLURM_JOB_NODELIST' : 'SLURM_NODELIST') ?? []);
  } catch {
    return new Set();
  }
}

/**
 * Workers on this machine through LocalSpawner; on a remote host that is a node of the Slurm allocation
 * this runs in, with srun (as mpirun does there): ssh into compute nodes is often refused (pam_slurm_adopt)
 * or not set up, and a step is Slurm's to account for, to signal on scancel and to clean up at the end of
 * the job; on any other remote host, over ssh. The
 * rendezvous server binds to --iface if given; else, with a remote host in the
 * job, to the local address that routes to it (never loopback, which remote
 * workers cannot reach); else to 127.0.0.1.
 */
export class HostSpawner implements Spawner {
  private readonly local = new LocalSpawner();
  private readonly ssh: SshSpawner;
  private readonly srun = new SshSpawner({ extraArgs: [] }, 'srun', 'srun');
  private readonly allocation = allocationNodes(process.env);

  constructor(
    ssh: SshOptions,
    private readonly iface: string | undefined,
    private readonly log: Logger,
    private readonly ifaceFrom: RunOptions['ifaceFrom'] = '--iface',
  ) {
    this.ssh = new SshSpawner(ssh);
  }

  async rendezvousBindAddress(hosts: HostSlots[]): Promise<RendezvousBinding> {
    const remote = hosts.filter((h) => h.remote);
    if (this.iface !== undefined) {
      const flag = this.ifaceFrom === 'HORA_IFACE' ? `HORA_IFACE=${this.iface}` : `--iface ${this.iface}`;
      const addr = resolveIface(this.iface);
      const warning = await ifaceSubnetWarning(this.iface, flag, remote.map((h) => h.host));
      if (warning !== undefined) this.log('WARN', warning);
      return { addr, source: this.ifaceFrom === 'HORA_IFACE' ? `HORA_IFACE=${this.iface} in the launcher's environment` : flag };
    }
    if (remote.length === 0) return this.local.rendezvousBindAddress();
    const reasons: string[] = [];
    for (const h of remote) {
      try {
        const addr = await localAddressToward(h.host);
        if (!isLoopback(addr)) return { addr, source: `the launcher's route toward ${h.host} (no --iface given)` };
        reasons.push(`${h.host}: routed over loopback (${addr})`);
      } catch (e) {
        reasons.push(`${h.host}: ${(e as Error).message}`);
      }
    }
    // ssh will report the bad host itself; bind where it has the best chance.
    const fallback = firstExternalIPv4();
    if (fallback === undefined) {
      throw new LaunchError(`no address of this machine reaches the remote hosts (${reasons.join('; ')}); name one with --iface`);
    }
    this.log('WARN', `no route to any remote host (${reasons.join('; ')}); binding the rendezvous server to ${fallback}`);
    return { addr: fallback, source: 'the launcher\'s first non-loopback address, as no route toward the hosts was found (no --iface given)' };
  }

  spawn(spec: WorkerSpec): WorkerHandle {
    if (!spec.remote) return this.local.spawn(spec);
    return this.allocation.has(hostPart(spec.host)) ? this.srun.spawn(spec) : this.ssh.spawn(spec);
  }
}
