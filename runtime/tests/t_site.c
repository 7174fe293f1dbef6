/* t_site - two call sites allocating 3 MiB each, with known return addresses.
 *
 *   t_site [a=BACKING] [b=BACKING]   (hugetlb-2m|thp-2m|4k|glibc|owned|any)
 *
 * site_a and site_b call malloc(3 MiB) from inline assembly, so the exact
 * return address of each call (the "caller" of the log and of plan `site`
 * lines) is known: it is printed absolute and as an offset from the
 * executable's load bias, e.g. to write
 *     site <exe> <a.caller_off> hugetlb-2m
 * The buffers are written in full; smaps of each is reported. With a=/b=, the
 * backing of each buffer is checked. Prints one JSON line; exit 0 on success. */
#include "tcommon.h"

#define MIB (1u << 20)

/* call malloc with the stack aligned (and clear of the red zone), return the
 * result and the return address of the call. */
#define CALL_MALLOC(n, res, ra)                                                   \
    __asm__ volatile("mov %%rsp, %%rbx\n\t"                                       \
                     "sub $128, %%rsp\n\t"                                        \
                     "and $-16, %%rsp\n\t"                                        \
                     "call malloc@PLT\n"                                          \
                     "1:\n\t"                                                     \
                     "mov %%rbx, %%rsp\n\t"                                       \
                     "lea 1b(%%rip), %1\n\t"                                      \
                     : "=a"(res), "=r"(ra), "+D"(n)                               \
                     :                                                            \
                     : "rbx", "rcx", "rdx", "rsi", "r8", "r9", "r10", "r11",      \
                       "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4",    \
                       "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", \
                       "xmm12", "xmm13", "xmm14", "xmm15")

__attribute__((noinline)) static void *site_a(size_t n, uintptr_t *ra)
{
    void *p;
    uintptr_t r;
    CALL_MALLOC(n, p, r);
    *ra = r;
    return p;
}

__attribute__((noinline)) static void *site_b(size_t n, uintptr_t *ra)
{
    void *p;
    uintptr_t r;
    CALL_MALLOC(n, p, r);
    *ra = r;
    return p;
}

int main(int argc, char **argv)
{
    const size_t n = 3 * MIB;
    uintptr_t ra_a, ra_b;
    unsigned char *a = site_a(n, &ra_a);
    unsigned char *b = site_b(n, &ra_b);
    if (!a || !b)
        die("malloc failed");
    memset(a, 0x5a, n);
    memset(b, 0xa5, n);
    struct smaps_info ia = smaps_range((uintptr_t)a, (uintptr_t)a + n);
    struct smaps_info ib = smaps_range((uintptr_t)b, (uintptr_t)b + n);
    uintptr_t bias = exe_bias();
    int ok_a = backing_ok(arg_value(argc, argv, "a"), a, n, ia);
    int ok_b = backing_ok(arg_value(argc, argv, "b"), b, n, ib);
    int content = a[0] == 0x5a && a[n - 1] == 0x5a && b[0] == 0xa5 && b[n - 1] == 0xa5;
    printf("{\"pid\":%ld,\"exe\":\"%s\",\"load_bias\":\"0x%lx\",", (long)getpid(), exe_path(),
           (unsigned long)bias);
    printf("\"a_caller\":\"0x%lx\",\"a_caller_off\":\"0x%lx\",\"b_caller\":\"0x%lx\","
           "\"b_caller_off\":\"0x%lx\",",
           (unsigned long)ra_a, (unsigned long)(ra_a - bias), (unsigned long)ra_b,
           (unsigned long)(ra_b - bias));
    print_smaps("a", a, n, ia);
    printf(",");
    print_smaps("b", b, n, ib);
    printf(",\"a_ok\":%s,\"b_ok\":%s,\"ok\":%s}\n", ok_a ? "true" : "false", ok_b ? "true" : "false",
           (ok_a && ok_b && content) ? "true" : "false");
    free(a);
    free(b);
    if (!(ok_a && ok_b && content)) {
        fprintf(stderr, "FAIL: t_site expectations not met\n");
        return 1;
    }
    return 0;
}
