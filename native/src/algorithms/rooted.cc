#include <cstring>
#include <vector>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"

namespace hora {
namespace {

// A non-root rank's working copy of its input (reduce never writes the caller's input). Not
// threadScratch(): the allreduce that reduce() runs uses that for its own exchanges.
uint8_t* reduceScratch(size_t bytes) {
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}

// Every rank's block of bytesPerRank[i] bytes at output + offset of block i, sent straight to the root,
// which receives them all at once (one receive per peer, progressing together); a rank with nothing to
// send sends nothing. The root's own block is already in place. The root's link carries (p-1)/p of the
// total, the least any gather can; the other links carry their own block once.
Status gatherBlocks(Context& ctx, int root, uint8_t* output, const uint8_t* mine, const std::vector<size_t>& bytesPerRank) {
  const int p = ctx.size(), r = ctx.rank();
  if (r != root) {
    if (bytesPerRank[r] == 0) return Status::ok();
    SendOp send{ctx.pair(root), mine, bytesPerRank[r]};
    return ctx.progress(&send, 1, nullptr, 0);
  }
  std::vector<RecvOp> recvs;
  recvs.reserve(p);
  size_t offset = 0;
  for (int i = 0; i < p; ++i) {
    if (i != r && bytesPerRank[i] > 0) recvs.push_back(RecvOp{ctx.pair(i), output + offset, bytesPerRank[i]});
    offset += bytesPerRank[i];
  }
  if (recvs.empty()) return Status::ok();
  return ctx.progress(nullptr, 0, recvs.data(), static_cast<int>(recvs.size()));
}

}  // namespace

Algorithm chooseReduceAlgorithm(const Context& ctx, const ReduceOptions& o) {
  if (o.algorithm == Algorithm::kRing || o.algorithm == Algorithm::kRecursiveDoubling) return o.algorithm;
  // As the allreduce on one host: small buffers are latency, and the ring needs an element per block.
  const size_t bytes = o.count * dtypeSize(o.dtype);
  if (bytes <= kSmallAllreduceBytes || o.count < static_cast<size_t>(ctx.size())) return Algorithm::kRecursiveDoubling;
  return Algorithm::kRing;
}

// Reduce to one root.
//
// How it works. Small buffers: the recursive-doubling allreduce on a copy, whose result the root keeps;
// lg(p) alpha, the least latency, and the same bits as that allreduce. Large buffers: the ring
// reduce-scatter (ring.h) leaves rank i with block i reduced (scaled and, for avg, divided), and every
// rank then sends its block straight to the root (gatherBlocks). Each link carries (p-1)/p of the buffer in
// the reduce-scatter and the root's link (p-1)/p again: 2(p-1)/p n beta, as the ring allreduce, and the
// root ends with the bits that allreduce gives every rank. The root works in its output, the others in a
// scratch copy, so no rank's input is written.
Status reduce(Context& ctx, const ReduceOptions& o) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t elem = dtypeSize(o.dtype), bytes = o.count * elem;
  uint8_t* work = r == o.root ? o.output : reduceScratch(bytes);
  if (bytes > 0 && work != o.input) memcpy(work, o.input, bytes);
  if (chooseReduceAlgorithm(ctx, o) == Algorithm::kRecursiveDoubling) {
    AllreduceOptions a;
    a.data = work;
    a.count = o.count;
    a.dtype = o.dtype;
    a.op = o.op;
    a.algorithm = Algorithm::kRecursiveDoubling;
    a.scaling = o.scaling;
    return allreduce(ctx, a);
  }
  ReduceScatterOptions rs;
  rs.data = work;
  rs.count = o.count;
  rs.dtype = o.dtype;
  rs.op = o.op;
  rs.scaling = o.scaling;
  HORA_RETURN_IF_ERROR(reduceScatter(ctx, rs));
  std::vector<size_t> bytesPerRank(p);
  for (int i = 0; i < p; ++i) bytesPerRank[i] = blockCount(o.count, p, i) * elem;
  return gatherBlocks(ctx, o.root, work, work + blockStart(o.count, p, r) * elem, bytesPerRank);
}

// Gather to one root: every rank sends its block straight to the root (gatherBlocks), which copies its own
// into place. p-1 messages arrive at the root together; with the counts known (allgatherCounts) there is
// nothing else to exchange.
Status gather(Context& ctx, const GatherOptions& o) {
  const int r = ctx.rank();
  if (r == o.root) {
    size_t before = 0;
    for (int i = 0; i < r; ++i) before += o.bytesPerRank[i];
    if (o.bytesPerRank[r] > 0) memcpy(o.output + before, o.input, o.bytesPerRank[r]);
  }
  if (ctx.size() == 1) return Status::ok();
  return gatherBlocks(ctx, o.root, o.output, o.input, o.bytesPerRank);
}

}  // namespace hora
