// The cost model that chooses the allreduce algorithm across hosts: each algorithm as a list of phases
// (how many exchanges, what fraction of the message each moves, how many flows leave one host at once),
// priced with the link costs of the Topology (transport/topology.h). Every rank holds the same Topology,
// so every rank predicts the same times and makes the same choice.
#pragma once

#include <cstddef>
#include <vector>

#include "transport/topology.h"

namespace hora {

// How one phase of an algorithm uses the links: the phase runs `steps` exchanges, each moving
// `fraction` of the message per rank; `crossFlows` is the most connections leaving one host at once
// during a step (they share its network link), 0 when every exchange stays on a host.
struct PhaseShape {
  int steps = 0;
  double fraction = 0;
  int crossFlows = 0;
  bool hasLocal = false;  // some exchange stays on a host
};

// The phases of the hierarchical allreduce on this placement; empty when the hosts are uneven (it cannot
// run) or there is one rank.
std::vector<PhaseShape> hierarchicalPhases(const Topology& t);

// Predicted seconds of one allreduce of `bytes` (count elements) with each algorithm.
struct CostEstimate {
  double ring = 0;
  double recursiveDoubling = 0;
  double hierarchical = -1;  // < 0: not applicable here
  double multiDim = -1;
};
CostEstimate estimateAllreduce(const Topology& t, size_t bytes);
double estimateGridAllreduce(const Topology& t, const std::vector<int>& dims, size_t bytes);

}  // namespace hora
