/* t_signal - record-mode re-entrancy: a signal handler makes hooked calls
 * while the interrupted thread may be appending to its log buffer.
 *
 *   t_signal [ops=2000000]
 *
 * The main thread runs malloc/free in a loop while a helper thread sends it
 * SIGPROF every ~20 us; the handler calls mmap + munmap of one page
 * (async-signal-safe, hooked). With
 * HUGETUNE_MODE=record the log must stay well-formed (htdump --check) and hold
 * exactly `handler_calls` MMAP and MUNMAP records from the handler. Prints one
 * JSON line; exit 0. */
#include "tcommon.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

static volatile sig_atomic_t g_calls, g_fail;
static atomic_int g_stop;
static pthread_t g_main;

static void *kicker(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 20000};
    while (!atomic_load(&g_stop)) {
        pthread_kill(g_main, SIGPROF);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void handler(int sig)
{
    (void)sig;
    int e = errno;
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || munmap(m, 4096) != 0)
        g_fail = 1;
    g_calls++;
    errno = e;
}

int main(int argc, char **argv)
{
    long ops = 2000000;
    const char *v = arg_value(argc, argv, "ops");
    if (v)
        ops = atol(v);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    g_main = pthread_self();
    pthread_t th;
    if (pthread_create(&th, NULL, kicker, NULL) != 0)
        die("pthread_create");
    void *ring[16] = {0};
    for (long i = 0; i < ops; i++) {
        unsigned k = (unsigned)i & 15;
        free(ring[k]);
        ring[k] = malloc(16 + (size_t)(i % 200));
        if (!ring[k])
            die("malloc");
    }
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    for (int k = 0; k < 16; k++)
        free(ring[k]);
    printf("{\"pid\":%ld,\"ops\":%ld,\"handler_calls\":%ld,\"ok\":%s}\n", (long)getpid(), ops,
           (long)g_calls, g_fail ? "false" : "true");
    return g_fail ? 1 : 0;
}
