/* Standalone test of src/opensandbox/fileops.c against the dev-server's execd (started by run.sh; EXECD_URL):
 * info, list, search, mkdir, mv, replace, download (whole, Range, size hint, limit), remove, rmdir; execd errors as
 * typed api errors with the endpoint header's value redacted; bad input refused synchronously; transport failure;
 * cancel; engine shutdown with an operation queued. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "core/engine.h"
#include "opensandbox/fileops.h"

static const char *EXECD;
static char CLOSED[64];
static char DIR_[256];

typedef struct {
  latch l;
  int called;
  int failed;
  osb_error err;
  char *data;
  size_t len;
} result;

static void on_done(void *ud, const osb_error *err, char *data, size_t len) {
  result *r = ud;
  r->called++;
  if (err) {
    r->failed = 1;
    r->err = *err;
  }
  free(r->data);
  r->data = data;
  r->len = len;
  latch_hit(&r->l);
}

/* Runs one operation to the end over conn; r is reset first. */
static void run_op(osb_engine *e, const osb_conn *conn, const osb_fop_req *q, result *r) {
  free(r->data);
  memset(r, 0, sizeof *r);
  latch_init(&r->l);
  char err[256] = "";
  osb_fop *op = osb_fop_start(e, conn, q, on_done, r, err, sizeof err);
  CHECK(op != NULL);
  if (op) CHECK(latch_wait(&r->l, 1, 15000));
  osb_fop_release(op);
  latch_destroy(&r->l);
}

static void test_operations(void) {
  char err[256] = "";
  osb_engine *e = osb_engine_start(err, sizeof err);
  const char *hdr[] = {"X-Test", "secret-header-value"};
  osb_conn conn;
  CHECK(osb_conn_init(&conn, EXECD, hdr, 1, 10000, 0, err, sizeof err) == 0);
  char d[300], f[300], g[300], moved[300];
  snprintf(d, sizeof d, "%s/a b/c&d", DIR_);
  snprintf(f, sizeof f, "%s/a b/c&d/f?.txt", DIR_);
  snprintf(g, sizeof g, "%s/a b/g.txt", DIR_);
  snprintf(moved, sizeof moved, "%s/a b/m/moved.txt", DIR_);
  result r = {0};
  const char *one[] = {d};
  osb_fop_req q = {.kind = OSB_FOP_MKDIR, .paths = one, .npaths = 1, .num = 755};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && r.data == NULL);
  FILE *fp = fopen(f, "wb");
  CHECK(fp != NULL);
  if (fp) {
    fputs("hello world\nline two\n", fp);
    fclose(fp);
  }

  const char *both[] = {f, d};
  q = (osb_fop_req){.kind = OSB_FOP_INFO, .paths = both, .npaths = 2};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && r.data && strstr(r.data, "\"type\":\"file\"") && strstr(r.data, "\"type\":\"directory\"") &&
        strstr(r.data, "\"size\":21"));

  const char *fp1[] = {f};
  q = (osb_fop_req){.kind = OSB_FOP_DOWNLOAD, .paths = fp1, .npaths = 1, .range_start = -1, .range_end = -1, .size_hint = 21};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && r.len == 21 && memcmp(r.data, "hello world\nline two\n", 21) == 0 && r.data[21] == 0);
  q.range_start = 6;
  q.range_end = 10;
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && r.len == 5 && memcmp(r.data, "world", 5) == 0);
  q.range_start = -1;
  q.range_end = -1;
  q.max_bytes = 4; /* more than the limit: refused, nothing handed over */
  run_op(e, &conn, &q, &r);
  CHECK(r.failed && strcmp(r.err.code, "RESPONSE_TOO_LARGE") == 0 && r.data == NULL);

  const char *dir1[] = {DIR_};
  q = (osb_fop_req){.kind = OSB_FOP_LIST, .paths = dir1, .npaths = 1, .num = 3};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && r.data && r.data[0] == '[' && strstr(r.data, "f?.txt"));
  q = (osb_fop_req){.kind = OSB_FOP_SEARCH, .paths = dir1, .npaths = 1, .text = "*.txt"};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && r.data && strstr(r.data, "f?.txt"));

  q = (osb_fop_req){.kind = OSB_FOP_REPLACE, .paths = fp1, .npaths = 1, .text = "line", .text2 = "LINE"};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && r.data && strstr(r.data, "\"replacedCount\":1"));

  const char *mv[] = {f, moved};
  q = (osb_fop_req){.kind = OSB_FOP_MOVE, .paths = mv, .npaths = 2};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && access(moved, F_OK) == 0 && access(f, F_OK) != 0);
  const char *mp[] = {moved};
  q = (osb_fop_req){.kind = OSB_FOP_CHMOD, .paths = mp, .npaths = 1, .num = 600};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed);

  /* missing file: a typed 404 without the header value in it */
  const char *gone[] = {g};
  q = (osb_fop_req){.kind = OSB_FOP_INFO, .paths = gone, .npaths = 1};
  run_op(e, &conn, &q, &r);
  CHECK(r.failed && r.err.kind == OSB_KIND_API && r.err.status == 404 && strcmp(r.err.code, "FILE_NOT_FOUND") == 0);
  CHECK(strstr(r.err.message, "secret-header-value") == NULL);

  q = (osb_fop_req){.kind = OSB_FOP_REMOVE, .paths = mp, .npaths = 1};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && access(moved, F_OK) != 0);
  q = (osb_fop_req){.kind = OSB_FOP_RMDIR, .paths = one, .npaths = 1};
  run_op(e, &conn, &q, &r);
  CHECK(!r.failed && access(d, F_OK) != 0);

  /* bad input: refused synchronously */
  const char *rel[] = {"relative"};
  q = (osb_fop_req){.kind = OSB_FOP_INFO, .paths = rel, .npaths = 1};
  CHECK(osb_fop_start(e, &conn, &q, on_done, &r, err, sizeof err) == NULL && strstr(err, "absolute"));
  q = (osb_fop_req){.kind = OSB_FOP_MOVE, .paths = one, .npaths = 1};
  CHECK(osb_fop_start(e, &conn, &q, on_done, &r, err, sizeof err) == NULL);
  q = (osb_fop_req){.kind = OSB_FOP_MKDIR, .paths = one, .npaths = 1, .num = 758};
  CHECK(osb_fop_start(e, &conn, &q, on_done, &r, err, sizeof err) == NULL && strstr(err, "octal"));
  q = (osb_fop_req){.kind = OSB_FOP_REPLACE, .paths = one, .npaths = 1, .text = ""};
  CHECK(osb_fop_start(e, &conn, &q, on_done, &r, err, sizeof err) == NULL);
  /* the egress sidecar's /policy kinds: rules come in action/target pairs, targets at least one, get none */
  const char *odd[] = {"allow", "a.test", "deny"};
  q = (osb_fop_req){.kind = OSB_FOP_POLICY_PATCH, .paths = odd, .npaths = 3};
  CHECK(osb_fop_start(e, &conn, &q, on_done, &r, err, sizeof err) == NULL && strstr(err, "at least one rule"));
  q = (osb_fop_req){.kind = OSB_FOP_POLICY_DELETE, .paths = odd, .npaths = 0};
  CHECK(osb_fop_start(e, &conn, &q, on_done, &r, err, sizeof err) == NULL && strstr(err, "at least one target"));
  q = (osb_fop_req){.kind = OSB_FOP_POLICY_GET, .paths = odd, .npaths = 1};
  CHECK(osb_fop_start(e, &conn, &q, on_done, &r, err, sizeof err) == NULL);
  q = (osb_fop_req){.kind = (osb_fop_kind)(OSB_FOP_POLICY_DELETE + 1), .paths = one, .npaths = 1};
  CHECK(osb_fop_start(e, &conn, &q, on_done, &r, err, sizeof err) == NULL);
  /* execd serves no /policy: the GET is sent and its 404 reported */
  q = (osb_fop_req){.kind = OSB_FOP_POLICY_GET, .timeout_ms = 10000};
  run_op(e, &conn, &q, &r);
  CHECK(r.failed && r.err.status == 404 && r.data == NULL);

  free(r.data);
  osb_conn_clear(&conn);
  osb_engine_stop(e);
}

static void test_transport_cancel_shutdown(void) {
  char err[256] = "";
  osb_engine *e = osb_engine_start(err, sizeof err);
  osb_conn closed, conn;
  CHECK(osb_conn_init(&closed, CLOSED, NULL, 0, 5000, 0, err, sizeof err) == 0);
  CHECK(osb_conn_init(&conn, EXECD, NULL, 0, 5000, 0, err, sizeof err) == 0);
  const char *p[] = {"/tmp"};
  osb_fop_req q = {.kind = OSB_FOP_LIST, .paths = p, .npaths = 1, .num = 1};
  result r = {0};
  run_op(e, &closed, &q, &r);
  CHECK(r.failed && r.err.kind == OSB_KIND_TRANSPORT);
  CHECK(r.err.attempts == 1); /* a refused GET is not retried until the deadline: the caller asks the lifecycle API */

  memset(&r, 0, sizeof r);
  latch_init(&r.l);
  osb_fop *op = osb_fop_start(e, &conn, &q, on_done, &r, err, sizeof err);
  osb_fop_cancel(e, op);
  CHECK(latch_wait(&r.l, 1, 10000));
  CHECK(r.called == 1 && r.failed && r.err.kind == OSB_KIND_CANCELLED && r.data == NULL);
  osb_fop_cancel(e, op); /* no-op once finished */
  osb_fop_release(op);
  latch_destroy(&r.l);

  result s = {0};
  latch_init(&s.l);
  op = osb_fop_start(e, &conn, &q, on_done, &s, err, sizeof err);
  osb_engine_stop(e); /* settles the operation */
  CHECK(s.called == 1);
  free(s.data);
  osb_fop_release(op);
  latch_destroy(&s.l);
  osb_conn_clear(&closed);
  osb_conn_clear(&conn);
}

static void test_query_escape(void) {
  osb_buf b;
  osb_buf_init(&b);
  CHECK(osb_query_escape(&b, "/a b/c&d=e?f#g%$~_.-") == 0);
  CHECK_STR(b.data, "/a%20b/c%26d%3De%3Ff%23g%25%24~_.-");
  osb_buf_free(&b);
}

int main(void) {
  if (!t_peers(&EXECD, CLOSED, sizeof CLOSED)) return 1;
  if (!t_tempdir(DIR_, sizeof DIR_, "fileops")) return 1;
  RUN(test_query_escape);
  RUN(test_operations);
  RUN(test_transport_cancel_shutdown);
  t_rmtree(DIR_);
  return t_summary();
}
