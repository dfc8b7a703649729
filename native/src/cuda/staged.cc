// The staged path of device collectives: the buffer goes through pinned host memory around hora's host
// collectives, for ranks that neither NCCL nor CUDA IPC connects (several hosts without NCCL, or
// HORA_TRANSPORT=tcp). The NCCL path's hierarchical allreduce runs its part between hosts through staged()
// too. CUDA build only (the CPU-only build compiles this file to nothing).
#ifdef HORA_CUDA

#include <functional>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"
#include "cuda/runtime.h"
#include "cuda/state.h"

namespace hora {
namespace cuda {

// Allreduce: the three-stage pipeline over the host allreduce; the others through host memory whole.
Status DeviceCollectives::State::viaStaged(DeviceWork& w) {
  if (w.kind != Kind::kAllreduce) return stagedWhole(w);
  AllreduceOptions o;
  o.dtype = w.dtype;
  o.op = w.op;
  o.algorithm = w.algorithm;
  return staged(w.data, w.count, w.dtype, static_cast<cudaStream_t>(w.stream), [&](uint8_t* seg, size_t n) {
    o.data = seg;
    o.count = n;
    return allreduce(ctx, o);
  });
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
Status DeviceCollectives::State::stagedWhole(DeviceWork& w) {
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

}  // namespace cuda
}  // namespace hora

#endif  // HORA_CUDA
