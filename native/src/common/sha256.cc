#include "common/sha256.h"

#include <cstring>

namespace hora {
namespace {

// FIPS 180-4 section 4.2.2: the first 32 bits of the fractional parts of the cube roots of the first 64 primes.
constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// Section 5.3.3: the first 32 bits of the fractional parts of the square roots of the first 8 primes.
constexpr uint32_t kInitial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                  0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

constexpr size_t kBlockBytes = 64;

}  // namespace

Sha256::Sha256() { memcpy(state_, kInitial, sizeof(state_)); }

// Section 6.2.2: one 512-bit block.
void Sha256::compress(const uint8_t block[64]) {
  uint32_t w[64];
  for (int t = 0; t < 16; ++t) {
    w[t] = (uint32_t(block[4 * t]) << 24) | (uint32_t(block[4 * t + 1]) << 16) | (uint32_t(block[4 * t + 2]) << 8) |
           uint32_t(block[4 * t + 3]);
  }
  for (int t = 16; t < 64; ++t) {
    uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    uint32_t sigma1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t choose = (e & f) ^ (~e & g);
    uint32_t t1 = h + sigma1 + choose + kRound[t] + w[t];
    uint32_t sigma0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = sigma0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  totalBytes_ += len;
  if (blockLen_ > 0) {
    size_t take = kBlockBytes - blockLen_ < len ? kBlockBytes - blockLen_ : len;
    memcpy(block_ + blockLen_, p, take);
    blockLen_ += take;
    p += take;
    len -= take;
    if (blockLen_ < kBlockBytes) return;
    compress(block_);
    blockLen_ = 0;
  }
  for (; len >= kBlockBytes; p += kBlockBytes, len -= kBlockBytes) compress(p);
  memcpy(block_, p, len);
  blockLen_ = len;
}

// Section 5.1.1: a 1 bit, zeros up to 56 bytes mod 64, then the message length in bits, big-endian.
Sha256Digest Sha256::finish() {
  const uint64_t bits = totalBytes_ * 8;
  block_[blockLen_++] = 0x80;
  if (blockLen_ > 56) {
    memset(block_ + blockLen_, 0, kBlockBytes - blockLen_);
    compress(block_);
    blockLen_ = 0;
  }
  memset(block_ + blockLen_, 0, 56 - blockLen_);
  for (int i = 0; i < 8; ++i) block_[56 + i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  compress(block_);
  Sha256Digest out;
  for (int i = 0; i < 8; ++i) {
    out[4 * i] = static_cast<uint8_t>(state_[i] >> 24);
    out[4 * i + 1] = static_cast<uint8_t>(state_[i] >> 16);
    out[4 * i + 2] = static_cast<uint8_t>(state_[i] >> 8);
    out[4 * i + 3] = static_cast<uint8_t>(state_[i]);
  }
  return out;
}

Sha256Digest sha256(const void* data, size_t len) {
  Sha256 h;
  h.update(data, len);
  return h.finish();
}

// RFC 2104: H((K' ^ opad) || H((K' ^ ipad) || text)), where K' is the key hashed if it is longer than a
// block, then padded with zeros to one block.
Sha256Digest hmacSha256(const void* key, size_t keyLen, const void* data, size_t len) {
  uint8_t padded[kBlockBytes] = {};
  if (keyLen > kBlockBytes) {
    Sha256Digest k = sha256(key, keyLen);
    memcpy(padded, k.data(), k.size());
  } else if (keyLen > 0) {
    memcpy(padded, key, keyLen);
  }
  uint8_t pad[kBlockBytes];
  for (size_t i = 0; i < kBlockBytes; ++i) pad[i] = padded[i] ^ 0x36;
  Sha256 inner;
  inner.update(pad, sizeof(pad));
  inner.update(data, len);
  Sha256Digest innerDigest = inner.finish();
  for (size_t i = 0; i < kBlockBytes; ++i) pad[i] = padded[i] ^ 0x5c;
  Sha256 outer;
  outer.update(pad, sizeof(pad));
  outer.update(innerDigest.data(), innerDigest.size());
  return outer.finish();
}

bool constantTimeEqual(const void* a, const void* b, size_t len) {
  // volatile keeps the compiler from turning the loop into an early-exit comparison.
  const volatile uint8_t* x = static_cast<const volatile uint8_t*>(a);
  const volatile uint8_t* y = static_cast<const volatile uint8_t*>(b);
  uint8_t diff = 0;
  for (size_t i = 0; i < len; ++i) diff |= static_cast<uint8_t>(x[i] ^ y[i]);
  return diff == 0;
}

}  // namespace hora
