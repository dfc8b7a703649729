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

// Timeline records held for collection; past this (nobody collects) newer ones are dropped.
constexpr size_t kMaxTimelineRecords = size_t(1) << 20;

// What is wrong with an alltoall's or scatter's splits for a group of `size` (empty: nothing). The JS
// layer checks them first (ts/alltoall.ts); this keeps a malformed item from reaching the algorithm.
std::string badSplits(const Work& w, int rank, int size) {
  const size_t p = static_cast<size_t>(size);
  if (w.kind == Kind::kScatter && rank != w.root) return std::string();
  if (w.splits.size() != p && (w.kind == Kind::kScatter || w.splits.size() != 2 * p)) {
    return "its splits have " + std::to_string(w.splits.size()) + " entries for a group of " + std::to_string(size);
  }
  uint64_t sum = 0;
  for (size_t q = 0; q < p; ++q) {
    if (w.splits[q] > w.count) return "its splits exceed its " + std::to_string(w.count) + " elements";
    sum += w.splits[q];
  }
  if (sum != w.count) return "its splits sum to " + std::to_string(sum) + ", not its " + std::to_string(w.count) + " elements";
  return std::string();
}

}  // namespace

bool Communicator::isFatal(Code c) {
  return c == Code::kTimeout || c == Code::kPeerLost || c == Code::kInternal || c == Code::kAuth ||
         c == Code::kShutdown;
}

std::string Communicator::describeWork(const Work& w) {
  std::string s = kindName(w.kind);
  if (!w.name.empty()) s += " '" + w.name + "'";
  if (w.group != nullptr) s += " in " + w.group->label;
  return s;
}

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
  thread_ = std::thread([this] { serve(); });
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
  // The communication thread may be waiting on messages (progressMessages()): it runs the task next.
  if (p2p_.busy()) ctx_.wake();
}

void Communicator::applyAlgorithmChoice(Work& w) const {
  if (w.algorithm == Algorithm::kAuto) w.algorithm = options_.algorithm;
  if (w.group != nullptr && (w.algorithm == Algorithm::kHierarchical || w.algorithm == Algorithm::kMultiDim)) {
    w.algorithm = Algorithm::kAuto;
  }
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
      c->ctx_.wake();
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

// Call with mutex_ held and the queue not empty; marks the engine busy unless it is the stop task. The
// engine is marked busy before the count goes down: runNow() claims it without the lock when it reads a
// count of 0, and then finds it busy.
Communicator::Task Communicator::takeTask() {
  if (!queue_.front().stop) running_.store(true, std::memory_order_relaxed);
  queued_.fetch_sub(1, std::memory_order_release);
  Task task = std::move(queue_.front());
  queue_.pop_front();
  return task;
}

// The one way a task runs, whichever thread runs it: the communication thread (serve()), a caller blocked in
// waitFor(), or a caller running a small collective at once (runClaimed()). The caller has claimed the
// engine (running_ set: takeTask(), runIfReady() under mutex_, runNow()) and holds no lock; the engine is
// released under `lock`, which is left held. runClaimed() passes none and releases the engine itself.
void Communicator::runTask(Task& task, std::unique_lock<std::mutex>* lock) {
  if (!task.peers.empty()) {
    runConnect(task);
  } else {
    runBatch(task.batch);
  }
  if (lock == nullptr) return;
  lock->lock();
  running_ = false;
}

// The engine's abort wakes every wait of the engine, the messages' too.
void Communicator::abort(const Status& reason) { ctx_.abort(reason); }

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

void Communicator::serve() {
  for (;;) {
    Task task;
    // Training loops submit the next collective a few microseconds after the last one completes;
    // watching for it briefly saves a futex wake-up on the critical path of small collectives. The
    // watch yields rather than spins: the JS thread that will submit needs a core to do it, and on a
    // machine with as many cores as ranks a spinning thread would take it.
    auto watchUntil = Clock::now() + std::chrono::microseconds(kQueueSpinMicros);
    while (queued_.load(std::memory_order_acquire) == 0 && !p2p_.busy() && Clock::now() < watchUntil) sched_yield();
    std::unique_lock<std::mutex> lock(mutex_);
    queueCv_.wait(lock, [&] { return (!queue_.empty() && !running_) || p2p_.busy(); });
    if (queue_.empty() || running_) {
      lock.unlock();
      progressMessages();
      continue;
    }
    task = takeTask();
    lock.unlock();
    if (task.stop) break;
    runTask(task, &lock);
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

// The communication thread between tasks, while messages are in flight: moves them, and waits in the
// engine (ctx_), which any wake() ends (a message posted, a task queued, a caller done moving messages, an
// abort).
void Communicator::progressMessages() {
  Clock::time_point idleSince = Clock::now();
  while (p2p_.busy()) {
    if (queued_.load(std::memory_order_acquire) > 0) {
      // A task is queued; it is this thread's to run unless a blocked wait() is running one already.
      std::lock_guard<std::mutex> lock(mutex_);
      if (!running_) return;
    }
    if (messageWaiters_.load(std::memory_order_acquire) > 0) {
      ctx_.sleepUntilWoken(kMessageWaitMicros / 1000 + 1);
      idleSince = Clock::now();
      continue;
    }
    if (p2p_.progress()) {
      idleSince = Clock::now();
      continue;
    }
    ctx_.waitForBackground(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - idleSince).count());
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

// A two-rank alltoall with recvSplits: what of its first round its agreement's messages carry (see
// algorithms/collectives.h AlltoallRide), into swap; false when the round does not ride.
bool Communicator::swapsFirstRound(Context& ctx, const Work& w, const Proposal& proposal, Swap* swap) {
  firstRound_.done = false;
  if (ctx.size() != 2 || w.kind != Kind::kAlltoall || !proposal.recvSplits || proposal.kind != static_cast<uint8_t>(Kind::kAlltoall) ||
      w.device >= 0) {
    return false;
  }
  const int r = ctx.rank(), peer = 1 - r;
  const size_t elem = dtypeSize(w.dtype);
  const size_t sendBytes = w.splits[peer] * elem, recvBytes = w.splits[2 + peer] * elem;
  const AlltoallRide out = alltoallRide(ctx, peer, sendBytes), in = alltoallRide(ctx, peer, recvBytes);
  if ((sendBytes > 0 && out == AlltoallRide::kNone) || (recvBytes > 0 && in == AlltoallRide::kNone) || sendBytes + recvBytes == 0) {
    return false;
  }
  const uint8_t* block = w.data + (peer == 0 ? 0 : w.splits[0] * elem);
  if (out == AlltoallRide::kBlock) {
    swap->out = block;
    swap->outBytes = static_cast<uint32_t>(sendBytes);
  } else if (out == AlltoallRide::kOffer) {
    firstRound_.sent = alltoallOffer(ctx, peer, block, sendBytes, options_.shmSingleCopy);
    swap->out = reinterpret_cast<const uint8_t*>(&firstRound_.sent);
    swap->outBytes = sizeof(shm::ReadOffer);
  }
  swap->in = firstRound_.came;
  swap->inBytes = static_cast<uint32_t>(in == AlltoallRide::kBlock ? recvBytes : in == AlltoallRide::kOffer ? sizeof(shm::ReadOffer) : 0);
  return true;
}

Status Communicator::execute(Work& w) {
  if (w.kind == Kind::kJoin) return runJoin(w);
  Group& g = groupOf(w);
  Context& ctx = *g.ctx;
  const int p = ctx.size(), r = ctx.rank();
  uint64_t count = w.kind == Kind::kBarrier ? 0 : w.count;
  Proposal proposal = proposalFor(w, g.seq++, 1, count);
  if (w.kind == Kind::kAlltoall || w.kind == Kind::kScatter) {
    // A malformed item fails as an invalid call, on every rank; recvSplits given go into the agreement.
    w.invalidReason = badSplits(w, r, p);
    if (!w.invalidReason.empty()) proposal.kind = static_cast<uint8_t>(Kind::kInvalid);
    proposal.recvSplits = w.kind == Kind::kAlltoall && w.splits.size() == 2 * static_cast<size_t>(p) ? 1 : 0;
  }
  // Read only when another rank's fused run stands at this position (a Layout is two words, no allocation).
  const Layout layout(w);
  w.times.seq = proposal.seq;
  stamp(&w.times.negotiateStart);
  // alike: every other rank's fused run begins with this tensor (see runFused()); it runs as below.
  size_t alike = 0;
  // How many ranks contributed (the others have joined: hora.join()); the group's size unless agreed otherwise.
  Joined joined;
  joined.contributors = static_cast<uint32_t>(p);
  if (carriesPayload(proposal, ctx, &w.chosen)) {
    w.times.algorithm = kRodeAlong;
    Status agreed = agree(ctx, proposal, w.invalidReason, w.data, &layout, &alike, nullptr, &joined);
    stamp(&w.times.negotiateEnd);
    if (agreed.isOk() && joined.contributors == static_cast<uint32_t>(p)) {
      // Scaled, the agreement finished the payload, division included.
      if (w.op == ReduceOp::kAvg && !w.scaling.active()) scaleForAvg(w.dtype, w.data, w.count, p);
      return Status::ok();
    }
    if (!agreed.isOk() && alike == 0) return agreed;
    // A rank has joined: the payload did not ride along, and the allreduce runs below.
    if (agreed.isOk()) w.times.algorithm = nullptr;
  } else {
    Swap swap;
    const bool swaps = swapsFirstRound(ctx, w, proposal, &swap);
    Status agreed = agree(ctx, proposal, w.invalidReason, nullptr, &layout, &alike, &w.splits, &joined, swaps ? &swap : nullptr);
    stamp(&w.times.negotiateEnd);
    if (!agreed.isOk() && alike == 0) return agreed;
    // Every rank reads the same verdict: the round came both ways, or the alltoall makes it itself.
    firstRound_.done = swaps && agreed.isOk() && joined.contributors == static_cast<uint32_t>(p) && (swap.inBytes == 0 || swap.came);
  }
  if (w.device >= 0 && w.kind != Kind::kBarrier && w.kind != Kind::kInvalid) return runOnDevice(ctx, w);
  return runOnHost(ctx, w, joined);
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
  // A work its caller runs itself (runClaimed()) has no other waiter: the caller is the JS thread, so no
  // waitFor() sleeps (awaited_) and no spinFor() watches completions_, and it takes the result (taken).
  // Its completion needs no lock, one fewer locking per small collective waited at once.
  if (claimed_.load(std::memory_order_relaxed) == w.get()) {
    w->completed = true;
    return;
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
