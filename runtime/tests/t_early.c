/* t_early - calls made before the runtime library is initialized
 * (libt_early.so's constructor, see there), and the address-space facts the
 * profile takes from a log: static segments of the program and of a library,
 * and the stacks of the main thread and of another thread.
 *
 * Prints one JSON line with libt_early's report (addresses of its pre-init
 * allocations, handler calls and the handler's code range, its .data/.bss)
 * and this program's .data/.bss variables, a main-stack and a thread-stack
 * address. Exit 0. */
#include "tcommon.h"

#include <pthread.h>

struct early_report {
    void *malloc4321, *calloc3000, *realloc5000, *memalign300, *mmap_page;
    long loops, handler_calls, handler_failures, signals_sent, in_call_hits;
    const void *handler_start, *handler_end;
    const void *data, *bss;
};
const struct early_report *early_report(void);

int main_data = 3;
char main_bss[1 << 20];

static void *thr(void *a)
{
    volatile int local = 1;
    *(const volatile void **)a = &local;
    free(malloc(10)); /* a hooked call: the thread announces itself */
    return NULL;
}

int main(void)
{
    const struct early_report *r = early_report();
    volatile int local = 2;
    const volatile void *thread_local_addr = NULL;
    pthread_t t;
    main_bss[12345] = (char)local;
    free(malloc(20));
    pthread_create(&t, NULL, thr, (void *)&thread_local_addr);
    pthread_join(t, NULL);
    printf("{\"pid\":%ld,\"exe\":\"%s\",\"malloc4321\":\"%p\",\"calloc3000\":\"%p\",\"realloc5000\":\"%p\","
           "\"memalign300\":\"%p\",\"mmap_page\":\"%p\",\"loops\":%ld,\"handler_calls\":%ld,"
           "\"handler_failures\":%ld,\"signals_sent\":%ld,\"in_call_hits\":%ld,\"handler_start\":\"%p\",\"handler_end\":\"%p\","
           "\"lib_data\":\"%p\",\"lib_bss\":\"%p\",\"main_data\":\"%p\",\"main_bss\":\"%p\","
           "\"main_stack\":\"%p\",\"thread_stack\":\"%p\"}\n",
           (long)getpid(), exe_path(), r->malloc4321, r->calloc3000, r->realloc5000, r->memalign300,
           r->mmap_page, r->loops, r->handler_calls, r->handler_failures, r->signals_sent, r->in_call_hits,
           r->handler_start, r->handler_end, r->data, r->bss, (void *)&main_data,
           (void *)&main_bss[12345], (const void *)&local, (const void *)thread_local_addr);
    return r->handler_failures ? 1 : 0;
}
