// Tests for common/hash.h: fnv1a64 against the published FNV-1a 64-bit test vectors.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/hash_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "common/hash.h"

#include "tap.h"

using namespace hora;
using testing::check;

namespace {

std::string hex(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016" PRIx64, v);
  return buf;
}

void expect(const std::string& input, uint64_t want) {
  const uint64_t got = fnv1a64(input);
  check(got == want, "fnv1a64(\"" + input + "\") is " + hex(want), "got " + hex(got));
}

}  // namespace

int main() {
  expect("", 0xcbf29ce484222325ull);  // the offset basis itself
  expect("a", 0xaf63dc4c8601ec8cull);
  expect("foobar", 0x85944171f73967e8ull);
  return testing::finish();
}
