/* Code interpreter client tests (src/opensandbox/code.c) against a real execd (the dev-server's, started
 * standalone by run.sh; EXECD_URL) with real python kernels: contexts (create/get/list/delete, 404), state across
 * cells, results, errors with traceback, output bounded per stream with the stream drained, cell timeout and
 * interrupt (the kernel is interrupted, the context survives), unknown context (500), bad input, a closed port, a
 * handle released early, and engine shutdown with a cell running (no leaks under ASan and valgrind). */
#include <stdlib.h>
#include "harness.h"
#include "core/buf.h"
#include "core/engine.h"
#include "opensandbox/code.h"

static const char *EXECD;
static char CLOSED[64];
static osb_engine *E;
static osb_code *X;

/* ---- plain calls ---- */

typedef struct {
  latch done;
  int failed;
  osb_error err;
  char json[4096];
} call_rec;

static void on_json(void *ud, const osb_error *err, char *json) {
  call_rec *c = ud;
  c->failed = err != NULL;
  if (err) c->err = *err;
  else snprintf(c->json, sizeof c->json, "%s", json);
  free(json);
  latch_hit(&c->done);
}

#define CALL(c, expr)                                  \
  do {                                                 \
    memset(&(c), 0, sizeof(c));                        \
    latch_init(&(c).done);                             \
    char e_[256] = "";                                 \
    CHECK((expr) == 0);                                \
    CHECK(latch_wait(&(c).done, 1, 20000));            \
    latch_destroy(&(c).done);                          \
  } while (0)

/* Creates a python context; writes its id (a UUID) into id. */
static int new_context(char id[64]) {
  call_rec c;
  CALL(c, osb_code_create_context(E, X, "python", NULL, 0, on_json, &c, e_, sizeof e_));
  const char *p = strstr(c.json, "\"id\":\"");
  const char *q = p ? strchr(p + 6, '"') : NULL;
  if (c.failed || !q) return -1;
  snprintf(id, 64, "%.*s", (int)(q - (p + 6)), p + 6); /* a UUID, like execd's context ids */
  return 0;
}

/* ---- cells ---- */

typedef struct {
  latch done;
  uv_mutex_t mu;
  osb_buf out, err; /* every batch */
  int batches, failed;
  osb_error e;
  /* copied from the result */
  char ctx[64], ename[64], evalue[128], last_tb[256], results[512], rout[2048];
  size_t out_len, err_len, ntb, results_count, results_dropped;
  uint64_t out_dropped, err_dropped;
  long count;
  int has_error, completed, timed_out, interrupted;
} cell;

static void on_output(void *ud, const char *o, size_t ol, const char *e, size_t el) {
  cell *c = ud;
  uv_mutex_lock(&c->mu);
  osb_buf_append(&c->out, o, ol);
  osb_buf_append(&c->err, e, el);
  c->batches++;
  uv_mutex_unlock(&c->mu);
}

static void on_result(void *ud, const osb_error *err, const osb_code_result *r) {
  cell *c = ud;
  if (err) {
    c->failed = 1;
    c->e = *err;
  } else {
    snprintf(c->ctx, sizeof c->ctx, "%s", r->context_id);
    snprintf(c->ename, sizeof c->ename, "%s", r->ename);
    snprintf(c->evalue, sizeof c->evalue, "%s", r->evalue);
    snprintf(c->last_tb, sizeof c->last_tb, "%s", r->ntraceback ? r->traceback[r->ntraceback - 1] : "");
    snprintf(c->results, sizeof c->results, "%s", r->results_json);
    snprintf(c->rout, sizeof c->rout, "%.*s", (int)r->out_len, r->out);
    c->out_len = r->out_len;
    c->err_len = r->err_len;
    c->out_dropped = r->out_dropped;
    c->err_dropped = r->err_dropped;
    c->ntb = r->ntraceback;
    c->results_count = r->results_count;
    c->results_dropped = r->results_dropped;
    c->count = r->execution_count;
    c->has_error = r->has_error;
    c->completed = r->completed;
    c->timed_out = r->timed_out;
    c->interrupted = r->interrupted;
  }
  latch_hit(&c->done);
}

static const osb_code_callbacks CB = {on_output, on_result};

static int interrupt_failed;
static void on_interrupted(void *ud, const osb_error *err) {
  interrupt_failed = err != NULL;
  latch_hit(ud);
}

static void cell_init(cell *c) {
  memset(c, 0, sizeof *c);
  latch_init(&c->done);
  uv_mutex_init(&c->mu);
}
static void cell_free(cell *c) {
  latch_destroy(&c->done);
  uv_mutex_destroy(&c->mu);
  osb_buf_free(&c->out);
  osb_buf_free(&c->err);
}

static int64_t MAX_EVENT; /* max_event_bytes of the next cells (0 = the default bound) */

static osb_code_run *start(const osb_code *x, cell *c, const char *ctx, const char *code, long timeout_ms,
                           int64_t max_output, int64_t max_results) {
  osb_code_run_opts o;
  memset(&o, 0, sizeof o);
  o.max_event_bytes = MAX_EVENT;
  o.code = code;
  o.language = "python";
  o.context_id = ctx;
  o.timeout_ms = timeout_ms;
  o.max_output = max_output;
  o.max_results = max_results;
  char err[256] = "";
  osb_code_run *r = osb_code_run_start(E, x, &o, &CB, c, err, sizeof err);
  if (!r) printf("  start failed: %s\n", err);
  return r;
}

/* Runs a cell to its end (the handle is released). */
static void run_cell(cell *c, const char *ctx, const char *code, long timeout_ms, int64_t max_output) {
  cell_init(c);
  osb_code_run *r = start(X, c, ctx, code, timeout_ms, max_output, -1);
  CHECK(r != NULL);
  if (r) CHECK(latch_wait(&c->done, 1, 30000));
  osb_code_run_release(r);
}

static void test_contexts(void) {
  char id[64];
  CHECK(new_context(id) == 0);
  call_rec c;
  CALL(c, osb_code_get_context(E, X, id, on_json, &c, e_, sizeof e_));
  CHECK(!c.failed && strstr(c.json, id) && strstr(c.json, "\"language\":\"python\""));
  CALL(c, osb_code_list_contexts(E, X, "python", on_json, &c, e_, sizeof e_));
  CHECK(!c.failed && c.json[0] == '[' && strstr(c.json, id));
  CALL(c, osb_code_delete_context(E, X, id, on_json, &c, e_, sizeof e_));
  CHECK(!c.failed);
  CALL(c, osb_code_get_context(E, X, id, on_json, &c, e_, sizeof e_));
  CHECK(c.failed && c.err.kind == OSB_KIND_API && c.err.status == 404);
  CHECK_STR(c.err.code, "CONTEXT_NOT_FOUND");
  CALL(c, osb_code_delete_contexts(E, X, "bash", on_json, &c, e_, sizeof e_));
  CHECK(!c.failed);
  CALL(c, osb_code_create_context(E, X, "cobol", NULL, 0, on_json, &c, e_, sizeof e_));
  CHECK(c.failed && c.err.status == 500 && strstr(c.err.message, "cobol"));
}

static void test_state_results_errors(void) {
  char id[64];
  CHECK(new_context(id) == 0);
  cell a, b, e;
  run_cell(&a, id, "x = 41\nprint('hi')", 0, -1);
  CHECK(!a.failed && !a.has_error && a.completed && a.count == 1);
  CHECK_STR(a.rout, "hi\n");
  CHECK_STR(a.out.data, "hi\n");
  CHECK_STR(a.ctx, id);
  CHECK_STR(a.results, "[]");
  run_cell(&b, id, "x + 1", 0, -1);
  CHECK_STR(b.results, "[{\"text\":\"42\"}]");
  CHECK(b.count == 2 && b.results_count == 1);
  run_cell(&e, id, "1/0", 0, -1);
  CHECK(!e.failed && e.has_error && !e.completed);
  CHECK_STR(e.ename, "ZeroDivisionError");
  CHECK_STR(e.evalue, "division by zero");
  CHECK_STR(e.last_tb, "ZeroDivisionError: division by zero");
  cell_free(&a);
  cell_free(&b);
  cell_free(&e);
}

static void test_output_bounded(void) {
  char id[64];
  CHECK(new_context(id) == 0);
  cell c;
  run_cell(&c, id, "import sys\nsys.stdout.write('a' * 300000)\nsys.stderr.write('\\u00e9' * 10)\n'end'", 0, 1001);
  CHECK(!c.failed && c.out_len == 1001 && c.out_dropped == 300000 - 1001);
  CHECK(c.err_len == 20 && c.err_dropped == 0);
  CHECK(c.out.len == 1001); /* only kept bytes are forwarded */
  CHECK_STR(c.results, "[{\"text\":\"'end'\"}]");
  cell_free(&c);
  cell d;
  run_cell(&d, id, "import sys\nsys.stderr.write('\\u00e9' * 10)", 0, 5);
  CHECK(d.err_len == 4 && d.err_dropped == 16); /* cut on a character boundary */
  cell_free(&d);
  cell r;
  cell_init(&r);
  osb_code_run *h = start(X, &r, id, "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                          "plt.plot([1, 2])\nplt.show()\n'small'", 0, -1, 40);
  CHECK(h && latch_wait(&r.done, 1, 30000));
  CHECK(r.results_count == 1 && r.results_dropped == 1); /* the figure bundle is over 40 bytes */
  CHECK_STR(r.results, "[{\"text\":\"'small'\"}]");
  osb_code_run_release(h);
  cell_free(&r);
}

/* Events over the parser's bound (a small one here; 16 MiB by default): an oversized stdout keeps the start of its
 * text, the rest is counted exactly and later output dropped (the kept text stays a prefix); an oversized result
 * is counted; the stream is read to its end and what follows still arrives. */
static void test_oversized_events(void) {
  char id[64];
  CHECK(new_context(id) == 0);
  MAX_EVENT = 4096;
  cell c;
  run_cell(&c, id, "import sys\nsys.stdout.write('b' * 200000)\nsys.stdout.flush()\nprint('after')\n"
                   "sys.stderr.write('e' * 10)\n'r' * 10000", 0, -1);
  CHECK(!c.failed && c.out_len > 4000 && c.out_len < 4096);
  CHECK(c.out_len + c.out_dropped == 200000 + 6);
  CHECK(strspn(c.rout, "b") == (c.out_len < sizeof c.rout - 1 ? c.out_len : sizeof c.rout - 1));
  CHECK(c.err_len == 10 && c.err_dropped == 0);
  CHECK(c.results_count == 0 && c.results_dropped == 1);
  CHECK(c.completed && !c.has_error);
  cell_free(&c);
  MAX_EVENT = 0;
}

static void test_timeout_and_interrupt(void) {
  char id[64];
  CHECK(new_context(id) == 0);
  cell t;
  run_cell(&t, id, "import time\ntime.sleep(30)", 300, -1);
  CHECK(!t.failed && t.timed_out && t.has_error);
  CHECK_STR(t.ename, "KeyboardInterrupt");
  cell i;
  cell_init(&i);
  osb_code_run *h = start(X, &i, id, "print('spin', flush=True)\nwhile True: pass", 0, -1, -1);
  uint64_t deadline = uv_hrtime() + 10000000000ull;
  for (;;) { /* wait for the first output */
    uv_mutex_lock(&i.mu);
    int seen = i.out.len > 0;
    uv_mutex_unlock(&i.mu);
    if (seen || uv_hrtime() > deadline) break;
    uv_sleep(10);
  }
  latch il;
  latch_init(&il);
  CHECK(osb_code_run_interrupt(E, h, on_interrupted, &il) == 0);
  CHECK(latch_wait(&i.done, 1, 15000) && latch_wait(&il, 1, 15000) && !interrupt_failed);
  CHECK(i.interrupted && !i.timed_out);
  CHECK_STR(i.ename, "KeyboardInterrupt");
  CHECK_STR(i.rout, "spin\n");
  osb_code_run_release(h);
  latch_destroy(&il);
  cell after;
  run_cell(&after, id, "6 * 7", 0, -1);
  CHECK_STR(after.results, "[{\"text\":\"42\"}]");
  cell_free(&t);
  cell_free(&i);
  cell_free(&after);
}

static void test_errors(void) {
  cell u;
  run_cell(&u, "ffffffffffffffffffffffffffffffff", "1", 0, -1);
  CHECK(u.failed && u.e.kind == OSB_KIND_API && u.e.status == 500 && strstr(u.e.message, "context not found"));
  cell_free(&u);
  char err[256] = "";
  osb_code_run_opts o;
  memset(&o, 0, sizeof o);
  o.code = "";
  o.language = "python";
  CHECK(osb_code_run_start(E, X, &o, &CB, NULL, err, sizeof err) == NULL && strstr(err, "code"));
  o.code = "1";
  o.language = NULL;
  CHECK(osb_code_run_start(E, X, &o, &CB, NULL, err, sizeof err) == NULL && strstr(err, "language"));
  CHECK(osb_code_get_context(E, X, "", on_json, NULL, err, sizeof err) == -1);
  const char *bad[] = {"OPEN-SANDBOX-API-KEY", "k"};
  CHECK(osb_conn_new(EXECD, bad, 1, 0, 0, err, sizeof err) == NULL && strstr(err, "API key"));
  CHECK(osb_conn_new("ftp://x", NULL, 0, 0, 0, err, sizeof err) == NULL);
  /* nothing listens: a transport error, no hang */
  osb_code *closed = osb_conn_new(CLOSED, NULL, 0, 2000, 2000, err, sizeof err);
  cell t;
  cell_init(&t);
  osb_code_run *h = start(closed, &t, NULL, "1", 0, -1, -1);
  CHECK(h && latch_wait(&t.done, 1, 10000) && t.failed && t.e.kind == OSB_KIND_TRANSPORT);
  osb_code_run_release(h);
  cell_free(&t);
  /* a refused GET fails at its first attempt (the caller asks the lifecycle API), not at the deadline */
  call_rec c;
  CALL(c, osb_code_list_contexts(E, closed, "python", on_json, &c, e_, sizeof e_));
  CHECK(c.failed && c.err.kind == OSB_KIND_TRANSPORT && c.err.attempts == 1);
  osb_conn_free(closed);
}

static void test_release_early(void) {
  char id[64];
  CHECK(new_context(id) == 0);
  cell c;
  cell_init(&c);
  osb_code_run *h = start(X, &c, id, "import time\ntime.sleep(0.3)\n'late'", 0, -1, -1);
  osb_code_run_release(h); /* the engine keeps its own reference */
  CHECK(latch_wait(&c.done, 1, 15000));
  CHECK_STR(c.results, "[{\"text\":\"'late'\"}]");
  cell_free(&c);
}

static void test_shutdown_with_running(void) {
  char id[64];
  CHECK(new_context(id) == 0);
  cell c;
  cell_init(&c);
  osb_code_run *h = start(X, &c, id, "print('up', flush=True)\nimport time\ntime.sleep(30)", 0, -1, -1);
  uint64_t deadline = uv_hrtime() + 10000000000ull;
  for (;;) {
    uv_mutex_lock(&c.mu);
    int seen = c.out.len > 0;
    uv_mutex_unlock(&c.mu);
    if (seen || uv_hrtime() > deadline) break;
    uv_sleep(10);
  }
  osb_engine_stop(E); /* settles the cell */
  E = NULL;
  CHECK(latch_wait(&c.done, 1, 1000) && c.failed && c.e.kind == OSB_KIND_CANCELLED);
  CHECK_STR(c.e.code, "SHUTDOWN");
  osb_code_run_release(h);
  cell_free(&c);
}

int main(void) {
  if (!t_peers(&EXECD, CLOSED, sizeof CLOSED)) return 1;
  char err[256];
  E = osb_engine_start(err, sizeof err);
  X = osb_conn_new(EXECD, NULL, 0, 20000, 10000, err, sizeof err);
  if (!E || !X) {
    printf("start: %s\n0 passed, 1 failed\n", err);
    return 1;
  }
  RUN(test_contexts);
  RUN(test_state_results_errors);
  RUN(test_output_bounded);
  RUN(test_oversized_events);
  RUN(test_timeout_and_interrupt);
  RUN(test_errors);
  RUN(test_release_early);
  RUN(test_shutdown_with_running);
  osb_conn_free(X);
  return t_summary();
}
