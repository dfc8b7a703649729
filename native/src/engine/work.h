// Work: one collective as the engine sees it, a plain struct filled on the JS thread by the binding.
//
// The engine owns a Work from submission until it is completed; the buffers it points at belong to the
// caller, who must not touch them until then (the JS layer keeps them referenced).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "common/status.h"
#include "common/types.h"

namespace hora {

// Wire values: part of the cross-rank header.
enum class Kind : uint8_t {
  kAllreduce = 0,
  kBroadcast = 1,
  kAllgather = 2,
  kReduceScatter = 3,
  kBarrier = 4,
  kInvalid = 5,  // a placeholder for a call that failed validation on this rank, so the others hear of it
};
const char* kindName(Kind k);

struct Work {
  uint64_t id = 0;  // chosen by the binding; echoed back on completion
  Kind kind = Kind::kBarrier;
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kFloat32;
  int root = 0;
  Algorithm algorithm = Algorithm::kAuto;
  std::string name;

  // allreduce, broadcast: reduced or received in place. allgather, reducescatter: the input, read only.
  uint8_t* data = nullptr;
  size_t count = 0;
  // reducescatter: this rank's block of the result (blockCount(count, size, rank) elements).
  uint8_t* out = nullptr;
  // kInvalid: what was wrong with this rank's call.
  std::string invalidReason;

  // Results, written by the engine.
  Status status;
  std::vector<uint8_t> gathered;          // allgather: every rank's block, concatenated
  std::vector<uint64_t> gatheredCounts;   // allgather: elements from each rank
  bool fused = false;                     // went out in a fusion buffer with others
  bool completed = false;                 // guarded by the communicator's mutex
};

}  // namespace hora
