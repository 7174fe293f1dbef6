/* first_buffer.c - the 4 KB page walk cost of successive 256 MiB buffers of one
 * fresh process (docs/model.md section 4, "Which memory a buffer lands on").
 * On the Intel KVM guest the first large buffer a process maps walked at about
 * twice the cost of the ones mapped after it; with one throw-away buffer mapped
 * (and kept) first, the first measured one walked as cheaply as the rest.
 *
 *   cc -O2 -Wall -Wextra -Werror -o /tmp/first_buffer experiments/first_buffer.c
 *   /tmp/first_buffer [THROWAWAY]     # THROWAWAY 1: map and touch one first
 *
 * Maps five 256 MiB buffers on 4 KB pages (MADV_NOHUGEPAGE) and one on THP
 * (MADV_HUGEPAGE), each touched sequentially (its first-touch time per 4 KB is
 * printed) and then linked into the same random cycle of 64-byte nodes. Seven
 * rounds chase every buffer in turn; per buffer the median ns per step, and its
 * walk cost: that less the THP buffer's median (every step of a 4 KB chase over
 * 256 MiB misses the TLBs, no step of the THP one does). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define LEN (256UL << 20)
#define NODES (LEN / 64)
#define BUFS 5
#define ROUNDS 7
#define STEPS 1500000L

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t *order; /* the cycle: node order[i] links to order[i + 1] */

static char *buffer(int huge, double *touch_ns)
{
    char *m = mmap(NULL, LEN + (2UL << 20), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("first_buffer: mmap");
        exit(1);
    }
    char *b = (char *)(((uintptr_t)m + (2UL << 20) - 1) & ~((uintptr_t)(2UL << 20) - 1));
    if (madvise(b, LEN, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) {
        perror("first_buffer: madvise");
        exit(1);
    }
    double t0 = now();
    memset(b, 0, LEN);
    *touch_ns = (now() - t0) * 1e9 / (LEN / 4096);
    for (uint64_t i = 0; i < NODES; i++)
        *(uint64_t *)(b + order[i] * 64) = order[(i + 1) % NODES] * 64;
    return b;
}

static double chase(const char *b)
{
    uint64_t at = order[0] * 64;
    for (long k = 0; k < STEPS / 4; k++)
        at = *(const volatile uint64_t *)(b + at);
    double t0 = now();
    for (long k = 0; k < STEPS; k++)
        at = *(const volatile uint64_t *)(b + at);
    double t = (now() - t0) * 1e9 / STEPS;
    if (at == 1) /* never: keeps the chase */
        puts("");
    return t;
}

static int cmp(const void *p, const void *q)
{
    double d = *(const double *)p - *(const double *)q;
    return (d > 0) - (d < 0);
}

int main(int argc, char **argv)
{
    int throwaway = argc > 1 && atoi(argv[1]) == 1;
    order = malloc(NODES * sizeof *order);
    if (!order) {
        perror("first_buffer: malloc");
        return 1;
    }
    for (uint64_t i = 0; i < NODES; i++)
        order[i] = i;
    uint64_t x = 88172645463325252ULL;
    for (uint64_t i = NODES - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t j = x % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    double touch[BUFS + 1];
    if (throwaway) {
        double f;
        buffer(0, &f);
        printf("throw-away buffer first: %.0f ns per 4 KB first touch (kept, not measured)\n", f);
    }
    char *b[BUFS + 1];
    for (int i = 0; i <= BUFS; i++)
        b[i] = buffer(i == BUFS, &touch[i]);
    double t[BUFS + 1][ROUNDS];
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i <= BUFS; i++)
            t[i][r] = chase(b[i]);
    for (int i = 0; i <= BUFS; i++)
        qsort(t[i], ROUNDS, sizeof t[i][0], cmp);
    for (int i = 0; i < BUFS; i++)
        printf("4 KB buffer %d: first touch %4.0f ns per 4 KB, chase %5.1f ns per step, walk %5.1f ns\n",
               i, touch[i], t[i][ROUNDS / 2], t[i][ROUNDS / 2] - t[BUFS][ROUNDS / 2]);
    printf("THP buffer:    first touch %4.0f ns per 4 KB, chase %5.1f ns per step\n", touch[BUFS],
           t[BUFS][ROUNDS / 2]);
    return 0;
}
