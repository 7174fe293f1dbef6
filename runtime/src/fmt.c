/* fmt.c - allocation-free formatting (see fmt.h for why). */
#include "fmt.h"

#include <errno.h>
#include <string.h>

size_t ht_fmt_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    out[n] = 0;
    return n;
}

size_t ht_fmt_i64(char *out, int64_t v)
{
    if (v >= 0)
        return ht_fmt_u64(out, (uint64_t)v);
    out[0] = '-';
    /* -(v+1)+1 avoids overflow for INT64_MIN */
    return 1 + ht_fmt_u64(out + 1, (uint64_t)(-(v + 1)) + 1);
}

size_t ht_fmt_hex(char *out, uint64_t v)
{
    static const char dig[] = "0123456789abcdef";
    char tmp[16];
    size_t n = 0;
    do {
        tmp[n++] = dig[v & 15];
        v >>= 4;
    } while (v);
    out[0] = '0';
    out[1] = 'x';
    for (size_t i = 0; i < n; i++)
        out[2 + i] = tmp[n - 1 - i];
    out[2 + n] = 0;
    return 2 + n;
}

int ht_parse_u64(const char *s, size_t n, int base, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    if (base == 16 && n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        i = 2;
    if (i >= n)
        return -1;
    for (; i < n; i++) {
        int d;
        char c = s[i];
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return -1;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = v;
    return 0;
}

void hb_init(struct ht_buf *b, char *mem, size_t cap)
{
    b->p = mem;
    b->len = 0;
    b->cap = cap;
    b->trunc = 0;
    if (cap)
        mem[0] = 0;
}

void hb_putn(struct ht_buf *b, const char *s, size_t n)
{
    if (b->cap == 0) {
        b->trunc = 1;
        return;
    }
    size_t room = b->cap - 1 - b->len;
    if (n > room) {
        n = room;
        b->trunc = 1;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void hb_puts(struct ht_buf *b, const char *s) { hb_putn(b, s, strlen(s)); }
void hb_putc(struct ht_buf *b, char c) { hb_putn(b, &c, 1); }

void hb_u64(struct ht_buf *b, uint64_t v)
{
    char t[24];
    hb_putn(b, t, ht_fmt_u64(t, v));
}
void hb_i64(struct ht_buf *b, int64_t v)
{
    char t[24];
    hb_putn(b, t, ht_fmt_i64(t, v));
}
void hb_hex(struct ht_buf *b, uint64_t v)
{
    char t[24];
    hb_putn(b, t, ht_fmt_hex(t, v));
}

/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF), 0 if the bytes there are not one. */
static size_t utf8_seq_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c >= 0xc2 && c <= 0xdf)
        return (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        unsigned char lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 ? 3 : 0;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        unsigned char lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        return s[1] >= lo && s[1] <= hi && (s[2] & 0xc0) == 0x80 && (s[3] & 0xc0) == 0x80 ? 4 : 0;
    }
    return 0;
}

/* JSON must be UTF-8, but paths, plan lines and environment values are bytes:
 * well-formed UTF-8 passes through, any other byte >= 0x80 becomes \u00XX (the
 * code point of that byte read as Latin-1), so the summary always parses. */
void hb_json_str(struct ht_buf *b, const char *s)
{
    static const char dig[] = "0123456789abcdef";
    hb_putc(b, '"');
    while (*s) {
        unsigned char c = (unsigned char)*s;
        size_t n;
        switch (c) {
        case '"': hb_puts(b, "\\\""); break;
        case '\\': hb_puts(b, "\\\\"); break;
        case '\n': hb_puts(b, "\\n"); break;
        case '\r': hb_puts(b, "\\r"); break;
        case '\t': hb_puts(b, "\\t"); break;
        default:
            if (c >= 0x80 && (n = utf8_seq_len((const unsigned char *)s)) != 0) {
                hb_putn(b, s, n);
                s += n;
                continue;
            }
            if (c < 0x20 || c >= 0x7f) {
                char u[6] = {'\\', 'u', '0', '0', dig[c >> 4], dig[c & 15]};
                hb_putn(b, u, 6);
            } else {
                hb_putc(b, (char)c);
            }
        }
        s++;
    }
    hb_putc(b, '"');
}

void hj_init(struct ht_json *j, struct ht_buf *b)
{
    j->b = b;
    j->depth = 0;
    j->first[0] = 1;
}

static void hj_prefix(struct ht_json *j, const char *key)
{
    if (!j->first[j->depth])
        hb_putc(j->b, ',');
    j->first[j->depth] = 0;
    if (key) {
        hb_json_str(j->b, key);
        hb_putc(j->b, ':');
    }
}

static void hj_open(struct ht_json *j, const char *key, char c)
{
    hj_prefix(j, key);
    hb_putc(j->b, c);
    if (j->depth + 1 < HJ_MAX_DEPTH)
        j->depth++;
    j->first[j->depth] = 1;
}

static void hj_close(struct ht_json *j, char c)
{
    hb_putc(j->b, c);
    if (j->depth > 0)
        j->depth--;
}

void hj_obj_begin(struct ht_json *j, const char *key) { hj_open(j, key, '{'); }
void hj_obj_end(struct ht_json *j) { hj_close(j, '}'); }
void hj_arr_begin(struct ht_json *j, const char *key) { hj_open(j, key, '['); }
void hj_arr_end(struct ht_json *j) { hj_close(j, ']'); }

void hj_u64(struct ht_json *j, const char *key, uint64_t v)
{
    hj_prefix(j, key);
    hb_u64(j->b, v);
}
void hj_i64(struct ht_json *j, const char *key, int64_t v)
{
    hj_prefix(j, key);
    hb_i64(j->b, v);
}
void hj_str(struct ht_json *j, const char *key, const char *v)
{
    hj_prefix(j, key);
    hb_json_str(j->b, v);
}
void hj_bool(struct ht_json *j, const char *key, int v)
{
    hj_prefix(j, key);
    hb_puts(j->b, v ? "true" : "false");
}

long ht_expand_path(const char *tmpl, long pid, char *out, size_t cap)
{
    struct ht_buf b;
    if (cap == 0)
        return -1;
    hb_init(&b, out, cap);
    for (const char *s = tmpl; *s; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            hb_i64(&b, pid);
            s++;
        } else if (s[0] == '%' && s[1] == '%') {
            hb_putc(&b, '%');
            s++;
        } else {
            hb_putc(&b, *s);
        }
    }
    return b.trunc ? -1 : (long)b.len;
}

int ht_path_has_pid(const char *tmpl)
{
    for (const char *s = tmpl; *s; s++) {
        if (s[0] == '%' && s[1] == 'p')
            return 1;
        if (s[0] == '%' && s[1] == '%')
            s++;
    }
    return 0;
}

const char *ht_errno_name(int e, char *buf)
{
    switch (e) {
    case ENOMEM: return "ENOMEM";
    case EINVAL: return "EINVAL";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case EAGAIN: return "EAGAIN";
    case EFAULT: return "EFAULT";
    case ENODEV: return "ENODEV";
    case ENOENT: return "ENOENT";
    case EOVERFLOW: return "EOVERFLOW";
    case EBADF: return "EBADF";
    case ENOSPC: return "ENOSPC";
    case ENOSYS: return "ENOSYS";
    case EEXIST: return "EEXIST";
    case EBUSY: return "EBUSY";
    case EIO: return "EIO";
    case EFBIG: return "EFBIG";
    case EINTR: return "EINTR";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case EROFS: return "EROFS";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EDQUOT: return "EDQUOT";
    case EISDIR: return "EISDIR (a directory)";
    case ENOTDIR: return "ENOTDIR";
    case ELOOP: return "ELOOP";
    default: {
        struct ht_buf b;
        hb_init(&b, buf, 24);
        hb_puts(&b, "errno-");
        hb_i64(&b, e);
        return buf;
    }
    }
}
