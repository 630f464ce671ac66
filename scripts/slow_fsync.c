/* LD_PRELOAD shim for scripts/bench-fsync-sweep: every fsync and fdatasync
 * does the real call, then waits SLOW_FSYNC_US more microseconds, so a fast
 * disk behaves like a slower one. Benchmarks only: it makes both servers of a
 * comparison pay the same extra latency per sync; it is never used by tests. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

static long extra_ns(void) {
  static long ns = -1;
  if (ns < 0) {
    const char *text = getenv("SLOW_FSYNC_US");
    ns = text ? atol(text) * 1000L : 0;
  }
  return ns;
}

static void wait_extra(void) {
  if (extra_ns() == 0) return;
  struct timespec left = {extra_ns() / 1000000000L, extra_ns() % 1000000000L};
  int saved = errno;
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  errno = saved;
}

int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  int result = real(fd);
  wait_extra();
  return result;
}

int fdatasync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
  int result = real(fd);
  wait_extra();
  return result;
}
