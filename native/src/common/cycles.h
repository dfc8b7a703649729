// Short intervals from the processor's time-stamp counter, where it counts at a constant rate.
//
// A read of it costs about 10 ns on an x86-64 guest, against about 25 for the clock (clock_gettime through
// the vDSO); a small collective waited with wait() is timed on every call for the Stats report, and two
// clock reads were a few percent of it. The counter's rate is measured once per process against the clock.
#pragma once

#include <cstdint>

#include "common/clock.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace hora {

class IntervalClock {
 public:
  // Ticks: counter values, or nanoseconds where there is no counter to trust.
  uint64_t now() const {
#if defined(__x86_64__)
    if (counter_) return __rdtsc();
#endif
    return static_cast<uint64_t>(monotonicNanos());
  }
  double nanos(uint64_t ticks) const { return static_cast<double>(ticks) * nanosPerTick_; }

  // The process's one, measured on first use (a 2 ms spin).
  static const IntervalClock& get() {
    static const IntervalClock clock;
    return clock;
  }

 private:
  IntervalClock() {
#if defined(__x86_64__)
    // CPUID 0x80000007, EDX bit 8: the counter runs at a constant rate in every power state (an
    // "invariant" TSC). Without it the counter's rate may change under us: use the clock.
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0x80000000, nullptr) < 0x80000007 || !__get_cpuid(0x80000007, &a, &b, &c, &d) || !(d & (1u << 8))) return;
    const int64_t ns0 = monotonicNanos();
    const uint64_t t0 = __rdtsc();
    int64_t ns1 = ns0;
    while (ns1 - ns0 < 2000000) ns1 = monotonicNanos();
    const uint64_t t1 = __rdtsc();
    if (t1 <= t0) return;
    nanosPerTick_ = static_cast<double>(ns1 - ns0) / static_cast<double>(t1 - t0);
    counter_ = true;
#endif
  }

  bool counter_ = false;
  double nanosPerTick_ = 1.0;
};

}  // namespace hora
