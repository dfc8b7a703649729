#include "transport/shm/single_copy.h"

#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <random>

namespace hora {
namespace shm {
namespace {

// This process's cookie: random, never 0, the same for the life of the process.
const uint64_t* cookie() {
  static const uint64_t value = [] {
    std::random_device rd;
    const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
    return v == 0 ? 1 : v;
  }();
  return &value;
}

// This process's id, read once (a system call each time otherwise) and again in a child after fork().
std::atomic<uint32_t> cachedPid{0};

uint32_t pid() {
  uint32_t v = cachedPid.load(std::memory_order_relaxed);
  if (v != 0) return v;
  static const int forgetInChild = pthread_atfork(nullptr, nullptr, [] { cachedPid.store(0, std::memory_order_relaxed); });
  (void)forgetInChild;
  v = static_cast<uint32_t>(getpid());
  cachedPid.store(v, std::memory_order_relaxed);
  return v;
}

}  // namespace

ReadOffer makeOffer(const uint8_t* data, size_t bytes, OfferMode mode) {
  ReadOffer o;
  o.mode = static_cast<uint32_t>(mode);
  o.pid = pid();
  o.address = reinterpret_cast<uintptr_t>(data);
  o.bytes = bytes;
  o.cookieAddress = reinterpret_cast<uintptr_t>(cookie());
  o.cookie = *cookie();
  return o;
}

bool readOffer(const ReadOffer& offer, uint8_t* dst) {
  if (offer.mode != static_cast<uint32_t>(OfferMode::kRead) || offer.pid == 0 || offer.cookie == 0) return false;
  uint64_t seen = 0;
  iovec local[2] = {{dst, offer.bytes}, {&seen, sizeof seen}};
  iovec remote[2] = {{reinterpret_cast<void*>(offer.address), offer.bytes},
                     {reinterpret_cast<void*>(offer.cookieAddress), sizeof seen}};
  const ssize_t got = process_vm_readv(static_cast<pid_t>(offer.pid), local, 2, remote, 2, 0);
  return got == static_cast<ssize_t>(offer.bytes + sizeof seen) && seen == offer.cookie;
}

}  // namespace shm
}  // namespace hora
