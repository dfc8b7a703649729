// Reduction kernel bandwidth against the device-to-device copy of the same GPU, measured in one run,
// alternating: for each dtype and op, one cudaMemcpy of the buffer, then one reduceSources() of `sources`
// buffers into the first, ITERS times. Bandwidth counts bytes read plus bytes written: a copy of n bytes
// moves 2n; the kernel reads sources x n and writes n. Prints the median over iterations of the ratio
// kernel bandwidth / copy bandwidth (target: >= 0.80). Build and run with bench/gpu/reduce.sh.
//
// The timed buffers hold values like gradients' (uniform in [-1, 1), made on the device from a hash of the
// index), never zeros. Before timing, every dtype and op is checked bit for bit against the host's
// per-element code (elements.h compiled for the host, which native/test/cuda_elements_test.cc holds equal
// to the CPU kernels), on sources that hold every 16-bit pattern and random bits otherwise, with a
// power-of-two and an odd divisor for avg.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda/elements.h"
#include "cuda/kernels.h"

using hora::DType;
using hora::ReduceOp;

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

namespace el = hora::cuda::elements;

__host__ __device__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// Element i of buffer `seed`: uniform in [-1, 1) for the floats, random bits for the integers.
template <DType D>
__global__ void fillKernel(void* buf, size_t count, uint32_t seed) {
  using E = el::Element<D>;
  using S = typename E::Stored;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t r = mix((uint64_t(seed) << 40) ^ i);
    if constexpr (std::is_same<typename E::Acc, float>::value || std::is_same<typename E::Acc, double>::value) {
      static_cast<S*>(buf)[i] = E::store(static_cast<typename E::Acc>(r * (2.0 / 4294967296.0) - 1.0));
    } else {
      static_cast<S*>(buf)[i] = static_cast<S>(r);
    }
  }
}

void fill(DType d, void* buf, size_t bytes, uint32_t seed) {
  const size_t count = bytes / hora::dtypeSize(d);
  switch (d) {
    case DType::kFloat32: fillKernel<DType::kFloat32><<<4096, 256>>>(buf, count, seed); break;
    case DType::kFloat64: fillKernel<DType::kFloat64><<<4096, 256>>>(buf, count, seed); break;
    case DType::kFloat16: fillKernel<DType::kFloat16><<<4096, 256>>>(buf, count, seed); break;
    case DType::kBFloat16: fillKernel<DType::kBFloat16><<<4096, 256>>>(buf, count, seed); break;
    case DType::kInt32: fillKernel<DType::kInt32><<<4096, 256>>>(buf, count, seed); break;
    default: break;
  }
}

// The host's answer for one element, in the order the kernel combines: srcs[0], srcs[1], then avg's divide.
template <DType D, ReduceOp Op>
void hostReduce(const std::vector<std::vector<uint8_t>>& srcs, std::vector<uint8_t>& out, size_t count, int divisor) {
  using E = el::Element<D>;
  using S = typename E::Stored;
  for (size_t i = 0; i < count; ++i) {
    S v;
    memcpy(&v, srcs[0].data() + i * sizeof(S), sizeof(S));
    typename E::Acc acc = E::load(v);
    for (size_t k = 1; k < srcs.size(); ++k) {
      memcpy(&v, srcs[k].data() + i * sizeof(S), sizeof(S));
      acc = el::combine<Op>(acc, E::load(v));
    }
    if constexpr (Op == ReduceOp::kAvg) acc = el::finishAvg(acc, divisor);
    v = E::store(acc);
    memcpy(out.data() + i * sizeof(S), &v, sizeof(S));
  }
}

template <DType D>
void hostReduceOp(ReduceOp op, const std::vector<std::vector<uint8_t>>& srcs, std::vector<uint8_t>& out, size_t count,
                  int divisor) {
  switch (op) {
    case ReduceOp::kSum: return hostReduce<D, ReduceOp::kSum>(srcs, out, count, divisor);
    case ReduceOp::kAvg: return hostReduce<D, ReduceOp::kAvg>(srcs, out, count, divisor);
    case ReduceOp::kMin: return hostReduce<D, ReduceOp::kMin>(srcs, out, count, divisor);
    case ReduceOp::kMax: return hostReduce<D, ReduceOp::kMax>(srcs, out, count, divisor);
    case ReduceOp::kProd: return hostReduce<D, ReduceOp::kProd>(srcs, out, count, divisor);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = (argc > 1 ? strtoull(argv[1], nullptr, 10) : 256) << 20;
  const int iters = argc > 2 ? atoi(argv[2]) : 20;
  const int sources = argc > 3 ? atoi(argv[3]) : 2;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  printf("device: %s, %d SMs; buffer %zu MiB, %d sources, %d iterations\n", prop.name, prop.multiProcessorCount,
         bytes >> 20, sources, iters);
  std::vector<void*> bufs(sources + 1);
  for (void*& b : bufs) check(cudaMalloc(&b, bytes), "cudaMalloc");
  cudaStream_t s;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  auto timed = [&](auto&& body) {
    check(cudaEventRecord(a, s), "cudaEventRecord");
    body();
    check(cudaEventRecord(b, s), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return ms / 1e3;
  };
  const struct {
    DType dtype;
    const char* name;
  } types[] = {{DType::kFloat32, "float32"}, {DType::kFloat16, "float16"}, {DType::kBFloat16, "bfloat16"},
               {DType::kFloat64, "float64"}, {DType::kInt32, "int32"}};
  const struct {
    ReduceOp op;
    const char* name;
  } ops[] = {{ReduceOp::kSum, "sum"}, {ReduceOp::kAvg, "avg"}, {ReduceOp::kMin, "min"}, {ReduceOp::kMax, "max"},
             {ReduceOp::kProd, "prod"}};
  // Bit for bit against the host, 2^20 elements (every 16-bit pattern 16 times over, against random bits).
  size_t mismatched = 0;
  for (const auto& t : types) {
    const size_t size = hora::dtypeSize(t.dtype), count = size_t(1) << 20;
    std::vector<std::vector<uint8_t>> host(sources, std::vector<uint8_t>(count * size));
    for (int k = 0; k < sources; ++k) {
      for (size_t i = 0; i < count * size; i += 4) {
        const uint32_t r = k == 0 && size == 2 ? uint32_t(i / 2) | (uint32_t(i / 2 + 1) << 16) : mix((uint64_t(k + 7) << 40) ^ i);
        memcpy(host[k].data() + i, &r, std::min<size_t>(4, count * size - i));
      }
      check(cudaMemcpy(bufs[k + 1], host[k].data(), count * size, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
    std::vector<uint8_t> want(count * size), got(count * size);
    for (const auto& o : ops) {
      for (int divisor : {sources, 3}) {
        if (o.op != ReduceOp::kAvg && divisor != sources) continue;
        check(hora::cuda::reduceSources(o.op, t.dtype, bufs[0], const_cast<const void* const*>(bufs.data() + 1), sources,
                                        count, divisor, s),
              "reduceSources");
        check(cudaMemcpy(got.data(), bufs[0], count * size, cudaMemcpyDeviceToHost), "cudaMemcpy");
        switch (t.dtype) {
          case DType::kFloat32: hostReduceOp<DType::kFloat32>(o.op, host, want, count, divisor); break;
          case DType::kFloat64: hostReduceOp<DType::kFloat64>(o.op, host, want, count, divisor); break;
          case DType::kFloat16: hostReduceOp<DType::kFloat16>(o.op, host, want, count, divisor); break;
          case DType::kBFloat16: hostReduceOp<DType::kBFloat16>(o.op, host, want, count, divisor); break;
          case DType::kInt32: hostReduceOp<DType::kInt32>(o.op, host, want, count, divisor); break;
          default: break;
        }
        size_t bad = 0;
        for (size_t i = 0; i < count; ++i) bad += memcmp(got.data() + i * size, want.data() + i * size, size) != 0;
        if (bad) printf("MISMATCH %s %s (divisor %d): %zu of %zu elements differ from the host\n", t.name, o.name, divisor, bad, count);
        mismatched += bad;
      }
    }
  }
  printf("bit-exact check against the host: %s\n", mismatched ? "FAILED" : "every dtype and op identical");

  printf("%-9s %-5s %12s %12s %8s\n", "dtype", "op", "copy GB/s", "kernel GB/s", "ratio");
  double worst = 1e9;
  for (const auto& t : types) {
    const size_t count = bytes / hora::dtypeSize(t.dtype);
    for (int k = 0; k <= sources; ++k) fill(t.dtype, bufs[k], bytes, k + 1);
    check(cudaGetLastError(), "fill");
    check(cudaDeviceSynchronize(), "fill");
    for (const auto& o : ops) {
      std::vector<double> ratios, copyBw, kernelBw;
      for (int i = 0; i < iters + 1; ++i) {
        double tc = timed([&] { check(cudaMemcpyAsync(bufs[0], bufs[1], bytes, cudaMemcpyDeviceToDevice, s), "copy"); });
        double tk = timed([&] {
          check(hora::cuda::reduceSources(o.op, t.dtype, bufs[0], const_cast<const void* const*>(bufs.data() + 1), sources,
                                          count, sources, s),
                "reduceSources");
        });
        if (i == 0) continue;  // warm-up
        const double c = 2.0 * bytes / tc / 1e9, k = double(sources + 1) * bytes / tk / 1e9;
        copyBw.push_back(c);
        kernelBw.push_back(k);
        ratios.push_back(k / c);
      }
      const double r = median(ratios);
      worst = std::min(worst, r);
      printf("%-9s %-5s %12.1f %12.1f %8.3f\n", t.name, o.name, median(copyBw), median(kernelBw), r);
    }
  }
  printf("lowest median ratio: %.3f (target >= 0.80)\n", worst);
  return mismatched ? 1 : 0;
}
