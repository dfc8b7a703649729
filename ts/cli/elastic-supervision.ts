// The supervision of an elastic job (hora run --min-np): a worker lost inside hora.elastic.run does not end
// the job. The others re-form the world without it; its host is blacklisted; its slot gets a new worker,
// which joins at the ranks' next commit (refill). With --host-discovery-script the workers follow the
// script's list, polled every second (reconcileHosts). Workers the launcher itself stops (delisted, or
// evicted for not re-registering) never decide the job's status. supervise.ts starts and watches the
// workers and asks this file, for each failure, whether the job goes on.

import { Logger } from '../config';
import type { RendezvousServer } from '../control/server';
import { DiscoveredHost, discoverHosts, DiscoveryError, DISCOVERY_INTERVAL_MS } from './discovery';
import { isLocalHost } from './hosts';
import { elasticSpec } from './placement';
import type { ElasticOptions, RunOptions } from './run-args';
import type { HostSlots, WorkerHandle, WorkerSpec } from './spawn';

/** What the elastic supervision asks of the job's supervisor (supervise.ts). */
export interface WorkerPool {
  /** Workers started that have not exited. */
  readonly running: ReadonlySet<WorkerHandle>;
  /** The id the next worker started gets. */
  readonly nextWorkerId: number;
  /** The -H entry (or listed host) a worker was started on. */
  hostOf(w: WorkerHandle): string;
  /** The worker started with this id, if any. */
  worker(workerId: number): WorkerHandle | undefined;
  workerIdOf(w: WorkerHandle): number | undefined;
  /** The job is stopping, has failed, was interrupted, or its training finished: no new worker starts. */
  refusesNewWorkers(): boolean;
  startWorker(spec: Omit<WorkerSpec, 'command' | 'args'>): void;
  /** The job waited too long below --min-np: it fails. */
  timeOut(message: string): void;
}

/** What the elastic supervision knew of a worker the launcher itself stopped, taken as the worker exits. */
export interface StoppedWorker {
  /** Stopped because the discovery script no longer lists its host. */
  wasDelisted: boolean;
  /** Why the launcher left it out, if it did. */
  stoppedBecause: string | undefined;
}

/** A worker that did not exit cleanly, as supervise.ts describes it. */
export interface FailedWorker {
  workerId: number;
  spec: Omit<WorkerSpec, 'command' | 'args'>;
  /** "worker 3 exited with code 1" */
  what: string;
  /** "exited with code 1", or what the spawner says went wrong. */
  description: string;
}

export class ElasticSupervisor {
  /** Where workers may be placed: the -H entries, or the discovery script's last good answer. */
  private hostList: HostSlots[];
  private readonly blacklist = new Set<string>();
  /** Workers stopped because the discovery script no longer lists their host (not a fault of the host). */
  private readonly delisted = new Set<WorkerHandle>();
  /**
   * Workers the launcher itself left out and stopped, with why: how such a worker ends says how it was
   * stopped, not how the job went, so it never decides the exit code.
   */
  private readonly leftOut = new Map<WorkerHandle, string>();
  /** Every worker that ended outside the world that went on, with why, for the last line. */
  private readonly notInLastWorld: string[] = [];
  private readonly discovery: string | undefined;
  private refillsLeft: number;
  private lostWorkers = 0;
  private discoveryTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly opts: RunOptions,
    private readonly elastic: ElasticOptions,
    private readonly server: RendezvousServer,
    private readonly pool: WorkerPool,
    private readonly baseHostId: string,
    private readonly log: Logger,
  ) {
    this.hostList = opts.hosts;
    this.discovery = elastic.discoveryScript;
    this.refillsLeft = 2 * elastic.maxNp;
  }

  /** Polls the discovery script (if any) and follows the rendezvous server's evictions, time-out and worlds. */
  start(): void {
    if (this.discovery !== undefined) this.pollDiscovery(this.discovery);
    this.watchServer();
  }

  stop(): void {
    if (this.discoveryTimer) clearInterval(this.discoveryTimer);
  }

  /** Called as every worker exits, cleanly or not. */
  noteExit(w: WorkerHandle): StoppedWorker {
    return { wasDelisted: this.delisted.delete(w), stoppedBecause: this.leftOut.get(w) };
  }

  /** Whether the job goes on after this failure (true), or stops as a whole (false). */
  absorbsFailure(failed: FailedWorker, { wasDelisted, stoppedBecause }: StoppedWorker): boolean {
    const { workerId, spec, what, description } = failed;
    const membership = this.server.elastic;
    const entered = membership?.hasEntered(workerId) === true;
    // A worker started after the job began (a refill or a discovered slot) that fails before it joins,
    // or one stopped because its host left the discovery script's list, costs the job nothing.
    const late = (workerId >= this.opts.np || wasDelisted) && !entered;
    if (membership && (entered || late || stoppedBecause !== undefined) && !membership.isFinishing) {
      // A worker lost inside hora.elastic.run: the others re-form the world without it.
      if (entered) this.lostWorkers++;
      const why = late ? ' before it joined' : '';
      // One the launcher left out was announced then, before the world re-formed without it.
      if (stoppedBecause !== undefined) this.log('INFO', `${what} (left out: ${stoppedBecause})`);
      else {
        process.stderr.write(`hora run: ${what}${why}; the job goes on without it\n`);
        this.notInLastWorld.push(`${what}${why}`);
      }
      membership.workerExited(workerId, description);
      this.afterLoss(workerId, spec, wasDelisted, entered);
      return true;
    }
    // The training has finished in a world without this worker: how it ended changes nothing.
    const outsideLastWorld = membership !== undefined && membership.isFinishing && !membership.inWorld(workerId);
    if (stoppedBecause !== undefined || outsideLastWorld) {
      this.log('INFO', `${what} (${stoppedBecause !== undefined ? `left out: ${stoppedBecause}` : 'not in the world that finished'}); it does not decide the job's status`);
      if (stoppedBecause === undefined) this.notInLastWorld.push(what);
      return true;
    }
    return false;
  }

  /** 1 when workers were lost and no training function returned; else 0, naming the workers left out on the way. */
  exitStatus(): number {
    if (this.lostWorkers > 0 && !this.server.elastic?.isFinishing) {
      // Every worker ended, some of them lost, and no training function returned: the training did not finish.
      process.stderr.write(`hora run: the job ended before any worker's training function returned (${this.lostWorkers} worker(s) lost)\n`);
      return 1;
    }
    if (this.notInLastWorld.length > 0) {
      process.stderr.write(`hora run: the training finished in a world of ${this.server.elastic?.worldSize ?? '?'}; left out on the way: ${this.notInLastWorld.join('; ')}\n`);
    }
    return 0;
  }

  /** After a loss: blacklist the host where the worker failed, then fill the slots again. */
  private afterLoss(workerId: number, spec: Omit<WorkerSpec, 'command' | 'args'>, wasDelisted: boolean, entered: boolean): void {
    const h = this.hostList.find((x) => x.host === spec.host) ?? { host: spec.host, slots: 1, remote: spec.remote };
    if (wasDelisted) {
      // Its host left the discovery script's list: nothing to blacklist or refill.
    } else if (this.blacklistable(h) && !this.blacklist.has(h.host)) {
      this.blacklist.add(h.host);
      process.stderr.write(`hora run: host ${h.host} is blacklisted after worker ${workerId}'s failure: no new worker starts there\n`);
    }
    if (this.discovery !== undefined) this.reconcileHosts();
    else if (entered) this.refill(workerId, spec);
  }

  /**
   * A host is blacklisted after a failure there, unless it is the launcher's own machine in a -H job
   * (a crashed process says nothing about the machine, and its slot is refilled in place).
   */
  private blacklistable(h: HostSlots): boolean {
    return this.discovery !== undefined || h.remote || this.opts.simulateHosts;
  }

  private runningOn(host: string): number {
    return [...this.pool.running].filter((w) => this.pool.hostOf(w) === host).length;
  }

  private freeHost(): HostSlots | undefined {
    return this.hostList.find((h) => !this.blacklist.has(h.host) && this.runningOn(h.host) < h.slots);
  }

  /**
   * The slot of a lost worker gets a new worker (it joins at the ranks' next commit): on the same host,
   * or, when that host is blacklisted, on another with a free slot.
   */
  private refill(lostId: number, spec: Omit<WorkerSpec, 'command' | 'args'>): void {
    const { pool, elastic, opts } = this;
    if (pool.running.size >= opts.np || pool.running.size >= elastic.maxNp || pool.refusesNewWorkers()) return;
    if (this.refillsLeft <= 0) {
      this.log('WARN', `not refilling worker ${lostId}'s slot: ${2 * elastic.maxNp} workers were already started in place of lost ones`);
      return;
    }
    const other = this.blacklist.has(spec.host) ? this.freeHost() : undefined;
    if (this.blacklist.has(spec.host) && other === undefined) {
      process.stderr.write(`hora run: no free slot on a host that is not blacklisted; the job goes on with ${pool.running.size} worker(s)\n`);
      return;
    }
    this.refillsLeft--;
    const below = pool.running.size < elastic.minNp ? `, fewer than --min-np ${elastic.minNp}` : '';
    const where = other ? ` on ${other.host}` : '';
    process.stderr.write(`hora run: ${pool.running.size} worker(s) left${below}: starting worker ${pool.nextWorkerId} in the slot of worker ${lostId}${where}\n`);
    pool.startWorker(other ? elasticSpec(opts, other, this.baseHostId, pool.running.size) : spec);
  }

  /**
   * Discovery jobs: workers follow the script's list. A host that leaves it has its workers stopped (the
   * others roll back to their last commit, as for any loss); free slots on listed hosts that are not
   * blacklisted get new workers, up to --max-np, and these join at the ranks' next commit.
   */
  private reconcileHosts(): void {
    const { pool, delisted } = this;
    if (pool.refusesNewWorkers()) return;
    // The newest workers go first: the oldest stay, and with them rank 0.
    for (const w of [...pool.running].reverse()) {
      const host = pool.hostOf(w);
      const listed = this.hostList.find((h) => h.host === host);
      if (delisted.has(w) || (listed && this.runningOn(host) - [...delisted].filter((d) => pool.hostOf(d) === host).length <= listed.slots)) continue;
      delisted.add(w);
      const why = listed ? `now lists ${listed.slots} slot(s) on ${host}` : `no longer lists ${host}`;
      this.leftOut.set(w, `the discovery script ${why}`);
      this.notInLastWorld.push(`worker ${pool.workerIdOf(w)} (the discovery script ${why}; stopped)`);
      process.stderr.write(`hora run: the discovery script ${why}: stopping a worker there\n`);
      w.kill('SIGTERM');
    }
    const usable = this.hostList.filter((h) => !this.blacklist.has(h.host)).reduce((n, h) => n + h.slots, 0);
    const target = Math.min(this.elastic.maxNp, usable);
    while (pool.running.size - delisted.size < target) {
      const h = this.freeHost();
      if (h === undefined) break;
      process.stderr.write(`hora run: starting worker ${pool.nextWorkerId} on ${h.host} (a free slot the discovery script lists)\n`);
      pool.startWorker(elasticSpec(this.opts, h, this.baseHostId, pool.running.size));
    }
  }

  /** Runs the discovery script every second and follows its list; a failed run keeps the hosts it listed last. */
  private pollDiscovery(discovery: string): void {
    let failures = 0;
    let busy = false;
    const poll = async () => {
      if (busy || this.pool.refusesNewWorkers()) return;
      busy = true;
      try {
        const found: DiscoveredHost[] = await discoverHosts(discovery);
        if (failures > 0) process.stderr.write(`hora run: --host-discovery-script ${discovery} works again after ${failures} failed run(s)\n`);
        failures = 0;
        this.takeHostList(found.map((h) => ({ ...h, remote: !isLocalHost(h.host) })));
      } catch (e) {
        failures++;
        // Warn at the first failure and then every 30th, with what the script said; the job keeps its hosts.
        if (failures === 1 || failures % 30 === 0) {
          const text = e instanceof DiscoveryError ? e.message : String(e);
          process.stderr.write(`hora run: ${text} (failed ${failures} time(s) in a row; retrying every ${DISCOVERY_INTERVAL_MS / 1000} s, keeping the hosts it listed last)\n`);
        }
      } finally {
        busy = false;
      }
    };
    this.discoveryTimer = setInterval(() => void poll(), DISCOVERY_INTERVAL_MS);
  }

  /** The discovery script's new list: blacklisted hosts that left it are forgiven, and the workers follow it. */
  private takeHostList(next: HostSlots[]): void {
    const { blacklist } = this;
    // A blacklisted host that leaves the list and comes back is taken as a new machine (a replaced
    // instance, a pod restarted under the same name).
    for (const host of blacklist) {
      if (next.some((h) => h.host === host)) continue;
      blacklist.delete(host);
      process.stderr.write(`hora run: blacklisted host ${host} left the discovery script's list; if it comes back it gets workers again\n`);
    }
    for (const h of next) {
      const before = this.hostList.find((x) => x.host === h.host);
      if (!before) this.log('INFO', `the discovery script lists a new host ${h.host} (${h.slots} slot(s))${blacklist.has(h.host) ? ', blacklisted' : ''}`);
    }
    this.hostList = next;
    this.reconcileHosts();
  }

  /** The rendezvous server's elastic events: a worker evicted, the job timed out, a world formed. */
  private watchServer(): void {
    const { server, elastic } = this;
    server.on('evict', (workerId: number, _pid: number, reason: string) => {
      process.stderr.write(`hora run: ${reason}: killing it\n`);
      const w = this.pool.worker(workerId);
      if (w === undefined) return;
      this.leftOut.set(w, `did not re-register within ${elastic.settleS} s (HORA_ELASTIC_SETTLE_S)`);
      this.notInLastWorld.push(`worker ${workerId} (did not re-register within ${elastic.settleS} s; killed)`);
      w.kill('SIGKILL');
    });
    server.on('elastic-timeout', (message: string) => this.pool.timeOut(message));
    server.on('formed', (generation: number, size: number) => {
      if (generation > 0) process.stderr.write(`hora run: the world re-formed with ${size} rank(s)\n`);
    });
  }
}
