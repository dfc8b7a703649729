// TAP output for the small native tests: one "ok N - what" or "not ok N - what: details" line per check.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

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

// Bounds the whole run by HORA_TEST_WATCHDOG_S (default 120) seconds, so a hang fails instead of
// blocking CI.
inline void startWatchdog() {
  const char* limit = std::getenv("HORA_TEST_WATCHDOG_S");
  const int seconds = limit != nullptr ? std::atoi(limit) : 120;
  std::thread([seconds] {
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    std::printf("not ok - watchdog: still running after %d s\n", seconds);
    std::fflush(stdout);
    _exit(1);
  }).detach();
}

}  // namespace testing
}  // namespace hora
