/* t_apply - what apply mode does to large heap allocations.
 *
 *   t_apply [expect=hugetlb-2m|thp-2m|4k|glibc|owned|any] [layout=head-tail|round-up]
 *
 * big1 = malloc(8 MiB + 1), big2 = malloc(16 MiB), both fully written; smaps
 * of both is reported (summed over the VMAs overlapping each buffer). Then
 * big1 is realloc'ed to 12 MiB (content kept, smaps reported) and to 64 KiB
 * (below the threshold; content kept); a 100 KiB glibc buffer is realloc'ed to
 * 4 MiB (content kept, smaps reported); malloc_usable_size is checked; all is
 * freed. With expect=..., big1/big2/grown are also checked for that backing
 * (hugetlb-2m: Private_Hugetlb == the head's 2 MB pages, 8192 kB for big1 whose
 * last byte sits on a 4 KB page; with layout=round-up whole pages, 10240 kB).
 * malloc_usable_size must be the block's exact mapped extent for owned blocks
 * (head + tail) and at least the request otherwise.
 * end=_exit|_Exit leaves through that call instead of returning from main
 * (no destructors run: the library's _exit hook writes the summary).
 * Prints one JSON line; exit 0 when every check passed. */
#include "tcommon.h"

#include <malloc.h>

#define MIB (1u << 20)

static void fill(unsigned char *p, size_t n, unsigned char v)
{
    memset(p, v, n);
}

static int check(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i += 4093)
        if (p[i] != v)
            return 0;
    return n == 0 || p[n - 1] == v;
}

int main(int argc, char **argv)
{
    const char *want = arg_value(argc, argv, "expect");
    const char *lay = arg_value(argc, argv, "layout");
    g_round_up = lay && strcmp(lay, "round-up") == 0;
    int ok = 1;
    const size_t s1 = 8 * MIB + 1, s2 = 16 * MIB, s3 = 12 * MIB, s4 = 64 << 10;
    const size_t g1 = 100 << 10, g2 = 4 * MIB;

    unsigned char *b1 = malloc(s1);
    unsigned char *b2 = malloc(s2);
    if (!b1 || !b2)
        die("malloc failed");
    fill(b1, s1, 0xA1);
    fill(b2, s2, 0xB2);
    struct smaps_info i1 = smaps_range((uintptr_t)b1, (uintptr_t)b1 + s1);
    struct smaps_info i2 = smaps_range((uintptr_t)b2, (uintptr_t)b2 + s2);
    int usable_ok = malloc_usable_size(b1) >= s1 && malloc_usable_size(b2) >= s2;
    /* owned with a known backing: the exact extent (head + 4 KB tail) */
    size_t u1 = malloc_usable_size(b1);
    if (want && (strcmp(want, "hugetlb-2m") == 0 || strcmp(want, "thp-2m") == 0))
        usable_ok &= u1 == (g_round_up ? 10 * MIB : 8 * MIB + 4096);
    if (want && strcmp(want, "4k") == 0)
        usable_ok &= u1 == 8 * MIB + 4096;
    int big1_backing_ok = backing_ok(want, b1, s1, i1);
    int big2_backing_ok = backing_ok(want, b2, s2, i2);

    unsigned char *b1b = realloc(b1, s3);
    if (!b1b)
        die("realloc to 12 MiB failed");
    int grow_ok = check(b1b, s1, 0xA1);
    fill(b1b + s1, s3 - s1, 0xC3);
    struct smaps_info i3 = smaps_range((uintptr_t)b1b, (uintptr_t)b1b + s3);
    int grown_backing_ok = backing_ok(want, b1b, s3, i3);
    usable_ok &= malloc_usable_size(b1b) >= s3;

    unsigned char *b1c = realloc(b1b, s4);
    if (!b1c)
        die("realloc to 64 KiB failed");
    int shrink_ok = check(b1c, s4, 0xA1);
    usable_ok &= malloc_usable_size(b1c) >= s4;
    /* below the threshold: glibc memory again (not 2 MB aligned) */
    int shrink_glibc = ((uintptr_t)b1c & (2 * MIB - 1)) != 0;

    unsigned char *g = malloc(g1);
    if (!g)
        die("malloc 100 KiB failed");
    for (size_t i = 0; i < g1; i++)
        g[i] = (unsigned char)(i * 7);
    unsigned char *gg = realloc(g, g2);
    if (!gg)
        die("realloc to 4 MiB failed");
    int up_ok = 1;
    for (size_t i = 0; i < g1; i++)
        if (gg[i] != (unsigned char)(i * 7)) {
            up_ok = 0;
            break;
        }
    fill(gg + g1, g2 - g1, 0xD4);
    struct smaps_info i4 = smaps_range((uintptr_t)gg, (uintptr_t)gg + g2);
    int up_backing_ok = backing_ok(want, gg, g2, i4);
    usable_ok &= malloc_usable_size(gg) >= g2 && malloc_usable_size(NULL) == 0;

    int b2_ok = check(b2, s2, 0xB2);
    free(b1c);
    free(b2);
    free(gg);
    free(NULL);

    ok = grow_ok && shrink_ok && up_ok && usable_ok && b2_ok && shrink_glibc &&
         big1_backing_ok && big2_backing_ok && grown_backing_ok && up_backing_ok;
    printf("{\"pid\":%ld,\"expect\":\"%s\",\"usable_big1\":%zu,", (long)getpid(), want ? want : "any", u1);
    print_smaps("big1", b1, s1, i1);
    printf(",");
    print_smaps("big2", b2, s2, i2);
    printf(",");
    print_smaps("grown", b1b, s3, i3);
    printf(",");
    print_smaps("glibc_grown", gg, g2, i4);
    printf(",\"shrunk\":\"%p\",\"realloc_grow_ok\":%s,\"realloc_shrink_ok\":%s,"
           "\"shrunk_is_glibc\":%s,\"glibc_to_large_ok\":%s,\"usable_size_ok\":%s,"
           "\"backing_ok\":%s,\"ok\":%s}\n",
           (void *)b1c, grow_ok ? "true" : "false", shrink_ok ? "true" : "false",
           shrink_glibc ? "true" : "false", up_ok ? "true" : "false", usable_ok ? "true" : "false",
           (big1_backing_ok && big2_backing_ok && grown_backing_ok && up_backing_ok) ? "true" : "false",
           ok ? "true" : "false");
    if (!ok)
        fprintf(stderr, "FAIL: t_apply checks failed (see JSON)\n");
    const char *end = arg_value(argc, argv, "end");
    fflush(stdout);
    if (end && !strcmp(end, "_exit"))
        _exit(ok ? 0 : 1);
    if (end && !strcmp(end, "_Exit"))
        _Exit(ok ? 0 : 1);
    return ok ? 0 : 1;
}
