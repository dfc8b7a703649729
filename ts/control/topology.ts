// The topology of a job: where each rank sits (local rank among the ranks of its host, cross rank among
// the hosts), computed from the host ids the workers registered with. The rendezvous server (server.ts)
// sends it in the PeerTable; elastic membership (membership.ts) computes it again at each re-forming.
// messages.ts checks a received PeerTable against the same rule.

import type { Peer, Register } from './messages';

/** Registration fields needed to place a rank in the topology. */
export type TopologyInput = Pick<Register, 'hostId' | 'dataAddr' | 'dataPort' | 'hostname' | 'pid'>;

/**
 * Peers for registrations indexed by rank. local_rank orders the ranks that
 * share a host id; cross_rank orders the hosts by their lowest rank.
 */
export function computeTopology(byRank: TopologyInput[]): Peer[] {
  const hostIndex = new Map<string, number>();
  const hostCount = new Map<string, number>();
  for (const r of byRank) {
    if (!hostIndex.has(r.hostId)) hostIndex.set(r.hostId, hostIndex.size);
    hostCount.set(r.hostId, (hostCount.get(r.hostId) ?? 0) + 1);
  }
  const seen = new Map<string, number>();
  return byRank.map((r, rank) => {
    const localRank = seen.get(r.hostId) ?? 0;
    seen.set(r.hostId, localRank + 1);
    return {
      rank,
      hostId: r.hostId,
      dataAddr: r.dataAddr,
      dataPort: r.dataPort,
      localRank,
      localSize: hostCount.get(r.hostId) as number,
      crossRank: hostIndex.get(r.hostId) as number,
      crossSize: hostIndex.size,
      hostname: r.hostname,
      pid: r.pid,
    };
  });
}
