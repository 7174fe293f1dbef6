/* t_static1g - static data on the 1 GB layout (plan `static hugetlb-1g`).
 *
 *   t_static1g
 *
 * Built with -mcmodel=medium: a 2 GiB + 8 MiB .bss array (in .lbss), whose
 * 2 MB-aligned interior always holds at least one whole 1 GB-aligned
 * gigabyte wherever the loader puts it, and a 4 MiB initialized array (in
 * .ldata, file-backed until the library moves it) whose first bytes must
 * survive the start-up move. Only one byte in every 64 MiB of the .bss is
 * written (the test's memory stays small: untouched .bss is never copied).
 * Prints one JSON line: the 1 GB-aligned part of the .bss interior
 * (giga_lo, giga_hi) and smaps of it and of the whole array; exit 0 when the
 * data read back intact. */
#include "tcommon.h"

#define MIB (1ul << 20)
#define GIB (1ul << 30)
static unsigned char giant_bss[2 * GIB + 8 * MIB];
static unsigned char giant_data[4 * MIB] = {1, 2, 3};

int main(void)
{
    /* Initial contents survived the start-up move; the .bss reads zero. */
    int data_ok = giant_data[0] == 1 && giant_data[1] == 2 && giant_data[2] == 3 && giant_data[2 * MIB] == 0;
    for (size_t off = 0; off < sizeof giant_bss; off += 64 * MIB)
        data_ok &= giant_bss[off] == 0;
    for (size_t off = 0; off < sizeof giant_bss; off += 64 * MIB)
        giant_bss[off] = (unsigned char)(off >> 26) | 1;
    giant_data[sizeof giant_data - 1] = 0x55;
    int ok = data_ok && giant_data[sizeof giant_data - 1] == 0x55;
    for (size_t off = 0; off < sizeof giant_bss; off += 64 * MIB)
        ok &= giant_bss[off] == ((unsigned char)(off >> 26) | 1);
    uintptr_t lo = ((uintptr_t)giant_bss + 2 * MIB - 1) & ~(2 * MIB - 1);
    uintptr_t hi = ((uintptr_t)giant_bss + sizeof giant_bss) & ~(2 * MIB - 1);
    uintptr_t glo = (lo + GIB - 1) & ~(GIB - 1), ghi = hi & ~(GIB - 1);
    if (ghi <= glo)
        die("no whole gigabyte in the .bss interior [%#lx, %#lx)", (unsigned long)lo, (unsigned long)hi);
    /* Touch the gigabyte's first page so that smaps shows its page size. */
    ok &= *(volatile unsigned char *)glo == (((glo - (uintptr_t)giant_bss) % (64 * MIB)) == 0
                                                 ? ((unsigned char)((glo - (uintptr_t)giant_bss) >> 26) | 1)
                                                 : 0);
    struct smaps_info sg = smaps_range(glo, ghi), sb = smaps_range((uintptr_t)giant_bss, hi);
    printf("{\"pid\":%ld,\"data_ok\":%s,\"giga_lo\":\"%#lx\",\"giga_hi\":\"%#lx\",", (long)getpid(),
           data_ok ? "true" : "false", (unsigned long)glo, (unsigned long)ghi);
    print_smaps("giga", (void *)glo, ghi - glo, sg);
    printf(",");
    print_smaps("bss", giant_bss, sizeof giant_bss, sb);
    printf(",\"ok\":%s}\n", ok ? "true" : "false");
    if (!ok) {
        fprintf(stderr, "FAIL: t_static1g data not intact\n");
        return 1;
    }
    return 0;
}
