// FNV-1a, 64-bit: a stable hash of short strings (job ids, collective names) that every rank computes alike.
// The standard parameters (offset basis 14695981039346656037, prime 1099511628211); native/test/hash_test.cc
// checks the published test vectors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hora {

// Of n bytes at data: for a fixed-size record of fields, hashed without making a string of it.
inline uint64_t fnv1a64(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

inline uint64_t fnv1a64(const std::string& s) { return fnv1a64(s.data(), s.size()); }

}  // namespace hora
