// The IPC path of device collectives: the ranks of one host whose GPUs reach each other's memory (several
// processes on one GPU included). CUDA build only; cuda/collectives.cc chooses the path. Two algorithms,
// chosen at set-up from the GPUs every rank reported, so every rank takes the same one:
//
// One GPU (every rank's buffers on the same device): rank 0 does all of the GPU work. Processes sharing a
// GPU without MPS take turns on it, and a switch between them costs far more than a small collective's
// kernel, so no other rank queues anything. Each rank waits (on the host) until its buffer's stream has
// finished the work queued before the collective, then sends rank 0 the IPC handle of the allocation
// holding each buffer the collective reads or writes; rank 0 maps what it has not mapped before, reduces
// every rank's buffer with one kernel (sources in rank order, so every rank gets the same bits) and copies
// the result into the others' buffers, waits for its GPU, and a host barrier carries its status to all.
// Rank 0 keeps what it mapped, up to kIpcMappingsPerPeer allocations per peer, the least recently used
// closed first. CUDA gives a new allocation a new handle even at a freed one's address, so a mapping of
// freed memory is never used again; its pages return to the device when rank 0 closes it.
//
// Several GPUs: every rank works on its own GPU, through staging slots. At set-up every rank allocates a
// staging area of two slots and six CUDA events that other processes can wait on (ready, reduced and done,
// one of each per slot), exports their IPC handles, and opens every peer's once. A collective moves its
// buffer through the slots in steps of at most kIpcSlotBytes, alternating slots:
//
//   1. hora's stream waits for the caller's stream, and for every peer's `done` of this slot (the peer has
//      finished reading what this rank put in the slot two steps ago);
//   2. the rank copies its part of the buffer into its slot and records `ready`;
//   3. a host barrier (exchangeCodes: it also carries each rank's failure) orders every record before
//      every wait below: a wait on another process's event waits for the record issued last before it;
//   4. hora's stream waits for every peer's `ready` and reads the peers' slots: an allreduce of up to the
//      one-shot size reduces every slot into the rank's own buffer (each rank the whole buffer, sources in
//      rank order, so every rank gets the same bits); a larger one reduces only this rank's block, puts the
//      block back in its slot, records `reduced`, and after a second barrier copies every other block from
//      its owner's slot. reduceScatter reduces this rank's block; broadcast copies the root's slot;
//      allgather copies every rank's slot;
//   5. the rank records `done` for the slot.
//
// The host never waits for the GPU between steps, so the steps of a large buffer overlap. A collective
// ends with the rank waiting for its own GPU work (bounded by HORA_TIMEOUT_S and aborted with the job) and
// a last barrier: after it no rank reads another's slots, and a GPU failure on one rank fails the
// collective on every rank. The caller's buffers are never exported on this algorithm.
//
// Either way a rank may free a buffer (or its owner free wrapped memory) as soon as its collective has
// settled.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "cuda/collectives.h"
#include "transport/context.h"

namespace hora {
namespace cuda {

// Bytes of one staging slot; a rank holds two (64 MiB of GPU memory per rank on this path).
constexpr size_t kIpcSlotBytes = size_t(32) << 20;
// Allreduce steps of at most this many bytes take the one-shot algorithm (every rank reads every slot).
// Not yet measured on several GPUs: on one GPU (HORA_IPC_SLOTS=1) one-shot was the faster at every size.
constexpr size_t kIpcOneShotBytes = size_t(1) << 20;
// Allocations of one peer that rank 0 keeps mapped on the one-GPU algorithm.
constexpr size_t kIpcMappingsPerPeer = 16;

class IpcPath {
 public:
  explicit IpcPath(Context& ctx) : ctx_(ctx) {}
  ~IpcPath();
  IpcPath(const IpcPath&) = delete;
  IpcPath& operator=(const IpcPath&) = delete;

  // Collective: the algorithm (oneGpu: rank 0 does the GPU work, for ranks that share one device; false
  // takes the slots, also on one GPU when HORA_IPC_SLOTS=1 asks, for tests), and for the slots this rank's slots and events, their handles exchanged,
  // the peers' opened. Every rank returns the same error if any rank fails.
  Status setUp(int device, bool oneGpu);
  // Runs an allreduce, broadcast, allgather (w.gatheredDevice allocated, w.gatheredCounts known) or
  // reducescatter of device memory; the result is ordered before later work on w.stream.
  Status collective(DeviceWork& w);

 private:
  enum Ev { kReady, kReduced, kDone, kEvents };
  static constexpr int kSlots = 2;

  uint8_t* slot(int rank, int s) const { return base_[rank] + static_cast<size_t>(s) * kIpcSlotBytes; }
  cudaEvent_t event(int rank, int s, Ev e) const { return events_[rank][s * kEvents + e]; }

  // One step's parts: (1)-(2) of the comment above, the barrier, and the waits of (4).
  Status begin(int s, const uint8_t* src, size_t bytes, Status* local);
  Status barrier(Status* local, const char* phase);
  void waitFor(int s, Ev e, int rank, Status* local);
  void copy(void* dst, const void* src, size_t bytes, Status* local);
  void record(int s, Ev e, Status* local);

  Status allreduce(DeviceWork& w, Status* local);
  Status reduceScatter(DeviceWork& w, Status* local);
  Status broadcast(DeviceWork& w, Status* local);
  Status allgather(DeviceWork& w, Status* local);
  Status runSlots(DeviceWork& w);

  // The one-GPU algorithm.
  struct Mapping {
    cudaIpcMemHandle_t handle;
    uint8_t* base;
    uint64_t lastUse;
  };
  Status runOneGpu(DeviceWork& w);
  Status callerIdle(cudaStream_t caller);
  uint8_t* mapped(int peer, const cudaIpcMemHandle_t& handle, Status* local);

  Context& ctx_;
  int device_ = -1;
  bool oneGpu_ = false;
  std::vector<std::vector<Mapping>> mappings_;  // rank 0, one GPU: what it has mapped of each peer
  uint64_t uses_ = 0;
  cudaStream_t stream_ = nullptr;       // hora's stream for this path
  cudaEvent_t callerReady_ = nullptr;   // recorded on the caller's stream
  cudaEvent_t finished_ = nullptr;      // recorded on stream_ at the end of a collective
  std::vector<uint8_t*> base_;          // every rank's staging area: this rank's own, the peers' opened
  std::vector<std::vector<cudaEvent_t>> events_;  // every rank's events, [slot * kEvents + Ev]
  uint64_t step_ = 0;                   // steps taken on this communicator; the slot is step_ % kSlots
};

}  // namespace cuda
}  // namespace hora
