// Checks the device kernels' per-element arithmetic (native/src/cuda/elements.h), compiled here for the
// host, against the CPU kernels (reduce/reduce.h): every dtype x op combine of two values bit for bit,
// the 16-bit conversions on all 65536 patterns and on random and special floats, and a five-source float16
// sum accumulated in float32 and rounded once against an exact float64 reference.
// Random inputs use a fresh seed each run, printed first; HORA_TEST_SEED=<n> repeats a run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/types.h"
#include "cuda/elements.h"
#include "reduce/reduce.h"
#include "tap.h"

using namespace hora;
using hora::testing::check;
namespace el = hora::cuda::elements;

namespace {

std::mt19937_64 gRng;

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

template <class T>
uint64_t bitsAsU64(T v) {
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof v);
  return u;
}

// Stored values of type S: a third raw bit patterns (every NaN payload, Inf, subnormals at their natural
// rate), a third from a few specials, a third small integers (so equal operands and +0/-0 pairs occur).
template <class S>
S randomStored(DType dtype) {
  const uint64_t bits = gRng();
  const int kind = static_cast<int>(gRng() % 3);
  S out{};
  if (kind == 0) {
    std::memcpy(&out, &bits, sizeof out);
    return out;
  }
  if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
    static const uint16_t kHalf[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7d01, 0xfe00, 0x0001, 0x8001, 0x7bff, 0x03ff};
    static const uint16_t kBf16[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc0, 0x0001, 0x8001, 0x7f7f, 0x007f};
    const auto& table = dtype == DType::kFloat16 ? kHalf : kBf16;
    const float small = static_cast<float>(static_cast<int>(bits % 9) - 4);
    const uint16_t v = kind == 1 ? table[bits % 11]
                                 : (dtype == DType::kFloat16 ? floatToHalf(small) : floatToBfloat16(small));
    std::memcpy(&out, &v, sizeof out);
    return out;
  }
  if constexpr (std::is_floating_point<S>::value) {
    const S kSpecial[] = {S(0), -S(0), INFINITY, -INFINITY, NAN, -NAN, S(1), S(-1), std::numeric_limits<S>::max(),
                          std::numeric_limits<S>::denorm_min(), -std::numeric_limits<S>::min()};
    return kind == 1 ? kSpecial[bits % 11] : static_cast<S>(static_cast<int>(bits % 9) - 4);
  } else {
    const S kSpecial[] = {S(0), S(1), S(-1), std::numeric_limits<S>::max(), std::numeric_limits<S>::min(),
                          static_cast<S>(std::numeric_limits<S>::max() / 2 + 1)};
    return kind == 1 ? kSpecial[bits % 6] : static_cast<S>(static_cast<int>(bits % 9) - 4);
  }
}

constexpr size_t kPairs = 20000;

// One dtype x op: store(combine(load(a), load(b))) against reduceTwo, and for kAvg, with a random divisor,
// the device's divide-once against the CPU's (for 16-bit floats the CPU's float32 sum and divide, rounded
// once: what the device does across sources).
template <DType D, ReduceOp Op>
void combineMatchesCpu() {
  using E = el::Element<D>;
  using S = typename E::Stored;
  std::vector<S> a(kPairs), b(kPairs), cpu(kPairs), device(kPairs);
  for (size_t i = 0; i < kPairs; ++i) {
    a[i] = randomStored<S>(D);
    b[i] = randomStored<S>(D);
  }
  const int divisor = Op == ReduceOp::kAvg ? 1 + static_cast<int>(gRng() % 255) : 1;
  const bool sixteenBit = D == DType::kFloat16 || D == DType::kBFloat16;
  if (Op == ReduceOp::kAvg && sixteenBit) {
    std::vector<float> wideA(kPairs), wideB(kPairs);
    for (size_t i = 0; i < kPairs; ++i) {
      wideA[i] = E::load(a[i]);
      wideB[i] = E::load(b[i]);
    }
    reduceTwo(ReduceOp::kSum, DType::kFloat32, wideA.data(), wideA.data(), wideB.data(), kPairs);
    scaleForAvg(DType::kFloat32, wideA.data(), kPairs, divisor);
    for (size_t i = 0; i < kPairs; ++i) {
      cpu[i] = D == DType::kFloat16 ? floatToHalf(wideA[i]) : floatToBfloat16(wideA[i]);
    }
  } else {
    reduceTwo(Op, D, cpu.data(), a.data(), b.data(), kPairs);
    if (Op == ReduceOp::kAvg) scaleForAvg(D, cpu.data(), kPairs, divisor);
  }
  for (size_t i = 0; i < kPairs; ++i) {
    auto acc = el::combine<Op>(E::load(a[i]), E::load(b[i]));
    if (Op == ReduceOp::kAvg) acc = el::finishAvg(acc, divisor);
    device[i] = E::store(acc);
  }
  std::string details;
  for (size_t i = 0; i < kPairs && details.empty(); ++i) {
    if (bitsAsU64(cpu[i]) != bitsAsU64(device[i])) {
      details = "element " + std::to_string(i) + ": " + hex(bitsAsU64(a[i])) + " op " + hex(bitsAsU64(b[i])) +
                " gives " + hex(bitsAsU64(device[i])) + ", the CPU " + hex(bitsAsU64(cpu[i]));
    }
  }
  std::string what = std::string(dtypeName(D)) + " " + opName(Op) + ": " + std::to_string(kPairs) +
                     " random pairs combine bit-identically to reduceTwo";
  if (Op == ReduceOp::kAvg) what += " (then / " + std::to_string(divisor) + ", as scaleForAvg)";
  check(details.empty(), what, details);
}

template <DType D>
void combineMatchesCpuEveryOp() {
  combineMatchesCpu<D, ReduceOp::kSum>();
  combineMatchesCpu<D, ReduceOp::kAvg>();
  combineMatchesCpu<D, ReduceOp::kMin>();
  combineMatchesCpu<D, ReduceOp::kMax>();
  combineMatchesCpu<D, ReduceOp::kProd>();
}

void conversionsOfEverySixteenBitPattern() {
  std::string halfDetails, bf16Details;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    const uint32_t mine = el::bitsOf(el::halfToFloat(v));
    const uint32_t cpu = el::bitsOf(halfToFloat(v));
    if (mine != cpu && halfDetails.empty()) halfDetails = hex(h) + " -> " + hex(mine) + ", the CPU " + hex(cpu);
    const uint32_t mineBf = el::bitsOf(el::bfloat16ToFloat(v));
    const uint32_t cpuBf = el::bitsOf(bfloat16ToFloat(v));
    if (mineBf != cpuBf && bf16Details.empty()) bf16Details = hex(h) + " -> " + hex(mineBf) + ", the CPU " + hex(cpuBf);
  }
  check(halfDetails.empty(), "halfToFloat equals the CPU's on all 65536 patterns", halfDetails);
  check(bf16Details.empty(), "bfloat16ToFloat equals the CPU's on all 65536 patterns", bf16Details);
}

// Random bit patterns, every widened 16-bit value nudged by -2..+2 float ulps (the rounding ties and their
// neighbours), halfway points below 2^-14 and the overflow threshold, and float specials.
void conversionsOfFloats() {
  std::vector<uint32_t> inputs;
  for (int i = 0; i < 2000000; ++i) inputs.push_back(static_cast<uint32_t>(gRng()));
  for (uint32_t h = 0; h < 65536; ++h) {
    for (int d = -2; d <= 2; ++d) {
      inputs.push_back(el::bitsOf(halfToFloat(static_cast<uint16_t>(h))) + static_cast<uint32_t>(d));
      inputs.push_back((h << 16) + 0x8000u + static_cast<uint32_t>(d));  // bfloat16 ties
    }
  }
  for (uint32_t u = 0x33000000u - 4; u <= 0x33000000u + 4; ++u) inputs.push_back(u);  // 2^-25: rounds to 0 or 2^-24
  for (uint32_t u = 0x477fe000u; u <= 0x47800000u; u += 0x100u) inputs.push_back(u);  // 65504 .. 65536
  const float kSpecial[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 1.17549435e-38f, 3.4028235e38f,
                            65504.0f, 65519.996f, 65520.0f, -65520.0f, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f};
  for (float f : kSpecial) inputs.push_back(el::bitsOf(f));
  for (uint32_t payload : {0x7f800001u, 0x7fbfffffu, 0xffc00001u, 0x7fffe000u, 0x7f802000u}) inputs.push_back(payload);

  std::string halfDetails, bf16Details;
  for (uint32_t u : inputs) {
    const float f = el::floatFromBits(u);
    const uint16_t mine = el::floatToHalf(f), cpu = floatToHalf(f);
    if (mine != cpu && halfDetails.empty()) halfDetails = hex(u) + " -> " + hex(mine) + ", the CPU " + hex(cpu);
    const uint16_t mineBf = el::floatToBfloat16(f), cpuBf = floatToBfloat16(f);
    if (mineBf != cpuBf && bf16Details.empty()) bf16Details = hex(u) + " -> " + hex(mineBf) + ", the CPU " + hex(cpuBf);
  }
  const std::string count = std::to_string(inputs.size());
  check(halfDetails.empty(), "floatToHalf equals the CPU's on " + count + " random and special floats", halfDetails);
  check(bf16Details.empty(), "floatToBfloat16 equals the CPU's on " + count + " random and special floats", bf16Details);
}

// Five float16 sources summed as kernels.cu does (widen, add in float32, round once) against the exact
// sum in float64 (five halves span at most 40 bits, so double adds them exactly). The result must be
// within half a float16 ulp of the exact sum, plus what the float32 additions may have rounded away
// (2^-24 of each partial sum).
void fiveSourceHalfSumWithinHalfUlp() {
  constexpr int kSources = 5;
  constexpr int kTrials = 200000;
  std::uniform_real_distribution<float> magnitude(-12.0f, 8.0f);
  std::string details;
  int roundedPairwiseDiffers = 0;
  for (int trial = 0; trial < kTrials && details.empty(); ++trial) {
    uint16_t src[kSources];
    for (uint16_t& s : src) {
      const float v = std::ldexp(static_cast<float>(gRng() % 2048) / 2048.0f, static_cast<int>(magnitude(gRng)));
      s = floatToHalf(gRng() % 2 ? v : -v);
    }
    double exact = 0, partials = 0;
    float acc = el::halfToFloat(src[0]);
    uint16_t pairwise = src[0];
    for (int k = 0; k < kSources; ++k) exact += halfToFloat(src[k]);
    for (int k = 1; k < kSources; ++k) {
      acc = el::combine<ReduceOp::kSum>(acc, el::halfToFloat(src[k]));
      partials += std::fabs(static_cast<double>(acc));
      reduceTwo(ReduceOp::kSum, DType::kFloat16, &pairwise, &pairwise, &src[k], 1);
    }
    const uint16_t result = el::floatToHalf(acc);
    if (result != pairwise) ++roundedPairwiseDiffers;
    const double got = halfToFloat(result);
    int exponent = 0;
    std::frexp(exact, &exponent);  // |exact| in [2^(exponent-1), 2^exponent)
    const double ulp = exact == 0 ? 0x1p-24 : std::ldexp(1.0, std::max(exponent - 11, -24));
    const double bound = 0.5 * ulp + partials * 0x1p-24;
    if (std::fabs(got - exact) > bound) {
      details = "sources";
      for (uint16_t s : src) details += " " + hex(s);
      details += ": got " + std::to_string(got) + ", exact " + std::to_string(exact);
    }
  }
  check(details.empty(), "five-source float16 sum, float32-accumulated and rounded once, is within half an ulp of float64",
        details);
  // Guards the check above against testing nothing: rounding once must differ from rounding every step.
  check(roundedPairwiseDiffers > 0, "rounding once differs from rounding after every add on some of " +
                                        std::to_string(kTrials) + " trials (" + std::to_string(roundedPairwiseDiffers) + ")");
}

// float16 min and max on the bits (what the device kernel does) against converting, combining and rounding
// back, for every pattern a against every b of a stride through all 65536, and a single source quieted.
void halfMinMaxOnBits() {
  std::string details;
  // 31..61: every a against 1,074-2,114 values of b. A stride of 1 would be 4.3 billion pairs (minutes).
  const uint32_t stride = 31 + static_cast<uint32_t>(gRng() % 31);
  for (uint32_t a = 0; a < 0x10000u && details.empty(); ++a) {
    for (uint32_t b = a % stride; b < 0x10000u && details.empty(); b += stride) {
      const uint16_t ha = static_cast<uint16_t>(a), hb = static_cast<uint16_t>(b);
      const uint16_t wantMin = floatToHalf(el::minimum(halfToFloat(ha), halfToFloat(hb)));
      const uint16_t wantMax = floatToHalf(el::maximum(halfToFloat(ha), halfToFloat(hb)));
      const uint16_t gotMin = el::halfMinMax<ReduceOp::kMin>(ha, hb), gotMax = el::halfMinMax<ReduceOp::kMax>(ha, hb);
      if (gotMin != wantMin || gotMax != wantMax) {
        details = "min/max of " + hex(a) + " and " + hex(b) + ": " + hex(gotMin) + "/" + hex(gotMax) + " on the bits, " +
                  hex(wantMin) + "/" + hex(wantMax) + " through float";
      }
    }
    const uint16_t ha = static_cast<uint16_t>(a);
    if (details.empty() && el::halfQuieted(ha) != floatToHalf(halfToFloat(ha))) {
      details = "a single source " + hex(a) + ": " + hex(el::halfQuieted(ha)) + ", through float " +
                hex(floatToHalf(halfToFloat(ha)));
    }
  }
  check(details.empty(), "float16 min and max on the bits equal the float path (every a, b in steps of " +
                             std::to_string(stride) + ")", details);
}

// avg by a power-of-two divisor multiplies by its reciprocal: the same bits as the CPU's divide, on every
// value but NaN.
template <DType D>
void powerOfTwoAvgMatchesCpu() {
  using E = el::Element<D>;
  using S = typename E::Stored;
  std::string details;
  for (int divisor : {2, 4, 8, 16, 64, 1024, 1 << 20}) {
    std::vector<S> x(kPairs);
    for (auto& v : x) {
      do v = randomStored<S>(D);
      while (v != v);  // a sum reaches the divide with its NaN canonical already; the CPU keeps a lone NaN's sign
    }
    std::vector<S> cpu = x;
    scaleForAvg(D, cpu.data(), kPairs, divisor);
    for (size_t i = 0; i < kPairs && details.empty(); ++i) {
      const S got = E::store(el::finishAvg(E::load(x[i]), divisor));
      if (bitsAsU64(got) != bitsAsU64(cpu[i])) {
        details = hex(bitsAsU64(x[i])) + " / " + std::to_string(divisor) + " gives " + hex(bitsAsU64(got)) + ", the CPU " +
                  hex(bitsAsU64(cpu[i]));
      }
    }
  }
  check(details.empty(), std::string(dtypeName(D)) + " avg by powers of two 2..2^20 equals the CPU's divide", details);
}

}  // namespace

int main() {
  uint64_t seed = std::random_device{}();
  if (const char* fixed = std::getenv("HORA_TEST_SEED")) seed = std::strtoull(fixed, nullptr, 10);
  std::printf("# seed %llu (HORA_TEST_SEED=%llu repeats this run)\n", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  gRng.seed(seed);

  combineMatchesCpuEveryOp<DType::kFloat32>();
  combineMatchesCpuEveryOp<DType::kFloat64>();
  combineMatchesCpuEveryOp<DType::kFloat16>();
  combineMatchesCpuEveryOp<DType::kBFloat16>();
  combineMatchesCpuEveryOp<DType::kInt32>();
  combineMatchesCpuEveryOp<DType::kInt64>();
  combineMatchesCpuEveryOp<DType::kUint8>();
  conversionsOfEverySixteenBitPattern();
  conversionsOfFloats();
  fiveSourceHalfSumWithinHalfUlp();
  halfMinMaxOnBits();
  powerOfTwoAvgMatchesCpu<DType::kFloat32>();
  powerOfTwoAvgMatchesCpu<DType::kFloat64>();
  return hora::testing::finish();
}
