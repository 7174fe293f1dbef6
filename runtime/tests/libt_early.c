/* libt_early.so - a library linked into t_early whose constructor runs before
 * libhugetune's (a DT_NEEDED library is initialized before a preloaded one)
 * and allocates while the runtime library cannot initialize yet.
 *
 * The runtime library decides its mode from the environment; while `environ`
 * is not readable it cannot, and it records calls into its pre-init buffer.
 * The constructor reproduces that state deterministically by hiding environ
 * (as a sanitizing constructor would), then:
 *   - the known sequence: malloc(4321), calloc(3, 1000), realloc(to 5000),
 *     posix_memalign(64, 300), free(calloc'd), mmap + munmap of one page;
 *   - malloc(200)/free pairs while a helper thread sends SIGPROF to this
 *     thread every ~10 us (at most 150 signals); the handler makes hooked
 *     calls (mmap + munmap of a page, async-signal-safe) and counts the
 *     signals that arrived while its thread was inside malloc or free, i.e.
 *     inside the library's pre-init path or glibc. The loop goes on until 5
 *     signals did (or 1800 pairs);
 * and puts environ back. Every one of these calls must be in the log, marked
 * PREINIT, before everything recorded afterwards.
 *
 * It also has .data and .bss (early_data, early_bss) for the static-segment
 * check. All addresses are reported through early_report(). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define HANDLER __attribute__((noinline, section("early_handler")))
extern const char __start_early_handler[], __stop_early_handler[];

int early_data = 7;
char early_bss[1 << 16];

struct early_report {
    void *malloc4321, *calloc3000, *realloc5000, *memalign300, *mmap_page;
    long loops, handler_calls, handler_failures, signals_sent, in_call_hits;
    const void *handler_start, *handler_end;
    const void *data, *bss;
};
static struct early_report g_r;
static volatile sig_atomic_t g_calls, g_fail, g_in_call, g_in_call_hits;
static atomic_int g_stop;
static pthread_t g_target;

HANDLER static void on_prof(int sig)
{
    (void)sig;
    int e = errno;
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || munmap(m, 4096) != 0)
        g_fail = 1;
    g_calls++;
    if (g_in_call)
        g_in_call_hits++;
    errno = e;
}

static atomic_int g_kicker_up;

static void *kicker(void *a)
{
    (void)a;
    struct timespec ts = {0, 10000};
    atomic_store(&g_kicker_up, 1);
    while (!atomic_load(&g_stop) && g_r.signals_sent < 150) {
        pthread_kill(g_target, SIGPROF);
        g_r.signals_sent++;
        nanosleep(&ts, NULL);
    }
    return NULL;
}

__attribute__((constructor)) static void early_ctor(void)
{
    extern char **environ;
    char **env = environ;
    environ = NULL;

    g_r.malloc4321 = malloc(4321);
    g_r.calloc3000 = calloc(3, 1000);
    g_r.realloc5000 = realloc(g_r.malloc4321, 5000);
    if (posix_memalign(&g_r.memalign300, 64, 300) != 0)
        g_r.memalign300 = NULL;
    free(g_r.calloc3000);
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    g_r.mmap_page = m;
    if (m != MAP_FAILED)
        munmap(m, 4096);

    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &sa, &old);
    g_target = pthread_self();
    pthread_t k;
    int have_kicker = pthread_create(&k, NULL, kicker, NULL) == 0;
    while (have_kicker && !atomic_load(&g_kicker_up))
        sched_yield();
    for (int i = 0; i < 1800 && (g_in_call_hits < 5 || g_calls < 20); i++) {
        g_in_call = 1;
        char *p = malloc(200);
        g_in_call = 0;
        if (p)
            p[0] = (char)i;
        g_in_call = 1;
        free(p);
        g_in_call = 0;
        g_r.loops++;
        /* ~3 us between pairs: the loop lasts as long as the signals come */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do
            clock_gettime(CLOCK_MONOTONIC, &t1);
        while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 3000);
    }
    atomic_store(&g_stop, 1);
    if (have_kicker)
        pthread_join(k, NULL);
    sigaction(SIGPROF, &old, NULL);
    g_r.handler_calls = g_calls;
    g_r.in_call_hits = g_in_call_hits;
    g_r.handler_failures = g_fail;
    g_r.handler_start = __start_early_handler;
    g_r.handler_end = __stop_early_handler;
    g_r.data = &early_data;
    g_r.bss = early_bss;
    environ = env;
}

const struct early_report *early_report(void) { return &g_r; }
