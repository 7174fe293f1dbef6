/* unit_enc.c - the allocation log's event encoding (enc.h, formats.md §2.4):
 * round trips through an independent decoder written from the format text,
 * exact bytes of known events, and sizes. */
#include "enc.h"
#include "unit.h"

#include <stdint.h>
#include <stdlib.h>

struct ev {
    unsigned kind, flags;
    uint64_t seq, t, addr, size, arg, arg2, caller;
};

static unsigned fields(unsigned kind)
{
    return ht_kind_fields(kind);
}

static uint64_t unzz(uint64_t v) { return (v >> 1) ^ (0 - (v & 1)); }

struct dec {
    uint64_t prev_seq, prev_time, prev_addr, last_caller[16];
};

/* Decodes one event at p (n bytes available); returns bytes used or 0. */
static size_t decode(const unsigned char *p, size_t n, struct dec *d, int with_seq, struct ev *e)
{
    size_t q = 1;
    if (n < 1)
        return 0;
    e->kind = p[0] & 63;
    e->flags = p[0] & 0x40;
    int longt = (p[0] & 0x80) != 0;
    uint64_t dt = 0;
    if (!longt) {
        if (n < 3)
            return 0;
        dt = (uint64_t)p[1] | ((uint64_t)p[2] << 8);
        q = 3;
    }
    unsigned m = fields(e->kind);
    unsigned nf = (unsigned)with_seq + (unsigned)longt + 1 + !!(m & HT_F_SIZE) + !!(m & HT_F_ARG) +
                  !!(m & HT_F_ARG2) + !!(m & HT_F_CALLER);
    size_t nib = q;
    q += (nf + 1) / 2;
    uint64_t v[7] = {0};
    for (unsigned i = 0; i < nf; i++) {
        unsigned w = (p[nib + i / 2] >> (4 * (i % 2))) & 15;
        if (w > 8 || q + w > n)
            return 0;
        for (unsigned b = 0; b < w; b++)
            v[i] |= (uint64_t)p[q + b] << (8 * b);
        q += w;
    }
    unsigned i = 0;
    e->seq = with_seq ? (d->prev_seq += unzz(v[i++])) : 0;
    if (longt)
        dt = unzz(v[i++]);
    e->t = d->prev_time += dt;
    e->addr = d->prev_addr += unzz(v[i++]);
    e->size = m & HT_F_SIZE ? v[i++] : 0;
    e->arg = m & HT_F_ARG ? v[i++] : 0;
    e->arg2 = m & HT_F_ARG2 ? v[i++] : 0;
    e->caller = m & HT_F_CALLER ? (d->last_caller[e->kind & 15] += unzz(v[i++])) : 0;
    return q;
}

static uint64_t rnd64(void)
{
    uint64_t r = 0;
    for (int i = 0; i < 4; i++)
        r = (r << 16) ^ (uint64_t)(rand() & 0xffff);
    /* mostly small or near previous values, sometimes anything */
    switch (rand() % 4) {
    case 0: return r & 0xff;
    case 1: return r & 0xffffff;
    case 2: return r & 0xffffffffffull;
    default: return r;
    }
}

static const unsigned kinds[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 20, 21, 22, 23, 24, 25, 26};

/* ht_enc_event needs constant kinds to fold; dispatch through a switch. */
static unsigned char *enc_any(unsigned char *p, struct ht_enc *st, const struct ev *e, int with_seq)
{
#define K(k)                                                                                  \
    case k:                                                                                   \
        return with_seq ? ht_enc_event(p, st, k, e->flags, 1, e->seq, e->t, e->addr, e->size,  \
                                       e->arg, e->arg2, e->caller)                            \
                        : ht_enc_event(p, st, k, e->flags, 0, 0, e->t, e->addr, e->size,      \
                                       e->arg, e->arg2, e->caller);
    switch (e->kind) {
        K(1) K(2) K(3) K(4) K(5) K(6) K(7) K(8) K(9) K(10) K(11) K(12) K(13)
        K(20) K(21) K(22) K(23) K(24) K(25) K(26)
    }
#undef K
    return p;
}

static void test_round_trip(void)
{
    enum { N = 20000 };
    static unsigned char buf[N * HT_EV_MAX + 8];
    static struct ev in[N];
    for (int with_seq = 0; with_seq <= 1; with_seq++) {
        struct ht_enc st;
        memset(&st, 0, sizeof st);
        unsigned char *p = buf;
        uint64_t t = 1000;
        for (int i = 0; i < N; i++) {
            struct ev *e = &in[i];
            unsigned m;
            e->kind = kinds[rand() % (sizeof kinds / sizeof kinds[0])];
            m = fields(e->kind);
            e->flags = rand() % 2 ? HT_EVF_PREINIT : 0;
            e->seq = rand() % 8 ? (uint64_t)i + 1 : rnd64();
            t += rand() % 16 ? (uint64_t)(rand() % 300) : rnd64(); /* long times too */
            e->t = rand() % 50 ? t : t - 5;                       /* and going back */
            e->addr = rnd64();
            e->size = m & HT_F_SIZE ? rnd64() : 0;
            e->arg = m & HT_F_ARG ? rnd64() : 0;
            e->arg2 = m & HT_F_ARG2 ? rnd64() : 0;
            e->caller = m & HT_F_CALLER ? (rand() % 4 ? 0x555555554000ull + (uint64_t)(rand() % 4) * 16 : rnd64()) : 0;
            unsigned char *q = enc_any(p, &st, e, with_seq);
            CHECK(q > p && (size_t)(q - p) <= HT_EV_MAX - 8);
            p = q;
        }
        struct dec d;
        memset(&d, 0, sizeof d);
        size_t off = 0, len = (size_t)(p - buf);
        int bad = 0;
        for (int i = 0; i < N && !bad; i++) {
            struct ev o;
            size_t used = decode(buf + off, len - off, &d, with_seq, &o);
            const struct ev *e = &in[i];
            if (!used || o.kind != e->kind || o.flags != e->flags || o.t != e->t || o.addr != e->addr ||
                o.size != e->size || o.arg != e->arg || o.arg2 != e->arg2 || o.caller != e->caller ||
                (with_seq && o.seq != e->seq)) {
                fprintf(stderr, "event %d (kind %u) does not round-trip\n", i, e->kind);
                bad = 1;
            }
            off += used;
        }
        CHECK(!bad);
        CHECK(off == len);
    }
}

static void test_known_bytes(void)
{
    unsigned char b[2 * HT_EV_MAX];
    struct ht_enc st;
    memset(&st, 0, sizeof st);
    /* MALLOC at t=0x100, addr 0x1000, size 100, caller 0x40: */
    unsigned char *e = ht_enc_event(b, &st, HT_K_MALLOC, 0, 0, 0, 0x100, 0x1000, 100, 0, 0, 0x40);
    /* opcode 1, dt 0x0100 (2 bytes), nibbles: addr zz 0x2000 (2 bytes), size 1, caller zz 0x80 (1)
     * -> 0x12, 0x01, then 00 20, 64, 80 */
    const unsigned char want[] = {0x01, 0x00, 0x01, 0x12, 0x01, 0x00, 0x20, 0x64, 0x80};
    CHECK((size_t)(e - b) == sizeof want && memcmp(b, want, sizeof want) == 0);
    /* FREE of the same block 5 ticks later from another caller: addr delta 0, width 0. */
    unsigned char *f = ht_enc_event(e, &st, HT_K_FREE, 0, 0, 0, 0x105, 0x1000, 0, 0, 0, 0x48);
    const unsigned char want2[] = {0x04, 0x05, 0x00, 0x10, 0x90};
    CHECK((size_t)(f - e) == sizeof want2 && memcmp(e, want2, sizeof want2) == 0);
    /* Same caller again: caller delta 0, nothing stored. */
    unsigned char *g = ht_enc_event(f, &st, HT_K_FREE, 0, 0, 0, 0x106, 0x1000, 0, 0, 0, 0x48);
    CHECK(g - f == 4);
    /* A gap of 2^16 ticks: long time (flag 0x80), time as a field. */
    unsigned char *h = ht_enc_event(g, &st, HT_K_FREE, HT_EVF_PREINIT, 0, 0, 0x106 + 65536, 0x1000, 0, 0, 0, 0x48);
    CHECK(g[0] == (HT_K_FREE | 0x40 | 0x80));
    CHECK(g[1] == 0x03); /* time: zz(65536) = 0x20000, 3 bytes; addr width 0 */
    CHECK(h - g == 2 + 1 + 3);
    /* Widths: 0 for 0, 8 for the top bit. */
    CHECK(ht_width(0) == 0 && ht_width(1) == 1 && ht_width(255) == 1 && ht_width(256) == 2);
    CHECK(ht_width(UINT64_MAX) == 8 && ht_width(1ull << 56) == 8 && ht_width((1ull << 56) - 1) == 7);
    CHECK(ht_zz(0) == 0 && ht_zz((uint64_t)-1) == 1 && ht_zz(1) == 2 && ht_zz((uint64_t)INT64_MIN) == UINT64_MAX);
}

int main(void)
{
    srand(12345);
    test_known_bytes();
    test_round_trip();
    return unit_done("unit_enc");
}
