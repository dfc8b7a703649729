// Liveness: whether a peer is still there, and what the error says when it is not. The progress engine's
// one rule, for both of its clients: a collective's wait (Context::checkLiveness, and its poll of the
// notice sockets) and the messages' (Context::checkMessagePeer, which PointToPoint calls per channel).
//
// A shared-memory ring cannot tell that its peer is gone, and a TCP socket that only ever sends cannot
// either until its buffer is full. So every pair keeps quiet sockets that say it: the liveness socket
// (Pair::livenessFd(): for shared memory the idle TCP connection kept for this, for TCP the data socket),
// whose hang-up means the peer is gone, and in an elastic world the notice socket (Pair::noticeFd()), on
// which a byte means the peer's collective failed (Context::notifyPeers()) and it ends its work without
// closing anything. Every look here is a poll() with no timeout and a recv() that only peeks: it never
// blocks and never takes a byte.
//
// The error is ERR_PEER_LOST naming the lost peer, as Pair::peer() numbers it (a world rank; a group's
// pairs are the world's), in error.peer and in the message; the words say what this rank was doing.
#pragma once

#include "common/status.h"
#include "transport/pair.h"

namespace hora {

// What was waiting on the peer: the words of the error.
enum class Waiter : uint8_t {
  kCollective,  // a collective's step (Context::progress)
  kMessage,     // a send or recv (PointToPoint)
};

// The peer's sockets say nothing yet: ok. The peer said its work failed (a byte on noticeFd; also on the
// liveness socket when noticeFd is that socket, which then carries nothing but notices, as a
// shared-memory pair's does), or the liveness socket hung up or failed: ERR_PEER_LOST naming the peer.
// noticeFd may be -1 (no notice socket), or another pair's (the messages' channel has none of its own).
Status checkPeer(const Pair& pair, int noticeFd, int rank, Waiter waiter);

// The ERR_PEER_LOST of a peer that said on its notice socket that its work failed, for a wait that saw
// the byte itself (Context::waitForProgress polls the notice sockets beside the data sockets).
Status peerFailedStatus(int peer, int rank, Waiter waiter);

// A byte is waiting on fd (a notice). Peeks; never blocks.
bool noticeWaiting(int fd);

// A TCP data socket that poll() found hung up (POLLRDHUP, POLLHUP or POLLERR) while this rank was sending
// on it: the peer never reads again. ERR_PEER_LOST naming the peer, with the socket's error if it has one.
Status sendingPeerLostStatus(int fd, int peer, int rank);

}  // namespace hora
