/* sys.h - raw system calls for the library's own use.
 *
 * Why: the library exports mmap/munmap/mremap as hooks, so calling those names
 * internally would re-enter the hooks. Internal calls also must not disturb the
 * program's errno (a successful malloc that internally fell back from hugetlb to
 * THP must not leave ENOMEM in errno). Every wrapper here returns -errno on
 * failure and leaves errno untouched. */
#ifndef HT_SYS_H
#define HT_SYS_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* syscall() sets errno on failure; restore it and hand back -errno instead. */
#define HT_SYSCALL(...)                                                        \
    ({                                                                         \
        int ht_saved_errno_ = errno;                                           \
        long ht_r_ = syscall(__VA_ARGS__);                                     \
        if (ht_r_ == -1)                                                       \
            ht_r_ = -(long)errno;                                              \
        errno = ht_saved_errno_;                                               \
        ht_r_;                                                                 \
    })

/* Map: returns the address or a negative errno (as a pointer-sized long). */
static inline long ht_sys_mmap(void *addr, size_t len, int prot, int flags,
                               int fd, off_t off)
{
    return HT_SYSCALL(SYS_mmap, addr, len, prot, flags, fd, off);
}
static inline int ht_mmap_failed(long r) { return r < 0 && r > -4096; }

static inline long ht_sys_munmap(void *addr, size_t len)
{
    return HT_SYSCALL(SYS_munmap, addr, len);
}
static inline long ht_sys_madvise(void *addr, size_t len, int advice)
{
    return HT_SYSCALL(SYS_madvise, addr, len, advice);
}
static inline long ht_sys_mremap(void *old, size_t oldlen, size_t newlen,
                                 int flags, void *newaddr)
{
    return HT_SYSCALL(SYS_mremap, old, oldlen, newlen, flags, newaddr);
}
static inline long ht_sys_open(const char *path, int flags, int mode)
{
    return HT_SYSCALL(SYS_openat, -100 /* AT_FDCWD */, path, flags, mode);
}
static inline long ht_sys_close(int fd) { return HT_SYSCALL(SYS_close, fd); }
static inline long ht_sys_read(int fd, void *buf, size_t n)
{
    return HT_SYSCALL(SYS_read, fd, buf, n);
}
static inline long ht_sys_write(int fd, const void *buf, size_t n)
{
    return HT_SYSCALL(SYS_write, fd, buf, n);
}
static inline long ht_sys_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
    return HT_SYSCALL(SYS_pwrite64, fd, buf, n, off);
}
static inline long ht_sys_readlink(const char *path, char *buf, size_t n)
{
    return HT_SYSCALL(SYS_readlinkat, -100, path, buf, n);
}
static inline long ht_sys_fcntl(int fd, int cmd, long arg)
{
    return HT_SYSCALL(SYS_fcntl, fd, cmd, arg);
}
static inline int ht_sys_gettid(void) { return (int)syscall(SYS_gettid); }
static inline int ht_sys_getpid(void) { return (int)syscall(SYS_getpid); }
static inline int ht_sys_getppid(void) { return (int)syscall(SYS_getppid); }

#endif
