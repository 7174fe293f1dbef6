/* unit.h - minimal unit test helpers (no framework dependency). */
#ifndef HT_UNIT_H
#define HT_UNIT_H

#include <stdio.h>
#include <string.h>

static int unit_failures;
static int unit_checks;

#define CHECK(cond)                                                               \
    do {                                                                          \
        unit_checks++;                                                            \
        if (!(cond)) {                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            unit_failures++;                                                      \
        }                                                                         \
    } while (0)

#define CHECK_STR(a, b)                                                           \
    do {                                                                          \
        unit_checks++;                                                            \
        const char *a_ = (a), *b_ = (b);                                          \
        if (strcmp(a_, b_) != 0) {                                                \
            fprintf(stderr, "%s:%d: CHECK_STR failed:\n  got  [%s]\n  want [%s]\n", \
                    __FILE__, __LINE__, a_, b_);                                  \
            unit_failures++;                                                      \
        }                                                                         \
    } while (0)

static inline int unit_done(const char *name)
{
    if (unit_failures) {
        fprintf(stderr, "%s: %d of %d checks failed\n", name, unit_failures, unit_checks);
        return 1;
    }
    printf("%s: %d checks ok\n", name, unit_checks);
    return 0;
}

#endif
