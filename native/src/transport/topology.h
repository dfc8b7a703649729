// Topology: where the ranks are (which host), the grid the multi-dimensional allreduce walks, and the
// alpha-beta cost of the two link classes (same host, across hosts). The cost model that chooses the
// allreduce algorithm from them is algorithms/cost.h.
//
// Every rank holds an identical Topology: the hosts come from the rendezvous's peer table, the grid from
// HORA_TOPOLOGY (checked against the world size at init), and the link costs are measured by rank 0 at
// connect time and broadcast (engine/probe.cc). So every rank computes the same choice for the same
// message, which the agreement then relies on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hora {

// Cost of one message of n bytes over a link: alpha + n * beta seconds.
struct LinkCost {
  double alpha = 0;  // seconds per message
  double beta = 0;   // seconds per byte
};

struct Topology {
  int size = 1;
  int numHosts = 1;
  std::vector<int> hostOf;       // host index of each rank; hosts numbered by their lowest rank
  std::vector<int> localRankOf;  // index of each rank among the ranks of its host, in rank order
  std::vector<int> hostSizes;    // ranks per host
  // Ranks sorted by (host, local rank): position i of the grid is rank order[i]. With the launcher's
  // placement (hosts filled in turn) this is the identity.
  std::vector<int> order;
  std::vector<int> positionOf;   // inverse of order
  std::vector<int> grid;         // HORA_TOPOLOGY dimensions, fastest first; empty when not given
  LinkCost local;                // same host (shared memory unless HORA_TRANSPORT=tcp)
  LinkCost cross;                // across hosts
  bool measured = false;         // link costs come from the probe or an override (numHosts > 1)

  // Builds the host part from each rank's host id.
  static Topology fromHostIds(const std::vector<std::string>& hostIds);

  // Every host has the same number of ranks (the hierarchical allreduce needs it).
  bool uniform() const;
  int ranksPerHost() const { return hostSizes.empty() ? 1 : hostSizes[0]; }
  // The two-level grid of the hierarchical allreduce: ranks per host x hosts.
  std::vector<int> hierarchicalGrid() const { return {ranksPerHost(), numHosts}; }
  // Why `grid` cannot be walked on this placement, or empty.
  std::string gridProblem(const std::vector<int>& dims) const;

  // True the first time a choice is made for a message of this power-of-two size (for logging).
  bool noteChoice(size_t bytes) const;
  mutable std::vector<bool> choiceNoted;
};

// "2 x 3 x 4"
std::string describeGrid(const std::vector<int>& dims);

}  // namespace hora
