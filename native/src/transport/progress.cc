#include "transport/progress.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace hora {

Waker::~Waker() {
  if (fd_ >= 0) close(fd_);
}

void Waker::open() {
  if (fd_ < 0) fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

void Waker::wake() {
  if (armed_.exchange(true)) return;
  uint64_t one = 1;
  ssize_t ignored = write(fd_, &one, sizeof(one));
  (void)ignored;
}

void Waker::drain() {
  uint64_t drained;
  ssize_t ignored = read(fd_, &drained, sizeof(drained));
  (void)ignored;
  armed_.store(false);
}

}  // namespace hora
