/* t_static - the static (.data/.bss) and heap-small ([heap]) categories.
 *
 *   t_static [static=thp-2m|hugetlb-2m|4k|any] [lib=thp-2m|hugetlb-2m|4k|any]
 *            [heap=thp-2m|any]
 *
 * The executable has a 32 MiB .bss array and an 8 MiB initialized .data array
 * (file-backed until the library moves it); libtstatic.so (linked) has a
 * 16 MiB .bss and a 6 MiB .data array. All are written (the .data arrays keep
 * their initial first bytes, checked afterwards: the move must preserve file
 * contents), then 48 MiB of 64-byte mallocs are made from the main thread
 * (glibc serves them from the [heap] VMA). smaps of each range is reported.
 * Expectations: thp-2m: AnonHugePages > 0; hugetlb-2m: Private_Hugetlb > 0;
 * 4k: neither. `lib` concerns libtstatic.so (plan `static B PATH`, PATH =
 * "lib_path" printed here). Prints one JSON line; exit 0 on success. */
#include "tcommon.h"

#define MIB (1u << 20)
static unsigned char big_bss[32 * MIB];
static unsigned char big_data[8 * MIB] = {1, 2, 3};

void tstatic_lib_ranges(unsigned char **bss, size_t *bss_n, unsigned char **data, size_t *data_n);

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

static const char *g_lib_path = "";
static int lib_cb(struct dl_phdr_info *info, size_t size, void *p)
{
    (void)size;
    (void)p;
    if (info->dlpi_name && strstr(info->dlpi_name, "libtstatic.so"))
        g_lib_path = info->dlpi_name;
    return 0;
}

/* The 2 MB-aligned interior of [p, p+n). */
static struct smaps_info interior(const void *p, size_t n)
{
    uintptr_t lo = ((uintptr_t)p + (2u * MIB - 1)) & ~(uintptr_t)(2u * MIB - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(2u * MIB - 1);
    struct smaps_info z = {0, 0, 0, 0, 0, 0};
    return hi > lo ? smaps_range(lo, hi) : z;
}

static int expect(const char *want, struct smaps_info si)
{
    if (!want || strcmp(want, "any") == 0)
        return 1;
    if (strcmp(want, "thp-2m") == 0)
        return si.anon_huge_kb > 0;
    if (strcmp(want, "hugetlb-2m") == 0)
        return si.private_hugetlb_kb > 0;
    if (strcmp(want, "4k") == 0)
        return si.anon_huge_kb == 0 && si.private_hugetlb_kb == 0;
    die("unknown expectation %s", want);
    return 0;
}

int main(int argc, char **argv)
{
    const char *ws = arg_value(argc, argv, "static");
    const char *wl = arg_value(argc, argv, "lib");
    const char *wh = arg_value(argc, argv, "heap");
    unsigned char *lb, *ld;
    size_t lbn, ldn;
    tstatic_lib_ranges(&lb, &lbn, &ld, &ldn);
    dl_iterate_phdr(lib_cb, NULL);
    /* initial contents survived the start-up move */
    int data_ok = big_data[0] == 1 && big_data[1] == 2 && big_data[2] == 3 && big_data[4 * MIB] == 0 &&
                  ld[0] == 7 && ld[2] == 7 && ld[3] == 0;
    memset(big_bss, 0x11, sizeof big_bss);
    memset(big_data + 3, 0x22, sizeof big_data - 3);
    memset(lb, 0x33, lbn);
    memset(ld + 3, 0x44, ldn - 3);
    enum { N = (48 * MIB) / 64 };
    static void *ptrs[N];
    for (long i = 0; i < N; i++) {
        ptrs[i] = malloc(56);
        if (!ptrs[i])
            die("malloc");
        memset(ptrs[i], (int)i, 56);
    }
    struct smaps_info sb = interior(big_bss, sizeof big_bss), sd = interior(big_data, sizeof big_data);
    struct smaps_info slb = interior(lb, lbn), sld = interior(ld, ldn);
    uintptr_t hlo = 0, hhi = 0;
    struct smaps_info hi = {0, 0, 0, 0, 0, 0};
    if (heap_cb(&hlo, &hhi))
        hi = smaps_range(hlo, hhi);
    int ok = data_ok && expect(ws, sb) && expect(ws, sd) && expect(wl, slb) && expect(wl, sld);
    if (wh && strcmp(wh, "thp-2m") == 0)
        ok &= hi.anon_huge_kb > 0;
    for (long i = 0; i < N; i += 4099)
        ok &= ((unsigned char *)ptrs[i])[55] == (unsigned char)i;
    ok &= big_data[3] == 0x22 && big_data[sizeof big_data - 1] == 0x22 && ld[ldn - 1] == 0x44;
    for (long i = 0; i < N; i++)
        free(ptrs[i]);
    printf("{\"pid\":%ld,\"exe\":\"%s\",\"lib_path\":\"%s\",\"data_ok\":%s,", (long)getpid(), exe_path(), g_lib_path,
           data_ok ? "true" : "false");
    print_smaps("bss", big_bss, sizeof big_bss, sb);
    printf(",");
    print_smaps("data", big_data, sizeof big_data, sd);
    printf(",");
    print_smaps("lib_bss", lb, lbn, slb);
    printf(",");
    print_smaps("lib_data", ld, ldn, sld);
    printf(",");
    print_smaps("heap", (void *)hlo, hhi - hlo, hi);
    printf(",\"ok\":%s}\n", ok ? "true" : "false");
    if (!ok) {
        fprintf(stderr, "FAIL: t_static expectations not met\n");
        return 1;
    }
    return 0;
}
