// The collectives, one options struct and one entry function each (the engine calls these on its thread).
//
// All buffers are plain memory owned by the caller for the duration of the call. Every function returns
// the same result bytes on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/types.h"
#include "reduce/reduce.h"
#include "transport/context.h"
#include "transport/shm/single_copy.h"

namespace hora {

// Below this many bytes per rank, kAuto picks recursive doubling for allreduce.
constexpr size_t kSmallAllreduceBytes = 64 * 1024;

struct AllreduceOptions {
  uint8_t* data = nullptr;   // in: this rank's values; out: the reduction over all ranks
  size_t count = 0;          // elements
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
  Scaling scaling;           // prescaleFactor, postscaleFactor (float dtypes); applied in the reduction steps
};
Status allreduce(Context& ctx, const AllreduceOptions& opts);
// HORA_ALGO, or on one host by size, or across hosts by the cost model of cost.h (same on every rank).
Algorithm chooseAllreduceAlgorithm(const Context& ctx, const AllreduceOptions& opts);
// The multi-dimensional allreduce over grid `dims` (multidim.cc); {ranks per host, hosts} is the
// hierarchical one.
Status gridAllreduce(Context& ctx, const std::vector<int>& dims, const AllreduceOptions& opts);

struct ReduceScatterOptions {
  uint8_t* data = nullptr;   // in: this rank's values (all blocks); out: block `rank` holds the reduction
  size_t count = 0;          // elements in the whole buffer; blocks as in blocks.h
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  Scaling scaling;           // as in AllreduceOptions; block `rank` comes out scaled (and divided, for kAvg)
};
Status reduceScatter(Context& ctx, const ReduceScatterOptions& opts);

struct AllgatherOptions {
  uint8_t* output = nullptr;            // concatenation of every rank's block, rank order
  std::vector<size_t> bytesPerRank;     // size of each rank's block; this rank's block is already in place
};
Status allgather(Context& ctx, const AllgatherOptions& opts);
// The first step of an allgather whose ranks contribute different lengths: every rank's element count
// (mine from this rank), bounded (a count past 2^40 bytes is an error) and summed.
Status allgatherCounts(Context& ctx, uint64_t mine, size_t elementBytes, std::vector<uint64_t>* counts, uint64_t* total);

// A two-rank alltoall whose receive counts are known before its agreement (recvSplits) makes its first round
// in the agreement's messages (engine/agreement.h, Swap): one exchange fewer. What rides, by the size of the
// block each rank sends the other (the same rule on both ends, which both know both sizes):
// - kBlock: a block below shm::kSingleCopyMinBytes, itself;
// - kOffer: a larger one between ranks of one host, its offer (a kRead offer, or kRing: the block follows
//   through the ring, as in the first round it stands for);
// - kNone: an empty block (nothing to send), or a larger one over TCP, which then takes the usual rounds, as
//   does the other direction (the round rides both ways or not at all).
enum class AlltoallRide : uint8_t { kNone, kBlock, kOffer };
AlltoallRide alltoallRide(Context& ctx, int peer, size_t bytes);
// The offer of a block for rank peer: kRead when singleCopy is on and the pair still offers, else kRing.
shm::ReadOffer alltoallOffer(Context& ctx, int peer, const uint8_t* block, size_t bytes, bool singleCopy);

// The first round of a two-rank alltoall as the agreement made it: this rank's offer, and what came from the
// partner (its block, or its offer).
struct AlltoallFirstRound {
  bool done = false;
  shm::ReadOffer sent;
  alignas(64) uint8_t came[shm::kSingleCopyMinBytes];
};

struct AlltoallOptions {
  const uint8_t* input = nullptr;     // this rank's blocks, one for each rank in rank order (sendBytes[q] for rank q)
  std::vector<size_t> sendBytes;      // bytes to each rank (size entries)
  uint8_t* output = nullptr;          // the blocks from each rank in rank order (recvBytes[q] from rank q)
  std::vector<size_t> recvBytes;      // bytes from each rank: what it sends here, which every rank must have
                                      // agreed on (alltoallCounts, or recvSplits the agreement checked)
  // Blocks of kSingleCopyMinBytes and more between ranks of one host move with one copy, the receiver
  // reading the sender's memory (transport/shm/single_copy.h); false: neither offered nor read, every
  // block goes through the rings (HORA_SHM_SINGLE_COPY=0).
  bool singleCopy = true;
  // Two ranks: the first round, when the agreement made it (AlltoallFirstRound::done); nullptr: none.
  const AlltoallFirstRound* firstRound = nullptr;
};
Status alltoall(Context& ctx, const AlltoallOptions& opts);
// The first step of an alltoall whose ranks do not know what comes to them: each rank tells each other
// rank how many elements it sends it. from >= 0: only rank `from` sends (a scatter's root), the others
// hear from it alone. The counts come from the network: each is bounded (past 2^40 bytes is an error)
// and *total is their sum.
Status alltoallCounts(Context& ctx, const std::vector<uint64_t>& sendCounts, int from, size_t elementBytes,
                      std::vector<uint64_t>* recvCounts, uint64_t* total);

struct BroadcastOptions {
  uint8_t* data = nullptr;  // root: the bytes to send; others: where they land
  size_t bytes = 0;
  int root = 0;
};
Status broadcast(Context& ctx, const BroadcastOptions& opts);

// The rooted collectives (rooted.cc): only the root ends with a result.

struct ReduceOptions {
  const uint8_t* input = nullptr;  // this rank's values, read only
  uint8_t* output = nullptr;       // root: count elements, the reduction over all ranks; others: unused
  size_t count = 0;                // elements, the same on every rank
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;  // kRing or kRecursiveDoubling forces one; anything else: by size
  Scaling scaling;                 // as in AllreduceOptions
  int root = 0;
};
Status reduce(Context& ctx, const ReduceOptions& opts);
// The algorithm reduce() runs: kRecursiveDoubling or kRing (same on every rank).
Algorithm chooseReduceAlgorithm(const Context& ctx, const ReduceOptions& opts);

struct GatherOptions {
  const uint8_t* input = nullptr;       // this rank's block, read only
  uint8_t* output = nullptr;            // root: every rank's block, concatenated in rank order; others: unused
  std::vector<size_t> bytesPerRank;     // size of each rank's block (allgatherCounts gives every rank them)
  int root = 0;
};
Status gather(Context& ctx, const GatherOptions& opts);

// Scratch memory for the calling thread, grown on demand and kept for the next collective.
uint8_t* threadScratch(size_t bytes);

}  // namespace hora
