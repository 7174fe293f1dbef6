/* bench_floor - what recording one malloc/free pair must cost at least, piece
 * by piece, without the library (single thread, no hooks).
 *
 *   bench_floor [ops=5000000] [dir=/tmp] [reps=5]
 *
 * Each variant runs `ops` malloc(16..1024)/free pairs (the bench_malloc mix,
 * block touched) plus, per call, the work named:
 *   base       nothing (the program alone)
 *   rdtsc      one rdtsc per call
 *   clock      one clock_gettime(CLOCK_MONOTONIC) per call (version 1's clock)
 *   atomic     one atomic fetch-add on a global counter per call (v1's seq)
 *   enc        rdtsc + the log's version-2 encoding into a 256 KiB buffer
 *              (the encoder the library uses, enc.h), buffer reused, no write
 *   enc+write  the same, full buffers written with pwrite to a file in dir
 *   v1         clock_gettime + fetch-add + a 64-byte record, no write
 *   v1+write   the same with pwrite (version 1's per-event work)
 * Prints one JSON object: per variant the median ns per call over `reps`
 * runs (the first, untimed run of each variant warms it up), and the bytes
 * per call of the two encodings. */
#include "tcommon.h"

#include "../src/enc.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <time.h>

#define BUF (256u << 10)

static unsigned char g_buf[BUF + 128];
static size_t g_pos;
static int g_fd = -1;
static uint64_t g_off, g_bytes;
static struct ht_enc g_enc;
static _Atomic uint64_t g_seq;

static uint64_t rdtsc(void)
{
    unsigned lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double now(void) { return (double)mono() / 1e9; }

static void flush(void)
{
    if (g_fd >= 0) {
        if (pwrite(g_fd, g_buf, g_pos, (off_t)g_off) != (ssize_t)g_pos)
            die("pwrite");
        g_off += g_pos;
    }
    g_bytes += g_pos;
    g_pos = 0;
    memset(&g_enc, 0, sizeof g_enc);
}

enum { BASE, RDTSC, CLOCK, ATOMIC, ENC, ENC_WRITE, V1, V1_WRITE, NVAR };
static const char *const names[NVAR] = {"base", "rdtsc", "clock", "atomic", "enc", "enc+write", "v1", "v1+write"};

static __attribute__((noinline)) void event(int var, unsigned kind, uint64_t addr, uint64_t size, uint64_t caller)
{
    switch (var) {
    case BASE:
        break;
    case RDTSC:
        __asm__ volatile("" ::"r"(rdtsc()));
        break;
    case CLOCK:
        __asm__ volatile("" ::"r"(mono()));
        break;
    case ATOMIC:
        atomic_fetch_add_explicit(&g_seq, 1, memory_order_relaxed);
        break;
    case ENC:
    case ENC_WRITE: {
        uint64_t t = rdtsc();
        unsigned char *p = g_buf + g_pos, *e;
        if (kind == HT_K_MALLOC)
            e = ht_enc_event(p, &g_enc, HT_K_MALLOC, 0, 0, 0, t, addr, size, 0, 0, caller);
        else
            e = ht_enc_event(p, &g_enc, HT_K_FREE, 0, 0, 0, t, addr, 0, 0, 0, caller);
        g_pos += (size_t)(e - p);
        if (g_pos + HT_EV_MAX > BUF)
            flush();
        break;
    }
    case V1:
    case V1_WRITE: {
        uint64_t r[8] = {kind | ((uint64_t)1234 << 32),
                         atomic_fetch_add_explicit(&g_seq, 1, memory_order_relaxed) + 1,
                         mono(), addr, size, 0, 0, caller};
        memcpy(g_buf + g_pos, r, 64);
        g_pos += 64;
        if (g_pos + 64 > BUF)
            flush();
        break;
    }
    }
}

static double run(int var, long ops, const char *dir)
{
    char path[4096];
    g_pos = 0;
    g_off = 0;
    g_bytes = 0;
    memset(&g_enc, 0, sizeof g_enc);
    if (var == ENC_WRITE || var == V1_WRITE) {
        snprintf(path, sizeof path, "%s/bench_floor.%ld.bin", dir, (long)getpid());
        g_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (g_fd < 0)
            die("cannot create %s", path);
    }
    void *ring[64] = {0};
    unsigned s = 12345;
    double t0 = now();
    for (long i = 0; i < ops; i++) {
        s = s * 1103515245u + 12345u;
        unsigned k = (s >> 8) & 63;
        size_t n = 16 + ((s >> 14) % 1009);
        event(var, HT_K_FREE, (uint64_t)(uintptr_t)ring[k], 0, 0x555555554a10u);
        free(ring[k]);
        char *p = malloc(n);
        event(var, HT_K_MALLOC, (uint64_t)(uintptr_t)p, n, 0x555555554a3cu);
        p[0] = (char)i;
        ring[k] = p;
    }
    if (g_pos)
        flush();
    double t = now() - t0;
    for (int k = 0; k < 64; k++)
        free(ring[k]);
    if (g_fd >= 0) {
        close(g_fd);
        unlink(path);
        g_fd = -1;
    }
    return t * 1e9 / (double)(2 * ops);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    long ops = 5000000;
    int reps = 5;
    const char *dir = "/tmp", *v;
    if ((v = arg_value(argc, argv, "ops")))
        ops = atol(v);
    if ((v = arg_value(argc, argv, "reps")))
        reps = atoi(v);
    if ((v = arg_value(argc, argv, "dir")))
        dir = v;
    if (ops < 1 || reps < 1 || reps > 100)
        die("bad arguments");
    double res[NVAR][100];
    double bytes_enc = 0, bytes_v1 = 0;
    for (int var = 0; var < NVAR; var++)
        run(var, ops / 10 + 1, dir); /* warm-up */
    /* Interleaved: one run of each variant per round. */
    for (int r = 0; r < reps; r++)
        for (int var = 0; var < NVAR; var++) {
            res[var][r] = run(var, ops, dir);
            if (var == ENC)
                bytes_enc = (double)g_bytes / (double)(2 * ops);
            if (var == V1)
                bytes_v1 = (double)g_bytes / (double)(2 * ops);
        }
    printf("{\"ops\":%ld,\"reps\":%d,\"ns_per_call\":{", ops, reps);
    for (int var = 0; var < NVAR; var++) {
        qsort(res[var], (size_t)reps, sizeof(double), cmp_d);
        printf("%s\"%s\":%.2f", var ? "," : "", names[var], res[var][reps / 2]);
    }
    printf("},\"bytes_per_call\":{\"v2\":%.2f,\"v1\":%.2f}}\n", bytes_enc, bytes_v1);
    return 0;
}
