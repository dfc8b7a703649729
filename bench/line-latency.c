// One-way latency of a cache line between CPUs 0 and 1: two pinned threads pass a counter back and forth
// 200,000 times. On a virtual machine it says whether the hypervisor has the two vCPUs close together or
// apart (docs/notes/2026-11-27-slots-written-past-the-cache.md); it takes about 20 ms, so it can be run
// beside each benchmark run.
//   gcc -O2 -pthread bench/line-latency.c -o /tmp/line-latency && /tmp/line-latency
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROUND_TRIPS 200000L

static _Alignas(64) _Atomic long flag;

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
    fprintf(stderr, "line-latency: cannot pin a thread to CPU %d (this needs two CPUs)\n", cpu);
    exit(2);
  }
}

static void* answer(void* unused) {
  (void)unused;
  pin(1);
  for (long i = 0; i < ROUND_TRIPS; i++) {
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 1) {
    }
    atomic_store_explicit(&flag, 2 * i + 2, memory_order_release);
  }
  return NULL;
}

int main(void) {
  pthread_t other;
  pthread_create(&other, NULL, answer, NULL);
  pin(0);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < ROUND_TRIPS; i++) {
    atomic_store_explicit(&flag, 2 * i + 1, memory_order_release);
    while (atomic_load_explicit(&flag, memory_order_acquire) != 2 * i + 2) {
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &b);
  pthread_join(other, NULL);
  const double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
  printf("one-way ns %.1f\n", ns / ROUND_TRIPS / 2);
  return 0;
}
