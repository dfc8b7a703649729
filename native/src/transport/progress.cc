// The progress engine's work (transport/context.h, transport/progress.h): Context's progress() over a
// collective step's sends and receives, the collectives' wait (waitForProgress()), the background wait
// between tasks (waitForBackground(), sleepUntilWoken()), the one wake-up (wake()) and what a wait finds
// (lost peers, the deadline); and the Waker each sleeping thread polls. The connections themselves (listen,
// connect, take-over, hang-up) are context.cc's.
#include "transport/progress.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "reduce/reduce.h"
#include "transport/context.h"
#include "transport/liveness.h"
#include "transport/wait.h"

namespace hora {

using waits::cpuRelax;

Waker::~Waker() {
  if (fd_ >= 0) close(fd_);
}

void Waker::open() {
  if (fd_ < 0) fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

void Waker::wake() {
  if (armed_.exchange(true)) return;
  uint64_t one = 1;
  ssize_t ignored = write(fd_, &one, sizeof(one));
  (void)ignored;
}

void Waker::drain() {
  uint64_t drained;
  ssize_t ignored = read(fd_, &drained, sizeof(drained));
  (void)ignored;
  armed_.store(false);
}

void Context::wake() {
  if (base_ != nullptr) return base_->wake();
  idleWaker_.wake();
  // Whoever wakes changed first what the waits look at (a message posted, the abort flag); the collective's
  // wait says it listens before it looks at those (waitForProgress). With a full fence on both sides, either
  // this sees it listening and writes, or its look sees the change.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (collectiveListening_.load(std::memory_order_relaxed)) collectiveWaker_.wake();
}

void Context::waitForBackground(int64_t idleMicros) {
  if (base_ != nullptr) return base_->waitForBackground(idleMicros);
  const waits::WaitPolicy& policy = waits::kMessageWait;
  if (spinRound(policy, idleMicros)) return;
  pollfd* fds = idleFds_.data();
  fds[0] = {idleWaker_.fd(), POLLIN, 0};
  bool onSharedMemory = false;
  int n = 0;
  if (background_ != nullptr) {
    n = background_->watch(fds + 1, static_cast<int>(idleFds_.size()) - 1, &onSharedMemory);
    if (n < 0) {
      // Another thread is moving the messages.
      sched_yield();
      return;
    }
  }
  sleepWhileIdle(policy, idleMicros, onSharedMemory, fds, n + 1, policy.pollCapMs, [&](int r) {
    if (r > 0 && (fds[0].revents & POLLIN)) idleWaker_.drain();
    return Status::ok();
  });
}

void Context::sleepUntilWoken(int ms) {
  if (base_ != nullptr) return base_->sleepUntilWoken(ms);
  pollfd pf{idleWaker_.fd(), POLLIN, 0};
  if (poll(&pf, 1, ms) > 0) idleWaker_.drain();
}

Status Context::sendRecv(int to, const void* sendData, size_t sendLen, int from, void* recvData, size_t recvLen) {
  SendOp s{pair(to), static_cast<const uint8_t*>(sendData), sendLen};
  RecvOp r{pair(from), static_cast<uint8_t*>(recvData), recvLen};
  return progress(&s, 1, &r, 1);
}

Status Context::progress(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) {
  if (base_ != nullptr) return base_->progress(sends, numSends, recvs, numRecvs);
  int idle = 0;
  int partialWakes = 0;  // waits in poll() after which bytes moved but some were still to come
  polledLast_ = false;
  Clock::time_point idleSince;
  for (;;) {
    bool moved = false;
    bool pending = false;
    for (int i = 0; i < numSends; ++i) {
      SendOp& s = sends[i];
      if (s.done == s.len) continue;
      // Sends to one peer share one stream: a later one waits until the earlier ones are through.
      bool queuedBehind = false;
      for (int j = 0; j < i; ++j) queuedBehind |= sends[j].pair == s.pair && sends[j].done < sends[j].len;
      if (queuedBehind) {
        pending = true;
        continue;
      }
      size_t taken = 0;
      HORA_RETURN_IF_ERROR(s.pair->trySend(s.data + s.done, s.len - s.done, &taken));
      s.done += taken;
      moved |= taken > 0;
      pending |= s.done < s.len;
    }
    for (int i = 0; i < numRecvs; ++i) {
      RecvOp& r = recvs[i];
      if (r.done == r.len) continue;
      // Likewise receives from one peer: the bytes arrive in the order the peer queued its sends.
      bool queuedBehind = false;
      for (int j = 0; j < i; ++j) queuedBehind |= recvs[j].pair == r.pair && recvs[j].done < recvs[j].len;
      if (queuedBehind) {
        pending = true;
        continue;
      }
      if (!r.reduce) {
        size_t got = 0;
        HORA_RETURN_IF_ERROR(r.pair->tryRecvInto(r.dst + r.done, r.len - r.done, &got));
        r.done += got;
        moved |= got > 0;
      } else {
        const size_t elem = dtypeSize(r.dtype);
        for (;;) {
          const uint8_t* src = nullptr;
          size_t avail = 0;
          HORA_RETURN_IF_ERROR(r.pair->peek(r.len - r.done, &src, &avail));
          size_t n = avail - avail % elem;
          if (n == 0) break;
          if (reinterpret_cast<uintptr_t>(src) % elem != 0) {
            // A read-ahead buffer can hold a message at any byte offset; the kernels want aligned elements.
            alignas(64) static thread_local uint8_t aligned[16384];
            n = n < sizeof(aligned) ? n : sizeof(aligned);
            memcpy(aligned, src, n);
            src = aligned;
          }
          if (r.scaled == nullptr) {
            timedReduce([&] { reduceInto(r.op, r.dtype, r.dst + r.done, src, n / elem); });
          } else {
            timedReduce([&] { reduceTwoScaled(r.op, r.dtype, r.dst + r.done, r.dst + r.done, src, n / elem, *r.scaled); });
          }
          r.pair->consume(n);
          r.done += n;
          moved = true;
          if (r.done == r.len) break;
        }
      }
      pending |= r.done < r.len;
    }
    if (!pending) {
      if (partialWakes == 0) bandwidthBound_ = false;
      return Status::ok();
    }
    if (moved) {
      if (polledLast_) {
        ++partialWakes;
        bandwidthBound_ = true;
      }
      polledLast_ = false;
      idle = 0;
      continue;
    }
    // Most waits of a small message end within a few rounds: the clock is first read at the sixteenth
    // (waitForProgress), except where the spin is short enough for those rounds to count.
    if (idle++ == 0) idleSince = oversubscribed_ ? Clock::now() : Clock::time_point();
    HORA_RETURN_IF_ERROR(waitForProgress(sends, numSends, recvs, numRecvs, idle, &idleSince));
  }
}

Status Context::waitForProgress(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs, int idleRounds,
                                 Clock::time_point* idleSince) {
  if (aborted_.load(std::memory_order_acquire)) return abortReason();
  // A link that trickles (a shaped or congested TCP path) wakes the wait many times per transfer, each
  // time for a part of it: spinning after every wake would keep a core busy for the whole transfer (a
  // quarter of one, measured with 100 Mbit/s links) that the training step's compute needs. Such waits
  // sleep in poll() at once; a wait that is answered quickly (small messages) still spins first.
  const bool trickling = bandwidthBound_ && onSocketsOnly(sends, numSends, recvs, numRecvs);
  const waits::WaitPolicy& policy = oversubscribed_ ? waits::kOversubscribedCollectiveWait : waits::kCollectiveWait;
  // Reading the clock costs little next to a round, but not nothing: spin a few rounds between reads.
  if (!trickling && idleRounds % waits::kCollectiveRoundsPerClockRead != 0) {
    cpuRelax();
    return Status::ok();
  }
  const Clock::time_point now = Clock::now();
  if (deadlinePending_) {
    deadline_ = Deadline(now, timeoutMs_);
    deadlinePending_ = false;
  }
  if (*idleSince == Clock::time_point()) *idleSince = now;
  const int64_t idleMicros = std::chrono::duration_cast<std::chrono::microseconds>(now - *idleSince).count();
  if (!trickling && spinRound(policy, idleMicros)) return Status::ok();
  if (deadline_.expired()) return timeoutStatus(sends, numSends, recvs, numRecvs);
  // From here wake() writes to this wait's eventfd (see wake()); what it wakes for is looked at after.
  collectiveListening_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  struct Listening {
    std::atomic<bool>& on;
    ~Listening() { on.store(false, std::memory_order_relaxed); }
  } listening{collectiveListening_};
  if (aborted_.load(std::memory_order_acquire)) return abortReason();
  const bool background = background_ != nullptr && background_->busy();
  if (background) background_->progressInBackground();

  // Gather what poll() can watch: TCP sockets with pending work, plus the wake-up eventfd. A pending send
  // also watches for the peer's hang-up: a peer that shut its side never reads again, and a full socket
  // buffer would otherwise wait for the deadline.
  pollfd fds[64];
  Pair* senders[64] = {};
  Pair* noticeOf[64] = {};  // a notice socket's pair
  int n = 0;
  auto watchNotices = [&](Pair* p) {
    if (p->noticeFd() >= 0 && n < 64) {
      noticeOf[n] = p;
      fds[n++] = {p->noticeFd(), POLLIN, 0};
    }
  };
  bool spinning = false;
  fds[n++] = {collectiveWaker_.fd(), POLLIN, 0};
  for (int i = 0; i < numSends && n < 64; ++i) {
    if (sends[i].done == sends[i].len) continue;
    int fd = sends[i].pair->pollFd();
    if (fd >= 0) {
      senders[n] = sends[i].pair;
      fds[n++] = {fd, POLLOUT | POLLRDHUP, 0};
      watchNotices(sends[i].pair);
    } else {
      spinning = true;
    }
  }
  for (int i = 0; i < numRecvs && n < 64; ++i) {
    if (recvs[i].done == recvs[i].len) continue;
    int fd = recvs[i].pair->pollFd();
    if (fd >= 0) {
      fds[n++] = {fd, POLLIN, 0};
      watchNotices(recvs[i].pair);
    } else {
      spinning = true;
    }
  }
  // A sleep in poll() also watches the background client's channels (after the collective's own, within
  // the same 64 entries), so bytes arriving for a message end it too. A wait that spins on shared memory
  // moves the messages at every round anyway.
  if (background && !spinning && n < 64) {
    bool messagesOnSharedMemory = false;
    const int more = background_->watch(fds + n, 64 - n, &messagesOnSharedMemory);
    if (more > 0) n += more;
  }
  auto looked = [&](int r) -> Status {
    if (r < 0 && errno != EINTR) return Status(Code::kInternal, std::string("poll failed: ") + strerror(errno));
    // Taken only by a wait that sleeps in poll(): one on shared memory looks without sleeping and leaves it
    // readable, so further wakes need no write until a sleep in poll() returns at once and takes it.
    if (r > 0 && !spinning && (fds[0].revents & POLLIN)) collectiveWaker_.drain();
    for (int i = 1; r > 0 && i < n; ++i) {
      if (noticeOf[i] != nullptr && fds[i].revents != 0) {
        // Only a notice counts: a peer that exited may have left its last bytes to read on the data socket,
        // which tells a loss by itself.
        if (noticeWaiting(fds[i].fd)) return peerFailedStatus(noticeOf[i]->peer(), rank_, Waiter::kCollective);
        continue;
      }
      if (senders[i] != nullptr && (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
        return sendingPeerLostStatus(fds[i].fd, senders[i]->peer(), rank_);
      }
    }
    return Status::ok();
  };
  // Shared memory has no descriptor to sleep on: the wait yields for a while, then naps, looking at the
  // peers' sockets for a hang-up on the way.
  // A peer that wrote its last bytes into the ring and then exited is not lost: the hang-up can be seen
  // after the round that found the ring empty and before the bytes are read. So a hang-up counts only
  // when it is seen again after one more round over the rings.
  if (spinning) {
    Status alive = checkLiveness(sends, numSends, recvs, numRecvs);
    if (!alive.isOk() && !hangUpSeen_) {
      hangUpSeen_ = true;
      return Status::ok();
    }
    hangUpSeen_ = false;
    HORA_RETURN_IF_ERROR(alive);
  } else {
    polledLast_ = true;
  }
  // Messages in flight are moved between polls, so the poll is kept short while there are any.
  const int pollMs = spinning ? 0 : deadline_.remainingMs(background ? policy.pollCapWithMessagesMs : policy.pollCapMs);
  return sleepWhileIdle(policy, idleMicros, spinning, fds, n, pollMs, looked);
}

Status Context::checkMessagePeer(int peer, Clock::time_point now) {
  nextMessageLook_[peer] = now + std::chrono::milliseconds(waits::kMessageLivenessMs);
  // The peer's collective failed in an elastic world: it said so on the notice socket of its collectives'
  // pair (notifyPeers()).
  Pair* collectives = pair(peer);
  return checkPeer(*p2pChannel(peer), collectives != nullptr ? collectives->noticeFd() : -1, rank_, Waiter::kMessage);
}

bool Context::onSocketsOnly(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) const {
  for (int i = 0; i < numSends; ++i) {
    if (sends[i].done < sends[i].len && sends[i].pair->pollFd() < 0) return false;
  }
  for (int i = 0; i < numRecvs; ++i) {
    if (recvs[i].done < recvs[i].len && recvs[i].pair->pollFd() < 0) return false;
  }
  return true;
}

Status Context::checkLiveness(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) {
  // Shared memory only: a TCP pair's wait sees a hang-up in poll() on the socket itself.
  auto check = [&](Pair* p) -> Status {
    return p->pollFd() >= 0 ? Status::ok() : checkPeer(*p, p->noticeFd(), rank_, Waiter::kCollective);
  };
  // Only peers this rank still waits on: a peer whose part is done may already have finished and exited.
  for (int i = 0; i < numSends; ++i) {
    if (sends[i].done < sends[i].len) HORA_RETURN_IF_ERROR(check(sends[i].pair));
  }
  for (int i = 0; i < numRecvs; ++i) {
    if (recvs[i].done < recvs[i].len) HORA_RETURN_IF_ERROR(check(recvs[i].pair));
  }
  return Status::ok();
}

Status Context::timeoutStatus(SendOp* sends, int numSends, RecvOp* recvs, int numRecvs) const {
  for (int i = 0; i < numRecvs; ++i) {
    if (recvs[i].done < recvs[i].len) {
      int peer = recvs[i].pair->peer();
      return Status(Code::kTimeout,
                    "timed out after " + timeoutText(timeoutMs_) + " waiting for rank " +
                        std::to_string(peer) + " (received " + std::to_string(recvs[i].done) + " of " +
                        std::to_string(recvs[i].len) + " bytes)",
                    peer);
    }
  }
  for (int i = 0; i < numSends; ++i) {
    if (sends[i].done < sends[i].len) {
      int peer = sends[i].pair->peer();
      return Status(Code::kTimeout,
                    "timed out sending to rank " + std::to_string(peer) + " (sent " + std::to_string(sends[i].done) +
                        " of " + std::to_string(sends[i].len) + " bytes)",
                    peer);
    }
  }
  return Status(Code::kTimeout, "timed out", -1);
}

}  // namespace hora
