// Element-wise reduction kernels for the CPU (API and guarantees in reduce.h).
//
// How it works. Each (dtype, op) pair is one kernel: a plain loop `dst[i] = combine(a[i], b[i])` whose
// body is written without branches (every `?:` is a select the vectorizer turns into a blend), so
// `-O3` vectorizes it. The kernels carry `target_clones("avx2", "default")`: the compiler emits an
// SSE2 body and an AVX2 body and the dynamic loader picks one once, at load time, from CPUID. That
// keeps a prebuilt, portable binary fast on AVX2 machines. Float16 has one extra path: on CPUs with
// F16C it is converted 8 lanes at a time by hardware (vcvtph2ps / vcvtps2ph), chosen once by
// __builtin_cpu_supports; elsewhere it uses the branch-free software conversion below, which also
// vectorizes. docs/reduce-kernels.md records what the compiler reported and the measured speed.
//
// Why the NaN and zero rules: recursive doubling has two ranks compute `x op y` and `y op x` and then
// keep going as if they held the same bytes. IEEE sum/prod are commutative except for which NaN
// payload survives, and min/max are not commutative on (-0, +0) or on NaN at all. So any NaN result
// is replaced by one canonical quiet NaN, min prefers -0 and max prefers +0.
//
// Why widen-combine-round for 16-bit floats is exact: float32 has 24 significand bits, at least
// 2p+2 for p = 11 (half) and p = 8 (bfloat16), so rounding a float32 sum, product or quotient of two
// 16-bit values to 16 bits gives the correctly rounded 16-bit result (double rounding is innocuous).
//
// Build the portable body only (to test it on an AVX2 machine) with -DHORA_REDUCE_PORTABLE_ONLY.
#include "reduce/reduce.h"

#include <cstring>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(HORA_REDUCE_PORTABLE_ONLY)
#define HORA_X86_CLONES 1
#include <immintrin.h>
#define HORA_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HORA_X86_CLONES 0
#define HORA_CLONES
#endif

#define HORA_INLINE inline __attribute__((always_inline))

namespace hora {
namespace {

constexpr uint32_t kQuietNaN32 = 0x7fc00000u;
constexpr uint64_t kQuietNaN64 = 0x7ff8000000000000ull;

HORA_INLINE uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
HORA_INLINE uint64_t bitsOf(double f) {
  uint64_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
template <class F, class U>
HORA_INLINE F fromBits(U u) {
  static_assert(sizeof(F) == sizeof(U), "size mismatch");
  F f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <class F> struct FloatBits;
template <> struct FloatBits<float> {
  using U = uint32_t;
  static constexpr U kNaN = kQuietNaN32;
};
template <> struct FloatBits<double> {
  using U = uint64_t;
  static constexpr U kNaN = kQuietNaN64;
};

// ---- 16-bit float conversions, branch-free so the loops that use them vectorize. ----

// cond ? x : y written as masks. A plain ?: here lets GCC sink the float arithmetic of the unused
// arm into a branch, and with the default -ftrapping-math it then refuses to if-convert and
// vectorize the loop.
template <class U>
HORA_INLINE U selectBits(bool cond, U x, U y) {
  const U mask = U{0} - static_cast<U>(cond);
  return (x & mask) | (y & ~mask);
}

HORA_INLINE float halfToFloatInline(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  const uint32_t exponent = magnitude & 0x7c00u;
  // Normal: move the fields into place and rebias the exponent from 15 to 127.
  const uint32_t normal = (magnitude << 13) + (112u << 23);
  // Inf/NaN: all-ones exponent, payload kept (the quiet bit lands on the float quiet bit).
  const uint32_t special = ((magnitude & 0x3ffu) << 13) | 0x7f800000u;
  // Zero and subnormal: the value is mantissa * 2^-24, exact in float32.
  const uint32_t tiny = bitsOf(static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f);
  uint32_t r = selectBits(exponent == 0x7c00u, special, normal);
  r = selectBits(exponent == 0, tiny, r);
  return fromBits<float>(r | sign);
}

HORA_INLINE uint16_t floatToHalfInline(float f) {
  const uint32_t u = bitsOf(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  // NaN: quiet it and keep the top payload bits, as vcvtps2ph does.
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  // Normal half: rebias, then round to nearest even on the 13 dropped bits. A carry out of the
  // mantissa correctly bumps the exponent.
  const uint32_t rebiased = a - (112u << 23);
  const uint32_t normal = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  // Subnormal half: |f| * 2^24 < 1024 is exact; adding 2^23 rounds it to an integer (nearest even,
  // the default rounding mode) in the low mantissa bits. 1024 comes out as the smallest normal.
  const float scaled = fromBits<float>(a) * 0x1p24f + 0x1p23f;
  const uint32_t subnormal = bitsOf(scaled) - 0x4b000000u;
  uint32_t r = selectBits(a < 0x38800000u, subnormal, normal);  // below 2^-14
  r = selectBits(a >= 0x477ff000u, 0x7c00u, r);  // rounds to >= 65520: infinity
  r = selectBits(a > 0x7f800000u, nan, r);
  return static_cast<uint16_t>(r | sign);
}

HORA_INLINE float bfloat16ToFloatInline(uint16_t h) {
  return fromBits<float>(static_cast<uint32_t>(h) << 16);
}

HORA_INLINE uint16_t floatToBfloat16Inline(float f) {
  const uint32_t u = bitsOf(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// ---- Combiners: one element, commutative bit for bit. ----
// For float the NaN selects use selectBits, for the same reason as the conversions: with a plain ?:
// GCC folds the float16 store of the constant NaN and branches around the conversion of the other
// arm. For double the plain ?: is kept: the SSE2 body vectorizes it, the mask form it does not.

template <class F>
HORA_INLINE F canonicalNaN(F r) {
  if constexpr (sizeof(F) == 4) {
    return fromBits<F>(selectBits<uint32_t>(r == r, bitsOf(r), kQuietNaN32));
  } else {
    return r == r ? r : fromBits<F>(FloatBits<F>::kNaN);
  }
}

template <class F>
HORA_INLINE typename FloatBits<F>::U nanUnlessOrdered(F a, F b, typename FloatBits<F>::U r) {
  if constexpr (sizeof(F) == 4) {
    return selectBits<uint32_t>(a == a && b == b, r, kQuietNaN32);
  } else {
    return (a == a && b == b) ? r : FloatBits<F>::kNaN;
  }
}

template <class F> struct FloatSum {
  static HORA_INLINE F apply(F a, F b) {
    const F r = a + b;  // NaN iff an input is NaN or inf + -inf
    return canonicalNaN(r);
  }
};
template <class F> struct FloatProd {
  static HORA_INLINE F apply(F a, F b) {
    const F r = a * b;
    return canonicalNaN(r);
  }
};
template <class F> struct FloatMin {
  static HORA_INLINE F apply(F a, F b) {
    using U = typename FloatBits<F>::U;
    const U ua = bitsOf(a), ub = bitsOf(b);
    U r = a < b ? ua : ub;
    r = a == b ? (ua | ub) : r;  // equal: identical bits, or +0/-0 where OR gives -0
    return fromBits<F>(nanUnlessOrdered(a, b, r));
  }
};
template <class F> struct FloatMax {
  static HORA_INLINE F apply(F a, F b) {
    using U = typename FloatBits<F>::U;
    const U ua = bitsOf(a), ub = bitsOf(b);
    U r = a > b ? ua : ub;
    r = a == b ? (ua & ub) : r;  // equal: identical bits, or +0/-0 where AND gives +0
    return fromBits<F>(nanUnlessOrdered(a, b, r));
  }
};

// Integers wrap on overflow; the arithmetic is done unsigned, where wrapping is defined.
template <class T> struct IntSum {
  using U = std::make_unsigned_t<T>;
  static HORA_INLINE T apply(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
};
template <class T> struct IntProd {
  using U = std::make_unsigned_t<T>;
  // uint8 promotes to int before multiplying; 255 * 255 fits, so no signed overflow.
  static HORA_INLINE T apply(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
};
template <class T> struct IntMin {
  static HORA_INLINE T apply(T a, T b) { return a < b ? a : b; }
};
template <class T> struct IntMax {
  static HORA_INLINE T apply(T a, T b) { return a > b ? a : b; }
};

// ---- Codecs: how a stored element becomes the type it is combined in, and back. ----

template <class T> struct Plain {
  using Stored = T;
  static HORA_INLINE T load(T v) { return v; }
  static HORA_INLINE T store(T v) { return v; }
};
struct HalfCodec {
  using Stored = uint16_t;
  static HORA_INLINE float load(uint16_t v) { return halfToFloatInline(v); }
  static HORA_INLINE uint16_t store(float v) { return floatToHalfInline(v); }
};
struct BFloat16Codec {
  using Stored = uint16_t;
  static HORA_INLINE float load(uint16_t v) { return bfloat16ToFloatInline(v); }
  // Rounding only, no NaN test: a NaN stored here is either the combiners' canonical 0x7fc00000 or a
  // widened bfloat16 NaN divided by the world size; both have zero low 16 bits, so rounding cannot
  // carry into the exponent and the NaN stays NaN. Saves a
  // compare and a blend per 8 lanes in a loop that is compute-bound even on DRAM-sized buffers.
  static HORA_INLINE uint16_t store(float v) {
    const uint32_t u = bitsOf(v);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};

// Separate in-place and out-of-place loops let every pointer be __restrict, so the vectorizer
// needs no runtime overlap check. dst == b reuses the in-place loop because every combiner is
// commutative bit for bit.
template <class Codec, class Op>
HORA_INLINE void combineInPlace(typename Codec::Stored* __restrict dst,
                                const typename Codec::Stored* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Codec::store(Op::apply(Codec::load(dst[i]), Codec::load(src[i])));
}

template <class Codec, class Op>
HORA_INLINE void combineOutOfPlace(typename Codec::Stored* __restrict dst, const typename Codec::Stored* __restrict a,
                                   const typename Codec::Stored* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = Codec::store(Op::apply(Codec::load(a[i]), Codec::load(b[i])));
}

template <class Codec, class Op>
HORA_INLINE void combine(void* dstRaw, const void* aRaw, const void* bRaw, size_t n) {
  using S = typename Codec::Stored;
  S* dst = static_cast<S*>(dstRaw);
  const S* a = static_cast<const S*>(aRaw);
  const S* b = static_cast<const S*>(bRaw);
  if (dst == a) {
    combineInPlace<Codec, Op>(dst, b, n);
  } else if (dst == b) {
    combineInPlace<Codec, Op>(dst, a, n);
  } else {
    combineOutOfPlace<Codec, Op>(dst, a, b, n);
  }
}

using Kernel = void (*)(void* dst, const void* a, const void* b, size_t n);

// One cloned function per (dtype, op); the templates above are inlined into each clone.
#define HORA_DEFINE_KERNEL(NAME, CODEC, OP) \
  HORA_CLONES void NAME(void* d, const void* a, const void* b, size_t n) { combine<CODEC, OP>(d, a, b, n); }

HORA_DEFINE_KERNEL(sumF32, Plain<float>, FloatSum<float>)
HORA_DEFINE_KERNEL(minF32, Plain<float>, FloatMin<float>)
HORA_DEFINE_KERNEL(maxF32, Plain<float>, FloatMax<float>)
HORA_DEFINE_KERNEL(prodF32, Plain<float>, FloatProd<float>)
HORA_DEFINE_KERNEL(sumF64, Plain<double>, FloatSum<double>)
HORA_DEFINE_KERNEL(minF64, Plain<double>, FloatMin<double>)
HORA_DEFINE_KERNEL(maxF64, Plain<double>, FloatMax<double>)
HORA_DEFINE_KERNEL(prodF64, Plain<double>, FloatProd<double>)
HORA_DEFINE_KERNEL(sumF16Soft, HalfCodec, FloatSum<float>)
HORA_DEFINE_KERNEL(minF16Soft, HalfCodec, FloatMin<float>)
HORA_DEFINE_KERNEL(maxF16Soft, HalfCodec, FloatMax<float>)
HORA_DEFINE_KERNEL(prodF16Soft, HalfCodec, FloatProd<float>)
HORA_DEFINE_KERNEL(sumBF16, BFloat16Codec, FloatSum<float>)
HORA_DEFINE_KERNEL(minBF16, BFloat16Codec, FloatMin<float>)
HORA_DEFINE_KERNEL(maxBF16, BFloat16Codec, FloatMax<float>)
HORA_DEFINE_KERNEL(prodBF16, BFloat16Codec, FloatProd<float>)
HORA_DEFINE_KERNEL(sumI32, Plain<int32_t>, IntSum<int32_t>)
HORA_DEFINE_KERNEL(minI32, Plain<int32_t>, IntMin<int32_t>)
HORA_DEFINE_KERNEL(maxI32, Plain<int32_t>, IntMax<int32_t>)
HORA_DEFINE_KERNEL(prodI32, Plain<int32_t>, IntProd<int32_t>)
HORA_DEFINE_KERNEL(sumI64, Plain<int64_t>, IntSum<int64_t>)
HORA_DEFINE_KERNEL(minI64, Plain<int64_t>, IntMin<int64_t>)
HORA_DEFINE_KERNEL(maxI64, Plain<int64_t>, IntMax<int64_t>)
HORA_DEFINE_KERNEL(prodI64, Plain<int64_t>, IntProd<int64_t>)
HORA_DEFINE_KERNEL(sumU8, Plain<uint8_t>, IntSum<uint8_t>)
HORA_DEFINE_KERNEL(minU8, Plain<uint8_t>, IntMin<uint8_t>)
HORA_DEFINE_KERNEL(maxU8, Plain<uint8_t>, IntMax<uint8_t>)
HORA_DEFINE_KERNEL(prodU8, Plain<uint8_t>, IntProd<uint8_t>)

#undef HORA_DEFINE_KERNEL

#if HORA_X86_CLONES
// Float16 with hardware conversion. Blocks of float32 stay in L1: widen both inputs, combine with the
// same float32 combiner as every other path, narrow into dst. dst may equal a or b because each block
// is fully read before it is written.
constexpr size_t kF16Block = 1024;

__attribute__((target("avx2,f16c"))) void widenF16c(float* __restrict out, const uint16_t* __restrict in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = halfToFloatInline(in[i]);
}

__attribute__((target("avx2,f16c"))) void narrowF16c(uint16_t* __restrict out, const float* __restrict in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = floatToHalfInline(in[i]);
}

template <class Op>
__attribute__((target("avx2,f16c"))) void combineF16c(void* dstRaw, const void* aRaw, const void* bRaw, size_t n) {
  uint16_t* dst = static_cast<uint16_t*>(dstRaw);
  const uint16_t* a = static_cast<const uint16_t*>(aRaw);
  const uint16_t* b = static_cast<const uint16_t*>(bRaw);
  alignas(32) float wideA[kF16Block];
  alignas(32) float wideB[kF16Block];
  for (size_t base = 0; base < n; base += kF16Block) {
    const size_t m = n - base < kF16Block ? n - base : kF16Block;
    widenF16c(wideA, a + base, m);
    widenF16c(wideB, b + base, m);
    combineInPlace<Plain<float>, Op>(wideA, wideB, m);
    narrowF16c(dst + base, wideA, m);
  }
}

bool cpuHasF16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}
#endif

Kernel float16Kernel(ReduceOp op) {
#if HORA_X86_CLONES
  if (cpuHasF16c()) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: return combineF16c<FloatSum<float>>;
      case ReduceOp::kMin: return combineF16c<FloatMin<float>>;
      case ReduceOp::kMax: return combineF16c<FloatMax<float>>;
      case ReduceOp::kProd: return combineF16c<FloatProd<float>>;
    }
    return nullptr;
  }
#endif
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return sumF16Soft;
    case ReduceOp::kMin: return minF16Soft;
    case ReduceOp::kMax: return maxF16Soft;
    case ReduceOp::kProd: return prodF16Soft;
  }
  return nullptr;
}

Kernel kernelFor(ReduceOp op, DType dtype) {
  // Rows follow ReduceOp with kAvg folded into kSum: sum, min, max, prod.
  int row = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: row = 0; break;
    case ReduceOp::kMin: row = 1; break;
    case ReduceOp::kMax: row = 2; break;
    case ReduceOp::kProd: row = 3; break;
    default: return nullptr;
  }
  static const Kernel kTable[][4] = {
      {sumF32, minF32, maxF32, prodF32},  // kFloat32
      {sumF64, minF64, maxF64, prodF64},  // kFloat64
      {nullptr, nullptr, nullptr, nullptr},  // kFloat16: float16Kernel picks the path
      {sumBF16, minBF16, maxBF16, prodBF16},
      {sumI32, minI32, maxI32, prodI32},
      {sumI64, minI64, maxI64, prodI64},
      {sumU8, minU8, maxU8, prodU8},
  };
  const int column = static_cast<int>(dtype);
  if (column < 0 || column >= kNumDTypes) return nullptr;
  if (dtype == DType::kFloat16) return float16Kernel(op);
  return kTable[column][row];
}

// ---- Scaled steps (prescaleFactor, postscaleFactor): the same combiners, operands and result scaled. ----

// The factors of one step in the type it computes in (float for the 16-bit floats and float32).
template <class F> struct StepFactors {
  F dstScale, srcScale, divisor, post;
};

// dst[i] = finish(op(dst[i] * dstScale, src[i] * srcScale)). The combiners are commutative bit for bit,
// so which operand is dst does not matter once each carries its own scale.
template <class Codec, class Op, bool kFinish, class F>
HORA_INLINE void scaledInPlace(typename Codec::Stored* __restrict dst, const typename Codec::Stored* __restrict src,
                               size_t n, StepFactors<F> f) {
  for (size_t i = 0; i < n; ++i) {
    F v = Op::apply(Codec::load(dst[i]) * f.dstScale, Codec::load(src[i]) * f.srcScale);
    if constexpr (kFinish) v = canonicalNaN(v / f.divisor * f.post);
    dst[i] = Codec::store(v);
  }
}

template <class Codec, class Op, bool kFinish, class F>
HORA_INLINE void scaledOutOfPlace(typename Codec::Stored* __restrict dst, const typename Codec::Stored* __restrict a,
                                  const typename Codec::Stored* __restrict b, size_t n, StepFactors<F> f) {
  for (size_t i = 0; i < n; ++i) {
    F v = Op::apply(Codec::load(a[i]) * f.dstScale, Codec::load(b[i]) * f.srcScale);
    if constexpr (kFinish) v = canonicalNaN(v / f.divisor * f.post);
    dst[i] = Codec::store(v);
  }
}

template <class Codec, class Op, bool kFinish>
HORA_INLINE void combineScaled(void* dstRaw, const void* aRaw, const void* bRaw, size_t n, const ScaledStep& s) {
  using S = typename Codec::Stored;
  using F = decltype(Codec::load(S{}));
  S* dst = static_cast<S*>(dstRaw);
  const S* a = static_cast<const S*>(aRaw);
  const S* b = static_cast<const S*>(bRaw);
  const F sa = static_cast<F>(s.aScale), sb = static_cast<F>(s.bScale);
  const F divisor = static_cast<F>(s.divisor), post = static_cast<F>(s.post);
  if (dst == a) {
    scaledInPlace<Codec, Op, kFinish, F>(dst, b, n, {sa, sb, divisor, post});
  } else if (dst == b) {
    scaledInPlace<Codec, Op, kFinish, F>(dst, a, n, {sb, sa, divisor, post});
  } else {
    scaledOutOfPlace<Codec, Op, kFinish, F>(dst, a, b, n, {sa, sb, divisor, post});
  }
}

using ScaledKernel = void (*)(void* dst, const void* a, const void* b, size_t n, const ScaledStep& s);

// One cloned function per (dtype, op, last step or not).
#define HORA_DEFINE_SCALED(NAME, CODEC, OP)                                                                  \
  HORA_CLONES void NAME##Step(void* d, const void* a, const void* b, size_t n, const ScaledStep& s) {      \
    combineScaled<CODEC, OP, false>(d, a, b, n, s);                                                          \
  }                                                                                                          \
  HORA_CLONES void NAME##Last(void* d, const void* a, const void* b, size_t n, const ScaledStep& s) {      \
    combineScaled<CODEC, OP, true>(d, a, b, n, s);                                                           \
  }

HORA_DEFINE_SCALED(sumF32, Plain<float>, FloatSum<float>)
HORA_DEFINE_SCALED(minF32, Plain<float>, FloatMin<float>)
HORA_DEFINE_SCALED(maxF32, Plain<float>, FloatMax<float>)
HORA_DEFINE_SCALED(prodF32, Plain<float>, FloatProd<float>)
HORA_DEFINE_SCALED(sumF64, Plain<double>, FloatSum<double>)
HORA_DEFINE_SCALED(minF64, Plain<double>, FloatMin<double>)
HORA_DEFINE_SCALED(maxF64, Plain<double>, FloatMax<double>)
HORA_DEFINE_SCALED(prodF64, Plain<double>, FloatProd<double>)
HORA_DEFINE_SCALED(sumF16, HalfCodec, FloatSum<float>)
HORA_DEFINE_SCALED(minF16, HalfCodec, FloatMin<float>)
HORA_DEFINE_SCALED(maxF16, HalfCodec, FloatMax<float>)
HORA_DEFINE_SCALED(prodF16, HalfCodec, FloatProd<float>)
HORA_DEFINE_SCALED(sumBF16, BFloat16Codec, FloatSum<float>)
HORA_DEFINE_SCALED(minBF16, BFloat16Codec, FloatMin<float>)
HORA_DEFINE_SCALED(maxBF16, BFloat16Codec, FloatMax<float>)
HORA_DEFINE_SCALED(prodBF16, BFloat16Codec, FloatProd<float>)

#undef HORA_DEFINE_SCALED

#if HORA_X86_CLONES
// Float16 with hardware conversion, in blocks as combineF16c: widen, scale and combine in float32, narrow.
template <class Op, bool kFinish>
__attribute__((target("avx2,f16c"))) void scaledF16c(void* dstRaw, const void* aRaw, const void* bRaw, size_t n,
                                                     const ScaledStep& s) {
  uint16_t* dst = static_cast<uint16_t*>(dstRaw);
  const uint16_t* a = static_cast<const uint16_t*>(aRaw);
  const uint16_t* b = static_cast<const uint16_t*>(bRaw);
  const StepFactors<float> f{static_cast<float>(s.aScale), static_cast<float>(s.bScale), static_cast<float>(s.divisor),
                             static_cast<float>(s.post)};
  alignas(32) float wideA[kF16Block];
  alignas(32) float wideB[kF16Block];
  for (size_t base = 0; base < n; base += kF16Block) {
    const size_t m = n - base < kF16Block ? n - base : kF16Block;
    widenF16c(wideA, a + base, m);
    widenF16c(wideB, b + base, m);
    scaledInPlace<Plain<float>, Op, kFinish, float>(wideA, wideB, m, f);
    narrowF16c(dst + base, wideA, m);
  }
}
#endif

ScaledKernel scaledKernelFor(ReduceOp op, DType dtype, bool last) {
  int row = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: row = 0; break;
    case ReduceOp::kMin: row = 1; break;
    case ReduceOp::kMax: row = 2; break;
    case ReduceOp::kProd: row = 3; break;
    default: return nullptr;
  }
#if HORA_X86_CLONES
  if (dtype == DType::kFloat16 && cpuHasF16c()) {
    static const ScaledKernel kF16c[2][4] = {
        {scaledF16c<FloatSum<float>, false>, scaledF16c<FloatMin<float>, false>, scaledF16c<FloatMax<float>, false>,
         scaledF16c<FloatProd<float>, false>},
        {scaledF16c<FloatSum<float>, true>, scaledF16c<FloatMin<float>, true>, scaledF16c<FloatMax<float>, true>,
         scaledF16c<FloatProd<float>, true>},
    };
    return kF16c[last][row];
  }
#endif
  // Columns follow DType's floats: float32, float64, float16, bfloat16.
  static const ScaledKernel kTable[2][4][4] = {
      {{sumF32Step, sumF64Step, sumF16Step, sumBF16Step},
       {minF32Step, minF64Step, minF16Step, minBF16Step},
       {maxF32Step, maxF64Step, maxF16Step, maxBF16Step},
       {prodF32Step, prodF64Step, prodF16Step, prodBF16Step}},
      {{sumF32Last, sumF64Last, sumF16Last, sumBF16Last},
       {minF32Last, minF64Last, minF16Last, minBF16Last},
       {maxF32Last, maxF64Last, maxF16Last, maxBF16Last},
       {prodF32Last, prodF64Last, prodF16Last, prodBF16Last}},
  };
  if (!scalable(dtype)) return nullptr;
  return kTable[last][row][static_cast<int>(dtype)];
}

// scaleAlone: dst[i] = (dst[i] * pre) * post.
template <class Codec>
HORA_INLINE void scaleAloneLoop(void* raw, size_t n, const Scaling& s) {
  using S = typename Codec::Stored;
  using F = decltype(Codec::load(S{}));
  S* __restrict p = static_cast<S*>(raw);
  const F pre = static_cast<F>(s.pre), post = static_cast<F>(s.post);
  for (size_t i = 0; i < n; ++i) p[i] = Codec::store(canonicalNaN(Codec::load(p[i]) * pre * post));
}

HORA_CLONES void aloneF32(void* p, size_t n, const Scaling& s) { scaleAloneLoop<Plain<float>>(p, n, s); }
HORA_CLONES void aloneF64(void* p, size_t n, const Scaling& s) { scaleAloneLoop<Plain<double>>(p, n, s); }
HORA_CLONES void aloneF16(void* p, size_t n, const Scaling& s) { scaleAloneLoop<HalfCodec>(p, n, s); }
HORA_CLONES void aloneBF16(void* p, size_t n, const Scaling& s) { scaleAloneLoop<BFloat16Codec>(p, n, s); }

// ---- Averaging: divide once at the end. ----

template <class Codec, class F>
HORA_INLINE void divideFloats(void* raw, size_t n, int divisor) {
  using S = typename Codec::Stored;
  S* p = static_cast<S*>(raw);
  const F d = static_cast<F>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = Codec::store(Codec::load(p[i]) / d);
}

template <class T>
HORA_INLINE void divideInts(void* raw, size_t n, int divisor) {
  // Bytes divide as unsigned int: a world of 256 or more ranks must not become a uint8 divisor of 0.
  using Wide = std::conditional_t<(sizeof(T) < sizeof(int)), unsigned, T>;
  T* p = static_cast<T*>(raw);
  const Wide d = static_cast<Wide>(divisor);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<Wide>(p[i]) / d);  // truncates toward zero
}

HORA_CLONES void scaleF32(void* p, size_t n, int d) { divideFloats<Plain<float>, float>(p, n, d); }
HORA_CLONES void scaleF64(void* p, size_t n, int d) { divideFloats<Plain<double>, double>(p, n, d); }
HORA_CLONES void scaleF16(void* p, size_t n, int d) { divideFloats<HalfCodec, float>(p, n, d); }
HORA_CLONES void scaleBF16(void* p, size_t n, int d) { divideFloats<BFloat16Codec, float>(p, n, d); }
HORA_CLONES void scaleI32(void* p, size_t n, int d) { divideInts<int32_t>(p, n, d); }
HORA_CLONES void scaleI64(void* p, size_t n, int d) { divideInts<int64_t>(p, n, d); }
HORA_CLONES void scaleU8(void* p, size_t n, int d) { divideInts<uint8_t>(p, n, d); }

}  // namespace

void reduceTwo(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, size_t count) {
  if (count == 0) return;
  const Kernel kernel = kernelFor(op, dtype);
  if (kernel != nullptr) kernel(dst, a, b, count);
}

void reduceInto(ReduceOp op, DType dtype, void* dst, const void* src, size_t count) {
  reduceTwo(op, dtype, dst, dst, src, count);
}

void scaleForAvg(DType dtype, void* dst, size_t count, int divisor) {
  // The divisor is a world size. 1 is the identity; anything below 1 is a caller bug that would
  // otherwise divide integers by zero or flip signs, so the buffer is left as it is.
  if (count == 0 || divisor <= 1) return;
  switch (dtype) {
    case DType::kFloat32: scaleF32(dst, count, divisor); return;
    case DType::kFloat64: scaleF64(dst, count, divisor); return;
    case DType::kFloat16: scaleF16(dst, count, divisor); return;
    case DType::kBFloat16: scaleBF16(dst, count, divisor); return;
    case DType::kInt32: scaleI32(dst, count, divisor); return;
    case DType::kInt64: scaleI64(dst, count, divisor); return;
    case DType::kUint8: scaleU8(dst, count, divisor); return;
  }
}

ScaledStep scaledStep(const Scaling& s, bool aRaw, bool bRaw, bool last, ReduceOp op, int worldSize) {
  ScaledStep step;
  step.aScale = aRaw ? s.pre : 1;
  step.bScale = bRaw ? s.pre : 1;
  step.finish = last;
  step.divisor = last && op == ReduceOp::kAvg && worldSize > 1 ? worldSize : 1;
  step.post = last ? s.post : 1;
  return step;
}

void reduceTwoScaled(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, size_t count, const ScaledStep& step) {
  if (count == 0) return;
  const ScaledKernel kernel = scaledKernelFor(op, dtype, step.finish);
  if (kernel != nullptr) kernel(dst, a, b, count, step);
}

void scaleAlone(DType dtype, void* dst, size_t count, const Scaling& s) {
  if (count == 0 || !s.active()) return;
  switch (dtype) {
    case DType::kFloat32: aloneF32(dst, count, s); return;
    case DType::kFloat64: aloneF64(dst, count, s); return;
    case DType::kFloat16: aloneF16(dst, count, s); return;
    case DType::kBFloat16: aloneBF16(dst, count, s); return;
    default: return;
  }
}

float halfToFloat(uint16_t h) { return halfToFloatInline(h); }
uint16_t floatToHalf(float f) { return floatToHalfInline(f); }
float bfloat16ToFloat(uint16_t h) { return bfloat16ToFloatInline(h); }
uint16_t floatToBfloat16(float f) { return floatToBfloat16Inline(f); }

}  // namespace hora
