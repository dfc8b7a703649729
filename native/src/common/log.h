// Logging switched by HORA_DEBUG=WARN|INFO|TRACE, prefixed "host:pid rank R" so interleaved output from
// many workers stays readable. The native code reads no environment: ts/config.ts parses HORA_DEBUG and
// the addon's setLogLevel() passes it down when the addon is loaded, and each communicator's options again.
#pragma once

#include <cstdarg>

namespace hora {

enum class LogLevel : int { kWarn = 0, kInfo = 1, kTrace = 2 };
constexpr int kNumLogLevels = static_cast<int>(LogLevel::kTrace) + 1;

// WARN until the first call.
void setLogLevel(LogLevel level);
bool logEnabled(LogLevel level);
void setLogRank(int rank);
void logf(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace hora

#define HORA_LOG(level, ...)                                                   \
  do {                                                                         \
    if (::hora::logEnabled(::hora::LogLevel::level)) ::hora::logf(::hora::LogLevel::level, __VA_ARGS__); \
  } while (0)
#define HORA_WARN(...) HORA_LOG(kWarn, __VA_ARGS__)
#define HORA_INFO(...) HORA_LOG(kInfo, __VA_ARGS__)
#define HORA_TRACE(...) HORA_LOG(kTrace, __VA_ARGS__)
