// Data-plane connection setup: every pair of ranks is connected exactly once, at init.
//
// Rank i connects to every rank j < i and accepts a connection from every rank j > i. The connecting side
// sends a Hello (magic, protocol version, its rank, the world size and a tag derived from the job id); the
// accepting side checks it and answers with its own. A connection that fails the check is logged and
// dropped, and accepting goes on, so a stray client can neither join nor stall the job past the deadline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace hora {
namespace tcp {

struct PeerAddress {
  std::string host;
  int port = 0;
};

// Binds a listening socket on host (an IPv4 address, "" or "0.0.0.0" for any) and an ephemeral port.
Status listenOn(const std::string& host, int backlog, int* fd, int* port);

// Connects the full mesh; on success (*fds)[peer] is a connected blocking socket for every peer != rank.
Status connectMesh(int listenFd, int rank, int size, const std::vector<PeerAddress>& peers, uint64_t jobTag,
                   const Deadline& deadline, std::vector<int>* fds);

// Blocking exchange helpers with a deadline, for the short handshakes at init.
Status sendAll(int fd, const void* data, size_t len, const Deadline& deadline, int peer);
Status recvAll(int fd, void* data, size_t len, const Deadline& deadline, int peer);

// Puts an established socket into the mode the progress engine expects (non-blocking, TCP_NODELAY).
Status configureForDataPlane(int fd);

}  // namespace tcp
}  // namespace hora
