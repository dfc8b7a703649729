// Work: one collective as the engine sees it, a plain struct filled on the JS thread by the binding.
//
// The engine owns a Work from submission until it is completed; the buffers it points at belong to the
// caller, who must not touch them until then (the JS layer keeps them referenced).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/collectives.h"
#include "common/status.h"
#include "common/types.h"

namespace hora {

struct Group;

// An allocator whose resize() leaves new bytes as they are rather than zeroing them: a result buffer that
// the collective then fills whole (an allgather's, an alltoall's) is written once, not twice.
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
// The bytes of a result that the engine allocates and JavaScript adopts (Work::gathered).
using ResultBytes = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;

// When each phase of a Work happened, for the timeline (HORA_TIMELINE). Filled only while the
// communicator's timeline is on; monotonicNanos() values, 0 where a phase did not happen (a failure ended
// the work early, or the phase does not apply: copies exist only for fused tensors).
struct WorkTimes {
  int64_t enqueued = 0;       // the JS batch holding it reached the engine's queue
  int64_t started = 0;        // the engine took it (for a fused tensor: the fusion group)
  int64_t copyInStart = 0;    // fused: this tensor's copy into the fusion buffer
  int64_t copyInEnd = 0;
  int64_t negotiateStart = 0; // the cross-rank agreement (see agreement.h)
  int64_t negotiateEnd = 0;
  int64_t transferEnd = 0;    // the algorithm ran from negotiateEnd to here
  int64_t copyOutStart = 0;   // fused: this tensor's copy out of the fusion buffer
  int64_t copyOutEnd = 0;
  int64_t done = 0;           // status set, about to be reported
  // Reduction kernels run inside the progress loop interleaved with receives, in many short calls; this
  // is their summed time over the whole collective (agreement included), not one interval.
  int64_t reduceNanos = 0;
  uint32_t reduceCalls = 0;
  uint32_t fusedTensors = 0;  // tensors in its fusion group, 0 when not fused
  uint64_t seq = 0;           // the agreement's sequence number (shared by a fusion group)
  const char* algorithm = nullptr;  // allreduce algorithm that ran; "agreement" when the data rode along
};

// A completed Work's times and outcome, kept by the communicator until the timeline collects them.
struct TimelineRecord {
  uint64_t id = 0;  // Work::id
  WorkTimes times;
  Code code = Code::kOk;
  std::string message;  // set when code is not kOk
};

struct Work {
  uint64_t id = 0;  // chosen by the binding; echoed back on completion
  Kind kind = Kind::kBarrier;
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kFloat32;
  int root = 0;
  Algorithm algorithm = Algorithm::kAuto;  // forced (the call's, or HORA_ALGO); kAuto: the engine chooses
  // allreduce: the algorithm it runs, chosen once by the engine (chooseAllreduceAlgorithm() on its group's
  // topology) the first time it is needed, and read from here after that; kAuto until then.
  Algorithm chosen = Algorithm::kAuto;
  std::string name;
  // allreduce, reducescatter of host memory with a float dtype: prescaleFactor and postscaleFactor.
  Scaling scaling;

  // allreduce, broadcast: reduced or received in place. allgather, reducescatter: the input, read only.
  uint8_t* data = nullptr;
  size_t count = 0;
  // reducescatter: this rank's block of the result (blockCount(count, size, rank) elements).
  uint8_t* out = nullptr;
  // alltoall: out was given (the caller's array receives; Work::gathered stays empty) and its size in bytes.
  bool outGiven = false;
  size_t outBytes = 0;
  // device >= 0: data and out are device memory of that CUDA device (a hora.cuda.DeviceBuffer), and the
  // work is ordered after what is queued on stream (nullptr: the legacy default stream); its result is
  // ready on that stream when the work completes. -1: host memory.
  int device = -1;
  void* stream = nullptr;
  // kSend, kRecv: the other rank and the message's tag. data holds count elements: sent from, or
  // received into.
  int peer = -1;
  int32_t tag = 0;
  // kAlltoall: elements this rank sends to each rank of its group (group rank order; their sum is count),
  // then, when the caller gave them (recvSplits), the elements it expects from each: size or 2 * size
  // entries. kScatter: on the root, the elements for each rank (size entries); empty elsewhere.
  std::vector<uint64_t> splits;
  // kInvalid: what was wrong with this rank's call.
  std::string invalidReason;
  // The process group it runs in (engine/group.h); nullptr: the world. Collectives only; a message names
  // its peer by world rank.
  Group* group = nullptr;

  // Results, written by the engine.
  Status status;
  ResultBytes gathered;                   // allgather, alltoall, scatter: what came in, in rank order
  std::vector<uint64_t> gatheredCounts;   // allgather, alltoall, scatter: elements from each rank
  void* gatheredDevice = nullptr;         // allgather of device memory: the result, from cuda::allocate()
  int lastJoined = -1;                    // join: the rank (of its group, if any) that joined last
  bool fused = false;                     // went out in a fusion buffer with others
  WorkTimes times;                        // only while the timeline is on
  bool completed = false;                 // guarded by the communicator's mutex
  bool takenInJs = false;                 // the addon, JS thread only: its result was handed to JS
  // The binding's, JS thread only: what keeps the memory of data and out valid until JS takes the result
  // (native/binding/backing_store.h); the engine never reads it. Empty: nothing held.
  std::shared_ptr<void> keepAlive[2];
};

}  // namespace hora
