// cuda/device.h. The CUDA build's implementation is below the #else; the CPU-only build gets the first
// part, where every call says how to get a CUDA build.
#include "cuda/device.h"

#ifndef HORA_CUDA

namespace hora {
namespace cuda {
namespace {

Status notBuilt() {
  return Status(Code::kInvalidArgument,
                "this hora addon was built without CUDA; build one with `npm run build:cuda` (needs nvcc and cmake)");
}

}  // namespace

bool built() { return false; }
bool available() { return false; }
int deviceCount() { return 0; }
std::string unavailableReason() { return notBuilt().message(); }
Status allocate(int, size_t, void**) { return notBuilt(); }
Status release(void*) { return notBuilt(); }
Status copyToHost(void*, const void*, size_t, int, void*) { return notBuilt(); }
Status copyFromHost(void*, const void*, size_t, int, void*) { return notBuilt(); }
Status checkRange(const void*, size_t, int, void*) { return notBuilt(); }
Status cast(int, const void*, DType, void*, DType, size_t, void*) { return notBuilt(); }

}  // namespace cuda
}  // namespace hora

#else
#endif
