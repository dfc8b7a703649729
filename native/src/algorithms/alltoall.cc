#include <cstring>
#include <string>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"

namespace hora {

// Pairwise alltoall with per-rank block sizes (hora.alltoall, hora.scatter).
//
// How it works. This rank's block for itself is copied locally. Then p - 1 steps: in step k (1 <= k < p)
// rank r sends its block for rank r + k and receives rank r - k's block for it, both at once, straight
// from the input and into the output. Every rank talks to exactly one peer in each direction per step, so
// no link carries two blocks at a time and no rank is a hot spot; each step is a full-duplex exchange that
// the transport streams in chunks (shared-memory slots filled while the peer drains them, TCP writes while
// the peer reads), so a large block moves at the link's bandwidth. A block of 0 bytes is no operation:
// a scatter's non-root ranks take part in only the step that reaches them from the root.
//
// Why it cannot deadlock: the sizes are agreed before the first byte (alltoallCounts, or recvSplits the
// agreement checked against what every sender sends), so each receive is matched by a send of the same
// length in the same step, and progress() moves a step's send and receive together.
Status alltoall(Context& ctx, const AlltoallOptions& o) {
  const int p = ctx.size(), r = ctx.rank();
  std::vector<size_t> sendAt(p + 1, 0), recvAt(p + 1, 0);
  for (int q = 0; q < p; ++q) {
    sendAt[q + 1] = sendAt[q] + o.sendBytes[q];
    recvAt[q + 1] = recvAt[q] + o.recvBytes[q];
  }
  if (o.sendBytes[r] != o.recvBytes[r]) {
    return Status(Code::kInternal, "alltoall: this rank sends itself " + std::to_string(o.sendBytes[r]) +
                                       " bytes but expects " + std::to_string(o.recvBytes[r]));
  }
  if (o.sendBytes[r] > 0) memcpy(o.output + recvAt[r], o.input + sendAt[r], o.sendBytes[r]);
  for (int k = 1; k < p; ++k) {
    const int to = wrapRank(r + k, p), from = wrapRank(r - k, p);
    SendOp send{ctx.pair(to), o.input + sendAt[to], o.sendBytes[to]};
    RecvOp recv{ctx.pair(from), o.output + recvAt[from], o.recvBytes[from]};
    const int sends = send.len > 0 ? 1 : 0, recvs = recv.len > 0 ? 1 : 0;
    if (sends + recvs == 0) continue;
    HORA_RETURN_IF_ERROR(ctx.progress(sends ? &send : nullptr, sends, recvs ? &recv : nullptr, recvs));
  }
  return Status::ok();
}

// All the counts move at once (p - 1 sends and receives of 8 bytes each): one latency, not p - 1.
Status alltoallCounts(Context& ctx, const std::vector<uint64_t>& sendCounts, int from, size_t elementBytes,
                      std::vector<uint64_t>* recvCounts, uint64_t* total) {
  const int p = ctx.size(), r = ctx.rank();
  recvCounts->assign(p, 0);
  (*recvCounts)[r] = sendCounts[r];
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  for (int q = 0; q < p; ++q) {
    if (q == r) continue;
    if (from < 0 || from == r) {
      sends.push_back(SendOp{ctx.pair(q), reinterpret_cast<const uint8_t*>(&sendCounts[q]), sizeof(uint64_t)});
    }
    if (from < 0 || from == q) {
      recvs.push_back(RecvOp{ctx.pair(q), reinterpret_cast<uint8_t*>(&(*recvCounts)[q]), sizeof(uint64_t)});
    }
  }
  if (!sends.empty() || !recvs.empty()) {
    HORA_RETURN_IF_ERROR(ctx.progress(sends.data(), static_cast<int>(sends.size()), recvs.data(), static_cast<int>(recvs.size())));
  }
  *total = 0;
  for (int q = 0; q < p; ++q) {
    if ((*recvCounts)[q] > (uint64_t(1) << 40) / elementBytes) {
      return Status(Code::kInternal, "rank " + std::to_string(ctx.worldRank(q)) + " announced an implausible alltoall count " +
                                         std::to_string((*recvCounts)[q]), ctx.worldRank(q));
    }
    *total += (*recvCounts)[q];
  }
  return Status::ok();
}

}  // namespace hora
