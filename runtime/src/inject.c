/* inject.c - HUGETUNE_INJECT spec parser (see inject.h). Pure. */
#include "inject.h"

#include "fmt.h"

#include <string.h>

static const char *const names[HT_INJ_N] = {"hugetlb", "thp", "mmap", "mremap", "munmap", "madvise", "uffd"};

const char *ht_inject_kind_name(int kind) { return kind >= 0 && kind < HT_INJ_N ? names[kind] : "?"; }

static int bad(struct ht_inject *in, const char *why, const char *s, size_t n)
{
    struct ht_buf b;
    memset(in->every, 0, sizeof in->every);
    hb_init(&b, in->error, sizeof in->error);
    hb_puts(&b, "bad HUGETUNE_INJECT (nothing injected): ");
    hb_puts(&b, why);
    if (s) {
        hb_puts(&b, ": ");
        hb_putn(&b, s, n > 40 ? 40 : n);
    }
    return -1;
}

int ht_inject_parse(struct ht_inject *in, const char *spec)
{
    memset(in, 0, sizeof *in);
    if (!spec || !*spec)
        return 0;
    const char *s = spec;
    for (;;) {
        const char *e = s;
        while (*e && *e != ',')
            e++;
        size_t n = (size_t)(e - s);
        const char *colon = memchr(s, ':', n);
        if (!colon)
            return bad(in, "expected KIND:N", s, n);
        size_t kn = (size_t)(colon - s);
        int kind = -1;
        for (int k = 0; k < HT_INJ_N; k++)
            if (strlen(names[k]) == kn && memcmp(names[k], s, kn) == 0)
                kind = k;
        if (kind < 0)
            return bad(in, "unknown kind (hugetlb, thp, mmap, mremap, munmap, madvise, uffd)", s, n);
        if (in->every[kind])
            return bad(in, "kind given twice", s, n);
        uint64_t v;
        if (ht_parse_u64(colon + 1, n - kn - 1, 10, &v) || v == 0 || v > (1u << 31))
            return bad(in, "N must be 1..2^31", s, n);
        in->every[kind] = (uint32_t)v;
        if (!*e)
            break;
        s = e + 1;
    }
    return 0;
}
