/* init.c - configuration, lazy initialization, constructor/destructor, fork
 * handlers, thread-exit key.
 *
 * Why lazy: hooks run before our constructor (the loader's own allocations,
 * constructors of libraries initialized before us), so the first hooked call
 * initializes. One thread wins a CAS UNINIT -> INITIALIZING; every call that
 * arrives meanwhile (other threads, or libc calls made by the initialization
 * itself) passes straight through to glibc. Until `environ` is readable (very
 * early loader allocations) nothing is decided and calls pass through.
 *
 * Work that needs the loader (dl_iterate_phdr: MODULE blobs, site resolution,
 * static .bss advice) waits for the constructor: calling into the loader from
 * a malloc made by the loader is asking for a deadlock. */
#include "ht.h"
#include "next.h"

#include "fmt.h"
#include "sys.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

_Atomic int ht_state;
struct ht_config ht_cfg;
pthread_key_t ht_thread_key;
int ht_thread_key_ok;

static char **g_ctor_envp;

const char *ht_getenv(const char *name)
{
    char **env = environ ? environ : g_ctor_envp;
    size_t n = strlen(name);
    if (!env)
        return NULL;
    for (; *env; env++) {
        if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
            return *env + n + 1;
    }
    return NULL;
}

/* A setting the library cannot use (an unknown HUGETUNE_MODE, a malformed
 * value, a plan it cannot open or parse): one line on stderr, whatever
 * HUGETUNE_VERBOSE says, unless HUGETUNE_QUIET=1; the program runs as it
 * would without the library (inert, or without that setting). */
/* "hugetune: " a b, one line on stderr. */
static void say(const char *a, const char *b)
{
    char line[512];
    struct ht_buf hb;
    hb_init(&hb, line, sizeof line);
    hb_puts(&hb, "hugetune: ");
    hb_puts(&hb, a);
    hb_puts(&hb, b);
    hb_putc(&hb, '\n');
    ht_sys_write(2, hb.p, hb.len);
}

void ht_warn(const char *a, const char *b)
{
    const char *q = ht_getenv("HUGETUNE_QUIET");
    if (!q || strcmp(q, "1") != 0)
        say(a, b);
}

/* A configuration error: in the summary, and said on stderr (ht_warn). */
void ht_config_error(const char *a, const char *b)
{
    ht_stats_error(a, b);
    if (!ht_cfg.verbose) /* verbose mode says it already */
        ht_warn(a, b);
}

void ht_verbose(const char *a, const char *b)
{
    if (ht_cfg.verbose)
        say(a, b);
}

/* An exec'd image of a recorded process (same pid, exec generation g >= 1)
 * must not overwrite the files of the image before: "%p" stands for
 * "<pid>.x<g>" (formats.md §1). Rewrites tmpl's "%p" into "%p.x<g>". */
static int exec_tmpl(const char *tmpl, char *out, size_t cap)
{
    struct ht_buf b;
    hb_init(&b, out, cap);
    for (const char *c = tmpl; *c; c++) {
        hb_putc(&b, *c);
        if (c[0] == '%' && (c[1] == '%' || c[1] == 'p')) {
            hb_putc(&b, c[1]);
            if (c[1] == 'p') {
                hb_puts(&b, ".x");
                hb_u64(&b, ht_cfg.exec_gen);
            }
            c++;
        }
    }
    return b.trunc ? -1 : 0;
}

int ht_output_path(const char *tmpl, char *out, size_t cap)
{
    char with_pid[HT_PATH_MAX + 4], t[HT_PATH_MAX + 32];
    if (ht_cfg.exec_gen) {
        if (!ht_path_has_pid(tmpl)) { /* no %p: ".<pid>.x<g>" appended */
            size_t n = strlen(tmpl);
            if (n + 4 > sizeof with_pid)
                return -1;
            memcpy(with_pid, tmpl, n);
            memcpy(with_pid + n, ".%p", 4);
            tmpl = with_pid;
        }
        if (exec_tmpl(tmpl, t, sizeof t) != 0)
            return -1;
        tmpl = t;
    }
    long n = ht_expand_path(tmpl, ht_cfg.pid, out, cap);
    if (n < 0)
        return -1;
    if (ht_cfg.is_fork_child && !ht_path_has_pid(tmpl)) {
        /* Do not clobber the parent's file. */
        struct ht_buf b;
        hb_init(&b, out + n, cap - (size_t)n);
        hb_putc(&b, '.');
        hb_i64(&b, ht_cfg.pid);
        if (b.trunc)
            return -1;
    }
    return 0;
}

long ht_create_beside(const char *path, char *tmp, size_t cap)
{
    static _Atomic uint64_t serial;
    long fd = -EEXIST;
    /* A planted name is skipped, never opened: the next serial is tried. */
    for (int i = 0; i < 16 && fd == -EEXIST; i++) {
        struct ht_buf b;
        hb_init(&b, tmp, cap);
        hb_puts(&b, path);
        hb_puts(&b, ".tmp.");
        hb_i64(&b, (int64_t)HT_SYSCALL(SYS_getpid));
        hb_putc(&b, '.');
        hb_u64(&b, atomic_fetch_add(&serial, 1));
        if (b.trunc)
            return -ENAMETOOLONG;
        fd = ht_sys_open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    }
    return fd;
}

int ht_secure_exec(void) { return getauxval(AT_SECURE) != 0; }

static void copy_env(const char *name, char *dst, size_t cap, int *has)
{
    const char *v = ht_getenv(name);
    size_t n;
    if (has)
        *has = 0;
    dst[0] = 0;
    if (!v || !*v)
        return;
    n = strlen(v);
    if (n >= cap) {
        ht_stats_error(name, " too long: ignored");
        return;
    }
    memcpy(dst, v, n + 1);
    if (has)
        *has = 1;
}

/* ---- fork ---- */

/* What a process leaves behind at its end (log blobs, verification, the
 * summary): from the destructor, or from the _exit hook for programs that
 * leave without running destructors. Once per process image (a fork child
 * writes its own: the flag is reset in the child handler). */
static _Atomic int g_finished;


void ht_atfork_prepare(void)
{
    ht_tls.guard++; /* until the parent/child handler: fork internals pass through */
    if (ht_cfg.mode == HT_RECORD)
        ht_rec_atfork_prepare();
    else
        ht_apply_atfork_prepare();
    ht_stats_atfork_prepare();
}

void ht_atfork_parent(void)
{
    ht_stats_atfork_parent();
    if (ht_cfg.mode == HT_RECORD)
        ht_rec_atfork_parent();
    else
        ht_apply_atfork_parent();
    ht_tls.guard--;
}

void ht_atfork_child(void)
{
    ht_cfg.pid = ht_sys_getpid();
    ht_cfg.is_fork_child = 1;
    atomic_store(&g_finished, 0);
    ht_thread_atfork_child();
    ht_stats_atfork_child();
    if (ht_cfg.mode == HT_RECORD)
        ht_rec_atfork_child();
    else
        ht_apply_atfork_child();
    ht_tls.guard--;
}

/* ---- init ---- */

void ht_init_slow(void)
{
    int expect = HT_UNINIT;
    if (!atomic_compare_exchange_strong(&ht_state, &expect, HT_INITIALIZING))
        return;
    /* Before anything is forwarded: whose allocator is behind us? */
    ht_next_resolve();
    if (!environ && !g_ctor_envp) {
        atomic_store(&ht_state, HT_UNINIT); /* too early: try again later */
        return;
    }
    /* A signal handler's calls would pass through unrecorded (guard) while
     * this thread initializes: hold signals until it is done. */
    sigset_t all, sigs;
    sigfillset(&all);
    HT_SYSCALL(SYS_rt_sigprocmask, SIG_SETMASK, &all, &sigs, 8);
    ht_tls.guard++;

    /* In a secure process not even HUGETUNE_MODE is read. */
    const char *m = ht_secure_exec() ? NULL : ht_getenv("HUGETUNE_MODE");
    int mode = HT_INERT;
    if (m && strcmp(m, "record") == 0)
        mode = HT_RECORD;
    else if (m && strcmp(m, "apply") == 0)
        mode = HT_APPLY;
    else if (m && strcmp(m, "follow") == 0)
        ht_follow_setup(); /* a launcher: inert, its execs watched (follow.c) */
    else if (m && *m && strcmp(m, "off") != 0 && strcmp(m, "inert") != 0)
        ht_warn("unknown HUGETUNE_MODE ignored (record, apply, follow or off): ", m);
    if (mode == HT_INERT) {
        if (ht_follow) {
            long n = ht_sys_readlink("/proc/self/exe", ht_cfg.exe_path, sizeof ht_cfg.exe_path - 1);
            ht_cfg.exe_path[n > 0 ? n : 0] = 0;
        }
        atomic_store_explicit(&ht_state, HT_INERT, memory_order_release);
        ht_tls.guard--;
        HT_SYSCALL(SYS_rt_sigprocmask, SIG_SETMASK, &sigs, NULL, 8);
        return;
    }

    const char *v = ht_getenv("HUGETUNE_VERBOSE");
    ht_cfg.verbose = v && strcmp(v, "1") == 0;
    if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        ht_warn("HUGETUNE_VERBOSE is 0 or 1; ignored: ", v);
    v = ht_getenv("HUGETUNE_MARKERS");
    ht_cfg.markers = mode == HT_RECORD && v && strcmp(v, "1") == 0;
    ht_cfg.pid = ht_sys_getpid();
    if (mode == HT_RECORD)
        ht_cfg.exec_gen = ht_rec_parse_exec_gen();
    ht_cfg.threshold = HT_DEFAULT_THRESHOLD;
    v = ht_getenv("HUGETUNE_THRESHOLD");
    if (v && *v) {
        uint64_t t;
        if (ht_parse_u64(v, strlen(v), 10, &t) == 0 && t > 0) {
            ht_cfg.threshold = t;
            ht_cfg.threshold_from_env = 1;
        } else {
            ht_config_error("bad HUGETUNE_THRESHOLD ignored: ", v);
        }
    }
    copy_env("HUGETUNE_SUMMARY", ht_cfg.summary_tmpl, sizeof ht_cfg.summary_tmpl, &ht_cfg.has_summary);
    copy_env("HUGETUNE_LOG", ht_cfg.log_tmpl, sizeof ht_cfg.log_tmpl, &ht_cfg.has_log);
    copy_env("HUGETUNE_PLAN", ht_cfg.plan_path, sizeof ht_cfg.plan_path, NULL);
    long n = ht_sys_readlink("/proc/self/exe", ht_cfg.exe_path, sizeof ht_cfg.exe_path - 1);
    ht_cfg.exe_path[n > 0 ? n : 0] = 0;
    ht_cfg.mode = mode;

    if (ht_thread_setup() != 0)
        ht_stats_error("cannot map the thread slot table", "");
    ht_thread_key_ok = pthread_key_create(&ht_thread_key, ht_thread_exit) == 0;
    if (pthread_atfork(ht_atfork_prepare, ht_atfork_parent, ht_atfork_child) != 0)
        ht_stats_error("pthread_atfork failed", "");

    if (mode == HT_RECORD)
        ht_rec_setup();
    else
        ht_apply_setup();
    ht_verbose(mode == HT_RECORD ? "record mode" : "apply mode", "");
    atomic_store_explicit(&ht_state, mode, memory_order_release);
    if (mode == HT_RECORD)
        ht_rec_setup_done(); /* calls that raced with the initialization */
    ht_tls.guard--;
    HT_SYSCALL(SYS_rt_sigprocmask, SIG_SETMASK, &sigs, NULL, 8);
}

__attribute__((constructor)) static void ht_ctor(int argc, char **argv, char **envp)
{
    g_ctor_envp = envp;
    ht_next_resolve(); /* in a calm context, if no hook ran yet */
    if (ht_state_get() == HT_UNINIT)
        ht_init_slow();
    if (ht_follow) {
        ht_tls.guard++; /* dlsym's allocations are the library's own */
        void *ex = dlsym(RTLD_NEXT, "execve");
        ht_tls.guard--;
        ht_follow_start(argc, argv, envp, ex);
        return;
    }
    int s = ht_state_get();
    if (s != HT_RECORD && s != HT_APPLY)
        return;
    ht_tls.guard++;
    if (s == HT_RECORD)
        ht_rec_start();
    else
        ht_apply_start();
    ht_tls.guard--;
}

void ht_finish(void)
{
    int s = ht_state_get();
    if (s != HT_RECORD && s != HT_APPLY)
        return;
    if (atomic_exchange(&g_finished, 1))
        return;
    ht_tls.guard++;
    if (s == HT_RECORD)
        ht_rec_finish();
    else
        ht_apply_finish();
    ht_summary_write();
    ht_tls.guard--;
}

__attribute__((destructor)) static void ht_dtor(void) { ht_finish(); }
