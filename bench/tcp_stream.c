// One TCP stream and the CPU it costs, for bench/link-cost.sh:
//   tcp_stream serve PORT            receives until the sender closes
//   tcp_stream send HOST PORT BYTES  sends BYTES (a huge count streams until killed)
// Each prints, when done, the bytes it moved and its own user and system CPU time in ms.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static char chunk[256 * 1024];
static volatile sig_atomic_t stop = 0;

static void onTerm(int sig) { (void)sig; stop = 1; }

static void report(const char* what, long long bytes) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  printf("%s bytes=%lld user_ms=%.1f sys_ms=%.1f\n", what, bytes, r.ru_utime.tv_sec * 1e3 + r.ru_utime.tv_usec / 1e3,
         r.ru_stime.tv_sec * 1e3 + r.ru_stime.tv_usec / 1e3);
}

// An IPv4 address with the port given as text; the host is filled in by the caller.
static struct sockaddr_in portOf(const char* port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)atoi(port));
  return a;
}

int main(int argc, char** argv) {
  int one = 1;
  if (argc == 3 && strcmp(argv[1], "serve") == 0) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = portOf(argv[2]);
    if (bind(s, (struct sockaddr*)&a, sizeof a) != 0 || listen(s, 1) != 0) return perror("tcp_stream: bind"), 1;
    int c = accept(s, NULL, NULL);
    if (c < 0) return perror("tcp_stream: accept"), 1;
    long long got = 0;
    ssize_t n;
    while ((n = recv(c, chunk, sizeof chunk, 0)) > 0) got += n;
    report("recv", got);
    return 0;
  }
  if (argc == 5 && strcmp(argv[1], "send") == 0) {
    signal(SIGTERM, onTerm);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = portOf(argv[3]);
    if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1) return fprintf(stderr, "tcp_stream: bad address %s\n", argv[2]), 2;
    if (connect(c, (struct sockaddr*)&a, sizeof a) != 0) return perror("tcp_stream: connect"), 1;
    long long left = atoll(argv[4]), sent = 0;
    while (left > 0 && !stop) {
      ssize_t n = send(c, chunk, left < (long long)sizeof chunk ? (size_t)left : sizeof chunk, 0);
      if (n <= 0) break;
      left -= n;
      sent += n;
    }
    close(c);
    report("send", sent);
    return 0;
  }
  fprintf(stderr, "usage: tcp_stream serve PORT | tcp_stream send HOST PORT BYTES\n");
  return 2;
}
