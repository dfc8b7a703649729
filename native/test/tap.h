// TAP output for the small native tests: one "ok N - what" or "not ok N - what: details" line per check.
#pragma once

#include <cstdio>
#include <string>

namespace hora {
namespace testing {

inline int gCount = 0;
inline int gFailed = 0;

inline void check(bool ok, const std::string& what, const std::string& details = "") {
  ++gCount;
  if (ok) {
    std::printf("ok %d - %s\n", gCount, what.c_str());
  } else {
    ++gFailed;
    std::printf("not ok %d - %s: %s\n", gCount, what.c_str(), details.c_str());
  }
  std::fflush(stdout);
}

}  // namespace testing
}  // namespace hora
