/* t_static - the static (.bss) and heap-small ([heap]) categories.
 *
 *   t_static [static=thp-2m|4k|any] [heap=thp-2m|any]
 *
 * Writes all of a 32 MiB .bss array, then makes 48 MiB of 64-byte mallocs from
 * the main thread (glibc serves them from the [heap] VMA) and writes them.
 * Reports smaps of the array range and of the [heap] VMA. With static=thp-2m
 * the array must show AnonHugePages > 0 (plan `static thp-2m`); with
 * heap=thp-2m the heap must (plan `heap-small thp-2m` and
 * GLIBC_TUNABLES=glibc.malloc.hugetlb=1). Prints one JSON line; exit 0 on
 * success. */
#include "tcommon.h"

#define MIB (1u << 20)
static unsigned char big_bss[32 * MIB];

static int heap_cb(uintptr_t *lo, uintptr_t *hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (strstr(line, "[heap]") && sscanf(line, "%lx-%lx", &a, &b) == 2) {
            *lo = a;
            *hi = b;
            found = 1;
        }
    }
    if (f)
        fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    const char *ws = arg_value(argc, argv, "static");
    const char *wh = arg_value(argc, argv, "heap");
    memset(big_bss, 0x11, sizeof big_bss);
    enum { N = (48 * MIB) / 64 };
    static void *ptrs[N];
    for (long i = 0; i < N; i++) {
        ptrs[i] = malloc(56);
        if (!ptrs[i])
            die("malloc");
        memset(ptrs[i], (int)i, 56);
    }
    struct smaps_info si = smaps_range((uintptr_t)big_bss, (uintptr_t)big_bss + sizeof big_bss);
    uintptr_t hlo = 0, hhi = 0;
    struct smaps_info hi = {0, 0, 0, 0, 0};
    if (heap_cb(&hlo, &hhi))
        hi = smaps_range(hlo, hhi);
    int ok = 1;
    if (ws && strcmp(ws, "thp-2m") == 0)
        ok &= si.anon_huge_kb > 0;
    if (ws && strcmp(ws, "4k") == 0)
        ok &= si.anon_huge_kb == 0;
    if (wh && strcmp(wh, "thp-2m") == 0)
        ok &= hi.anon_huge_kb > 0;
    for (long i = 0; i < N; i += 4099)
        ok &= ((unsigned char *)ptrs[i])[55] == (unsigned char)i;
    for (long i = 0; i < N; i++)
        free(ptrs[i]);
    printf("{\"pid\":%ld,", (long)getpid());
    print_smaps("bss", big_bss, sizeof big_bss, si);
    printf(",");
    print_smaps("heap", (void *)hlo, hhi - hlo, hi);
    printf(",\"ok\":%s}\n", ok ? "true" : "false");
    if (!ok) {
        fprintf(stderr, "FAIL: t_static expectations not met\n");
        return 1;
    }
    return 0;
}
