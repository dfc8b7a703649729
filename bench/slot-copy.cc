// How a chunk gets from one core to the other through a shared-memory slot, plain stores against the
// non-temporal stores of transport/shm/copy.h (streamToSlot, here at every size; hora streams chunks of
// kStreamMinBytes and more), two threads pinned to CPUs 0 and 1:
//   - the one-way latency of a cache line between the two cores (a flag passed back and forth), which
//     says how far apart the cores are;
//   - a ring of 8 slots of 64 KiB, as in transport/shm/ring.h: a writer copies chunks from a window of
//     64 distinct 64 KiB arrays into the slots and a reader copies them out (GB/s, and the writer's copies
//     alone);
//   - a ping-pong of one buffer of SIZE bytes each way through a slot (half round trip, µs).
// Build and run from the repository root:
//   g++ -O2 -pthread -Inative/src bench/slot-copy.cc -o /tmp/slot-copy && /tmp/slot-copy [rounds=3]
// Each round prints one line per test, plain and streamed in turn. On a virtual machine the hypervisor may
// move the two vCPUs apart or together between rounds: the latency line of each round says which.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "transport/shm/copy.h"
#include "transport/shm/ring.h"

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    std::fprintf(stderr, "slot-copy: cannot pin a thread to CPU %d (this needs two CPUs)\n", cpu);
    std::exit(2);
  }
}

// A chunk into a slot: streamed as copy.h streams (at every size here), or with plain stores.
void put(uint8_t* dst, const uint8_t* src, size_t n, bool stream) {
  if (stream) {
    hora::shm::streamToSlot(dst, src, n);
  } else {
    std::memcpy(dst, src, n);
  }
}

struct alignas(64) Flag {
  std::atomic<uint64_t> v{0};
};

void waitFor(const Flag& f, uint64_t at) {
  while (f.v.load(std::memory_order_acquire) < at) {
  }
}

// One-way latency of a cache line between CPUs 0 and 1, ns.
double lineLatencyNs() {
  const uint64_t n = 200000;
  Flag f;
  std::thread other([&] {
    pin(1);
    for (uint64_t i = 0; i < n; ++i) {
      while (f.v.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      f.v.store(2 * i + 2, std::memory_order_release);
    }
  });
  pin(0);
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    f.v.store(2 * i + 1, std::memory_order_release);
    while (f.v.load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  const double s = secondsSince(t0);
  other.join();
  return s * 1e9 / double(2 * n);
}

// A ring of kSlots slots of kSlotBytes; returns GB/s through it and the writer's copies alone.
void ring(bool stream, double* gbps, double* writerGbps) {
  using hora::shm::kSlotBytes;
  using hora::shm::kSlots;
  const size_t window = 64, chunks = 6400;
  std::vector<uint8_t> slots(kSlots * kSlotBytes + 64), src(window * kSlotBytes, 1), dst(window * kSlotBytes, 0);
  uint8_t* base = slots.data() + (64 - reinterpret_cast<uintptr_t>(slots.data()) % 64) % 64;
  Flag head, tail;
  std::thread reader([&] {
    pin(1);
    for (uint64_t i = 0; i < chunks; ++i) {
      waitFor(head, i + 1);
      std::memcpy(dst.data() + (i % window) * kSlotBytes, base + (i % kSlots) * kSlotBytes, kSlotBytes);
      tail.v.store(i + 1, std::memory_order_release);
    }
  });
  pin(0);
  double copying = 0;
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < chunks; ++i) {
    if (i >= kSlots) waitFor(tail, i - kSlots + 1);
    const auto c0 = Clock::now();
    put(base + (i % kSlots) * kSlotBytes, src.data() + (i % window) * kSlotBytes, kSlotBytes, stream);
    copying += secondsSince(c0);
    head.v.store(i + 1, std::memory_order_release);
  }
  reader.join();
  const double s = secondsSince(t0), bytes = double(chunks) * kSlotBytes;
  *gbps = bytes / s / 1e9;
  *writerGbps = bytes / copying / 1e9;
}

// Half round trip of `size` bytes each way through a slot, µs.
double pingPongUs(size_t size, bool stream) {
  const uint64_t n = size <= 16384 ? 20000 : size <= 262144 ? 2000 : 200;
  std::vector<uint8_t> slotA(size + 64), slotB(size + 64), a(size, 1), b(size, 2), outA(size), outB(size);
  uint8_t* sa = slotA.data() + (64 - reinterpret_cast<uintptr_t>(slotA.data()) % 64) % 64;
  uint8_t* sb = slotB.data() + (64 - reinterpret_cast<uintptr_t>(slotB.data()) % 64) % 64;
  Flag fa, fb;
  std::thread other([&] {
    pin(1);
    for (uint64_t i = 0; i < n; ++i) {
      waitFor(fa, i + 1);
      std::memcpy(outB.data(), sa, size);
      put(sb, b.data(), size, stream);
      fb.v.store(i + 1, std::memory_order_release);
    }
  });
  pin(0);
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    put(sa, a.data(), size, stream);
    fa.v.store(i + 1, std::memory_order_release);
    waitFor(fb, i + 1);
    std::memcpy(outA.data(), sb, size);
  }
  const double s = secondsSince(t0);
  other.join();
  return s * 1e6 / double(2 * n);
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  if (rounds < 1) {
    std::fprintf(stderr, "slot-copy: rounds must be a whole number of at least 1; received \"%s\"\n", argv[1]);
    return 2;
  }
  for (int r = 1; r <= rounds; ++r) {
    std::printf("round %d: cache line between the cores, one way: %.1f ns\n", r, lineLatencyNs());
    for (bool stream : {false, true}) {
      double gbps = 0, writer = 0;
      ring(stream, &gbps, &writer);
      std::printf("  ring of 64 KiB chunks, %-8s %5.1f GB/s (the writer's copies alone %5.1f GB/s)\n",
                  stream ? "streamed" : "plain", gbps, writer);
    }
    for (size_t size : {size_t(4096), size_t(16384), size_t(65536), size_t(262144), size_t(1048576)}) {
      const double plain = pingPongUs(size, false), streamed = pingPongUs(size, true);
      std::printf("  ping-pong %7zu B: plain %7.2f µs, streamed %7.2f µs\n", size, plain, streamed);
    }
  }
  return 0;
}
