// Tests for the CPU reduction kernels (native/src/reduce): every dtype x op against a scalar reference
// written independently here, odd lengths, offset pointers, aliasing, bit-exact commutativity,
// 16-bit float conversions, scaleForAvg, the scaled steps of prescaleFactor / postscaleFactor, and the
// identity of each op (fillIdentity, what a joined rank contributes).
//
//   g++ -std=c++17 -O2 -ffp-contract=off -Inative/src native/test/reduce_test.cc native/src/reduce/reduce.cc
//       -o /tmp/reduce_test && /tmp/reduce_test
// Prints "ok N - what" or "not ok N - what: details" per check (tap.h); exits 1 if any failed.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/types.h"
#include "reduce/reduce.h"
#include "tap.h"

using namespace hora;

namespace {

void expect(bool cond, const std::string& what, const std::string& detail = "") {
  testing::check(cond, what, detail);
}

template <class To, class From>
To bitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "size");
  To t;
  std::memcpy(&t, &v, sizeof t);
  return t;
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- Reference 16-bit conversions, computed with exact double arithmetic instead of bit tricks. ----

double refHalfToDouble(uint16_t h) {
  const int sign = h >> 15;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double v;
  if (exponent == 0) v = std::ldexp(mantissa, -24);
  else if (exponent == 31) v = mantissa ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else v = std::ldexp(1024 + mantissa, exponent - 25);
  return sign ? -v : v;
}

// Nearest half to a non-NaN value, ties to even.
uint16_t refDoubleToHalf(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  if (a >= 65520.0) return sign | 0x7c00;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int quantumExp = (e - 1) - 10;
  if (quantumExp < -24) quantumExp = -24;
  const double q = std::nearbyint(std::ldexp(a, -quantumExp));  // exact scaling; default mode is RNE
  const double v = std::ldexp(q, quantumExp);
  if (v < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::ldexp(v, 24));
  std::frexp(v, &e);
  const int field = (e - 1) + 15;
  const int mantissa = static_cast<int>(std::ldexp(v, 10 - (e - 1))) - 1024;
  return sign | static_cast<uint16_t>(field << 10) | static_cast<uint16_t>(mantissa);
}

// Nearest bfloat16 to a non-NaN float, ties to even.
uint16_t refFloatToBfloat16(float x) {
  const uint32_t u = bitCast<uint32_t>(x);
  const uint32_t upper = u >> 16;
  const uint32_t lower = u & 0xffff;
  if (lower > 0x8000 || (lower == 0x8000 && (upper & 1))) return static_cast<uint16_t>(upper + 1);
  return static_cast<uint16_t>(upper);
}

// ---- Reference combine. ----

constexpr uint32_t kNaN32 = 0x7fc00000u;
constexpr uint64_t kNaN64 = 0x7ff8000000000000ull;

template <class F> F canonicalNaN();
template <> float canonicalNaN<float>() { return bitCast<float>(kNaN32); }
template <> double canonicalNaN<double>() { return bitCast<double>(kNaN64); }

template <class F>
F refFloat(ReduceOp op, F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return canonicalNaN<F>();
  F r;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: r = a + b; break;
    case ReduceOp::kProd: r = a * b; break;
    case ReduceOp::kMin:
      if (a == b) r = std::signbit(a) ? a : b;  // min(-0, +0) = -0
      else r = a < b ? a : b;
      break;
    case ReduceOp::kMax:
      if (a == b) r = std::signbit(a) ? b : a;  // max(-0, +0) = +0
      else r = a > b ? a : b;
      break;
    default: std::abort();
  }
  return std::isnan(r) ? canonicalNaN<F>() : r;
}

template <class T>
T refInt(ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::kProd:
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<U>(b)));
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
  }
  std::abort();
}

uint16_t refHalfOp(ReduceOp op, uint16_t a, uint16_t b) {
  const float r = refFloat<float>(op, static_cast<float>(refHalfToDouble(a)), static_cast<float>(refHalfToDouble(b)));
  return std::isnan(r) ? 0x7e00 : refDoubleToHalf(r);
}

uint16_t refBf16Op(ReduceOp op, uint16_t a, uint16_t b) {
  const float r = refFloat<float>(op, bitCast<float>(uint32_t{a} << 16), bitCast<float>(uint32_t{b} << 16));
  return std::isnan(r) ? 0x7fc0 : refFloatToBfloat16(r);
}

// Reference on raw element bytes, so one driver covers every dtype.
void refElement(ReduceOp op, DType t, void* out, const void* a, const void* b) {
  switch (t) {
#define HORA_REF(DT, T, EXPR)      \
  case DT: {                       \
    T x, y, r;                     \
    std::memcpy(&x, a, sizeof x);  \
    std::memcpy(&y, b, sizeof y);  \
    r = EXPR;                      \
    std::memcpy(out, &r, sizeof r); \
    return;                        \
  }
    HORA_REF(DType::kFloat32, float, refFloat<float>(op, x, y))
    HORA_REF(DType::kFloat64, double, refFloat<double>(op, x, y))
    HORA_REF(DType::kFloat16, uint16_t, refHalfOp(op, x, y))
    HORA_REF(DType::kBFloat16, uint16_t, refBf16Op(op, x, y))
    HORA_REF(DType::kInt32, int32_t, refInt<int32_t>(op, x, y))
    HORA_REF(DType::kInt64, int64_t, refInt<int64_t>(op, x, y))
    HORA_REF(DType::kUint8, uint8_t, refInt<uint8_t>(op, x, y))
    HORA_REF(DType::kInt8, int8_t, refInt<int8_t>(op, x, y))
    HORA_REF(DType::kInt16, int16_t, refInt<int16_t>(op, x, y))
    HORA_REF(DType::kUint16, uint16_t, refInt<uint16_t>(op, x, y))
#undef HORA_REF
  }
}

// ---- Test data: random values with the awkward ones mixed in. ----

void fillRandom(DType t, uint8_t* p, size_t count, std::mt19937_64& rng) {
  const size_t size = dtypeSize(t);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* e = p + i * size;
    const uint64_t r = rng();
    const int pick = static_cast<int>(rng() % 16);
    switch (t) {
      case DType::kFloat32: {
        static const uint32_t specials[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000,
                                            0xffc00001, 0x7f800001, 0x7fbfffff, 0x00000001, 0x807fffff};
        float f = static_cast<float>(static_cast<int64_t>(r % 2001) - 1000) / 8.0f;
        if (pick == 0) f = bitCast<float>(specials[r % 10]);
        else if (pick == 1) f = bitCast<float>(static_cast<uint32_t>(r));
        std::memcpy(e, &f, 4);
        break;
      }
      case DType::kFloat64: {
        static const uint64_t specials[] = {0, 0x8000000000000000ull, 0x7ff0000000000000ull,
                                            0xfff0000000000000ull, 0x7ff8000000000000ull, 0xfff8000000000123ull,
                                            0x7ff0000000000001ull, 1, 0x800fffffffffffffull};
        double f = static_cast<double>(static_cast<int64_t>(r % 2001) - 1000) / 8.0;
        if (pick == 0) f = bitCast<double>(specials[r % 9]);
        else if (pick == 1) f = bitCast<double>(r);
        std::memcpy(e, &f, 8);
        break;
      }
      case DType::kFloat16:
      case DType::kBFloat16: {
        // Any bit pattern: NaNs, infinities, subnormals and both zeros all occur.
        uint16_t h = static_cast<uint16_t>(r);
        if (pick == 0) h = (r >> 16) & 1 ? 0x8000 : 0x0000;
        std::memcpy(e, &h, 2);
        break;
      }
      case DType::kInt32: {
        int32_t v = static_cast<int32_t>(r);
        if (pick == 0) v = (r >> 40) & 1 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max();
        else if (pick < 8) v = static_cast<int32_t>(r % 201) - 100;
        std::memcpy(e, &v, 4);
        break;
      }
      case DType::kInt64: {
        int64_t v = static_cast<int64_t>(r);
        if (pick == 0) v = (r >> 40) & 1 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
        else if (pick < 8) v = static_cast<int64_t>(r % 201) - 100;
        std::memcpy(e, &v, 8);
        break;
      }
      case DType::kUint8: *e = static_cast<uint8_t>(r); break;
      case DType::kInt8: *e = static_cast<uint8_t>(pick == 0 ? ((r >> 40) & 1 ? 0x80 : 0x7f) : r); break;
      case DType::kInt16:
      case DType::kUint16: {
        // Any pattern, with the int16 and uint16 bounds (0x7fff, 0x8000, 0xffff) often.
        uint16_t v = static_cast<uint16_t>(r);
        if (pick < 3) v = pick == 0 ? 0x7fff : pick == 1 ? 0x8000 : 0xffff;
        std::memcpy(e, &v, 2);
        break;
      }
    }
  }
}

const DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                            DType::kInt32,   DType::kInt64,   DType::kUint8,   DType::kInt8,
                            DType::kInt16,   DType::kUint16};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd};

// A buffer whose data starts `offsetElems` elements past a 64-byte boundary, so vector loops see
// pointers that are aligned to the element but not to the vector.
struct Buffer {
  std::vector<uint8_t> storage;
  uint8_t* data;
  Buffer(size_t bytes, size_t offsetBytes) : storage(bytes + offsetBytes + 128) {
    uintptr_t base = reinterpret_cast<uintptr_t>(storage.data());
    base = (base + 63) & ~uintptr_t{63};
    data = reinterpret_cast<uint8_t*>(base) + offsetBytes;
  }
};

// Compares result bytes with the reference element by element; reports the first mismatch.
bool matchesReference(ReduceOp op, DType t, const uint8_t* out, const uint8_t* a, const uint8_t* b, size_t count,
                      std::string* detail) {
  const size_t size = dtypeSize(t);
  uint8_t want[8];
  for (size_t i = 0; i < count; ++i) {
    refElement(op, t, want, a + i * size, b + i * size);
    if (std::memcmp(want, out + i * size, size) != 0) {
      uint64_t got = 0, exp = 0, x = 0, y = 0;
      std::memcpy(&got, out + i * size, size);
      std::memcpy(&exp, want, size);
      std::memcpy(&x, a + i * size, size);
      std::memcpy(&y, b + i * size, size);
      *detail = "element " + std::to_string(i) + ": " + hex(x) + " op " + hex(y) + " gave " + hex(got) +
                ", expected " + hex(exp);
      return false;
    }
  }
  return true;
}

std::string caseName(const char* fn, ReduceOp op, DType t, size_t count, size_t offset) {
  return std::string(fn) + " " + dtypeName(t) + " " + opName(op) + " n=" + std::to_string(count) +
         " offset=" + std::to_string(offset);
}

void testKernelsAgainstReference() {
  std::mt19937_64 rng(12345);
  const size_t lengths[] = {0, 1, 7, 33, 1000003};
  for (DType t : kAllDTypes) {
    const size_t size = dtypeSize(t);
    for (ReduceOp op : kAllOps) {
      for (size_t count : lengths) {
        const size_t offset = count == 33 ? size : 0;  // one length also runs off the vector alignment
        const size_t bytes = count * size;
        Buffer a(bytes, offset), b(bytes, offset), out(bytes, offset), saved(bytes, offset);
        fillRandom(t, a.data, count, rng);
        fillRandom(t, b.data, count, rng);
        std::string detail;

        // reduceInto: dst = dst op src.
        std::memcpy(saved.data, a.data, bytes);
        std::memcpy(out.data, a.data, bytes);
        reduceInto(op, t, out.data, b.data, count);
        bool ok = matchesReference(op, t, out.data, saved.data, b.data, count, &detail);
        expect(ok, caseName("reduceInto", op, t, count, offset), detail);

        // reduceTwo out of place, both orders, and the inputs left untouched.
        reduceTwo(op, t, out.data, a.data, b.data, count);
        ok = matchesReference(op, t, out.data, a.data, b.data, count, &detail) &&
             std::memcmp(a.data, saved.data, bytes) == 0;
        expect(ok, caseName("reduceTwo", op, t, count, offset), detail);
        Buffer swapped(bytes, offset);
        reduceTwo(op, t, swapped.data, b.data, a.data, count);
        expect(bytes == 0 || std::memcmp(swapped.data, out.data, bytes) == 0,
               caseName("commutative bit for bit", op, t, count, offset));
      }
    }
  }
}

void testAliasing() {
  std::mt19937_64 rng(7);
  const size_t count = 1001;
  for (DType t : kAllDTypes) {
    const size_t bytes = count * dtypeSize(t);
    for (ReduceOp op : kAllOps) {
      Buffer a(bytes, 0), b(bytes, 0), work(bytes, 0), other(bytes, 0);
      fillRandom(t, a.data, count, rng);
      fillRandom(t, b.data, count, rng);
      std::string detail;

      std::memcpy(work.data, a.data, bytes);  // dst == a
      reduceTwo(op, t, work.data, work.data, b.data, count);
      expect(matchesReference(op, t, work.data, a.data, b.data, count, &detail),
             caseName("reduceTwo dst==a", op, t, count, 0), detail);

      std::memcpy(work.data, b.data, bytes);  // dst == b
      reduceTwo(op, t, work.data, a.data, work.data, count);
      expect(matchesReference(op, t, work.data, a.data, b.data, count, &detail),
             caseName("reduceTwo dst==b", op, t, count, 0), detail);

      std::memcpy(work.data, a.data, bytes);  // dst == a == b
      reduceTwo(op, t, work.data, work.data, work.data, count);
      expect(matchesReference(op, t, work.data, a.data, a.data, count, &detail),
             caseName("reduceTwo dst==a==b", op, t, count, 0), detail);
      (void)other;
    }
  }
}

// Hand-picked pairs where commutativity usually breaks: NaN payloads, signed zeros, inf - inf.
void testCommutativitySpecials() {
  const uint32_t f32[] = {0x7fc00000, 0xffc00000, 0x7f800001, 0xffbfffff, 0x7fc12345, 0x00000000, 0x80000000,
                          0x7f800000, 0xff800000, 0x3f800000, 0xbf800000, 0x00000001};
  const size_t n = sizeof f32 / sizeof f32[0];
  for (ReduceOp op : kAllOps) {
    std::vector<float> a, b, ab(n * n), ba(n * n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) {
        a.push_back(bitCast<float>(f32[i]));
        b.push_back(bitCast<float>(f32[j]));
      }
    reduceTwo(op, DType::kFloat32, ab.data(), a.data(), b.data(), n * n);
    reduceTwo(op, DType::kFloat32, ba.data(), b.data(), a.data(), n * n);
    bool ok = std::memcmp(ab.data(), ba.data(), n * n * 4) == 0;
    bool nanCanonical = true;
    for (size_t k = 0; k < n * n; ++k)
      if (std::isnan(ab[k]) && bitCast<uint32_t>(ab[k]) != kNaN32) nanCanonical = false;
    expect(ok && nanCanonical, std::string("float32 specials commute, NaN canonical: ") + opName(op));

    std::vector<double> da, db, dab(n * n), dba(n * n);
    for (size_t k = 0; k < n * n; ++k) {
      da.push_back(a[k]);  // float -> double keeps NaN-ness, sign and zero sign
      db.push_back(b[k]);
    }
    reduceTwo(op, DType::kFloat64, dab.data(), da.data(), db.data(), n * n);
    reduceTwo(op, DType::kFloat64, dba.data(), db.data(), da.data(), n * n);
    ok = std::memcmp(dab.data(), dba.data(), n * n * 8) == 0;
    nanCanonical = true;
    for (size_t k = 0; k < n * n; ++k)
      if (std::isnan(dab[k]) && bitCast<uint64_t>(dab[k]) != kNaN64) nanCanonical = false;
    expect(ok && nanCanonical, std::string("float64 specials commute, NaN canonical: ") + opName(op));
  }
  // Signed zeros, spelled out.
  float zeros[2] = {-0.0f, 0.0f}, zerosSwapped[2] = {0.0f, -0.0f}, r[2];
  reduceTwo(ReduceOp::kMin, DType::kFloat32, r, zeros, zerosSwapped, 2);
  expect(std::signbit(r[0]) && std::signbit(r[1]), "min(-0,+0) = min(+0,-0) = -0");
  reduceTwo(ReduceOp::kMax, DType::kFloat32, r, zeros, zerosSwapped, 2);
  expect(!std::signbit(r[0]) && !std::signbit(r[1]), "max(-0,+0) = max(+0,-0) = +0");
  uint16_t h16a[2] = {0x7e01, 0x3c00}, h16b[2] = {0x3c00, 0xfe00}, hr[2];
  reduceTwo(ReduceOp::kSum, DType::kFloat16, hr, h16a, h16b, 2);
  expect(hr[0] == 0x7e00 && hr[1] == 0x7e00, "float16 NaN sum is canonical 0x7e00", hex(hr[0]) + " " + hex(hr[1]));
  uint16_t bfa[2] = {0x7fc1, 0x3f80}, bfb[2] = {0x3f80, 0xff81}, br[2];
  reduceTwo(ReduceOp::kMax, DType::kBFloat16, br, bfa, bfb, 2);
  expect(br[0] == 0x7fc0 && br[1] == 0x7fc0, "bfloat16 NaN max is canonical 0x7fc0", hex(br[0]) + " " + hex(br[1]));
}

void testHalfConversions() {
  int bad = 0;
  std::string detail;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = halfToFloat(static_cast<uint16_t>(h));
    const double want = refHalfToDouble(static_cast<uint16_t>(h));
    const bool isNaN = ((h >> 10) & 0x1f) == 31 && (h & 0x3ff);
    bool ok;
    if (isNaN) {
      // NaN stays NaN with its sign; converting back gives the same NaN, quieted.
      const uint16_t back = floatToHalf(f);
      ok = std::isnan(f) && std::signbit(f) == ((h & 0x8000) != 0) && back == (h | 0x200);
    } else {
      ok = static_cast<double>(f) == want && std::signbit(f) == std::signbit(want) &&
           floatToHalf(f) == static_cast<uint16_t>(h);
    }
    if (!ok && bad++ == 0) detail = "half " + hex(h) + " -> " + hex(bitCast<uint32_t>(f));
  }
  expect(bad == 0, "float16 -> float32 -> float16 exact for all 65536 patterns", detail);

  // Midpoints between neighbouring halfs must round to the even one, and just off the midpoint
  // to the nearer one.
  bad = 0;
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const double lo = refHalfToDouble(static_cast<uint16_t>(h));
    const double hi = refHalfToDouble(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: needs 12 significant bits
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    const uint16_t got = floatToHalf(mid);
    const uint16_t below = floatToHalf(std::nextafter(mid, 0.0f));
    const uint16_t above = floatToHalf(std::nextafter(mid, 1e9f));
    const uint16_t negGot = floatToHalf(-mid);
    if ((got != even || below != h || above != h + 1 || negGot != (even | 0x8000)) && bad++ == 0)
      detail = "tie above " + hex(h) + " gave " + hex(got) + " below " + hex(below) + " above " + hex(above);
  }
  expect(bad == 0, "float32 -> float16 ties to even, all finite midpoints", detail);

  // Overflow boundary: 65504 is the largest half; 65520 is the midpoint to 2^16 and rounds to inf.
  expect(floatToHalf(65519.996f) == 0x7bff && floatToHalf(65520.0f) == 0x7c00 && floatToHalf(1e30f) == 0x7c00 &&
             floatToHalf(-INFINITY) == 0xfc00 && floatToHalf(std::ldexp(1.0f, -25)) == 0x0000 &&
             floatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001 &&
             floatToHalf(bitCast<float>(0x7fc00000u)) == 0x7e00,
         "float32 -> float16 overflow, underflow and NaN edges");

  // Random float32 bit patterns against the exact reference.
  std::mt19937 rng(99);
  bad = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float f = bitCast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const uint16_t got = floatToHalf(f), want = refDoubleToHalf(f);
    if (got != want && bad++ == 0) detail = hex(bitCast<uint32_t>(f)) + " gave " + hex(got) + " want " + hex(want);
  }
  expect(bad == 0, "float32 -> float16 matches exact rounding on 2M random patterns", detail);
}

void testBfloat16Conversions() {
  int bad = 0;
  std::string detail;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bfloat16ToFloat(static_cast<uint16_t>(h));
    const bool isNaN = ((h >> 7) & 0xff) == 0xff && (h & 0x7f);
    bool ok = bitCast<uint32_t>(f) == h << 16;
    const uint16_t back = floatToBfloat16(f);
    ok = ok && (isNaN ? back == (h | 0x40) : back == h);
    if (!ok && bad++ == 0) detail = "bfloat16 " + hex(h) + " back " + hex(back);
  }
  expect(bad == 0, "bfloat16 -> float32 -> bfloat16 exact for all 65536 patterns", detail);

  bad = 0;
  for (uint32_t h = 0; h < 0x7f7f; ++h) {
    const uint32_t midBits = (h << 16) | 0x8000;  // exactly halfway to h + 1
    const uint16_t even = (h & 1) ? static_cast<uint16_t>(h + 1) : static_cast<uint16_t>(h);
    const uint16_t got = floatToBfloat16(bitCast<float>(midBits));
    const uint16_t below = floatToBfloat16(bitCast<float>(midBits - 1));
    const uint16_t above = floatToBfloat16(bitCast<float>(midBits + 1));
    if ((got != even || below != h || above != h + 1) && bad++ == 0) detail = "tie above " + hex(h);
  }
  expect(bad == 0, "float32 -> bfloat16 ties to even, all finite midpoints", detail);
  expect(floatToBfloat16(bitCast<float>(0x7f7fffffu)) == 0x7f80 && floatToBfloat16(bitCast<float>(0xff800000u)) == 0xff80 &&
             floatToBfloat16(bitCast<float>(0x7fc00000u)) == 0x7fc0 && floatToBfloat16(bitCast<float>(0x7f800001u)) == 0x7fc0,
         "float32 -> bfloat16 overflow and NaN edges");
}

void testScaleForAvg() {
  std::vector<int32_t> i32 = {-7, 7, -1, 1, 0, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  scaleForAvg(DType::kInt32, i32.data(), i32.size(), 2);
  expect(i32 == std::vector<int32_t>({-3, 3, 0, 0, 0, -1073741824, 1073741823}), "scaleForAvg int32 truncates toward zero");

  std::vector<int64_t> i64 = {-7, 7, -5, std::numeric_limits<int64_t>::min()};
  scaleForAvg(DType::kInt64, i64.data(), i64.size(), 3);
  expect(i64 == std::vector<int64_t>({-2, 2, -1, std::numeric_limits<int64_t>::min() / 3}),
         "scaleForAvg int64 truncates toward zero");

  std::vector<uint8_t> u8 = {255, 7, 2, 0};
  scaleForAvg(DType::kUint8, u8.data(), u8.size(), 4);
  expect(u8 == std::vector<uint8_t>({63, 1, 0, 0}), "scaleForAvg uint8");
  std::vector<uint8_t> u8big = {255, 1};
  scaleForAvg(DType::kUint8, u8big.data(), u8big.size(), 256);
  expect(u8big == std::vector<uint8_t>({0, 0}), "scaleForAvg uint8 by a world of 256 (not a uint8 divisor of 0)");

  std::vector<int8_t> i8 = {-7, 7, -128, 127, -1};
  scaleForAvg(DType::kInt8, i8.data(), i8.size(), 2);
  expect(i8 == std::vector<int8_t>({-3, 3, -64, 63, 0}), "scaleForAvg int8 keeps the sign, truncates toward zero");
  std::vector<int8_t> i8big = {-128, 127};
  scaleForAvg(DType::kInt8, i8big.data(), i8big.size(), 300);
  expect(i8big == std::vector<int8_t>({0, 0}), "scaleForAvg int8 by a world of 300");
  std::vector<int16_t> i16 = {-7, 7, -32768, 32767};
  scaleForAvg(DType::kInt16, i16.data(), i16.size(), 3);
  expect(i16 == std::vector<int16_t>({-2, 2, -10922, 10922}), "scaleForAvg int16 keeps the sign, truncates toward zero");
  std::vector<uint16_t> u16 = {65535, 7, 32768};
  scaleForAvg(DType::kUint16, u16.data(), u16.size(), 2);
  expect(u16 == std::vector<uint16_t>({32767, 3, 16384}), "scaleForAvg uint16 divides as unsigned");

  std::vector<float> f32(1003);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.37f - 100.0f;
  std::vector<float> wantF32 = f32;
  for (float& v : wantF32) v = v / 3.0f;
  scaleForAvg(DType::kFloat32, f32.data(), f32.size(), 3);
  expect(std::memcmp(f32.data(), wantF32.data(), f32.size() * 4) == 0, "scaleForAvg float32 divides (not x * 1/3)");

  std::vector<double> f64 = {1.0, -10.0, 1e300};
  scaleForAvg(DType::kFloat64, f64.data(), f64.size(), 3);
  expect(f64[0] == 1.0 / 3 && f64[1] == -10.0 / 3 && f64[2] == 1e300 / 3, "scaleForAvg float64");

  // float16: divide in float32, round once. Exhaustive over finite non-NaN halfs, divisor 3 and 8.
  for (int divisor : {3, 8}) {
    std::vector<uint16_t> h(65536);
    for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
    scaleForAvg(DType::kFloat16, h.data(), h.size(), divisor);
    int bad = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      const double v = refHalfToDouble(static_cast<uint16_t>(i));
      if (std::isnan(v)) continue;
      if (h[i] != refDoubleToHalf(static_cast<float>(v) / static_cast<float>(divisor))) ++bad;
    }
    expect(bad == 0, "scaleForAvg float16 all patterns, divisor " + std::to_string(divisor),
           std::to_string(bad) + " wrong");

    std::vector<uint16_t> bf(65536);
    for (uint32_t i = 0; i < 65536; ++i) bf[i] = static_cast<uint16_t>(i);
    scaleForAvg(DType::kBFloat16, bf.data(), bf.size(), divisor);
    bad = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      const float v = bitCast<float>(i << 16);
      if (std::isnan(v)) continue;
      if (bf[i] != refFloatToBfloat16(v / static_cast<float>(divisor))) ++bad;
    }
    expect(bad == 0, "scaleForAvg bfloat16 all patterns, divisor " + std::to_string(divisor),
           std::to_string(bad) + " wrong");
  }

  std::vector<int32_t> same = {5, -5};
  scaleForAvg(DType::kInt32, same.data(), same.size(), 1);
  expect(same == std::vector<int32_t>({5, -5}), "scaleForAvg divisor 1 leaves the buffer alone");
}

// ---- Scaled steps (prescaleFactor, postscaleFactor). ----

// finish(op(a * sa, b * sb)) for one element, from the scalar reference combine; F is the compute type.
template <class F>
F refScaled(ReduceOp op, F a, F b, const ScaledStep& s) {
  const F x = a * static_cast<F>(s.aScale);
  const F y = b * static_cast<F>(s.bScale);
  F r = refFloat<F>(op, x, y);
  if (s.finish) {
    r = r / static_cast<F>(s.divisor);
    r = r * static_cast<F>(s.post);
    if (std::isnan(r)) r = canonicalNaN<F>();
  }
  return r;
}

void refScaledElement(ReduceOp op, DType t, void* out, const void* a, const void* b, const ScaledStep& s) {
  switch (t) {
    case DType::kFloat32: {
      float x, y;
      std::memcpy(&x, a, 4);
      std::memcpy(&y, b, 4);
      const float r = refScaled<float>(op, x, y, s);
      std::memcpy(out, &r, 4);
      return;
    }
    case DType::kFloat64: {
      double x, y;
      std::memcpy(&x, a, 8);
      std::memcpy(&y, b, 8);
      const double r = refScaled<double>(op, x, y, s);
      std::memcpy(out, &r, 8);
      return;
    }
    case DType::kFloat16: {
      uint16_t x, y;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      const float r = refScaled<float>(op, static_cast<float>(refHalfToDouble(x)), static_cast<float>(refHalfToDouble(y)), s);
      const uint16_t h = std::isnan(r) ? 0x7e00 : refDoubleToHalf(r);
      std::memcpy(out, &h, 2);
      return;
    }
    case DType::kBFloat16: {
      uint16_t x, y;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      const float r = refScaled<float>(op, bitCast<float>(uint32_t{x} << 16), bitCast<float>(uint32_t{y} << 16), s);
      const uint16_t h = std::isnan(r) ? 0x7fc0 : refFloatToBfloat16(r);
      std::memcpy(out, &h, 2);
      return;
    }
    default: std::abort();
  }
}

bool matchesScaledReference(ReduceOp op, DType t, const uint8_t* out, const uint8_t* a, const uint8_t* b, size_t count,
                            const ScaledStep& s, std::string* detail) {
  const size_t size = dtypeSize(t);
  uint8_t want[8];
  for (size_t i = 0; i < count; ++i) {
    refScaledElement(op, t, want, a + i * size, b + i * size, s);
    if (std::memcmp(want, out + i * size, size) != 0) {
      uint64_t got = 0, exp = 0, x = 0, y = 0;
      std::memcpy(&got, out + i * size, size);
      std::memcpy(&exp, want, size);
      std::memcpy(&x, a + i * size, size);
      std::memcpy(&y, b + i * size, size);
      *detail = "element " + std::to_string(i) + ": " + hex(x) + " op " + hex(y) + " gave " + hex(got) +
                ", expected " + hex(exp);
      return false;
    }
  }
  return true;
}

const DType kFloatDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};

void testScaledSteps() {
  std::mt19937_64 rng(99);
  // Factors that round in every dtype (0.1, 1.7), exact ones, a negative one, and a step that scales
  // only one operand; each as a middle step and as the last one of kAvg over 3 ranks.
  const struct {
    double a, b, post;
  } kFactors[] = {{0.1, 0.1, 1.7}, {0.5, 0.5, 3}, {-2, 1, 0.25}, {1, 0.3, 1}};
  for (DType t : kFloatDTypes) {
    for (ReduceOp op : kAllOps) {
      for (const auto& f : kFactors) {
        for (bool last : {false, true}) {
          ScaledStep step;
          step.aScale = f.a;
          step.bScale = f.b;
          step.finish = last;
          step.divisor = last && op == ReduceOp::kAvg ? 3 : 1;
          step.post = last ? f.post : 1;
          for (size_t count : {size_t(1), size_t(33), size_t(100003)}) {
            const size_t offset = count == 33 ? dtypeSize(t) : 0;
            const size_t bytes = count * dtypeSize(t);
            Buffer a(bytes, offset), b(bytes, offset), out(bytes, offset), swapped(bytes, offset), work(bytes, offset);
            fillRandom(t, a.data, count, rng);
            fillRandom(t, b.data, count, rng);
            const std::string what = caseName(last ? "reduceTwoScaled last" : "reduceTwoScaled", op, t, count, offset) +
                                     " a*" + std::to_string(f.a) + " b*" + std::to_string(f.b) + " post " +
                                     std::to_string(step.post);
            std::string detail;
            reduceTwoScaled(op, t, out.data, a.data, b.data, count, step);
            expect(matchesScaledReference(op, t, out.data, a.data, b.data, count, step, &detail), what, detail);

            // The operands trade places with their scales: the same bits (both sides of a swap).
            ScaledStep flipped = step;
            std::swap(flipped.aScale, flipped.bScale);
            reduceTwoScaled(op, t, swapped.data, b.data, a.data, count, flipped);
            expect(std::memcmp(swapped.data, out.data, bytes) == 0, what + ": commutative with the scales");

            std::memcpy(work.data, a.data, bytes);  // dst == a, as the progress engine reduces
            reduceTwoScaled(op, t, work.data, work.data, b.data, count, step);
            expect(std::memcmp(work.data, out.data, bytes) == 0, what + ": dst == a");
            std::memcpy(work.data, b.data, bytes);  // dst == b
            reduceTwoScaled(op, t, work.data, a.data, work.data, count, step);
            expect(std::memcmp(work.data, out.data, bytes) == 0, what + ": dst == b");
          }
        }
      }
    }
  }

  const Scaling s{0.5, 3};
  ScaledStep first = scaledStep(s, true, true, false, ReduceOp::kAvg, 4);
  ScaledStep middle = scaledStep(s, true, false, false, ReduceOp::kSum, 4);
  ScaledStep lastAvg = scaledStep(s, false, false, true, ReduceOp::kAvg, 4);
  ScaledStep lastSum = scaledStep(s, false, true, true, ReduceOp::kSum, 4);
  expect(first.aScale == 0.5 && first.bScale == 0.5 && !first.finish && first.post == 1 && first.divisor == 1 &&
             middle.aScale == 0.5 && middle.bScale == 1 && lastAvg.aScale == 1 && lastAvg.finish && lastAvg.divisor == 4 &&
             lastAvg.post == 3 && lastSum.bScale == 0.5 && lastSum.divisor == 1 && lastSum.post == 3,
         "scaledStep: pre on raw operands only, divisor and post on the last step only");
  expect(!Scaling{}.active() && Scaling{1, 2}.active() && Scaling{0.5, 1}.active() && Scaling{0.5, 2} != Scaling{0.5, 1},
         "Scaling: active unless both factors are 1");

  // A world of one: x * pre * post, each product rounded, NaN canonical.
  for (DType t : kFloatDTypes) {
    const size_t count = 1001;
    const size_t bytes = count * dtypeSize(t);
    Buffer x(bytes, 0), got(bytes, 0);
    fillRandom(t, x.data, count, rng);
    std::memcpy(got.data, x.data, bytes);
    scaleAlone(t, got.data, count, Scaling{0.1, 1.7});
    // The same as a last step with op max of the element with itself and no division.
    ScaledStep alone;
    alone.aScale = 0.1;
    alone.bScale = 0.1;
    alone.finish = true;
    alone.post = 1.7;
    std::string detail;
    expect(matchesScaledReference(ReduceOp::kMax, t, got.data, x.data, x.data, count, alone, &detail),
           std::string("scaleAlone ") + dtypeName(t) + " is x * pre * post, rounded as a scaled step", detail);
    std::memcpy(got.data, x.data, bytes);
    scaleAlone(t, got.data, count, Scaling{});
    expect(std::memcmp(got.data, x.data, bytes) == 0, std::string("scaleAlone ") + dtypeName(t) + " with factors 1 leaves it alone");
  }
}

// The integers wrap around on overflow, as two's complement (the documented semantics), whatever the width.
void testIntegerWrap() {
  int8_t i8a[] = {127, -128, 64, -1}, i8b[] = {1, -1, 2, -1}, i8out[4];
  reduceTwo(ReduceOp::kSum, DType::kInt8, i8out, i8a, i8b, 4);
  expect(i8out[0] == -128 && i8out[1] == 127 && i8out[2] == 66 && i8out[3] == -2, "int8 sum wraps: 127 + 1 = -128, -128 - 1 = 127");
  reduceTwo(ReduceOp::kProd, DType::kInt8, i8out, i8a, i8b, 4);
  expect(i8out[0] == 127 && i8out[1] == -128 && i8out[2] == -128 && i8out[3] == 1, "int8 prod wraps: 64 * 2 = -128, -128 * -1 = -128");
  int16_t i16a[] = {32767, -32768, 256}, i16b[] = {1, -1, 256}, i16out[3];
  reduceTwo(ReduceOp::kSum, DType::kInt16, i16out, i16a, i16b, 3);
  expect(i16out[0] == -32768 && i16out[1] == 32767 && i16out[2] == 512, "int16 sum wraps: 32767 + 1 = -32768");
  reduceTwo(ReduceOp::kProd, DType::kInt16, i16out, i16a, i16b, 3);
  expect(i16out[0] == 32767 && i16out[1] == -32768 && i16out[2] == 0, "int16 prod wraps: 256 * 256 = 0");
  uint16_t u16a[] = {65535, 65535, 300}, u16b[] = {1, 65535, 300}, u16out[3];
  reduceTwo(ReduceOp::kSum, DType::kUint16, u16out, u16a, u16b, 3);
  expect(u16out[0] == 0 && u16out[1] == 65534 && u16out[2] == 600, "uint16 sum wraps: 65535 + 1 = 0");
  reduceTwo(ReduceOp::kProd, DType::kUint16, u16out, u16a, u16b, 3);
  expect(u16out[0] == 65535 && u16out[1] == 1 && u16out[2] == 24464, "uint16 prod wraps: 65535 * 65535 = 1 (no signed int overflow)");
  reduceTwo(ReduceOp::kMin, DType::kUint16, u16out, u16a, u16b, 3);
  expect(u16out[0] == 1 && u16out[1] == 65535 && u16out[2] == 300, "uint16 min compares unsigned");
  reduceTwo(ReduceOp::kMax, DType::kInt16, i16out, i16a, i16b, 3);
  expect(i16out[0] == 32767 && i16out[1] == -1 && i16out[2] == 256, "int16 max compares signed");
}

// Whether element e of dtype t is a NaN (the kernels replace any NaN by the canonical one).
bool isNaNElement(DType t, const uint8_t* e) {
  uint16_t h;
  switch (t) {
    case DType::kFloat32: { float f; std::memcpy(&f, e, 4); return std::isnan(f); }
    case DType::kFloat64: { double f; std::memcpy(&f, e, 8); return std::isnan(f); }
    case DType::kFloat16: std::memcpy(&h, e, 2); return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    case DType::kBFloat16: std::memcpy(&h, e, 2); return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    default: return false;
  }
}

// fillIdentity (what a rank that has joined contributes, hora.join()): x op identity and identity op x are
// x, bit for bit (-0 and the extremes included), for every dtype and op; a NaN stays a NaN.
void testIdentity() {
  std::mt19937_64 rng(40);
  const size_t count = 257;
  for (int d = 0; d < kNumDTypes; ++d) {
    const DType t = static_cast<DType>(d);
    const size_t size = dtypeSize(t);
    std::vector<uint8_t> x(count * size), id(count * size), out(count * size);
    fillRandom(t, x.data(), count, rng);
    for (int o = 0; o < kNumReduceOps; ++o) {
      const ReduceOp op = static_cast<ReduceOp>(o);
      fillIdentity(op, t, id.data(), count);
      for (int order = 0; order < 2; ++order) {
        reduceTwo(op, t, out.data(), order ? id.data() : x.data(), order ? x.data() : id.data(), count);
        size_t bad = count;
        for (size_t i = 0; i < count && bad == count; ++i) {
          const uint8_t* a = x.data() + i * size;
          const uint8_t* b = out.data() + i * size;
          const bool same = isNaNElement(t, a) ? isNaNElement(t, b) : std::memcmp(a, b, size) == 0;
          if (!same) bad = i;
        }
        uint64_t got = 0, want = 0;
        if (bad < count) {
          std::memcpy(&got, out.data() + bad * size, size);
          std::memcpy(&want, x.data() + bad * size, size);
        }
        expect(bad == count, std::string("fillIdentity: ") + dtypeName(t) + " " + opName(op) + (order ? ": identity op x" : ": x op identity") + " is x",
               bad < count ? "element " + std::to_string(bad) + ": " + hex(got) + " for " + hex(want) : "");
      }
    }
  }
}

void testNames() {
  expect(std::string(dtypeName(DType::kInt8)) == "int8" && std::string(dtypeName(DType::kInt16)) == "int16" &&
             std::string(dtypeName(DType::kUint16)) == "uint16" && dtypeSize(DType::kInt8) == 1 &&
             dtypeSize(DType::kInt16) == 2 && dtypeSize(DType::kUint16) == 2,
         "dtypeName / dtypeSize of int8, int16, uint16");
  expect(std::string(dtypeName(DType::kBFloat16)) == "bfloat16" && std::string(dtypeName(DType::kUint8)) == "uint8" &&
             std::string(opName(ReduceOp::kAvg)) == "avg" && std::string(opName(ReduceOp::kProd)) == "prod",
         "dtypeName / opName");
}

}  // namespace

int main() {
  testNames();
  testHalfConversions();
  testBfloat16Conversions();
  testCommutativitySpecials();
  testAliasing();
  testKernelsAgainstReference();
  testScaleForAvg();
  testIntegerWrap();
  testScaledSteps();
  testIdentity();
  return testing::finish();
}
