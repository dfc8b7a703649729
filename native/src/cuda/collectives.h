// Collectives on device memory (Work::device >= 0): the engine hands them here once the agreement has
// passed. Exists in every build; without CUDA, run() refuses (the binding never submits device work then).
//
// Three data paths, chosen at the first device collective from facts every rank shares, so every rank
// takes the same one:
//   nccl    libnccl.so.2 loads on every rank and the ranks of each host use distinct GPUs: NCCL within a
//           host; across hosts NCCL reduce-scatter in each host, the staged pipeline between hosts (ranks
//           with the same local rank), NCCL allgather in each host.
//   ipc     one host, default transport: every rank copies its buffer into a staging slot of its own
//           that the others opened once with CUDA IPC; CUDA interprocess events order the copies and
//           reads on the GPU, host barriers order the events (cuda/ipc.h). Several processes on one GPU
//           work too.
//   staged  otherwise (several hosts, or HORA_TRANSPORT=tcp): device -> pinned host memory in segments,
//           the host allreduce of each segment over the network, host -> device, the three overlapped.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/work.h"
#include "transport/context.h"

namespace hora {
namespace cuda {

class DeviceCollectives {
 public:
  // ipcSlots: the IPC path's staging slots even when every rank shares one GPU (HORA_IPC_SLOTS).
  DeviceCollectives(Context& ctx, TransportChoice transport, bool ipcSlots);
  ~DeviceCollectives();
  DeviceCollectives(const DeviceCollectives&) = delete;
  DeviceCollectives& operator=(const DeviceCollectives&) = delete;

  // Runs an allreduce, broadcast, allgather or reducescatter of device memory. Results are in place (in
  // w.out for reducescatter, w.gatheredDevice for allgather) and ordered before later work on w.stream.
  Status run(Work& w);
  // The path device collectives take ("nccl", "ipc", "staged"; "none" before the first), for the timeline.
  const char* path() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cuda
}  // namespace hora
