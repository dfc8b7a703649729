#include <string>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"
#include "algorithms/ring.h"
#include "reduce/reduce.h"

namespace hora {

// Multi-dimensional allreduce (IBM DDL's form), and the hierarchical allreduce as its two-level case.
//
// How it works. The ranks are laid out on a grid d0 x d1 x ... (fastest dimension first; grid position i
// is rank topology.order[i], so dimension 0 runs along the ranks of one host). Along dimension 0, the d0
// ranks that differ only in that coordinate reduce-scatter the whole buffer around a ring: each ends
// with the reduction of one block of 1/d0 of it. Along dimension 1 the rings reduce-scatter that block
// further, and so on: after the last dimension each rank holds one fully reduced 1/p of the buffer.
// Allgathers along the dimensions in reverse order bring every block back to every rank.
//
// With the grid (ranks per host) x (hosts) this is the hierarchical allreduce: a reduce-scatter inside
// each host over shared memory, then local-size independent allreduces of 1/local-size of the buffer
// across the hosts -- one per local rank, so every host's link carries local-size connections at once --
// then an allgather inside each host. Each host sends n/hosts * 2(hosts-1) bytes across its link instead
// of the flat ring's 2(p-1)/p n, which is where it wins when the links between hosts are the slow ones.
//
// Identical results on every rank: each element is reduced on exactly one rank, in ring order, and the
// allgathers only copy.
namespace {

// The ring of dimension `d` (of stride `stride` in grid positions) through this rank: the ranks that
// differ from it only in that coordinate.
Ring ringAlong(const Context& ctx, const Topology& t, int stride, int d) {
  const int pos = t.positionOf[ctx.rank()];
  const int coord = (pos / stride) % d;
  auto member = [&](int c) { return t.order[pos + (wrapRank(c, d) - coord) * stride]; };
  return {ctx.pair(member(coord + 1)), ctx.pair(member(coord - 1)), d, coord};
}

}  // namespace

Status gridAllreduce(Context& ctx, const std::vector<int>& dims, const AllreduceOptions& o) {
  const Topology& t = ctx.topology();
  const size_t elem = dtypeSize(o.dtype);
  struct Level {
    Ring ring;
    size_t offset;  // elements: the segment this level works on
    size_t count;
  };
  std::vector<Level> levels;
  size_t offset = 0, count = o.count;
  int stride = 1;
  for (int d : dims) {
    if (d > 1) {
      Ring ring = ringAlong(ctx, t, stride, d);
      levels.push_back({ring, offset, count});
      HORA_RETURN_IF_ERROR(ringReduceScatter(ctx, ring, o.data + offset * elem, count, o.dtype, o.op));
      offset += blockStart(count, d, ring.me);
      count = blockCount(count, d, ring.me);
    }
    stride *= d;
  }
  if (o.op == ReduceOp::kAvg) scaleForAvg(o.dtype, o.data + offset * elem, count, ctx.size());
  for (auto it = levels.rbegin(); it != levels.rend(); ++it) {
    HORA_RETURN_IF_ERROR(ringAllgather(ctx, it->ring, o.data + it->offset * elem, it->count, o.dtype));
  }
  return Status::ok();
}

}  // namespace hora
