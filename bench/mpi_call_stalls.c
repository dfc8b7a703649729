/* Open MPI's side of bench/call-stalls.js: a loop of MPI_Allreduce (float sum), each call timed from the end
   of the one before; rank 0 prints the mean, the median and the share of the loop in calls over 5 us.
     mpicc -O2 bench/mpi_call_stalls.c -o /tmp/mpi_call_stalls
     mpirun --allow-run-as-root --oversubscribe --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
       -np 2 /tmp/mpi_call_stalls [BYTES=4] [CALLS=200000] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double nowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int byValue(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int bytes = argc > 1 ? atoi(argv[1]) : 4;
  const int calls = argc > 2 ? atoi(argv[2]) : 200000;
  const int count = bytes / 4 > 0 ? bytes / 4 : 1;
  float* in = calloc(count, sizeof(float));
  float* out = calloc(count, sizeof(float));
  double* t = malloc(sizeof(double) * calls);
  for (int i = 0; i < 20000; i++) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const double start = nowNs();
  double last = start, stalled = 0;
  for (int i = 0; i < calls; i++) {
    MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double now = nowNs();
    t[i] = now - last;
    last = now;
    if (t[i] > 5000) stalled += t[i];
  }
  const double total = last - start;
  qsort(t, calls, sizeof(double), byValue);
  if (rank == 0) {
    printf("{\"bytes\":%d,\"calls\":%d,\"meanNs\":%.0f,\"medianNs\":%.0f,\"stalledShare\":%.3f}\n", count * 4, calls,
           total / calls, t[calls / 2], stalled / total);
  }
  free(in);
  free(out);
  free(t);
  MPI_Finalize();
  return 0;
}
