/* t_forkhuge - fork after touching private hugetlb memory, with the pool
 * empty: the copy-on-write hazard, and the library's protection.
 *
 *   t_forkhuge [size=BYTES] [shrink=PATH] [writer=0|1] [children=N]
 *              [via=fork|_Fork|clone]
 *
 * The parent mallocs `size` bytes (default 16 MiB; the plan makes it a
 * hugetlb block) and fills it with 0xA5. With shrink=PATH (e.g.
 * /proc/sys/vm/nr_hugepages, run as root under the caller's kernel-state
 * lock) it then writes 0 there, so the pool has no free page left for a
 * copy-on-write. It forks `children` children in turn; each child checks the
 * pre-fork content, writes its own pattern everywhere, checks it and exits 0.
 * Meanwhile the parent writes its own pattern everywhere (racing with the
 * child) and checks it. With writer=1 a second parent thread keeps writing
 * the upper half of the block during the forks (the child then checks only
 * that the upper half holds one of the two patterns). via= makes the
 * children with glibc's _Fork or clone(SIGCHLD) (no atfork handlers run)
 * instead of fork.
 *
 * Prints one JSON line: per child its exit code or the signal that killed it,
 * the child's smaps of the block (what backs its copy), and "ok" (every check
 * passed and every child exited 0). Exit 0 when ok. */
#include "tcommon.h"

#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <sys/wait.h>

static unsigned char *g_p;
static size_t g_n;
static volatile int g_stop;

static int g_use_writer;

/* The child's part: check the pre-fork content, write its own pattern, report
 * its smaps through wfd. */
static int child_body(int wfd)
{
    unsigned char *p = g_p;
    size_t n = g_n;
    int good = 1;
    size_t lim = g_use_writer ? n / 2 : n;
    for (size_t i = 0; i < lim; i += 512)
        good &= p[i] == 0xA5;
    for (size_t i = lim; i < n; i += 512)
        good &= p[i] == 0xA5 || p[i] == 0x5A;
    memset(p, 0xC3, n);
    for (size_t i = 0; i < n; i += 512)
        good &= p[i] == 0xC3;
    struct smaps_info si = smaps_range((uintptr_t)p, (uintptr_t)p + n);
    char buf[256];
    int len = snprintf(buf, sizeof buf, "{\"hugetlb_kb\":%ld,\"anon_huge_kb\":%ld,\"kernel_page_kb\":%ld}",
                       si.private_hugetlb_kb, si.anon_huge_kb, si.kernel_page_kb);
    if (write(wfd, buf, (size_t)len) != len)
        good = 0;
    return good ? 0 : 2;
}

static int clone_main(void *a) { _exit(child_body((int)(intptr_t)a)); }

static void *writer(void *a)
{
    (void)a;
    while (!g_stop)
        for (size_t i = g_n / 2; i < g_n && !g_stop; i += 4096)
            g_p[i] = 0x5A;
    return NULL;
}

int main(int argc, char **argv)
{
    const char *v;
    size_t n = 16u << 20;
    int kids = 1, use_writer = 0;
    if ((v = arg_value(argc, argv, "size")))
        n = strtoull(v, NULL, 0);
    if ((v = arg_value(argc, argv, "children")))
        kids = atoi(v);
    if ((v = arg_value(argc, argv, "writer")))
        use_writer = atoi(v);
    g_use_writer = use_writer;
    const char *shrink = arg_value(argc, argv, "shrink");
    const char *via = arg_value(argc, argv, "via");
    if (!via)
        via = "fork";
    if (strcmp(via, "fork") && strcmp(via, "_Fork") && strcmp(via, "clone"))
        die("via= is fork, _Fork or clone");
    /* the clone child's stack (16-byte aligned top) */
    static char cstack[256 << 10] __attribute__((aligned(16)));
    if (kids < 1 || kids > 16 || n < 4096)
        die("bad arguments");
    unsigned char *p = malloc(n);
    if (!p)
        die("malloc");
    g_p = p;
    g_n = n;
    memset(p, 0xA5, n);
    struct smaps_info before = smaps_range((uintptr_t)p, (uintptr_t)p + n);
    if (shrink) {
        FILE *f = fopen(shrink, "w");
        if (!f || fprintf(f, "0\n") < 0 || fclose(f) != 0)
            die("cannot shrink the pool through %s", shrink);
    }
    pthread_t wt;
    if (use_writer)
        pthread_create(&wt, NULL, writer, NULL);
    int ok = 1;
    printf("{\"pid\":%ld,\"size\":%zu,", (long)getpid(), n);
    print_smaps("parent_before", p, n, before);
    printf(",\"children\":[");
    for (int k = 0; k < kids; k++) {
        int fds[2];
        if (pipe(fds) != 0)
            die("pipe");
        pid_t c;
        if (!strcmp(via, "_Fork"))
            c = _Fork();
        else if (!strcmp(via, "clone"))
            c = clone(clone_main, cstack + (256 << 10), SIGCHLD, (void *)(intptr_t)fds[1]);
        else
            c = fork();
        if (c < 0)
            die("%s", via);
        if (c == 0) {
            close(fds[0]);
            _exit(child_body(fds[1]));
        }
        close(fds[1]);
        /* race the child */
        memset(p, (unsigned char)(0x10 + k), use_writer ? n / 2 : n);
        for (size_t i = 0; i < (use_writer ? n / 2 : n); i += 512)
            ok &= p[i] == (unsigned char)(0x10 + k);
        int st = 0;
        waitpid(c, &st, 0);
        char cs[256] = "null";
        ssize_t r = read(fds[0], cs, sizeof cs - 1);
        cs[r > 0 ? r : 4] = 0;
        close(fds[0]);
        int exited = WIFEXITED(st);
        printf("%s{\"pid\":%ld,\"exit\":%d,\"signal\":%d,\"smaps\":%s}", k ? "," : "", (long)c,
               exited ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0, r > 0 ? cs : "null");
        if (!exited || WEXITSTATUS(st) != 0)
            ok = 0;
        if (!use_writer)
            memset(p, 0xA5, n); /* the next child checks the original pattern */
        else
            memset(p, 0xA5, n / 2);
    }
    g_stop = 1;
    if (use_writer)
        pthread_join(wt, NULL);
    struct smaps_info after = smaps_range((uintptr_t)p, (uintptr_t)p + n);
    printf("],");
    print_smaps("parent_after", p, n, after);
    free(p);
    printf(",\"ok\":%s}\n", ok ? "true" : "false");
    if (!ok) {
        fprintf(stderr, "FAIL: a child died or saw wrong data\n");
        return 1;
    }
    return 0;
}
