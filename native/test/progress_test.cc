// Tests for the progress engine's one wait (transport/progress.h): what spinRound() and sleepWhileIdle() do
// in each phase of a WaitPolicy, what they look at, and how a Waker wakes them. Over an eventfd and
// connected Unix stream sockets standing in for a pair's socket.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/progress_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "tap.h"
#include "transport/progress.h"

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

}  // namespace

int main() {
  hora::testing::startWatchdog(30);
  policies();
  spinning();
  waker();
  onSockets();
  onSharedMemory();
  return hora::testing::finish();
}
