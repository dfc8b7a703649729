// The NCCL path of device collectives: NCCL's collectives over every rank on one host; across hosts NCCL
// inside each host and the staged pipeline between them (cuda/staged.cc). cuda/nccl.cc loads libnccl.so.2.
// CUDA build only (the CPU-only build compiles this file to nothing).
#ifdef HORA_CUDA

#include <string>
#include <vector>

#include "algorithms/blocks.h"
#include "algorithms/collectives.h"
#include "algorithms/ring.h"
#include "cuda/kernels.h"
#include "cuda/runtime.h"
#include "cuda/state.h"
#include "cuda/sync.h"

namespace hora {
namespace cuda {
namespace {

nccl::DataType ncclType(DType t) {
  switch (t) {
    case DType::kFloat32: return nccl::kFloat32;
    case DType::kFloat64: return nccl::kFloat64;
    case DType::kFloat16: return nccl::kFloat16;
    case DType::kBFloat16: return nccl::kBfloat16;
    case DType::kInt32: return nccl::kInt32;
    case DType::kInt64: return nccl::kInt64;
    case DType::kUint8: return nccl::kUint8;
    case DType::kInt8:
    case DType::kInt16:
    case DType::kUint16: break;  // host memory only: DeviceBuffer refuses them (ts/device-buffer.ts)
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

Status DeviceCollectives::State::viaNccl(DeviceWork& w) {
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

}  // namespace cuda
}  // namespace hora

#endif  // HORA_CUDA
