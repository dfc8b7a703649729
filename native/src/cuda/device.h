// CUDA devices and device memory, as the binding and the engine see them.
//
// This header and its functions exist in every build. The CPU-only build (no HORA_CUDA) answers
// built() == false and fails every other call with a status that says how to get a CUDA build; the CUDA
// build links the runtime statically and still loads on a machine without a driver or a GPU, where
// available() is false and unavailableReason() says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/types.h"

namespace hora {
namespace cuda {

// Compiled with CUDA (npm run build:cuda).
bool built();
// built(), a driver, and at least one device visible to this process.
bool available();
// Devices visible to this process; 0 when !available().
int deviceCount();
// Why available() is false ("" when it is true).
std::string unavailableReason();

// Device memory owned by hora. allocate() returns zero-filled memory.
Status allocate(int device, size_t bytes, void** ptr);
// Frees memory from allocate(); anything else (a pointer hora did not allocate, one already freed) is an
// error, never undefined behaviour.
Status release(void* ptr);

// Synchronous copies between host memory and device memory of `device`, ordered after the work already
// queued on `stream` (nullptr: the legacy default stream).
Status copyToHost(void* dst, const void* src, size_t bytes, int device, void* stream);
Status copyFromHost(void* dst, const void* src, size_t bytes, int device, void* stream);

// For wrap(): checks that [ptr, ptr + bytes) is device (or managed) memory of `device` inside one
// allocation, and that `stream`, when not null, is a stream of that device. Error status says what is wrong.
Status checkRange(const void* ptr, size_t bytes, int device, void* stream);

// Element-wise conversion on the device between float32 and float16 / bfloat16 (either direction), or a
// plain copy when from == to. dst and src are device memory of `device`; synchronous on `stream`.
Status cast(int device, const void* src, DType from, void* dst, DType to, size_t count, void* stream);

}  // namespace cuda
}  // namespace hora
