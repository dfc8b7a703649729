// Tests for transport/shm/single_copy.h: reading a block out of another process's memory, and every way
// that read says no (the offer is not for reading, its cookie is not the process's, the process is
// another or none), so that the algorithm falls back to the rings instead of taking wrong bytes.
//
//   native/test/build.sh /tmp/hora-native-tests && /tmp/hora-native-tests/single_copy_test
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tap.h"
#include "transport/shm/single_copy.h"

using namespace hora;

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

// A child that has exec'ed another program: a live process whose memory holds nothing of ours.
pid_t stranger() {
  const pid_t pid = fork();
  if (pid == 0) {
    execlp("sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  usleep(100000);  // let it exec
  return pid;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  testing::startWatchdog(60);
  const size_t n = shm::kSingleCopyMinBytes * 3 + 5;
  const std::vector<uint8_t> src = pattern(n, 7);
  {
    std::vector<uint8_t> dst(n + 64, 0xEE);
    const shm::ReadOffer offer = shm::makeOffer(src.data(), n, shm::OfferMode::kRead);
    const bool ok = shm::readOffer(offer, dst.data());
    bool same = ok;
    for (size_t i = 0; i < n && same; ++i) same = dst[i] == src[i];
    for (size_t i = n; i < dst.size() && same; ++i) same = dst[i] == 0xEE;
    testing::check(ok && same, "an offer of this process is read whole, and nothing past it is written",
                   ok ? "other bytes" : "the read said no");
  }
  {
    // A forked child reads its parent's block (another process, as a peer rank is).
    const std::vector<uint8_t> block = pattern(n, 99);
    const shm::ReadOffer offer = shm::makeOffer(block.data(), n, shm::OfferMode::kRead);
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const pid_t reader = fork();
    if (reader == 0) {
      // The child's copy of the parent's memory is its own: scribble over it so only the parent has the block.
      std::vector<uint8_t>& mine = const_cast<std::vector<uint8_t>&>(block);
      for (auto& b : mine) b = 0;
      std::vector<uint8_t> dst(n);
      uint8_t verdict = shm::readOffer(offer, dst.data()) ? 1 : 0;
      for (size_t i = 0; i < n && verdict == 1; ++i) verdict = dst[i] == static_cast<uint8_t>(i * 31 + 99) ? 1 : 2;
      if (write(fds[1], &verdict, 1) != 1) _exit(1);
      _exit(0);
    }
    uint8_t verdict = 0;
    const bool got = read(fds[0], &verdict, 1) == 1;
    waitpid(reader, nullptr, 0);
    close(fds[0]);
    close(fds[1]);
    // A kernel that forbids reading another process (Yama ptrace_scope 2 or 3, seccomp) says no here:
    // that is what the fallback is for, and it is a skip of this check, not a pass.
    if (got && verdict == 0) {
      std::printf("ok %d - another process reads the block # SKIP this kernel refuses process_vm_readv between processes\n", ++testing::gCount);
    } else {
      testing::check(got && verdict == 1, "another process reads the block, as the parent holds it",
                     got ? (verdict == 2 ? "other bytes" : "the read said no") : "the child did not answer");
    }
  }
  {
    std::vector<uint8_t> dst(n);
    shm::ReadOffer ring = shm::makeOffer(src.data(), n, shm::OfferMode::kRing);
    testing::check(!shm::readOffer(ring, dst.data()), "an offer of kRing (the block follows through the ring) is not read");
    shm::ReadOffer wrongCookie = shm::makeOffer(src.data(), n, shm::OfferMode::kRead);
    wrongCookie.cookie ^= 1;
    testing::check(!shm::readOffer(wrongCookie, dst.data()), "an offer whose cookie is not the process's is refused");
    shm::ReadOffer noPid = shm::makeOffer(src.data(), n, shm::OfferMode::kRead);
    noPid.pid = 0;
    testing::check(!shm::readOffer(noPid, dst.data()), "an offer without a pid is refused");
    shm::ReadOffer badAddress = shm::makeOffer(nullptr, n, shm::OfferMode::kRead);
    badAddress.address = 8;
    testing::check(!shm::readOffer(badAddress, dst.data()), "an offer of memory the process does not have is refused");
    const pid_t other = stranger();
    shm::ReadOffer elsewhere = shm::makeOffer(src.data(), n, shm::OfferMode::kRead);
    elsewhere.pid = static_cast<uint32_t>(other);
    testing::check(!shm::readOffer(elsewhere, dst.data()), "an offer naming another process (a pid reused, another pid namespace) is refused");
    kill(other, SIGKILL);
    waitpid(other, nullptr, 0);
    testing::check(!shm::readOffer(elsewhere, dst.data()), "an offer of a process that has exited is refused");
  }
  return testing::finish();
}
