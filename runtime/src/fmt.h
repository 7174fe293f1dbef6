/* fmt.h - allocation-free formatting: numbers, a bounded string buffer, a tiny
 * JSON writer, path template expansion, errno names.
 *
 * Why: hooks and the summary writer must not use stdio/snprintf (they may
 * allocate or take locks that a hook can be called under). Everything here
 * works on caller-provided memory and is pure, so it is unit-tested directly. */
#ifndef HT_FMT_H
#define HT_FMT_H

#include <stddef.h>
#include <stdint.h>

/* Decimal / hex ("0x..." lowercase) rendering; out needs 21 / 19 bytes.
 * Returns the length, the output is NUL-terminated. */
size_t ht_fmt_u64(char *out, uint64_t v);
size_t ht_fmt_i64(char *out, int64_t v);
size_t ht_fmt_hex(char *out, uint64_t v);

/* Strict unsigned parse of exactly n bytes. base 10: digits only.
 * base 16: optional "0x"/"0X" prefix then hex digits. Returns 0 or -1
 * (empty, bad digit, overflow). */
int ht_parse_u64(const char *s, size_t n, int base, uint64_t *out);

/* Bounded string builder. Always NUL-terminated; sets trunc on overflow. */
struct ht_buf {
    char *p;
    size_t len;
    size_t cap; /* including room for the NUL */
    int trunc;
};
void hb_init(struct ht_buf *b, char *mem, size_t cap);
void hb_putn(struct ht_buf *b, const char *s, size_t n);
void hb_puts(struct ht_buf *b, const char *s);
void hb_putc(struct ht_buf *b, char c);
void hb_u64(struct ht_buf *b, uint64_t v);
void hb_i64(struct ht_buf *b, int64_t v);
void hb_hex(struct ht_buf *b, uint64_t v);
/* Appends s as a quoted, escaped JSON string. */
void hb_json_str(struct ht_buf *b, const char *s);

/* Minimal streaming JSON writer on top of ht_buf: handles commas and nesting.
 * key == NULL means "array element / top-level value". */
#define HJ_MAX_DEPTH 16
struct ht_json {
    struct ht_buf *b;
    int depth;
    unsigned char first[HJ_MAX_DEPTH]; /* 1 = no element written yet */
};
void hj_init(struct ht_json *j, struct ht_buf *b);
void hj_obj_begin(struct ht_json *j, const char *key);
void hj_obj_end(struct ht_json *j);
void hj_arr_begin(struct ht_json *j, const char *key);
void hj_arr_end(struct ht_json *j);
void hj_u64(struct ht_json *j, const char *key, uint64_t v);
void hj_i64(struct ht_json *j, const char *key, int64_t v);
void hj_str(struct ht_json *j, const char *key, const char *v);
void hj_bool(struct ht_json *j, const char *key, int v);

/* Expands "%p" to pid and "%%" to "%" (other "%x" stay as they are).
 * Returns the length, or -1 if it does not fit in cap (incl. NUL). */
long ht_expand_path(const char *tmpl, long pid, char *out, size_t cap);
/* 1 if tmpl contains a "%p" that ht_expand_path would replace. */
int ht_path_has_pid(const char *tmpl);

/* "ENOMEM", "EINVAL", ... or "errno-N" for the rest; buf needs 24 bytes. */
const char *ht_errno_name(int e, char *buf);

#endif
