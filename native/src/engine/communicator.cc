#include "engine/communicator.h"

#include <sched.h>

#include <cstring>

#include "algorithms/blocks.h"
#include "common/log.h"
#include "engine/agreement.h"
#include "reduce/reduce.h"

namespace hora {
namespace {

constexpr int64_t kQueueSpinMicros = 100;
// How long a wait() for a message moves messages itself before it sleeps (see waitForMessage()).
constexpr int64_t kMessageWaitMicros = 2000;
// Largest tensor that is fused with others (see fusable()).
constexpr size_t kFusionTensorMaxBytes = 128 * 1024;
// WorkTimes::algorithm of a small allreduce whose data travelled with the agreement (no separate transfer).
constexpr const char* kRodeAlong = "agreement";

// Timeline records held for collection; past this (nobody collects) newer ones are dropped.
constexpr size_t kMaxTimelineRecords = size_t(1) << 20;

// Failures after which the connections can no longer be trusted to be in step.
bool isFatal(Code c) {
  return c == Code::kTimeout || c == Code::kPeerLost || c == Code::kInternal || c == Code::kAuth ||
         c == Code::kShutdown;
}

std::string describeWork(const Work& w) {
  std::string s = kindName(w.kind);
  if (!w.name.empty()) s += " '" + w.name + "'";
  if (w.group != nullptr) s += " in " + w.group->label;
  return s;
}

}  // namespace

Communicator::Communicator(const CommunicatorOptions& options, Completion onComplete)
    : options_(options),
      onComplete_(std::move(onComplete)),
      ctx_(options.rank, options.size, options.timeoutMs),
      p2p_(ctx_, options.timeoutMs,
           [this](const std::shared_ptr<Work>& w, Status st, const std::string& what) { complete(w, std::move(st), what); }) {
  setLogRank(options.rank);
  world_.ctx = &ctx_;
  ctx_.setBackground(&p2p_);
  ctx_.setKernelTiming(options.timeline);
  ctx_.setElastic(options.elastic);
  thread_ = std::thread([this] { run(); });
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Task stop;
    stop.stop = true;
    queue_.push_back(std::move(stop));
    queued_.fetch_add(1, std::memory_order_release);
  }
  queueCv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status Communicator::listen(int* port) { return ctx_.listen(options_.bindHost, port); }

void Communicator::connect(std::shared_ptr<Work> work, std::vector<PeerInfo> peers, std::string jobId,
                           std::unique_ptr<KeptConnections> kept) {
  Task t;
  t.batch.push_back(std::move(work));
  t.peers = std::move(peers);
  t.jobId = std::move(jobId);
  t.kept = std::move(kept);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(t));
    queued_.fetch_add(1, std::memory_order_release);
  }
  queueCv_.notify_one();
}

void Communicator::post(std::shared_ptr<Work> work, bool callerWillWait) {
  if (options_.timeline) work->times.enqueued = monotonicNanos();
  p2p_.post(std::move(work));
  // A caller about to wait for a message moves the messages itself (waitForMessage()), and hands them to
  // the communication thread when it stops; waking that thread now would only have it step aside.
  if (callerWillWait) return;
  // Under the lock, so a communication thread about to sleep on queueCv_ cannot miss it.
  { std::lock_guard<std::mutex> lock(mutex_); }
  queueCv_.notify_one();
}

Status Communicator::addGroup(uint32_t id, const std::vector<int>& members) {
  if (id == 0) return Status(Code::kInvalidArgument, "group id 0 is the world's");
  std::vector<bool> seen(options_.size, false);
  bool self = false;
  for (int m : members) {
    if (m < 0 || m >= options_.size || seen[m]) {
      return Status(Code::kInvalidArgument, "group member " + std::to_string(m) + " is out of range or repeated");
    }
    seen[m] = true;
    self |= m == options_.rank;
  }
  if (!self) return Status(Code::kInvalidArgument, "rank " + std::to_string(options_.rank) + " is not a member");
  auto g = std::make_unique<Group>();
  g->id = id;
  g->members = members;
  g->view = std::make_unique<Context>(ctx_, members);
  g->ctx = g->view.get();
  g->label = "group " + std::to_string(id) + " (ranks ";
  for (size_t i = 0; i < members.size(); ++i) g->label += (i ? ", " : "") + std::to_string(members[i]);
  g->label += ")";
  std::lock_guard<std::mutex> lock(groupsMutex_);
  for (auto& existing : groups_) {
    if (existing->id == id) return Status(Code::kInvalidArgument, "group " + std::to_string(id) + " exists already");
  }
  groups_.push_back(std::move(g));
  return Status::ok();
}

Group* Communicator::findGroup(uint32_t id) {
  std::lock_guard<std::mutex> lock(groupsMutex_);
  for (auto& g : groups_) {
    if (g->id == id) return g.get();
  }
  return nullptr;
}

void Communicator::submit(std::vector<std::shared_ptr<Work>> batch, bool callerWillWait) {
  // HORA_ALGO (or init's algorithm option) applies to every allreduce that does not name its own. A
  // group's topology is plain ranks: the hierarchical and grid algorithms are the world's only, and its
  // allreduces choose between ring and recursive doubling.
  for (auto& w : batch) applyAlgorithmChoice(*w);
  if (options_.timeline) {
    const int64_t now = monotonicNanos();
    for (auto& w : batch) w->times.enqueued = now;
  }
  Task t;
  t.batch = std::move(batch);
  bool engineIdle;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    engineIdle = !running_ && queue_.empty();
    queue_.push_back(std::move(t));
    queued_.fetch_add(1, std::memory_order_release);
  }
  // A caller about to wait() runs an idle engine's batch itself (waitFor()). Waking the communication
  // thread as well would put a third thread on cores that the exchange between the two ranks' waiting
  // threads needs: with 2 ranks on 2 cores that cost more than the whole exchange of a small allreduce.
  if (!(callerWillWait && engineIdle)) queueCv_.notify_one();
  if (p2p_.busy()) p2p_.wake();
}

void Communicator::applyAlgorithmChoice(Work& w) const {
  if (w.algorithm == Algorithm::kAuto) w.algorithm = options_.algorithm;
  if (w.group != nullptr && (w.algorithm == Algorithm::kHierarchical || w.algorithm == Algorithm::kMultiDim)) {
    w.algorithm = Algorithm::kAuto;
  }
}

// What submit() and waitFor() would do for an idle engine, less the queue: a small collective waited at
// once costs about two microseconds, of which the queue (four more lockings, a task and its vector) took
// a few percent (docs/notes/2026-11-26-small-collectives-run-at-once.md). Larger ones, where that is
// nothing, take the queue as before.
void Communicator::run(const std::shared_ptr<Work>& work) {
  bool here = false;
  if (work->count * dtypeSize(work->dtype) <= kSmallAllreduceBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!running_ && queue_.empty() && !p2p_.busy()) {
      running_ = true;
      waitedFor_ = work.get();
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

void Communicator::runClaimed(const std::shared_ptr<Work>& work) {
  if (options_.timeline) work->times.enqueued = monotonicNanos();
  runHere_.assign(1, work);
  runBatch(runHere_);
  runHere_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  running_ = false;
  waitedFor_ = nullptr;
  // Tasks queued meanwhile (by another thread) are the communication thread's; it may be asleep.
  if (!queue_.empty()) queueCv_.notify_one();
}

// An awaited collective goes to the communication thread, and its completion comes back: on two cores shared
// by two ranks' JS and communication threads, each hand-off waits for a core. When the partner is there
// first, its message already waiting, the collective cannot block: the caller runs it at once. So in a loop
// of awaited small collectives the rank that arrives second runs its call without a hand-off. A peer that
// is late is never waited for here: the event loop is not held (invariant 1).
bool Communicator::runsWithoutWaiting(const Work& w) {
  if (w.group != nullptr || w.device >= 0 || !broken_.isOk()) return false;
  if (w.kind == Kind::kAllreduce) {
    if (w.count == 0 || !carriesPayload(proposalFor(w, 0, 1, w.count), ctx_)) return false;
  } else if (w.kind != Kind::kBarrier) {
    return false;
  }
  return partnerMessageArrived(ctx_);
}

bool Communicator::runIfReady(const std::shared_ptr<Work>& work) {
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
      runTask(task);
      lock.lock();
      running_ = false;
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

// Likewise for a message: the blocked caller moves messages itself for a while (the communication thread
// may be doing the same; one at a time gets in), so a ping-pong costs no hand-off between threads. After
// kMessageWaitMicros it leaves the rest to the communication thread and sleeps.
void Communicator::waitForMessage(const std::shared_ptr<Work>& work) {
  // Meanwhile the communication thread steps aside: two threads polling the same channels would take
  // both cores of a small machine from the peer that is to answer.
  messageWaiters_.fetch_add(1, std::memory_order_acq_rel);
  struct Leave {
    Communicator* c;
    ~Leave() {
      c->messageWaiters_.fetch_sub(1, std::memory_order_acq_rel);
      c->p2p_.wake();
      // Messages still moving are the communication thread's now; it may be asleep (see post()).
      if (c->p2p_.busy()) {
        { std::lock_guard<std::mutex> lock(c->mutex_); }
        c->queueCv_.notify_one();
      }
    }
  } leave{this};
  Clock::time_point idleSince = Clock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (work->completed || (!running_ && !queue_.empty())) return;
    }
    const Clock::time_point now = Clock::now();
    if (p2p_.progress()) {
      idleSince = now;
      continue;
    }
    const int64_t idle = std::chrono::duration_cast<std::chrono::microseconds>(now - idleSince).count();
    if (idle > kMessageWaitMicros) return;
    if (idle > kQueueSpinMicros) sched_yield();
  }
}

// Call with mutex_ held and the queue not empty; marks the engine busy unless it is the stop task.
Communicator::Task Communicator::takeTask() {
  queued_.fetch_sub(1, std::memory_order_relaxed);
  Task task = std::move(queue_.front());
  queue_.pop_front();
  if (!task.stop) running_ = true;
  return task;
}

void Communicator::runTask(Task& task) {
  if (!task.peers.empty()) {
    runConnect(task);
  } else {
    runBatch(task.batch);
  }
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

void Communicator::abort(const Status& reason) {
  ctx_.abort(reason);
  p2p_.wake();
}

void Communicator::close(std::unique_ptr<KeptConnections>* keep) {
  if (keep != nullptr && topologyReady_.load(std::memory_order_acquire)) keepOnClose_.store(true, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Task stop;
    stop.stop = true;
    queue_.push_back(std::move(stop));
    queued_.fetch_add(1, std::memory_order_release);
  }
  queueCv_.notify_one();
  if (thread_.joinable()) thread_.join();
  if (keepOnClose_.load()) *keep = ctx_.keepConnections();
}

void Communicator::run() {
  for (;;) {
    Task task;
    // Training loops submit the next collective a few microseconds after the last one completes;
    // watching for it briefly saves a futex wake-up on the critical path of small collectives. The
    // watch yields rather than spins: the JS thread that will submit needs a core to do it, and on a
    // machine with as many cores as ranks a spinning thread would take it.
    auto watchUntil = Clock::now() + std::chrono::microseconds(kQueueSpinMicros);
    while (queued_.load(std::memory_order_acquire) == 0 && !p2p_.busy() && Clock::now() < watchUntil) sched_yield();
    bool haveTask = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queueCv_.wait(lock, [&] { return (!queue_.empty() && !running_) || p2p_.busy(); });
      if (!queue_.empty() && !running_) {
        task = takeTask();
        haveTask = true;
      }
    }
    if (!haveTask) {
      progressMessages();
      continue;
    }
    if (task.stop) break;
    runTask(task);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
    }
  }
  p2p_.failAll(Status(Code::kShutdown, "the communicator was shut down before this completed"));
  // Whatever is still queued never runs.
  std::deque<Task> rest;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rest.swap(queue_);
    queued_.store(0);
  }
  for (Task& t : rest) {
    for (auto& w : t.batch) {
      complete(w, Status(Code::kShutdown, "the communicator was shut down before this ran"), describeWork(*w));
    }
  }
  if (!keepOnClose_.load(std::memory_order_acquire)) ctx_.hangUp();
}

void Communicator::progressMessages() {
  Clock::time_point idleSince = Clock::now();
  while (p2p_.busy()) {
    if (queued_.load(std::memory_order_acquire) > 0) {
      // A task is queued; it is this thread's to run unless a blocked wait() is running one already.
      std::lock_guard<std::mutex> lock(mutex_);
      if (!running_) return;
    }
    if (messageWaiters_.load(std::memory_order_acquire) > 0) {
      p2p_.sleep(kMessageWaitMicros / 1000 + 1);
      idleSince = Clock::now();
      continue;
    }
    if (p2p_.progress()) {
      idleSince = Clock::now();
      continue;
    }
    p2p_.waitForTraffic(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - idleSince).count());
  }
}

void Communicator::runConnect(Task& task) {
  Status st = ctx_.connect(task.peers, task.jobId, options_.secret, options_.transport, task.kept.get());
  task.kept.reset();
  if (st.isOk()) st = completeTopology(ctx_, options_.grid, options_.costLocal, options_.costCross);
  if (st.isOk()) topologyReady_.store(true, std::memory_order_release);
  if (!st.isOk()) broken_ = st;
  complete(task.batch.front(), st, "connecting the data plane");
}

// Fusion trades two copies of a tensor (into the fusion buffer and back) for one collective's fixed
// cost. That pays for small tensors only: a collective costs some microseconds on shared memory and tens
// on TCP, which is the time to copy a few hundred KiB, so larger tensors go out on their own.
bool Communicator::fusable(const Work& w) const {
  const size_t bytes = w.count * dtypeSize(w.dtype);
  return w.kind == Kind::kAllreduce && w.device < 0 && options_.fusionBytes > 0 && w.count > 0 && bytes < options_.fusionBytes &&
         bytes <= kFusionTensorMaxBytes;
}

void Communicator::runBatch(std::vector<std::shared_ptr<Work>>& batch) {
  size_t i = 0;
  while (i < batch.size()) {
    Work& first = *batch[i];
    size_t j = i + 1;
    if (fusable(first) && broken_.isOk()) {
      size_t total = first.count * dtypeSize(first.dtype);
      while (j < batch.size()) {
        const Work& w = *batch[j];
        size_t bytes = w.count * dtypeSize(w.dtype);
        if (!fusable(w) || w.op != first.op || w.dtype != first.dtype || w.algorithm != first.algorithm ||
            w.group != first.group || w.scaling != first.scaling || total + bytes > options_.fusionBytes) {
          break;
        }
        total += bytes;
        ++j;
      }
    }
    if (j - i >= 2) {
      j = runFused(batch, i, j);
    } else {
      Status st = broken_;
      if (st.isOk()) {
        stamp(&first.times.started);
        if (options_.timeline) takeKernelTime(nullptr);
        groupOf(first).ctx->startDeadline();
        st = execute(first);
        const bool transferred = first.times.negotiateEnd != 0 && first.times.algorithm != kRodeAlong &&
                                 first.kind != Kind::kBarrier && first.kind != Kind::kInvalid;
        if (transferred) stamp(&first.times.transferEnd);
        if (options_.timeline) takeKernelTime(&first.times);
      }
      // The words name a failure only: a collective that succeeded is not described (a string each call).
      complete(batch[i], st, st.isOk() ? std::string() : describeWork(first));
    }
    i = j;
  }
}

// Tensor fusion: pack the run of allreduces into one buffer, reduce it once, unpack. Every rank fuses the
// same runs because batches are formed by program order, or by name (see ts/work.ts), and the agreement
// checks the run tensor by tensor: a digest of the names and counts in order (engine/layout.h), so
// that no rank adds a tensor's elements to another's; a difference names the first tensor that differs.
//
// When the agreement fails (another rank's call at this position was invalid, or differs), the ranks may
// have grouped different numbers of calls, so the group cannot fail as a whole: every rank fails only the
// first call of its group, the one all ranks were checking at this position, and takes the rest up again.
// That keeps the ranks in step call by call. Where the ranks' runs begin with the same tensors (a rank's
// run was cut short by an invalid call after them, say), those are reduced and completed instead, and the
// rest taken up again (agree()'s alike). Returns the index of the first call not yet completed.
size_t Communicator::runFused(std::vector<std::shared_ptr<Work>>& batch, size_t begin, size_t end) {
  const Work& first = *batch[begin];
  Group& g = groupOf(first);
  Context& ctx = *g.ctx;
  const size_t elem = dtypeSize(first.dtype);
  size_t total = 0;
  for (size_t k = begin; k < end; ++k) total += batch[k]->count;
  WorkTimes group;
  if (options_.timeline) {
    group.started = monotonicNanos();
    group.fusedTensors = static_cast<uint32_t>(end - begin);
    takeKernelTime(nullptr);
  }
  if (fusionBuffer_.size() < total * elem) fusionBuffer_.resize(total * elem);
  uint8_t* buf = fusionBuffer_.data();
  size_t off = 0;
  for (size_t k = begin; k < end; ++k) {
    stamp(&batch[k]->times.copyInStart);
    memcpy(buf + off, batch[k]->data, batch[k]->count * elem);
    off += batch[k]->count * elem;
    stamp(&batch[k]->times.copyInEnd);
  }
  ctx.startDeadline();
  const Layout layout(&batch[begin], end - begin);
  Proposal proposal = proposalForRun(layout, g.seq++, total);
  group.seq = proposal.seq;
  stamp(&group.negotiateStart);
  Status st;
  size_t alike = 0;
  bool rodeAlong = carriesPayload(proposal, ctx);
  if (rodeAlong) {
    group.algorithm = kRodeAlong;
    st = agree(ctx, proposal, "", buf, &layout, &alike);
    stamp(&group.negotiateEnd);
    if (st.isOk() && first.op == ReduceOp::kAvg && !first.scaling.active()) scaleForAvg(first.dtype, buf, total, ctx.size());
  } else {
    st = agree(ctx, proposal, "", nullptr, &layout, &alike);
    stamp(&group.negotiateEnd);
  }
  if (!st.isOk() && alike > 0) {
    // Every rank's run begins with these tensors alike: reduce them (nothing rode along), and leave the rest.
    for (size_t k = begin + alike; k < end; ++k) batch[k]->times.copyInStart = batch[k]->times.copyInEnd = 0;
    end = begin + alike;
    total = 0;
    for (size_t k = begin; k < end; ++k) total += batch[k]->count;
    if (options_.timeline) group.fusedTensors = static_cast<uint32_t>(alike);
    rodeAlong = false;
    st = Status::ok();
  }
  // The fused tensors share the group's phases; each keeps its own copies.
  auto shareGroupTimes = [&](Work& w) {
    if (!options_.timeline) return;
    const WorkTimes own = w.times;
    w.times = group;
    w.times.enqueued = own.enqueued;
    w.times.copyInStart = own.copyInStart;
    w.times.copyInEnd = own.copyInEnd;
  };
  if (!st.isOk() && !isFatal(st.code())) {
    if (options_.timeline) takeKernelTime(&group);
    shareGroupTimes(*batch[begin]);
    for (size_t k = begin + 1; k < end; ++k) batch[k]->times.copyInStart = batch[k]->times.copyInEnd = 0;
    complete(batch[begin], st, st.isOk() ? std::string() : describeWork(first));
    return begin + 1;
  }
  if (st.isOk() && !rodeAlong) {
    AllreduceOptions o;
    o.data = buf;
    o.count = total;
    o.dtype = first.dtype;
    o.op = first.op;
    o.algorithm = first.algorithm;
    o.scaling = first.scaling;
    if (options_.timeline) group.algorithm = algorithmName(chooseAllreduceAlgorithm(ctx, o));
    st = allreduce(ctx, o);
    stamp(&group.transferEnd);
  }
  if (options_.timeline) takeKernelTime(&group);
  off = 0;
  for (size_t k = begin; k < end; ++k) {
    Work& w = *batch[k];
    shareGroupTimes(w);
    stamp(&w.times.copyOutStart);
    if (st.isOk()) memcpy(w.data, buf + off, w.count * elem);
    stamp(&w.times.copyOutEnd);
    off += w.count * elem;
    w.fused = true;
    complete(batch[k], st, st.isOk() ? std::string()
                                     : describeWork(w) + " (fused with " + std::to_string(end - begin - 1) + " other tensors)");
  }
  return end;
}

Status Communicator::execute(Work& w) {
  Group& g = groupOf(w);
  Context& ctx = *g.ctx;
  const int p = ctx.size(), r = ctx.rank();
  uint64_t count = w.kind == Kind::kBarrier ? 0 : w.count;
  Proposal proposal = proposalFor(w, g.seq++, 1, count);
  // Read only when another rank's fused run stands at this position (a Layout is two words, no allocation).
  const Layout layout(w);
  w.times.seq = proposal.seq;
  stamp(&w.times.negotiateStart);
  // alike: every other rank's fused run begins with this tensor (see runFused()); it runs as below.
  size_t alike = 0;
  if (carriesPayload(proposal, ctx)) {
    w.times.algorithm = kRodeAlong;
    Status agreed = agree(ctx, proposal, w.invalidReason, w.data, &layout, &alike);
    stamp(&w.times.negotiateEnd);
    if (agreed.isOk()) {
      // Scaled, the agreement finished the payload, division included.
      if (w.op == ReduceOp::kAvg && !w.scaling.active()) scaleForAvg(w.dtype, w.data, w.count, p);
      return Status::ok();
    }
    if (alike == 0) return agreed;
  } else {
    Status agreed = agree(ctx, proposal, w.invalidReason, nullptr, &layout, &alike);
    stamp(&w.times.negotiateEnd);
    if (!agreed.isOk() && alike == 0) return agreed;
  }
  if (w.device >= 0 && w.kind != Kind::kBarrier && w.kind != Kind::kInvalid) {
    if (w.group != nullptr) return Status(Code::kInvalidArgument, "group collectives take host memory only");
    if (w.scaling.active()) return Status(Code::kInvalidArgument, "prescaleFactor and postscaleFactor take host memory only");
    if (device_ == nullptr) device_.reset(new cuda::DeviceCollectives(ctx_, {options_.transport, options_.ipcSlots, options_.nccl}));
    cuda::DeviceWork d;
    d.kind = w.kind;
    d.op = w.op;
    d.dtype = w.dtype;
    d.algorithm = w.algorithm;
    d.root = w.root;
    d.data = w.data;
    d.count = w.count;
    d.out = w.out;
    d.device = w.device;
    d.stream = w.stream;
    Status st = device_->run(d);
    w.gatheredCounts = std::move(d.gatheredCounts);
    w.gatheredDevice = d.gatheredDevice;
    if (options_.timeline) w.times.algorithm = device_->path();
    return st;
  }
  switch (w.kind) {
    case Kind::kAllreduce: {
      AllreduceOptions o;
      o.data = w.data;
      o.count = w.count;
      o.dtype = w.dtype;
      o.op = w.op;
      o.algorithm = w.algorithm;
      o.scaling = w.scaling;
      HORA_TRACE("allreduce '%s' %zu x %s with %s", w.name.c_str(), w.count, dtypeName(w.dtype),
                 algorithmName(chooseAllreduceAlgorithm(ctx, o)));
      if (options_.timeline) w.times.algorithm = algorithmName(chooseAllreduceAlgorithm(ctx, o));
      return allreduce(ctx, o);
    }
    case Kind::kBroadcast: {
      BroadcastOptions o;
      o.data = w.data;
      o.bytes = w.count * dtypeSize(w.dtype);
      o.root = w.root;
      return broadcast(ctx, o);
    }
    case Kind::kReduceScatter: {
      const size_t elem = dtypeSize(w.dtype);
      uint8_t* scratch = threadScratch(w.count * elem);
      memcpy(scratch, w.data, w.count * elem);
      ReduceScatterOptions o;
      o.data = scratch;
      o.count = w.count;
      o.dtype = w.dtype;
      o.op = w.op;
      o.scaling = w.scaling;
      HORA_RETURN_IF_ERROR(reduceScatter(ctx, o));
      memcpy(w.out, scratch + blockStart(w.count, p, r) * elem, blockCount(w.count, p, r) * elem);
      return Status::ok();
    }
    case Kind::kAllgather: {
      const size_t elem = dtypeSize(w.dtype);
      // First the counts (every rank may contribute a different number of elements), then the data.
      uint64_t total = 0;
      HORA_RETURN_IF_ERROR(allgatherCounts(ctx, w.count, elem, &w.gatheredCounts, &total));
      w.gathered.resize(total * elem);
      AllgatherOptions o;
      o.bytesPerRank.resize(p);
      size_t before = 0;
      for (int i = 0; i < p; ++i) {
        o.bytesPerRank[i] = w.gatheredCounts[i] * elem;
        if (i < r) before += o.bytesPerRank[i];
      }
      if (w.count > 0) memcpy(w.gathered.data() + before, w.data, w.count * elem);
      o.output = w.gathered.data();
      return allgather(ctx, o);
    }
    case Kind::kBarrier:
    case Kind::kInvalid:
      return Status::ok();
    case Kind::kSend:
    case Kind::kRecv:
      break;  // posted to p2p_, never queued
  }
  return Status(Code::kInternal, "unknown collective kind");
}

std::vector<TimelineRecord> Communicator::takeTimelineRecords() {
  std::vector<TimelineRecord> out;
  std::lock_guard<std::mutex> lock(timelineMutex_);
  out.swap(timelineRecords_);
  return out;
}

// The reduction kernel time since the last call, into t (nullptr: just start a new sum).
void Communicator::takeKernelTime(WorkTimes* t) {
  int64_t nanos = 0;
  uint32_t calls = 0;
  ctx_.takeKernelTime(&nanos, &calls);
  if (t == nullptr) return;
  t->reduceNanos = nanos;
  t->reduceCalls = calls;
}

void Communicator::complete(const std::shared_ptr<Work>& w, Status st, const std::string& what) {
  if (!st.isOk()) {
    // A message's failure stays with the message: it never touched the collectives' streams.
    bool fatal = isFatal(st.code()) && w->kind != Kind::kSend && w->kind != Kind::kRecv;
    std::string prefix = "rank " + std::to_string(options_.rank) + ": " + what + ": ";
    if (fatal && broken_.isOk()) {
      broken_ = Status(st.code(), "earlier failure: " + st.message(), st.peer());
      // Peers blocked on this rank should hear at once rather than wait for their own timeout. In an
      // elastic world they are told without closing the connections, which stay for the next world.
      if (options_.elastic) {
        ctx_.notifyPeers();
      } else {
        ctx_.hangUp();
      }
      HORA_WARN("%s%s", prefix.c_str(), st.message().c_str());
      p2p_.failAll(broken_);
    }
    w->status = Status(st.code(), prefix + st.message(), st.peer());
  } else {
    w->status = st;
  }
  if (options_.timeline) {
    w->times.done = monotonicNanos();
    TimelineRecord rec;
    rec.id = w->id;
    rec.times = w->times;
    rec.code = w->status.code();
    if (!w->status.isOk()) rec.message = w->status.message();
    std::lock_guard<std::mutex> lock(timelineMutex_);
    if (timelineRecords_.size() < kMaxTimelineRecords) timelineRecords_.push_back(std::move(rec));
  }
  bool wake, taken;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    w->completed = true;
    wake = awaited_ != nullptr;
    taken = waitedFor_ == w.get();
  }
  completions_.fetch_add(1, std::memory_order_release);
  // Only the work a blocked wait() is for: waking the JS thread for every completion costs a context
  // switch each, on the critical path of the next collective.
  if (wake) doneCv_.notify_all();
  if (onComplete_ && !taken) onComplete_(w);
}

}  // namespace hora
