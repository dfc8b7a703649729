// TAP output, the one format of every native test binary (test/native.test.js reads it):
//   ok N - what
//   not ok N - what: details
//   # a comment
// and, from finish(), the plan "1..N" and "# F of N checks failed, S s". The exit status is 1 when any
// check failed.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace hora {
namespace testing {

inline int gCount = 0;
inline int gFailed = 0;
inline const std::chrono::steady_clock::time_point gStart = std::chrono::steady_clock::now();
inline std::mutex gCurrentMutex;
inline std::string gCurrent = "start-up";

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

// Names what the run is doing now, for the watchdog's line.
inline void setCurrent(const std::string& what) {
  std::lock_guard<std::mutex> lock(gCurrentMutex);
  gCurrent = what;
}

// Bounds the whole run by HORA_TEST_WATCHDOG_S (default `seconds`) seconds, so a hang fails instead of
// blocking CI.
inline void startWatchdog(int seconds = 120) {
  const char* env = std::getenv("HORA_TEST_WATCHDOG_S");
  const int limit = env != nullptr ? std::atoi(env) : seconds;
  std::thread([limit] {
    std::this_thread::sleep_for(std::chrono::seconds(limit));
    std::string current;
    {
      std::lock_guard<std::mutex> lock(gCurrentMutex);
      current = gCurrent;
    }
    std::printf("not ok %d - watchdog: the run passed %d s, stuck in: %s\n", gCount + 1, limit, current.c_str());
    std::fflush(stdout);
    _exit(1);
  }).detach();
}

// Prints the plan and the count of failures; main returns what it returns.
inline int finish() {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - gStart).count();
  std::printf("1..%d\n# %d of %d checks failed, %.1f s\n", gCount, gFailed, gCount, seconds);
  std::fflush(stdout);
  return gFailed == 0 ? 0 : 1;
}

}  // namespace testing
}  // namespace hora
