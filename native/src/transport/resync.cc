#include "transport/resync.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <ctime>

#include "transport/shm/segment.h"

namespace hora {

MarkerScan::MarkerScan(const Sha256Digest& marker) : marker_(marker), fallback_(marker.size(), 0) {
  for (size_t i = 1, k = 0; i < marker_.size(); ++i) {
    while (k > 0 && marker_[i] != marker_[k]) k = fallback_[k - 1];
    if (marker_[i] == marker_[k]) ++k;
    fallback_[i] = k;
  }
}

size_t MarkerScan::feed(const uint8_t* data, size_t len, bool* found) {
  *found = false;
  for (size_t i = 0; i < len; ++i) {
    while (matched_ > 0 && data[i] != marker_[matched_]) matched_ = fallback_[matched_ - 1];
    if (data[i] == marker_[matched_]) ++matched_;
    if (matched_ == marker_.size()) {
      matched_ = 0;
      *found = true;
      return i + 1;
    }
  }
  return len;
}

bool skipThroughSocket(int fd, MarkerScan* scan, bool* found, int* err) {
  *found = false;
  // Looked at first, then read only as far as the marker's end.
  uint8_t buf[64 * 1024];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      *err = n < 0 ? errno : 0;
      return false;
    }
    size_t take = scan->feed(buf, static_cast<size_t>(n), found);
    size_t dropped = 0;
    while (dropped < take) {
      ssize_t r = ::recv(fd, buf, take - dropped, MSG_DONTWAIT);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        *err = r < 0 ? errno : 0;
        return false;
      }
      dropped += static_cast<size_t>(r);
    }
    if (*found) return true;
  }
}

Sha256Digest resyncMarker(const std::string& secret, const std::string& jobId) {
  const std::string label = "hora-resync-1 " + jobId;
  return hmacSha256(secret.data(), secret.size(), label.data(), label.size());
}

KeptConnections::~KeptConnections() {
  // Pairs first: shared-memory pairs point into the segments.
  pairs.clear();
  p2pChannels.clear();
  segments.clear();
}

std::unique_ptr<KeptConnections> KeptConnections::take(std::vector<std::unique_ptr<Pair>>* pairs,
                                                       std::vector<std::unique_ptr<Pair>>* p2pChannels,
                                                       std::vector<std::unique_ptr<shm::Segment>>* segments) {
  auto out = std::make_unique<KeptConnections>();
  out->pairs.swap(*pairs);
  out->p2pChannels.swap(*p2pChannels);
  out->segments.swap(*segments);
  return out;
}

Status resyncPairs(const std::vector<Pair*>& pairs, const Sha256Digest& marker, const Deadline& deadline,
                   const std::atomic<bool>* aborted) {
  // One stream each way: a pair's data stream, or its notice socket (which may hold notices of the last
  // world: Context::notifyPeers()).
  struct Stream {
    Pair* pair;
    int fd;  // -1: the pair's data stream; else its notice socket
    MarkerScan scan;
    size_t sent = 0;
    bool through = false;  // the peer's marker has passed
    bool done() const { return through && sent == kSha256Bytes; }
  };
  std::vector<Stream> streams;
  for (Pair* p : pairs) {
    streams.push_back(Stream{p, -1, MarkerScan(marker)});
    if (p->noticeFd() >= 0) streams.push_back(Stream{p, p->noticeFd(), MarkerScan(marker)});
  }
  auto lost = [](const Stream& s, int err) {
    return Status(Code::kPeerLost,
                  "rank " + std::to_string(s.pair->peer()) + (err == 0 ? " hung up" : " failed (" + std::string(strerror(err)) + ")") +
                      " while the connections of the last world were taken over",
                  s.pair->peer());
  };
  std::vector<pollfd> fds;
  for (;;) {
    if (aborted != nullptr && aborted->load(std::memory_order_acquire)) {
      return Status(Code::kPeerLost, "taking over the connections of the last world was aborted");
    }
    bool pending = false;
    bool moved = false;
    bool spinning = false;
    fds.clear();
    for (Stream& s : streams) {
      if (s.sent < marker.size()) {
        size_t taken = 0;
        if (s.fd < 0) {
          HORA_RETURN_IF_ERROR(s.pair->trySend(marker.data() + s.sent, marker.size() - s.sent, &taken));
        } else {
          ssize_t n = send(s.fd, marker.data() + s.sent, marker.size() - s.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
          if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return lost(s, errno);
          taken = n > 0 ? static_cast<size_t>(n) : 0;
        }
        s.sent += taken;
        moved |= taken > 0;
      }
      if (!s.through) {
        if (s.fd < 0) {
          HORA_RETURN_IF_ERROR(s.pair->skipThrough(&s.scan, &s.through));
        } else {
          int err = 0;
          if (!skipThroughSocket(s.fd, &s.scan, &s.through, &err)) return lost(s, err);
        }
      }
      if (s.done()) continue;
      pending = true;
      const int fd = s.fd >= 0 ? s.fd : s.pair->pollFd();
      if (fd < 0) {
        spinning = true;  // a ring: looked at again after a short nap
        continue;
      }
      short events = POLLRDHUP;
      if (!s.through) events |= POLLIN;
      if (s.sent < marker.size()) events |= POLLOUT;
      fds.push_back({fd, events, 0});
    }
    if (!pending) return Status::ok();
    if (moved) continue;
    if (deadline.expired()) {
      for (const Stream& s : streams) {
        if (s.done()) continue;
        return Status(Code::kTimeout,
                      "timed out taking over the connection to rank " + std::to_string(s.pair->peer()) + " (" +
                          (s.through ? "the marker could not be sent" : "its marker did not arrive") + ")",
                      s.pair->peer());
      }
    }
    int r = poll(fds.data(), fds.size(), spinning ? 0 : deadline.remainingMs(100));
    if (r < 0 && errno != EINTR) return Status(Code::kInternal, std::string("poll failed: ") + strerror(errno));
    if (spinning) {
      timespec ts{0, 20 * 1000L};
      nanosleep(&ts, nullptr);
    }
  }
}

}  // namespace hora
