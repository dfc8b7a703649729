// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the data-plane handshake (transport/tcp/connect.h).
//
// Written here rather than taken from OpenSSL so the core and its tests build with nothing but a compiler;
// the handshake hashes a few hundred bytes per connection, so speed does not matter.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace hora {

constexpr size_t kSha256Bytes = 32;
using Sha256Digest = std::array<uint8_t, kSha256Bytes>;

// Incremental hashing: update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t len);
  Sha256Digest finish();

 private:
  void compress(const uint8_t block[64]);

  uint32_t state_[8];
  uint8_t block_[64];
  size_t blockLen_ = 0;   // bytes waiting in block_
  uint64_t totalBytes_ = 0;
};

Sha256Digest sha256(const void* data, size_t len);
Sha256Digest hmacSha256(const void* key, size_t keyLen, const void* data, size_t len);

// True when the len bytes at a and b are equal; the time taken does not depend on where they differ.
bool constantTimeEqual(const void* a, const void* b, size_t len);

}  // namespace hora
