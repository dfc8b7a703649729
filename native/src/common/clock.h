// Deadlines: every wait in the core is bounded by one.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace hora {

using Clock = std::chrono::steady_clock;

// Nanoseconds on Clock. On Linux steady_clock reads CLOCK_MONOTONIC, the clock of Node's process.hrtime,
// so these values compare directly with JS timestamps taken by the same process (and by any process on
// the same machine). Used by the timeline.
inline int64_t monotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// The one kind of deadline: a collective's step (Context), a message operation (engine/p2p.h), a
// connection's handshake. Expired from timeoutMs after it started, on Clock.
class Deadline {
 public:
  Deadline() = default;  // already expired: assign a started one before use
  explicit Deadline(int64_t timeoutMs) : Deadline(Clock::now(), timeoutMs) {}
  Deadline(Clock::time_point from, int64_t timeoutMs) : at_(from + std::chrono::milliseconds(timeoutMs)) {}
  bool expired() const { return expiredAt(Clock::now()); }
  // The same with a clock read the caller has already made.
  bool expiredAt(Clock::time_point now) const { return now >= at_; }
  // Milliseconds left, clamped to [0, capMs]; for poll().
  int remainingMs(int capMs) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > capMs ? capMs : static_cast<int>(left);
  }

 private:
  Clock::time_point at_;
};

// How a timeout error says how long it waited: "1.5000 s".
inline std::string timeoutText(int64_t timeoutMs) { return std::to_string(timeoutMs / 1000.0).substr(0, 6) + " s"; }

}  // namespace hora
