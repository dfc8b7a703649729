// How long the progress engine's idle waits spin, yield, nap and sleep: every wait constant in one place.
//
// The progress engine (transport/context.h) has two waits. A collective's wait (Context::waitForProgress)
// holds the communication thread, or the JS thread in wait(), until its step's bytes have moved; the
// background wait (Context::waitForBackground) is what the communication thread does while it has no task
// and messages are in flight. Both spin first, because a small message's answer comes within microseconds; then, on
// shared memory, which has no descriptor to sleep on, they yield the core and at last sleep in naps that
// grow with the time idle; on TCP they sleep in poll() and wake when data arrives.
//
// Both are one routine, transport/progress.h's sleepWhileIdle(), run by a policy (WaitPolicy, below:
// kCollectiveWait, kOversubscribedCollectiveWait, kMessageWait). Where the two waits differ, they serve
// different callers, and the constants say which (kCollective*, kMessage*). Every value here was measured
// for small-message latency and CPU use; change one only with the benchmarks of docs/benchmarks.md.
#pragma once

#include <time.h>

#include <cstdint>

namespace hora {
namespace waits {

// Both waits spin this long before they give the core away: spinning keeps small-message latency in
// microseconds (a reply in a ping-pong comes within them).
constexpr int64_t kSpinMicros = 50;

// A collective on shared memory then yields (the core stays busy, but any other thread on it runs first)
// for this long before it naps. Long on purpose: a rank that waits for a slower peer in lockstep training
// waits milliseconds every step, and a virtual CPU that halts for that long comes back slower (its
// physical core went to other guests), so on a 2-vCPU guest the next step's compute took ~25% longer
// (docs/notes/2026-11-22-tfjs-scaling-series-4-noisy-machine.md). As in MPI's default busy polling, the
// waiting rank keeps a core it does not share with a peer.
constexpr int64_t kCollectiveYieldMicros = 200000;
// When more ranks share the host than it has cores, a spinning rank takes the core from the very peer it
// waits for, so a collective's wait gives the core away almost at once (as MPI does when oversubscribed).
constexpr int64_t kOversubscribedSpinMicros = 2;
constexpr int64_t kOversubscribedYieldMicros = 100;
// The longest nap of a collective's wait on shared memory once it stopped yielding.
constexpr int kCollectiveMaxNapMicros = 500;
// A collective's wait reads the clock once every this many idle rounds (reading it costs little next to a
// round, but not nothing), except where the spin is short enough for those rounds to count.
constexpr int kCollectiveRoundsPerClockRead = 16;
// The longest sleep in poll() of a collective's wait on sockets alone (the deadline is checked between
// sleeps), and the shorter one while messages are in flight, which are moved between polls.
constexpr int kCollectivePollCapMs = 200;
constexpr int kCollectivePollCapWithMessagesMs = 5;

// The messages' wait yields only this long, the value both waits had before the collectives' yield was
// lengthened for lockstep training (above): that measurement was of collectives, not of messages, whose
// wait runs on the communication thread between tasks and may wait a long time for a late peer (a
// pipeline stage for its next activation) while the training step's compute needs the core.
constexpr int64_t kMessageYieldMicros = 1000;
// The longest nap of the messages' wait on shared memory once it stopped yielding.
constexpr int kMessageMaxNapMicros = 1000;
// The longest sleep in poll() of the messages' wait while only TCP channels are pending (deadlines are
// checked in between).
constexpr int kMessagePollCapMs = 100;
// How often a message channel that something waits on is checked for a peer that is gone
// (transport/liveness.h); a collective's wait checks at every round past its spin instead.
constexpr int kMessageLivenessMs = 50;

// The shortest nap, and how the nap grows with the time idle past the yield: one microsecond per this many.
constexpr int kMinNapMicros = 20;
constexpr int64_t kNapGrowth = 8;

// One wait's constants together: what transport/progress.h's sleepWhileIdle() does with each idle round.
struct WaitPolicy {
  int64_t spinMicros;         // spin this long after the last movement before giving the core away
  int64_t yieldMicros;        // shared memory: then yield the core until idle this long, then nap
  int maxNapMicros;           // shared memory: the longest nap
  int pollCapMs;              // sockets alone: the longest sleep in poll() (deadlines are checked in between)
  int pollCapWithMessagesMs;  // the same while messages are in flight (they are moved between polls)
  // Shared memory with sockets beside it: look at the sockets (a poll() that does not wait) at every
  // yield, and before every nap (which a socket found ready then skips).
  bool lookWhileYielding;
  bool lookBeforeNap;
};

// A collective's wait (Context::waitForProgress): long yield, short naps, a look at the sockets (notices,
// a sending peer's hang-up) at every yield.
constexpr WaitPolicy kCollectiveWait{kSpinMicros,          kCollectiveYieldMicros, kCollectiveMaxNapMicros,
                                     kCollectivePollCapMs, kCollectivePollCapWithMessagesMs,
                                     /*lookWhileYielding=*/true, /*lookBeforeNap=*/false};
// The same when more ranks share the host than it has cores: the core is given away almost at once.
constexpr WaitPolicy kOversubscribedCollectiveWait{kOversubscribedSpinMicros, kOversubscribedYieldMicros,
                                                   kCollectiveMaxNapMicros,   kCollectivePollCapMs,
                                                   kCollectivePollCapWithMessagesMs,
                                                   /*lookWhileYielding=*/true, /*lookBeforeNap=*/false};
// The messages' wait (Context::waitForBackground): short yield, longer naps, and a look before each nap
// (which also takes the wake-up of a message posted meanwhile).
constexpr WaitPolicy kMessageWait{kSpinMicros,       kMessageYieldMicros, kMessageMaxNapMicros,
                                  kMessagePollCapMs, kMessagePollCapMs,
                                  /*lookWhileYielding=*/false, /*lookBeforeNap=*/true};

// One round of a spin: tells the core this thread only waits.
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// A wait on shared memory that has yielded for yieldMicros sleeps for a while: longer the longer nothing
// moved (idleMicros), from kMinNapMicros up to maxNapMicros.
inline void napAfterYield(int64_t idleMicros, int64_t yieldMicros, int maxNapMicros) {
  int nap = static_cast<int>((idleMicros - yieldMicros) / kNapGrowth);
  nap = nap < kMinNapMicros ? kMinNapMicros : (nap > maxNapMicros ? maxNapMicros : nap);
  timespec ts{0, nap * 1000L};
  nanosleep(&ts, nullptr);
}

}  // namespace waits
}  // namespace hora
