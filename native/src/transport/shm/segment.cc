#include "transport/shm/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace hora {
namespace shm {
namespace {

Status mapFd(int fd, const std::string& name, size_t bytes, void** out) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return Status(Code::kInternal, "mmap of shared-memory segment /dev/shm" + name + " failed: " + strerror(errno));
  }
  *out = p;
  return Status::ok();
}

}  // namespace

Segment::~Segment() {
  if (data_ != nullptr) munmap(data_, bytes_);
  unlink();
}

Status Segment::create(const std::string& name, size_t bytes, Segment* out) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status(Code::kInternal, "cannot create shared-memory segment /dev/shm" + name + ": " + strerror(errno) +
                                       " (set HORA_TRANSPORT=tcp to do without shared memory)");
  }
  out->name_ = name;
  out->linked_ = true;
  // posix_fallocate reserves the pages now, so a full /dev/shm fails here rather than with SIGBUS later.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    return Status(Code::kInternal, "cannot size shared-memory segment /dev/shm" + name + " to " +
                                       std::to_string(bytes) + " bytes: " + strerror(rc));
  }
  Status st = mapFd(fd, name, bytes, &out->data_);
  close(fd);
  if (st.isOk()) out->bytes_ = bytes;
  return st;
}

Status Segment::open(const std::string& name, size_t bytes, Segment* out) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status(Code::kInternal, "cannot open a peer's shared-memory segment /dev/shm" + name + ": " +
                                       strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    close(fd);
    return Status(Code::kInternal, "a peer's shared-memory segment /dev/shm" + name + " is smaller than expected");
  }
  Status s = mapFd(fd, name, bytes, &out->data_);
  close(fd);
  if (s.isOk()) out->bytes_ = bytes;
  return s;
}

void Segment::unlink() {
  if (linked_) {
    shm_unlink(name_.c_str());
    linked_ = false;
  }
}

}  // namespace shm
}  // namespace hora
