#include <array>
#include <cstring>
#include <string>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"
#include "transport/shm/single_copy.h"

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
// Single copy. Between ranks of one host a block of shm::kSingleCopyMinBytes or more does not go through
// the rings (the sender copying it into the slots and the receiver out of them: with every rank sending
// at once, twice the memory traffic). The sender sends an offer instead (transport/shm/single_copy.h:
// its pid and the block's address), the receiver reads the block straight into the output with
// process_vm_readv and answers, and the sender keeps its input as it is until the answer. Where the
// receiver cannot read (the kernel refuses: Yama, seccomp, another pid namespace; or singleCopy is off),
// it answers no, the block comes through the ring, and the sender's pair offers no more (Pair::
// refuseSingleCopy(): once per pair, not per call). A sender that does not offer says so in the offer
// (kRing) and streams the block. So a window is three rounds of progress(): the blocks below the bound
// and the offers; the answers (and the blocks of kRing offers, after every answer on both ends, so that a
// pair's stream holds them in one order); the refused blocks.
//
// Why it cannot deadlock: the sizes are agreed before the first byte (alltoallCounts, or recvSplits the
// agreement checked against what every sender sends), so each receive is matched by a send of the same
// length in the same step, and progress() moves every send and receive of a window together. Each round
// holds only what a peer sends in the same round, decided by what both ends saw in the rounds before.
namespace {

// A call's arrays, kept by each thread that runs alltoalls and cleared, not freed, between calls: a small
// alltoall allocated a dozen of them each time.
struct Scratch {
  std::vector<size_t> sendAt, recvAt;
  std::vector<SendOp> sends, later, streamed;
  std::vector<RecvOp> recvs, laterRecvs, streamedRecvs;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

AlltoallRide alltoallRide(Context& ctx, int peer, size_t bytes) {
  if (bytes == 0) return AlltoallRide::kNone;
  if (bytes < shm::kSingleCopyMinBytes) return AlltoallRide::kBlock;
  return ctx.usesSharedMemory(peer) ? AlltoallRide::kOffer : AlltoallRide::kNone;
}

shm::ReadOffer alltoallOffer(Context& ctx, int peer, const uint8_t* block, size_t bytes, bool singleCopy) {
  const bool read = singleCopy && ctx.pair(peer)->offersSingleCopy();
  return shm::makeOffer(block, bytes, read ? shm::OfferMode::kRead : shm::OfferMode::kRing);
}

Status alltoall(Context& ctx, const AlltoallOptions& o) {
  const int p = ctx.size(), r = ctx.rank();
  Scratch& s = scratch();
  std::vector<size_t>& sendAt = s.sendAt;
  std::vector<size_t>& recvAt = s.recvAt;
  sendAt.assign(p + 1, 0);
  recvAt.assign(p + 1, 0);
  for (int q = 0; q < p; ++q) {
    sendAt[q + 1] = sendAt[q] + o.sendBytes[q];
    recvAt[q + 1] = recvAt[q] + o.recvBytes[q];
  }
  if (o.sendBytes[r] != o.recvBytes[r]) {
    return Status(Code::kInternal, "alltoall: this rank sends itself " + std::to_string(o.sendBytes[r]) +
                                       " bytes but expects " + std::to_string(o.recvBytes[r]));
  }
  // This rank's block for itself: copied while the first window's offers travel when that window has only
  // offers to send (each takes a slot and waits for nobody), else before the window's exchange.
  bool selfCopied = o.sendBytes[r] == 0;
  auto copySelf = [&] {
    if (!selfCopied) memcpy(o.output + recvAt[r], o.input + sendAt[r], o.sendBytes[r]);
    selfCopied = true;
  };
  // A block of kSingleCopyMinBytes or more between ranks of one host is offered instead (both ends know
  // its size, so both know that an offer, not the block, comes first); see "Single copy" above.
  auto offered = [&](int q, size_t bytes) { return alltoallRide(ctx, q, bytes) == AlltoallRide::kOffer; };
  const int window = kAlltoallWindow;
  std::vector<SendOp>& sends = s.sends;
  std::vector<SendOp>& later = s.later;
  std::vector<SendOp>& streamed = s.streamed;
  std::vector<RecvOp>& recvs = s.recvs;
  std::vector<RecvOp>& laterRecvs = s.laterRecvs;
  std::vector<RecvOp>& streamedRecvs = s.streamedRecvs;
  // By step of the window: this rank's offer to rank + k, the offer from rank - k, and the answers.
  std::array<shm::ReadOffer, kAlltoallWindow> offersOut{}, offersIn{};
  std::array<uint64_t, kAlltoallWindow> answersOut{}, answersIn{};
  for (int first = 1; first < p; first += window) {
    sends.clear();
    recvs.clear();
    if (o.firstRound != nullptr && p == 2) {
      // The first round came in the agreement (AlltoallFirstRound): a block below the offers' bound, or the
      // offers, both ways, by the same rule as offered() here.
      const int peer = 1 - r;
      if (offered(peer, o.recvBytes[peer])) {
        memcpy(&offersIn[0], o.firstRound->came, sizeof(shm::ReadOffer));
      } else if (o.recvBytes[peer] > 0) {
        memcpy(o.output + recvAt[peer], o.firstRound->came, o.recvBytes[peer]);
      }
      if (offered(peer, o.sendBytes[peer])) offersOut[0] = o.firstRound->sent;
      copySelf();
    } else {
      bool onlyOffers = true;
      for (int k = first; k < p && k < first + window; ++k) {
        const int to = wrapRank(r + k, p), from = wrapRank(r - k, p), i = k - first;
        const uint8_t* block = o.input + sendAt[to];
        if (offered(to, o.sendBytes[to])) {
          offersOut[i] = alltoallOffer(ctx, to, block, o.sendBytes[to], o.singleCopy);
          sends.push_back(SendOp{ctx.pair(to), reinterpret_cast<const uint8_t*>(&offersOut[i]), sizeof(shm::ReadOffer)});
        } else if (o.sendBytes[to] > 0) {
          sends.push_back(SendOp{ctx.pair(to), block, o.sendBytes[to]});
          onlyOffers = false;
        }
        if (offered(from, o.recvBytes[from])) {
          recvs.push_back(RecvOp{ctx.pair(from), reinterpret_cast<uint8_t*>(&offersIn[i]), sizeof(shm::ReadOffer)});
        } else if (o.recvBytes[from] > 0) {
          recvs.push_back(RecvOp{ctx.pair(from), o.output + recvAt[from], o.recvBytes[from]});
        }
      }
      if (sends.empty() && recvs.empty()) continue;
      if (!selfCopied && onlyOffers && !sends.empty()) {
        // The offers first, then the copy while the peers' offers come. An offer takes one slot and waits
        // for nobody: of this rank's messages at most its agreement's can still be unread on the pair's
        // ring (shm/ring.h kSlots), since every earlier exchange ended with the peer's reply.
        HORA_RETURN_IF_ERROR(ctx.progress(sends.data(), static_cast<int>(sends.size()), nullptr, 0));
        copySelf();
        if (!recvs.empty()) HORA_RETURN_IF_ERROR(ctx.progress(nullptr, 0, recvs.data(), static_cast<int>(recvs.size())));
      } else {
        copySelf();
        HORA_RETURN_IF_ERROR(ctx.progress(sends.data(), static_cast<int>(sends.size()), recvs.data(), static_cast<int>(recvs.size())));
      }
    }
    // The offers that came: read each (or refuse it), answer; and wait for the answers to this rank's. The
    // blocks that follow through the rings (offers of kRing) go after every answer, in both ends' arrays:
    // a pair's stream then carries the answer first either way.
    sends.clear();
    recvs.clear();
    later.clear();
    laterRecvs.clear();
    streamed.clear();
    streamedRecvs.clear();
    for (int k = first; k < p && k < first + window; ++k) {
      const int to = wrapRank(r + k, p), from = wrapRank(r - k, p), i = k - first;
      if (offered(from, o.recvBytes[from])) {
        const shm::ReadOffer& in = offersIn[i];
        uint8_t* dst = o.output + recvAt[from];
        if (in.bytes != o.recvBytes[from] || (in.mode != static_cast<uint32_t>(shm::OfferMode::kRead) &&
                                              in.mode != static_cast<uint32_t>(shm::OfferMode::kRing))) {
          return Status(Code::kInternal, "alltoall: rank " + std::to_string(ctx.worldRank(from)) + " offered " +
                                             std::to_string(in.bytes) + " bytes in mode " + std::to_string(in.mode) +
                                             " where " + std::to_string(o.recvBytes[from]) + " were agreed", ctx.worldRank(from));
        }
        if (in.mode == static_cast<uint32_t>(shm::OfferMode::kRing)) {
          streamedRecvs.push_back(RecvOp{ctx.pair(from), dst, o.recvBytes[from]});
        } else {
          answersOut[i] = o.singleCopy && shm::readOffer(in, dst) ? 1 : 0;
          // Answered at once, before the next read: the sender waits for nothing else. (Nothing else of
          // this round is on the pair's stream yet, so the answer still comes first.)
          SendOp answer{ctx.pair(from), reinterpret_cast<const uint8_t*>(&answersOut[i]), sizeof(uint64_t)};
          HORA_RETURN_IF_ERROR(ctx.progress(&answer, 1, nullptr, 0));
          if (answersOut[i] == 0) laterRecvs.push_back(RecvOp{ctx.pair(from), dst, o.recvBytes[from]});
        }
      }
      if (offered(to, o.sendBytes[to])) {
        if (offersOut[i].mode == static_cast<uint32_t>(shm::OfferMode::kRing)) {
          streamed.push_back(SendOp{ctx.pair(to), o.input + sendAt[to], o.sendBytes[to]});
        } else {
          recvs.push_back(RecvOp{ctx.pair(to), reinterpret_cast<uint8_t*>(&answersIn[i]), sizeof(uint64_t)});
        }
      }
    }
    sends.insert(sends.end(), streamed.begin(), streamed.end());
    recvs.insert(recvs.end(), streamedRecvs.begin(), streamedRecvs.end());
    if (!sends.empty() || !recvs.empty()) {
      HORA_RETURN_IF_ERROR(ctx.progress(sends.data(), static_cast<int>(sends.size()), recvs.data(), static_cast<int>(recvs.size())));
    }
    // A refused offer: the block goes through the ring after all, and later blocks to that peer at once.
    for (int k = first; k < p && k < first + window; ++k) {
      const int to = wrapRank(r + k, p), i = k - first;
      if (!offered(to, o.sendBytes[to]) || offersOut[i].mode != static_cast<uint32_t>(shm::OfferMode::kRead)) continue;
      if (answersIn[i] == 1) continue;
      ctx.pair(to)->refuseSingleCopy();
      later.push_back(SendOp{ctx.pair(to), o.input + sendAt[to], o.sendBytes[to]});
    }
    if (!later.empty() || !laterRecvs.empty()) {
      HORA_RETURN_IF_ERROR(ctx.progress(later.data(), static_cast<int>(later.size()), laterRecvs.data(), static_cast<int>(laterRecvs.size())));
    }
  }
  copySelf();
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
