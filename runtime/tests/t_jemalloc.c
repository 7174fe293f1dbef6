/* t_jemalloc - a program linked against jemalloc that uses jemalloc's
 * extended API on pointers it got from malloc (which, under the library in
 * apply mode, may be owned blocks): sallocx, rallocx (with MALLOCX_ZERO),
 * xallocx, sdallocx, dallocx; and on pointers jemalloc made itself (mallocx).
 *
 *   t_jemalloc [expect=owned|any]
 *
 * expect=owned: the 8 MiB malloc must be an owned block (2 MB aligned; the
 * converse proves nothing: jemalloc's large extents may be 2 MB aligned too,
 * the summary tells what was owned).
 * Without the library's interposition of the extended API, handing an owned
 * block to jemalloc's sdallocx/dallocx/rallocx crashes. Prints one JSON line;
 * exit 0 when every check passed. */
#include "tcommon.h"

/* jemalloc's extended API (no -dev headers installed: declared here) */
void *mallocx(size_t size, int flags);
void *rallocx(void *ptr, size_t size, int flags);
size_t xallocx(void *ptr, size_t size, size_t extra, int flags);
size_t sallocx(const void *ptr, int flags);
void dallocx(void *ptr, int flags);
void sdallocx(void *ptr, size_t size, int flags);
#define MALLOCX_ZERO 0x40
#define MALLOCX_LG_ALIGN(la) (la)

#define MIB ((size_t)1 << 20)

int main(int argc, char **argv)
{
    const char *want = arg_value(argc, argv, "expect");
    int ok = 1;
    unsigned char *p = malloc(8 * MIB);
    unsigned char *q = malloc(100);
    if (!p || !q)
        die("malloc");
    int owned = ((uintptr_t)p & (2 * MIB - 1)) == 0;
    memset(p, 0x1a, 8 * MIB);
    memset(q, 0x2b, 100);
    ok &= sallocx(p, 0) >= 8 * MIB && sallocx(q, 0) >= 100;
    unsigned char *r = rallocx(p, 12 * MIB, 0);
    ok &= r != NULL && r[0] == 0x1a && r[8 * MIB - 1] == 0x1a;
    memset(r + 8 * MIB, 0x1b, 4 * MIB);
    unsigned char *z = rallocx(r, 16 * MIB, MALLOCX_ZERO);
    ok &= z != NULL && z[12 * MIB - 1] == 0x1b && z[12 * MIB] == 0 && z[16 * MIB - 1] == 0;
    ok &= xallocx(z, 20 * MIB, 0, 0) >= 16 * MIB;
    /* an aligned rallocx down below the threshold: leaves the library's blocks */
    unsigned char *s = rallocx(z, 1000, MALLOCX_LG_ALIGN(6));
    ok &= s != NULL && ((uintptr_t)s & 63) == 0 && s[999] == 0x1a;
    sdallocx(s, 1000, 0);
    unsigned char *p2 = malloc(4 * MIB);
    memset(p2, 3, 4 * MIB);
    dallocx(p2, 0);
    unsigned char *p3 = malloc(3 * MIB);
    sdallocx(p3, 3 * MIB, 0);
    /* jemalloc's own pointers keep going to jemalloc */
    unsigned char *m = mallocx(8 * MIB, 0);
    ok &= m != NULL && sallocx(m, 0) >= 8 * MIB;
    memset(m, 4, 8 * MIB);
    unsigned char *m2 = rallocx(m, 10 * MIB, 0);
    ok &= m2 != NULL && m2[8 * MIB - 1] == 4;
    dallocx(m2, 0);
    unsigned char *q2 = rallocx(q, 300, 0);
    ok &= q2 != NULL && q2[99] == 0x2b;
    sdallocx(q2, 300, 0);
    if (want && strcmp(want, "owned") == 0)
        ok &= owned;
    printf("{\"pid\":%ld,\"owned\":%s,\"ok\":%s}\n", (long)getpid(), owned ? "true" : "false", ok ? "true" : "false");
    if (!ok) {
        fprintf(stderr, "FAIL: t_jemalloc checks failed\n");
        return 1;
    }
    return 0;
}
