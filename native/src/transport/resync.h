// Taking connections over from one world into the next (elastic training, docs/elastic.md).
//
// When a world ends, its survivors keep the pairs between them (Context::keepConnections) and the next
// world takes them over instead of connecting anew. A pair left by an aborted collective may still hold
// bytes of it in either direction: part of a message in a shared-memory ring, in a socket buffer or in
// flight. Before the new world uses a pair, each side therefore sends a marker down it and drops what it
// receives until the peer's marker has passed; likewise on the pair's notice socket, which may hold
// notices of the last world (Context::notifyPeers()). The marker is the 32-byte HMAC-SHA256 of the new
// world's job id under the job's secret: the same on both sides, different in every world, and
// unguessable without the secret, so stale tensor bytes never pass for it. From the marker on, both
// directions carry only the new world's traffic.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/sha256.h"
#include "common/status.h"
#include "transport/pair.h"

namespace hora {

namespace shm {
class Segment;
}

// Finds a marker in a byte stream that arrives in pieces (Knuth-Morris-Pratt, so a marker split across
// two pieces, or preceded by a partial copy of itself, is still found).
class MarkerScan {
 public:
  explicit MarkerScan(const Sha256Digest& marker);
  // Feeds data[0, len); returns how many bytes were looked at: all of them, or up to and including the
  // marker's last byte when it ends inside this piece (then *found is set).
  size_t feed(const uint8_t* data, size_t len, bool* found);

 private:
  Sha256Digest marker_;
  std::vector<size_t> fallback_;  // fallback_[i]: longest proper border of marker[0, i]
  size_t matched_ = 0;
};

// Drops what a socket has received up to and including the marker's end, never a byte beyond it (what
// follows belongs to the new world, and connect()'s handshakes read it from the socket itself). Does not
// block. Returns false when the socket failed: *err is its errno, 0 when the peer closed it.
bool skipThroughSocket(int fd, MarkerScan* scan, bool* found, int* err);

// The marker of the world named jobId.
Sha256Digest resyncMarker(const std::string& secret, const std::string& jobId);

// Connections a world leaves to the next one: pairs by the old world's ranks (null where none), and the
// shared-memory segments their rings live in.
struct KeptConnections {
  std::vector<std::unique_ptr<Pair>> pairs;
  std::vector<std::unique_ptr<Pair>> p2pChannels;
  std::vector<std::unique_ptr<shm::Segment>> segments;
  ~KeptConnections();
  // Moves everything into a new object and leaves this one empty.
  std::unique_ptr<KeptConnections> takeAll() { return take(&pairs, &p2pChannels, &segments); }
  // Moves the given connections into a new object, leaving the vectors empty.
  static std::unique_ptr<KeptConnections> take(std::vector<std::unique_ptr<Pair>>* pairs,
                                               std::vector<std::unique_ptr<Pair>>* p2pChannels,
                                               std::vector<std::unique_ptr<shm::Segment>>* segments);
};

// Sends the marker down every pair (and its notice socket) and drops what each receives until the peer's
// marker has passed; returns when all are through. Fails with kPeerLost when a peer hangs up or when
// *aborted is set, and with kTimeout at the deadline.
Status resyncPairs(const std::vector<Pair*>& pairs, const Sha256Digest& marker, const Deadline& deadline,
                   const std::atomic<bool>* aborted);

}  // namespace hora
