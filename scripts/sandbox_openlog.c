/* An LD_PRELOAD shim for finding what the sandbox refuses a driver or library: logs on stderr every
 * open, openat, mkdir, mknod and unlink that fails with EACCES or EPERM, with its path.
 *
 *   cc -shared -fPIC -O1 -o /tmp/openlog.so scripts/sandbox_openlog.c -ldl
 *   LD_PRELOAD=/tmp/openlog.so kfab sandbox -- python3 -c 'import torch; torch.cuda.init()'
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static void note(const char* what, const char* path, int flags) {
  if (errno == EACCES || errno == EPERM)
    fprintf(stderr, "sandbox_openlog: %s(%s, 0x%x) refused: errno %d\n", what, path ? path : "?", flags, errno);
}

#define OPEN_LIKE(name, ...)                                                              \
  int name(__VA_ARGS__, int flags, ...) {                                                 \
    static int (*real)() = 0;                                                             \
    if (!real) real = (int (*)())dlsym(RTLD_NEXT, #name);                                 \
    va_list ap;                                                                           \
    va_start(ap, flags);                                                                  \
    mode_t mode = (flags & (O_CREAT | __O_TMPFILE)) ? va_arg(ap, mode_t) : 0;             \
    va_end(ap);                                                                           \
    int r = OPEN_CALL;                                                                    \
    if (r < 0) {                                                                          \
      int e = errno;                                                                      \
      note(#name, path, flags);                                                           \
      errno = e;                                                                          \
    }                                                                                     \
    return r;                                                                             \
  }

#define OPEN_CALL real(path, flags, mode)
OPEN_LIKE(open, const char* path)
OPEN_LIKE(open64, const char* path)
#undef OPEN_CALL
#define OPEN_CALL real(dirfd, path, flags, mode)
OPEN_LIKE(openat, int dirfd, const char* path)
OPEN_LIKE(openat64, int dirfd, const char* path)
#undef OPEN_CALL

int mkdir(const char* path, mode_t mode) {
  static int (*real)(const char*, mode_t) = 0;
  if (!real) real = (int (*)(const char*, mode_t))dlsym(RTLD_NEXT, "mkdir");
  int r = real(path, mode);
  if (r < 0) {
    int e = errno;
    note("mkdir", path, 0);
    errno = e;
  }
  return r;
}

int mknod(const char* path, mode_t mode, dev_t dev) {
  static int (*real)(const char*, mode_t, dev_t) = 0;
  if (!real) real = (int (*)(const char*, mode_t, dev_t))dlsym(RTLD_NEXT, "mknod");
  int r = real(path, mode, dev);
  if (r < 0) {
    int e = errno;
    note("mknod", path, 0);
    errno = e;
  }
  return r;
}

int unlink(const char* path) {
  static int (*real)(const char*) = 0;
  if (!real) real = (int (*)(const char*))dlsym(RTLD_NEXT, "unlink");
  int r = real(path);
  if (r < 0) {
    int e = errno;
    note("unlink", path, 0);
    errno = e;
  }
  return r;
}
