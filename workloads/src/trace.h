/* --trace FILE: the exact reference stream of the kernel phase, in hugetune's
 * reference stream format (docs/formats.md §6, include/hugetune/refstream.h).
 * Every reference a kernel makes through access.h during its passes is written:
 * the data the kernel works on (buffers, nodes, index, malloc'd blocks), not its
 * locals or libc's internals. Timings of a traced run are meaningless. */
#ifndef HTW_TRACE_H
#define HTW_TRACE_H

#include <stdint.h>

/* Non-zero while the kernel phase of a traced run is on. */
extern int htw_tracing;

/* Opens FILE and writes the header (exits EXIT_RESOURCE if it cannot). */
void trace_open(const char *path, int argc, char **argv);
/* The kernel phase begins / ends (no-ops without --trace). */
void trace_begin(void);
void trace_end(void);
/* Flushes every thread's buffer, writes END and closes the file. */
void trace_close(void);
/* Appends one reference of the calling thread. */
void trace_ref(const void *p, int write);

#endif
