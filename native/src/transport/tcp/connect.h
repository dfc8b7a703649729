// Data-plane connection setup: every pair of ranks is connected exactly once, at init, and each connection
// is authenticated with the job's secret before it carries a byte of tensor data.
//
// Rank i dials every rank j < i and accepts a connection from every rank j > i, all at once: one poll()
// loop drives the outgoing handshakes, the listening socket and every accepted connection, so no single
// connection (a slow peer, a stranger that says nothing) can hold up the others.
//
// Why this handshake (protocol version 2):
//  - The data port is reachable by anyone on the network, and knowing the job id (which shows up in logs
//    and process listings) must not be enough to join: each side proves it holds the per-job secret with
//    HMAC-SHA256 over a transcript, and the secret never goes over the wire.
//  - The acceptor speaks first with a fresh random nonce, so a proof recorded on one connection is useless
//    on any other. The connector adds its own nonce, so the acceptor's proof is fresh for it too.
//  - Both proofs cover both nonces, both ranks, the world size and the job tag, under different labels
//    ("hora-dp-1 connect" / "hora-dp-1 accept"), so neither can be reflected back as the other.
//  - The acceptor answers every well-formed Hello with a verdict. A real rank whose secret differs thus
//    learns at once that it was rejected and fails with ERR_AUTH naming the peer, instead of timing out.
//    The acceptor itself cannot tell that rank from an impostor claiming its rank, so it only logs and
//    keeps waiting (failing there would let any stranger end the job).
//  - Every accepted connection has its own short deadline, and at most kMaxPendingAccepts unauthenticated
//    ones are held at a time (the oldest is dropped for a new one), so strangers cost bounded memory and
//    descriptors and cannot starve real peers: a real handshake takes one round trip.
//  - Every field read from the wire is checked before it is used; a failed check drops the connection with
//    a WARN naming the remote address and the reason.
// The listener is closed as soon as the mesh is complete (Context::connect), so later connections are
// refused by the kernel.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "transport/tcp/socket.h"  // listenOn, sendAll, recvAll, configureForDataPlane: the sockets apart from the mesh

namespace hora {
namespace tcp {

struct PeerAddress {
  std::string host;
  int port = 0;
};

// Unauthenticated connections held at once; the oldest is dropped to make room for a new one.
constexpr int kMaxPendingAccepts = 64;
// The data-plane listener's backlog (the kernel caps it at net.core.somaxconn, 4096 by default since
// Linux 5.4). Connections queue there until the handshake loop starts, which is only once the peer table
// has come; a full queue drops new SYNs, and the real peer's connect would wait for the kernel's SYN
// retry (1 s, then 3 s). Queued connections cost memory only as they come.
constexpr int kListenBacklog = 4096;
// A dial with no answer to its SYN within this long is made again (then after twice as long, up to
// kMaxConnectWaitMs), rather than left to the kernel's SYN retries (1 s, 3 s, 7 s ...).
constexpr int kFirstConnectWaitMs = 250;
constexpr int kMaxConnectWaitMs = 4000;
// How long an accepted connection has to complete its handshake.
constexpr int kHandshakeMs = 5000;

// What connectMesh needs to know about the job.
struct MeshOptions {
  int rank = 0;
  int size = 1;
  std::vector<PeerAddress> peers;  // indexed by rank; peers[rank] is unused
  uint64_t jobTag = 0;             // derived from the job id; tells another job's ranks apart in the logs
  std::string secret;              // the per-job secret; the HMAC key is these bytes
  // Set by another thread to give up (Context::abort): a peer died while the mesh formed. Checked at least
  // once a second; null: never.
  const std::atomic<bool>* aborted = nullptr;
  // By rank: peers already connected (a connection taken over from the last world, transport/resync.h),
  // which this mesh neither dials nor accepts. Empty: none.
  std::vector<bool> skip;
};

// Connects the full mesh; on success (*fds)[peer] is a connected, authenticated, non-blocking socket for
// every peer != rank that options.skip does not name (-1 for those). Fails with kAuth when a peer rejects this rank's proof or cannot prove its own, with
// kTimeout (naming the missing ranks) at the deadline.
Status connectMesh(int listenFd, const MeshOptions& options, const Deadline& deadline, std::vector<int>* fds);

}  // namespace tcp
}  // namespace hora
