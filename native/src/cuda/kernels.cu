// Reduction and conversion kernels on the device (API and guarantees in kernels.h).
//
// How it works. One kernel per (dtype, op), instantiated from one template over the per-element
// arithmetic in elements.h (the same code the host test checks against the CPU kernels). Each thread
// walks the buffer in a grid-stride loop; at each position it loads the element of every source,
// combines them in source order in the accumulate type, divides once for kAvg, and stores once. When dst
// and every source are 16-byte aligned a position is a 16-byte pack (4 float32, 8 float16, 2 float64,
// 16 uint8, ...) moved with one vector load per source and one vector store; the elements after the
// last whole pack, and the whole buffer when a pointer is unaligned, take the scalar loop.
//
// The source pointers travel by value in the launch parameters: no pointer array to copy to the device,
// nothing to allocate. More than kMaxReduceSources sources chain launches, each one after the first
// reading dst as its first source, so the combine order stays srcs[0], srcs[1], ... . The chain has two
// costs: 16-bit floats are rounded to 16 bits between launches, and dst may alias only the sources of the
// first launch (a later one would already hold a partial result: cudaErrorInvalidValue).
#include "cuda/kernels.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/elements.h"

namespace hora {
namespace cuda {
namespace {

namespace el = elements;

constexpr int kThreads = 256;
// Enough blocks to fill an SM (2048 resident threads on sm_80 and sm_90); past that each thread loops.
constexpr int kBlocksPerSm = 8;
constexpr int kBlocksWithoutSmCount = 1024;
constexpr size_t kPackBytes = 16;

// Multiprocessor count per device ordinal, 0 until first asked (devices past the table ask every time).
constexpr int kCachedDevices = 64;
std::atomic<int> gSmCount[kCachedDevices];

// The most blocks one launch uses on the current device.
cudaError_t maxBlocks(int* blocks) {
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  int sms = device >= 0 && device < kCachedDevices ? gSmCount[device].load(std::memory_order_relaxed) : 0;
  if (sms == 0) {
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) return err;
    if (device >= 0 && device < kCachedDevices) gSmCount[device].store(sms, std::memory_order_relaxed);
  }
  *blocks = sms > 0 ? sms * kBlocksPerSm : kBlocksWithoutSmCount;
  return cudaSuccess;
}

int blocksFor(size_t threadsWanted, int cap) {
  const size_t blocks = (threadsWanted + kThreads - 1) / kThreads;
  if (blocks == 0) return 1;
  return blocks < static_cast<size_t>(cap) ? static_cast<int>(blocks) : cap;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kPackBytes == 0; }

// Elements [pack * kLanes, (pack + 1) * kLanes) of base, read as 16-byte words.
template <class S, int kLanes>
__device__ __forceinline__ void loadLanes(const void* base, size_t pack, S (&out)[kLanes]) {
  constexpr int kWords = sizeof(S) * kLanes / kPackBytes;
  static_assert(kWords * kPackBytes == sizeof(S) * kLanes, "a pack is whole 16-byte words");
  const uint4* words = static_cast<const uint4*>(base) + pack * kWords;
  uint4 raw[kWords];
#pragma unroll
  for (int w = 0; w < kWords; ++w) raw[w] = words[w];
  memcpy(out, raw, sizeof raw);
}

template <class S, int kLanes>
__device__ __forceinline__ void storeLanes(void* base, size_t pack, const S (&in)[kLanes]) {
  constexpr int kWords = sizeof(S) * kLanes / kPackBytes;
  uint4 raw[kWords];
  memcpy(raw, in, sizeof raw);
  uint4* words = static_cast<uint4*>(base) + pack * kWords;
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = raw[w];
}

// ---- Reduction ----

struct Sources {
  const void* ptr[kMaxReduceSources];
  int n;
};

template <ReduceOp Op, class Acc>
__device__ __forceinline__ Acc finish(Acc acc, int avgDivisor) {
  if constexpr (Op == ReduceOp::kAvg) {
    return el::finishAvg(acc, avgDivisor);
  } else {
    return acc;
  }
}

// packs: whole 16-byte packs to take the vector loop (0 when a pointer is unaligned). avgDivisor is 1
// on every launch of a chain but the last.
template <DType D, ReduceOp Op>
__global__ void __launch_bounds__(kThreads)
    reduceKernel(Sources src, void* dst, size_t count, size_t packs, int avgDivisor) {
  using E = el::Element<D>;
  using S = typename E::Stored;
  using Acc = typename E::Acc;
  constexpr int kLanes = kPackBytes / sizeof(S);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;

  if constexpr (D == DType::kFloat16 && (Op == ReduceOp::kMin || Op == ReduceOp::kMax)) {
    // On the bits, with no conversion (elements.h says why that is the same result).
    for (size_t p = first; p < packs; p += stride) {
      S in[kLanes], acc[kLanes];
      loadLanes(src.ptr[0], p, acc);
      for (int k = 1; k < src.n; ++k) {
        loadLanes(src.ptr[k], p, in);
#pragma unroll
        for (int l = 0; l < kLanes; ++l) acc[l] = el::halfMinMax<Op>(acc[l], in[l]);
      }
      if (src.n == 1) {
#pragma unroll
        for (int l = 0; l < kLanes; ++l) acc[l] = el::halfQuieted(acc[l]);
      }
      storeLanes(dst, p, acc);
    }
    for (size_t i = packs * kLanes + first; i < count; i += stride) {
      S acc = static_cast<const S*>(src.ptr[0])[i];
      for (int k = 1; k < src.n; ++k) acc = el::halfMinMax<Op>(acc, static_cast<const S*>(src.ptr[k])[i]);
      static_cast<S*>(dst)[i] = src.n == 1 ? el::halfQuieted(acc) : acc;
    }
  } else {
    for (size_t p = first; p < packs; p += stride) {
      S in[kLanes];
      Acc acc[kLanes];
      loadLanes(src.ptr[0], p, in);
#pragma unroll
      for (int l = 0; l < kLanes; ++l) acc[l] = E::load(in[l]);
      for (int k = 1; k < src.n; ++k) {
        loadLanes(src.ptr[k], p, in);
#pragma unroll
        for (int l = 0; l < kLanes; ++l) acc[l] = el::combine<Op>(acc[l], E::load(in[l]));
      }
#pragma unroll
      for (int l = 0; l < kLanes; ++l) in[l] = E::store(finish<Op>(acc[l], avgDivisor));
      storeLanes(dst, p, in);
    }
    for (size_t i = packs * kLanes + first; i < count; i += stride) {
      Acc acc = E::load(static_cast<const S*>(src.ptr[0])[i]);
      for (int k = 1; k < src.n; ++k) acc = el::combine<Op>(acc, E::load(static_cast<const S*>(src.ptr[k])[i]));
      static_cast<S*>(dst)[i] = E::store(finish<Op>(acc, avgDivisor));
    }
  }
}

template <DType D, ReduceOp Op>
cudaError_t launchReduce(void* dst, const void* const* srcs, int n, size_t count, int avgDivisor,
                         cudaStream_t stream) {
  constexpr size_t kLanes = kPackBytes / sizeof(typename el::Element<D>::Stored);
  int cap = 0;
  cudaError_t err = maxBlocks(&cap);
  if (err != cudaSuccess) return err;
  int next = 0;
  while (next < n) {
    Sources src{};
    if (next > 0) src.ptr[src.n++] = dst;  // the partial result of the launches before
    while (src.n < kMaxReduceSources && next < n) src.ptr[src.n++] = srcs[next++];
    bool vector = aligned(dst);
    for (int k = 0; k < src.n; ++k) vector = vector && aligned(src.ptr[k]);
    const size_t packs = vector ? count / kLanes : 0;
    const size_t scalar = count - packs * kLanes;
    const int blocks = blocksFor(packs > scalar ? packs : scalar, cap);
    reduceKernel<D, Op><<<blocks, kThreads, 0, stream>>>(src, dst, count, packs, next == n ? avgDivisor : 1);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

template <DType D>
cudaError_t reduceDType(ReduceOp op, void* dst, const void* const* srcs, int n, size_t count, int avgDivisor,
                        cudaStream_t stream) {
  switch (op) {
    case ReduceOp::kSum: return launchReduce<D, ReduceOp::kSum>(dst, srcs, n, count, avgDivisor, stream);
    case ReduceOp::kAvg: return launchReduce<D, ReduceOp::kAvg>(dst, srcs, n, count, avgDivisor, stream);
    case ReduceOp::kMin: return launchReduce<D, ReduceOp::kMin>(dst, srcs, n, count, avgDivisor, stream);
    case ReduceOp::kMax: return launchReduce<D, ReduceOp::kMax>(dst, srcs, n, count, avgDivisor, stream);
    case ReduceOp::kProd: return launchReduce<D, ReduceOp::kProd>(dst, srcs, n, count, avgDivisor, stream);
  }
  return cudaErrorInvalidValue;
}

// ---- Conversion ----

// Between float32 and the 16-bit float D: D's store() narrows, its load() widens.
template <DType D, bool kNarrow> struct Converter {
  using From = std::conditional_t<kNarrow, float, uint16_t>;
  using To = std::conditional_t<kNarrow, uint16_t, float>;
  static __device__ __forceinline__ To apply(From v) {
    if constexpr (kNarrow) {
      return el::Element<D>::store(v);
    } else {
      return el::Element<D>::load(v);
    }
  }
};

// Eight elements a pack: one 16-byte word of 16-bit floats, two of float32.
constexpr int kConvertLanes = 8;

template <DType D, bool kNarrow>
__global__ void __launch_bounds__(kThreads) convertKernel(const void* src, void* dst, size_t count, size_t packs) {
  using Cv = Converter<D, kNarrow>;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t p = first; p < packs; p += stride) {
    typename Cv::From in[kConvertLanes];
    typename Cv::To out[kConvertLanes];
    loadLanes(src, p, in);
#pragma unroll
    for (int l = 0; l < kConvertLanes; ++l) out[l] = Cv::apply(in[l]);
    storeLanes(dst, p, out);
  }
  for (size_t i = packs * kConvertLanes + first; i < count; i += stride) {
    static_cast<typename Cv::To*>(dst)[i] = Cv::apply(static_cast<const typename Cv::From*>(src)[i]);
  }
}

template <DType D, bool kNarrow>
cudaError_t launchConvert(const void* src, void* dst, size_t count, cudaStream_t stream) {
  int cap = 0;
  cudaError_t err = maxBlocks(&cap);
  if (err != cudaSuccess) return err;
  const size_t packs = aligned(src) && aligned(dst) ? count / kConvertLanes : 0;
  const size_t scalar = count - packs * kConvertLanes;
  convertKernel<D, kNarrow><<<blocksFor(packs > scalar ? packs : scalar, cap), kThreads, 0, stream>>>(src, dst, count, packs);
  return cudaGetLastError();
}

}  // namespace

cudaError_t reduceSources(ReduceOp op, DType dtype, void* dst, const void* const* srcs, int n, size_t count,
                          int avgDivisor, cudaStream_t stream) {
  if (dst == nullptr || srcs == nullptr || n < 1) return cudaErrorInvalidValue;
  if (op == ReduceOp::kAvg && avgDivisor < 1) return cudaErrorInvalidValue;
  for (int k = 0; k < n; ++k) {
    if (srcs[k] == nullptr) return cudaErrorInvalidValue;
    if (k >= kMaxReduceSources && srcs[k] == dst) return cudaErrorInvalidValue;  // see the chain, above
  }
  if (count == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32: return reduceDType<DType::kFloat32>(op, dst, srcs, n, count, avgDivisor, stream);
    case DType::kFloat64: return reduceDType<DType::kFloat64>(op, dst, srcs, n, count, avgDivisor, stream);
    case DType::kFloat16: return reduceDType<DType::kFloat16>(op, dst, srcs, n, count, avgDivisor, stream);
    case DType::kBFloat16: return reduceDType<DType::kBFloat16>(op, dst, srcs, n, count, avgDivisor, stream);
    case DType::kInt32: return reduceDType<DType::kInt32>(op, dst, srcs, n, count, avgDivisor, stream);
    case DType::kInt64: return reduceDType<DType::kInt64>(op, dst, srcs, n, count, avgDivisor, stream);
    case DType::kUint8: return reduceDType<DType::kUint8>(op, dst, srcs, n, count, avgDivisor, stream);
    // Host memory only: DeviceBuffer refuses them (ts/device-buffer.ts), as NCCL has no 16-bit integers.
    case DType::kInt8:
    case DType::kInt16:
    case DType::kUint16: return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

cudaError_t convert(DType from, const void* src, DType to, void* dst, size_t count, cudaStream_t stream) {
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  const bool narrow = from == DType::kFloat32;
  const DType half = narrow ? to : from;
  if ((half != DType::kFloat16 && half != DType::kBFloat16) || (narrow ? from : to) != DType::kFloat32) {
    return cudaErrorInvalidValue;
  }
  if (count == 0) return cudaSuccess;
  if (half == DType::kFloat16) {
    return narrow ? launchConvert<DType::kFloat16, true>(src, dst, count, stream)
                  : launchConvert<DType::kFloat16, false>(src, dst, count, stream);
  }
  return narrow ? launchConvert<DType::kBFloat16, true>(src, dst, count, stream)
                : launchConvert<DType::kBFloat16, false>(src, dst, count, stream);
}

}  // namespace cuda
}  // namespace hora
