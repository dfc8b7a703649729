// cuda/sync.h; CUDA build only (the CPU-only build compiles this file to nothing).
#ifdef HORA_CUDA

#include "cuda/sync.h"

#include <sched.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "common/clock.h"
#include "cuda/runtime.h"

namespace hora {
namespace cuda {

Status waitEvent(Context& ctx, cudaEvent_t ev, const char* what, const std::function<Status()>& poll) {
  Deadline deadline(ctx.timeoutMs());
  for (int spins = 0;; ++spins) {
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return Status::ok();
    if (e != cudaErrorNotReady) return cudaFailure(what, e);
    if (poll) HORA_RETURN_IF_ERROR(poll());
    if (ctx.aborted()) return ctx.abortReason();
    if (deadline.expired()) {
      return Status(Code::kTimeout, std::string(what) + " did not finish on the GPU within " +
                                        std::to_string(ctx.timeoutMs() / 1000) + " s (HORA_TIMEOUT_S)");
    }
    if (spins < 1000) sched_yield();
    else usleep(50);
  }
}

Status exchangeCodes(Context& ctx, const Status& mine, const char* phase) {
  const int p = ctx.size(), r = ctx.rank();
  std::vector<int32_t> codes(p, 0);
  codes[r] = static_cast<int32_t>(mine.code());
  AllgatherOptions o;
  o.output = reinterpret_cast<uint8_t*>(codes.data());
  o.bytesPerRank.assign(p, sizeof(int32_t));
  HORA_RETURN_IF_ERROR(allgather(ctx, o));
  if (!mine.isOk()) return mine;
  for (int q = 0; q < p; ++q) {
    if (codes[q] != 0) {
      return Status(static_cast<Code>(codes[q]), "rank " + std::to_string(q) + " failed " + phase + " (its error is in its log)", q);
    }
  }
  return Status::ok();
}

Status allAgree(Context& ctx, int32_t* flag) {
  AllreduceOptions o;
  o.data = reinterpret_cast<uint8_t*>(flag);
  o.count = 1;
  o.dtype = DType::kInt32;
  o.op = ReduceOp::kMin;
  return allreduce(ctx, o);
}

}  // namespace cuda
}  // namespace hora

#endif  // HORA_CUDA
