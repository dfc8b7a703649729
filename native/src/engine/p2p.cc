// PointToPoint's engine room (the protocol is in p2p.h; frames out in p2p_send.cc, frames in and matching
// in p2p_receive.cc): the inbox, progress() over the channels, what the engine's waits watch, and what
// ends an operation: completion, its deadline, a peer that is gone, a broken channel.
#include "engine/p2p.h"

#include <poll.h>

#include "engine/p2p_internal.h"
#include "transport/wait.h"

namespace hora {
namespace {

using p2p::describeMessage;
using p2p::groupOf;
using p2p::tagText;

}  // namespace

PointToPoint::PointToPoint(Context& ctx, int64_t timeoutMs, Finish finish)
    : ctx_(ctx), timeoutMs_(timeoutMs), finish_(std::move(finish)), discard_(64 * 1024) {}

PointToPoint::~PointToPoint() = default;

void PointToPoint::post(std::shared_ptr<Work> w) {
  {
    std::lock_guard<std::mutex> lock(inboxMutex_);
    inbox_.push_back(std::move(w));
    busy_.store(true, std::memory_order_release);
  }
  ctx_.wake();
}

std::string PointToPoint::describe(const Op& op) const {
  const Work& w = *op.work;
  return std::string(w.kind == Kind::kSend ? "send to rank " : "recv from rank ") + std::to_string(w.peer) +
         " (" + tagText(groupOf(w), w.tag) + ")";
}

bool PointToPoint::progress() {
  std::unique_lock<std::mutex> lock(progressMutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  if (channels_.empty()) {
    channels_.resize(ctx_.size());
    for (int r = 0; r < ctx_.size(); ++r) channels_[r].pair = r == ctx_.rank() ? nullptr : ctx_.p2pChannel(r);
  }
  std::vector<std::shared_ptr<Work>> posted;
  {
    std::lock_guard<std::mutex> inbox(inboxMutex_);
    posted.swap(inbox_);
  }
  bool moved = !posted.empty();
  for (auto& w : posted) take(std::move(w));
  const Clock::time_point now = Clock::now();
  if (ctx_.aborted()) {
    Status reason = ctx_.abortReason();
    for (Channel& c : channels_) {
      if (c.pair == nullptr || !c.dead.isOk()) continue;
      // The abort may come from this very peer's death (the launcher saw its exit before the next
      // liveness check here): an operation waiting on a connection that hung up names its own peer, as it
      // would a moment later.
      if (involved(c)) {
        checkLiveness(c, now, /*atOnce=*/true);
      }
      if (c.dead.isOk()) breakChannel(c, reason);
    }
  }
  for (Channel& c : channels_) {
    if (c.pair == nullptr || !c.dead.isOk() || !involved(c)) continue;
    moved |= pump(c);
    if (c.dead.isOk() && involved(c)) checkLiveness(c, now);
  }
  // Deadlines are seconds away: looking at every operation's once a millisecond is enough, and a window
  // of many outstanding receives would otherwise pay for the walk on every pass.
  if (now >= nextDeadlineCheck_) {
    nextDeadlineCheck_ = now + std::chrono::milliseconds(1);
    checkDeadlines(now);
  }
  bool busy = !ops_.empty();
  for (const Channel& c : channels_) busy |= !c.control.empty() || !c.data.empty();
  std::lock_guard<std::mutex> inbox(inboxMutex_);
  busy_.store(busy || !inbox_.empty(), std::memory_order_release);
  return moved;
}

// Something on this channel is owed or awaited.
bool PointToPoint::involved(const Channel& c) const {
  if (!c.control.empty() || !c.data.empty() || !c.sent.empty() || !c.awaitingData.empty() || c.inPayload) return true;
  for (const auto& kv : c.posted) {
    if (!kv.second.empty()) return true;
  }
  return false;
}

void PointToPoint::take(std::shared_ptr<Work> w) {
  ops_.emplace_back();
  Op* op = &ops_.back();
  op->work = std::move(w);
  op->deadline = Deadline(timeoutMs_);
  op->bytes = op->work->count * dtypeSize(op->work->dtype);
  const int peer = op->work->peer;
  if (peer < 0 || peer >= ctx_.size() || peer == ctx_.rank() || channels_[peer].pair == nullptr) {
    // The JS layer checks this first; a Work that gets here anyway must not touch a channel.
    return finish(op, Status(Code::kInvalidArgument, "no channel to rank " + std::to_string(peer)));
  }
  Channel& c = channels_[peer];
  if (op->work->kind == Kind::kSend) {
    postSend(c, op);
  } else {
    postRecv(c, op);
  }
}

bool PointToPoint::pump(Channel& c) {
  bool moved = writeFrames(c);
  if (c.dead.isOk()) moved |= readFrames(c);
  // Reading may have queued control frames (ACK, CTS, NACK) or made DATA ready.
  if (c.dead.isOk()) moved |= writeFrames(c);
  return moved;
}

// Shared-memory channels have no descriptor that reports a hang-up; their TCP connection does. A TCP
// channel reports it on the next read, but a peer that only ever receives would go unnoticed while this
// rank waits to send into a full buffer, so both are checked.
void PointToPoint::checkLiveness(Channel& c, Clock::time_point now, bool atOnce) {
  const int peer = c.pair->peer();
  if (!atOnce && !ctx_.messageLookDue(peer, now)) return;
  Status lost = ctx_.checkMessagePeer(peer, now);
  if (lost.isOk()) return;
  // What the peer wrote before it went is still readable: take it first.
  readFrames(c);
  if (c.dead.isOk()) breakChannel(c, lost);
}

void PointToPoint::checkDeadlines(Clock::time_point now) {
  for (auto it = ops_.begin(); it != ops_.end();) {
    Op* op = &*it;
    ++it;  // finish() erases op
    if (!op->deadline.expiredAt(now)) continue;
    const Work& w = *op->work;
    const std::string after = timeoutText(timeoutMs_);
    Status st(Code::kTimeout,
              w.kind == Kind::kSend
                  ? "timed out after " + after + ": rank " + std::to_string(w.peer) + " did not receive this rank's message (" +
                        describeMessage(w.count, static_cast<uint8_t>(w.dtype)) + ") with " + tagText(groupOf(w), w.tag)
                  : "timed out after " + after + " waiting for a message from rank " + std::to_string(w.peer) +
                        " with " + tagText(groupOf(w), w.tag),
              w.peer);
    Channel& c = channels_[w.peer];
    // A frame half-way through the stream cannot be taken back: the stream is lost with it.
    bool midStream = w.kind == Kind::kRecv && c.inPayload && c.inCompletes == op;
    for (const OutFrame& f : c.data) midStream |= f.owner == op && f.done > 0;
    if (midStream && c.dead.isOk()) {
      breakChannel(c, st);  // fails op, and every other op with that peer: it may be the next one
      it = ops_.begin();
    } else {
      finish(op, st);
    }
  }
}

void PointToPoint::breakChannel(Channel& c, const Status& st) {
  if (!c.dead.isOk()) return;
  c.dead = st;
  c.control.clear();
  c.data.clear();
  if (c.inPayload && c.inUnexpected) {
    auto u = c.unexpected.find(matchKey(c.in.group, c.in.tag));
    c.unexpectedBytes -= u->second.back().payload.size();
    u->second.pop_back();
    if (u->second.empty()) c.unexpected.erase(u);
  }
  c.inUnexpected = false;
  c.inPayload = false;
  c.inCompletes = nullptr;
  c.inFinishes = true;
  const int peer = c.pair->peer();
  for (auto it = ops_.begin(); it != ops_.end();) {
    Op* op = &*it;
    ++it;
    if (op->work->peer == peer) finish(op, st);
  }
}

// Removes every reference to op from its channel.
void PointToPoint::detach(Op* op) {
  const Work& w = *op->work;
  if (w.peer < 0 || w.peer >= static_cast<int>(channels_.size())) return;
  Channel& c = channels_[w.peer];
  if (w.kind == Kind::kSend) {
    auto it = c.sent.find(op->seq);
    if (it != c.sent.end() && it->second == op) {
      c.unackedEager -= op->credit;
      op->credit = 0;
      c.sent.erase(it);
    }
    for (auto f = c.data.begin(); f != c.data.end();) {
      // Only frames not yet started reach here (see checkDeadlines) or the completing DATA frame.
      f = f->owner == op && f->done == 0 ? c.data.erase(f) : std::next(f);
    }
  } else {
    auto p = c.posted.find(matchKey(groupOf(w), w.tag));
    if (p != c.posted.end()) {
      for (auto q = p->second.begin(); q != p->second.end(); ++q) {
        if (*q == op) {
          p->second.erase(q);
          break;
        }
      }
      if (p->second.empty()) c.posted.erase(p);
    }
    auto a = c.awaitingData.find(op->seq);
    if (a != c.awaitingData.end() && a->second == op) c.awaitingData.erase(a);
    if (c.inCompletes == op) {
      c.inCompletes = nullptr;
      c.inDst = nullptr;
    }
  }
}

void PointToPoint::finish(Op* op, Status st) {
  detach(op);
  // Only a failure's message names the operation.
  const std::string what = st.isOk() ? std::string() : describe(*op);
  std::shared_ptr<Work> w = std::move(op->work);
  for (auto it = ops_.begin(); it != ops_.end(); ++it) {
    if (&*it == op) {
      ops_.erase(it);
      break;
    }
  }
  finish_(w, std::move(st), what);
}

void PointToPoint::failAll(const Status& st) {
  std::lock_guard<std::mutex> lock(progressMutex_);
  std::vector<std::shared_ptr<Work>> posted;
  {
    std::lock_guard<std::mutex> inbox(inboxMutex_);
    posted.swap(inbox_);
  }
  for (auto& w : posted) {
    std::string what = w->kind == Kind::kSend ? "send to rank " : "recv from rank ";
    finish_(w, st, what + std::to_string(w->peer) + " (" + tagText(groupOf(*w), w->tag) + ")");
  }
  for (Channel& c : channels_) {
    if (c.pair != nullptr) breakChannel(c, st);
  }
  while (!ops_.empty()) finish(&ops_.front(), st);
  busy_.store(false, std::memory_order_release);
}

int PointToPoint::watch(pollfd* fds, int cap, bool* onSharedMemory) {
  std::unique_lock<std::mutex> lock(progressMutex_, std::try_to_lock);
  if (!lock.owns_lock()) return -1;
  int n = 0;
  for (const Channel& c : channels_) {
    if (c.pair == nullptr || !c.dead.isOk() || !involved(c)) continue;
    const int fd = c.pair->pollFd();
    if (fd < 0) {
      *onSharedMemory = true;
      continue;
    }
    if (n == cap) continue;
    short events = POLLIN;
    if (!c.control.empty() || !c.data.empty()) events |= POLLOUT;
    fds[n++] = {fd, events, 0};
  }
  return n;
}

}  // namespace hora
