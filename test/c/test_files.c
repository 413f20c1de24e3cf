/* Standalone test of src/opensandbox/files.c against the dev-server's execd (started by run.sh; EXECD_URL): many
 * files in one multipart upload (binary, nested parents, modes), execd errors as typed api errors, bad input,
 * transport failure, cancel, and engine shutdown with an upload queued. Needs files.c in the Makefile's CORE and
 * test_files in TESTS. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "harness.h"
#include "core/engine.h"
#include "opensandbox/files.h"

static const char *EXECD;
static char CLOSED[64];
static char DIR_[256];

typedef struct {
  latch l;
  int called;
  osb_error err;
  int failed;
} result;

static void on_done(void *ud, const osb_error *err) {
  result *r = ud;
  r->called++;
  if (err) {
    r->failed = 1;
    r->err = *err;
  }
  latch_hit(&r->l);
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = malloc(1 << 20);
  *len = fread(buf, 1, 1 << 20, f);
  fclose(f);
  return buf;
}

static void test_many_files(void) {
  char err[256] = "";
  osb_engine *e = osb_engine_start(err, sizeof err);
  char p1[300], p2[300], p3[300];
  snprintf(p1, sizeof p1, "%s/a.txt", DIR_);
  snprintf(p2, sizeof p2, "%s/deep/er/b.sh", DIR_);
  snprintf(p3, sizeof p3, "%s/bin \"q\".dat", DIR_);
  const char bin[] = {0, 1, 2, (char)0xff, '\r', '\n', '-', '-', 0};
  osb_upload_file files[] = {
      {p1, 644, "alpha\n", 6},
      {p2, 755, "#!/bin/sh\necho b\n", 17},
      {p3, 600, bin, sizeof bin},
  };
  result r = {0};
  latch_init(&r.l);
  const char *hdr[] = {"X-Test", "secret-header-value"};
  osb_upload *u = osb_upload_start(e, EXECD, hdr, 1, NULL, files, 3, 10000, on_done, &r, err, sizeof err);
  CHECK(u != NULL);
  CHECK(latch_wait(&r.l, 1, 15000));
  CHECK(r.called == 1 && !r.failed);
  size_t len = 0;
  char *got = read_file(p1, &len);
  CHECK(got && len == 6 && memcmp(got, "alpha\n", 6) == 0);
  free(got);
  got = read_file(p3, &len);
  CHECK(got && len == sizeof bin && memcmp(got, bin, sizeof bin) == 0);
  free(got);
  struct stat st;
  CHECK(stat(p2, &st) == 0 && (st.st_mode & 0777) == 0755);
  CHECK(stat(p3, &st) == 0 && (st.st_mode & 0777) == 0600);
  osb_upload_release(u);
  osb_engine_stop(e);
  latch_destroy(&r.l);
}

static void test_errors(void) {
  char err[256] = "";
  osb_engine *e = osb_engine_start(err, sizeof err);
  /* a directory as the destination: execd answers 500 */
  osb_upload_file dir = {DIR_, 644, "x", 1};
  result r = {0};
  latch_init(&r.l);
  const char *hdr[] = {"X-EXECD-ACCESS-TOKEN", "tok-secret-1234"};
  osb_upload *u = osb_upload_start(e, EXECD, hdr, 1, NULL, &dir, 1, 10000, on_done, &r, err, sizeof err);
  CHECK(latch_wait(&r.l, 1, 15000));
  CHECK(r.failed && r.err.kind == OSB_KIND_API && r.err.status == 500);
  CHECK(strstr(r.err.message, "tok-secret-1234") == NULL);
  osb_upload_release(u);

  /* nothing listens: transport */
  result t = {0};
  latch_init(&t.l);
  osb_upload_file f = {"/tmp/x", 0, "x", 1};
  u = osb_upload_start(e, CLOSED, NULL, 0, NULL, &f, 1, 5000, on_done, &t, err, sizeof err);
  CHECK(latch_wait(&t.l, 1, 10000));
  CHECK(t.failed && t.err.kind == OSB_KIND_TRANSPORT);
  osb_upload_release(u);

  /* bad input: refused synchronously, callback never called */
  osb_upload_file rel = {"relative.txt", 644, "x", 1};
  CHECK(osb_upload_start(e, EXECD, NULL, 0, NULL, &rel, 1, 0, on_done, &t, err, sizeof err) == NULL);
  CHECK(strstr(err, "absolute") != NULL);
  osb_upload_file mode = {"/tmp/m", 648, "x", 1};
  CHECK(osb_upload_start(e, EXECD, NULL, 0, NULL, &mode, 1, 0, on_done, &t, err, sizeof err) == NULL);
  CHECK(strstr(err, "octal") != NULL);
  CHECK(osb_upload_start(e, EXECD, NULL, 0, NULL, &mode, 0, 0, on_done, &t, err, sizeof err) == NULL);
  CHECK(t.called == 1);
  osb_engine_stop(e);
  latch_destroy(&r.l);
  latch_destroy(&t.l);
}

static void test_cancel_and_shutdown(void) {
  char err[256] = "";
  osb_engine *e = osb_engine_start(err, sizeof err);
  size_t big = 32u << 20;
  char *data = calloc(1, big);
  char p[300];
  snprintf(p, sizeof p, "%s/big.bin", DIR_);
  osb_upload_file f = {p, 644, data, big};
  result r = {0};
  latch_init(&r.l);
  osb_upload *u = osb_upload_start(e, EXECD, NULL, 0, NULL, &f, 1, 30000, on_done, &r, err, sizeof err);
  CHECK(u != NULL);
  osb_upload_cancel(e, u); /* queued after the start job: cancels the transfer */
  CHECK(latch_wait(&r.l, 1, 15000));
  CHECK(r.called == 1 && r.failed && r.err.kind == OSB_KIND_CANCELLED);
  osb_upload_cancel(e, u); /* no-op once finished */
  osb_upload_release(u);

  result s = {0};
  latch_init(&s.l);
  u = osb_upload_start(e, EXECD, NULL, 0, NULL, &f, 1, 30000, on_done, &s, err, sizeof err);
  osb_engine_stop(e); /* settles the upload */
  CHECK(s.called == 1 && s.failed);
  osb_upload_release(u);
  free(data);
  latch_destroy(&r.l);
  latch_destroy(&s.l);
}

int main(void) {
  if (!t_peers(&EXECD, CLOSED, sizeof CLOSED)) return 1;
  if (!t_tempdir(DIR_, sizeof DIR_, "files")) return 1;
  RUN(test_many_files);
  RUN(test_errors);
  RUN(test_cancel_and_shutdown);
  t_rmtree(DIR_);
  return t_summary();
}
