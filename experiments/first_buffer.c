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
#include "chase256.h"

#define BUFS 5
#define ROUNDS 7

static int cmp(const void *p, const void *q)
{
    double d = *(const double *)p - *(const double *)q;
    return (d > 0) - (d < 0);
}

int main(int argc, char **argv)
{
    int throwaway = argc > 1 && atoi(argv[1]) == 1;
    shuffle();
    double touch[BUFS + 1];
    if (throwaway) {
        double f;
        char *m;
        link_nodes(buffer(0, &m, &f));
        printf("throw-away buffer first: %.0f ns per 4 KB first touch (kept, not measured)\n", f);
    }
    char *b[BUFS + 1];
    for (int i = 0; i <= BUFS; i++) {
        char *m;
        b[i] = buffer(i == BUFS, &m, &touch[i]);
        link_nodes(b[i]);
    }
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
