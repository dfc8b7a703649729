#include <algorithm>
#include <string>
#include <vector>

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

// Pipelining. A large buffer is cut into segments that go through the same steps one tick apart: in one
// tick, segment s takes its step j while segment s+1 takes step j-1, all in one progress() call. So while
// one segment crosses the slow link between hosts, the next is reduced over shared memory, and the
// in-host phases hide behind the network instead of adding to it. Each segment's steps are exactly those
// of the unsegmented algorithm on its sub-range; every rank runs the same schedule, so transfers on one
// connection are queued and matched in the same order on both ends.
namespace {

constexpr size_t kSegmentBytes = size_t(8) << 20;
constexpr int kMaxSegments = 8;

struct Step {
  const Ring* ring;
  bool reduce;          // reduce-scatter step (combine what arrives) or allgather step (copy)
  size_t sendOffset, sendCount, recvOffset, recvCount;  // elements
  // Scaled (prescaleFactor): what arrives is a raw input (the first step of the first dimension) and what
  // is here is one (every step of the first dimension); the steps after it combine partial results only.
  bool arrivesRaw = false, hereRaw = false;
};

struct SegmentPlan {
  std::vector<Step> steps;
  size_t reduceSteps = 0;          // steps before the allgathers
  size_t ownOffset = 0, ownCount = 0;  // the block this rank holds fully reduced after them
};

SegmentPlan planSegment(const std::vector<Ring>& rings, size_t offset, size_t count) {
  SegmentPlan plan;
  struct Level {
    const Ring* ring;
    size_t offset, count;
  };
  std::vector<Level> levels;
  for (const Ring& ring : rings) {
    const int d = ring.size, i = ring.me;
    levels.push_back({&ring, offset, count});
    const bool first = levels.size() == 1;
    for (int s = 0; s < d - 1; ++s) {
      const int sendBlock = wrapRank(i - s - 1, d), recvBlock = wrapRank(i - s - 2, d);
      plan.steps.push_back({&ring, true, offset + blockStart(count, d, sendBlock), blockCount(count, d, sendBlock),
                            offset + blockStart(count, d, recvBlock), blockCount(count, d, recvBlock), first && s == 0,
                            first});
    }
    offset += blockStart(count, d, i);
    count = blockCount(count, d, i);
  }
  plan.reduceSteps = plan.steps.size();
  plan.ownOffset = offset;
  plan.ownCount = count;
  for (auto it = levels.rbegin(); it != levels.rend(); ++it) {
    const int d = it->ring->size, i = it->ring->me;
    for (int s = 0; s < d - 1; ++s) {
      const int sendBlock = wrapRank(i - s, d), recvBlock = wrapRank(i - s - 1, d);
      plan.steps.push_back({it->ring, false, it->offset + blockStart(it->count, d, sendBlock),
                            blockCount(it->count, d, sendBlock), it->offset + blockStart(it->count, d, recvBlock),
                            blockCount(it->count, d, recvBlock)});
    }
  }
  return plan;
}

}  // namespace

Status gridAllreduce(Context& ctx, const std::vector<int>& dims, const AllreduceOptions& o) {
  const Topology& t = ctx.topology();
  const size_t elem = dtypeSize(o.dtype);
  std::vector<Ring> rings;
  int stride = 1;
  for (int d : dims) {
    if (d > 1) rings.push_back(ringAlong(ctx, t, stride, d));
    stride *= d;
  }
  if (rings.empty()) return Status::ok();
  // One level has nothing to overlap with; otherwise segments of at least kSegmentBytes.
  const size_t bytes = o.count * elem;
  const int segments = rings.size() < 2 ? 1 : static_cast<int>(std::min<size_t>(kMaxSegments, std::max<size_t>(1, bytes / kSegmentBytes)));
  std::vector<SegmentPlan> plans;
  for (int s = 0; s < segments; ++s) {
    plans.push_back(planSegment(rings, blockStart(o.count, segments, s), blockCount(o.count, segments, s)));
  }
  const int steps = static_cast<int>(plans[0].steps.size());
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  // Scaled: the step of each receive of a tick (reserved, so the receives' pointers stay put). The last
  // reduce step completes this rank's own block and finishes it (divided for avg, times post).
  const bool scaled = o.scaling.active();
  std::vector<ScaledStep> scaledSteps;
  scaledSteps.reserve(segments);
  for (int tick = 0; tick < steps + segments - 1; ++tick) {
    sends.clear();
    recvs.clear();
    scaledSteps.clear();
    for (int s = 0; s < segments; ++s) {
      const int j = tick - s;
      if (j < 0 || j >= steps) continue;
      const SegmentPlan& plan = plans[s];
      // Between its reduce-scatters and its allgathers a segment's own block is final: divide it for avg.
      if (static_cast<size_t>(j) == plan.reduceSteps && o.op == ReduceOp::kAvg && !scaled) {
        scaleForAvg(o.dtype, o.data + plan.ownOffset * elem, plan.ownCount, ctx.size());
      }
      const Step& st = plan.steps[j];
      sends.push_back({st.ring->right, o.data + st.sendOffset * elem, st.sendCount * elem});
      recvs.push_back({st.ring->left, o.data + st.recvOffset * elem, st.recvCount * elem, 0, st.reduce, o.op, o.dtype});
      if (scaled && st.reduce) {
        const bool last = static_cast<size_t>(j) + 1 == plan.reduceSteps;
        scaledSteps.push_back(scaledStep(o.scaling, st.hereRaw, st.arrivesRaw, last, o.op, ctx.size()));
        recvs.back().scaled = &scaledSteps.back();
      }
    }
    HORA_RETURN_IF_ERROR(ctx.progress(sends.data(), static_cast<int>(sends.size()), recvs.data(), static_cast<int>(recvs.size())));
  }
  return Status::ok();
}

}  // namespace hora
