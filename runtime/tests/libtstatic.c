/* libtstatic.so - a library with large .data and .bss, for t_static (plan
 * `static B MODULE`). */
#include <stddef.h>

unsigned char tstatic_lib_bss[16u << 20];
unsigned char tstatic_lib_data[6u << 20] = {7, 7, 7};

void tstatic_lib_ranges(unsigned char **bss, size_t *bss_n, unsigned char **data, size_t *data_n)
{
    *bss = tstatic_lib_bss;
    *bss_n = sizeof tstatic_lib_bss;
    *data = tstatic_lib_data;
    *data_n = sizeof tstatic_lib_data;
}
