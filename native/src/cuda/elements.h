// Per-element arithmetic of the device kernels (kernels.cu): 16-bit float conversions and the combine of
// two values per operator, in the type each dtype accumulates in.
//
// Written once for both sides (HORA_HD is __host__ __device__ under nvcc, plain inline under g++) and free
// of CUDA headers, so native/test/cuda_elements_test.cc checks on the host, bit for bit, that the device
// computes what the CPU kernels (reduce/reduce.cc) compute. The rules are the CPU's: any NaN result
// becomes the canonical quiet NaN 0x7fc00000 / 0x7ff8000000000000 (the GPU makes 0x7fffffff on its own,
// which would differ across devices and round badly into bfloat16), min prefers -0, max prefers +0,
// integers wrap.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/types.h"

#ifdef __CUDACC__
#define HORA_HD __host__ __device__ __forceinline__
#else
#define HORA_HD inline
#endif

namespace hora {
namespace cuda {
namespace elements {

constexpr uint32_t kQuietNaN32 = 0x7fc00000u;
constexpr uint64_t kQuietNaN64 = 0x7ff8000000000000ull;

HORA_HD uint32_t bitsOf(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
HORA_HD uint64_t bitsOf(double f) {
  uint64_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
HORA_HD float floatFromBits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
HORA_HD double doubleFromBits(uint64_t u) {
  double f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// ---- 16-bit floats. Integer arithmetic only, so the result does not depend on flush-to-zero or on
// whether the compiler fuses a multiply and an add. ----

HORA_HD float halfToFloat(uint16_t h) {
#ifdef __CUDA_ARCH__
  // On the device, the hardware conversion gives the same value for every half but Inf and NaN (it is
  // exact, subnormals included); those keep the integer path, which carries a NaN's payload as the CPU does.
  if ((h & 0x7c00u) != 0x7c00u) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
  }
#endif
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  const uint32_t exponent = magnitude & 0x7c00u;
  if (exponent == 0x7c00u) return floatFromBits(sign | 0x7f800000u | ((magnitude & 0x3ffu) << 13));  // Inf, NaN
  if (exponent != 0) return floatFromBits(sign | ((magnitude << 13) + (112u << 23)));  // rebias 15 -> 127
  if (magnitude == 0) return floatFromBits(sign);
  // Subnormal: mantissa * 2^-24. Shift its leading one up to the implicit bit, lowering the exponent.
  uint32_t mantissa = magnitude;
  uint32_t biased = 113;  // the exponent of 2^-14, the smallest normal half
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --biased;
  }
  return floatFromBits(sign | (biased << 23) | ((mantissa & 0x3ffu) << 13));
}

// Rounds to nearest even; NaN stays NaN, quieted, with its top payload bits (as x86's vcvtps2ph does).
HORA_HD uint16_t floatToHalf(float f) {
  const uint32_t u = bitsOf(f);
#ifdef __CUDA_ARCH__
  // The hardware's round-to-nearest-even conversion agrees with the integer path below for every float but
  // NaN, whose payload the hardware drops.
  if ((u & 0x7fffffffu) <= 0x7f800000u) {
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
#endif
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: infinity
  if (a >= 0x38800000u) {
    // Normal half: rebias, round on the 13 dropped bits; a carry out of the mantissa bumps the exponent.
    const uint32_t rebiased = a - (112u << 23);
    return static_cast<uint16_t>(sign | ((rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13));
  }
  // Below 2^-14: the result is |f| / 2^-24 rounded to an integer (1024 comes out as the smallest normal).
  // |f| = significand * 2^(e - 150), so that integer is significand >> (126 - e), at least 14 bits of shift.
  const uint32_t e = a >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to zero
  const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;
  const uint32_t kept = significand >> shift;
  const uint32_t dropped = significand & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t roundUp = (dropped > halfway || (dropped == halfway && (kept & 1u))) ? 1u : 0u;
  return static_cast<uint16_t>(sign | (kept + roundUp));
}

HORA_HD float bfloat16ToFloat(uint16_t h) { return floatFromBits(static_cast<uint32_t>(h) << 16); }

HORA_HD uint16_t floatToBfloat16(float f) {
  const uint32_t u = bitsOf(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- How each dtype is stored and what it accumulates in. ----

template <DType D> struct Element;
// Types stored as they are accumulated.
template <typename T> struct Plain {
  using Stored = T;
  using Acc = T;
  static HORA_HD Acc load(Stored v) { return v; }
  static HORA_HD Stored store(Acc v) { return v; }
};
template <> struct Element<DType::kFloat32> : Plain<float> {};
template <> struct Element<DType::kFloat64> : Plain<double> {};
template <> struct Element<DType::kInt32> : Plain<int32_t> {};
template <> struct Element<DType::kInt64> : Plain<int64_t> {};
template <> struct Element<DType::kUint8> : Plain<uint8_t> {};
template <> struct Element<DType::kFloat16> {
  using Stored = uint16_t;
  using Acc = float;
  static HORA_HD Acc load(Stored v) { return halfToFloat(v); }
  static HORA_HD Stored store(Acc v) { return floatToHalf(v); }
};
template <> struct Element<DType::kBFloat16> {
  using Stored = uint16_t;
  using Acc = float;
  static HORA_HD Acc load(Stored v) { return bfloat16ToFloat(v); }
  static HORA_HD Stored store(Acc v) { return floatToBfloat16(v); }
};

// ---- Combiners: commutative bit for bit. ----

HORA_HD float canonicalNaN(float r) { return r == r ? r : floatFromBits(kQuietNaN32); }
HORA_HD double canonicalNaN(double r) { return r == r ? r : doubleFromBits(kQuietNaN64); }

HORA_HD float add(float a, float b) { return canonicalNaN(a + b); }
HORA_HD double add(double a, double b) { return canonicalNaN(a + b); }
HORA_HD float multiply(float a, float b) { return canonicalNaN(a * b); }
HORA_HD double multiply(double a, double b) { return canonicalNaN(a * b); }

// Equal operands are identical bits or +0/-0: OR of the bits gives -0, AND gives +0.
HORA_HD float minimum(float a, float b) {
  if (a != a || b != b) return floatFromBits(kQuietNaN32);
  if (a == b) return floatFromBits(bitsOf(a) | bitsOf(b));
  return a < b ? a : b;
}
HORA_HD double minimum(double a, double b) {
  if (a != a || b != b) return doubleFromBits(kQuietNaN64);
  if (a == b) return doubleFromBits(bitsOf(a) | bitsOf(b));
  return a < b ? a : b;
}
HORA_HD float maximum(float a, float b) {
  if (a != a || b != b) return floatFromBits(kQuietNaN32);
  if (a == b) return floatFromBits(bitsOf(a) & bitsOf(b));
  return a > b ? a : b;
}
HORA_HD double maximum(double a, double b) {
  if (a != a || b != b) return doubleFromBits(kQuietNaN64);
  if (a == b) return doubleFromBits(bitsOf(a) & bitsOf(b));
  return a > b ? a : b;
}

// Integers: wrap-around in unsigned arithmetic, where it is defined. The extra unsigned int cast keeps
// uint8 (and any type narrower than int) from promoting to signed int before multiplying.
template <class T, class = std::enable_if_t<std::is_integral<T>::value>>
HORA_HD T add(T a, T b) {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}
template <class T, class = std::enable_if_t<std::is_integral<T>::value>>
HORA_HD T multiply(T a, T b) {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}
template <class T, class = std::enable_if_t<std::is_integral<T>::value>>
HORA_HD T minimum(T a, T b) {
  return a < b ? a : b;
}
template <class T, class = std::enable_if_t<std::is_integral<T>::value>>
HORA_HD T maximum(T a, T b) {
  return a > b ? a : b;
}

// a op b in the accumulate type. kAvg combines like kSum; finishAvg divides at the end.
template <ReduceOp Op, class T>
HORA_HD T combine(T a, T b) {
  if constexpr (Op == ReduceOp::kSum || Op == ReduceOp::kAvg) {
    return add(a, b);
  } else if constexpr (Op == ReduceOp::kMin) {
    return minimum(a, b);
  } else if constexpr (Op == ReduceOp::kMax) {
    return maximum(a, b);
  } else {
    return multiply(a, b);
  }
}

// ---- float16 min and max on the stored bits. ----
// Converting two halves to float (exact and order-preserving), taking the minimum or maximum and rounding
// back (exact again) gives one of the two inputs, or the canonical NaN: so the bits alone decide it. Mapping
// each pattern to an unsigned key that orders like the values (negatives reversed below the positives) puts
// -0 just below +0, which is the rule above: min prefers -0, max prefers +0.
constexpr uint16_t kQuietNaN16 = 0x7e00u;  // floatToHalf of the canonical float NaN
HORA_HD bool halfIsNaN(uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }
HORA_HD uint16_t halfOrderKey(uint16_t h) {
  return static_cast<uint16_t>((h & 0x8000u) ? ~h : (h | 0x8000u));
}
template <ReduceOp Op>
HORA_HD uint16_t halfMinMax(uint16_t a, uint16_t b) {
  static_assert(Op == ReduceOp::kMin || Op == ReduceOp::kMax, "min or max");
  if (halfIsNaN(a) || halfIsNaN(b)) return kQuietNaN16;
  const uint16_t ka = halfOrderKey(a), kb = halfOrderKey(b);
  return (Op == ReduceOp::kMin ? ka <= kb : ka >= kb) ? a : b;
}
// A single source goes through load and store alone, which quiets a NaN and keeps the rest of its bits.
HORA_HD uint16_t halfQuieted(uint16_t h) { return halfIsNaN(h) ? static_cast<uint16_t>(h | 0x0200u) : h; }

// The last step of kAvg, as scaleForAvg does it: floats divide (NaN canonical), integers truncate toward
// zero. A divisor of 1 or less leaves the sum as it is. uint8 divides as unsigned int, so a divisor
// above 255 gives 0 rather than dividing by the divisor's low byte.
// A power-of-two divisor multiplies by its exact reciprocal instead: sum / 2^k and sum * 2^-k are the
// same real number, so both round to the same float, subnormal results included, at a fraction of the cost.
HORA_HD bool powerOfTwo(int divisor) { return (divisor & (divisor - 1)) == 0; }
HORA_HD float finishAvg(float sum, int divisor) {
  if (divisor <= 1) return sum;
  if (powerOfTwo(divisor)) return canonicalNaN(sum * (1.0f / static_cast<float>(divisor)));
  return canonicalNaN(sum / static_cast<float>(divisor));
}
HORA_HD double finishAvg(double sum, int divisor) {
  if (divisor <= 1) return sum;
  if (powerOfTwo(divisor)) return canonicalNaN(sum * (1.0 / static_cast<double>(divisor)));
  return canonicalNaN(sum / static_cast<double>(divisor));
}
HORA_HD int32_t finishAvg(int32_t sum, int divisor) { return divisor <= 1 ? sum : sum / divisor; }
HORA_HD int64_t finishAvg(int64_t sum, int divisor) {
  return divisor <= 1 ? sum : sum / static_cast<int64_t>(divisor);
}
HORA_HD uint8_t finishAvg(uint8_t sum, int divisor) {
  return divisor <= 1 ? sum : static_cast<uint8_t>(static_cast<unsigned>(sum) / static_cast<unsigned>(divisor));
}

}  // namespace elements
}  // namespace cuda
}  // namespace hora
