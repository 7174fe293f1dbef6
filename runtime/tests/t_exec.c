/* t_exec - fork and exec in record mode: every process and every image has a
 * complete log, and the parent's log names its children.
 *
 *   t_exec             the parent (below)
 *   t_exec child       an exec'd child image: malloc(3333), exit
 *   t_exec final A B   the parent's own exec'd image: malloc(4444), print JSON
 *
 * The parent (pid P): malloc(1111); a thread that allocates (5555 last) and
 * then blocks, so that exec must write out another live thread's buffer; fork
 * child A: malloc(2222), exit(0); fork
 * child B: execl(self, "child") (B's second image allocates 3333); wait for
 * both; execv of a path that does not exist (fails with ENOENT); then
 * execvp(self, "final", A, B): the same pid P continues as the final image,
 * which allocates 4444 and prints one JSON line:
 *   {"pid":P,"fork_child":A,"exec_child":B,"self":"/path/t_exec"}
 * Exit status 0 when the children succeeded. */
#include "tcommon.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

static volatile void *g_sink;
static _Atomic int g_ready;

/* Allocates, then waits forever: its events are still in its buffer when
 * the process execs. */
static void *thr(void *a)
{
    (void)a;
    for (int i = 0; i < 500; i++) {
        void *p = malloc(64 + (size_t)i);
        g_sink = p;
        free(p);
    }
    g_sink = malloc(5555);
    atomic_store(&g_ready, 1);
    for (;;)
        pause();
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "child") == 0) {
        g_sink = malloc(3333);
        return 0;
    }
    if (argc >= 4 && strcmp(argv[1], "final") == 0) {
        g_sink = malloc(4444);
        printf("{\"pid\":%ld,\"fork_child\":%s,\"exec_child\":%s,\"self\":\"%s\"}\n", (long)getpid(),
               argv[2], argv[3], exe_path());
        return 0;
    }
    const char *self = exe_path();
    char me[4096];
    snprintf(me, sizeof me, "%s", self);
    g_sink = malloc(1111);
    pthread_t t;
    pthread_create(&t, NULL, thr, NULL);
    while (!atomic_load(&g_ready))
        usleep(1000);

    pid_t a = fork();
    if (a < 0)
        die("fork");
    if (a == 0) {
        g_sink = malloc(2222);
        exit(0);
    }
    pid_t b = fork();
    if (b < 0)
        die("fork");
    if (b == 0) {
        execl(me, "t_exec", "child", (char *)NULL);
        _exit(3);
    }
    int st = 0, ok = 1;
    waitpid(a, &st, 0);
    ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    waitpid(b, &st, 0);
    ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok)
        die("a child failed");

    char *const none[] = {"nothing", NULL};
    if (execv("/nonexistent/hugetune-t_exec", none) != -1 || errno != ENOENT)
        die("exec of a missing program did not fail with ENOENT");

    char sa[24], sb[24];
    snprintf(sa, sizeof sa, "%ld", (long)a);
    snprintf(sb, sizeof sb, "%ld", (long)b);
    char *const next[] = {"t_exec", "final", sa, sb, NULL};
    fflush(stdout);
    execvp(me, next);
    die("execvp: %s", strerror(errno));
    return 1;
}
