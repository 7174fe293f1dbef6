/* iocopy: the I/O-bound control (seed 004: "copy a 1.5 GB file from one file to
 * another", timed under every page size setting; page sizes should not matter).
 *
 * Before the passes (not timed): --file PATH is created (it must not exist, nor
 * PATH.copy) with --size bytes of seeded data (64-bit words mix64(key + i), written
 * 1 MiB at a time), fsync'ed; PATH.copy is created empty.  A pass: (not timed) open
 * PATH, posix_fadvise(POSIX_FADV_DONTNEED) on it so that the copy reads from the
 * device rather than the page cache, open PATH.copy truncated; (timed) copy PATH to
 * PATH.copy with read/write of a 1 MiB buffer, summing the buffer's words as they go
 * by (a Fletcher-like sum, the checksum), and fsync PATH.copy.  The sum must equal
 * the data's (else exit 3).  Both files are removed at exit: normal, error (exit 2 or
 * 3) or SIGINT/SIGTERM/SIGHUP.  --place, --page and --threads are ignored (reported
 * as given): the copy is one sequential loop, like cp.
 *
 * On a file system without a device (tmpfs) the advice does nothing and the copy runs
 * from memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "access.h"
#include "kernels.h"
#include "rng.h"
#include "trace.h"
#include "util.h"

#define CHUNK (1u << 20)

static char *src_path, *dst_path;
static volatile sig_atomic_t src_made, dst_made;

static void remove_files(void)
{
    if (dst_made)
        unlink(dst_path);
    if (src_made)
        unlink(src_path);
    dst_made = src_made = 0;
}

static void on_signal(int sig)
{
    remove_files();
    signal(sig, SIG_DFL);
    raise(sig);
}

static int create_new(const char *path, volatile sig_atomic_t *made)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == EEXIST)
            die_usage("--file: %s exists (iocopy creates it and PATH.copy, and removes both; give a new name)", path);
        die_resource("cannot create %s: %s", path, strerror(errno));
    }
    *made = 1;
    return fd;
}

static size_t read_full(int fd, unsigned char *buf, size_t n, const char *path)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die_resource("read %s: %s", path, strerror(errno));
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return got;
}

static void write_full(int fd, const unsigned char *buf, size_t n, const char *path)
{
    while (n > 0) {
        ssize_t w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            die_resource("write %s: %s", path, strerror(errno));
        }
        buf += w;
        n -= (size_t)w;
    }
}

static void sync_file(int fd, const char *path)
{
    if (fsync(fd) != 0)
        die_resource("fsync %s: %s", path, strerror(errno));
}

/* Fletcher-like sum over the 64-bit words of the data (the last one zero-padded);
 * the chunks are whole words except the last. */
struct fsum { uint64_t s1, s2; };

static void fsum_add(struct fsum *f, const unsigned char *buf, size_t len)
{
    const uint64_t *const w = (const uint64_t *)buf;
    uint64_t s1 = f->s1, s2 = f->s2;
    for (size_t i = 0; i < len / 8; i++) {
        s1 += ref_load_u64(&w[i]);
        s2 += s1;
    }
    if (len % 8) {
        uint64_t last = 0;
        memcpy(&last, buf + len / 8 * 8, len % 8);   /* not traced: the bytes were just read */
        s1 += last;
        s2 += s1;
    }
    f->s1 = s1;
    f->s2 = s2;
}

static uint64_t fsum_value(const struct fsum *f) { return f->s2 ^ (f->s1 << 32 | f->s1 >> 32); }

void kernel_iocopy(const struct config *cfg, struct kresult *res)
{
    struct phase ph;
    phase_begin(&ph);
    const size_t plen = strlen(cfg->file);
    src_path = xmalloc(plen + 1);
    memcpy(src_path, cfg->file, plen + 1);
    dst_path = xmalloc(plen + 6);
    memcpy(dst_path, cfg->file, plen);
    memcpy(dst_path + plen, ".copy", 6);
    atexit(remove_files);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    unsigned char *buf;
    if (posix_memalign((void **)&buf, 4096, CHUNK) != 0)
        die_resource("cannot allocate the 1 MiB copy buffer");
    uint64_t st = stream_seed(cfg->seed, RNG_IOCOPY, 0);
    const uint64_t key = splitmix64(&st);
    int fd = create_new(src_path, &src_made);
    close(create_new(dst_path, &dst_made));
    struct fsum want = { 0, 0 };
    for (uint64_t off = 0; off < cfg->size; off += CHUNK) {
        const size_t n = cfg->size - off < CHUNK ? (size_t)(cfg->size - off) : CHUNK;
        uint64_t *const w = (uint64_t *)buf;
        for (size_t i = 0; i < CHUNK / 8; i++)
            w[i] = mix64(key + off / 8 + i);
        write_full(fd, buf, n, src_path);
        fsum_add(&want, buf, n);
    }
    sync_file(fd, src_path);
    close(fd);
    phase_end(&ph, &res->init_seconds, &res->init_minor_faults);

    res->seconds = 0.0;
    res->minor_faults = 0;
    uint64_t got = 0;
    for (uint64_t it = 0; it < cfg->iters; it++) {
        const int in = open(src_path, O_RDONLY | O_CLOEXEC);
        if (in < 0)
            die_resource("cannot open %s: %s", src_path, strerror(errno));
        (void)posix_fadvise(in, 0, 0, POSIX_FADV_DONTNEED);   /* advice: no error is fatal */
        const int out = open(dst_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (out < 0)
            die_resource("cannot open %s: %s", dst_path, strerror(errno));
        struct fsum f = { 0, 0 };
        double secs;
        uint64_t faults;
        phase_begin(&ph);
        trace_begin();
        for (;;) {
            const size_t n = read_full(in, buf, CHUNK, src_path);
            if (n == 0)
                break;
            fsum_add(&f, buf, n);
            write_full(out, buf, n, dst_path);
        }
        sync_file(out, dst_path);
        trace_end();
        phase_end(&ph, &secs, &faults);
        res->seconds += secs;
        res->minor_faults += faults;
        close(out);
        close(in);
        got = fsum_value(&f);
        if (got != fsum_value(&want))
            die_resource("%s: the copy read other bytes than were written (sum %016llx, expected %016llx)",
                         src_path, (unsigned long long)got, (unsigned long long)fsum_value(&want));
    }
    res->accesses = cfg->size;
    res->checksum = got;
    res->buffer = (uintptr_t)buf;
    free(buf);
    remove_files();
}
