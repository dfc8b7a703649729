// Ring steps of the flat ring allreduce and reduce-scatter (the multi-dimensional allreduce plans the same
// steps per segment in multidim.cc, to run several segments in one progress() call).
//
// A ring is an ordered set of ranks; each member sends to its right neighbour and receives from its left.
// The buffer is cut into one block per member (blocks.h). Each step's send and receive progress together
// and the receive is reduced chunk by chunk as it arrives (a TCP read-ahead buffer or a shared-memory slot
// at a time), so reducing one chunk overlaps the transfer of the next.
#pragma once

#include "common/types.h"
#include "reduce/reduce.h"
#include "transport/context.h"

namespace hora {

struct Ring {
  Pair* right;
  Pair* left;
  int size;  // members
  int me;    // this rank's index in the ring
};

// The whole world in rank order.
Ring worldRing(const Context& ctx);

// Reduce-scatter of [data, data + count): after size-1 steps member i holds block i reduced over the ring
// (for kAvg still to be scaled). Each link carries (size-1)/size of the buffer. With an active scaling
// (prescaleFactor, postscaleFactor) the steps scale as they combine, and the last one also finishes block
// i: divided by the ring's size for kAvg and multiplied by post.
Status ringReduceScatter(Context& ctx, const Ring& ring, uint8_t* data, size_t count, DType dtype, ReduceOp op,
                         const Scaling& scaling = Scaling());

// Allgather of the blocks of [data, data + count): member i holds block i; afterwards every member holds all.
Status ringAllgather(Context& ctx, const Ring& ring, uint8_t* data, size_t count, DType dtype);

}  // namespace hora
