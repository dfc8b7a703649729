// Copying a chunk into a ring slot that the other core will read.
//
// A plain store first takes the slot's line into this core's cache (and out of the reader's, which read
// the same slot one lap ago); the reader then takes it back out of this core's cache. Every line crosses
// between the cores twice, and what a crossing costs depends on where the two cores sit: on one 2-vCPU
// guest a line took 27-44 ns one way, and 150-180 ns when the hypervisor moved the vCPUs apart; a ring
// of 64 KiB chunks moved 10-12 GB/s in the one placement and 2.3-2.5 GB/s in the other. Non-temporal
// stores write whole lines to memory without taking them first, and the reader reads them from memory:
// 17-21 GB/s in both placements. For small chunks the trip through memory costs more than it saves (a
// 4 KiB ping-pong took 1.0 µs against 0.44 µs with plain stores, cores close), so chunks below
// kStreamMinBytes go the plain way.
//
// A send of more than kStreamMaxBytes (ShmPair decides at a send's first chunk) is different: its data no
// longer fits the caches and comes from memory anyway, and a slot's trip through memory adds to that
// traffic (a 64 MiB allreduce of 2 ranks took 1.26x as long with every chunk streamed, cores close; 4 MiB
// took 0.66x and 16 MiB 0.81x). Its chunks go the plain way while plain copies run fast, and streamed
// while they run slowly, which is how cores far apart show on the writer's side: a plain 64 KiB copy into
// a slot ran at 10-12 GB/s with the cores close and 2.4-3.6 GB/s with them apart (LongSendPolicy).
// bench/slot-copy.cc measures all of this without the engine; docs/notes/2026-11-27-slots-written-past-the-cache.md
// has the figures.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define HORA_SHM_STREAM 1
#endif

namespace hora {
namespace shm {

constexpr size_t kStreamMinBytes = 16 * 1024;
constexpr size_t kStreamMaxBytes = 16 * 1024 * 1024;

// Copies n bytes to dst with non-temporal stores (but for a plain lead up to dst's next cache line and a
// plain tail of less than one). The stores are visible to the peer, in order with the stores that follow
// (the head that publishes the slot), when this returns. Elsewhere than x86-64, a plain copy.
inline void streamToSlot(uint8_t* dst, const uint8_t* src, size_t n) {
#ifdef HORA_SHM_STREAM
  const size_t lead = std::min(n, (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63);
  std::memcpy(dst, src, lead);
  dst += lead;
  src += lead;
  n -= lead;
  for (; n >= 64; n -= 64, dst += 64, src += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  // Non-temporal stores are not ordered with later stores; the fence puts them before the head's.
  _mm_sfence();
#endif
  std::memcpy(dst, src, n);
}

// Copies n bytes to dst, a slot the peer reads: streamed when `stream` is set and n is at least
// kStreamMinBytes, plain otherwise.
inline void copyToSlot(uint8_t* dst, const uint8_t* src, size_t n, bool stream) {
  if (stream && n >= kStreamMinBytes) return streamToSlot(dst, src, n);
  std::memcpy(dst, src, n);
}

// Whether the chunks of a long send are streamed. Plain while plain copies of whole slots run at
// kFastCopyBytesPerUs or more; streamed once kSlowCopiesToStream of them in a row ran slower (one slow
// copy may be a copy that lost its core for a while). While streaming, every kProbeEvery-th whole-slot
// chunk goes the plain way again, timed, and one fast copy brings plain stores back.
class LongSendPolicy {
 public:
  static constexpr double kFastCopyBytesPerUs = 5000;  // 5 GB/s
  static constexpr int kSlowCopiesToStream = 3;
  static constexpr int kProbeEvery = 64;

  // Whether to stream the next whole-slot chunk; when this says no, report the copy's time to copied().
  bool stream() {
    if (!streaming_) return false;
    if (++sinceProbe_ < kProbeEvery) return true;
    sinceProbe_ = 0;
    return false;
  }
  void copied(size_t bytes, int64_t nanos) {
    const bool slow = static_cast<double>(bytes) * 1000 < kFastCopyBytesPerUs * static_cast<double>(nanos);
    slowInRow_ = slow ? slowInRow_ + 1 : 0;
    if (!slow) streaming_ = false;
    else if (slowInRow_ >= kSlowCopiesToStream) streaming_ = true;
  }
  bool streaming() const { return streaming_; }

 private:
  bool streaming_ = false;
  int slowInRow_ = 0;
  int sinceProbe_ = 0;
};

}  // namespace shm
}  // namespace hora
