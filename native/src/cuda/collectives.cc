#include "cuda/collectives.h"

#ifndef HORA_CUDA

namespace hora {
namespace cuda {

struct DeviceCollectives::State {};

DeviceCollectives::DeviceCollectives(Context&, TransportChoice, bool) {}
DeviceCollectives::~DeviceCollectives() = default;

Status DeviceCollectives::run(Work&) {
  return Status(Code::kInvalidArgument, "device memory given to an addon built without CUDA (npm run build:cuda)");
}

const char* DeviceCollectives::path() const { return "none"; }

}  // namespace cuda
}  // namespace hora

#else


#include <cstring>
#include <functional>
#include <vector>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"
#include "algorithms/ring.h"
#include "common/log.h"
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "cuda/nccl.h"
#include "cuda/ipc.h"
#include "cuda/runtime.h"
#include "cuda/sync.h"

namespace hora {
namespace cuda {
namespace {

enum class Path { kUnset, kNccl, kIpc, kStaged };

const char* pathName(Path p) {
  switch (p) {
    case Path::kNccl: return "nccl";
    case Path::kIpc: return "ipc";
    case Path::kStaged: return "staged";
    case Path::kUnset: break;
  }
  return "none";
}

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

// *flag becomes 0 on every rank if it is 0 on any (a min over the ranks).
Status allAgree(Context& ctx, int32_t* flag) {
  AllreduceOptions o;
  o.data = reinterpret_cast<uint8_t*>(flag);
  o.count = 1;
  o.dtype = DType::kInt32;
  o.op = ReduceOp::kMin;
  return allreduce(ctx, o);
}

nccl::DataType ncclType(DType t) {
  switch (t) {
    case DType::kFloat32: return nccl::kFloat32;
    case DType::kFloat64: return nccl::kFloat64;
    case DType::kFloat16: return nccl::kFloat16;
    case DType::kBFloat16: return nccl::kBfloat16;
    case DType::kInt32: return nccl::kInt32;
    case DType::kInt64: return nccl::kInt64;
    case DType::kUint8: return nccl::kUint8;
  }
  return nccl::kUint8;
}

nccl::RedOp ncclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return nccl::kSum;
    case ReduceOp::kAvg: return nccl::kAvg;
    case ReduceOp::kMin: return nccl::kMin;
    case ReduceOp::kMax: return nccl::kMax;
    case ReduceOp::kProd: return nccl::kProd;
  }
  return nccl::kSum;
}

}  // namespace

struct DeviceCollectives::State {
  Context& ctx;
  TransportChoice transport;
  bool ipcSlots;  // HORA_IPC_SLOTS
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

  State(Context& c, TransportChoice t, bool slots) : ctx(c), transport(t), ipcSlots(slots) {}
  ~State();

  Status setUp(int dev);
  Status choosePath(const SetupInfo& mine);
  Status initNccl();
  Status waitFor(cudaEvent_t ev, const char* what);
  Status afterCaller(cudaStream_t caller, cudaStream_t s);
  Status finish(cudaStream_t caller, cudaStream_t s, const char* what);
  uint8_t* deviceScratch(size_t bytes, Status* st);

  Status staged(uint8_t* data, size_t count, DType dtype, cudaStream_t caller,
                const std::function<Status(uint8_t*, size_t)>& hostReduce);
  Status stagedWhole(Work& w);
  Status viaNccl(Work& w);
};

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
    std::string why;
    nccl = nccl::load(&why);
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
  int32_t ipcOk = t.numHosts == 1 && transport == TransportChoice::kAuto ? 1 : 0;
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

  if (ncclEverywhere && distinct && transport == TransportChoice::kAuto && (t.numHosts == 1 || t.uniform())) {
    path = Path::kNccl;
    hierarchical = t.numHosts > 1;
    HORA_RETURN_IF_ERROR(initNccl());
  } else if (ipcOk != 0) {
    path = Path::kIpc;
    ipc.reset(new IpcPath(ctx));
    bool oneGpu = true;
    for (int q = 0; q < p; ++q) oneGpu = oneGpu && memcmp(all[q].uuid, all[0].uuid, sizeof(all[q].uuid)) == 0;
    HORA_RETURN_IF_ERROR(ipc->setUp(device, oneGpu && !ipcSlots));
  } else {
    path = Path::kStaged;
  }
  HORA_INFO("device collectives take the %s path (NCCL on every rank: %s, one GPU per rank on each host: %s)",
            pathName(path), ncclEverywhere ? "yes" : "no", distinct ? "yes" : "no");
  return Status::ok();
}

// One NCCL communicator over the world (one host) or over each host's ranks; across hosts the ranks with
// the same local rank form a ring for the staged part of the hierarchical allreduce.
Status DeviceCollectives::State::initNccl() {
  const Topology& t = ctx.topology();
  const int p = ctx.size(), r = ctx.rank();
  const int members = hierarchical ? t.hostSizes[t.hostOf[r]] : p;
  const int me = hierarchical ? t.localRankOf[r] : r;
  std::vector<nccl::UniqueId> ids(p);
  nccl::Result res = nccl::kSuccess;
  if (me == 0) res = nccl->getUniqueId(&ids[r]);
  int32_t okFlag = res == nccl::kSuccess ? 1 : 0;
  HORA_RETURN_IF_ERROR(allAgree(ctx, &okFlag));
  if (okFlag == 0) {
    return Status(Code::kInternal, res != nccl::kSuccess ? std::string("ncclGetUniqueId: ") + nccl->getErrorString(res)
                                                         : "ncclGetUniqueId failed on another rank");
  }
  AllgatherOptions o;
  o.output = reinterpret_cast<uint8_t*>(ids.data());
  o.bytesPerRank.assign(p, sizeof(nccl::UniqueId));
  HORA_RETURN_IF_ERROR(allgather(ctx, o));
  int leader = 0;
  if (hierarchical) {
    for (int q = 0; q < p; ++q) {
      if (t.hostOf[q] == t.hostOf[r] && t.localRankOf[q] == 0) leader = q;
    }
    std::vector<int> ring(t.numHosts, -1);
    for (int q = 0; q < p; ++q) {
      if (t.localRankOf[q] == t.localRankOf[r]) ring[t.hostOf[q]] = q;
    }
    const int h = t.hostOf[r], n = t.numHosts;
    crossRing = {ctx.pair(ring[wrapRank(h + 1, n)]), ctx.pair(ring[wrapRank(h - 1, n)]), n, h};
  }
  // Blocks until every member has called it: every rank is here, in the same engine step.
  res = nccl->commInitRank(&comm, members, ids[leader], me);
  Status local = res == nccl::kSuccess ? Status::ok()
                                       : Status(Code::kInternal, std::string("ncclCommInitRank: ") + nccl->getErrorString(res));
  if (!local.isOk()) comm = nullptr;
  return exchangeCodes(ctx, local, "creating its NCCL communicator");
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

// The three-stage pipeline. Segment k's host reduction runs on this thread while the copy engines move
// segment k + 1 down (stream `down`) and segment k - 1 up (stream `up`); a pinned buffer is reused only
// after the upload that read it has finished (stream order through upDone). The reduction itself is
// hora's host allreduce, which combines bytes as they arrive from the network, so the only device work
// is the two copies: less PCIe traffic than shipping every received chunk to the GPU to be reduced there.
Status DeviceCollectives::State::staged(uint8_t* data, size_t count, DType dtype, cudaStream_t caller,
                                        const std::function<Status(uint8_t*, size_t)>& hostReduce) {
  if (count == 0) return Status::ok();
  const size_t elem = dtypeSize(dtype);
  const size_t segCount = kSegmentBytes / elem;
  const size_t segments = (count + segCount - 1) / segCount;
  auto range = [&](size_t k, size_t* off, size_t* n) {
    *off = k * segCount;
    *n = std::min(segCount, count - *off);
  };
  auto download = [&](size_t k) -> Status {
    size_t off, n;
    range(k, &off, &n);
    const int b = static_cast<int>(k % kStages);
    if (k >= kStages) HORA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(down, upDone[b], 0), "ordering the staging buffers");
    HORA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(pinned + b * kSegmentBytes, data + off * elem, n * elem,
                                              cudaMemcpyDeviceToHost, down), "copying a segment to the host");
    HORA_CUDA_RETURN_IF_ERROR(cudaEventRecord(downDone[b], down), "recording an event");
    return Status::ok();
  };
  HORA_RETURN_IF_ERROR(afterCaller(caller, down));
  HORA_RETURN_IF_ERROR(download(0));
  for (size_t k = 0; k < segments; ++k) {
    const int b = static_cast<int>(k % kStages);
    if (k + 1 < segments) HORA_RETURN_IF_ERROR(download(k + 1));
    HORA_RETURN_IF_ERROR(waitFor(downDone[b], "copying a segment to the host"));
    size_t off, n;
    range(k, &off, &n);
    HORA_RETURN_IF_ERROR(hostReduce(pinned + b * kSegmentBytes, n));
    HORA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data + off * elem, pinned + b * kSegmentBytes, n * elem,
                                              cudaMemcpyHostToDevice, up), "copying a segment to the device");
    HORA_CUDA_RETURN_IF_ERROR(cudaEventRecord(upDone[b], up), "recording an event");
  }
  return finish(caller, up, "copying the result to the device");
}

// Broadcast, allgather and reducescatter of device memory without NCCL or IPC: the whole buffer goes
// through host memory once each way, around hora's host collective.
Status DeviceCollectives::State::stagedWhole(Work& w) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t elem = dtypeSize(w.dtype);
  cudaStream_t caller = static_cast<cudaStream_t>(w.stream);
  auto down = [&](uint8_t* dst, const uint8_t* src, size_t bytes) -> Status {
    HORA_RETURN_IF_ERROR(afterCaller(caller, work));
    HORA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, work), "copying to the host");
    HORA_CUDA_RETURN_IF_ERROR(cudaEventRecord(finished, work), "recording an event");
    return waitFor(finished, "copying to the host");
  };
  auto up = [&](uint8_t* dst, const uint8_t* src, size_t bytes) -> Status {
    HORA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, work), "copying to the device");
    return finish(caller, work, "copying to the device");
  };
  switch (w.kind) {
    case Kind::kBroadcast: {
      const size_t bytes = w.count * elem;
      host.resize(bytes);
      if (r == w.root) HORA_RETURN_IF_ERROR(down(host.data(), w.data, bytes));
      BroadcastOptions o;
      o.data = host.data();
      o.bytes = bytes;
      o.root = w.root;
      HORA_RETURN_IF_ERROR(broadcast(ctx, o));
      return r == w.root ? Status::ok() : up(w.data, host.data(), bytes);
    }
    case Kind::kReduceScatter: {
      host.resize(w.count * elem);
      HORA_RETURN_IF_ERROR(down(host.data(), w.data, w.count * elem));
      ReduceScatterOptions o;
      o.data = host.data();
      o.count = w.count;
      o.dtype = w.dtype;
      o.op = w.op;
      HORA_RETURN_IF_ERROR(reduceScatter(ctx, o));
      return up(w.out, host.data() + blockStart(w.count, p, r) * elem, blockCount(w.count, p, r) * elem);
    }
    case Kind::kAllgather: {
      uint64_t total = 0, before = 0;
      for (int q = 0; q < p; ++q) {
        total += w.gatheredCounts[q];
        if (q < r) before += w.gatheredCounts[q];
      }
      host.resize(total * elem);
      if (w.count > 0) HORA_RETURN_IF_ERROR(down(host.data() + before * elem, w.data, w.count * elem));
      AllgatherOptions o;
      o.output = host.data();
      for (int q = 0; q < p; ++q) o.bytesPerRank.push_back(w.gatheredCounts[q] * elem);
      HORA_RETURN_IF_ERROR(allgather(ctx, o));
      return up(static_cast<uint8_t*>(w.gatheredDevice), host.data(), total * elem);
    }
    default: break;
  }
  return Status(Code::kInternal, "stagedWhole: unexpected collective");
}

Status DeviceCollectives::State::viaNccl(Work& w) {
  const int p = ctx.size(), r = ctx.rank();
  const size_t elem = dtypeSize(w.dtype);
  cudaStream_t caller = static_cast<cudaStream_t>(w.stream);
  const nccl::DataType type = ncclType(w.dtype);
  auto check = [&](nccl::Result res, const char* what) -> Status {
    if (res == nccl::kSuccess || res == nccl::kInProgress) return Status::ok();
    return Status(Code::kInternal, std::string(what) + ": " + nccl->getErrorString(res));
  };
  HORA_RETURN_IF_ERROR(afterCaller(caller, work));
  if (!hierarchical) {
    switch (w.kind) {
      case Kind::kAllreduce:
        HORA_RETURN_IF_ERROR(check(nccl->allReduce(w.data, w.data, w.count, type, ncclOp(w.op), comm, work), "ncclAllReduce"));
        break;
      case Kind::kBroadcast:
        HORA_RETURN_IF_ERROR(check(nccl->broadcast(w.data, w.data, w.count, type, w.root, comm, work), "ncclBroadcast"));
        break;
      case Kind::kReduceScatter: {
        // NCCL cuts equal blocks; hora's first count % p blocks are one longer. Equal counts go straight
        // through; otherwise the full allreduce and a copy of this rank's block.
        if (w.count % p == 0) {
          HORA_RETURN_IF_ERROR(check(nccl->reduceScatter(w.data, w.out, w.count / p, type, ncclOp(w.op), comm, work),
                                     "ncclReduceScatter"));
        } else {
          Status st;
          uint8_t* tmp = deviceScratch(w.count * elem, &st);
          HORA_RETURN_IF_ERROR(st);
          HORA_RETURN_IF_ERROR(check(nccl->allReduce(w.data, tmp, w.count, type, ncclOp(w.op), comm, work), "ncclAllReduce"));
          HORA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(w.out, tmp + blockStart(w.count, p, r) * elem,
                                                    blockCount(w.count, p, r) * elem, cudaMemcpyDeviceToDevice, work),
                                    "copying this rank's block");
        }
        break;
      }
      case Kind::kAllgather: {
        // Ranks may give different counts: one broadcast per rank, grouped.
        uint8_t* out = static_cast<uint8_t*>(w.gatheredDevice);
        HORA_RETURN_IF_ERROR(check(nccl->groupStart(), "ncclGroupStart"));
        size_t at = 0;
        for (int q = 0; q < p; ++q) {
          const void* src = q == r ? static_cast<const void*>(w.data) : out + at * elem;
          nccl->broadcast(src, out + at * elem, w.gatheredCounts[q], type, q, comm, work);
          at += w.gatheredCounts[q];
        }
        HORA_RETURN_IF_ERROR(check(nccl->groupEnd(), "ncclGroupEnd"));
        break;
      }
      default: return Status(Code::kInternal, "nccl: unexpected collective");
    }
    return finish(caller, work, "the NCCL collective");
  }
  if (w.kind != Kind::kAllreduce) {
    // Across hosts NCCL only carries the allreduce; the others go through host memory.
    return stagedWhole(w);
  }
  // Hierarchical allreduce: reduce-scatter in the host (NCCL), allreduce of this rank's shard with the
  // same shard on the other hosts (staged, over the network), allgather in the host (NCCL). The tail that
  // does not divide by the host's ranks goes through the staged world allreduce.
  const Topology& t = ctx.topology();
  const int local = t.hostSizes[t.hostOf[r]];
  const size_t shard = w.count / local, body = shard * local, tail = w.count - body;
  const ReduceOp inner = w.op == ReduceOp::kAvg ? ReduceOp::kSum : w.op;
  if (shard > 0) {
    Status st;
    uint8_t* part = deviceScratch(shard * elem, &st);
    HORA_RETURN_IF_ERROR(st);
    HORA_RETURN_IF_ERROR(check(nccl->reduceScatter(w.data, part, shard, type, ncclOp(inner), comm, work), "ncclReduceScatter"));
    HORA_RETURN_IF_ERROR(staged(part, shard, w.dtype, work, [&](uint8_t* seg, size_t n) {
      HORA_RETURN_IF_ERROR(ringReduceScatter(ctx, crossRing, seg, n, w.dtype, inner));
      return ringAllgather(ctx, crossRing, seg, n, w.dtype);
    }));
    if (w.op == ReduceOp::kAvg) {
      const void* src = part;
      HORA_CUDA_RETURN_IF_ERROR(reduceSources(ReduceOp::kAvg, w.dtype, part, &src, 1, shard, p, work), "scaling for avg");
    }
    HORA_RETURN_IF_ERROR(check(nccl->allGather(part, w.data, shard, type, comm, work), "ncclAllGather"));
    HORA_RETURN_IF_ERROR(finish(caller, work, "the hierarchical allreduce"));
  }
  if (tail > 0) {
    AllreduceOptions o;
    o.dtype = w.dtype;
    o.op = w.op;
    HORA_RETURN_IF_ERROR(staged(w.data + body * elem, tail, w.dtype, caller, [&](uint8_t* seg, size_t n) {
      o.data = seg;
      o.count = n;
      return allreduce(ctx, o);
    }));
  }
  return Status::ok();
}

DeviceCollectives::DeviceCollectives(Context& ctx, TransportChoice transport, bool ipcSlots)
    : state_(new State(ctx, transport, ipcSlots)) {}

DeviceCollectives::~DeviceCollectives() = default;

const char* DeviceCollectives::path() const { return pathName(state_->path); }

Status DeviceCollectives::run(Work& w) {
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
    case Path::kIpc: st = s.ipc->run(w); break;
    default:
      if (w.kind == Kind::kAllreduce) {
        AllreduceOptions o;
        o.dtype = w.dtype;
        o.op = w.op;
        o.algorithm = w.algorithm;
        st = s.staged(w.data, w.count, w.dtype, static_cast<cudaStream_t>(w.stream), [&](uint8_t* seg, size_t n) {
          o.data = seg;
          o.count = n;
          return allreduce(s.ctx, o);
        });
      } else {
        st = s.stagedWhole(w);
      }
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
