// cuda/ipc.h; CUDA build only (the CPU-only build compiles this file to nothing).
#ifdef HORA_CUDA

#include "cuda/ipc.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"
#include "cuda/kernels.h"
#include "cuda/runtime.h"
#include "cuda/sync.h"

namespace hora {
namespace cuda {
namespace {

// What each rank tells the others at set-up: the handles of its staging area and of its events, and
// whether it got this far.
struct SetupEntry {
  cudaIpcMemHandle_t staging;
  cudaIpcEventHandle_t events[6];
  int32_t code;  // Code of this rank's failure so far, 0 when none
  int32_t pad;
};

// What each rank tells rank 0 on the one-GPU algorithm: the allocations holding the buffer the collective
// reads and the one it writes (when it is another), and whether it got this far.
struct Share {
  cudaIpcMemHandle_t in, out;
  uint64_t inOffset, outOffset;
  int32_t code;  // Code of this rank's failure so far, 0 when none
  int32_t pad;
};

}  // namespace

IpcPath::~IpcPath() {
  if (device_ < 0) return;
  cudaSetDevice(device_);
  const int r = ctx_.rank();
  for (size_t q = 0; q < base_.size(); ++q) {
    if (base_[q] == nullptr) continue;
    if (static_cast<int>(q) == r) cudaFree(base_[q]);
    else cudaIpcCloseMemHandle(base_[q]);
  }
  for (auto& list : mappings_) {
    for (Mapping& m : list) cudaIpcCloseMemHandle(m.base);
  }
  // Own events and opened peers' events alike are released with cudaEventDestroy.
  for (auto& evs : events_) {
    for (cudaEvent_t e : evs) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }
  if (callerReady_ != nullptr) cudaEventDestroy(callerReady_);
  if (finished_ != nullptr) cudaEventDestroy(finished_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

Status IpcPath::setUp(int device, bool oneGpu) {
  const int p = ctx_.size(), r = ctx_.rank();
  device_ = device;
  oneGpu_ = oneGpu;
  if (oneGpu_) {
    mappings_.assign(p, {});
    auto create = [&]() -> Status {
      HORA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
      HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&callerReady_, cudaEventDisableTiming), "creating an event");
      HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&finished_, cudaEventDisableTiming), "creating an event");
      return Status::ok();
    };
    return exchangeCodes(ctx_, create(), "setting up the IPC path");
  }
  base_.assign(p, nullptr);
  events_.assign(p, std::vector<cudaEvent_t>(kSlots * kEvents, nullptr));
  std::vector<SetupEntry> entries(p);
  SetupEntry& mine = entries[r];
  auto create = [&]() -> Status {
    HORA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
    HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&callerReady_, cudaEventDisableTiming), "creating an event");
    HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&finished_, cudaEventDisableTiming), "creating an event");
    void* p0 = nullptr;
    HORA_CUDA_RETURN_IF_ERROR(cudaMalloc(&p0, kSlots * kIpcSlotBytes),
                              "allocating " + std::to_string((kSlots * kIpcSlotBytes) >> 20) + " MiB of IPC staging slots");
    base_[r] = static_cast<uint8_t*>(p0);
    HORA_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&mine.staging, p0), "cudaIpcGetMemHandle of the staging slots");
    for (int i = 0; i < kSlots * kEvents; ++i) {
      HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&events_[r][i], cudaEventDisableTiming | cudaEventInterprocess),
                                "creating an interprocess event");
      HORA_CUDA_RETURN_IF_ERROR(cudaIpcGetEventHandle(&mine.events[i], events_[r][i]), "cudaIpcGetEventHandle");
    }
    return Status::ok();
  };
  static_assert(sizeof(SetupEntry::events) / sizeof(cudaIpcEventHandle_t) == kSlots * kEvents, "one handle per event");
  Status local = create();
  mine.code = static_cast<int32_t>(local.code());
  AllgatherOptions o;
  o.output = reinterpret_cast<uint8_t*>(entries.data());
  o.bytesPerRank.assign(p, sizeof(SetupEntry));
  HORA_RETURN_IF_ERROR(::hora::allgather(ctx_, o));
  if (!local.isOk()) return local;
  for (int q = 0; q < p; ++q) {
    if (entries[q].code != 0) {
      return Status(static_cast<Code>(entries[q].code), "rank " + std::to_string(q) + " could not set up its IPC staging slots", q);
    }
  }
  auto open = [&]() -> Status {
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      void* b = nullptr;
      HORA_CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&b, entries[q].staging, cudaIpcMemLazyEnablePeerAccess),
                                "opening rank " + std::to_string(q) + "'s staging slots (cudaIpcOpenMemHandle)");
      base_[q] = static_cast<uint8_t*>(b);
      for (int i = 0; i < kSlots * kEvents; ++i) {
        HORA_CUDA_RETURN_IF_ERROR(cudaIpcOpenEventHandle(&events_[q][i], entries[q].events[i]),
                                  "opening rank " + std::to_string(q) + "'s events (cudaIpcOpenEventHandle)");
      }
    }
    return Status::ok();
  };
  return exchangeCodes(ctx_, open(), "opening the peers' IPC staging slots");
}

void IpcPath::copy(void* dst, const void* src, size_t bytes, Status* local) {
  if (!local->isOk() || bytes == 0) return;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_);
  if (e != cudaSuccess) *local = cudaFailure("copying through the IPC staging slots", e);
}

void IpcPath::record(int s, Ev e, Status* local) {
  if (!local->isOk()) return;
  cudaError_t err = cudaEventRecord(event(ctx_.rank(), s, e), stream_);
  if (err != cudaSuccess) *local = cudaFailure("recording an interprocess event", err);
}

void IpcPath::waitFor(int s, Ev e, int rank, Status* local) {
  if (!local->isOk()) return;
  cudaError_t err = cudaStreamWaitEvent(stream_, event(rank, s, e), 0);
  if (err != cudaSuccess) *local = cudaFailure("waiting for rank " + std::to_string(rank) + "'s event", err);
}

Status IpcPath::barrier(Status* local, const char* phase) { return exchangeCodes(ctx_, *local, phase); }

Status IpcPath::begin(int s, const uint8_t* src, size_t bytes, Status* local) {
  const int p = ctx_.size(), r = ctx_.rank();
  for (int q = 0; q < p; ++q) {
    if (q != r) waitFor(s, kDone, q, local);
  }
  copy(slot(r, s), src, bytes, local);
  record(s, kReady, local);
  return barrier(local, "copying into its staging slot");
}

// Steps of whole elements, at most one slot each.
Status IpcPath::allreduce(DeviceWork& w, Status* local) {
  const int p = ctx_.size(), r = ctx_.rank();
  const size_t elem = dtypeSize(w.dtype), perStep = kIpcSlotBytes / elem;
  for (size_t off = 0; off < w.count; off += perStep) {
    const size_t n = std::min(perStep, w.count - off);
    const int s = static_cast<int>(step_++ % kSlots);
    uint8_t* data = w.data + off * elem;
    HORA_RETURN_IF_ERROR(begin(s, data, n * elem, local));
    for (int q = 0; q < p; ++q) {
      if (q != r) waitFor(s, kReady, q, local);
    }
    std::vector<const void*> srcs(p);
    if (n * elem <= kIpcOneShotBytes) {
      for (int q = 0; q < p; ++q) srcs[q] = slot(q, s);
      if (local->isOk()) {
        cudaError_t e = reduceSources(w.op, w.dtype, data, srcs.data(), p, n, p, stream_);
        if (e != cudaSuccess) *local = cudaFailure("the reduction kernel", e);
      }
    } else {
      const size_t start = blockStart(n, p, r), bn = blockCount(n, p, r);
      for (int q = 0; q < p; ++q) srcs[q] = slot(q, s) + start * elem;
      if (local->isOk() && bn > 0) {
        cudaError_t e = reduceSources(w.op, w.dtype, data + start * elem, srcs.data(), p, bn, p, stream_);
        if (e != cudaSuccess) *local = cudaFailure("the reduction kernel", e);
      }
      // Peers read only their own blocks of this slot in the reduction, never this one.
      copy(slot(r, s) + start * elem, data + start * elem, bn * elem, local);
      record(s, kReduced, local);
      HORA_RETURN_IF_ERROR(barrier(local, "the reduction of its block"));
      for (int q = 0; q < p; ++q) {
        if (q == r) continue;
        waitFor(s, kReduced, q, local);
        const size_t qs = blockStart(n, p, q);
        copy(data + qs * elem, slot(q, s) + qs * elem, blockCount(n, p, q) * elem, local);
      }
    }
    record(s, kDone, local);
  }
  return Status::ok();
}

// Steps over the whole buffer; each rank reduces the part of its block that the step holds.
Status IpcPath::reduceScatter(DeviceWork& w, Status* local) {
  const int p = ctx_.size(), r = ctx_.rank();
  const size_t elem = dtypeSize(w.dtype), perStep = kIpcSlotBytes / elem;
  const size_t mineStart = blockStart(w.count, p, r), mineEnd = mineStart + blockCount(w.count, p, r);
  std::vector<const void*> srcs(p);
  for (size_t off = 0; off < w.count; off += perStep) {
    const size_t n = std::min(perStep, w.count - off);
    const int s = static_cast<int>(step_++ % kSlots);
    HORA_RETURN_IF_ERROR(begin(s, w.data + off * elem, n * elem, local));
    const size_t a = std::max(off, mineStart), b = std::min(off + n, mineEnd);
    if (a < b) {
      for (int q = 0; q < p; ++q) {
        if (q != r) waitFor(s, kReady, q, local);
        srcs[q] = slot(q, s) + (a - off) * elem;
      }
      if (local->isOk()) {
        cudaError_t e = reduceSources(w.op, w.dtype, w.out + (a - mineStart) * elem, srcs.data(), p, b - a, p, stream_);
        if (e != cudaSuccess) *local = cudaFailure("the reduction kernel", e);
      }
    }
    record(s, kDone, local);
  }
  return Status::ok();
}

Status IpcPath::broadcast(DeviceWork& w, Status* local) {
  const int r = ctx_.rank();
  const size_t elem = dtypeSize(w.dtype), perStep = kIpcSlotBytes / elem;
  for (size_t off = 0; off < w.count; off += perStep) {
    const size_t n = std::min(perStep, w.count - off);
    const int s = static_cast<int>(step_++ % kSlots);
    uint8_t* data = w.data + off * elem;
    HORA_RETURN_IF_ERROR(begin(s, data, r == w.root ? n * elem : 0, local));
    if (r != w.root) {
      waitFor(s, kReady, w.root, local);
      copy(data, slot(w.root, s), n * elem, local);
    }
    record(s, kDone, local);
  }
  return Status::ok();
}

// Rank q contributes gatheredCounts[q] elements; step k moves bytes [k, k + 1) x slot of every rank's.
Status IpcPath::allgather(DeviceWork& w, Status* local) {
  const int p = ctx_.size(), r = ctx_.rank();
  const size_t elem = dtypeSize(w.dtype);
  std::vector<size_t> at(p, 0), bytes(p, 0);
  size_t longest = 0;
  for (int q = 0; q < p; ++q) {
    bytes[q] = static_cast<size_t>(w.gatheredCounts[q]) * elem;
    if (q > 0) at[q] = at[q - 1] + bytes[q - 1];
    longest = std::max(longest, bytes[q]);
  }
  uint8_t* out = static_cast<uint8_t*>(w.gatheredDevice);
  for (size_t off = 0; off < longest; off += kIpcSlotBytes) {
    const int s = static_cast<int>(step_++ % kSlots);
    auto piece = [&](int q) { return bytes[q] > off ? std::min(kIpcSlotBytes, bytes[q] - off) : size_t(0); };
    HORA_RETURN_IF_ERROR(begin(s, w.data + off, piece(r), local));
    for (int q = 0; q < p; ++q) {
      if (piece(q) == 0) continue;
      if (q != r) waitFor(s, kReady, q, local);
      copy(out + at[q] + off, slot(q, s), piece(q), local);
    }
    record(s, kDone, local);
  }
  return Status::ok();
}

Status IpcPath::collective(DeviceWork& w) { return oneGpu_ ? runOneGpu(w) : runSlots(w); }

Status IpcPath::callerIdle(cudaStream_t caller) {
  // A stream with nothing queued answers on the host; recording an event would queue work for this
  // process on the GPU, and with it a switch between processes.
  cudaError_t e = cudaStreamQuery(caller);
  if (e == cudaSuccess) return Status::ok();
  if (e != cudaErrorNotReady) return cudaFailure("querying the buffer's stream", e);
  HORA_CUDA_RETURN_IF_ERROR(cudaEventRecord(callerReady_, caller), "recording an event on the buffer's stream");
  return waitEvent(ctx_, callerReady_, "the work queued on the buffer's stream");
}

uint8_t* IpcPath::mapped(int peer, const cudaIpcMemHandle_t& handle, Status* local) {
  if (!local->isOk()) return nullptr;
  std::vector<Mapping>& list = mappings_[peer];
  for (Mapping& m : list) {
    if (memcmp(&m.handle, &handle, sizeof(handle)) == 0) {
      m.lastUse = ++uses_;
      return m.base;
    }
  }
  if (list.size() >= kIpcMappingsPerPeer) {
    // Nothing is in flight: every collective waits for its GPU work before it returns.
    auto oldest = std::min_element(list.begin(), list.end(), [](const Mapping& a, const Mapping& b) { return a.lastUse < b.lastUse; });
    cudaIpcCloseMemHandle(oldest->base);
    list.erase(oldest);
  }
  void* b = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&b, handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    *local = cudaFailure("opening rank " + std::to_string(peer) + "'s buffer (cudaIpcOpenMemHandle)", e);
    return nullptr;
  }
  list.push_back(Mapping{handle, static_cast<uint8_t*>(b), ++uses_});
  return static_cast<uint8_t*>(b);
}

Status IpcPath::runOneGpu(DeviceWork& w) {
  const int p = ctx_.size(), r = ctx_.rank();
  const size_t elem = dtypeSize(w.dtype);
  // Bytes of rank q's input and of its output (where the output is another buffer).
  std::vector<size_t> inBytes(p, w.count * elem), outBytes(p, 0);
  size_t total = 0;
  for (int q = 0; q < p; ++q) {
    if (w.kind == Kind::kAllgather) {
      inBytes[q] = static_cast<size_t>(w.gatheredCounts[q]) * elem;
      total += inBytes[q];
    } else if (w.kind == Kind::kReduceScatter) {
      outBytes[q] = blockCount(w.count, p, q) * elem;
    }
  }
  if (w.kind == Kind::kAllgather) outBytes.assign(p, total);
  uint8_t* in = w.data;
  uint8_t* out = w.kind == Kind::kReduceScatter ? w.out : static_cast<uint8_t*>(w.gatheredDevice);

  std::vector<Share> shares(p);
  Share& mine = shares[r];
  Status local = callerIdle(static_cast<cudaStream_t>(w.stream));
  auto share = [&](uint8_t* ptr, size_t bytes, cudaIpcMemHandle_t* handle, uint64_t* offset) -> Status {
    if (r == 0 || ptr == nullptr || bytes == 0) return Status::ok();
    const void* base = nullptr;
    size_t size = 0;
    HORA_RETURN_IF_ERROR(baseOf(ptr, &base, &size));
    *offset = static_cast<uint64_t>(ptr - static_cast<const uint8_t*>(base));
    HORA_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(handle, const_cast<void*>(base)), "cudaIpcGetMemHandle");
    return Status::ok();
  };
  if (local.isOk()) local = share(in, inBytes[r], &mine.in, &mine.inOffset);
  if (local.isOk()) local = share(out, outBytes[r], &mine.out, &mine.outOffset);
  mine.code = static_cast<int32_t>(local.code());
  AllgatherOptions o;
  o.output = reinterpret_cast<uint8_t*>(shares.data());
  o.bytesPerRank.assign(p, sizeof(Share));
  HORA_RETURN_IF_ERROR(::hora::allgather(ctx_, o));
  if (!local.isOk()) return local;
  for (int q = 0; q < p; ++q) {
    if (shares[q].code != 0) return Status(static_cast<Code>(shares[q].code), "rank " + std::to_string(q) + " could not share its buffer", q);
  }

  if (r == 0) {
    std::vector<uint8_t*> ins(p, nullptr), outs(p, nullptr);
    ins[0] = in;
    outs[0] = out;
    for (int q = 1; q < p; ++q) {
      if (inBytes[q] > 0) {
        uint8_t* b = mapped(q, shares[q].in, &local);
        if (b != nullptr) ins[q] = b + shares[q].inOffset;
      }
      if (outBytes[q] > 0) {
        uint8_t* b = mapped(q, shares[q].out, &local);
        if (b != nullptr) outs[q] = b + shares[q].outOffset;
      }
    }
    auto reduce = [&](uint8_t* dst, size_t start, size_t n) {
      if (!local.isOk() || n == 0) return;
      std::vector<const void*> srcs(p);
      for (int q = 0; q < p; ++q) srcs[q] = ins[q] + start * elem;
      cudaError_t e = reduceSources(w.op, w.dtype, dst, srcs.data(), p, n, p, stream_);
      if (e != cudaSuccess) local = cudaFailure("the reduction kernel", e);
    };
    switch (w.kind) {
      case Kind::kAllreduce:
        // Into rank 0's buffer (the first source, which the kernel may overwrite), then to the others.
        reduce(ins[0], 0, w.count);
        for (int q = 1; q < p; ++q) copy(ins[q], ins[0], inBytes[q], &local);
        break;
      case Kind::kReduceScatter:
        for (int q = 0; q < p; ++q) reduce(outs[q], blockStart(w.count, p, q), blockCount(w.count, p, q));
        break;
      case Kind::kBroadcast:
        for (int q = 0; q < p; ++q) {
          if (q != w.root) copy(ins[q], ins[w.root], inBytes[q], &local);
        }
        break;
      case Kind::kAllgather: {
        size_t at = 0;
        for (int q = 0; q < p; ++q) {
          copy(outs[0] + at, ins[q], inBytes[q], &local);
          at += inBytes[q];
        }
        for (int q = 1; q < p; ++q) copy(outs[q], outs[0], total, &local);
        break;
      }
      default:
        local = Status(Code::kInternal, "ipc: unexpected collective");
    }
    if (local.isOk()) {
      cudaError_t e = cudaEventRecord(finished_, stream_);
      local = e == cudaSuccess ? waitEvent(ctx_, finished_, "the collective on the GPU") : cudaFailure("recording an event", e);
    }
  }
  // Rank 0's GPU work is done (or failed) when the barrier lets the others go.
  return exchangeCodes(ctx_, local, "the collective on the GPU");
}

Status IpcPath::runSlots(DeviceWork& w) {
  cudaStream_t caller = static_cast<cudaStream_t>(w.stream);
  Status local;
  cudaError_t e = cudaEventRecord(callerReady_, caller);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, callerReady_, 0);
  if (e != cudaSuccess) local = cudaFailure("ordering after the buffer's stream", e);
  Status st;
  switch (w.kind) {
    case Kind::kAllreduce: st = allreduce(w, &local); break;
    case Kind::kReduceScatter: st = reduceScatter(w, &local); break;
    case Kind::kBroadcast: st = broadcast(w, &local); break;
    case Kind::kAllgather: st = allgather(w, &local); break;
    default: local = Status(Code::kInternal, "ipc: unexpected collective");
  }
  // A failed barrier inside a step has already ended the collective on every rank.
  HORA_RETURN_IF_ERROR(st);
  if (local.isOk()) {
    e = cudaEventRecord(finished_, stream_);
    local = e == cudaSuccess ? waitEvent(ctx_, finished_, "the collective on the GPU")
                             : cudaFailure("recording an event", e);
  }
  HORA_RETURN_IF_ERROR(exchangeCodes(ctx_, local, "its part of the collective on the GPU"));
  HORA_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(caller, finished_, 0), "ordering the buffer's stream after the result");
  return Status::ok();
}

}  // namespace cuda
}  // namespace hora

#endif  // HORA_CUDA
