/* t_fork - fork handling: one log / summary per process.
 *
 *   t_fork [children=3]
 *
 * The parent allocates 4 MiB (heap-large) and 1000 bytes, starts a thread
 * that allocates, then forks `children` children one after the other. Each
 * child checks the inherited data, frees the parent's 4 MiB block (under apply
 * mode an owned block: the child releases its own copy), allocates 12345
 * bytes, and leaves with exit(0). The parent checks its data after every
 * child. Prints one JSON line with the parent's and the children's pids;
 * exit 0 when every check passed. */
#include "tcommon.h"

#include <pthread.h>
#include <sys/wait.h>

static void *thr(void *a)
{
    (void)a;
    for (int i = 0; i < 1000; i++)
        free(malloc(100 + (size_t)i));
    return NULL;
}

int main(int argc, char **argv)
{
    int n = 3;
    const char *v = arg_value(argc, argv, "children");
    if (v)
        n = atoi(v);
    if (n < 0 || n > 64)
        die("bad children");
    const size_t big = 4u << 20;
    unsigned char *p = malloc(big), *s = malloc(1000);
    if (!p || !s)
        die("malloc");
    memset(p, 0x3c, big);
    memset(s, 0x4d, 1000);
    pthread_t t;
    pthread_create(&t, NULL, thr, NULL);
    pid_t kids[64];
    int ok = 1;
    for (int k = 0; k < n; k++) {
        pid_t c = fork();
        if (c < 0)
            die("fork");
        if (c == 0) {
            int good = p[0] == 0x3c && p[big - 1] == 0x3c && s[999] == 0x4d;
            free(p);
            unsigned char *q = malloc(12345);
            if (!q)
                _exit(3);
            memset(q, 1, 12345);
            free(q);
            exit(good ? 0 : 2);
        }
        kids[k] = c;
        int st = 0;
        waitpid(c, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            ok = 0;
        if (p[big / 2] != 0x3c || s[0] != 0x4d)
            ok = 0;
    }
    pthread_join(t, NULL);
    free(p);
    free(s);
    printf("{\"pid\":%ld,\"children\":[", (long)getpid());
    for (int k = 0; k < n; k++)
        printf("%s%ld", k ? "," : "", (long)kids[k]);
    printf("],\"ok\":%s}\n", ok ? "true" : "false");
    if (!ok) {
        fprintf(stderr, "FAIL: a child or the parent saw wrong data\n");
        return 1;
    }
    return 0;
}
