/* unit_fmt.c - number formatting, string buffer, JSON writer, path expansion. */
#include "fmt.h"
#include "unit.h"

#include <errno.h>
#include <stdint.h>

static void test_numbers(void)
{
    char b[32];
    CHECK(ht_fmt_u64(b, 0) == 1);
    CHECK_STR(b, "0");
    ht_fmt_u64(b, 1234567890123ull);
    CHECK_STR(b, "1234567890123");
    CHECK(ht_fmt_u64(b, UINT64_MAX) == 20);
    CHECK_STR(b, "18446744073709551615");
    ht_fmt_i64(b, -1);
    CHECK_STR(b, "-1");
    ht_fmt_i64(b, INT64_MIN);
    CHECK_STR(b, "-9223372036854775808");
    ht_fmt_i64(b, INT64_MAX);
    CHECK_STR(b, "9223372036854775807");
    ht_fmt_hex(b, 0);
    CHECK_STR(b, "0x0");
    ht_fmt_hex(b, 0x7f12abcdef00ull);
    CHECK_STR(b, "0x7f12abcdef00");
    CHECK(ht_fmt_hex(b, UINT64_MAX) == 18);
    CHECK_STR(b, "0xffffffffffffffff");
}

static void test_parse(void)
{
    uint64_t v = 7;
    CHECK(ht_parse_u64("131072", 6, 10, &v) == 0 && v == 131072);
    CHECK(ht_parse_u64("18446744073709551615", 20, 10, &v) == 0 && v == UINT64_MAX);
    CHECK(ht_parse_u64("18446744073709551616", 20, 10, &v) == -1);
    CHECK(ht_parse_u64("", 0, 10, &v) == -1);
    CHECK(ht_parse_u64("12a", 3, 10, &v) == -1);
    CHECK(ht_parse_u64("-1", 2, 10, &v) == -1);
    CHECK(ht_parse_u64("0x1a2B3", 7, 16, &v) == 0 && v == 0x1a2b3);
    CHECK(ht_parse_u64("1a2b3", 5, 16, &v) == 0 && v == 0x1a2b3);
    CHECK(ht_parse_u64("0x", 2, 16, &v) == -1);
    CHECK(ht_parse_u64("0xg", 3, 16, &v) == -1);
    CHECK(ht_parse_u64("0x10000000000000000", 19, 16, &v) == -1);
    CHECK(ht_parse_u64("0xffffffffffffffff", 18, 16, &v) == 0 && v == UINT64_MAX);
    /* only n bytes are looked at */
    CHECK(ht_parse_u64("12 34", 2, 10, &v) == 0 && v == 12);
}

static void test_buf(void)
{
    char m[8];
    struct ht_buf b;
    hb_init(&b, m, sizeof m);
    hb_puts(&b, "abc");
    CHECK(b.len == 3 && !b.trunc);
    hb_u64(&b, 1234);
    CHECK_STR(m, "abc1234");
    CHECK(!b.trunc);
    hb_putc(&b, 'x');
    CHECK(b.trunc);
    CHECK_STR(m, "abc1234");
    CHECK(b.len == 7);

    char z[1];
    hb_init(&b, z, 1);
    hb_puts(&b, "a");
    CHECK(b.trunc && z[0] == 0);
}

static void test_json(void)
{
    char m[512];
    struct ht_buf b;
    struct ht_json j;
    hb_init(&b, m, sizeof m);
    hj_init(&j, &b);
    hj_obj_begin(&j, NULL);
    hj_u64(&j, "version", 1);
    hj_i64(&j, "neg", -5);
    hj_str(&j, "s", "a\"b\\c\nd\t\x01\x7f/é");
    hj_obj_begin(&j, "o");
    hj_obj_end(&j);
    hj_arr_begin(&j, "a");
    hj_str(&j, NULL, "x");
    hj_u64(&j, NULL, 2);
    hj_obj_begin(&j, NULL);
    hj_bool(&j, "t", 1);
    hj_bool(&j, "f", 0);
    hj_obj_end(&j);
    hj_arr_end(&j);
    hj_arr_begin(&j, "e");
    hj_arr_end(&j);
    hj_obj_end(&j);
    CHECK(!b.trunc);
    CHECK_STR(m, "{\"version\":1,\"neg\":-5,\"s\":\"a\\\"b\\\\c\\nd\\t\\u0001\\u007f/é\","
                 "\"o\":{},\"a\":[\"x\",2,{\"t\":true,\"f\":false}],\"e\":[]}");
}

/* Non-UTF-8 bytes (a plan line, a path in another encoding) must still give JSON. */
static void test_json_bytes(void)
{
    static const struct { const char *in, *out; } cases[] = {
        {"\xff\xfe", "\"\\u00ff\\u00fe\""},
        {"caf\xc3\xa9", "\"caf\xc3\xa9\""},               /* well-formed: kept */
        {"\xc3", "\"\\u00c3\""},                           /* truncated sequence */
        {"\xc0\xaf", "\"\\u00c0\\u00af\""},                 /* overlong '/' */
        {"\xed\xa0\x80", "\"\\u00ed\\u00a0\\u0080\""},       /* a surrogate */
        {"\xf4\x90\x80\x80", "\"\\u00f4\\u0090\\u0080\\u0080\""}, /* above U+10FFFF */
        {"\xf0\x9f\x98\x80!", "\"\xf0\x9f\x98\x80!\""},       /* 4 bytes, kept */
        {"a\xe2\x82", "\"a\\u00e2\\u0082\""},                 /* cut at the end */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char m[128];
        struct ht_buf b;
        hb_init(&b, m, sizeof m);
        hb_json_str(&b, cases[i].in);
        CHECK(!b.trunc);
        CHECK_STR(m, cases[i].out);
    }
}

static void test_path(void)
{
    char out[64];
    CHECK(ht_expand_path("/tmp/log.%p.bin", 1234, out, sizeof out) == 17);
    CHECK_STR(out, "/tmp/log.1234.bin");
    CHECK(ht_expand_path("%p%p", 7, out, sizeof out) == 2);
    CHECK_STR(out, "77");
    CHECK(ht_expand_path("a%%p%x%", 9, out, sizeof out) >= 0);
    CHECK_STR(out, "a%p%x%");
    CHECK(ht_expand_path("plain", 9, out, sizeof out) == 5);
    CHECK_STR(out, "plain");
    CHECK(ht_expand_path("/tmp/%p", 123456, out, 12) == 11);
    CHECK(ht_expand_path("/tmp/%p", 1234567, out, 12) == -1);
    CHECK(ht_expand_path("", 1, out, sizeof out) == 0);
    CHECK(ht_path_has_pid("x%p"));
    CHECK(!ht_path_has_pid("x%%p"));
    CHECK(!ht_path_has_pid("x%"));
    CHECK(ht_path_has_pid("%%%p"));
}

static void test_errno(void)
{
    char b[24];
    CHECK_STR(ht_errno_name(ENOMEM, b), "ENOMEM");
    CHECK_STR(ht_errno_name(EINVAL, b), "EINVAL");
    CHECK_STR(ht_errno_name(4242, b), "errno-4242");
}

int main(void)
{
    test_numbers();
    test_parse();
    test_buf();
    test_json();
    test_json_bytes();
    test_path();
    test_errno();
    return unit_done("unit_fmt");
}
