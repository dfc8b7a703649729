// The progress engine's one way to wait: what every wait on pairs does while nothing moves, and how it is
// woken. The engine (transport/context.h) has two waits, both this routine, each with its WaitPolicy
// (transport/wait.h): a collective's (Context::waitForProgress), which has a deadline, the background
// hook and a look for lost peers at every round, and the background wait between tasks
// (Context::waitForBackground), while only the messages (engine/p2p.h) are pending; they check their
// deadlines and liveness per channel in their progress(). Both sleep on what the messages' channels wait
// on (BackgroundProgress::watch()) and on a Waker that Context::wake() writes.
//
// The shape of every wait, round by round while nothing moves (idleMicros: since the last movement):
//  1. spin (spinRound) for spinMicros: a small message's answer comes within microseconds;
//  2. then, with only sockets pending, sleep in poll() on them and the wake-up eventfd, at most a cap;
//  3. with something on shared memory, which has no descriptor to sleep on: yield the core until
//     yieldMicros, then nap (waits::napAfterYield), looking at the sockets on the way where the policy says.
// Whoever polls hands the result to its own `looked`, which reads the revents (a notice, a hang-up, the
// wake-up) and may end the wait with an error.
#pragma once

#include <poll.h>
#include <sched.h>

#include <atomic>

#include "common/status.h"
#include "transport/wait.h"

namespace hora {

// Step 1: one round of the spin; false once the policy's spin is over (the caller then sleeps).
inline bool spinRound(const waits::WaitPolicy& policy, int64_t idleMicros) {
  if (idleMicros >= policy.spinMicros) return false;
  waits::cpuRelax();
  return true;
}

// Steps 2 and 3, one round. onSharedMemory: something pending has no descriptor. fds[0] is the wake-up
// eventfd, fds[1..n) the sockets of the pending pairs; pollMs is the sleep of step 2 (the policy's cap,
// or less where a deadline is nearer). looked(r) runs after every poll() with its result.
template <typename Looked>
Status sleepWhileIdle(const waits::WaitPolicy& policy, int64_t idleMicros, bool onSharedMemory, pollfd* fds, int n,
                      int pollMs, Looked&& looked) {
  if (!onSharedMemory) return looked(poll(fds, n, pollMs));
  if (idleMicros < policy.yieldMicros) {
    if (policy.lookWhileYielding && n > 1) HORA_RETURN_IF_ERROR(looked(poll(fds, n, 0)));
    sched_yield();
    return Status::ok();
  }
  if (policy.lookBeforeNap) {
    const int ready = poll(fds, n, 0);
    HORA_RETURN_IF_ERROR(looked(ready));
    if (ready > 0) return Status::ok();
  }
  waits::napAfterYield(idleMicros, policy.yieldMicros, policy.maxNapMicros);
  return Status::ok();
}

// The wake-up eventfd of a wait: any thread ends a sleepWhileIdle() early by wake(). While a wake-up is
// unread the fd stays readable, so further wakes need no write (a ping-pong of messages would otherwise
// pay a system call per message). Only its own waiter drains it: a thread that sleeps in the engine has a
// Waker of its own (Context::wake() writes each), or one waiter's drain could hide the wake-up from the
// other's poll().
class Waker {
 public:
  Waker() = default;
  Waker(const Waker&) = delete;
  Waker& operator=(const Waker&) = delete;
  ~Waker();
  // Makes the eventfd (a context that is only a group's view never waits itself and has none).
  void open();
  int fd() const { return fd_; }
  // Any thread.
  void wake();
  // Reads the fd empty and disarms wake(); call after poll() reported it readable. Drain first, then
  // disarm: a wake() that still sees the flag set in between finds the waiter awake, and every waiter
  // looks at its work again when its wait returns.
  void drain();

 private:
  int fd_ = -1;
  std::atomic<bool> armed_{false};
};

}  // namespace hora
