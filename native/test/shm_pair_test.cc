// Tests for the shared-memory pair's gathered writes (transport/shm/pair): pieces sent together fill the
// ring's slots back to back, so a frame's header shares its slot with its payload, and the bytes come out
// of the ring whole and in order. The pair here writes into and reads from one ring in this process.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/shm_pair_test
// Prints "ok N - what" or "not ok N - what: details"; exits 1 if any failed.
#include <sys/uio.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pieces.h"
#include "tap.h"
#include "transport/shm/copy.h"
#include "transport/shm/pair.h"

using namespace hora;
using hora::testing::check;

namespace {

std::unique_ptr<shm::Ring> emptyRing() { return std::unique_ptr<shm::Ring>(new shm::Ring()); }

// A 32-byte header and a 1000-byte payload sent together take one slot; sent one by one, two.
void testHeaderSharesSlot() {
  auto ring = emptyRing();
  shm::ShmPair pair(1, ring.get(), ring.get(), -1);
  std::vector<uint8_t> head(32, 7), payload(1000, 9);
  size_t taken = 0;
  Status st = pair.trySendTwo(head.data(), head.size(), payload.data(), payload.size(), &taken);
  const uint64_t slots = shm::slotsOf(ring->control.head.load());
  check(st.isOk() && taken == 1032 && slots == 1 && ring->control.lengths[0] == 1032,
        "a header and its payload sent together share one slot",
        "took " + std::to_string(taken) + " bytes in " + std::to_string(slots) + " slots");
  std::vector<uint8_t> out(1032);
  size_t got = 0;
  pair.tryRecvInto(out.data(), out.size(), &got);
  size_t more = 0;
  pair.trySend(head.data(), head.size(), &more);
  pair.trySend(payload.data(), payload.size(), &more);
  check(got == 1032 && std::equal(head.begin(), head.end(), out.begin()) && std::equal(payload.begin(), payload.end(), out.begin() + 32) &&
            shm::slotsOf(ring->control.head.load()) == 3,
        "read back whole; the same two sent one by one take a slot each");
}

// Runs of up to 80 random pieces (empty ones, and pieces larger than a slot, among them) go into the
// ring as far as it has room, and are read out between runs: every byte comes out in order, each call
// takes at most kMaxSendPieces pieces, and a call's slots are all full but its last.
void testStream() {
  auto ring = emptyRing();
  shm::ShmPair pair(1, ring.get(), ring.get(), -1);
  std::mt19937 rng(3);
  std::vector<uint8_t> stream(16u << 20);
  for (auto& x : stream) x = static_cast<uint8_t>(rng());
  std::vector<uint8_t> out;
  out.reserve(stream.size());
  size_t at = 0;
  bool slotsFull = true, piecesCapped = true;
  std::string why;
  while (at < stream.size()) {
    iovec iov[80];
    size_t offeredCapped = 0;
    const int n = testing::cutPieces(stream, at, rng, 6, 100 * 1024, iov, 80, &offeredCapped);
    const uint64_t before = shm::slotsOf(ring->control.head.load());
    size_t taken = 0;
    Status st = pair.trySendv(iov, n, &taken);
    if (!st.isOk() || taken > offeredCapped) {
      piecesCapped = false;
      why = "took " + std::to_string(taken) + " of " + std::to_string(offeredCapped) + " bytes";
      break;
    }
    for (uint64_t s = before; s + 1 < shm::slotsOf(ring->control.head.load()); ++s) {
      if (ring->control.lengths[s % shm::kSlots] != shm::kSlotBytes) slotsFull = false;
    }
    at += taken;
    std::vector<uint8_t> buf(1 << 20);
    for (;;) {
      size_t got = 0;
      pair.tryRecvInto(buf.data(), buf.size(), &got);
      if (got == 0) break;
      out.insert(out.end(), buf.begin(), buf.begin() + got);
    }
  }
  check(piecesCapped, "no call takes more than kMaxSendPieces pieces", why);
  check(slotsFull, "every slot of a call is full but its last");
  check(out == stream, "16 MiB sent in runs of pieces through an 8-slot ring come out whole and in order",
        "read " + std::to_string(out.size()) + " of " + std::to_string(stream.size()) + " bytes");
}

// copyToSlot and streamToSlot: non-temporal stores after a plain lead that aligns them, for chunks from
// kStreamMinBytes up when asked (copyToSlot) or of any size (streamToSlot). Every alignment of either end,
// and lengths about the threshold and about whole lines, must copy exactly the bytes asked for and
// nothing past them.
void testCopyToSlot() {
  const size_t sizes[] = {1, 63, 4096, shm::kStreamMinBytes - 1, shm::kStreamMinBytes, shm::kStreamMinBytes + 1,
                          shm::kStreamMinBytes + 63, shm::kStreamMinBytes + 64, 65536 - 7, 65536};
  std::mt19937 rng(7);
  std::vector<uint8_t> src(65536 + 128), dst(65536 + 256);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  std::string why;
  int cases = 0;
  for (size_t n : sizes) {
    for (size_t to = 0; to < 64; to += 1) {
      for (size_t from : {size_t(0), size_t(3), size_t(32)}) {
        std::fill(dst.begin(), dst.end(), 0xA5);
        if ((to + from) % 2 == 0) {
          shm::copyToSlot(dst.data() + 64 + to, src.data() + from, n, (to + from) % 4 == 0);
        } else {
          shm::streamToSlot(dst.data() + 64 + to, src.data() + from, n);  // streamed whatever its size
        }
        ++cases;
        const bool same = std::equal(src.begin() + from, src.begin() + from + n, dst.begin() + 64 + to);
        const bool before = std::all_of(dst.begin(), dst.begin() + 64 + to, [](uint8_t b) { return b == 0xA5; });
        const bool after = std::all_of(dst.begin() + 64 + to + n, dst.end(), [](uint8_t b) { return b == 0xA5; });
        if ((!same || !before || !after) && why.empty()) {
          why = std::to_string(n) + " bytes to offset " + std::to_string(to) + " from offset " + std::to_string(from) +
                (same ? "" : ": bytes differ") + (before ? "" : ": wrote before the start") + (after ? "" : ": wrote past the end");
        }
      }
    }
  }
  check(why.empty(), "copyToSlot and streamToSlot copy exactly n bytes, streamed or not, at " + std::to_string(cases) + " alignments and lengths", why);
}

// A long send's chunks go plain while plain copies are fast, streamed after kSlowCopiesToStream slow ones
// in a row, with a plain, timed probe every kProbeEvery-th chunk that brings plain copies back when fast.
void testLongSendPolicy() {
  using P = shm::LongSendPolicy;
  const size_t slot = shm::kSlotBytes;
  const int64_t fastNs = 4000, slowNs = 40000;  // 64 KiB in 4 µs (16 GB/s) and in 40 µs (1.6 GB/s)
  P p;
  bool plainWhileFast = true;
  for (int i = 0; i < 100; ++i) {
    plainWhileFast &= !p.stream();
    p.copied(slot, fastNs);
  }
  check(plainWhileFast && !p.streaming(), "a long send's chunks go plain while plain copies run fast");
  p.copied(slot, slowNs);
  p.copied(slot, fastNs);
  p.copied(slot, slowNs);
  p.copied(slot, slowNs);
  check(!p.streaming(), "slow copies with a fast one between them do not switch to streaming");
  p.copied(slot, slowNs);
  check(p.streaming(), "kSlowCopiesToStream slow plain copies in a row switch to streaming");
  int streamed = 0;
  while (p.stream()) ++streamed;
  check(streamed == P::kProbeEvery - 1, "while streaming, every kProbeEvery-th chunk is a plain probe",
        std::to_string(streamed) + " streamed before the probe");
  p.copied(slot, slowNs);
  check(p.streaming(), "a slow probe keeps streaming");
  streamed = 0;
  while (p.stream()) ++streamed;
  p.copied(slot, fastNs);
  check(streamed == P::kProbeEvery - 1 && !p.streaming() && !p.stream(), "a fast probe brings plain copies back");
}

// Small messages of different lengths, sent while the reader is behind: each comes out whole with its own
// length, whether the reader takes it from lengths[] (slots behind the newest) or from the head word (the
// newest), and taking the next slot's lines ahead (ShmPair::prepareNextSlot) never writes into a slot the
// reader has not released. A store into an unread slot, or a length taken from the wrong place, fails it.
void testSmallSlotsWhileBehind() {
  auto ring = emptyRing();
  shm::ShmPair pair(1, ring.get(), ring.get(), -1);
  auto message = [](size_t k) {
    std::vector<uint8_t> m(100 + 517 * k);  // 100 B to 4.2 KiB, every line of it written
    for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint8_t>(k * 31 + i * 7 + 1);
    return m;
  };
  auto send = [&](size_t k) {
    const std::vector<uint8_t> head(16, static_cast<uint8_t>(k)), body = message(k);
    size_t taken = 0;
    pair.trySendTwo(head.data(), head.size(), body.data(), body.size(), &taken);
    return taken == head.size() + body.size();
  };
  auto receive = [&](size_t k, std::string* why) {
    const std::vector<uint8_t> body = message(k);
    const uint8_t* data = nullptr;
    size_t avail = 0;
    pair.peek(shm::kSlotBytes, &data, &avail);
    bool ok = avail == 16 + body.size() && data[0] == static_cast<uint8_t>(k) && std::equal(body.begin(), body.end(), data + 16);
    if (!ok) *why += "message " + std::to_string(k) + ": " + std::to_string(avail) + " bytes; ";
    pair.consume(avail);
    return ok;
  };
  bool sent = true;
  for (size_t k = 0; k < shm::kSlots; ++k) sent &= send(k);  // the ring is full, nothing read
  std::string why;
  bool intact = receive(0, &why);
  sent &= send(shm::kSlots);  // into the released slot 0; slot 1 is still unread
  for (size_t k = 1; k <= shm::kSlots; ++k) intact &= receive(k, &why);
  check(sent && intact, "small messages sent while the reader is behind come out whole, each with its own length", why);
}

}  // namespace

int main() {
  testing::startWatchdog();
  testHeaderSharesSlot();
  testStream();
  testCopyToSlot();
  testLongSendPolicy();
  testSmallSlotsWhileBehind();
  return testing::finish();
}
