#include "transport/liveness.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <string>

#include "transport/tcp/connect.h"

namespace hora {

namespace {

Status peerGoneStatus(int peer, int rank, Waiter waiter) {
  return Status(Code::kPeerLost,
                waiter == Waiter::kCollective
                    ? "rank " + std::to_string(peer) + " is gone (its connection closed while it shared memory with rank " +
                          std::to_string(rank) + ")"
                    : "rank " + std::to_string(peer) + " is gone (its connection to rank " + std::to_string(rank) + " closed)",
                peer);
}

}  // namespace

Status peerFailedStatus(int peer, int rank, Waiter waiter) {
  return Status(Code::kPeerLost,
                waiter == Waiter::kCollective
                    ? "rank " + std::to_string(peer) + " ended this collective after a failure of its own (rank " +
                          std::to_string(rank) + " waited on it)"
                    : "rank " + std::to_string(peer) + " ended its work after a failure of its own",
                peer);
}

bool noticeWaiting(int fd) {
  char said = 0;
  return recv(fd, &said, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
}

Status checkPeer(const Pair& pair, int noticeFd, int rank, Waiter waiter) {
  const int peer = pair.peer();
  const int fd = pair.livenessFd();
  // The liveness socket is the notice socket: a byte on it is a notice, seen by the one look below.
  const bool noticesOnly = noticeFd >= 0 && noticeFd == fd;
  if (noticeFd >= 0 && !noticesOnly) {
    pollfd notice{noticeFd, POLLIN, 0};
    if (poll(&notice, 1, 0) > 0 && noticeWaiting(noticeFd)) return peerFailedStatus(peer, rank, waiter);
  }
  pollfd pf{fd, POLLIN | POLLRDHUP, 0};
  if (fd < 0 || poll(&pf, 1, 0) <= 0) return Status::ok();
  char byte;
  const ssize_t r = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r == 1 && noticesOnly) return peerFailedStatus(peer, rank, waiter);
  // A byte on a data socket is data; what says the peer is gone is the end of the stream or an error.
  const bool gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) || (pf.revents & (POLLHUP | POLLERR));
  return gone ? peerGoneStatus(peer, rank, waiter) : Status::ok();
}

Status sendingPeerLostStatus(int fd, int peer, int rank) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = 0;
  return Status(Code::kPeerLost,
                "connection to rank " + std::to_string(peer) + (err != 0 ? " failed" : " was closed by the peer") +
                    " while rank " + std::to_string(rank) + " was sending to it" + tcp::describeLoss(err),
                peer);
}

}  // namespace hora
