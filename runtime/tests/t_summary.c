/* t_summary - a program that keeps running until its stdin closes, for the
 * on-demand summary (SIGUSR2, HUGETUNE_SUMMARY_REQUEST).
 *
 *   t_summary
 *
 * Allocates an 8 MiB block (owned under a heap-large plan) and prints one JSON
 * line ({"pid":..,"ready":true}) once it is written. Then, until stdin reaches
 * EOF, it allocates and frees a 300 KiB block every 5 ms (the slow path, where
 * the library looks for the request file at most once a second). Exits 0. */
#include "tcommon.h"

#include <fcntl.h>
#include <poll.h>

int main(void)
{
    unsigned char *p = malloc(8u << 20);
    if (!p)
        die("malloc");
    memset(p, 1, 8u << 20);
    printf("{\"pid\":%ld,\"ready\":true}\n", (long)getpid());
    fflush(stdout);
    for (;;) {
        struct pollfd pf = {0, POLLIN, 0};
        if (poll(&pf, 1, 5) > 0) {
            char b[64];
            if (read(0, b, sizeof b) <= 0)
                break;
        }
        unsigned char *q = malloc(300u << 10);
        if (!q)
            die("malloc");
        q[0] = 1;
        free(q);
    }
    free(p);
    return 0;
}
