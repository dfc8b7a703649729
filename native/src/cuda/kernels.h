// Reduction and conversion kernels on the device (kernels.cu). CUDA build only.
//
// Float16 and bfloat16 are accumulated in float32 across all sources and rounded to nearest even once, at
// the end; avg divides the sum by `avgDivisor` inside the same kernel (no second pass). Integers wrap like
// the CPU kernels; NaN handling of min/max matches reduce/reduce.h (NaN in either operand gives the
// canonical quiet NaN). Loads and stores are 16 bytes wide when every pointer is 16-byte aligned.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "common/types.h"

namespace hora {
namespace cuda {

// Most sources one kernel launch reads; reduceSources() chains launches beyond it.
constexpr int kMaxReduceSources = 16;

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], combined in that order (so every caller that
// passes the same sources gets the same bits). For kAvg the sum is divided by avgDivisor (> 0); for the
// other ops avgDivisor is ignored. dst may alias any of the first kMaxReduceSources sources (beyond them a
// launch would read a partial result: cudaErrorInvalidValue). All pointers are device memory readable from
// the current device (own allocations or opened IPC handles). Queued on stream; returns the launch error.
cudaError_t reduceSources(ReduceOp op, DType dtype, void* dst, const void* const* srcs, int n, size_t count,
                          int avgDivisor, cudaStream_t stream);

// dst[i] = convert(src[i]) between float32 and float16 / bfloat16, either direction (rounded to nearest
// even towards the narrow type). Other pairs: cudaErrorInvalidValue.
cudaError_t convert(DType from, const void* src, DType to, void* dst, size_t count, cudaStream_t stream);

}  // namespace cuda
}  // namespace hora
