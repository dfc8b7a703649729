#include "algorithms/ring.h"

#include "algorithms/blocks.h"

namespace hora {

Ring worldRing(const Context& ctx) {
  const int p = ctx.size(), r = ctx.rank();
  return {ctx.pair(wrapRank(r + 1, p)), ctx.pair(wrapRank(r - 1, p)), p, r};
}

// In step s member i sends block (i - s - 1) and combines the incoming block (i - s - 2), so block i has
// passed every member by the last step and ends at member i.
//
// Scaled: a block leaves its first member unscaled (step 0 sends it as it is) and every member combines
// its own copy of a block once, so step 0 scales both operands by pre, later steps only the member's own,
// and the last step, which completes block i on member i alone, finishes it; the allgather then copies.
Status ringReduceScatter(Context& ctx, const Ring& ring, uint8_t* data, size_t count, DType dtype, ReduceOp op,
                         const Scaling& scaling) {
  const size_t elem = dtypeSize(dtype);
  const int d = ring.size, i = ring.me;
  for (int s = 0; s < d - 1; ++s) {
    int sendBlock = wrapRank(i - s - 1, d), recvBlock = wrapRank(i - s - 2, d);
    SendOp send{ring.right, data + blockStart(count, d, sendBlock) * elem, blockCount(count, d, sendBlock) * elem};
    RecvOp recv{ring.left, data + blockStart(count, d, recvBlock) * elem, blockCount(count, d, recvBlock) * elem,
                0, true, op, dtype};
    const ScaledStep step = scaledStep(scaling, true, s == 0, s == d - 2, op, d);
    if (scaling.active()) recv.scaled = &step;
    HORA_RETURN_IF_ERROR(ctx.progress(&send, 1, &recv, 1));
  }
  return Status::ok();
}

// In step s member i passes block (i - s) on and receives block (i - s - 1).
Status ringAllgather(Context& ctx, const Ring& ring, uint8_t* data, size_t count, DType dtype) {
  const size_t elem = dtypeSize(dtype);
  const int d = ring.size, i = ring.me;
  for (int s = 0; s < d - 1; ++s) {
    int sendBlock = wrapRank(i - s, d), recvBlock = wrapRank(i - s - 1, d);
    SendOp send{ring.right, data + blockStart(count, d, sendBlock) * elem, blockCount(count, d, sendBlock) * elem};
    RecvOp recv{ring.left, data + blockStart(count, d, recvBlock) * elem, blockCount(count, d, recvBlock) * elem};
    HORA_RETURN_IF_ERROR(ctx.progress(&send, 1, &recv, 1));
  }
  return Status::ok();
}

}  // namespace hora
