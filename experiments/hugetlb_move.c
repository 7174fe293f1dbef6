/* hugetlb_move.c - how often this kernel refuses to move an unpopulated
 * hugetlb mapping over ordinary memory with mremap(MREMAP_FIXED), the step
 * the runtime library uses to put a block's 2 MB head in place (runtime/src/
 * owned.c). The kernel unmaps the destination before it moves anything, so a
 * refusal leaves a hole; the library refills it (docs/formats.md section 3).
 *
 *   cc -O2 -o /tmp/hugetlb_move experiments/hugetlb_move.c
 *   echo $((PAGES + 50)) > /proc/sys/vm/nr_hugepages   # as root; restore after
 *   /tmp/hugetlb_move PAGES TRIALS                     # e.g. 2100 20
 *
 * Each trial maps the destination (aligned anonymous memory) and the source
 * (MAP_HUGETLB, 2 MB pages, not populated), moves the whole source over the
 * destination and unmaps everything; between trials a random amount of
 * address space is left mapped so that the trials land at different 1 GiB
 * offsets. Only whole mappings are moved: on Linux 6.18 moving a hugetlb
 * mapping in pieces leaked the kernel's hugetlb reservations until reboot.
 * Prints the refusals and their errno. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define M2 (2ul << 20)

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PAGES TRIALS\n", argv[0]);
        return 2;
    }
    size_t len = strtoull(argv[1], NULL, 10) * M2;
    int trials = atoi(argv[2]), refused = 0, last_errno = 0;
    srand(1);
    for (int t = 0; t < trials; t++) {
        char *a = mmap(NULL, len + M2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (a == MAP_FAILED) {
            perror("destination");
            return 1;
        }
        uintptr_t dst = ((uintptr_t)a + M2 - 1) & ~(M2 - 1);
        char *h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << 26), -1, 0);
        if (h == MAP_FAILED) {
            perror("hugetlb source (is the pool large enough?)");
            return 1;
        }
        void *m = mremap(h, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)dst);
        if (m == MAP_FAILED) {
            refused++;
            last_errno = errno;
            munmap(h, len);
        } else {
            munmap(m, len);
        }
        munmap(a, len + M2);
        mmap(NULL, (size_t)(rand() % 512 + 1) * M2, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    }
    printf("%zu MB: %d of %d moves refused%s%s\n", len >> 20, refused, trials, refused ? ": " : "",
           refused ? strerror(last_errno) : "");
    return 0;
}
