/* placement_draws.c - where a 4 KB buffer lands decides its walk cost on a KVM guest
 * (docs/calibrate.md, "Fresh memory"). Two modes:
 *
 *   cc -O2 -Wall -Wextra -Werror -o /tmp/placement_draws experiments/placement_draws.c
 *   /tmp/placement_draws maps N     # N fresh 256 MiB mappings in this one process,
 *                                   # each chased on 4 KB pages and on THP, unmapped
 *   /tmp/placement_draws one 4k|thp # one buffer, this process's first large one: the
 *                                   # chase, independent loads and read-modify-writes
 *                                   # (the loops `hugetune calibrate` times for the
 *                                   # walk overlap); experiments/fresh_memory.py runs it
 *                                   # beside hugetune-work as the measured runs are run
 *
 * "maps": per mapping, ns per chase step on 4 KB pages (MADV_NOHUGEPAGE), on THP
 * (MADV_HUGEPAGE) and their difference, the walk (every step of a 4 KB chase over
 * 256 MiB misses the TLBs, no step of the THP one does). On the AMD EPYC guest the
 * difference ranged 58-146 ns over eight mappings of one process, 127-195 ns in a
 * run an hour later: each mapping is a draw. "one": median of three of each, ns per
 * step or access. */
#include "chase256.h"

#define BITS 22 /* 4 Mi lines of 64 bytes */
#define ACCESSES 8000000L

static uint64_t gen = 12345;

static double independent(char *b, int write)
{
    uint64_t sum = 0;
    double t0 = now();
    for (long k = 0; k < ACCESSES; k++) {
        gen = gen * 6364136223846793005ULL + 1442695040888963407ULL;
        volatile uint64_t *p = (volatile uint64_t *)(b + ((gen >> (64 - BITS)) << 6) + 8);
        if (write)
            *p = *p + 1;
        else
            sum += *p;
    }
    double t = (now() - t0) * 1e9 / ACCESSES;
    if (sum == 1) /* never: keeps the loads */
        puts("");
    return t;
}

static double median3(double a, double b, double c)
{
    if (a > b) {
        double t = a;
        a = b;
        b = t;
    }
    return c < a ? a : (c > b ? b : c);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "maps") == 0) {
        int n = atoi(argv[2]);
        shuffle();
        for (int k = 0; k < n; k++) {
            double t[2];
            for (int huge = 0; huge < 2; huge++) {
                double touch;
                char *m, *b = buffer(huge, &m, &touch);
                link_nodes(b);
                t[huge] = chase(b);
                munmap(m, LEN + (2UL << 20));
            }
            printf("mapping %d: 4k %.1f thp %.1f walk %.1f ns\n", k, t[0], t[1], t[0] - t[1]);
        }
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "one") == 0) {
        int huge = strcmp(argv[2], "thp") == 0;
        double touch;
        char *m, *b = buffer(huge, &m, &touch); /* first: before the order array */
        shuffle();
        link_nodes(b);
        double c[3], l[3], w[3];
        for (int r = 0; r < 3; r++) {
            c[r] = chase(b);
            l[r] = independent(b, 0);
            w[r] = independent(b, 1);
        }
        printf("%s chase %.1f loads %.1f rmw %.1f\n", huge ? "thp" : "4k",
               median3(c[0], c[1], c[2]), median3(l[0], l[1], l[2]), median3(w[0], w[1], w[2]));
        return 0;
    }
    fprintf(stderr, "usage: placement_draws maps N | one 4k|thp\n");
    return 2;
}
