// Tests for the progress engine's one wait (transport/progress.h): what spinRound() and sleepWhileIdle() do
// in each phase of a WaitPolicy, what they look at, and how a Waker wakes them. Over an eventfd and
// connected Unix stream sockets standing in for a pair's socket. And the engine's wake-up
// (Context::wake()): with a collective's wait and the background wait asleep at once, on two threads,
// every wake() ends both.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/progress_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "tap.h"
#include "transport/context.h"
#include "transport/progress.h"
#include "transport/tcp/pair.h"

using namespace hora;
using hora::testing::check;

namespace {

int64_t millisSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

bool readable(int fd) {
  pollfd pf{fd, POLLIN, 0};
  return poll(&pf, 1, 0) == 1;
}

// A policy with round numbers, its looks as given.
waits::WaitPolicy policy(bool lookWhileYielding, bool lookBeforeNap) {
  return waits::WaitPolicy{/*spinMicros=*/50, /*yieldMicros=*/1000, /*maxNapMicros=*/100, /*pollCapMs=*/2000,
                           /*pollCapWithMessagesMs=*/5, lookWhileYielding, lookBeforeNap};
}

void policies() {
  using namespace waits;
  check(kCollectiveWait.spinMicros == kSpinMicros && kCollectiveWait.yieldMicros == kCollectiveYieldMicros &&
            kCollectiveWait.maxNapMicros == kCollectiveMaxNapMicros && kCollectiveWait.pollCapMs == kCollectivePollCapMs &&
            kCollectiveWait.pollCapWithMessagesMs == kCollectivePollCapWithMessagesMs &&
            kCollectiveWait.lookWhileYielding && !kCollectiveWait.lookBeforeNap,
        "the collectives' policy is the collectives' constants; it looks at the sockets while yielding");
  check(kOversubscribedCollectiveWait.spinMicros == kOversubscribedSpinMicros &&
            kOversubscribedCollectiveWait.yieldMicros == kOversubscribedYieldMicros &&
            kOversubscribedCollectiveWait.maxNapMicros == kCollectiveMaxNapMicros,
        "the oversubscribed collectives' policy spins and yields briefly");
  check(kMessageWait.spinMicros == kSpinMicros && kMessageWait.yieldMicros == kMessageYieldMicros &&
            kMessageWait.maxNapMicros == kMessageMaxNapMicros && kMessageWait.pollCapMs == kMessagePollCapMs &&
            !kMessageWait.lookWhileYielding && kMessageWait.lookBeforeNap,
        "the messages' policy is the messages' constants; it looks before each nap");
}

void spinning() {
  const waits::WaitPolicy p = policy(false, false);
  check(spinRound(p, 0) && spinRound(p, 49), "spinRound spins below spinMicros");
  check(!spinRound(p, 50) && !spinRound(p, 5000), "spinRound is over at spinMicros");
}

void waker() {
  Waker w;
  w.open();
  check(w.fd() >= 0 && !readable(w.fd()), "a Waker opens an eventfd that is not readable");
  w.wake();
  w.wake();
  check(readable(w.fd()), "wake() makes it readable");
  uint64_t count = 0;
  check(read(w.fd(), &count, sizeof(count)) == sizeof(count) && count == 1, "a second wake() before a drain writes nothing",
        "count " + std::to_string(count));
  w.wake();
  check(!readable(w.fd()), "until drained, wake() stays disarmed (the fd was read behind its back here)");
  w.drain();
  w.wake();
  check(readable(w.fd()), "after drain(), wake() writes again");
  w.drain();
  check(!readable(w.fd()), "drain() reads it empty");
}

void onSockets() {
  Waker w;
  w.open();
  int s[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, s) != 0) return check(false, "socketpair", "failed");
  pollfd fds[2] = {{w.fd(), POLLIN, 0}, {s[0], POLLIN, 0}};
  int seen = -2;
  auto t0 = std::chrono::steady_clock::now();
  std::thread waking([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    w.wake();
  });
  Status st = sleepWhileIdle(policy(false, false), 5000, /*onSharedMemory=*/false, fds, 2, 2000, [&](int r) {
    seen = r;
    if (r > 0 && (fds[0].revents & POLLIN)) w.drain();
    return Status::ok();
  });
  waking.join();
  const int64_t ms = millisSince(t0);
  check(st.isOk() && seen == 1 && ms < 1000, "sockets alone: sleeps in poll() until a wake()",
        "r " + std::to_string(seen) + " after " + std::to_string(ms) + " ms");
  const char byte = 'x';
  ssize_t ignored = write(s[1], &byte, 1);
  (void)ignored;
  seen = -2;
  st = sleepWhileIdle(policy(false, false), 5000, false, fds, 2, 2000, [&](int r) {
    seen = r;
    return Status(Code::kPeerLost, "looked", 1);
  });
  check(st.code() == Code::kPeerLost && seen == 1 && (fds[1].revents & POLLIN),
        "sockets alone: a ready socket returns at once, and what looked() says is the wait's result");
  t0 = std::chrono::steady_clock::now();
  char got;
  ignored = read(s[0], &got, 1);
  st = sleepWhileIdle(policy(false, false), 5000, false, fds, 2, 30, [&](int r) {
    seen = r;
    return Status::ok();
  });
  check(st.isOk() && seen == 0 && millisSince(t0) >= 25, "sockets alone: nothing ready sleeps for pollMs");
  close(s[0]);
  close(s[1]);
}

void onSharedMemory() {
  Waker w;
  w.open();
  int s[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, s) != 0) return check(false, "socketpair", "failed");
  pollfd fds[2] = {{w.fd(), POLLIN, 0}, {s[0], POLLIN, 0}};
  int looks = 0;
  auto count = [&](int) {
    ++looks;
    return Status::ok();
  };
  // Yielding (idle below yieldMicros).
  sleepWhileIdle(policy(true, false), 500, /*onSharedMemory=*/true, fds, 2, 2000, count);
  check(looks == 1, "shared memory, yielding: lookWhileYielding looks at the sockets", std::to_string(looks));
  looks = 0;
  sleepWhileIdle(policy(true, false), 500, true, fds, 1, 2000, count);
  check(looks == 0, "shared memory, yielding: no socket beside the wake-up fd, no look", std::to_string(looks));
  sleepWhileIdle(policy(false, true), 500, true, fds, 2, 2000, count);
  check(looks == 0, "shared memory, yielding: a policy without lookWhileYielding does not look", std::to_string(looks));
  auto t0 = std::chrono::steady_clock::now();
  Status st = sleepWhileIdle(policy(true, false), 500, true, fds, 2, 2000, [&](int) { return Status(Code::kPeerLost, "looked", 1); });
  check(st.code() == Code::kPeerLost && millisSince(t0) < 1000,
        "shared memory, yielding: what the look says is the wait's result, and it never waits in poll()");
  // Napping (idle past yieldMicros).
  looks = 0;
  sleepWhileIdle(policy(true, false), 5000, true, fds, 2, 2000, count);
  check(looks == 0, "shared memory, napping: a policy without lookBeforeNap naps without a look", std::to_string(looks));
  sleepWhileIdle(policy(false, true), 5000, true, fds, 1, 2000, count);
  check(looks == 1, "shared memory, napping: lookBeforeNap looks, at the wake-up fd alone too", std::to_string(looks));
  w.wake();
  int seen = -2;
  sleepWhileIdle(policy(false, true), 5000, true, fds, 1, 2000, [&](int r) {
    seen = r;
    if (r > 0 && (fds[0].revents & POLLIN)) w.drain();
    return Status::ok();
  });
  check(seen == 1 && !readable(w.fd()), "shared memory, napping: the look takes a wake-up", std::to_string(seen));
  close(s[0]);
  close(s[1]);
}

// Stands in for the messages: busy when the test says so, and the round that takes it says when.
class Background : public BackgroundProgress {
 public:
  bool busy() const override { return pending.load(); }
  void progressInBackground() override {
    if (pending.exchange(false)) movedAt.store(monotonicNanos());
  }
  int watch(pollfd*, int, bool*) override { return 0; }

  std::atomic<bool> pending{false};
  std::atomic<int64_t> movedAt{0};
};

// The engine's two sleepers at once, as in a communicator whose JS thread runs a collective in wait()
// while the communication thread waits on messages: a collective's step waits on a socket that never
// delivers (its wait sleeps in poll(), up to kCollectivePollCapMs), and another thread waits in
// waitForBackground() (up to kMessagePollCapMs). Each trial lets both fall asleep, then does what post()
// does (work for the background client, then wake()); both waits must end far below either cap. Then an
// abort while both sleep ends both likewise. With one eventfd read by both waiters, the first to read it
// leaves the other's poll() to find it empty when it looks again after being woken: it sleeps on to its cap.
void engineWakes() {
  constexpr int kTrials = 20;
  constexpr int64_t kBoundMs = 50;  // both caps are 100 ms or more; generous for a noisy machine
  int s[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, s) != 0) return check(false, "socketpair", "failed");
  Context ctx(0, 2, /*timeoutMs=*/60000);
  Background background;
  ctx.setBackground(&background);
  tcp::TcpPair silent(1, s[0]);  // the peer's end, s[1], never writes
  uint8_t buf[4];
  Status collective;
  std::atomic<int64_t> collectiveEndedAt{0};
  std::thread collectiveThread([&] {
    RecvOp r{&silent, buf, sizeof(buf)};
    collective = ctx.progress(nullptr, 0, &r, 1);
    collectiveEndedAt.store(monotonicNanos());
  });
  std::atomic<bool> stop{false};
  std::atomic<int64_t> idleWokenAt{0};
  std::thread idleThread([&] {
    while (!stop.load()) {
      ctx.waitForBackground(/*idleMicros=*/1000000);
      idleWokenAt.store(monotonicNanos());
    }
  });
  auto waitUntil = [](const std::atomic<int64_t>& at, int64_t after) {
    const auto giveUp = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
    while (at.load() < after && std::chrono::steady_clock::now() < giveUp) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return (at.load() - after) / 1000000;
  };
  int64_t worstCollective = 0, worstIdle = 0;
  for (int t = 0; t < kTrials; ++t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // both asleep in poll() again
    const int64_t t0 = monotonicNanos();
    background.pending.store(true);
    ctx.wake();
    worstCollective = std::max(worstCollective, waitUntil(background.movedAt, t0));
    worstIdle = std::max(worstIdle, waitUntil(idleWokenAt, t0));
  }
  check(worstCollective < kBoundMs, "wake() ends a collective's sleep in poll() while another thread sleeps in the engine",
        "slowest of " + std::to_string(kTrials) + ": " + std::to_string(worstCollective) + " ms");
  check(worstIdle < kBoundMs, "wake() ends the background wait while a collective's wait sleeps on another thread",
        "slowest of " + std::to_string(kTrials) + ": " + std::to_string(worstIdle) + " ms");
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const int64_t t0 = monotonicNanos();
  ctx.abort(Status(Code::kShutdown, "aborted by the test"));
  const int64_t collectiveMs = waitUntil(collectiveEndedAt, t0);
  const int64_t idleMs = waitUntil(idleWokenAt, t0);
  stop.store(true);
  ctx.wake();
  collectiveThread.join();
  idleThread.join();
  check(collective.code() == Code::kShutdown && collectiveMs < kBoundMs && idleMs < kBoundMs,
        "abort() with both waits asleep ends the collective with its reason and wakes the background wait",
        std::string(codeName(collective.code())) + " after " + std::to_string(collectiveMs) + " ms; background wait woke after " +
            std::to_string(idleMs) + " ms");
  close(s[1]);
}

}  // namespace

int main() {
  hora::testing::startWatchdog(30);
  policies();
  spinning();
  waker();
  onSockets();
  onSharedMemory();
  engineWakes();
  return hora::testing::finish();
}
