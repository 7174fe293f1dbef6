/* chase256.h - what experiments/first_buffer.c and placement_draws.c share: a
 * 2 MB-aligned 256 MiB buffer on 4 KB pages or THP, one random cycle through its
 * 64-byte nodes, and the timed dependent chase over it (the walk `hugetune
 * calibrate` measures). Each program includes it once; errors end the program. */
#ifndef CHASE256_H
#define CHASE256_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define LEN (256UL << 20)
#define NODES (LEN / 64)
#define STEPS 1500000L

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t *order; /* the cycle: node order[i] links to order[i + 1] */

/* A random order of the nodes (Fisher-Yates with xorshift64, fixed seed). */
static void shuffle(void)
{
    order = malloc(NODES * sizeof *order);
    if (!order) {
        perror("chase256: malloc");
        exit(1);
    }
    for (uint64_t i = 0; i < NODES; i++)
        order[i] = i;
    uint64_t x = 88172645463325252ULL;
    for (uint64_t i = NODES - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t j = x % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* A 2 MB-aligned 256 MiB buffer (its mapping, LEN + 2 MiB long, in *map),
 * touched; *touch_ns: the first touch's time per 4 KB. */
static char *buffer(int huge, char **map, double *touch_ns)
{
    char *m = mmap(NULL, LEN + (2UL << 20), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("chase256: mmap");
        exit(1);
    }
    char *b = (char *)(((uintptr_t)m + (2UL << 20) - 1) & ~((uintptr_t)(2UL << 20) - 1));
    if (madvise(b, LEN, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) {
        perror("chase256: madvise");
        exit(1);
    }
    double t0 = now();
    memset(b, 0, LEN);
    *touch_ns = (now() - t0) * 1e9 / (LEN / 4096);
    *map = m;
    return b;
}

/* Links the nodes of `b` into the cycle `order` gives. */
static void link_nodes(char *b)
{
    for (uint64_t i = 0; i < NODES; i++)
        *(uint64_t *)(b + order[i] * 64) = order[(i + 1) % NODES] * 64;
}

/* STEPS / 4 untimed steps, then STEPS timed ones: ns per timed step. */
static double chase(const char *b)
{
    uint64_t at = order[0] * 64;
    for (long k = 0; k < STEPS / 4; k++)
        at = *(const volatile uint64_t *)(b + at);
    double t0 = now();
    for (long k = 0; k < STEPS; k++)
        at = *(const volatile uint64_t *)(b + at);
    double t = (now() - t0) * 1e9 / STEPS;
    if (at == 1) /* never: keeps the chase */
        puts("");
    return t;
}

#endif
