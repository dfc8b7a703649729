// PointToPoint's frames in (the protocol is in p2p.h): reading headers and payloads, checking each header
// (nothing from the network is trusted), and matching messages with posted receives, oldest first per
// (group, tag), keeping the unmatched ones as unexpected.
#include <cstring>

#include "engine/p2p.h"
#include "engine/p2p_internal.h"

namespace hora {
namespace {

using p2p::describeMessage;
using p2p::FrameHeader;
using p2p::FrameType;
using p2p::groupOf;
using p2p::multiplyFits;
using p2p::tagText;

// At most this many CTSs wait to go out together while a window of large messages is read.
constexpr size_t kControlBatch = 8;

}  // namespace

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
      OutFrame f(p2p::messageHeader(op->head > 0 ? FrameType::kDataTail : FrameType::kData, w, op->seq));
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

}  // namespace hora
