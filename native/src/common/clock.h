// Deadlines: every wait in the core is bounded by one.
#pragma once

#include <chrono>
#include <cstdint>

namespace hora {

using Clock = std::chrono::steady_clock;

// Nanoseconds on Clock. On Linux steady_clock reads CLOCK_MONOTONIC, the clock of Node's process.hrtime,
// so these values compare directly with JS timestamps taken by the same process (and by any process on
// the same machine). Used by the timeline.
inline int64_t monotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

class Deadline {
 public:
  explicit Deadline(int64_t timeoutMs) : Deadline(Clock::now(), timeoutMs) {}
  Deadline(Clock::time_point from, int64_t timeoutMs) : at_(from + std::chrono::milliseconds(timeoutMs)) {}
  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, capMs]; for poll().
  int remainingMs(int capMs) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > capMs ? capMs : static_cast<int>(left);
  }

 private:
  Clock::time_point at_;
};

}  // namespace hora
