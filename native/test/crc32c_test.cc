// Tests for common/crc32c: CRC-32C against published check values, the instruction's way against the
// table's for every length and alignment up to a few KiB and for long buffers (where three parts run at
// once), and crc32cCombine against the CRC of the joined bytes.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/crc32c_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed.
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "common/crc32c.h"

#include "tap.h"

using namespace hora;
using testing::check;

namespace {

std::string hex(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof(buf), "0x%08" PRIx32, v);
  return buf;
}

void expect(const std::string& what, const std::vector<uint8_t>& bytes, uint32_t want) {
  const uint32_t got = crc32c(bytes.data(), bytes.size());
  check(got == want, "crc32c(" + what + ") is " + hex(want), "got " + hex(got));
  const uint32_t portable = crc32cPortable(bytes.data(), bytes.size());
  check(portable == want, "the table's crc32c(" + what + ") is " + hex(want), "got " + hex(portable));
}

std::vector<uint8_t> pseudoRandom(size_t n, uint64_t seed) {
  std::vector<uint8_t> out(n);
  for (auto& b : out) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    b = uint8_t(seed >> 56);
  }
  return out;
}

}  // namespace

int main() {
  std::printf("# the CPU's crc32 instruction is %s\n", crc32cHardware() ? "used" : "not used (table only)");
  // The check value of the CRC catalogues, and RFC 3720 (iSCSI) B.4's examples.
  const std::string nine = "123456789";
  expect("\"123456789\"", std::vector<uint8_t>(nine.begin(), nine.end()), 0xE3069283u);
  expect("nothing", {}, 0u);
  expect("32 bytes of 0x00", std::vector<uint8_t>(32, 0x00), 0x8A9136AAu);
  expect("32 bytes of 0xff", std::vector<uint8_t>(32, 0xff), 0x62A8AB43u);
  std::vector<uint8_t> up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = uint8_t(i), down[i] = uint8_t(31 - i);
  expect("bytes 0 to 31", up, 0x46DD794Eu);
  expect("bytes 31 to 0", down, 0x113FDB5Cu);

  // Every length up to 3 KiB + 40 and 8 alignments, and lengths around the three-part threshold (64 KiB)
  // and well above it: the instruction's way and the table's agree.
  const auto data = pseudoRandom(1 << 20, 7);
  int differ = 0;
  std::string first;
  auto compare = [&](size_t at, size_t len) {
    const uint32_t a = crc32c(data.data() + at, len), b = crc32cPortable(data.data() + at, len);
    if (a != b && differ++ == 0) first = "offset " + std::to_string(at) + ", " + std::to_string(len) + " bytes: " + hex(a) + " vs " + hex(b);
  };
  for (size_t at = 0; at < 8; ++at) {
    for (size_t len = 0; len <= 3 * 1024 + 40; ++len) compare(at, len);
  }
  for (size_t len = 64 * 1024 - 64; len <= 64 * 1024 + 64; ++len) compare(3, len);
  for (size_t len : {size_t(100000), size_t(1 << 19) + 5, data.size() - 1, data.size()}) compare(data.size() - len, len);
  check(differ == 0, "crc32c and the table agree on every length and alignment tried", std::to_string(differ) + " differ, first " + first);

  // Chained and joined: the CRC of a then b.
  const uint32_t whole = crc32c(data.data(), data.size());
  bool chained = true, combined = true;
  for (size_t cut : {size_t(0), size_t(1), size_t(4095), size_t(12345), size_t(1 << 19), data.size()}) {
    const uint32_t a = crc32c(data.data(), cut), b = crc32c(data.data() + cut, data.size() - cut);
    chained = chained && crc32c(data.data() + cut, data.size() - cut, a) == whole;
    combined = combined && crc32cCombine(a, b, data.size() - cut) == whole;
  }
  check(chained, "crc32c(b, crc32c(a)) is the CRC of a then b", "a cut gave another CRC");
  check(combined, "crc32cCombine(crc(a), crc(b), len(b)) is the CRC of a then b", "a cut gave another CRC");

  // A changed bit anywhere changes it.
  std::vector<uint8_t> copy(data.begin(), data.begin() + 4096 * 5);
  const uint32_t before = crc32c(copy.data(), copy.size());
  bool seen = true;
  for (size_t i = 0; i < copy.size(); i += 997) {
    copy[i] ^= 0x10;
    seen = seen && crc32c(copy.data(), copy.size()) != before;
    copy[i] ^= 0x10;
  }
  check(seen, "a flipped bit changes the CRC of 20 KiB, wherever it is", "a flip went unseen");
  return testing::finish();
}
