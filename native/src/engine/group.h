// Group: a process group (hora.newGroup), a communicator of its own over the world's connections.
//
// A group has its own ranks (positions in `members`), its own sequence of collectives and its own
// agreement, so a mismatch inside it fails its members only; its collectives run on the world's
// communication thread, in the order this rank submitted them among the world's, through a view of the
// world's Context (transport/context.h) that maps its ranks onto the world's pairs. So a group costs no
// connection and no shared memory of its own, and collectives of disjoint groups run at the same time on
// their different ranks.
//
// Why that is safe on shared streams: a group's collective only moves bytes between its members, over
// the same per-pair streams as the world's collectives. Two ranks read those bytes in the order they
// were written as long as they run the collectives they both take part in (world's and groups') in the
// same relative order, which the API asks of the program (as MPI does); a program that breaks it gets
// ERR_MISMATCH from the agreement (whose proposals name the group) or, at worst, a timeout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/context.h"

namespace hora {

struct Group {
  uint32_t id = 0;            // 0: the world; groups count from 1 in creation order, the same on every rank
  std::vector<int> members;   // world ranks, by group rank
  Context* ctx = nullptr;     // the world's own context, or view
  std::unique_ptr<Context> view;
  uint64_t seq = 0;           // this group's next collective, for the agreement
  std::string label;          // "group 1 (ranks 0, 2)"; empty for the world
};

}  // namespace hora
