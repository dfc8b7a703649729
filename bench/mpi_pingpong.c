/* Open MPI baseline for bench/sendrecv.js: the same ping-pong latency and windowed bandwidth between
   ranks 0 and 1 with MPI_Send / MPI_Recv (and MPI_Isend / MPI_Irecv for the window), the same sizes,
   iteration counts and statistics, and the same JSON line per size, so the two compare line by line.
     mpicc -O2 -o /tmp/mpi_pingpong bench/mpi_pingpong.c
     mpirun --allow-run-as-root --oversubscribe --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np 2 /tmp/mpi_pingpong [MAX_BYTES]
     mpirun ... --mca btl tcp,self ...        (TCP on one host) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static int itersFor(size_t bytes) { return bytes <= 8192 ? 2000 : bytes <= (1u << 20) ? 200 : 20; }

static int compareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (n != 2) {
    if (me == 0) fprintf(stderr, "run with -np 2\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int peer = 1 - me;
  size_t maxBytes = argc > 1 ? strtoull(argv[1], 0, 10) : (size_t)64 << 20;
  unsigned char* buf = malloc(maxBytes);
  const size_t windowBytes = maxBytes * WINDOW > ((size_t)256 << 20) ? ((size_t)256 << 20) : maxBytes * WINDOW;
  unsigned char* window = malloc(windowBytes);
  // Written once, as a program's data is: pages never written are all the kernel's one zero page, which a
  // single-copy (CMA) transfer then reads from cache whatever the window's size.
  memset(window, me + 1, windowBytes);
  unsigned char ack[4];
  double* t = malloc(sizeof(double) * 2000);
  MPI_Request reqs[WINDOW];
  for (size_t bytes = 4; bytes <= maxBytes; bytes *= 2) {
    memset(buf, me + 1, bytes);
    const int iters = itersFor(bytes), warmup = iters / 16 > 2 ? iters / 16 : 2;
    double sum = 0;
    for (int i = -warmup; i < iters; i++) {
      double t0 = MPI_Wtime();
      if (me == 0) {
        MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
        MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(buf, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, (int)bytes, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
      }
      if (i >= 0) {
        t[i] = (MPI_Wtime() - t0) * 1e6 / 2;
        sum += t[i];
      }
    }
    qsort(t, iters, sizeof(double), compareDoubles);
    /* Each message of the window has its own buffer, as in bench/sendrecv.js, while they fit in 256 MiB;
       beyond that they share one (the bytes are not checked). */
    const int own = bytes * WINDOW <= ((size_t)256 << 20);
    int reps = (int)(((size_t)256 << 20) / (bytes * WINDOW));
    reps = reps < 3 ? 3 : reps > 20 ? 20 : reps;
    double best = 0, total = 0;
    for (int rep = -1; rep < reps; rep++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int w = 0; w < WINDOW; w++) {
        unsigned char* b = own ? window + w * bytes : window;
        if (me == 0) MPI_Isend(b, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &reqs[w]);
        else MPI_Irecv(b, (int)bytes, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &reqs[w]);
      }
      MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
      if (me == 0) MPI_Recv(ack, 4, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      else MPI_Send(ack, 4, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
      double mbps = (double)bytes * WINDOW / (MPI_Wtime() - t0) / 1e6;
      if (rep >= 0) {
        if (mbps > best) best = mbps;
        total += mbps;
      }
    }
    if (me == 0) {
      printf("{\"bytes\":%zu,\"transport\":\"mpi\",\"mode\":\"blocking\",\"latency_us\":{\"median\":%.2f,\"mean\":%.2f},"
             "\"bandwidth_MBps\":{\"best\":%.1f,\"mean\":%.1f}}\n",
             bytes, t[iters / 2], sum / iters, best, total / reps);
      fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
