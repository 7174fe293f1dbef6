/* mpi_walk.c - a small MPI program for hugetune's launcher tests: every rank
 * mallocs its own buffer (heap-large) and walks it at random, then the ranks
 * reduce a checksum. Usage: mpi_walk MIB STEPS. Prints one line (rank 0) whose
 * content depends only on the arguments and the number of ranks, so a run with
 * a plan must print exactly what a plain run prints.
 *
 * Build: mpicc -O2 -o mpi_walk mpi_walk.c */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
    uint64_t steps = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
    size_t n = (mib << 20) / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "mpi_walk: cannot allocate %zu MiB\n", mib);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = i * 0x9e3779b97f4a7c15ull + (uint64_t)rank;
    /* xorshift: a dependent random walk over the whole buffer */
    uint64_t x = 88172645463325252ull + (uint64_t)rank, sum = 0;
    for (uint64_t s = 0; s < steps; s++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t i = (size_t)((x ^ sum) % n);
        sum += buf[i];
        buf[i] = sum;
    }
    uint64_t total = 0;
    MPI_Reduce(&sum, &total, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpi_walk ranks=%d mib=%zu steps=%llu checksum=%llx\n", size, mib,
               (unsigned long long)steps, (unsigned long long)total);
    free(buf);
    MPI_Finalize();
    return 0;
}
