// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
//
// mpi-pingpong: the Open MPI job of tests/consumers. Two ranks exchange messages of several sizes
// (64 B .. 1 MiB), each filled with a pattern that depends on the size, the iteration and the
// sender, and check every byte that arrives; then an MPI_Allreduce whose result is known. Prints
// one line per size and "mpi-pingpong OK" at the end; any mismatch aborts the job.
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(int size, int iter, int rank, int i) {
  return (unsigned char)(size * 7 + iter * 13 + rank * 101 + i * 31);
}

static void fill(unsigned char* b, int size, int iter, int rank) {
  for (int i = 0; i < size; ++i)
    b[i] = pattern(size, iter, rank, i);
}

static int check(const unsigned char* b, int size, int iter, int rank) {
  for (int i = 0; i < size; ++i)
    if (b[i] != pattern(size, iter, rank, i)) {
      fprintf(stderr, "mpi-pingpong: size %d iteration %d: byte %d is 0x%02x, expected 0x%02x\n",
              size, iter, i, b[i], pattern(size, iter, rank, i));
      return 0;
    }
  return 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks != 2) {
    if (rank == 0) fprintf(stderr, "mpi-pingpong: needs exactly 2 ranks, got %d\n", nranks);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  char host[MPI_MAX_PROCESSOR_NAME];
  int len;
  MPI_Get_processor_name(host, &len);
  printf("rank %d of %d on %s\n", rank, nranks, host);
  fflush(stdout);

  const int iters = argc > 1 ? atoi(argv[1]) : 20;
  static const int sizes[] = {64, 4096, 65536, 1 << 20};
  const int peer = 1 - rank;
  unsigned char* sbuf = malloc(1 << 20);
  unsigned char* rbuf = malloc(1 << 20);
  if (!sbuf || !rbuf) MPI_Abort(MPI_COMM_WORLD, 3);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; ++k) {
    const int size = sizes[k];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; ++it) {
      memset(rbuf, 0, (size_t)size);
      fill(sbuf, size, it, rank);
      if (rank == 0) {
        MPI_Send(sbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
        MPI_Recv(rbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(rbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(sbuf, size, MPI_BYTE, peer, it, MPI_COMM_WORLD);
      }
      if (!check(rbuf, size, it, peer)) MPI_Abort(MPI_COMM_WORLD, 4);
    }
    double us = (MPI_Wtime() - t0) * 1e6 / (2.0 * iters);
    if (rank == 0) {
      printf("pingpong %8d B x %d: data verified, %.1f us one way, %.2f MB/s\n", size, iters, us,
             size / us);
      fflush(stdout);
    }
  }

  // Allreduce: every rank contributes rank+1 in each of 1000 elements, so each element of the
  // sum is 1+2 = 3, and the max of (rank * 1000 + i) is 1000 + i.
  enum { kN = 1000 };
  long in[kN], sum[kN], max[kN];
  for (int i = 0; i < kN; ++i)
    in[i] = rank + 1;
  MPI_Allreduce(in, sum, kN, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < kN; ++i)
    in[i] = (long)rank * 1000 + i;
  MPI_Allreduce(in, max, kN, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  for (int i = 0; i < kN; ++i)
    if (sum[i] != 3 || max[i] != 1000 + i) {
      fprintf(stderr, "mpi-pingpong: allreduce element %d: sum %ld max %ld\n", i, sum[i], max[i]);
      MPI_Abort(MPI_COMM_WORLD, 5);
    }
  if (rank == 0) printf("allreduce of %d longs: sum and max verified\n", kN);
  free(sbuf);
  free(rbuf);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("mpi-pingpong OK\n");
  MPI_Finalize();
  return 0;
}
