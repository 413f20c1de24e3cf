/* Minimal test harness for the standalone C tests: CHECK counts failures, RUN runs a test function, t_peers reads
 * the network peers run.sh provides, and a cross-thread latch lets the main thread wait (with a deadline) for callbacks that run on the engine thread. */
#ifndef OSB_TEST_HARNESS_H
#define OSB_TEST_HARNESS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

static int t_passed, t_failed, t_cur_failed;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      printf("  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);               \
      t_cur_failed = 1;                                                      \
    }                                                                        \
  } while (0)

#define CHECK_STR(a, b)                                                      \
  do {                                                                       \
    const char *a_ = (a), *b_ = (b);                                         \
    if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                 \
      printf("  FAIL %s:%d: %s == \"%s\" (got \"%s\")\n", __FILE__, __LINE__, \
             #a, b_ ? b_ : "(null)", a_ ? a_ : "(null)");                    \
      t_cur_failed = 1;                                                      \
    }                                                                        \
  } while (0)

#define RUN(fn)                                                              \
  do {                                                                       \
    t_cur_failed = 0;                                                        \
    fn();                                                                    \
    if (t_cur_failed) t_failed++, printf("not ok %s\n", #fn);               \
    else t_passed++, printf("ok %s\n", #fn);                                 \
  } while (0)

__attribute__((unused)) static int t_summary(void) {
  printf("%d passed, %d failed\n", t_passed, t_failed);
  return t_failed ? 1 : 0;
}

/* The peers of the network tests, set by run.sh: EXECD_URL (the local execd) and, when closed_url is given,
 * CLOSED_PORT (a loopback port nothing listens on) as a URL. Returns 1, or prints why with a failing summary line
 * and returns 0. */
__attribute__((unused)) static int t_peers(const char **execd, char *closed_url, size_t cap) {
  *execd = getenv("EXECD_URL");
  const char *closed = getenv("CLOSED_PORT");
  if (!*execd || (closed_url && !closed)) {
    printf("EXECD_URL / CLOSED_PORT not set (run through run.sh)\n0 passed, 1 failed\n");
    return 0;
  }
  if (closed_url) snprintf(closed_url, cap, "http://127.0.0.1:%s", closed);
  return 1;
}

/* A fresh directory /tmp/osb-test-<name>-XXXXXX written into dir (cap bytes). Returns 1, or 0 when it cannot be made. */
__attribute__((unused)) static int t_tempdir(char *dir, size_t cap, const char *name) {
  snprintf(dir, cap, "/tmp/osb-test-%s-XXXXXX", name);
  return mkdtemp(dir) != NULL;
}

/* Removes dir and everything under it (a directory made by t_tempdir); prints a line when it cannot. */
__attribute__((unused)) static void t_rmtree(const char *dir) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
}

typedef struct {
  uv_mutex_t mu;
  uv_cond_t cv;
  int count;
} latch;

__attribute__((unused)) static void latch_init(latch *l) {
  uv_mutex_init(&l->mu);
  uv_cond_init(&l->cv);
  l->count = 0;
}
__attribute__((unused)) static void latch_destroy(latch *l) {
  uv_mutex_destroy(&l->mu);
  uv_cond_destroy(&l->cv);
}
__attribute__((unused)) static void latch_hit(latch *l) {
  uv_mutex_lock(&l->mu);
  l->count++;
  uv_cond_broadcast(&l->cv);
  uv_mutex_unlock(&l->mu);
}
/* Waits until count >= n or timeout_ms passed. Returns 1 when reached. */
__attribute__((unused)) static int latch_wait(latch *l, int n, unsigned timeout_ms) {
  uint64_t deadline = uv_hrtime() + (uint64_t)timeout_ms * 1000000u;
  uv_mutex_lock(&l->mu);
  while (l->count < n) {
    uint64_t now = uv_hrtime();
    if (now >= deadline) break;
    uv_cond_timedwait(&l->cv, &l->mu, deadline - now);
  }
  int ok = l->count >= n;
  uv_mutex_unlock(&l->mu);
  return ok;
}
#endif
