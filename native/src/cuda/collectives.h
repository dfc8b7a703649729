// Collectives on device memory: the engine hands them here, as a DeviceWork, once the agreement has
// passed. Exists in every build; the CPU-only build compiles cuda/collectives_stub.cc instead of the paths,
// and its run() refuses (the binding never submits device work then).
//
// Three data paths, chosen at the first device collective from facts every rank shares, so every rank
// takes the same one (cuda/collectives.cc chooses and sets up; one file per path):
//   nccl    libnccl.so.2 loads on every rank and the ranks of each host use distinct GPUs: NCCL within a
//           host; across hosts NCCL reduce-scatter in each host, the staged pipeline between hosts (ranks
//           with the same local rank), NCCL allgather in each host. cuda/nccl_path.cc (cuda/nccl.cc loads
//           the library).
//   ipc     one host, default transport: every rank copies its buffer into a staging slot of its own
//           that the others opened once with CUDA IPC; CUDA interprocess events order the copies and
//           reads on the GPU, host barriers order the events (cuda/ipc.h). Several processes on one GPU
//           work too.
//   staged  otherwise (several hosts, or HORA_TRANSPORT=tcp): device -> pinned host memory in segments,
//           the host allreduce of each segment over the network, host -> device, the three overlapped.
//           cuda/staged.cc.
//
// The paths run over the host collectives (algorithms/collectives.h) for their barriers and staging, so
// cuda/ sits above algorithms/ and below engine/ (scripts/check-layers.js).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "transport/context.h"

namespace hora {
namespace cuda {

// One collective on device memory, as the engine fills it from its Work.
struct DeviceWork {
  Kind kind = Kind::kAllreduce;  // allreduce, broadcast, allgather or reducescatter
  ReduceOp op = ReduceOp::kSum;
  DType dtype = DType::kFloat32;
  Algorithm algorithm = Algorithm::kAuto;  // the host allreduce's, on the staged path
  int root = 0;                  // broadcast
  // allreduce, broadcast: reduced or received in place. allgather, reducescatter: the input, read only.
  uint8_t* data = nullptr;
  size_t count = 0;              // elements of data
  uint8_t* out = nullptr;        // reducescatter: this rank's block of the result
  int device = -1;               // the CUDA device of data and out
  void* stream = nullptr;        // the caller's stream (nullptr: the legacy default stream)

  // Results of an allgather, written by run(): elements from each rank, and the result, from allocate().
  std::vector<uint64_t> gatheredCounts;
  void* gatheredDevice = nullptr;
};

// The communicator's settings that the device paths read.
struct DeviceOptions {
  TransportChoice transport = TransportChoice::kAuto;
  bool ipcSlots = false;  // the IPC path's staging slots even when every rank shares one GPU (HORA_IPC_SLOTS)
  bool nccl = true;       // false: libnccl.so.2 stays unloaded, NCCL's path is not taken (HORA_NCCL=0)
};

class DeviceCollectives {
 public:
  DeviceCollectives(Context& ctx, const DeviceOptions& options);
  ~DeviceCollectives();
  DeviceCollectives(const DeviceCollectives&) = delete;
  DeviceCollectives& operator=(const DeviceCollectives&) = delete;

  // Runs an allreduce, broadcast, allgather or reducescatter of device memory. Results are in place (in
  // w.out for reducescatter, w.gatheredDevice for allgather) and ordered before later work on w.stream.
  Status run(DeviceWork& w);
  // The path device collectives take ("nccl", "ipc", "staged"; "none" before the first), for the timeline.
  const char* path() const;

 private:
  struct State;  // cuda/state.h (CUDA build)
  std::unique_ptr<State> state_;
};

}  // namespace cuda
}  // namespace hora
