// Tests for common/sha256: SHA-256 against the FIPS 180-4 examples (and the long message of the NIST test
// vectors), HMAC-SHA256 against every test case of RFC 4231, and constantTimeEqual.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/sha256_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/sha256.h"

#include "tap.h"

using namespace hora;

namespace {

using testing::check;

std::string hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

std::string hex(const Sha256Digest& d) { return hex(d.data(), d.size()); }

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::vector<uint8_t> repeat(uint8_t b, size_t n) { return std::vector<uint8_t>(n, b); }

void expectDigest(const std::string& what, const Sha256Digest& got, const std::string& want) {
  check(hex(got) == want, what, "got " + hex(got) + ", want " + want);
}

void sha256Vectors() {
  const std::string abc = "abc";
  expectDigest("SHA-256 \"abc\" (FIPS 180-4 one-block example)", sha256(abc.data(), abc.size()),
               "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  expectDigest("SHA-256 of the empty message", sha256("", 0),
               "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  expectDigest("SHA-256 448-bit message (two-block example: padding spills into a second block)",
               sha256(two.data(), two.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string long896 =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrst"
      "nopqrstu";
  expectDigest("SHA-256 896-bit message", sha256(long896.data(), long896.size()),
               "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  std::vector<uint8_t> million = repeat('a', 1000000);
  expectDigest("SHA-256 of one million 'a'", sha256(million.data(), million.size()),
               "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

  // Incremental updates in every chunking give the same digest, including splits at block boundaries.
  bool same = true;
  std::string firstBad;
  const Sha256Digest whole = sha256(million.data(), 1000);
  for (size_t chunk : {1, 3, 55, 56, 63, 64, 65, 127, 128, 999}) {
    Sha256 h;
    for (size_t at = 0; at < 1000; at += chunk) h.update(million.data() + at, at + chunk <= 1000 ? chunk : 1000 - at);
    if (h.finish() != whole) {
      same = false;
      firstBad = std::to_string(chunk);
      break;
    }
  }
  check(same, "SHA-256 incremental updates agree with one update", "chunk size " + firstBad + " differs");
  // Every length around the padding boundaries (55, 56 and 64 bytes), fed one byte at a time.
  bool boundaries = true;
  for (size_t len = 50; len <= 130 && boundaries; ++len) {
    Sha256 h;
    for (size_t i = 0; i < len; ++i) h.update(million.data() + i, 1);
    boundaries = h.finish() == sha256(million.data(), len);
  }
  check(boundaries, "SHA-256 byte-by-byte equals one-shot for lengths 50..130");
}

struct HmacCase {
  const char* name;
  std::vector<uint8_t> key;
  std::vector<uint8_t> data;
  const char* want;   // hex
  size_t truncateTo;  // bytes of the output compared (RFC 4231 test case 5 truncates to 128 bits)
};

void hmacVectors() {
  std::vector<uint8_t> key4;
  for (uint8_t b = 1; b <= 25; ++b) key4.push_back(b);
  const HmacCase cases[] = {
      {"RFC 4231 test case 1", repeat(0x0b, 20), bytes("Hi There"),
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32},
      {"RFC 4231 test case 2 (key shorter than the output)", bytes("Jefe"), bytes("what do ya want for nothing?"),
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32},
      {"RFC 4231 test case 3", repeat(0xaa, 20), repeat(0xdd, 50),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 32},
      {"RFC 4231 test case 4", key4, repeat(0xcd, 50),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 32},
      {"RFC 4231 test case 5 (truncated to 128 bits)", repeat(0x0c, 20), bytes("Test With Truncation"),
       "a3b6167473100ee06e0c796c2955552b", 16},
      {"RFC 4231 test case 6 (131-byte key, hashed first)", repeat(0xaa, 131),
       bytes("Test Using Larger Than Block-Size Key - Hash Key First"),
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32},
      {"RFC 4231 test case 7 (131-byte key and data longer than a block)", repeat(0xaa, 131),
       bytes("This is a test using a larger than block-size key and a larger than block-size data. The key needs to "
             "be hashed before being used by the HMAC algorithm."),
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 32},
  };
  for (const HmacCase& c : cases) {
    Sha256Digest d = hmacSha256(c.key.data(), c.key.size(), c.data.data(), c.data.size());
    std::string got = hex(d.data(), c.truncateTo);
    check(got == c.want, std::string("HMAC-SHA256 ") + c.name, "got " + got + ", want " + c.want);
  }
  // A key of exactly one block is used as it is; one byte more is hashed: the two must differ.
  std::vector<uint8_t> k64 = repeat(0x42, 64), k65 = repeat(0x42, 65);
  check(hmacSha256(k64.data(), 64, "x", 1) != hmacSha256(k65.data(), 65, "x", 1),
        "HMAC-SHA256 keys of 64 and 65 bytes give different MACs");
}

void constantTimeEqualTests() {
  uint8_t a[32], b[32];
  for (int i = 0; i < 32; ++i) a[i] = b[i] = static_cast<uint8_t>(i * 7);
  check(constantTimeEqual(a, b, 32), "constantTimeEqual: equal buffers");
  check(constantTimeEqual(a, b, 0), "constantTimeEqual: empty buffers are equal");
  bool allPositions = true;
  for (int i = 0; i < 32 && allPositions; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      b[i] ^= static_cast<uint8_t>(1 << bit);
      allPositions = allPositions && !constantTimeEqual(a, b, 32);
      b[i] ^= static_cast<uint8_t>(1 << bit);
    }
  }
  check(allPositions, "constantTimeEqual: a flip of any one bit at any position is seen");
}

}  // namespace

int main() {
  sha256Vectors();
  hmacVectors();
  constantTimeEqualTests();
  return testing::finish();
}
