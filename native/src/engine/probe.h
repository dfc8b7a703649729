// The link probe: measures alpha and beta of the two link classes (same host, across hosts) at connect
// time, for the cost model that chooses the allreduce algorithm (algorithms/cost.h).
#pragma once

#include "transport/context.h"
#include "transport/topology.h"

namespace hora {

// A link class's cost set by the user (HORA_COST_LOCAL / HORA_COST_CROSS) instead of measured.
struct LinkOverride {
  bool set = false;
  LinkCost cost;
};

// Completes ctx's topology: the grid, and -- with more than one host -- the link costs. Rank 0 measures
// (an 8-byte ping-pong for alpha, 1 and 4 MiB transfers for beta, against one peer on its own host and one on
// the next host; well under a second on any real link) unless overridden there, and broadcasts the result,
// so every rank holds the same figures and makes the same choices.
Status completeTopology(Context& ctx, const std::vector<int>& grid, const LinkOverride& local,
                        const LinkOverride& cross);

}  // namespace hora
