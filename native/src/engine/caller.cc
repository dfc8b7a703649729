// The calling thread's ways into the engine: a caller that waits for a work runs the queued tasks itself
// while the engine is idle (waitFor()), a small collective waited for at once runs on the caller without
// the queue (runNow()), an awaited one when it cannot wait on a peer (runIfReady()), and an awaited one is
// watched for a while before the event loop sleeps (spinFor()). Every task still runs through runTask(),
// one at a time (running_), in the order of submission.
#include <sched.h>

#include "engine/agreement.h"
#include "engine/communicator.h"

namespace hora {

// What submit() and waitFor() would do for an idle engine, less the queue: a small collective waited at
// once costs about two microseconds, of which the queue (four more lockings, a task and its vector) took
// a few percent (docs/notes/2026-11-26-small-collectives-run-at-once.md). Larger ones, where that is
// nothing, take the queue as before.
//
// The engine is claimed without the lock. Only the JS thread queues tasks and posts messages, and it is
// here: a queue found empty (no task queued, none being taken: takeTask() marks the engine busy first)
// stays empty, and no message starts, until this returns. The communication thread then has nothing to
// run and nothing to be told; the exchange on running_ settles a task it may still be finishing.
void Communicator::runNow(std::shared_ptr<Work>& work) {
  bool here = false;
  if (work->count * dtypeSize(work->dtype) <= kSmallAllreduceBytes && queued_.load(std::memory_order_acquire) == 0 &&
      !p2p_.busy()) {
    bool idle = false;
    if (running_.compare_exchange_strong(idle, true, std::memory_order_acquire)) {
      waitedFor_.store(work.get(), std::memory_order_relaxed);
      here = true;
    }
  }
  if (!here) {
    submit({work}, true);
    waitFor(work);
    return;
  }
  applyAlgorithmChoice(*work);
  runClaimed(work);
}

// Releases the engine without the lock: the claim (runNow(), or runIfReady() under the lock) found the queue
// empty, and only this thread fills it, so nothing was queued meanwhile and nobody waits for the engine.
void Communicator::runClaimed(std::shared_ptr<Work>& work) {
  if (options_.timeline) work->times.enqueued = monotonicNanos();
  // Moved in and out rather than copied: no count of references to change, twice per call.
  runHere_.batch.resize(1);
  runHere_.batch[0].swap(work);
  claimed_.store(runHere_.batch[0].get(), std::memory_order_relaxed);
  runTask(runHere_, nullptr);
  claimed_.store(nullptr, std::memory_order_relaxed);
  work.swap(runHere_.batch[0]);
  runHere_.batch.clear();
  waitedFor_.store(nullptr, std::memory_order_relaxed);
  running_.store(false, std::memory_order_release);
}

// An awaited collective goes to the communication thread, and its completion comes back: on two cores shared
// by two ranks' JS and communication threads, each hand-off waits for a core. When the partner is there
// first, its message already waiting, the collective cannot block: the caller runs it at once. So in a loop
// of awaited small collectives the rank that arrives second runs its call without a hand-off. A peer that
// is late is never waited for here: the event loop is not held (invariant 1).
bool Communicator::runsWithoutWaiting(Work& w) {
  // Before the connect task has run there is no partner to hear from, and no topology to choose by.
  if (w.group != nullptr || w.device >= 0 || !broken_.isOk() || !topologyReady_.load(std::memory_order_acquire)) return false;
  if (w.kind == Kind::kAllreduce) {
    if (!carriesPayload(w.kind, w.count, w.dtype, w.device >= 0, w.algorithm, ctx_, &w.chosen)) return false;
  } else if (w.kind != Kind::kBarrier) {
    return false;
  }
  return partnerMessageArrived(ctx_);
}

bool Communicator::runIfReady(std::shared_ptr<Work>& work) {
  if (ctx_.size() != 2) return false;
  applyAlgorithmChoice(*work);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ || !queue_.empty() || p2p_.busy() || waitedFor_ != nullptr || !runsWithoutWaiting(*work)) return false;
    running_ = true;
    waitedFor_ = work.get();
  }
  runClaimed(work);
  return true;
}

// The caller blocks anyway, so while the engine is idle it runs the queued tasks itself, in order, up to
// the one it waits for: no hand-off to the communication thread and back, which on a machine whose idle
// cores sleep costs tens of microseconds each way. running_ keeps to one task at a time, whichever thread
// runs it, so the order of collectives is the order of submission as before.
//
// The caller takes the result itself, so completing this work posts no completion callback (see
// complete()): each one would cost a wake-up of the event loop for a result already taken.
void Communicator::waitFor(const std::shared_ptr<Work>& work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waitedFor_ = work.get();
  }
  if (work->kind == Kind::kSend || work->kind == Kind::kRecv) waitForMessage(work);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!work->completed) {
    if (!running_ && !queue_.empty() && !queue_.front().stop) {
      Task task = takeTask();
      lock.unlock();
      runTask(task, &lock);
      // Later tasks are the communication thread's once this caller is done; it may be asleep.
      if (work->completed && !queue_.empty()) queueCv_.notify_one();
      continue;
    }
    awaited_ = work.get();
    doneCv_.wait(lock, [&] { return work->completed || (!running_ && !queue_.empty() && !queue_.front().stop); });
    awaited_ = nullptr;
  }
  waitedFor_ = nullptr;
}

bool Communicator::spinFor(const std::shared_ptr<Work>& work, int64_t micros) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (work->completed) return true;
    if (ctx_.oversubscribed() || waitedFor_ != nullptr) return false;
    waitedFor_ = work.get();
  }
  const Clock::time_point until = Clock::now() + std::chrono::microseconds(micros);
  uint64_t seen = completions_.load(std::memory_order_acquire);
  bool done = false;
  for (int round = 0;; ++round) {
    const uint64_t now = completions_.load(std::memory_order_acquire);
    if (now != seen) {
      seen = now;
      std::lock_guard<std::mutex> lock(mutex_);
      if (work->completed) {
        done = true;
        break;
      }
    }
    if (Clock::now() >= until) break;
    sched_yield();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  waitedFor_ = nullptr;
  // Completed between the last look and now: its callback was not posted either.
  return done || work->completed;
}

bool Communicator::isDone(const std::shared_ptr<Work>& work) {
  std::lock_guard<std::mutex> lock(mutex_);
  return work->completed;
}

}  // namespace hora
