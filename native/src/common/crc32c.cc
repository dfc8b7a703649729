// CRC-32C: common/crc32c.h says what and why. The register holds the CRC bit-reflected: bit 31 is the
// coefficient of x^0, bit 0 that of x^31, so feeding a byte is a shift right.
#include "common/crc32c.h"

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define HORA_CRC32C_SSE42 1
#include <nmmintrin.h>

#include <cstring>
#endif

namespace hora {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // 0x1EDC6F41 bit-reflected

// kTable[0][b]: the register after feeding byte b into a zero register; kTable[k][b]: the same followed by
// k zero bytes, so that 8 bytes are fed with 8 lookups.
struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t r = b;
      for (int i = 0; i < 8; ++i) r = (r & 1) ? (r >> 1) ^ kPoly : r >> 1;
      t[0][b] = r;
    }
    for (int k = 1; k < 8; ++k) {
      for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
    }
  }
};

const Tables& tables() {
  static const Tables tables;
  return tables;
}

// 8 bytes, the first in the low bits (one load on a little-endian CPU).
uint64_t load64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Register in, register out (no inversions).
uint32_t portable(uint32_t r, const uint8_t* p, size_t len) {
  const auto& t = tables().t;
  for (; len >= 8; p += 8, len -= 8) {
    const uint64_t v = load64(p) ^ r;
    r = t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^ t[4][(v >> 24) & 0xff] ^
        t[3][(v >> 32) & 0xff] ^ t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56];
  }
  for (; len > 0; ++p, --len) r = (r >> 8) ^ t[0][(r ^ *p) & 0xff];
  return r;
}

// a times b modulo the polynomial, both reflected.
uint32_t multiply(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 0x80000000u; bit != 0; bit >>= 1) {  // a's coefficients of x^0, x^1, ...
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;  // b times x
  }
  return product;
}

// x^(8 * bytes) modulo the polynomial: what feeding that many zero bytes multiplies a register by.
uint32_t shiftOf(uint64_t bytes) {
  uint32_t result = 0x80000000u;  // x^0
  uint32_t power = 0x00800000u;   // x^8
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) result = multiply(result, power);
    power = multiply(power, power);
  }
  return result;
}

#ifdef HORA_CRC32C_SSE42
// 8 bytes as one load (x86 is little-endian).
uint64_t loadX86(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

__attribute__((target("sse4.2"))) uint32_t serial(uint32_t r, const uint8_t* p, size_t len) {
  uint64_t r64 = r;
  for (; len >= 8; p += 8, len -= 8) r64 = _mm_crc32_u64(r64, loadX86(p));
  r = uint32_t(r64);
  for (; len > 0; ++p, --len) r = _mm_crc32_u8(r, *p);
  return r;
}

// Below this, one stream: the two joins cost about as much as hashing some 20 KiB.
constexpr size_t kThreeWayBytes = 64 * 1024;

// The instruction takes 3 cycles and starts one per cycle: three independent CRCs, over three consecutive
// parts of the buffer, keep it busy. The parts' CRCs are then joined as crc32cCombine does.
__attribute__((target("sse4.2"))) uint32_t hardware(uint32_t r, const uint8_t* p, size_t len) {
  if (len < kThreeWayBytes) return serial(r, p, len);
  const size_t part = (len / 3) & ~size_t(7);
  const uint8_t* p1 = p + part;
  const uint8_t* p2 = p + 2 * part;
  uint64_t a = r, b = 0xFFFFFFFFu, c = 0xFFFFFFFFu;  // b and c: the registers of CRCs of their own parts
  for (size_t i = 0; i < part; i += 8) {
    a = _mm_crc32_u64(a, loadX86(p + i));
    b = _mm_crc32_u64(b, loadX86(p1 + i));
    c = _mm_crc32_u64(c, loadX86(p2 + i));
  }
  const size_t last = len - 2 * part;  // part plus the rest
  const uint32_t cr = serial(uint32_t(c), p2 + part, last - part);
  // Register of the whole: a shifted over parts 1 and 2, b's CRC shifted over part 2, c's CRC; the
  // inversions of b's and c's starts cancel against the final ones as in crc32cCombine.
  const uint32_t crcB = ~uint32_t(b), crcC = ~cr;
  const uint32_t ab = ~crc32cCombine(~uint32_t(a), crcB, part);
  return ~crc32cCombine(~ab, crcC, last);
}

bool detect() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

uint32_t crc32cCombine(uint32_t crcA, uint32_t crcB, uint64_t lenB) {
  // The CRC is affine in its input: the CRC of a then b is a's register carried over b's length in zero
  // bytes (a product with x^(8 lenB)), xored with the CRC of b alone; the initial values and final
  // inversions of the two cancel.
  return multiply(shiftOf(lenB), crcA) ^ crcB;
}

uint32_t crc32cPortable(const void* data, size_t len, uint32_t crc) {
  return ~portable(~crc, static_cast<const uint8_t*>(data), len);
}

bool crc32cHardware() {
#ifdef HORA_CRC32C_SSE42
  static const bool has = detect();
  return has;
#else
  return false;
#endif
}

uint32_t crc32c(const void* data, size_t len, uint32_t crc) {
#ifdef HORA_CRC32C_SSE42
  if (crc32cHardware()) return ~hardware(~crc, static_cast<const uint8_t*>(data), len);
#endif
  return crc32cPortable(data, len, crc);
}

}  // namespace hora
