/* Engine, HTTP and client tests of the C core against a real execd (the dev-server's, started standalone by
 * run.sh; its URL comes in EXECD_URL): keep-alive reuse, retries, deadlines, cross-thread cancellation,
 * commands (output, exit codes, timeout, cancel, concurrency), readiness, and shutdown with work in flight. */
#include <stdlib.h>
#include <curl/curl.h>
#include "harness.h"
#include "core/engine.h"
#include "core/http.h"
#include "opensandbox/execd.h"
#include "opensandbox/lifecycle.h"

static const char *EXECD;
static char CLOSED_URL[64];

/* ---- raw HTTP ---- */

typedef struct {
  latch l;
  osb_http_result res;
  char body[4096];
  char message[256];
  char rid[128];
  osb_engine *e;
  osb_http_opts o;
  osb_http_req *req;
} http_call;

static void on_http_done(void *ud, const osb_http_result *r) {
  http_call *c = ud;
  c->res = *r;
  snprintf(c->body, sizeof c->body, "%s", r->body);
  snprintf(c->message, sizeof c->message, "%s", r->message);
  snprintf(c->rid, sizeof c->rid, "%s", r->request_id ? r->request_id : "");
  c->res.body = c->body;
  c->res.message = c->message;
  c->req = NULL;
  latch_hit(&c->l);
}

static void start_job(osb_engine *e, void *arg, int shutdown) {
  http_call *c = arg;
  if (shutdown) {
    c->res.error = OSB_HTTP_ESHUTDOWN;
    latch_hit(&c->l);
    return;
  }
  c->req = osb_http_start(e, &c->o);
}

static void cancel_job(osb_engine *e, void *arg, int shutdown) {
  (void)e;
  (void)shutdown;
  http_call *c = arg;
  if (c->req) osb_http_cancel(c->req);
}

static void http_run(osb_engine *e, http_call *c, const char *method, const char *url, const char *body,
                     long timeout_ms, int retry) {
  memset(c, 0, sizeof *c);
  latch_init(&c->l);
  c->e = e;
  c->o.method = method;
  c->o.url = url;
  c->o.body = body;
  c->o.body_len = body ? strlen(body) : 0;
  c->o.timeout_ms = timeout_ms;
  c->o.retry_connect = retry;
  c->o.on_done = on_http_done;
  c->o.ud = c;
  osb_engine_post(e, start_job, c);
}

static void test_engine_idle_start_stop(void) {
  char err[128];
  osb_engine *e = osb_engine_start(err, sizeof err);
  CHECK(e != NULL);
  osb_engine_stats s;
  osb_engine_get_stats(e, &s);
  CHECK(s.requests_in_flight == 0 && s.sockets == 0 && s.actives == 0);
  osb_engine_stop(e);
}

static void test_http_keepalive(void) {
  char err[128], url[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  snprintf(url, sizeof url, "%s/ping", EXECD);
  for (int i = 0; i < 5; i++) {
    http_call c;
    http_run(e, &c, "GET", url, NULL, 5000, 0);
    CHECK(latch_wait(&c.l, 1, 10000));
    CHECK(c.res.error == OSB_HTTP_OK && c.res.status == 200 && c.res.attempts == 1);
    latch_destroy(&c.l);
  }
  osb_engine_stats s;
  osb_engine_get_stats(e, &s);
  CHECK(s.sockets == 1); /* one connection reused by the five requests */
  CHECK(s.requests_in_flight == 0);
  osb_engine_stop(e);
}

static void test_http_retry_then_transport_error(void) {
  char err[128];
  osb_engine *e = osb_engine_start(err, sizeof err);
  http_call c;
  http_run(e, &c, "GET", CLOSED_URL, NULL, 1000, 1);
  CHECK(latch_wait(&c.l, 1, 5000));
  CHECK(c.res.error == OSB_HTTP_ETRANSPORT);
  CHECK(c.res.attempts >= 3);
  CHECK(strstr(c.message, "onnect") != NULL);
  latch_destroy(&c.l);
  http_run(e, &c, "POST", CLOSED_URL, "{}", 1000, 0);
  CHECK(latch_wait(&c.l, 1, 5000));
  CHECK(c.res.error == OSB_HTTP_ETRANSPORT && c.res.attempts == 1);
  latch_destroy(&c.l);
  osb_engine_stop(e);
}

static void test_http_deadline_and_cancel(void) {
  char err[128], url[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  snprintf(url, sizeof url, "%s/command", EXECD);
  http_call c; /* a buffered request on a stream that lasts ~1.5 s: the 300 ms deadline wins */
  http_run(e, &c, "POST", url, "{\"command\":\"sleep 0.5\"}", 300, 0);
  CHECK(latch_wait(&c.l, 1, 5000));
  CHECK(c.res.error == OSB_HTTP_ETIMEOUT);
  CHECK(strstr(c.message, "300 ms") != NULL);
  latch_destroy(&c.l);

  http_run(e, &c, "POST", url, "{\"command\":\"sleep 0.5\"}", 0, 0);
  osb_engine_post(e, cancel_job, &c); /* cancellation from another thread goes through the queue */
  CHECK(latch_wait(&c.l, 1, 5000));
  CHECK(c.res.error == OSB_HTTP_ECANCELLED);
  latch_destroy(&c.l);
  osb_engine_stats s;
  osb_engine_get_stats(e, &s);
  CHECK(s.requests_in_flight == 0 && s.actives == 0);
  osb_engine_stop(e);
}

static void test_engine_stop_with_work_in_flight(void) {
  char err[128], url[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  snprintf(url, sizeof url, "%s/command", EXECD);
  http_call c;
  http_run(e, &c, "POST", url, "{\"command\":\"sleep 0.3\"}", 0, 0);
  osb_engine_stop(e); /* either queued (shutdown job) or in flight (aborted): completed exactly once */
  CHECK(latch_wait(&c.l, 1, 1));
  CHECK(c.res.error == OSB_HTTP_ESHUTDOWN);
  latch_destroy(&c.l);
}

/* ---- execd client ---- */

typedef struct {
  latch l;
  int failed;
  osb_error err;
  int exit_code, timed_out, cancelled;
  char out[65536], errout[4096], id[64], error_text[256];
  size_t out_len;
  uint64_t out_dropped;
  char streamed[65536];
  size_t streamed_len;
  int batches;
} run_call;

static void on_output(void *ud, const char *out, size_t out_len, const char *err, size_t err_len) {
  (void)err;
  (void)err_len;
  run_call *c = ud;
  if (c->streamed_len + out_len < sizeof c->streamed) {
    memcpy(c->streamed + c->streamed_len, out, out_len);
    c->streamed_len += out_len;
  }
  c->batches++;
}

static void on_result(void *ud, const osb_error *err, const osb_exec_result *r) {
  run_call *c = ud;
  if (err) {
    c->failed = 1;
    c->err = *err;
  } else {
    c->exit_code = r->exit_code;
    c->timed_out = r->timed_out;
    c->cancelled = r->cancelled;
    c->out_len = r->out_len;
    c->out_dropped = r->out_dropped;
    snprintf(c->out, sizeof c->out, "%.*s", (int)r->out_len, r->out);
    snprintf(c->errout, sizeof c->errout, "%.*s", (int)r->err_len, r->err);
    snprintf(c->id, sizeof c->id, "%s", r->command_id);
    snprintf(c->error_text, sizeof c->error_text, "%s", r->error_text ? r->error_text : "");
  }
  latch_hit(&c->l);
}

static osb_exec_cmd *run_cmd(osb_engine *e, osb_exec *x, run_call *c, const char *cmd, const char *cwd,
                             long timeout_ms, int64_t max_retained) {
  memset(c, 0, sizeof *c);
  latch_init(&c->l);
  static const char *const env[] = {"GREETING", "hi there"};
  osb_exec_run_opts o = {cmd, cwd, env, 1, timeout_ms, max_retained, 0};
  osb_exec_callbacks cb = {on_output, on_result};
  char err[256];
  osb_exec_cmd *h = osb_exec_run(e, x, &o, &cb, c, err, sizeof err);
  CHECK(h != NULL);
  return h;
}

static void on_cancel_done(void *ud, const osb_error *err) {
  CHECK(err == NULL);
  latch_hit(ud);
}

static void test_exec_run(void) {
  char err[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  osb_exec *x = osb_conn_new(EXECD, NULL, 0, 5000, 5000, err, sizeof err);
  run_call c;
  osb_exec_cmd *h = run_cmd(e, x, &c, "echo \"$GREETING\"; pwd; echo oops >&2; echo; printf tail; exit 3", "/tmp", 0, -1);
  CHECK(latch_wait(&c.l, 1, 10000));
  CHECK(!c.failed);
  CHECK(c.exit_code == 3);
  CHECK_STR(c.out, "hi there\n/tmp\n\ntail\n");
  CHECK_STR(c.errout, "oops\n");
  CHECK_STR(c.error_text, "exit status 3");
  CHECK(strlen(c.id) == 32);
  CHECK(c.streamed_len == c.out_len && memcmp(c.streamed, c.out, c.out_len) == 0);
  osb_exec_cmd_release(h);
  latch_destroy(&c.l);

  h = run_cmd(e, x, &c, "true", "/no/such/dir", 0, -1);
  CHECK(latch_wait(&c.l, 1, 10000));
  CHECK(c.failed && c.err.kind == OSB_KIND_API && c.err.status == 400);
  CHECK_STR(c.err.code, "INVALID_REQUEST_BODY");
  osb_exec_cmd_release(h);
  latch_destroy(&c.l);

  h = run_cmd(e, x, &c, "seq 1 3000", NULL, 0, 100); /* retention: the newest 100 bytes */
  CHECK(latch_wait(&c.l, 1, 10000));
  CHECK(c.out_len == 100 && strcmp(c.out + 95, "3000\n") == 0);
  CHECK(c.out_dropped == c.streamed_len - 100);
  osb_exec_cmd_release(h);
  latch_destroy(&c.l);
  osb_conn_free(x);
  osb_engine_stop(e);
}

static void test_exec_timeout_and_cancel(void) {
  char err[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  osb_exec *x = osb_conn_new(EXECD, NULL, 0, 5000, 5000, err, sizeof err);
  run_call c;
  osb_exec_cmd *h = run_cmd(e, x, &c, "echo a; sleep 20", NULL, 300, -1);
  CHECK(latch_wait(&c.l, 1, 10000));
  CHECK(!c.failed && c.timed_out && !c.cancelled && c.exit_code == -1);
  CHECK_STR(c.out, "a\n");
  osb_exec_cmd_release(h);
  latch_destroy(&c.l);

  h = run_cmd(e, x, &c, "echo b; sleep 20", NULL, 0, -1);
  latch cl;
  latch_init(&cl);
  CHECK(osb_exec_cancel(e, h, on_cancel_done, &cl) == 0); /* may land before init: DELETE is sent at init */
  CHECK(latch_wait(&cl, 1, 10000));
  CHECK(latch_wait(&c.l, 1, 10000));
  CHECK(!c.failed && c.cancelled && !c.timed_out);
  CHECK(osb_exec_cancel(e, h, on_cancel_done, &cl) == 0); /* settled: resolves at once */
  CHECK(latch_wait(&cl, 2, 5000));
  osb_exec_cmd_release(h);
  latch_destroy(&cl);
  latch_destroy(&c.l);
  osb_conn_free(x);
  osb_engine_stop(e);
}

static void test_exec_concurrent(void) {
  enum { N = 20 };
  char err[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  osb_exec *x = osb_conn_new(EXECD, NULL, 0, 5000, 5000, err, sizeof err);
  static run_call calls[N];
  osb_exec_cmd *h[N];
  char cmd[N][64];
  for (int i = 0; i < N; i++) {
    snprintf(cmd[i], sizeof cmd[i], "for j in 1 2 3 4 5; do echo c%d-$j; done", i);
    h[i] = run_cmd(e, x, &calls[i], cmd[i], NULL, 0, -1);
  }
  for (int i = 0; i < N; i++) {
    char want[128];
    snprintf(want, sizeof want, "c%d-1\nc%d-2\nc%d-3\nc%d-4\nc%d-5\n", i, i, i, i, i);
    CHECK(latch_wait(&calls[i].l, 1, 20000));
    CHECK(!calls[i].failed && calls[i].exit_code == 0);
    CHECK_STR(calls[i].out, want);
    osb_exec_cmd_release(h[i]);
    latch_destroy(&calls[i].l);
  }
  osb_conn_free(x);
  osb_engine_stop(e);
}

/* Flow control: a consumer that does not report its batches makes the engine pause the transfer; reporting
 * them resumes it and every byte arrives. */
typedef struct {
  latch l;
  size_t delivered; /* atomic */
  int failed, exit_code;
  uint64_t dropped;
} flow_call;

static void flow_output(void *ud, const char *out, size_t out_len, const char *err, size_t err_len) {
  (void)out;
  (void)err;
  flow_call *f = ud;
  __atomic_add_fetch(&f->delivered, out_len + err_len, __ATOMIC_SEQ_CST);
}

static void flow_result(void *ud, const osb_error *err, const osb_exec_result *r) {
  flow_call *f = ud;
  f->failed = err != NULL;
  if (r) f->exit_code = r->exit_code, f->dropped = r->out_dropped;
  latch_hit(&f->l);
}

static void test_exec_flow_control(void) {
  char err[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  osb_exec *x = osb_conn_new(EXECD, NULL, 0, 5000, 5000, err, sizeof err);
  flow_call f;
  memset(&f, 0, sizeof f);
  latch_init(&f.l);
  osb_exec_run_opts o = {"seq 1 50000", NULL, NULL, 0, 0, 0, 4096};
  osb_exec_callbacks cb = {flow_output, flow_result};
  osb_exec_cmd *h = osb_exec_run(e, x, &o, &cb, &f, err, sizeof err);
  CHECK(h != NULL);
  osb_engine_stats s;
  int paused = 0;
  for (int i = 0; i < 2000 && !paused; i++) { /* up to 10 s */
    osb_engine_get_stats(e, &s);
    paused = s.paused == 1;
    if (!paused) uv_sleep(5);
  }
  CHECK(paused);
  CHECK(!latch_wait(&f.l, 1, 1)); /* stalled while nothing is reported */
  size_t acked = 0;
  for (int i = 0; i < 4000 && !latch_wait(&f.l, 1, 5); i++) { /* report as a consumer would, up to 20 s */
    size_t d = __atomic_load_n(&f.delivered, __ATOMIC_SEQ_CST);
    if (d > acked) osb_exec_output_consumed(e, h, d - acked), acked = d;
  }
  CHECK(latch_wait(&f.l, 1, 1));
  CHECK(!f.failed && f.exit_code == 0);
  CHECK(f.dropped == 288894); /* bytes of `seq 1 50000`, none retained */
  osb_engine_get_stats(e, &s);
  CHECK(s.paused == 0);
  osb_exec_cmd_release(h);
  latch_destroy(&f.l);
  osb_conn_free(x);
  osb_engine_stop(e);
}

typedef struct {
  latch l;
  int failed;
  osb_error err;
  char *json;
  char date[64];
} done_call;

static void on_ready(void *ud, const osb_error *err) {
  done_call *d = ud;
  if (err) d->failed = 1, d->err = *err;
  latch_hit(&d->l);
}

static void on_lc(void *ud, const osb_error *err, char *json, const char *date) {
  done_call *d = ud;
  if (date) snprintf(d->date, sizeof d->date, "%s", date);
  if (err) d->failed = 1, d->err = *err;
  d->json = json;
  latch_hit(&d->l);
}

static void test_ready_and_lifecycle_errors(void) {
  char err[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  osb_exec *x = osb_conn_new(EXECD, NULL, 0, 5000, 5000, err, sizeof err);
  done_call d = {0};
  latch_init(&d.l);
  CHECK(osb_exec_wait_ready(e, x, 5000, on_ready, &d, err, sizeof err) == 0);
  CHECK(latch_wait(&d.l, 1, 10000) && !d.failed);
  latch_destroy(&d.l);
  osb_conn_free(x);

  x = osb_conn_new(CLOSED_URL, NULL, 0, 5000, 5000, err, sizeof err);
  memset(&d, 0, sizeof d);
  latch_init(&d.l);
  CHECK(osb_exec_wait_ready(e, x, 500, on_ready, &d, err, sizeof err) == 0);
  CHECK(latch_wait(&d.l, 1, 5000) && d.failed);
  CHECK(d.err.kind == OSB_KIND_TIMEOUT);
  CHECK_STR(d.err.code, "READY_TIMEOUT");
  latch_destroy(&d.l);
  osb_conn_free(x);

  static const char *const hdr[] = {"OPEN-SANDBOX-API-KEY", "k"};
  CHECK(osb_conn_new(EXECD, hdr, 1, 0, 0, err, sizeof err) == NULL);
  static const char *const bad[] = {"X-Token", "a\r\nInjected: 1"};
  CHECK(osb_conn_new(EXECD, bad, 1, 0, 0, err, sizeof err) == NULL);

  /* execd has no lifecycle routes: its plain-text 404 (Go's "404 page not found", like the real execd) maps to
   * HTTP_404 with the body as message; the path escaping is checked against the dev server in native.test.js (an
   * encoded '/' is a 400 there: our execd and server refuse encoded separators in any request target) */
  osb_lc *lc = osb_lc_new(EXECD, "sekrit", 5000, err, sizeof err);
  memset(&d, 0, sizeof d);
  latch_init(&d.l);
  CHECK(osb_lc_get(e, lc, "a b?c", on_lc, &d, err, sizeof err) == 0);
  CHECK(latch_wait(&d.l, 1, 10000) && d.failed);
  CHECK(d.err.kind == OSB_KIND_API && d.err.status == 404);
  CHECK_STR(d.err.code, "HTTP_404");
  CHECK(strstr(d.err.message, "404 page not found") != NULL);
  CHECK(strlen(d.err.request_id) == 32);
  /* the HTTP Date header reaches done (also for an error answer): "Tue, 01 Dec 2026 15:30:07 GMT" */
  CHECK(strlen(d.date) == 29 && strcmp(d.date + 26, "GMT") == 0);
  latch_destroy(&d.l);
  memset(&d, 0, sizeof d);
  latch_init(&d.l);
  CHECK(osb_lc_snapshot_get(e, lc, "s 1?2", on_lc, &d, err, sizeof err) == 0);
  CHECK(latch_wait(&d.l, 1, 10000) && d.failed);
  CHECK(d.err.kind == OSB_KIND_API && d.err.status == 404);
  latch_destroy(&d.l);
  CHECK(osb_lc_get(e, lc, "", on_lc, &d, err, sizeof err) == -1);
  CHECK(osb_lc_snapshot_get(e, lc, "", on_lc, &d, err, sizeof err) == -1);
  CHECK_STR(err, "snapshot id must be a non-empty string");
  CHECK(osb_lc_snapshot_delete(e, lc, NULL, on_lc, &d, err, sizeof err) == -1);
  CHECK(osb_lc_snapshot_create(e, lc, "x", "", on_lc, &d, err, sizeof err) == -1);
  CHECK_STR(err, "snapshot name must not be empty");
  CHECK(osb_lc_snapshot_create(e, lc, "", NULL, on_lc, &d, err, sizeof err) == -1);
  CHECK(osb_lc_endpoint(e, lc, "x", 0, 0, on_lc, &d, err, sizeof err) == -1);
  osb_lc_free(lc);
  CHECK(osb_lc_new("file:///etc/passwd", NULL, 0, err, sizeof err) == NULL);
  osb_engine_stop(e);
}

static void test_exec_shutdown_in_flight(void) {
  char err[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  osb_exec *x = osb_conn_new(EXECD, NULL, 0, 5000, 5000, err, sizeof err);
  run_call c;
  osb_exec_cmd *h = run_cmd(e, x, &c, "sleep 0.3", NULL, 0, -1);
  osb_engine_stop(e);
  CHECK(latch_wait(&c.l, 1, 1));
  CHECK(c.failed && c.err.kind == OSB_KIND_CANCELLED);
  CHECK_STR(c.err.code, "SHUTDOWN");
  osb_exec_cmd_release(h);
  latch_destroy(&c.l);
  osb_conn_free(x);
}

static long in_flight(osb_engine *e) {
  osb_engine_stats s;
  osb_engine_get_stats(e, &s);
  return s.requests_in_flight;
}

/* Waits (deadline timeout_ms) until no HTTP transfer is in flight. */
static int wait_idle(osb_engine *e, unsigned timeout_ms) {
  for (uint64_t end = uv_hrtime() + (uint64_t)timeout_ms * 1000000u; uv_hrtime() < end; uv_sleep(20))
    if (in_flight(e) == 0) return 1;
  return 0;
}

/* The result comes at the final event, but the stream is read on to its end in the background: upstream execd
 * relays the SIGPIPE of a write to a closed stream to the foreground command running then (the execd at
 * EXECD_FWD_URL reproduces it), so closing early would kill the long command. Same after a timeout (round 0's
 * stream ends while round 1's long command runs). */
static void test_exec_drains_stream_to_end(void) {
  const char *fwd = getenv("EXECD_FWD_URL");
  CHECK(fwd != NULL);
  if (!fwd) return;
  char err[256];
  osb_engine *e = osb_engine_start(err, sizeof err);
  osb_exec *x = osb_conn_new(fwd, NULL, 0, 5000, 5000, err, sizeof err);
  run_call c;
  for (int round = 0; round < 2; round++) {
    for (int q = 0; q < 3; q++) {
      osb_exec_cmd *h = run_cmd(e, x, &c, "echo quick", NULL, 0, -1);
      CHECK(latch_wait(&c.l, 1, 10000));
      CHECK(!c.failed && c.exit_code == 0);
      CHECK(in_flight(e) >= 1); /* resolved; its stream is still being read (execd's 1 s tail) */
      osb_exec_cmd_release(h);
      latch_destroy(&c.l);
    }
    osb_exec_cmd *h = run_cmd(e, x, &c, round ? "sleep 1.5; echo ok" : "sleep 20", NULL, round ? 0 : 300, -1);
    CHECK(latch_wait(&c.l, 1, 10000));
    if (round) CHECK(!c.failed && c.exit_code == 0 && strcmp(c.out, "ok\n") == 0 && !c.error_text[0]);
    else CHECK(!c.failed && c.timed_out);
    osb_exec_cmd_release(h);
    latch_destroy(&c.l);
  }
  CHECK(wait_idle(e, 5000)); /* every drained stream ended by itself */
  osb_exec_cmd *h = run_cmd(e, x, &c, "echo last", NULL, 0, -1);
  CHECK(latch_wait(&c.l, 1, 10000));
  osb_exec_cmd_release(h);
  latch_destroy(&c.l);
  osb_conn_free(x);
  osb_engine_stop(e); /* with a stream still draining: aborted, nothing leaks */
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!t_peers(&EXECD, CLOSED_URL, sizeof CLOSED_URL)) return 1;
  RUN(test_engine_idle_start_stop);
  RUN(test_http_keepalive);
  RUN(test_http_retry_then_transport_error);
  RUN(test_http_deadline_and_cancel);
  RUN(test_engine_stop_with_work_in_flight);
  RUN(test_exec_run);
  RUN(test_exec_timeout_and_cancel);
  RUN(test_exec_concurrent);
  RUN(test_exec_flow_control);
  RUN(test_ready_and_lifecycle_errors);
  RUN(test_exec_shutdown_in_flight);
  RUN(test_exec_drains_stream_to_end);
  curl_global_cleanup(); /* the test binary only: never in the addon */
  return t_summary();
}
