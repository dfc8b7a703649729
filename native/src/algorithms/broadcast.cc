#include "algorithms/blocks.h"
#include "algorithms/collectives.h"

namespace hora {
namespace {

constexpr size_t kTreeBroadcastBytes = 64 * 1024;
constexpr size_t kChainSegmentBytes = 512 * 1024;

// Binomial tree, for small messages: lg(p) hops. Ranks are renumbered so the root is 0; in round k every
// rank that already has the data sends it to the rank 2^k above it.
Status treeBroadcast(Context& ctx, const BroadcastOptions& o) {
  const int p = ctx.size();
  const int me = wrapRank(ctx.rank() - o.root, p);
  int mask = 1;
  while (mask < p) {
    if (me & mask) {
      RecvOp recv{ctx.pair(wrapRank(me - mask + o.root, p)), o.data, o.bytes};
      HORA_RETURN_IF_ERROR(ctx.progress(nullptr, 0, &recv, 1));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (me + mask < p) {
      SendOp send{ctx.pair(wrapRank(me + mask + o.root, p)), o.data, o.bytes};
      HORA_RETURN_IF_ERROR(ctx.progress(&send, 1, nullptr, 0));
    }
  }
  return Status::ok();
}

// Pipelined chain, for large messages: root -> root+1 -> ... -> root-1, in segments. A rank forwards
// segment i while it receives segment i+1, so after the pipeline fills every link is busy at once and the
// time approaches n beta + (p-2) segment beta.
Status chainBroadcast(Context& ctx, const BroadcastOptions& o) {
  const int p = ctx.size();
  const int me = wrapRank(ctx.rank() - o.root, p);
  Pair* prev = me > 0 ? ctx.pair(wrapRank(ctx.rank() - 1, p)) : nullptr;
  Pair* next = me < p - 1 ? ctx.pair(wrapRank(ctx.rank() + 1, p)) : nullptr;
  const size_t segments = (o.bytes + kChainSegmentBytes - 1) / kChainSegmentBytes;
  auto segBytes = [&](size_t i) {
    return i + 1 < segments ? kChainSegmentBytes : o.bytes - i * kChainSegmentBytes;
  };
  // Round i receives segment i and forwards segment i-1.
  for (size_t i = 0; i <= segments; ++i) {
    SendOp send{next, nullptr, 0};
    RecvOp recv{prev, nullptr, 0};
    int ns = 0, nr = 0;
    if (next != nullptr && i >= 1) {
      send.data = o.data + (i - 1) * kChainSegmentBytes;
      send.len = segBytes(i - 1);
      ns = 1;
    }
    if (prev != nullptr && i < segments) {
      recv.dst = o.data + i * kChainSegmentBytes;
      recv.len = segBytes(i);
      nr = 1;
    }
    if (me == 0 && i < segments && next != nullptr) {
      // The root has every segment already: send segment i now rather than one round late.
      send.data = o.data + i * kChainSegmentBytes;
      send.len = segBytes(i);
      ns = 1;
    } else if (me == 0) {
      ns = 0;
    }
    HORA_RETURN_IF_ERROR(ctx.progress(&send, ns, &recv, nr));
  }
  return Status::ok();
}

}  // namespace

Status broadcast(Context& ctx, const BroadcastOptions& o) {
  if (ctx.size() == 1 || o.bytes == 0) return Status::ok();
  if (o.bytes <= kTreeBroadcastBytes) return treeBroadcast(ctx, o);
  return chainBroadcast(ctx, o);
}

}  // namespace hora
