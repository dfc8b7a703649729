// cuda/collectives.h without CUDA: the CPU-only build's DeviceCollectives refuses device memory (the CUDA
// build compiles this file to nothing and the paths instead: cuda/collectives.cc and the files it names).
#ifndef HORA_CUDA

#include "cuda/collectives.h"

namespace hora {
namespace cuda {

struct DeviceCollectives::State {};

DeviceCollectives::DeviceCollectives(Context&, const DeviceOptions&) {}
DeviceCollectives::~DeviceCollectives() = default;

Status DeviceCollectives::run(DeviceWork&) {
  return Status(Code::kInvalidArgument, "device memory given to an addon built without CUDA (npm run build:cuda)");
}

const char* DeviceCollectives::path() const { return "none"; }

}  // namespace cuda
}  // namespace hora

#endif  // !HORA_CUDA
