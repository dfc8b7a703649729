#include "algorithms/blocks.h"
#include "algorithms/collectives.h"

namespace hora {

// Ring allgather with per-rank block sizes.
//
// How it works. Every rank's own block is already at its place in the output. In step s (0 <= s < p-1)
// each rank passes block (rank - s) to its right neighbour and receives block (rank - s - 1) from its
// left, straight into the output; after p-1 steps every block has visited every rank.
Status allgather(Context& ctx, const AllgatherOptions& o) {
  const int p = ctx.size(), r = ctx.rank();
  if (p == 1) return Status::ok();
  std::vector<size_t> offset(p + 1, 0);
  for (int i = 0; i < p; ++i) offset[i + 1] = offset[i] + o.bytesPerRank[i];
  Pair* right = ctx.pair(wrapRank(r + 1, p));
  Pair* left = ctx.pair(wrapRank(r - 1, p));
  for (int s = 0; s < p - 1; ++s) {
    int sendBlock = wrapRank(r - s, p), recvBlock = wrapRank(r - s - 1, p);
    SendOp send{right, o.output + offset[sendBlock], o.bytesPerRank[sendBlock]};
    RecvOp recv{left, o.output + offset[recvBlock], o.bytesPerRank[recvBlock]};
    HORA_RETURN_IF_ERROR(ctx.progress(&send, 1, &recv, 1));
  }
  return Status::ok();
}

}  // namespace hora
