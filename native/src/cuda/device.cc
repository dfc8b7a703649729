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

#include <cuda.h>  // CUdeviceptr / CUresult, for cuMemGetAddressRange reached through the runtime
#include <cuda_runtime_api.h>

#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "cuda/kernels.h"
#include "cuda/runtime.h"

namespace hora {
namespace cuda {
namespace {

struct Probe {
  int count = 0;
  std::string reason;
};

// Asked once: a process's devices do not change while it runs.
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      r.count = 0;
      r.reason = "no usable CUDA driver or device: cudaGetDeviceCount: " + errorText(e);
      cudaGetLastError();
    } else if (r.count == 0) {
      r.reason = "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES?)";
    }
    return r;
  }();
  return p;
}

// What allocate() handed out and release() may take back.
std::mutex ownedMutex;
std::unordered_map<const void*, std::pair<int, size_t>>& owned() {
  static auto* m = new std::unordered_map<const void*, std::pair<int, size_t>>();
  return *m;
}

using GetAddressRange = CUresult (*)(CUdeviceptr* base, size_t* size, CUdeviceptr ptr);

// cuMemGetAddressRange from the driver the runtime loaded; nullptr when the driver does not offer it.
GetAddressRange addressRange() {
  static GetAddressRange fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return GetAddressRange(nullptr);
    }
    return reinterpret_cast<GetAddressRange>(f);
  }();
  return fn;
}

std::string hex(const void* p) {
  char buf[32];
  snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
  return buf;
}

}  // namespace

std::string errorText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

Status cudaFailure(const std::string& what, cudaError_t e) {
  cudaGetLastError();  // clears a non-sticky error so later calls on this thread start clean
  return Status(Code::kInternal, what + ": " + errorText(e));
}

Status useDevice(int device) {
  if (!available()) return Status(Code::kInvalidArgument, unavailableReason());
  if (device < 0 || device >= deviceCount()) {
    return Status(Code::kInvalidArgument, "CUDA device " + std::to_string(device) + " does not exist: this process sees " +
                                              std::to_string(deviceCount()) + " device(s)");
  }
  HORA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  return Status::ok();
}

Status baseOf(const void* ptr, const void** base, size_t* size) {
  GetAddressRange fn = addressRange();
  if (fn == nullptr) return Status(Code::kInternal, "the CUDA driver offers no cuMemGetAddressRange");
  CUdeviceptr b = 0;
  size_t n = 0;
  CUresult r = fn(&b, &n, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS) {
    return Status(Code::kInvalidArgument, hex(ptr) + " is not inside a device allocation (cuMemGetAddressRange error " +
                                              std::to_string(int(r)) + ")");
  }
  *base = reinterpret_cast<const void*>(b);
  *size = n;
  return Status::ok();
}

bool built() { return true; }
bool available() { return probe().count > 0; }
int deviceCount() { return probe().count; }
std::string unavailableReason() { return probe().reason; }

Status allocate(int device, size_t bytes, void** ptr) {
  HORA_RETURN_IF_ERROR(useDevice(device));
  // A zero-length buffer still gets an address of its own, so it can be told apart and freed.
  const size_t n = bytes == 0 ? 256 : bytes;
  void* p = nullptr;
  HORA_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, n), "cudaMalloc of " + std::to_string(n) + " bytes on device " + std::to_string(device));
  cudaError_t e = cudaMemset(p, 0, n);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    cudaFree(p);
    return cudaFailure("zero-filling a new device buffer", e);
  }
  std::lock_guard<std::mutex> lock(ownedMutex);
  owned()[p] = {device, n};
  *ptr = p;
  return Status::ok();
}

Status release(void* ptr) {
  int device;
  {
    std::lock_guard<std::mutex> lock(ownedMutex);
    auto it = owned().find(ptr);
    if (it == owned().end()) {
      return Status(Code::kInvalidArgument, "device pointer " + hex(ptr) + " was not allocated by hora, or was already freed");
    }
    device = it->second.first;
    owned().erase(it);
  }
  HORA_RETURN_IF_ERROR(useDevice(device));
  HORA_CUDA_RETURN_IF_ERROR(cudaFree(ptr), "cudaFree(" + hex(ptr) + ")");
  return Status::ok();
}

namespace {

Status copy(void* dst, const void* src, size_t bytes, int device, void* stream, cudaMemcpyKind kind, const char* what) {
  HORA_RETURN_IF_ERROR(useDevice(device));
  if (bytes == 0) return Status::ok();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  HORA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, kind, s), what);
  HORA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), what);
  return Status::ok();
}

}  // namespace

Status copyToHost(void* dst, const void* src, size_t bytes, int device, void* stream) {
  return copy(dst, src, bytes, device, stream, cudaMemcpyDeviceToHost, "copying device memory to the host");
}

Status copyFromHost(void* dst, const void* src, size_t bytes, int device, void* stream) {
  return copy(dst, src, bytes, device, stream, cudaMemcpyHostToDevice, "copying host memory to the device");
}

Status checkRange(const void* ptr, size_t bytes, int device, void* stream) {
  HORA_RETURN_IF_ERROR(useDevice(device));
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status(Code::kInvalidArgument, hex(ptr) + " is not a pointer CUDA knows: " + errorText(e));
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return Status(Code::kInvalidArgument, hex(ptr) + " is " +
                                              (attr.type == cudaMemoryTypeHost ? "pinned host memory" : "not device memory") +
                                              "; wrap() takes memory allocated on a CUDA device");
  }
  if (attr.device != device) {
    return Status(Code::kInvalidArgument, hex(ptr) + " belongs to device " + std::to_string(attr.device) + ", not device " +
                                              std::to_string(device));
  }
  const void* base = nullptr;
  size_t size = 0;
  Status st = baseOf(ptr, &base, &size);
  if (st.isOk()) {
    const size_t offset = static_cast<const uint8_t*>(ptr) - static_cast<const uint8_t*>(base);
    if (offset + bytes > size) {
      return Status(Code::kInvalidArgument, std::to_string(bytes) + " bytes from " + hex(ptr) + " run past the end of its allocation (" +
                                                std::to_string(size - offset) + " bytes left from there)");
    }
  } else if (st.code() != Code::kInternal) {
    return st;
  }
  if (stream != nullptr) {
    int streamDevice = -1;
    cudaError_t se = cudaStreamGetDevice(static_cast<cudaStream_t>(stream), &streamDevice);
    if (se != cudaSuccess) {
      cudaGetLastError();
      return Status(Code::kInvalidArgument, "stream " + hex(stream) + " is not a CUDA stream: " + errorText(se));
    }
    if (streamDevice != device) {
      return Status(Code::kInvalidArgument, "stream " + hex(stream) + " belongs to device " + std::to_string(streamDevice) +
                                                ", not device " + std::to_string(device));
    }
  }
  return Status::ok();
}

Status cast(int device, const void* src, DType from, void* dst, DType to, size_t count, void* stream) {
  HORA_RETURN_IF_ERROR(useDevice(device));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (count == 0) return Status::ok();
  if (from == to) {
    HORA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, count * dtypeSize(from), cudaMemcpyDeviceToDevice, s), "copying device memory");
  } else {
    const bool narrow = from == DType::kFloat32 && (to == DType::kFloat16 || to == DType::kBFloat16);
    const bool widen = to == DType::kFloat32 && (from == DType::kFloat16 || from == DType::kBFloat16);
    if (!narrow && !widen) {
      return Status(Code::kInvalidArgument, std::string("cast from ") + dtypeName(from) + " to " + dtypeName(to) +
                                                ": only float32 <-> float16 / bfloat16 are converted on the device");
    }
    HORA_CUDA_RETURN_IF_ERROR(convert(from, src, to, dst, count, s), "the conversion kernel");
  }
  HORA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s), "cast on the device");
  return Status::ok();
}

}  // namespace cuda
}  // namespace hora

#endif  // HORA_CUDA
