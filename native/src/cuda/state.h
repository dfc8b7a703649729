// What the device paths of DeviceCollectives share: the path chosen, this rank's GPU, hora's streams and
// events on it, the staged pipeline's pinned buffers, the NCCL communicator and the IPC path. CUDA build
// only. cuda/collectives.cc sets it up and dispatches; each path is a file of its own: cuda/staged.cc,
// cuda/nccl_path.cc, cuda/ipc.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "algorithms/ring.h"
#include "common/status.h"
#include "cuda/collectives.h"
#include "cuda/ipc.h"
#include "cuda/nccl.h"
#include "transport/context.h"

namespace hora {
namespace cuda {

enum class Path { kUnset, kNccl, kIpc, kStaged };

// The staged pipeline moves the buffer in segments of this size through kStages pinned host buffers:
// while segment k is reduced over the network, k + 1 is copied down from the device and k - 1 back up.
constexpr size_t kSegmentBytes = size_t(8) << 20;
constexpr int kStages = 3;

// What each rank tells the others at the first device collective.
struct SetupInfo {
  uint8_t uuid[16];   // its GPU
  int32_t ncclLoaded;
  int32_t pad;
};

struct DeviceCollectives::State {
  Context& ctx;
  DeviceOptions options;
  Path path = Path::kUnset;
  Status broken;   // why setting up the path failed: every later device collective fails with it
  int device = -1;  // the GPU this rank's collectives run on (fixed at the first one)

  cudaStream_t work = nullptr;  // kernels and device-to-device copies
  cudaStream_t down = nullptr;  // device -> host
  cudaStream_t up = nullptr;    // host -> device
  cudaEvent_t callerReady = nullptr;  // recorded on the caller's stream: its earlier work is done
  cudaEvent_t finished = nullptr;     // recorded on hora's stream: the result is in place
  cudaEvent_t downDone[kStages] = {};
  cudaEvent_t upDone[kStages] = {};
  uint8_t* pinned = nullptr;  // kStages x kSegmentBytes, page-locked
  std::vector<uint8_t> host;  // whole-buffer staging for broadcast / allgather / reducescatter
  void* scratch = nullptr;    // device scratch (the NCCL path's shard)
  size_t scratchBytes = 0;

  std::unique_ptr<IpcPath> ipc;  // the IPC path's slots and events, once chosen

  const nccl::Api* nccl = nullptr;
  nccl::Comm comm = nullptr;  // all ranks (one host) or this host's ranks (several hosts)
  bool hierarchical = false;
  Ring crossRing{};           // the ranks with this rank's local rank, one per host, in host order

  State(Context& c, const DeviceOptions& o) : ctx(c), options(o) {}
  ~State();

  // cuda/collectives.cc: set-up, the path's choice, and what every path does around its copies.
  Status setUp(int dev);
  Status choosePath(const SetupInfo& mine);
  Status waitFor(cudaEvent_t ev, const char* what);
  Status afterCaller(cudaStream_t caller, cudaStream_t s);
  Status finish(cudaStream_t caller, cudaStream_t s, const char* what);
  uint8_t* deviceScratch(size_t bytes, Status* st);

  // cuda/staged.cc
  Status viaStaged(DeviceWork& w);
  Status staged(uint8_t* data, size_t count, DType dtype, cudaStream_t caller,
                const std::function<Status(uint8_t*, size_t)>& hostReduce);
  Status stagedWhole(DeviceWork& w);

  // cuda/nccl_path.cc
  Status initNccl();
  Status viaNccl(DeviceWork& w);
};

}  // namespace cuda
}  // namespace hora
