// Reduction kernel bandwidth against the device-to-device copy of the same GPU, measured in one run,
// alternating: for each dtype and op, one cudaMemcpy of the buffer, then one reduceSources() of `sources`
// buffers into the first, ITERS times. Bandwidth counts bytes read plus bytes written: a copy of n bytes
// moves 2n; the kernel reads sources x n and writes n. Prints the median over iterations of the ratio
// kernel bandwidth / copy bandwidth (target: >= 0.80). Build and run with bench/gpu/reduce.sh.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

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
  for (void*& b : bufs) {
    check(cudaMalloc(&b, bytes), "cudaMalloc");
    check(cudaMemset(b, 0, bytes), "cudaMemset");
  }
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
  printf("%-9s %-5s %12s %12s %8s\n", "dtype", "op", "copy GB/s", "kernel GB/s", "ratio");
  double worst = 1e9;
  for (const auto& t : types) {
    const size_t count = bytes / hora::dtypeSize(t.dtype);
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
  return 0;
}
