// Plain socket work of the data plane, apart from forming the mesh (connect.h): a listening socket,
// blocking exchanges with a deadline for the short exchanges at init, and the options every data-plane
// connection gets (keepalive, TCP_NODELAY, non-blocking, congestion control between processes of one host).
#pragma once

#include <netinet/in.h>

#include <string>

#include "common/clock.h"
#include "common/status.h"

namespace hora {
namespace tcp {

// Binds a listening socket on host (an IPv4 address, "" or "0.0.0.0" for any) and an ephemeral port.
Status listenOn(const std::string& host, int backlog, int* fd, int* port);

// Blocking exchange helpers with a deadline, for the short exchanges at init.
Status sendAll(int fd, const void* data, size_t len, const Deadline& deadline, int peer);
Status recvAll(int fd, void* data, size_t len, const Deadline& deadline, int peer);

// How long a data-plane connection may go without any sign of its peer's host (keepalive answers or
// acknowledgements) before it is treated as lost.
constexpr unsigned int kPeerSilenceMs = 4000;

// What a data-plane socket error says about the peer, for the end of an ERR_PEER_LOST message:
// " (its host did not answer for 4 s: ...)" for ETIMEDOUT, " (strerror)" for others, "" for 0.
std::string describeLoss(int err);

// Puts an established socket into the mode the progress engine expects (non-blocking, TCP_NODELAY).
Status configureForDataPlane(int fd);

// Whether a connected socket's peer is on this host: a loopback address, or the socket's own address.
bool peerOnThisHost(int fd);

// For connectMesh. An address for host and port: "" or "0.0.0.0" is any, else an IPv4 address or a
// name to look up.
Status resolve(const std::string& host, int port, sockaddr_in* out);

// For connectMesh, before a socket dials `to`: Reno when `to` is this host (see configureForDataPlane).
void preferRenoToThisHost(int fd, const sockaddr_in& to);

// kInternal with `what` and errno's text.
Status sysError(const std::string& what);

}  // namespace tcp
}  // namespace hora
