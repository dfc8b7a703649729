// PointToPoint's frames out (the protocol is in p2p.h): framing a send (EAGER, RTS_HEAD or RTS) and a
// control frame, and writing what each channel has queued, control frames before the next payload and
// runs of frames together in one system call.
#include <algorithm>

#include "engine/p2p.h"
#include "engine/p2p_internal.h"

namespace hora {
namespace {

using p2p::FrameHeader;
using p2p::FrameType;
using p2p::groupOf;

// Payloads up to this size are copied behind their header so that the frame goes out in one piece.
constexpr size_t kInlineBytes = 16 * 1024;
// A run of queued frames written in one call (writeDataTogether): at most this many, of about this many bytes.
constexpr size_t kGatherFrames = 16;
constexpr size_t kGatherBytes = 1 << 20;

}  // namespace

void PointToPoint::postSend(Channel& c, Op* op) {
  if (!c.dead.isOk()) return finish(op, c.dead);
  const Work& w = *op->work;
  op->seq = c.nextSeq++;
  op->eager = op->bytes <= kEagerBytes && c.unackedEager + op->bytes <= kEagerCredit;
  const bool headed = !op->eager && op->bytes > p2p::kHeadBytes && c.unackedEager + p2p::kHeadBytes <= kEagerCredit;
  OutFrame f(p2p::messageHeader(op->eager ? FrameType::kEager : headed ? FrameType::kRtsHead : FrameType::kRts, w, op->seq));
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

void PointToPoint::sendControl(Channel& c, FrameType type, uint64_t seq, uint8_t dtype, uint64_t count) {
  FrameHeader h;
  h.type = type;
  h.seq = seq;
  h.dtype = dtype;
  h.count = count;
  c.control.push_back(OutFrame(h));
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

}  // namespace hora
