#include "engine/p2p.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "engine/group.h"
#include "transport/liveness.h"
#include "transport/wait.h"

namespace hora {
namespace {

using p2p::FrameHeader;
using p2p::FrameType;

// Payloads up to this size are copied behind their header so that the frame goes out in one piece.
constexpr size_t kInlineBytes = 16 * 1024;
// At most this many CTSs wait to go out together while a window of large messages is read.
constexpr size_t kControlBatch = 8;
// A run of queued frames written in one call (writeDataTogether): at most this many, of about this many bytes.
constexpr size_t kGatherFrames = 16;
constexpr size_t kGatherBytes = 1 << 20;

std::string describeMessage(uint64_t count, uint8_t dtype) {
  const char* name = dtype < kNumDTypes ? dtypeName(static_cast<DType>(dtype)) : "unknown dtype";
  return std::to_string(count) + " x " + name;
}

uint32_t groupOf(const Work& w) { return w.group != nullptr ? w.group->id : 0; }

// "tag 3", or "tag 3 of group 1" for a process group's message.
std::string tagText(uint32_t group, int32_t tag) {
  return "tag " + std::to_string(tag) + (group != 0 ? " of group " + std::to_string(group) : "");
}

bool multiplyFits(uint64_t count, size_t elem, size_t* bytes) {
  if (elem != 0 && count > SIZE_MAX / elem) return false;
  *bytes = static_cast<size_t>(count * elem);
  return true;
}

}  // namespace

PointToPoint::PointToPoint(Context& ctx, int64_t timeoutMs, Finish finish)
    : ctx_(ctx), timeoutMs_(timeoutMs), finish_(std::move(finish)), discard_(64 * 1024) {
  wakeFd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

PointToPoint::~PointToPoint() {
  if (wakeFd_ >= 0) close(wakeFd_);
}

void PointToPoint::post(std::shared_ptr<Work> w) {
  {
    std::lock_guard<std::mutex> lock(inboxMutex_);
    inbox_.push_back(std::move(w));
    busy_.store(true, std::memory_order_release);
  }
  wake();
}

void PointToPoint::sleep(int ms) {
  pollfd pf{wakeFd_, POLLIN, 0};
  if (poll(&pf, 1, ms) > 0) drainWake();
}

void PointToPoint::wake() {
  if (wakeArmed_.exchange(true)) return;
  uint64_t one = 1;
  ssize_t ignored = write(wakeFd_, &one, sizeof(one));
  (void)ignored;
}

// Drain first, then disarm: a wake() that still sees the flag set in between finds this thread awake,
// and every caller of sleep() and waitForTraffic() looks at its work again when they return.
void PointToPoint::drainWake() {
  uint64_t drained;
  ssize_t ignored = read(wakeFd_, &drained, sizeof(drained));
  (void)ignored;
  wakeArmed_.store(false);
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
        c.nextLivenessCheck = Clock::time_point();
        checkLiveness(c, now);
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
  op->deadline = Clock::now() + std::chrono::milliseconds(timeoutMs_);
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

void PointToPoint::postSend(Channel& c, Op* op) {
  if (!c.dead.isOk()) return finish(op, c.dead);
  const Work& w = *op->work;
  op->seq = c.nextSeq++;
  op->eager = op->bytes <= kEagerBytes && c.unackedEager + op->bytes <= kEagerCredit;
  const bool headed = !op->eager && op->bytes > p2p::kHeadBytes && c.unackedEager + p2p::kHeadBytes <= kEagerCredit;
  FrameHeader h;
  h.type = op->eager ? FrameType::kEager : headed ? FrameType::kRtsHead : FrameType::kRts;
  h.dtype = static_cast<uint8_t>(w.dtype);
  h.tag = w.tag;
  h.group = groupOf(w);
  h.seq = op->seq;
  h.count = w.count;
  OutFrame f;
  f.head.resize(p2p::kHeaderBytes);
  p2p::encodeHeader(h, f.head.data());
  f.owner = op;
  if (op->eager) {
    op->credit = op->bytes;
    if (op->bytes <= kInlineBytes) {
      f.head.insert(f.head.end(), w.data, w.data + op->bytes);
    } else {
      f.payload = w.data;
      f.payloadLen = op->bytes;
    }
  } else if (headed) {
    op->head = p2p::kHeadBytes;
    op->credit = op->head;
    f.payload = w.data;
    f.payloadLen = op->head;
  }
  c.unackedEager += op->credit;
  op->state = State::kFramed;
  c.data.push_back(std::move(f));
  c.sent[op->seq] = op;
}

// Receives of one (peer, tag) queue in posted order and are matched, oldest first, with that tag's
// unexpected messages once those are complete (an EAGER's payload all read).
void PointToPoint::postRecv(Channel& c, Op* op) {
  const MatchKey key = matchKey(groupOf(*op->work), op->work->tag);
  op->state = State::kPosted;
  c.posted[key].push_back(op);
  matchBuffered(c, key);
  if (op->state == State::kPosted && !c.dead.isOk()) finish(op, c.dead);
}

void PointToPoint::matchBuffered(Channel& c, MatchKey key) {
  for (;;) {
    auto p = c.posted.find(key);
    auto u = c.unexpected.find(key);
    if (p == c.posted.end() || u == c.unexpected.end() || !u->second.front().complete) return;
    Op* op = p->second.front();
    p->second.pop_front();
    if (p->second.empty()) c.posted.erase(p);
    Unexpected m = std::move(u->second.front());
    u->second.pop_front();
    if (u->second.empty()) c.unexpected.erase(u);
    c.unexpectedBytes -= m.payload.size();
    match(c, op, m.header, &m);
  }
}

// A message (h) meets a receive (op): from the unexpected queue (buffered set; its EAGER payload or its
// RTS_HEAD's head is there) or straight off the stream (buffered null; those bytes are still to be read).
void PointToPoint::match(Channel& c, Op* op, const FrameHeader& h, Unexpected* buffered) {
  const Work& w = *op->work;
  if (h.dtype != static_cast<uint8_t>(w.dtype) || h.count != w.count) {
    if (c.dead.isOk()) sendControl(c, FrameType::kNack, h.seq, static_cast<uint8_t>(w.dtype), w.count);
    if (buffered == nullptr && (h.type == FrameType::kEager || h.type == FrameType::kRtsHead)) {
      size_t bytes = p2p::kHeadBytes;
      if (h.type == FrameType::kEager) multiplyFits(h.count, dtypeSize(static_cast<DType>(h.dtype)), &bytes);
      expectPayload(c, nullptr, bytes, nullptr);
    }
    return finish(op, Status(Code::kMismatch,
                             "rank " + std::to_string(w.peer) + " sent " + describeMessage(h.count, h.dtype) +
                                 " with " + tagText(h.group, h.tag) + ", but this rank's receive is for " +
                                 describeMessage(w.count, static_cast<uint8_t>(w.dtype)),
                             w.peer));
  }
  if (h.type == FrameType::kRts || h.type == FrameType::kRtsHead) {
    if (!c.dead.isOk()) return finish(op, c.dead);
    sendControl(c, FrameType::kCts, h.seq, h.dtype, h.count);
    op->state = State::kAwaitData;
    op->seq = h.seq;
    c.awaitingData[h.seq] = op;
    if (h.type == FrameType::kRts) return;
    // The head goes into the array's first bytes; the receive completes with the DATA_TAIL.
    op->head = p2p::kHeadBytes;
    if (buffered != nullptr) {
      memcpy(w.data, buffered->payload.data(), op->head);
      return;
    }
    return expectPayload(c, w.data, op->head, op, /*finishes=*/false);
  }
  if (buffered != nullptr) {
    if (op->bytes > 0) memcpy(w.data, buffered->payload.data(), op->bytes);
    if (c.dead.isOk()) sendControl(c, FrameType::kAck, h.seq, 0, 0);
    return finish(op, Status::ok());
  }
  op->state = State::kStreaming;
  expectPayload(c, w.data, op->bytes, op, /*finishes=*/true, /*ack=*/true);
  if (op->bytes == 0) onPayloadDone(c);
}

// The payload that follows the frame just read goes to dst (nullptr: discarded); once it is in, `completes`
// (if any) completes when `finishes`, acknowledged with ACK when `ack`.
void PointToPoint::expectPayload(Channel& c, uint8_t* dst, size_t len, Op* completes, bool finishes, bool ack) {
  c.inPayload = len > 0;
  c.inDst = dst;
  c.inLen = len;
  c.inDone = 0;
  c.inCompletes = completes;
  c.inFinishes = finishes;
  c.inAck = ack;
}

void PointToPoint::sendControl(Channel& c, FrameType type, uint64_t seq, uint8_t dtype, uint64_t count) {
  FrameHeader h;
  h.type = type;
  h.seq = seq;
  h.dtype = dtype;
  h.count = count;
  OutFrame f;
  f.head.resize(p2p::kHeaderBytes);
  p2p::encodeHeader(h, f.head.data());
  c.control.push_back(std::move(f));
}

bool PointToPoint::pump(Channel& c) {
  bool moved = writeFrames(c);
  if (c.dead.isOk()) moved |= readFrames(c);
  // Reading may have queued control frames (ACK, CTS, NACK) or made DATA ready.
  if (c.dead.isOk()) moved |= writeFrames(c);
  return moved;
}

bool PointToPoint::writeFrames(Channel& c) {
  bool moved = false;
  while (c.dead.isOk()) {
    // One frame at a time: a started frame goes first; control frames go before the next payload.
    std::deque<OutFrame>* q = nullptr;
    if (!c.control.empty() && c.control.front().done > 0) q = &c.control;
    else if (!c.data.empty() && c.data.front().done > 0) q = &c.data;
    else if (!c.control.empty()) q = &c.control;
    else if (!c.data.empty()) q = &c.data;
    if (q == nullptr) break;
    if (q == &c.control && c.control.size() > 1 && c.control.front().done == 0) {
      if (!writeControlTogether(c)) break;
      moved = true;
      continue;
    }
    if (q == &c.data && c.control.empty() && c.data.size() > 1) {
      bool all = false;
      moved |= writeDataTogether(c, &all);
      if (!all) break;
      continue;
    }
    OutFrame& f = q->front();
    const size_t total = f.head.size() + f.payloadLen;
    while (f.done < total) {
      size_t taken = 0;
      Status st = f.done < f.head.size()
                      ? c.pair->trySendTwo(f.head.data() + f.done, f.head.size() - f.done, f.payload, f.payloadLen, &taken)
                      : c.pair->trySend(f.payload + (f.done - f.head.size()), total - f.done, &taken);
      if (!st.isOk()) {
        breakChannel(c, st);
        return moved;
      }
      if (taken == 0) break;
      f.done += taken;
      moved = true;
    }
    if (f.done < total) break;
    Op* completes = f.completes;
    if (f.owner != nullptr && f.owner->state == State::kFramed) f.owner->state = State::kAwaitReply;
    q->pop_front();
    if (completes != nullptr) finish(completes, Status::ok());
  }
  return moved;
}

// A window of messages queues its frames back to back: up to kGatherFrames of them (and about
// kGatherBytes) go to the pair in one call, which TCP writes with one system call instead of one per frame.
// Returns whether any byte went out; *all, whether every frame offered went.
bool PointToPoint::writeDataTogether(Channel& c, bool* all) {
  iovec iov[Pair::kMaxSendPieces];
  int pieces = 0;
  size_t offered = 0;
  size_t frames = 0;
  for (const OutFrame& f : c.data) {
    if (frames == kGatherFrames || offered >= kGatherBytes) break;
    const size_t headLeft = f.done < f.head.size() ? f.head.size() - f.done : 0;
    const size_t payloadDone = f.done > f.head.size() ? f.done - f.head.size() : 0;
    if (headLeft > 0) iov[pieces++] = {const_cast<uint8_t*>(f.head.data() + f.done), headLeft};
    if (f.payloadLen > payloadDone) iov[pieces++] = {const_cast<uint8_t*>(f.payload + payloadDone), f.payloadLen - payloadDone};
    offered += headLeft + (f.payloadLen - payloadDone);
    ++frames;
  }
  size_t taken = 0;
  Status st = c.pair->trySendv(iov, pieces, &taken);
  if (!st.isOk()) {
    breakChannel(c, st);
    *all = false;
    return taken > 0;
  }
  *all = taken == offered;
  for (size_t left = taken; left > 0;) {
    OutFrame& f = c.data.front();
    const size_t total = f.head.size() + f.payloadLen;
    const size_t n = std::min(left, total - f.done);
    f.done += n;
    left -= n;
    if (f.done < total) break;
    Op* completes = f.completes;
    if (f.owner != nullptr && f.owner->state == State::kFramed) f.owner->state = State::kAwaitReply;
    c.data.pop_front();
    if (completes != nullptr) finish(completes, Status::ok());
  }
  return taken > 0;
}

// Control frames are headers alone. The ACKs of a window of eager messages, or the CTSs of a window of
// large ones, are queued together while their frames are read; written together they leave in one
// system call, and on TCP in one packet instead of one each. Returns whether any byte went out.
bool PointToPoint::writeControlTogether(Channel& c) {
  controlBytes_.clear();
  for (const OutFrame& f : c.control) controlBytes_.insert(controlBytes_.end(), f.head.begin(), f.head.end());
  size_t taken = 0;
  Status st = c.pair->trySend(controlBytes_.data(), controlBytes_.size(), &taken);
  if (!st.isOk()) {
    breakChannel(c, st);
    return false;
  }
  for (size_t left = taken; left > 0;) {
    OutFrame& f = c.control.front();
    const size_t n = std::min(left, f.head.size() - f.done);
    f.done += n;
    left -= n;
    if (f.done == f.head.size()) c.control.pop_front();
  }
  return taken > 0;
}

bool PointToPoint::readFrames(Channel& c) {
  bool moved = false;
  while (c.dead.isOk()) {
    if (!c.inPayload) {
      size_t got = 0;
      Status st = c.pair->tryRecvAhead(c.header + c.headerGot, p2p::kHeaderBytes - c.headerGot, kReadAheadBytes, &got);
      if (!st.isOk()) {
        breakChannel(c, st);
        break;
      }
      c.headerGot += got;
      moved |= got > 0;
      if (c.headerGot < p2p::kHeaderBytes) break;
      c.headerGot = 0;
      onHeader(c);
      // A matched RTS_HEAD queued its CTS: send it (pump() writes next) before reading the head, so the
      // sender's rest is on its way while the head is read. Over TCP, where each write is a system call,
      // a CTS may wait while earlier messages' rests are still owed (the sender has those to write
      // meanwhile): the CTSs of a window then go out together.
      if (c.in.type == FrameType::kRtsHead && !c.control.empty() &&
          (c.pair->pollFd() < 0 || c.awaitingData.size() <= 1 || c.control.size() >= kControlBatch)) {
        break;
      }
      continue;
    }
    size_t got = 0;
    uint8_t* dst = c.inDst != nullptr ? c.inDst + c.inDone : discard_.data();
    size_t want = c.inLen - c.inDone;
    if (c.inDst == nullptr && want > discard_.size()) want = discard_.size();
    Status st = c.pair->tryRecvInto(dst, want, &got);
    if (!st.isOk()) {
      breakChannel(c, st);
      break;
    }
    c.inDone += got;
    moved |= got > 0;
    if (c.inDone == c.inLen) {
      onPayloadDone(c);
    } else if (got == 0) {
      break;
    }
  }
  return moved;
}

void PointToPoint::onHeader(Channel& c) {
  FrameHeader h;
  const int peer = c.pair->peer();
  auto violation = [&](const std::string& what) {
    breakChannel(c, Status(Code::kInternal, "rank " + std::to_string(peer) + " broke the message protocol: " + what, peer));
  };
  if (!p2p::decodeHeader(c.header, &h)) return violation("unknown frame type " + std::to_string(c.header[0]));
  c.in = h;
  size_t bytes = 0;
  const bool carriesMessage = h.type == FrameType::kEager || h.type == FrameType::kRts || h.type == FrameType::kData ||
                              h.type == FrameType::kRtsHead || h.type == FrameType::kDataTail;
  if (carriesMessage) {
    if (h.dtype >= kNumDTypes || !multiplyFits(h.count, dtypeSize(static_cast<DType>(h.dtype)), &bytes)) {
      return violation("a message of " + std::to_string(h.count) + " elements of dtype " + std::to_string(h.dtype));
    }
  }
  switch (h.type) {
    case FrameType::kEager:
    case FrameType::kRts:
    case FrameType::kRtsHead: {
      if (h.type == FrameType::kEager && bytes > kEagerBytes) {
        return violation("an eager message of " + std::to_string(bytes) + " bytes");
      }
      if (h.type == FrameType::kRtsHead && bytes <= p2p::kHeadBytes) {
        return violation("an RTS_HEAD of a message of " + std::to_string(bytes) + " bytes");
      }
      // Straight into a posted receive, unless older messages of this tag are still unmatched.
      auto posted = c.posted.find(matchKey(h.group, h.tag));
      if (posted != c.posted.end() && c.unexpected.count(matchKey(h.group, h.tag)) == 0) {
        Op* op = posted->second.front();
        posted->second.pop_front();
        if (posted->second.empty()) c.posted.erase(posted);
        return match(c, op, h, nullptr);
      }
      // An EAGER's payload and an RTS_HEAD's head are buffered until a receive takes them.
      const size_t held = h.type == FrameType::kEager ? bytes : h.type == FrameType::kRtsHead ? p2p::kHeadBytes : 0;
      Unexpected m;
      m.header = h;
      m.complete = held == 0;
      if (held > 0) {
        if (c.unexpectedBytes + held > kEagerCredit) return violation("more eager bytes than its credit");
        m.payload.resize(held);
        c.unexpectedBytes += held;
      }
      auto& q = c.unexpected[matchKey(h.group, h.tag)];
      q.push_back(std::move(m));
      if (!q.back().complete) {
        expectPayload(c, q.back().payload.data(), held, nullptr);
        c.inUnexpected = true;
        return;
      }
      return matchBuffered(c, matchKey(h.group, h.tag));
    }
    case FrameType::kData:
    case FrameType::kDataTail: {
      const bool tail = h.type == FrameType::kDataTail;
      if (tail && bytes <= p2p::kHeadBytes) return violation("a DATA_TAIL of a message of " + std::to_string(bytes) + " bytes");
      const size_t from = tail ? p2p::kHeadBytes : 0;
      auto it = c.awaitingData.find(h.seq);
      Op* op = it != c.awaitingData.end() ? it->second : nullptr;
      if (op != nullptr) {
        c.awaitingData.erase(it);
        if (bytes != op->bytes || from != op->head) return violation("DATA of another size than its RTS");
        op->state = State::kStreaming;
      }
      // A receive that timed out after its CTS leaves its DATA to be discarded.
      expectPayload(c, op != nullptr ? op->work->data + from : nullptr, bytes - from, op);
      if (bytes == from && op != nullptr) onPayloadDone(c);
      return;
    }
    case FrameType::kAck:
    case FrameType::kCts:
    case FrameType::kNack: {
      auto it = c.sent.find(h.seq);
      if (it == c.sent.end()) return;  // the send timed out meanwhile
      Op* op = it->second;
      c.sent.erase(it);
      c.unackedEager -= op->credit;
      op->credit = 0;
      const Work& w = *op->work;
      if (h.type == FrameType::kAck) return finish(op, Status::ok());
      if (h.type == FrameType::kNack) {
        return finish(op, Status(Code::kMismatch,
                                 "rank " + std::to_string(peer) + "'s receive for " + tagText(groupOf(w), w.tag) + " is for " +
                                     describeMessage(h.count, h.dtype) + ", but this rank sent " +
                                     describeMessage(w.count, static_cast<uint8_t>(w.dtype)),
                                 peer));
      }
      if (op->eager) return violation("CTS for an eager message");
      FrameHeader d;
      d.type = op->head > 0 ? FrameType::kDataTail : FrameType::kData;
      d.dtype = static_cast<uint8_t>(w.dtype);
      d.tag = w.tag;
      d.group = groupOf(w);
      d.seq = op->seq;
      d.count = w.count;
      OutFrame f;
      f.head.resize(p2p::kHeaderBytes);
      p2p::encodeHeader(d, f.head.data());
      f.payload = w.data + op->head;
      f.payloadLen = op->bytes - op->head;
      f.completes = op;
      f.owner = op;
      op->state = State::kStreaming;
      c.data.push_back(std::move(f));
      return;
    }
  }
}

void PointToPoint::onPayloadDone(Channel& c) {
  c.inPayload = false;
  if (c.inUnexpected) {
    c.inUnexpected = false;
    c.unexpected[matchKey(c.in.group, c.in.tag)].back().complete = true;
    return matchBuffered(c, matchKey(c.in.group, c.in.tag));
  }
  Op* op = c.inCompletes;
  c.inCompletes = nullptr;
  const bool finishes = c.inFinishes;
  c.inFinishes = true;
  if (op == nullptr || !finishes) return;
  if (c.inAck) sendControl(c, FrameType::kAck, c.in.seq, 0, 0);
  finish(op, Status::ok());
}

// Shared-memory channels have no descriptor that reports a hang-up; their TCP connection does. A TCP
// channel reports it on the next read, but a peer that only ever receives would go unnoticed while this
// rank waits to send into a full buffer, so both are checked.
void PointToPoint::checkLiveness(Channel& c, Clock::time_point now) {
  if (now < c.nextLivenessCheck) return;
  c.nextLivenessCheck = now + std::chrono::milliseconds(waits::kMessageLivenessMs);
  // The peer's collective failed in an elastic world: it said so on the notice socket of its collectives'
  // pair (Context::notifyPeers()); the channel has none of its own.
  Pair* collectives = ctx_.pair(c.pair->peer());
  Status lost = checkPeer(*c.pair, collectives != nullptr ? collectives->noticeFd() : -1, ctx_.rank(), Waiter::kMessage);
  if (lost.isOk()) return;
  // What the peer wrote before it went is still readable: take it first.
  readFrames(c);
  if (c.dead.isOk()) breakChannel(c, lost);
}

void PointToPoint::checkDeadlines(Clock::time_point now) {
  for (auto it = ops_.begin(); it != ops_.end();) {
    Op* op = &*it;
    ++it;  // finish() erases op
    if (now < op->deadline) continue;
    const Work& w = *op->work;
    const std::string after = std::to_string(timeoutMs_ / 1000.0).substr(0, 6) + " s";
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

void PointToPoint::waitForTraffic(int64_t idleMicros) {
  if (idleMicros < waits::kSpinMicros) {
    waits::cpuRelax();
    return;
  }
  std::vector<pollfd> fds;
  fds.push_back({wakeFd_, POLLIN, 0});
  bool spinning = false;
  {
    std::unique_lock<std::mutex> lock(progressMutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
      sched_yield();
      return;
    }
    for (const Channel& c : channels_) {
      if (c.pair == nullptr || !c.dead.isOk() || !involved(c)) continue;
      const int fd = c.pair->pollFd();
      if (fd < 0) {
        spinning = true;
        continue;
      }
      short events = POLLIN;
      if (!c.control.empty() || !c.data.empty()) events |= POLLOUT;
      fds.push_back({fd, events, 0});
    }
  }
  int timeoutMs = waits::kMessagePollCapMs;
  if (spinning) {
    if (idleMicros < waits::kMessageYieldMicros) {
      sched_yield();
      return;
    }
    timeoutMs = 0;
  }
  int r = poll(fds.data(), fds.size(), timeoutMs);
  if (r > 0 && (fds[0].revents & POLLIN)) drainWake();
  if (spinning && r <= 0) {
    waits::napAfterYield(idleMicros, waits::kMessageYieldMicros, waits::kMessageMaxNapMicros);
  }
}

}  // namespace hora
