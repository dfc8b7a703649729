// Element-wise reduction kernels for the CPU (API and guarantees in reduce.h).
//
// How it works. Each (dtype, op) pair is one kernel: a plain loop `dst[i] = combine(a[i], b[i])` whose
// body is written without branches (every `?:` is a select the vectorizer turns into a blend), so
// `-O3` vectorizes it. The kernels carry `target_clones("avx2", "default")`: the compiler emits an
// SSE2 body and an AVX2 body and the dynamic loader picks one once, at load time, from CPUID. That
// keeps a prebuilt, portable binary fast on AVX2 machines. Float16 has one extra path: on CPUs with
// F16C it is converted 8 lanes at a time by hardware (vcvtph2ps / vcvtps2ph), chosen once by
// __builtin_cpu_supports; elsewhere it uses the branch-free software conversion (element.h), which also
// vectorizes. One element's conversions, combiners and codecs are in element.h; this file has the loops,
// the kernels made from them (one list of dtypes, HORA_FOR_EACH_DTYPE) and the tables that pick one. docs/reduce-kernels.md records what the compiler reported and the measured speed.
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
#include <limits>
#include <type_traits>

#include "reduce/element.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(HORA_REDUCE_PORTABLE_ONLY)
#define HORA_X86_CLONES 1
#include <immintrin.h>
#define HORA_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HORA_X86_CLONES 0
#define HORA_CLONES
#endif

namespace hora {
namespace {

using namespace reduce_element;  // NOLINT: the element operations below are this file's vocabulary

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

// The dtypes with CPU kernels, in DType order: name suffix, codec, combiner family (Float or Int), the
// type combined in. X(SUFFIX, CODEC, FAMILY, T) is applied to each; the float dtypes also take a Scaling.
// Float16 here is the software-conversion path (float16Kernel picks F16C where the CPU has it).
#define HORA_FOR_EACH_FLOAT_DTYPE(X)        \
  X(F32, Plain<float>, Float, float)        \
  X(F64, Plain<double>, Float, double)      \
  X(F16Soft, HalfCodec, Float, float)       \
  X(BF16, BFloat16Codec, Float, float)
#define HORA_FOR_EACH_DTYPE(X)              \
  HORA_FOR_EACH_FLOAT_DTYPE(X)              \
  X(I32, Plain<int32_t>, Int, int32_t)      \
  X(I64, Plain<int64_t>, Int, int64_t)      \
  X(U8, Plain<uint8_t>, Int, uint8_t)        \
  X(I8, Plain<int8_t>, Int, int8_t)         \
  X(I16, Plain<int16_t>, Int, int16_t)      \
  X(U16, Plain<uint16_t>, Int, uint16_t)

// One row of a kernel table: the four operators of one dtype in the order of opRow.
#define HORA_OPS_ROW(SUFFIX) {sum##SUFFIX, min##SUFFIX, max##SUFFIX, prod##SUFFIX}

// Rows of the kernel tables follow ReduceOp with kAvg folded into kSum: sum, min, max, prod; -1 for none.
HORA_INLINE int opRow(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return 0;
    case ReduceOp::kMin: return 1;
    case ReduceOp::kMax: return 2;
    case ReduceOp::kProd: return 3;
    default: return -1;
  }
}

// One cloned function per (dtype, op); the templates above are inlined into each clone.
#define HORA_DEFINE_KERNEL(NAME, CODEC, OP) \
  HORA_CLONES void NAME(void* d, const void* a, const void* b, size_t n) { combine<CODEC, OP>(d, a, b, n); }
#define HORA_DEFINE_KERNELS(SUFFIX, CODEC, FAMILY, T)         \
  HORA_DEFINE_KERNEL(sum##SUFFIX, CODEC, FAMILY##Sum<T>)      \
  HORA_DEFINE_KERNEL(min##SUFFIX, CODEC, FAMILY##Min<T>)      \
  HORA_DEFINE_KERNEL(max##SUFFIX, CODEC, FAMILY##Max<T>)      \
  HORA_DEFINE_KERNEL(prod##SUFFIX, CODEC, FAMILY##Prod<T>)

HORA_FOR_EACH_DTYPE(HORA_DEFINE_KERNELS)

#undef HORA_DEFINE_KERNELS
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
  const int row = opRow(op);
  if (row < 0) return nullptr;
  // One row per DType (kFloat16's is not read here: float16Kernel picks the path), one column per opRow.
  static const Kernel kTable[][4] = {
#define HORA_KERNEL_ROW(SUFFIX, CODEC, FAMILY, T) HORA_OPS_ROW(SUFFIX),
      HORA_FOR_EACH_DTYPE(HORA_KERNEL_ROW)
#undef HORA_KERNEL_ROW
  };
  static_assert(sizeof kTable / sizeof kTable[0] == kNumDTypes, "one row per DType");
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

// One cloned function per (dtype, op, last step or not): NAME##Step and NAME##Last.
#define HORA_DEFINE_SCALED(NAME, CODEC, OP)                                                                  \
  HORA_CLONES void NAME##Step(void* d, const void* a, const void* b, size_t n, const ScaledStep& s) {      \
    combineScaled<CODEC, OP, false>(d, a, b, n, s);                                                          \
  }                                                                                                          \
  HORA_CLONES void NAME##Last(void* d, const void* a, const void* b, size_t n, const ScaledStep& s) {      \
    combineScaled<CODEC, OP, true>(d, a, b, n, s);                                                           \
  }
#define HORA_DEFINE_SCALED_KERNELS(SUFFIX, CODEC, FAMILY, T)   \
  HORA_DEFINE_SCALED(sum##SUFFIX, CODEC, FAMILY##Sum<T>)       \
  HORA_DEFINE_SCALED(min##SUFFIX, CODEC, FAMILY##Min<T>)       \
  HORA_DEFINE_SCALED(max##SUFFIX, CODEC, FAMILY##Max<T>)       \
  HORA_DEFINE_SCALED(prod##SUFFIX, CODEC, FAMILY##Prod<T>)

HORA_FOR_EACH_FLOAT_DTYPE(HORA_DEFINE_SCALED_KERNELS)

#undef HORA_DEFINE_SCALED_KERNELS
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
  const int row = opRow(op);
  if (row < 0) return nullptr;
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
  // [not last, last] x one row per float DType (float32, float64, float16, bfloat16) x one column per opRow.
  static const ScaledKernel kTable[2][4][4] = {
#define HORA_STEP_ROW(SUFFIX, CODEC, FAMILY, T) {sum##SUFFIX##Step, min##SUFFIX##Step, max##SUFFIX##Step, prod##SUFFIX##Step},
#define HORA_LAST_ROW(SUFFIX, CODEC, FAMILY, T) {sum##SUFFIX##Last, min##SUFFIX##Last, max##SUFFIX##Last, prod##SUFFIX##Last},
      {HORA_FOR_EACH_FLOAT_DTYPE(HORA_STEP_ROW)},
      {HORA_FOR_EACH_FLOAT_DTYPE(HORA_LAST_ROW)},
#undef HORA_LAST_ROW
#undef HORA_STEP_ROW
  };
  if (!scalable(dtype)) return nullptr;
  return kTable[last][static_cast<int>(dtype)][row];
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
  // Types narrower than int divide as int (signed) or unsigned int: a world of 256 or more ranks must not
  // become a uint8 divisor of 0, and an int8 or int16 sum must keep its sign.
  using Narrow = std::conditional_t<std::is_signed_v<T>, int, unsigned>;
  using Wide = std::conditional_t<(sizeof(T) < sizeof(int)), Narrow, T>;
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
HORA_CLONES void scaleI8(void* p, size_t n, int d) { divideInts<int8_t>(p, n, d); }
HORA_CLONES void scaleI16(void* p, size_t n, int d) { divideInts<int16_t>(p, n, d); }
HORA_CLONES void scaleU16(void* p, size_t n, int d) { divideInts<uint16_t>(p, n, d); }

}  // namespace

void reduceTwo(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, size_t count) {
  if (count == 0) return;
  const Kernel kernel = kernelFor(op, dtype);
  if (kernel != nullptr) kernel(dst, a, b, count);
}

void reduceInto(ReduceOp op, DType dtype, void* dst, const void* src, size_t count) {
  reduceTwo(op, dtype, dst, dst, src, count);
}

namespace {

template <class T>
void fillWith(void* dst, size_t count, T value) {
  T* p = static_cast<T*>(dst);
  for (size_t i = 0; i < count; ++i) p[i] = value;
}

// The identity of op in a type the kernels combine in place (an integer or a float of its own width).
template <class T>
T identityOf(ReduceOp op) {
  constexpr bool isFloat = std::numeric_limits<T>::is_iec559;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return isFloat ? -T(0) : T(0);
    case ReduceOp::kProd: return T(1);
    case ReduceOp::kMin: return isFloat ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
    case ReduceOp::kMax: return isFloat ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
  }
  return T(0);
}

// The same for a 16-bit float, from its float32 value (exact: every identity is a 16-bit value).
uint16_t identityOf16(ReduceOp op, bool bfloat) {
  const float f = identityOf<float>(op);
  return bfloat ? floatToBfloat16(f) : floatToHalf(f);
}

}  // namespace

void fillIdentity(ReduceOp op, DType dtype, void* dst, size_t count) {
  switch (dtype) {
    case DType::kFloat32: fillWith(dst, count, identityOf<float>(op)); return;
    case DType::kFloat64: fillWith(dst, count, identityOf<double>(op)); return;
    case DType::kFloat16: fillWith(dst, count, identityOf16(op, false)); return;
    case DType::kBFloat16: fillWith(dst, count, identityOf16(op, true)); return;
    case DType::kInt32: fillWith(dst, count, identityOf<int32_t>(op)); return;
    case DType::kInt64: fillWith(dst, count, identityOf<int64_t>(op)); return;
    case DType::kUint8: fillWith(dst, count, identityOf<uint8_t>(op)); return;
    case DType::kInt8: fillWith(dst, count, identityOf<int8_t>(op)); return;
    case DType::kInt16: fillWith(dst, count, identityOf<int16_t>(op)); return;
    case DType::kUint16: fillWith(dst, count, identityOf<uint16_t>(op)); return;
  }
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
    case DType::kInt8: scaleI8(dst, count, divisor); return;
    case DType::kInt16: scaleI16(dst, count, divisor); return;
    case DType::kUint16: scaleU16(dst, count, divisor); return;
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
