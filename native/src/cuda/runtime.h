// Helpers shared by the CUDA build's sources (not part of the device API in device.h).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace hora {
namespace cuda {

// "cudaErrorInvalidValue (invalid argument)"
std::string errorText(cudaError_t e);
// kInternal with `what` and the error's name; clears the thread's last (non-sticky) error.
Status cudaFailure(const std::string& what, cudaError_t e);
// Makes `device` current on the calling thread, after checking that it exists.
Status useDevice(int device);
// The allocation holding ptr: its base address and size.
Status baseOf(const void* ptr, const void** base, size_t* size);

#define HORA_CUDA_RETURN_IF_ERROR(call, what)                                 \
  do {                                                                        \
    cudaError_t hora_cuda_error_ = (call);                                    \
    if (hora_cuda_error_ != cudaSuccess) return ::hora::cuda::cudaFailure((what), hora_cuda_error_); \
  } while (0)

}  // namespace cuda
}  // namespace hora
