// Deadlines: every wait in the core is bounded by one.
#pragma once

#include <chrono>
#include <cstdint>

namespace hora {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(int64_t timeoutMs) : at_(Clock::now() + std::chrono::milliseconds(timeoutMs)) {}
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
