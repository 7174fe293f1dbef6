/* standalone.c - runs fuzz inputs through LLVMFuzzerTestOneInput without
 * libFuzzer, so the saved corpus is a regression test built with gcc (plain
 * and with ASan/UBSan). Arguments: files, or directories whose regular files
 * are all run. Exit 0 when every input passed; a failed property aborts. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Names the input that failed: on abort() (a violated property) and, in the
 * sanitizer build, when ASan/UBSan end the process. */
extern void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));
static const char *g_current;

static void say_current(void)
{
    static const char pre[] = "fuzz-regress: FAILED on input ";
    if (!g_current)
        return;
    (void)!write(2, pre, sizeof pre - 1);
    (void)!write(2, g_current, strlen(g_current));
    (void)!write(2, "\n", 1);
}

static void on_abort(int sig)
{
    say_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return -1;
    }
    for (;;) {
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0)
            break;
        n += r;
    }
    fclose(f);
    /* Exact-size copy: reads past the input's end are caught by ASan. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    if (getenv("FUZZ_VERBOSE"))
        fprintf(stderr, "fuzz-regress: %s (%zu bytes)\n", path, n);
    g_current = path;
    LLVMFuzzerTestOneInput(exact, n);
    g_current = NULL;
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    long ran = 0;
    int bad = 0;
    signal(SIGABRT, on_abort);
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(say_current);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            bad = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[i]) != 0;
            ran++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            perror(argv[i]);
            bad = 1;
            continue;
        }
        char **names = NULL;
        size_t nn = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            char **nnames = realloc(names, (nn + 1) * sizeof *names);
            if (!nnames)
                abort();
            names = nnames;
            size_t l = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[nn] = malloc(l);
            if (!names[nn])
                abort();
            snprintf(names[nn], l, "%s/%s", argv[i], e->d_name);
            nn++;
        }
        closedir(d);
        if (nn > 1)
            qsort(names, nn, sizeof *names, cmp);
        for (size_t k = 0; k < nn; k++) {
            if (stat(names[k], &st) == 0 && S_ISREG(st.st_mode)) {
                bad |= run_file(names[k]) != 0;
                ran++;
            }
            free(names[k]);
        }
        free(names);
    }
    printf("fuzz-regress: %ld inputs, %s\n", ran, bad ? "unreadable inputs" : "all passed");
    return bad || ran == 0;
}
