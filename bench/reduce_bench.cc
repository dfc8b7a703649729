// Throughput of reduceInto (dst op= src) next to memcpy, measured in the same run.
//
// GB/s counts the bytes the loop must move: reduceInto reads dst and src and writes dst (3 x size),
// memcpy reads src and writes dst (2 x size). Each row is the median of repeated samples; a sample
// repeats the call until it has moved at least 256 MiB so that small sizes are not timer noise.
//
//   g++ -std=c++17 -O3 -Inative/src bench/reduce_bench.cc native/src/reduce/reduce.cc
//       -o /tmp/reduce_bench && /tmp/reduce_bench
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/types.h"
#include "reduce/reduce.h"

using namespace hora;

namespace {

struct AlignedBuffer {
  void* data;
  explicit AlignedBuffer(size_t bytes) : data(std::aligned_alloc(64, (bytes + 63) / 64 * 64)) {
    std::memset(data, 0, bytes);
  }
  ~AlignedBuffer() { std::free(data); }
};

// Values that stay finite for the dtype, so the float paths time ordinary numbers.
void fill(DType t, void* p, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const float v = static_cast<float>(i % 97) * 0.001f;
    switch (t) {
      case DType::kFloat32: static_cast<float*>(p)[i] = v; break;
      case DType::kFloat64: static_cast<double*>(p)[i] = v; break;
      case DType::kFloat16: static_cast<uint16_t*>(p)[i] = floatToHalf(v); break;
      case DType::kBFloat16: static_cast<uint16_t*>(p)[i] = floatToBfloat16(v); break;
      case DType::kInt32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(i % 97); break;
      case DType::kInt64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(i % 97); break;
      case DType::kUint8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(i); break;
    }
  }
}

template <class Fn>
double medianGBps(size_t bytesPerCall, int samples, Fn&& fn) {
  const size_t target = 256u << 20;
  const size_t reps = std::max<size_t>(1, target / bytesPerCall);
  fn();  // warm caches and page tables
  std::vector<double> rates;
  for (int s = 0; s < samples; ++s) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t r = 0; r < reps; ++r) fn();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    rates.push_back(static_cast<double>(bytesPerCall) * reps / took.count() / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

int main() {
  struct Case {
    DType dtype;
    ReduceOp op;
  };
  const Case cases[] = {{DType::kFloat32, ReduceOp::kSum}, {DType::kFloat16, ReduceOp::kSum},
                        {DType::kBFloat16, ReduceOp::kSum}, {DType::kFloat64, ReduceOp::kSum},
                        {DType::kInt32, ReduceOp::kSum},   {DType::kFloat32, ReduceOp::kMax}};
  const size_t sizes[] = {64u << 10, 1u << 20, 64u << 20};
  const int samples = 15;

#if defined(__x86_64__)
  __builtin_cpu_init();
  std::printf("cpu: avx2=%d f16c=%d (kernels take the avx2 clone and the F16C float16 path when both are 1)\n",
              __builtin_cpu_supports("avx2") ? 1 : 0, __builtin_cpu_supports("f16c") ? 1 : 0);
#endif
  std::printf("%-9s %-4s %8s %12s %13s %7s\n", "dtype", "op", "size", "memcpy GB/s", "reduce GB/s", "ratio");
  for (size_t bytes : sizes) {
    AlignedBuffer dst(bytes), src(bytes);
    const double copyRate = medianGBps(2 * bytes, samples, [&] {
      std::memcpy(dst.data, src.data, bytes);
      asm volatile("" : : "r"(dst.data) : "memory");
    });
    for (const Case& c : cases) {
      const size_t count = bytes / dtypeSize(c.dtype);
      fill(c.dtype, dst.data, count);
      fill(c.dtype, src.data, count);
      const double rate = medianGBps(3 * bytes, samples, [&] {
        reduceInto(c.op, c.dtype, dst.data, src.data, count);
        asm volatile("" : : "r"(dst.data) : "memory");
      });
      char size[32];
      if (bytes >= (1u << 20)) std::snprintf(size, sizeof size, "%zu MiB", bytes >> 20);
      else std::snprintf(size, sizeof size, "%zu KiB", bytes >> 10);
      std::printf("%-9s %-4s %8s %12.1f %13.1f %7.2f\n", dtypeName(c.dtype), opName(c.op), size, copyRate, rate,
                  rate / copyRate);
    }
  }
  return 0;
}
