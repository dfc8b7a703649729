#include <cstring>
#include <string>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"

namespace hora {

// Steps in flight at once. One step at a time makes each rank wait for one given peer per step: with more
// ranks than cores (4 ranks on 2 cores) that peer is often not running, and the step waits for it while
// others could go on. With the steps of a window in flight, progress() moves whichever block can move
// (on 4 ranks over 2 busy cores, 1 MiB per peer, about a third less time than step by step; 2026-11-28);
// the window bounds how many peers a rank feeds at once in a large world.
constexpr int kAlltoallWindow = 8;

// Pairwise alltoall with per-rank block sizes (hora.alltoall, hora.scatter).
//
// How it works. This rank's block for itself is copied locally. Then p - 1 steps: in step k (1 <= k < p)
// rank r sends its block for rank r + k and receives rank r - k's block, straight from the input and into
// the output. In each step every rank sends to one peer and receives from another, so the blocks of a step
// spread over distinct links and no rank is a hot spot. The steps of a window (kAlltoallWindow) are in
// flight together, each rank starting with a different peer; the transport streams every block in chunks
// (shared-memory slots filled while the peer drains them, TCP writes while the peer reads), so a large
// block moves at the link's bandwidth. A block of 0 bytes is no operation: a scatter's non-root ranks take
// part only in the step that reaches them from the root.
//
// Why it cannot deadlock: the sizes are agreed before the first byte (alltoallCounts, or recvSplits the
// agreement checked against what every sender sends), so each receive is matched by a send of the same
// length in the same step, and progress() moves every send and receive of a window together.
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
  const int window = kAlltoallWindow;
  std::vector<SendOp> sends;
  std::vector<RecvOp> recvs;
  for (int first = 1; first < p; first += window) {
    sends.clear();
    recvs.clear();
    for (int k = first; k < p && k < first + window; ++k) {
      const int to = wrapRank(r + k, p), from = wrapRank(r - k, p);
      if (o.sendBytes[to] > 0) sends.push_back(SendOp{ctx.pair(to), o.input + sendAt[to], o.sendBytes[to]});
      if (o.recvBytes[from] > 0) recvs.push_back(RecvOp{ctx.pair(from), o.output + recvAt[from], o.recvBytes[from]});
    }
    if (sends.empty() && recvs.empty()) continue;
    HORA_RETURN_IF_ERROR(ctx.progress(sends.data(), static_cast<int>(sends.size()), recvs.data(), static_cast<int>(recvs.size())));
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
