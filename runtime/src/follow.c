/* follow.c - follow mode (HUGETUNE_MODE=follow): the library rides along in
 * launchers (bash -c, env, nice, numactl, taskset, timeout, mpirun and its
 * daemons, srun, ...) and puts the real program they start into its role.
 *
 * Why: hugetune runs `bash -c "./app"` or `mpirun -np 2 ./app`, but the profile,
 * the plan and the proof of backing must be about ./app (every rank), and
 * qemu-user does not follow exec. So the launcher runs natively with the
 * library preloaded in follow mode, which is inert for every allocation; the
 * environment carries follow mode to every process the launcher starts,
 * whether it starts them with an exec we can hook, posix_spawn, system() or a
 * daemon (slurmstepd) that we never see.
 *
 * The decision is made where every started process passes: this library's
 * constructor. A process whose executable is a launcher (by basename: the list
 * below, plus HUGETUNE_LAUNCHERS, colon-separated) stays in follow mode. Any
 * other is the real program (or one of its ranks): it re-executes itself in
 * the role hugetune asked for (HUGETUNE_FOLLOW):
 *   record: under `$HUGETUNE_FOLLOW_QEMU -plugin $HUGETUNE_FOLLOW_PLUGIN`
 *           (%p expanded to the pid, so each rank writes its own stream),
 *           the library in record mode inside the guest (-E); without
 *           HUGETUNE_FOLLOW_QEMU natively in record mode (a sizing run);
 *   apply:  natively with HUGETUNE_MODE=apply (the plan, the summary).
 * With HUGETUNE_FOLLOW_PROGRAM set (an absolute path), only that executable
 * takes the role; any other keeps following (an unknown wrapper in between).
 * The re-exec costs one exec per real program, before its main().
 *
 * Every decision is one JSON line appended to HUGETUNE_FOLLOW_LOG (O_APPEND:
 * lines of concurrent processes never interleave), which hugetune reads to
 * confirm what ran (docs/launchers.md): `launcher`, `program`, `exec` (a
 * launcher's exec, seen by the exec hooks), `error` (what cannot be followed:
 * a setuid or statically linked target, an environment that lost follow
 * mode, a qemu that would not start).
 *
 * Invariants: nothing here allocates (stack buffers, raw syscalls); a secure
 * process (setuid) never reads HUGETUNE_MODE, so never follows (init.c); a
 * process that cannot be put in its role runs on natively and inert, with an
 * `error` line saying why, never silently. */
#include "ht.h"

#include "fmt.h"
#include "sys.h"

#include <elf.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ht_follow;
static int g_role; /* HT_RECORD or HT_APPLY: what the real program does */
/* Copied at set-up: a launcher may clear its environment (env -i) before the
 * exec that must be reported. */
static char g_log[HT_PATH_MAX];
static char g_preload[HT_PATH_MAX]; /* our LD_PRELOAD entry (the library's path) */

/* Known launchers, by the basename of their executable (after symlinks:
 * /bin/sh is dash, mpirun is orterun). */
static const char *const LAUNCHERS[] = {
    "bash", "sh", "dash", "zsh", "ksh", "mksh", "env", "nice", "nohup", "ionice", "chrt",
    "taskset", "numactl", "timeout", "stdbuf", "setarch", "time",
    /* Open MPI (4: orterun/orted; 5: prterun/prted), MPICH/Hydra, Slurm */
    "mpirun", "mpiexec", "orterun", "orted", "prterun", "prted", "prte",
    "mpiexec.hydra", "hydra_pmi_proxy", "srun", "slurmstepd",
};

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int ht_follow_is_launcher(const char *path)
{
    const char *b = base_name(path);
    for (size_t i = 0; i < sizeof LAUNCHERS / sizeof LAUNCHERS[0]; i++)
        if (strcmp(b, LAUNCHERS[i]) == 0)
            return 1;
    const char *extra = ht_getenv("HUGETUNE_LAUNCHERS");
    size_t n = strlen(b);
    for (const char *c = extra; c && *c;) {
        const char *e = strchr(c, ':');
        size_t len = e ? (size_t)(e - c) : strlen(c);
        if (len == n && n && memcmp(c, b, n) == 0)
            return 1;
        c = e ? e + 1 : c + len;
    }
    return 0;
}

/* ---- the event log ---- */

static void event(const char *kind, const char *path, char *const argv[], const char *why)
{
    const char *log = g_log;
    if (!*log)
        return;
    char line[8192];
    struct ht_buf b;
    struct ht_json j;
    hb_init(&b, line, sizeof line - 2);
    hj_init(&j, &b);
    hj_obj_begin(&j, NULL);
    hj_i64(&j, "pid", ht_sys_getpid());
    hj_i64(&j, "ppid", ht_sys_getppid());
    hj_str(&j, "event", kind);
    if (path)
        hj_str(&j, "path", path);
    if (argv) {
        /* Whole arguments only: a cut line would not be JSON. */
        hj_arr_begin(&j, "argv");
        int cut = 0;
        for (size_t i = 0; argv[i]; i++) {
            if (b.len + strlen(argv[i]) * 2 + 512 > b.cap) {
                cut = 1;
                break;
            }
            hj_str(&j, NULL, argv[i]);
        }
        hj_arr_end(&j);
        if (cut)
            hj_bool(&j, "argv_cut", 1);
    }
    if (why)
        hj_str(&j, "why", why);
    hj_obj_end(&j);
    if (b.trunc)
        return;
    line[b.len++] = '\n';
    long fd = ht_sys_open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    ht_sys_write((int)fd, line, b.len);
    ht_sys_close((int)fd);
}

/* "a" "b" as one string in buf (for an error's why). */
static const char *cat2(char *buf, size_t cap, const char *a, const char *b)
{
    struct ht_buf hb;
    hb_init(&hb, buf, cap);
    hb_puts(&hb, a);
    hb_puts(&hb, b);
    return buf;
}

/* ---- set-up (init.c, HUGETUNE_MODE=follow) ---- */

void ht_follow_setup(void)
{
    const char *r = ht_getenv("HUGETUNE_FOLLOW");
    if (r && strcmp(r, "record") == 0)
        g_role = HT_RECORD;
    else if (r && strcmp(r, "apply") == 0)
        g_role = HT_APPLY;
    else {
        ht_warn("HUGETUNE_MODE=follow needs HUGETUNE_FOLLOW=record or apply; inert: ", r ? r : "(unset)");
        return;
    }
    const char *log = ht_getenv("HUGETUNE_FOLLOW_LOG");
    size_t n = log ? strlen(log) : 0;
    if (n < sizeof g_log && log)
        memcpy(g_log, log, n + 1);
    const char *pre = ht_getenv("LD_PRELOAD");
    size_t k = 0;
    while (pre && pre[k] && pre[k] != ' ' && pre[k] != ':' && k + 1 < sizeof g_preload) {
        g_preload[k] = pre[k];
        k++;
    }
    g_preload[k] = 0;
    ht_follow = 1;
}

/* ---- the real program's re-exec (constructor) ---- */

static int env_is(const char *e, const char *name)
{
    size_t n = strlen(name);
    return strncmp(e, name, n) == 0 && e[n] == '=';
}

static int is_ours(const char *e)
{
    return env_is(e, "LD_PRELOAD") || strncmp(e, "HUGETUNE_", 9) == 0;
}

static int is_follow_only(const char *e)
{
    return env_is(e, "HUGETUNE_MODE") || strncmp(e, "HUGETUNE_FOLLOW", 15) == 0;
}

typedef int (*execve_fn)(const char *, char *const[], char *const[]);

/* Runs the program under qemu with the library in record mode inside the
 * guest. Returns only on failure (the error is logged). */
static void reexec_qemu(execve_fn ex, const char *exe, int argc, char **argv, char **envp)
{
    const char *qemu = ht_getenv("HUGETUNE_FOLLOW_QEMU");
    const char *plugin = ht_getenv("HUGETUNE_FOLLOW_PLUGIN");
    char why[512];
    if (!plugin || !*plugin) {
        event("error", exe, NULL, "HUGETUNE_FOLLOW_QEMU needs HUGETUNE_FOLLOW_PLUGIN");
        return;
    }
    char pl[HT_PATH_MAX * 2];
    if (ht_expand_path(plugin, ht_sys_getpid(), pl, sizeof pl) < 0) {
        event("error", exe, NULL, "HUGETUNE_FOLLOW_PLUGIN too long");
        return;
    }
    size_t nenv = 0;
    while (envp[nenv])
        nenv++;
    /* qemu, -plugin P, -0 argv0, (-E x)*, exe, argv[1..], NULL */
    size_t cap = 6 + 2 * nenv + 2 + (size_t)argc;
    char *qa[cap];
    char *qe[nenv + 1];
    size_t a = 0, e = 0;
    qa[a++] = (char *)qemu;
    qa[a++] = (char *)"-plugin";
    qa[a++] = pl;
    qa[a++] = (char *)"-0";
    qa[a++] = argc > 0 ? argv[0] : (char *)exe;
    static char mode_record[] = "HUGETUNE_MODE=record";
    qa[a++] = (char *)"-E";
    qa[a++] = mode_record;
    for (size_t i = 0; i < nenv; i++) {
        if (!is_ours(envp[i])) {
            qe[e++] = envp[i]; /* the host qemu's (and so the guest's) */
            continue;
        }
        if (is_follow_only(envp[i]))
            continue;
        /* qemu's -E splits its value at commas */
        if (strchr(envp[i], ',')) {
            event("error", exe, NULL, cat2(why, sizeof why, "a comma in ", envp[i]));
            return;
        }
        qa[a++] = (char *)"-E";
        qa[a++] = envp[i]; /* LD_PRELOAD and HUGETUNE_*: the guest only */
    }
    qa[a++] = (char *)exe;
    for (int i = 1; i < argc; i++)
        qa[a++] = argv[i];
    qa[a] = NULL;
    qe[e] = NULL;
    event("program", exe, argv, NULL);
    ex(qemu, qa, qe);
    int err = errno;
    char en[24];
    event("error", exe, NULL, cat2(why, sizeof why, "cannot start qemu: ", ht_errno_name(err, en)));
}

/* Runs the program again, natively, in its role's mode. */
static void reexec_native(execve_fn ex, const char *exe, char **argv, char **envp)
{
    size_t nenv = 0;
    while (envp[nenv])
        nenv++;
    char *ne[nenv + 2];
    size_t e = 0;
    static char mode_apply[] = "HUGETUNE_MODE=apply", mode_record[] = "HUGETUNE_MODE=record";
    for (size_t i = 0; i < nenv; i++)
        if (!is_follow_only(envp[i]))
            ne[e++] = envp[i];
    ne[e++] = g_role == HT_APPLY ? mode_apply : mode_record;
    ne[e] = NULL;
    event("program", exe, argv, NULL);
    ex(exe, argv, ne);
    int err = errno;
    char en[24], why[128];
    event("error", exe, NULL, cat2(why, sizeof why, "cannot re-execute in its mode: ", ht_errno_name(err, en)));
}

void ht_follow_start(int argc, char **argv, char **envp, void *real_execve)
{
    if (!ht_follow || !argv || !envp || !real_execve)
        return;
    const char *exe = ht_cfg.exe_path;
    if (!*exe) {
        event("error", NULL, argv, "cannot read /proc/self/exe");
        return;
    }
    const char *only = ht_getenv("HUGETUNE_FOLLOW_PROGRAM");
    if (ht_follow_is_launcher(exe) || (only && *only && strcmp(only, exe) != 0)) {
        event("launcher", exe, argv, NULL);
        return;
    }
    ht_tls.guard++;
    const char *qemu = ht_getenv("HUGETUNE_FOLLOW_QEMU");
    if (g_role == HT_RECORD && qemu && *qemu)
        reexec_qemu((execve_fn)real_execve, exe, argc, argv, envp);
    else
        reexec_native((execve_fn)real_execve, exe, argv, envp);
    ht_tls.guard--;
    /* Still here: it runs natively and inert; the error says why. */
}

/* ---- a launcher's exec (hooks.c, follow mode) ----
 *
 * What the constructor of the new image cannot see, because in these cases
 * it never runs in a mode that would report it: a setuid target (secure
 * execution: the library stays inert), a statically linked one (no preload),
 * an environment without follow mode (env -i, a launcher that scrubs it). */

/* 1 if the ELF file at fd has no PT_INTERP (statically linked), 0 if it has
 * one or is no ELF file (a script: its interpreter is checked by the kernel's
 * exec, and reaches the constructor like any other). */
static int elf_static(int fd)
{
    Elf64_Ehdr h;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h.e_ident, ELFMAG, SELFMAG) != 0 ||
        h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_phentsize != sizeof(Elf64_Phdr))
        return 0;
    for (unsigned i = 0; i < h.e_phnum && i < 64; i++) {
        Elf64_Phdr p;
        if (pread(fd, &p, sizeof p, (off_t)(h.e_phoff + i * sizeof p)) != (ssize_t)sizeof p)
            return 0;
        if (p.p_type == PT_INTERP)
            return 0;
    }
    return 1;
}

static int env_has(char *const envp[], const char *name, const char *value)
{
    if (!envp)
        return 0;
    size_t n = strlen(name);
    for (size_t i = 0; envp[i]; i++)
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
            return !value || strstr(envp[i] + n + 1, value) != NULL;
    return 0;
}

void ht_follow_exec(const char *path, char *const argv[], char *const envp[])
{
    if (!path)
        return;
    ht_tls.guard++;
    char why[HT_PATH_MAX + 160];
    event("exec", path, argv, NULL);
    long fd = ht_sys_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd >= 0) {
        struct stat st;
        if (fstat((int)fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & (S_ISUID | S_ISGID)))
            event("error", path, NULL,
                  "setuid or setgid: the runtime library stays inert in it, so it cannot be followed");
        else if (elf_static((int)fd))
            event("error", path, NULL,
                  "statically linked: the runtime library cannot be preloaded into it, so it cannot be followed");
        ht_sys_close((int)fd);
    }
    /* Our own LD_PRELOAD entry (the library's path) must survive the exec. */
    if (!env_has(envp, "HUGETUNE_MODE", "follow") ||
        !env_has(envp, "LD_PRELOAD", *g_preload ? g_preload : NULL))
        event("error", path, NULL,
              cat2(why, sizeof why, "started with an environment without LD_PRELOAD or HUGETUNE_MODE=follow "
                                    "(env -i, or a launcher that clears the environment), so it cannot be followed: ",
                   base_name(path)));
    ht_tls.guard--;
}
