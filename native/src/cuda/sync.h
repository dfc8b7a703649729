// Waiting for the GPU and agreeing across ranks: what every device path (cuda/collectives.cc, cuda/staged.cc,
// cuda/nccl_path.cc, cuda/ipc.cc) does between its copies and kernels. CUDA build only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "common/status.h"
#include "transport/context.h"

namespace hora {
namespace cuda {

// Polls until `ev` has happened. A deadline (HORA_TIMEOUT_S) and an abort of the job end the wait like any
// network wait; `poll`, when given, is asked on every round and ends the wait with its error.
Status waitEvent(Context& ctx, cudaEvent_t ev, const char* what, const std::function<Status()>& poll = {});

// A barrier that also tells every rank whether every other got through `phase`: a rank whose GPU work
// failed says so here, and every rank returns an error together instead of waiting for it.
Status exchangeCodes(Context& ctx, const Status& mine, const char* phase);

// *flag becomes 0 on every rank if it is 0 on any (a min over the ranks).
Status allAgree(Context& ctx, int32_t* flag);

}  // namespace cuda
}  // namespace hora
