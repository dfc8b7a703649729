// cuda/collectives.h in the CUDA build: the path's choice and set-up, what every path does around its
// copies (waiting for the GPU, ordering after the caller's stream), and run(), which hands each collective
// to its path: cuda/staged.cc, cuda/nccl_path.cc, cuda/ipc.cc. The CPU-only build compiles
// cuda/collectives_stub.cc instead.
#ifdef HORA_CUDA

#include "cuda/collectives.h"

#include <cstring>
#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "common/log.h"
#include "cuda/device.h"
#include "cuda/runtime.h"
#include "cuda/state.h"
#include "cuda/sync.h"

namespace hora {
namespace cuda {
namespace {

const char* pathName(Path p) {
  switch (p) {
    case Path::kNccl: return "nccl";
    case Path::kIpc: return "ipc";
    case Path::kStaged: return "staged";
    case Path::kUnset: break;
  }
  return "none";
}

}  // namespace

DeviceCollectives::State::~State() {
  if (device < 0) return;
  cudaSetDevice(device);
  if (comm != nullptr) nccl->commDestroy(comm);
  for (int i = 0; i < kStages; ++i) {
    if (downDone[i] != nullptr) cudaEventDestroy(downDone[i]);
    if (upDone[i] != nullptr) cudaEventDestroy(upDone[i]);
  }
  if (callerReady != nullptr) cudaEventDestroy(callerReady);
  if (finished != nullptr) cudaEventDestroy(finished);
  for (cudaStream_t s : {work, down, up}) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
  if (pinned != nullptr) cudaFreeHost(pinned);
  if (scratch != nullptr) cudaFree(scratch);
}

// Streams, events and pinned memory on this rank's device, then the path, agreed with the other ranks.
Status DeviceCollectives::State::setUp(int dev) {
  Status local = useDevice(dev);
  if (local.isOk()) {
    device = dev;
    auto create = [&]() -> Status {
      for (cudaStream_t* s : {&work, &down, &up}) {
        HORA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "creating a stream");
      }
      const unsigned flags = cudaEventDisableTiming;
      HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&callerReady, flags), "creating an event");
      HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&finished, flags), "creating an event");
      for (int i = 0; i < kStages; ++i) {
        HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&downDone[i], flags), "creating an event");
        HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&upDone[i], flags), "creating an event");
      }
      void* p = nullptr;
      HORA_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, kStages * kSegmentBytes, cudaHostAllocPortable),
                                "allocating pinned staging memory");
      pinned = static_cast<uint8_t*>(p);
      return Status::ok();
    };
    local = create();
  }
  SetupInfo mine{};
  if (local.isOk()) {
    cudaDeviceProp prop{};
    cudaError_t e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess) local = cudaFailure("cudaGetDeviceProperties", e);
    else memcpy(mine.uuid, prop.uuid.bytes, sizeof(mine.uuid));
    std::string why = "HORA_NCCL=0";
    nccl = options.nccl ? nccl::load(&why) : nullptr;
    mine.ncclLoaded = nccl != nullptr ? 1 : 0;
    if (nccl == nullptr) HORA_INFO("NCCL not used: %s", why.c_str());
  }
  HORA_RETURN_IF_ERROR(exchangeCodes(ctx, local, "setting up its GPU"));
  return choosePath(mine);
}

Status DeviceCollectives::State::choosePath(const SetupInfo& mine) {
  const int p = ctx.size(), r = ctx.rank();
  std::vector<SetupInfo> all(p);
  all[r] = mine;
  AllgatherOptions o;
  o.output = reinterpret_cast<uint8_t*>(all.data());
  o.bytesPerRank.assign(p, sizeof(SetupInfo));
  HORA_RETURN_IF_ERROR(allgather(ctx, o));
  const Topology& t = ctx.topology();
  bool ncclEverywhere = true, distinct = true;
  for (int a = 0; a < p; ++a) {
    ncclEverywhere = ncclEverywhere && all[a].ncclLoaded != 0;
    for (int b = a + 1; b < p; ++b) {
      if (t.hostOf[a] == t.hostOf[b] && memcmp(all[a].uuid, all[b].uuid, sizeof(all[a].uuid)) == 0) distinct = false;
    }
  }
  // IPC reaches a peer's memory when its GPU is this one or one this GPU can access directly.
  int32_t ipcOk = t.numHosts == 1 && options.transport == TransportChoice::kAuto ? 1 : 0;
  if (ipcOk != 0) {
    int n = 0;
    cudaGetDeviceCount(&n);
    std::vector<std::vector<uint8_t>> uuids(n);
    for (int d = 0; d < n; ++d) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) uuids[d].assign(prop.uuid.bytes, prop.uuid.bytes + 16);
    }
    for (int q = 0; q < p && ipcOk != 0; ++q) {
      if (memcmp(all[q].uuid, mine.uuid, 16) == 0) continue;
      int found = -1;
      for (int d = 0; d < n; ++d) {
        if (uuids[d].size() == 16 && memcmp(uuids[d].data(), all[q].uuid, 16) == 0) found = d;
      }
      int can = 0;
      if (found < 0 || cudaDeviceCanAccessPeer(&can, device, found) != cudaSuccess || can == 0) ipcOk = 0;
    }
    cudaGetLastError();
  }
  HORA_RETURN_IF_ERROR(allAgree(ctx, &ipcOk));

  if (ncclEverywhere && distinct && options.transport == TransportChoice::kAuto && (t.numHosts == 1 || t.uniform())) {
    path = Path::kNccl;
    hierarchical = t.numHosts > 1;
    HORA_RETURN_IF_ERROR(initNccl());
  } else if (ipcOk != 0) {
    path = Path::kIpc;
    ipc.reset(new IpcPath(ctx));
    bool oneGpu = true;
    for (int q = 0; q < p; ++q) oneGpu = oneGpu && memcmp(all[q].uuid, all[0].uuid, sizeof(all[q].uuid)) == 0;
    HORA_RETURN_IF_ERROR(ipc->setUp(device, oneGpu && !options.ipcSlots));
  } else {
    path = Path::kStaged;
  }
  HORA_INFO("device collectives take the %s path (NCCL on every rank: %s, one GPU per rank on each host: %s)",
            pathName(path), ncclEverywhere ? "yes" : "no", distinct ? "yes" : "no");
  return Status::ok();
}

// Polls until the event has happened; NCCL's asynchronous errors abort its communicator and end the wait.
Status DeviceCollectives::State::waitFor(cudaEvent_t ev, const char* what) {
  return waitEvent(ctx, ev, what, [&]() -> Status {
    if (comm == nullptr) return Status::ok();
    nccl::Result async = nccl::kSuccess;
    if (nccl->commGetAsyncError(comm, &async) == nccl::kSuccess && async != nccl::kSuccess && async != nccl::kInProgress) {
      nccl->commAbort(comm);
      comm = nullptr;
      return Status(Code::kInternal, std::string(what) + ": NCCL failed: " + nccl->getErrorString(async));
    }
    return Status::ok();
  });
}

// Orders hora's stream s after everything the caller queued on its stream so far.
Status DeviceCollectives::State::afterCaller(cudaStream_t caller, cudaStream_t s) {
  HORA_CUDA_RETURN_IF_ERROR(cudaEventRecord(callerReady, caller), "recording an event on the buffer's stream");
  HORA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s, callerReady, 0), "ordering after the buffer's stream");
  return Status::ok();
}

// Waits for what hora queued on s, and orders the caller's stream after it.
Status DeviceCollectives::State::finish(cudaStream_t caller, cudaStream_t s, const char* what) {
  HORA_CUDA_RETURN_IF_ERROR(cudaEventRecord(finished, s), "recording an event");
  HORA_RETURN_IF_ERROR(waitFor(finished, what));
  HORA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(caller, finished, 0), "ordering the buffer's stream after the result");
  return Status::ok();
}

uint8_t* DeviceCollectives::State::deviceScratch(size_t bytes, Status* st) {
  if (bytes <= scratchBytes) return static_cast<uint8_t*>(scratch);
  if (scratch != nullptr) cudaFree(scratch);
  scratch = nullptr;
  scratchBytes = 0;
  cudaError_t e = cudaMalloc(&scratch, bytes);
  if (e != cudaSuccess) {
    *st = cudaFailure("allocating " + std::to_string(bytes) + " bytes of device scratch", e);
    scratch = nullptr;
    return nullptr;
  }
  scratchBytes = bytes;
  return static_cast<uint8_t*>(scratch);
}

DeviceCollectives::DeviceCollectives(Context& ctx, const DeviceOptions& options) : state_(new State(ctx, options)) {}

DeviceCollectives::~DeviceCollectives() = default;

const char* DeviceCollectives::path() const { return pathName(state_->path); }

Status DeviceCollectives::run(DeviceWork& w) {
  State& s = *state_;
  HORA_RETURN_IF_ERROR(s.broken);
  if (s.path == Path::kUnset) {
    // Every rank gets the same status from set-up, so every rank stops here alike.
    s.broken = s.setUp(w.device);
    HORA_RETURN_IF_ERROR(s.broken);
  }
  // The path and its resources belong to one GPU; ts/cuda.ts keeps a rank on the device of its first
  // device collective, so a different one here is a bug, reported rather than run on the wrong device.
  if (w.device != s.device) {
    return Status(Code::kInternal, "device collective on GPU " + std::to_string(w.device) + " after GPU " +
                                       std::to_string(s.device) + " was set up for this rank");
  }
  HORA_RETURN_IF_ERROR(useDevice(s.device));
  if (w.kind == Kind::kAllgather) {
    uint64_t total = 0;
    HORA_RETURN_IF_ERROR(allgatherCounts(s.ctx, w.count, dtypeSize(w.dtype), &w.gatheredCounts, &total));
    Status st = allocate(s.device, total * dtypeSize(w.dtype), &w.gatheredDevice);
    HORA_RETURN_IF_ERROR(exchangeCodes(s.ctx, st, "allocating the allgather's result"));
  }
  Status st;
  switch (s.path) {
    case Path::kNccl: st = s.viaNccl(w); break;
    case Path::kIpc: st = s.ipc->collective(w); break;
    default: st = s.viaStaged(w);
  }
  if (!st.isOk() && w.gatheredDevice != nullptr) {
    release(w.gatheredDevice);
    w.gatheredDevice = nullptr;
  }
  return st;
}

}  // namespace cuda
}  // namespace hora

#endif  // HORA_CUDA
