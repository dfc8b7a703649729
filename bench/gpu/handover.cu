// How long does it take two processes on one GPU to hand work to each other? The IPC path's fixed cost per
// collective (docs/notes/2026-11-27-gpu-small-collectives.md) is either that hand-over or something else.
//
//   nvcc -O2 -gencode arch=compute_90,code=sm_90 -o /tmp/handover bench/gpu/handover.cu && /tmp/handover [ROUNDS=2000]
//
// The process forks before touching CUDA; the two halves talk through pipes, and a byte on a pipe is what
// orders one process's CUDA call after the other's (as hora's host barriers do). Modes, each ROUNDS round
// trips (A then B then A), timed by A, microseconds per hand-over (half a round trip):
//   alone         A alone: a tiny kernel, then cudaStreamSynchronize; no hand-over (the floor)
//   kernel-host   A: kernel, synchronise, byte to B; B: kernel, synchronise, byte back (base's pattern)
//   copy-host     the same with a 4 KiB device-to-device cudaMemcpyAsync instead of the kernel
//   kernel-event  A: kernel, record an interprocess event, byte to B; B: its stream waits for A's event,
//                 kernel, records its own event, byte back; A's next kernel waits for B's event; the host
//                 never waits for the GPU until the end (the slots algorithm's pattern)
//   staged-N      both at once, N bytes: copy device-to-host (pinned), synchronise, a byte each way, copy
//                 host-to-device, synchronise, a byte each way: the staged path's GPU work around its
//                 host collective, without the collective; microseconds per round (two barriers)
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

__global__ void touch(float* p) { p[threadIdx.x] += 1.0f; }

static double now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void put(int fd) {
  char c = 1;
  if (write(fd, &c, 1) != 1) exit(2);
}
static void get(int fd) {
  char c;
  if (read(fd, &c, 1) != 1) exit(2);
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 2000;
  int ab[2], ba[2];
  if (pipe(ab) != 0 || pipe(ba) != 0) return 2;
  const pid_t child = fork();
  const bool isA = child != 0;
  const int out = isA ? ab[1] : ba[1], in = isA ? ba[0] : ab[0];

  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *buf, *src;
  const size_t kMax = size_t(1) << 20;
  CHECK(cudaMalloc(&buf, kMax));
  CHECK(cudaMalloc(&src, kMax));
  CHECK(cudaMemset(buf, 0, kMax));
  CHECK(cudaMemset(src, 0, kMax));
  void* pinned;
  CHECK(cudaHostAlloc(&pinned, kMax, cudaHostAllocDefault));
  cudaEvent_t mine, theirs;
  CHECK(cudaEventCreateWithFlags(&mine, cudaEventDisableTiming | cudaEventInterprocess));
  cudaIpcEventHandle_t h, peer;
  CHECK(cudaIpcGetEventHandle(&h, mine));
  if (write(out, &h, sizeof(h)) != sizeof(h) || read(in, &peer, sizeof(peer)) != sizeof(peer)) return 2;
  CHECK(cudaIpcOpenEventHandle(&theirs, peer));
  CHECK(cudaDeviceSynchronize());

  auto kernel = [&] {
    touch<<<1, 32, 0, s>>>(buf);
    CHECK(cudaGetLastError());
  };
  auto copy = [&] { CHECK(cudaMemcpyAsync(buf, src, 4096, cudaMemcpyDeviceToDevice, s)); };
  const char* modes[] = {"alone", "kernel-host", "copy-host", "kernel-event", "staged-4096", "staged-16384",
                         "staged-65536", "staged-262144", "staged-1048576"};
  for (const char* mode : modes) {
    const bool alone = strcmp(mode, "alone") == 0, event = strcmp(mode, "kernel-event") == 0;
    const size_t stagedBytes = strncmp(mode, "staged-", 7) == 0 ? strtoul(mode + 7, nullptr, 10) : 0;
    auto step = [&] {
      if (stagedBytes > 0) {
        CHECK(cudaMemcpyAsync(pinned, buf, stagedBytes, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        put(out);
        get(in);
        CHECK(cudaMemcpyAsync(buf, pinned, stagedBytes, cudaMemcpyHostToDevice, s));
        CHECK(cudaStreamSynchronize(s));
      } else if (event) {
        CHECK(cudaStreamWaitEvent(s, theirs, 0));
        kernel();
        CHECK(cudaEventRecord(mine, s));
      } else {
        if (strcmp(mode, "copy-host") == 0) copy();
        else kernel();
        CHECK(cudaStreamSynchronize(s));
      }
    };
    // A warm-up of 100 round trips, then the timed ones; both processes run the same count.
    for (int timed = 0; timed < 2; ++timed) {
      const int n = timed ? rounds : 100;
      const double t0 = now();
      for (int i = 0; i < n; ++i) {
        if (alone) {
          if (isA) step();
          continue;
        }
        if (stagedBytes > 0) {
          step();
          put(out);
          get(in);
          continue;
        }
        if (isA) {
          step();
          put(out);
          get(in);
        } else {
          get(in);
          step();
          put(out);
        }
      }
      CHECK(cudaStreamSynchronize(s));
      put(out);  // both halves finish the mode before either starts the next
      get(in);
      if (timed && isA) {
        const bool perRound = alone || stagedBytes > 0;
        const double us = (now() - t0) * 1e6 / n / (perRound ? 1 : 2);
        printf("%-14s %8.1f us per %s\n", mode, us, alone ? "kernel + synchronise" : stagedBytes > 0 ? "round, both at once" : "hand-over");
      }
    }
  }
  if (isA) {
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return 0;
}
