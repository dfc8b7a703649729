#include "algorithms/blocks.h"
#include "algorithms/collectives.h"
#include "algorithms/recursive_doubling.h"
#include "reduce/reduce.h"

namespace hora {
namespace {

// Ring allreduce.
//
// How it works. The buffer is cut into one block per rank. Reduce-scatter: in step s (0 <= s < p-1) each
// rank sends block (rank - s) to its right neighbour and receives block (rank - s - 1) from its left,
// combining it into its own copy as the bytes arrive, so after p-1 steps rank r holds the complete
// reduction of block (r + 1). For avg that block is divided by p once, here. Allgather: p-1 more steps
// pass the finished blocks around the ring. Each link carries 2(p-1)/p of the buffer, the minimum.
//
// Overlap. A step's send and receive progress together, and the receive is reduced chunk by chunk (a TCP
// read-ahead buffer, or a shared-memory slot, at a time): while one chunk is being reduced, the next ones
// are already in flight in the kernel's socket buffers or the ring's other slots.
Status ringAllreduce(Context& ctx, const AllreduceOptions& o) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t elem = dtypeSize(o.dtype);
  Pair* right = ctx.pair(wrapRank(r + 1, p));
  Pair* left = ctx.pair(wrapRank(r - 1, p));
  auto bytesAt = [&](int block) { return o.data + blockStart(o.count, p, block) * elem; };
  auto bytesOf = [&](int block) { return blockCount(o.count, p, block) * elem; };

  for (int s = 0; s < p - 1; ++s) {
    int sendBlock = wrapRank(r - s, p), recvBlock = wrapRank(r - s - 1, p);
    SendOp send{right, bytesAt(sendBlock), bytesOf(sendBlock)};
    RecvOp recv{left, bytesAt(recvBlock), bytesOf(recvBlock), 0, true, o.op, o.dtype};
    HORA_RETURN_IF_ERROR(ctx.progress(&send, 1, &recv, 1));
  }
  int owned = wrapRank(r + 1, p);
  if (o.op == ReduceOp::kAvg) scaleForAvg(o.dtype, bytesAt(owned), blockCount(o.count, p, owned), p);
  for (int s = 0; s < p - 1; ++s) {
    int sendBlock = wrapRank(r + 1 - s, p), recvBlock = wrapRank(r - s, p);
    SendOp send{right, bytesAt(sendBlock), bytesOf(sendBlock)};
    RecvOp recv{left, bytesAt(recvBlock), bytesOf(recvBlock)};
    HORA_RETURN_IF_ERROR(ctx.progress(&send, 1, &recv, 1));
  }
  return Status::ok();
}

Status recursiveDoublingAllreduce(Context& ctx, const AllreduceOptions& o) {
  const size_t bytes = o.count * dtypeSize(o.dtype);
  uint8_t* scratch = threadScratch(bytes);
  HORA_RETURN_IF_ERROR(recursiveDoubling(ctx, o.data, bytes, scratch,
                                         [&](uint8_t* out, const uint8_t* lower, const uint8_t* higher) {
                                           reduceTwo(o.op, o.dtype, out, lower, higher, o.count);
                                         }));
  if (o.op == ReduceOp::kAvg) scaleForAvg(o.dtype, o.data, o.count, ctx.size());
  return Status::ok();
}

}  // namespace

const char* algorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
  }
  return "?";
}

Algorithm chooseAllreduceAlgorithm(const Context& ctx, const AllreduceOptions& o) {
  if (o.algorithm != Algorithm::kAuto) return o.algorithm;
  size_t bytes = o.count * dtypeSize(o.dtype);
  // The ring needs at least one element per block to pay off; tiny buffers are pure latency.
  if (bytes <= kSmallAllreduceBytes || o.count < static_cast<size_t>(ctx.size())) return Algorithm::kRecursiveDoubling;
  return Algorithm::kRing;
}

Status allreduce(Context& ctx, const AllreduceOptions& o) {
  if (ctx.size() == 1 || o.count == 0) return Status::ok();
  switch (chooseAllreduceAlgorithm(ctx, o)) {
    case Algorithm::kRing: return ringAllreduce(ctx, o);
    default: return recursiveDoublingAllreduce(ctx, o);
  }
}

// Reduce-scatter around the ring, arranged so that rank r finishes with block r: in step s it sends block
// (r - s - 1) and combines the incoming block (r - s - 2).
Status reduceScatter(Context& ctx, const ReduceScatterOptions& o) {
  const int p = ctx.size(), r = ctx.rank();
  if (p == 1 || o.count == 0) return Status::ok();
  const size_t elem = dtypeSize(o.dtype);
  Pair* right = ctx.pair(wrapRank(r + 1, p));
  Pair* left = ctx.pair(wrapRank(r - 1, p));
  for (int s = 0; s < p - 1; ++s) {
    int sendBlock = wrapRank(r - s - 1, p), recvBlock = wrapRank(r - s - 2, p);
    SendOp send{right, o.data + blockStart(o.count, p, sendBlock) * elem, blockCount(o.count, p, sendBlock) * elem};
    RecvOp recv{left, o.data + blockStart(o.count, p, recvBlock) * elem, blockCount(o.count, p, recvBlock) * elem,
                0, true, o.op, o.dtype};
    HORA_RETURN_IF_ERROR(ctx.progress(&send, 1, &recv, 1));
  }
  if (o.op == ReduceOp::kAvg) {
    scaleForAvg(o.dtype, o.data + blockStart(o.count, p, r) * elem, blockCount(o.count, p, r), p);
  }
  return Status::ok();
}

uint8_t* threadScratch(size_t bytes) {
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}

}  // namespace hora
