/* walk_share.c - the share of its time a walking access saves on 2 MB pages,
 * for independent random loads and for the same loads writing each line back
 * (docs/model.md section 4, "Writes" and "Work besides the walks"). The two
 * loops are the ones `hugetune calibrate` times for the walk overlap: a
 * generator held in registers picks one 64-byte line of a 256 MiB buffer per
 * access; the load variant adds the word to a sum, the write variant adds one
 * to it in place. One buffer on 4 KB pages (MADV_NOHUGEPAGE), one on THP
 * (MADV_HUGEPAGE, THP `madvise` or `always`), both touched before timing.
 *
 *   cc -O2 -Wall -Wextra -Werror -o /tmp/walk_share experiments/walk_share.c
 *   /tmp/walk_share [ROUNDS]          # default 15; experiments/walk_share.sh
 *
 * Prints, per variant, the medians over ROUNDS of ns per access on each
 * buffer, the saving and the share saved. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define LEN (256UL << 20)
#define BITS 22 /* 4 Mi lines of 64 bytes */
#define STEPS 8000000L
#define MAX_ROUNDS 101

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t next(uint64_t *x)
{
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return *x >> (64 - BITS);
}

static double loads(char *b, uint64_t *x)
{
    uint64_t s = 0;
    double t0 = now();
    for (long k = 0; k < STEPS; k++)
        s += *(volatile uint64_t *)(b + next(x) * 64);
    double t = (now() - t0) * 1e9 / STEPS;
    *(volatile uint64_t *)b += s & 1;
    return t;
}

static double rmw(char *b, uint64_t *x)
{
    double t0 = now();
    for (long k = 0; k < STEPS; k++) {
        volatile uint64_t *p = (volatile uint64_t *)(b + next(x) * 64 + 8);
        *p = *p + 1;
    }
    return (now() - t0) * 1e9 / STEPS;
}

static int cmp(const void *p, const void *q)
{
    double d = *(const double *)p - *(const double *)q;
    return (d > 0) - (d < 0);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 15;
    if (rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "walk_share: ROUNDS must be 1..%d\n", MAX_ROUNDS);
        return 2;
    }
    char *buf[2];
    for (int i = 0; i < 2; i++) {
        char *m = mmap(NULL, LEN + (2UL << 20), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            perror("walk_share: mmap");
            return 1;
        }
        buf[i] = (char *)(((uintptr_t)m + (2UL << 20) - 1) & ~((uintptr_t)(2UL << 20) - 1));
        if (madvise(buf[i], LEN, i ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) {
            perror("walk_share: madvise");
            return 1;
        }
        memset(buf[i], 1, LEN);
    }
    static double t[2][2][MAX_ROUNDS]; /* [variant][buffer][round] */
    uint64_t x = 12345;
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < 4; k++) {
            /* Rotate the order each round: none always follows another. */
            int j = (k + r) % 4, v = j / 2, i = j % 2;
            t[v][i][r] = v ? rmw(buf[i], &x) : loads(buf[i], &x);
        }
    const char *name[2] = {"loads", "read-modify-writes"};
    for (int v = 0; v < 2; v++) {
        double share[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++)
            share[r] = (t[v][0][r] - t[v][1][r]) / t[v][0][r];
        double a = median(t[v][0], rounds), b = median(t[v][1], rounds);
        printf("%-18s 4k %5.1f ns  2m %5.1f ns  saved %5.1f ns  share %.3f (median of %d rounds)\n",
               name[v], a, b, a - b, median(share, rounds), rounds);
    }
    return 0;
}
