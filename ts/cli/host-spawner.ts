// The spawner `hora run` uses: each worker through LocalSpawner (spawn.ts) or SshSpawner (ssh.ts) as its
// host is this machine or not, and the rendezvous server bound where every worker can reach it.

import { firstExternalIPv4, isLoopback, Logger, resolveIface } from '../config';
import { ifaceSubnetWarning } from './iface-check';
import { localAddressToward, SshOptions, SshSpawner } from './ssh';
import { HostSlots, LaunchError, LocalSpawner, RendezvousBinding, Spawner, WorkerHandle, WorkerSpec } from './spawn';
import type { RunOptions } from './run-args';

/**
 * Workers on this machine through LocalSpawner, on remote hosts over ssh. The
 * rendezvous server binds to --iface if given; else, with a remote host in the
 * job, to the local address that routes to it (never loopback, which remote
 * workers cannot reach); else to 127.0.0.1.
 */
export class HostSpawner implements Spawner {
  private readonly local = new LocalSpawner();
  private readonly ssh: SshSpawner;

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
    return spec.remote ? this.ssh.spawn(spec) : this.local.spawn(spec);
  }
}
