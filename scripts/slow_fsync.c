/* LD_PRELOAD shim for fsync and fdatasync: slower syncs, stalled syncs or
 * failed syncs, on the real system calls of an unmodified program.
 *
 * Two ways to drive it:
 *   SLOW_FSYNC_US=N      every sync does the real call, then waits N more
 *                        microseconds; read once (scripts/bench-fsync-sweep:
 *                        both servers of a comparison pay the same extra
 *                        latency per sync).
 *   SLOW_FSYNC_FILE=PATH PATH is read at every call (the chaos lab's
 *                        storage faults, haqueue/lab/storage.py):
 *                          N   (microseconds) do the real call, then wait
 *                              while the file still asks for more than the
 *                              time waited so far, looking again every 10 ms:
 *                              a big N stalls the syncs, writing 0 ends the
 *                              stall at once;
 *                          EN  fail with errno N without syncing (E5: EIO),
 *                              as a disk that returns write errors does;
 *                        a missing or empty file means no fault.
 *
 * Fork-safe on purpose: no locks, no threads, no stdio, no allocation — only
 * open/read/close/nanosleep. The program forks a snapshot writer from a
 * multi-threaded parent; libfiu's preload (fiu-run -x) deadlocked exactly
 * there (its malloc wrapper takes an rwlock another thread held at fork).
 * errno is that of the real call unless a failure is injected. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SLICE_NS 10000000L /* how often a stalled call looks at the file again */

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);

/* Resolved once in the parent, before any fork: dlsym takes the loader lock. */
__attribute__((constructor)) static void resolve(void) {
  real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
}

static long fixed_ns(void) {
  static long ns = -1;
  if (ns < 0) {
    const char *text = getenv("SLOW_FSYNC_US");
    ns = text ? atol(text) * 1000L : 0;
  }
  return ns;
}

/* What the control file asks for now: *fail_errno set for "EN", else a delay in ns. */
static long file_ns(const char *path, int *fail_errno) {
  char text[32];
  *fail_errno = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  if (text[0] == 'E') {
    *fail_errno = atoi(text + 1);
    return 0;
  }
  return atol(text) * 1000L;
}

static long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void sleep_ns(long ns) {
  struct timespec left = {ns / 1000000000L, ns % 1000000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

static int synced(int (*real)(int), int fd) {
  const char *path = getenv("SLOW_FSYNC_FILE");
  int fail = 0;
  if (path) {
    file_ns(path, &fail);
    if (fail) {
      errno = fail;
      return -1;
    }
  }
  int result = real(fd);
  int saved = errno;
  if (path) {
    long start = now_ns();
    for (;;) {
      long left = file_ns(path, &fail) - (now_ns() - start);
      if (fail || left <= 0) break;
      sleep_ns(left < SLICE_NS ? left : SLICE_NS);
    }
  } else if (fixed_ns() > 0) {
    sleep_ns(fixed_ns());
  }
  errno = saved;
  return result;
}

int fsync(int fd) { return synced(real_fsync, fd); }

int fdatasync(int fd) { return synced(real_fdatasync, fd); }
