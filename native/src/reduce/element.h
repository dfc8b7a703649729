// One element of the CPU reduction kernels (reduce.cc): the branch-free 16-bit float conversions, the
// combiners (one element, commutative bit for bit) and the codecs (how a stored element becomes the type it
// is combined in, and back). Everything is forced inline into the loops of reduce.cc, which is the only
// includer; the reasons for the NaN and zero rules and for the branch-free forms are there and below.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#define HORA_INLINE inline __attribute__((always_inline))

namespace hora {
namespace reduce_element {

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
  // Types narrower than int multiply as unsigned int: a uint16_t would promote to int, where
  // 65535 * 65535 overflows.
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
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

}  // namespace reduce_element
}  // namespace hora
