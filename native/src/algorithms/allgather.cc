#include "algorithms/blocks.h"
#include "algorithms/collectives.h"

#include <string>

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

Status allgatherCounts(Context& ctx, uint64_t mine, size_t elementBytes, std::vector<uint64_t>* counts, uint64_t* total) {
  const int p = ctx.size();
  counts->assign(p, 0);
  (*counts)[ctx.rank()] = mine;
  AllgatherOptions o;
  o.output = reinterpret_cast<uint8_t*>(counts->data());
  o.bytesPerRank.assign(p, sizeof(uint64_t));
  HORA_RETURN_IF_ERROR(allgather(ctx, o));
  // Counts come from the network: bound them before anyone allocates.
  *total = 0;
  for (int i = 0; i < p; ++i) {
    if ((*counts)[i] > (uint64_t(1) << 40) / elementBytes) {
      return Status(Code::kInternal, "rank " + std::to_string(i) + " announced an implausible allgather count " +
                                         std::to_string((*counts)[i]), i);
    }
    *total += (*counts)[i];
  }
  return Status::ok();
}

}  // namespace hora
