/* --trace FILE: per-thread buffers of encoded references, appended to one file in
 * chunks (each chunk starts with its thread's THREAD record; the encoder state is
 * per thread, so chunks of different threads may interleave). */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../include/hugetune/refstream.h"
#include "config.h"
#include "util.h"

#define TBUF_CAP (1u << 20)

struct tbuf {
    struct htrs_thread st;
    uint64_t tid;
    uint64_t refs;
    size_t len;
    struct tbuf *next;
    unsigned char data[TBUF_CAP];
};

int htw_tracing;
static int trace_fd = -1;
static int trace_armed;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tbuf *all_bufs;
static __thread struct tbuf *my_buf;

static void write_all(const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(trace_fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            die_resource("--trace: write failed: %s", strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
}

/* Appends a JSON string (the command line's arguments are arbitrary bytes). */
static size_t json_str(char *out, size_t cap, size_t n, const char *s)
{
    if (n + 2 >= cap)
        return n;
    out[n++] = '"';
    for (; *s && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n++] = '"';
    return n;
}

void trace_open(const char *path, int argc, char **argv)
{
    char json[8192];
    size_t n = (size_t)snprintf(json, sizeof json,
                                "{\"source\":\"workload-trace\",\"sampling\":\"complete\",\"command\":[");
    for (int i = 0; i < argc && n + 16 < sizeof json; i++) {
        if (i > 0)
            json[n++] = ',';
        n = json_str(json, sizeof json - 4, n, argv[i]);
    }
    json[n++] = ']';
    json[n++] = '}';
    json[n] = 0;
    trace_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (trace_fd < 0)
        die_resource("--trace: cannot create %s: %s", path, strerror(errno));
    unsigned char head[8192 + 16];
    size_t h = htrs_header(head, sizeof head, json);
    if (h == 0)
        die_resource("--trace: the command line is too long for the header");
    write_all(head, h);
    trace_armed = 1;
}

void trace_begin(void) { htw_tracing = trace_armed; }
void trace_end(void) { htw_tracing = 0; }

static void flush_locked(struct tbuf *b)
{
    if (b->len == 0)
        return;
    unsigned char rec[HTRS_MAX_REC];
    write_all(rec, htrs_thread_rec(rec, b->tid));
    write_all(b->data, b->len);
    b->len = 0;
}

static struct tbuf *new_buf(void)
{
    /* mmap, not malloc: tracing must not change the heap the kernel measures. */
    struct tbuf *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED)
        die_resource("--trace: no memory for a trace buffer");
    b->tid = (uint64_t)omp_get_thread_num();
    pthread_mutex_lock(&trace_lock);
    b->next = all_bufs;
    all_bufs = b;
    pthread_mutex_unlock(&trace_lock);
    return my_buf = b;
}

void trace_ref(const void *p, int write)
{
    struct tbuf *b = my_buf ? my_buf : new_buf();
    if (b->len + HTRS_MAX_REF > TBUF_CAP) {
        pthread_mutex_lock(&trace_lock);
        flush_locked(b);
        pthread_mutex_unlock(&trace_lock);
    }
    b->len += htrs_ref_next(b->data + b->len, &b->st, (uint64_t)(uintptr_t)p, write);
    b->refs++;
}

void trace_close(void)
{
    if (trace_fd < 0)
        return;
    uint64_t total = 0;
    pthread_mutex_lock(&trace_lock);
    for (struct tbuf *b = all_bufs; b; b = b->next) {
        flush_locked(b);
        total += b->refs;
    }
    pthread_mutex_unlock(&trace_lock);
    unsigned char rec[HTRS_MAX_REC];
    write_all(rec, htrs_end(rec, total, total));
    if (close(trace_fd) != 0)
        die_resource("--trace: closing the trace failed: %s", strerror(errno));
    trace_fd = -1;
}
