#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "common/status.h"

namespace hora {
namespace {

// WARN until the JS layer passes HORA_DEBUG's level (ts/loader.ts, when it loads the addon).
std::atomic<int> gLevel{static_cast<int>(LogLevel::kWarn)};
std::atomic<int> gRank{-1};

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kTrace: return "TRACE";
  }
  return "?";
}

}  // namespace

void setLogLevel(LogLevel level) { gLevel.store(static_cast<int>(level)); }
bool logEnabled(LogLevel level) { return static_cast<int>(level) <= gLevel.load(std::memory_order_relaxed); }
void setLogRank(int rank) { gRank.store(rank); }

void logf(LogLevel level, const char* fmt, ...) {
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  char line[2048];
  int n = snprintf(line, sizeof(line), "%s:%d rank %d hora %s ", host, static_cast<int>(getpid()), gRank.load(),
                   levelName(level));
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && n < static_cast<int>(sizeof(line))) vsnprintf(line + n, sizeof(line) - n, fmt, ap);
  va_end(ap);
  // One write per line so lines from the communication thread and the JS thread do not interleave.
  size_t len = strnlen(line, sizeof(line) - 2);
  line[len] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, len + 1);
  (void)ignored;
}

}  // namespace hora
