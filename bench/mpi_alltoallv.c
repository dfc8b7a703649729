/* Open MPI baseline for bench/alltoall.js: MPI_Alltoallv of float32 blocks of the same sizes (bytes per
   peer), the same iteration counts and statistics, and the same JSON line per size from rank 0, so the
   two compare line by line.
     mpicc -O2 -o /tmp/mpi_alltoallv bench/mpi_alltoallv.c
     mpirun --allow-run-as-root --oversubscribe --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo -np 2 /tmp/mpi_alltoallv MAX_BYTES REPS
     mpirun ... --mca btl tcp,self ...        (TCP on one host) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int itersFor(size_t bytes) { return bytes <= 65536 ? 200 : bytes <= (1u << 20) ? 50 : 10; }

static int compareDoubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const size_t maxBytes = argc > 1 ? strtoull(argv[1], NULL, 10) : (4u << 20);
  const int reps = argc > 2 ? atoi(argv[2]) : 5;
  float* in = malloc(maxBytes * n);
  float* out = malloc(maxBytes * n);
  memset(in, 1, maxBytes * n);
  int* counts = malloc(sizeof(int) * n);
  int* displs = malloc(sizeof(int) * n);
  double* times = malloc(sizeof(double) * reps);
  for (size_t bytes = 1024; bytes <= maxBytes; bytes *= 4) {
    const int count = (int)(bytes / 4);
    for (int q = 0; q < n; ++q) {
      counts[q] = count;
      displs[q] = q * count;
    }
    const int iters = itersFor(bytes);
    // Warm-up as bench/alltoall.js's (WARMUP_MS): batches of 100 calls until the slowest rank has spent 200 ms.
    for (const double w0 = MPI_Wtime();;) {
      for (int i = 0; i < 100; ++i) MPI_Alltoallv(in, counts, displs, MPI_FLOAT, out, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
      double spent = MPI_Wtime() - w0, slowest = 0;
      MPI_Allreduce(&spent, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (slowest >= 0.2) break;
    }
    for (int r = 0; r < reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) MPI_Alltoallv(in, counts, displs, MPI_FLOAT, out, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
      double t = (MPI_Wtime() - t0) / iters, slowest = 0;
      MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      times[r] = slowest;
    }
    qsort(times, reps, sizeof(double), compareDoubles);
    if (me == 0) printf("{\"bytes\":%zu,\"time_us\":%.3f}\n", bytes, times[reps / 2] * 1e6);
    fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
