// A POSIX shared-memory segment under /dev/shm.
//
// Every rank creates one segment holding the rings its local peers write into, the peers map it, and
// then it is unlinked at once: from that moment the memory lives only as long as the mappings, so nothing
// is left in /dev/shm however the processes end. Only a crash inside the short window of init can leave a
// name behind; the launcher removes /dev/shm/hora-<job>-* when the job ends.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace hora {
namespace shm {

class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  static Status create(const std::string& name, size_t bytes, Segment* out);
  static Status open(const std::string& name, size_t bytes, Segment* out);
  void unlink();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  std::string name_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool linked_ = false;
};

}  // namespace shm
}  // namespace hora
