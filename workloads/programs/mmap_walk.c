/* mmap_walk.c - a real program with its own mmap allocator, for `hugetune bench
 * programs` and crates/hugetune/tests/real_programs.rs: records of 64 bytes are
 * carved by a bump pointer out of 32 MiB chunks that the program maps itself
 * (no malloc for its data, as a JVM, a Go runtime or a database buffer pool
 * does), found through an index (also carved from the chunks), and walked at
 * random: two dependent loads per step, the second depending on the first, so
 * every step pays the TLB misses of a random 64-byte record.
 *
 * Usage: mmap_walk MIB STEPS  (MIB of records; the index adds MIB/8).
 * Prints one line that depends only on the arguments, so a run under any page
 * backing must print exactly what a plain run prints. Built dynamically (the
 * runtime library applies the plan) or with -static (applied from outside).
 *
 * Build: cc -O2 -o mmap_walk mmap_walk.c */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHUNK ((size_t)32 << 20)

struct rec {
    uint64_t v[8];
};

/* The allocator: chunks from mmap, objects from a bump pointer; an object
 * never spans two chunks (the rest of a chunk is left unused). */
struct arena {
    char *cur;
    size_t left;
    size_t chunks;
};

static void *arena_alloc(struct arena *a, size_t size)
{
    if (size > CHUNK) {
        fprintf(stderr, "mmap_walk: object of %zu bytes exceeds a chunk\n", size);
        exit(1);
    }
    if (size > a->left) {
        void *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap_walk: mmap");
            exit(1);
        }
        a->cur = p;
        a->left = CHUNK;
        a->chunks++;
    }
    void *r = a->cur;
    a->cur += size;
    a->left -= size;
    return r;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: mmap_walk MIB STEPS\n");
        return 2;
    }
    size_t mib = strtoull(argv[1], NULL, 10);
    uint64_t steps = strtoull(argv[2], NULL, 10);
    if (mib == 0 || mib > ((size_t)1 << 20)) {
        fprintf(stderr, "mmap_walk: MIB must be 1..1048576, got '%s'\n", argv[1]);
        return 2;
    }
    size_t n = (mib << 20) / sizeof(struct rec);
    struct arena a = {0};
    /* The index in chunks of its own (pointers, 8 per record), then the records. */
    size_t per = CHUNK / sizeof(struct rec *);
    struct rec ***index = arena_alloc(&a, ((n + per - 1) / per) * sizeof *index);
    for (size_t i = 0; i < n; i += per)
        index[i / per] = arena_alloc(&a, (n - i < per ? n - i : per) * sizeof(struct rec *));
    for (size_t i = 0; i < n; i++) {
        struct rec *r = arena_alloc(&a, sizeof *r);
        for (int k = 0; k < 8; k++)
            r->v[k] = i * 0x9e3779b97f4a7c15ull + (uint64_t)k;
        index[i / per][i % per] = r;
    }
    uint64_t x = 88172645463325252ull, sum = 0;
    for (uint64_t s = 0; s < steps; s++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t i = (size_t)((x ^ sum) % n);
        struct rec *r = index[i / per][i % per];
        sum += r->v[sum & 7];
        r->v[x & 7] = sum;
    }
    printf("mmap_walk mib=%zu steps=%llu chunks=%zu checksum=%llx\n", mib,
           (unsigned long long)steps, a.chunks, (unsigned long long)sum);
    return 0;
}
