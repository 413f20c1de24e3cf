/* execd client: /ping readiness and foreground /command streams (see execd.h). */
#define _GNU_SOURCE
#include "execd.h"
#include "conn.h"
#include "lifecycle.h"
#include "core/batch.h"
#include "core/buf.h"
#include "core/events.h"
#include "core/http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#define PING_INTERVAL_MS 200
#define SERVER_TIMEOUT_GRACE_MS 1000 /* execd's own timeout: a backstop behind ours */
#define DEFAULT_HIGH_WATER ((size_t)8 * 1024 * 1024)
/* After a command settles, its /command stream is read on to its end in the background for at most this long:
 * execd holds a stream open about 1 s after the final event, and closing it earlier makes execd's next write to it
 * raise SIGPIPE, which execd relays to whatever foreground command runs then (killing it). Tail + margin. */
#define DRAIN_MS 3000

/* ---- waitReady ---- */

typedef struct {
  osb_active active;
  osb_engine *e;
  osb_conn cf; /* the operation's own copy of the client's settings */
  uint64_t deadline;
  long budget_ms;
  uv_timer_t timer;
  osb_http_req *req;
  osb_exec_done_fn done;
  void *ud;
  int finished;
  osb_error last;
  int have_last;
} ready_op;

static void ready_closed(uv_handle_t *h) {
  ready_op *r = h->data;
  osb_conn_clear(&r->cf);
  free(r);
}

/* The timer is closed (and r freed) once no ping is in flight: here, or in ready_on_ping. */
static void ready_finish(ready_op *r, const osb_error *err) {
  if (r->finished) return;
  r->finished = 1;
  osb_engine_remove_active(r->e, &r->active);
  uv_timer_stop(&r->timer);
  r->done(r->ud, err);
  if (r->req) osb_http_cancel(r->req); /* its on_done sees `finished` and closes */
  else uv_close((uv_handle_t *)&r->timer, ready_closed);
}

static void ready_ping(ready_op *r);

static void ready_on_timer(uv_timer_t *t) {
  ready_op *r = t->data;
  if (!r->finished) ready_ping(r);
}

static void ready_timeout(ready_op *r) {
  osb_error err;
  osb_error_set(&err, OSB_KIND_TIMEOUT, "READY_TIMEOUT", "execd not ready within %ld ms%s%s", r->budget_ms,
                r->have_last ? ": " : "", r->have_last ? r->last.message : "");
  if (r->have_last) snprintf(err.request_id, sizeof err.request_id, "%s", r->last.request_id);
  ready_finish(r, &err);
}

static void ready_on_ping(void *ud, const osb_http_result *res) {
  ready_op *r = ud;
  r->req = NULL;
  if (r->finished) {
    uv_close((uv_handle_t *)&r->timer, ready_closed);
    return;
  }
  if (res->error == OSB_HTTP_OK && res->status >= 200 && res->status < 300) {
    ready_finish(r, NULL);
    return;
  }
  osb_error_from_http(&r->last, res, (const char *const *)r->cf.secrets, NULL);
  r->have_last = 1;
  if (res->error == OSB_HTTP_OK && (res->status == 401 || res->status == 403)) {
    ready_finish(r, &r->last); /* waiting will not fix credentials */
    return;
  }
  uint64_t now = osb_engine_now(r->e);
  if (now + PING_INTERVAL_MS >= r->deadline) {
    ready_timeout(r);
    return;
  }
  uv_timer_start(&r->timer, ready_on_timer, PING_INTERVAL_MS, 0);
}

static void ready_ping(ready_op *r) {
  uint64_t now = osb_engine_now(r->e);
  if (now >= r->deadline) {
    ready_timeout(r);
    return;
  }
  long remaining = (long)(r->deadline - now);
  osb_http_opts o;
  memset(&o, 0, sizeof o);
  o.method = "GET";
  o.timeout_ms = remaining < r->cf.timeout_ms ? remaining : r->cf.timeout_ms;
  o.on_done = ready_on_ping;
  o.ud = r;
  r->req = osb_conn_start(r->e, &r->cf, &o, NULL, 0, "/ping");
  if (!r->req) {
    osb_error err;
    osb_error_set(&err, OSB_KIND_TRANSPORT, "OUT_OF_MEMORY", "out of memory");
    ready_finish(r, &err);
  }
}

static void ready_abort(osb_active *a) {
  ready_op *r = (ready_op *)a;
  osb_error err;
  osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
  ready_finish(r, &err);
}

static void ready_job(osb_engine *e, void *arg, int shutdown) {
  ready_op *r = arg;
  if (shutdown) {
    osb_error err;
    osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
    r->done(r->ud, &err);
    osb_conn_clear(&r->cf);
    free(r);
    return;
  }
  r->e = e;
  uv_timer_init(osb_engine_loop(e), &r->timer);
  r->timer.data = r;
  r->active.abort = ready_abort;
  osb_engine_add_active(e, &r->active);
  r->deadline = osb_engine_now(e) + (uint64_t)r->budget_ms;
  ready_ping(r);
}

int osb_exec_wait_ready(osb_engine *e, const osb_exec *x, long timeout_ms, osb_exec_done_fn done, void *ud,
                        char *errbuf, size_t errlen) {
  ready_op *r = calloc(1, sizeof *r);
  if (!r || osb_conn_copy(&r->cf, x) != 0) goto oom;
  r->budget_ms = timeout_ms > 0 ? timeout_ms : 30000;
  r->done = done;
  r->ud = ud;
  if (osb_engine_post(e, ready_job, r) != 0) {
    snprintf(errbuf, errlen, "the native engine is shutting down");
    goto fail;
  }
  return 0;
oom:
  snprintf(errbuf, errlen, "out of memory");
fail:
  if (r) {
    osb_conn_clear(&r->cf);
    free(r);
  }
  return -1;
}

/* ---- commands ---- */

typedef struct waiter {
  struct waiter *next;
  osb_exec_done_fn done;
  void *ud;
} waiter;

struct osb_exec_cmd {
  osb_active active;
  int refs; /* atomic */
  osb_engine *e;
  osb_conn cf; /* the operation's own copy of the client's settings */
  char *body;
  long client_timeout_ms;
  osb_exec_callbacks cb;
  void *ud;
  /* engine thread state */
  osb_http_req *stream, *del;
  osb_events *parser;
  osb_tail out, err;
  osb_batch batch;
  uv_timer_t timeout_timer;
  char *id;
  int final_seen, exit_code;
  char *error_text;
  double exec_time;
  uint64_t start_ms;
  int timed_out, cancelled, completed, teardown, delete_sent;
  int has_pending_err;
  osb_error pending_err;
  waiter *waiters;
  /* flow control */
  size_t high_water, low_water;
  size_t outstanding; /* atomic: bytes handed to on_output, not yet reported consumed */
  int pause_flag;     /* atomic: the engine paused (or is pausing) the stream */
  int net_paused;     /* engine thread: on_stream_data asked the HTTP layer to pause */
};

static void cmd_free(osb_exec_cmd *c) {
  osb_conn_clear(&c->cf);
  free(c->body);
  osb_events_free(c->parser);
  osb_tail_free(&c->out);
  osb_tail_free(&c->err);
  osb_batch_free(&c->batch);
  free(c->id);
  free(c->error_text);
  while (c->waiters) {
    waiter *w = c->waiters;
    c->waiters = w->next;
    free(w);
  }
  free(c);
}

void osb_exec_cmd_retain(osb_exec_cmd *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL); }

void osb_exec_cmd_release(osb_exec_cmd *c) {
  if (c && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) cmd_free(c);
}

static void cmd_closed(void *ud) { osb_exec_cmd_release(ud); /* the engine's reference */ }

static void maybe_teardown(osb_exec_cmd *c) {
  if (!c->completed || c->stream || c->del || c->teardown) return;
  c->teardown = 1;
  osb_engine_remove_active(c->e, &c->active);
  uv_timer_t *const others[] = {&c->timeout_timer};
  osb_batch_close(&c->batch, others, 1);
}

static void on_flush(void *ud, const char *out, size_t out_len, const char *err, size_t err_len) {
  osb_exec_cmd *c = ud;
  if (!c->cb.on_output) return;
  __atomic_add_fetch(&c->outstanding, out_len + err_len, __ATOMIC_SEQ_CST);
  c->cb.on_output(c->ud, out, out_len, err, err_len);
}

static void settle_waiters(osb_exec_cmd *c) {
  while (c->waiters) {
    waiter *w = c->waiters;
    c->waiters = w->next;
    w->done(w->ud, NULL);
    free(w);
  }
}

static void send_delete(osb_exec_cmd *c);
static void drain(osb_exec_cmd *c);

/* Ends the command: exactly one on_result. err NULL = success with the current state. */
static void settle(osb_exec_cmd *c, const osb_error *err) {
  if (c->completed) return;
  c->completed = 1;
  uv_timer_stop(&c->timeout_timer);
  osb_batch_flush(&c->batch);
  if (err) {
    c->cb.on_result(c->ud, err, NULL);
  } else {
    osb_exec_result r;
    memset(&r, 0, sizeof r);
    osb_tail_align_utf8(&c->out);
    osb_tail_align_utf8(&c->err);
    r.out = osb_tail_data(&c->out, &r.out_len);
    r.err = osb_tail_data(&c->err, &r.err_len);
    r.out_dropped = c->out.dropped;
    r.err_dropped = c->err.dropped;
    r.exit_code = c->final_seen ? c->exit_code : -1;
    r.execution_time_ms = c->exec_time >= 0 ? c->exec_time : (double)(osb_engine_now(c->e) - c->start_ms);
    r.command_id = c->id ? c->id : "";
    r.timed_out = c->timed_out;
    r.cancelled = c->cancelled;
    r.error_text = c->error_text;
    c->cb.on_result(c->ud, NULL, &r);
  }
  settle_waiters(c);
  if (c->stream) drain(c); /* resolved already; the stream ends in the background */
  /* Failed on our side (malformed or silent stream, cut connection) after execd started it: stop the remote
   * command too, best effort (not while the engine shuts down). */
  if (err && err->kind != OSB_KIND_CANCELLED && c->id && !c->final_seen) send_delete(c);
  maybe_teardown(c);
}

static void settle_error(osb_exec_cmd *c, osb_kind kind, const char *code, const char *msg) {
  osb_error err;
  osb_error_set(&err, kind, code, "%s", msg);
  settle(c, &err);
}

static void on_delete_done(void *ud, const osb_http_result *res) {
  (void)res; /* whatever DELETE answered (200, or 500 "not running" when it just ended), the command is over */
  osb_exec_cmd *c = ud;
  c->del = NULL;
  if (!c->completed) settle(c, NULL);
  else maybe_teardown(c);
}

static void send_delete(osb_exec_cmd *c) {
  if (c->delete_sent || !c->id) return;
  c->delete_sent = 1;
  char *eid = osb_url_escape(c->id);
  if (eid) {
    osb_http_opts o;
    memset(&o, 0, sizeof o);
    o.method = "DELETE";
    o.timeout_ms = c->cf.timeout_ms;
    o.on_done = on_delete_done;
    o.ud = c;
    c->del = osb_conn_start(c->e, &c->cf, &o, NULL, 0, "/command?id=%s", eid);
  }
  free(eid);
  if (!c->del) settle(c, NULL); /* out of memory: at least settle */
}

static void on_drain_timer(uv_timer_t *t) {
  osb_exec_cmd *c = t->data;
  if (c->stream) osb_http_cancel(c->stream); /* the bound: a stream still open DRAIN_MS after settling */
}

/* The command is settled but its stream is still open: read it to its end (bytes discarded) instead of closing it
 * under execd, bounded by DRAIN_MS. Never called from inside on_data with the transfer paused. */
static void drain(osb_exec_cmd *c) {
  if (c->net_paused) {
    c->net_paused = 0;
    __atomic_store_n(&c->pause_flag, 0, __ATOMIC_SEQ_CST);
    osb_http_resume(c->stream);
  }
  uv_timer_start(&c->timeout_timer, on_drain_timer, DRAIN_MS, 0);
}

static void on_timeout_timer(uv_timer_t *t) {
  osb_exec_cmd *c = t->data;
  if (c->completed) return;
  c->timed_out = 1;
  if (c->id) send_delete(c);
  else settle(c, NULL); /* no id yet: execd's own timeout (sent with the request) stops it */
}

static void add_output(osb_exec_cmd *c, int is_err, const char *text, size_t len) {
  const char *nl = "\n";
  osb_tail *t = is_err ? &c->err : &c->out;
  int only_nl = len == 1 && text[0] == '\n';
  osb_tail_append(t, text, len);
  osb_batch_append(&c->batch, is_err, text, len);
  if (!only_nl) {
    osb_tail_append(t, nl, 1);
    osb_batch_append(&c->batch, is_err, nl, 1);
  }
  osb_batch_kick(&c->batch);
}

static int parse_exit_code(const char *s, int *out) {
  if (!s || !*s) return -1;
  const char *p = s;
  if (*p == '-') p++;
  if (!*p) return -1;
  for (const char *q = p; *q; q++)
    if (*q < '0' || *q > '9') return -1;
  errno = 0;
  long v = strtol(s, NULL, 10);
  if (errno || v < -2147483647L || v > 2147483647L) return -1;
  *out = (int)v;
  return 0;
}

static int on_event(void *ud, const osb_event *ev) {
  osb_exec_cmd *c = ud;
  switch (ev->type) {
    case OSB_EV_INIT:
      if (ev->text && ev->text[0] && !c->id) {
        c->id = strdup(ev->text);
        if (c->cancelled || c->timed_out) send_delete(c);
      }
      return 0;
    case OSB_EV_STDOUT:
    case OSB_EV_STDERR:
      if (ev->text) add_output(c, ev->type == OSB_EV_STDERR, ev->text, ev->text_len);
      return 0;
    case OSB_EV_COMPLETE:
      c->final_seen = 1;
      c->exit_code = 0;
      c->exec_time = ev->execution_time;
      return 1;
    case OSB_EV_ERROR: {
      c->final_seen = 1;
      int code;
      int evalue_used = 0;
      osb_buf text;
      osb_buf_init(&text);
      if (parse_exit_code(ev->evalue, &code) == 0) {
        c->exit_code = code;
      } else {
        c->exit_code = -1; /* a start failure: evalue is the message */
        if (ev->evalue) evalue_used = osb_buf_append_str(&text, ev->evalue) == 0;
      }
      const cJSON *line;
      cJSON_ArrayForEach(line, ev->traceback) {
        if (!cJSON_IsString(line)) continue;
        /* execd repeats a start failure's message as its traceback: keep it once */
        if (evalue_used && strcmp(line->valuestring, ev->evalue) == 0) continue;
        if (text.len) osb_buf_append_str(&text, "\n");
        osb_buf_append_str(&text, line->valuestring);
      }
      if (!text.len && ev->ename) osb_buf_append_str(&text, ev->ename);
      free(c->error_text);
      c->error_text = text.len ? osb_buf_steal(&text, NULL) : NULL;
      osb_buf_free(&text);
      c->exec_time = ev->execution_time;
      return 1;
    }
    case OSB_EV_STREAM_ERROR:
      osb_error_set(&c->pending_err, OSB_KIND_STREAM, ev->code[0] ? ev->code : "STREAM_ERROR", "%s",
                    ev->message[0] ? ev->message : "error in the command stream");
      c->has_pending_err = 1;
      return 1;
    default:
      return 0;
  }
}

static int on_stream_data(void *ud, long status, const char *p, size_t n) {
  (void)status;
  osb_exec_cmd *c = ud;
  if (c->completed) return 0; /* draining: the tail after the final event, discarded */
  int rc = osb_events_feed(c->parser, p, n);
  if (rc == OSB_EVENTS_ERROR && !c->has_pending_err) {
    osb_error_set(&c->pending_err, OSB_KIND_PROTOCOL, "MALFORMED_STREAM", "%s", osb_events_error(c->parser));
    c->has_pending_err = 1;
  }
  if (rc == OSB_EVENTS_STOPPED && c->final_seen && !c->has_pending_err) {
    settle(c, NULL); /* resolve now; the rest of the stream is drained */
    return 0;
  }
  if (rc != OSB_EVENTS_OK) return 1;
  if (__atomic_load_n(&c->outstanding, __ATOMIC_SEQ_CST) > c->high_water) {
    /* Pause unless the consumer caught up meanwhile: with the flag published first, either we see its report
     * here or it sees the flag in osb_exec_output_consumed and posts a resume. */
    __atomic_store_n(&c->pause_flag, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&c->outstanding, __ATOMIC_SEQ_CST) > c->low_water) {
      c->net_paused = 1;
      return 2;
    }
    __atomic_store_n(&c->pause_flag, 0, __ATOMIC_SEQ_CST);
  }
  return 0;
}

static void on_stream_done(void *ud, const osb_http_result *res) {
  osb_exec_cmd *c = ud;
  c->stream = NULL;
  if (c->completed) {
    maybe_teardown(c);
    return;
  }
  osb_error err;
  if (res->error == OSB_HTTP_OK && (res->status < 200 || res->status > 299)) {
    osb_error_from_http(&err, res, (const char *const *)c->cf.secrets, NULL);
    settle(c, &err);
    return;
  }
  if (res->error == OSB_HTTP_OK && !res->stopped && !c->final_seen && !c->has_pending_err) {
    int rc = osb_events_finish(c->parser); /* a last line without "\n" */
    if (rc == OSB_EVENTS_ERROR && !c->has_pending_err) {
      osb_error_set(&c->pending_err, OSB_KIND_PROTOCOL, "MALFORMED_STREAM", "%s", osb_events_error(c->parser));
      c->has_pending_err = 1;
    }
  }
  if (c->has_pending_err) {
    c->pending_err.attempts = res->attempts > 0 ? res->attempts : 1;
    settle(c, &c->pending_err);
  } else if (c->final_seen || c->cancelled || c->timed_out) {
    settle(c, NULL);
  } else if (res->error == OSB_HTTP_OK) {
    settle_error(c, OSB_KIND_PROTOCOL, "STREAM_ENDED", "the command stream ended before its final event");
  } else {
    osb_error_from_http(&err, res, (const char *const *)c->cf.secrets, NULL);
    if (err.kind == OSB_KIND_TRANSPORT && c->id) {
      snprintf(err.code, sizeof err.code, "COMMAND_STREAM_CUT"); /* after init: the command may have run */
      char m[sizeof err.message + 32];
      snprintf(m, sizeof m, "command stream failed: %s", err.message);
      memcpy(err.message, m, sizeof err.message - 1);
      err.message[sizeof err.message - 1] = 0;
    }
    settle(c, &err);
  }
}

static void cmd_abort(osb_active *a) {
  osb_exec_cmd *c = (osb_exec_cmd *)a;
  osb_engine_remove_active(c->e, &c->active);
  settle_error(c, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
  if (c->del) osb_http_cancel(c->del);
  if (c->stream) osb_http_cancel(c->stream);
  maybe_teardown(c);
}

static void run_job(osb_engine *e, void *arg, int shutdown) {
  osb_exec_cmd *c = arg;
  c->e = e;
  if (shutdown) {
    osb_error err;
    osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
    c->completed = 1;
    c->cb.on_result(c->ud, &err, NULL);
    settle_waiters(c);
    osb_exec_cmd_release(c);
    return;
  }
  osb_batch_start(&c->batch, osb_engine_loop(e), on_flush, cmd_closed, c);
  uv_timer_init(osb_engine_loop(e), &c->timeout_timer);
  c->timeout_timer.data = c;
  c->active.abort = cmd_abort;
  osb_engine_add_active(e, &c->active);
  c->start_ms = osb_engine_now(e);
  c->exec_time = -1;

  static const char *const extra[] = {"Content-Type: application/json", "Accept: text/event-stream"};
  osb_http_opts o;
  memset(&o, 0, sizeof o);
  o.method = "POST";
  o.body = c->body;
  o.body_len = strlen(c->body);
  o.idle_timeout_ms = c->cf.idle_ms;
  o.on_data = on_stream_data;
  o.on_done = on_stream_done;
  o.ud = c;
  c->stream = osb_conn_start(e, &c->cf, &o, extra, 2, "/command");
  if (!c->stream) {
    settle_error(c, OSB_KIND_TRANSPORT, "OUT_OF_MEMORY", "out of memory");
    return;
  }
  if (c->client_timeout_ms > 0)
    uv_timer_start(&c->timeout_timer, on_timeout_timer, (uint64_t)c->client_timeout_ms, 0);
}

static char *build_body(const osb_exec_run_opts *o) {
  cJSON *b = cJSON_CreateObject();
  int ok = b && cJSON_AddStringToObject(b, "command", o->command);
  if (ok && o->cwd) ok = cJSON_AddStringToObject(b, "cwd", o->cwd) != NULL;
  if (ok && o->nenv) {
    cJSON *env = cJSON_AddObjectToObject(b, "envs");
    ok = env != NULL;
    for (size_t i = 0; ok && i < o->nenv; i++)
      ok = cJSON_AddStringToObject(env, o->env_kv[2 * i], o->env_kv[2 * i + 1] ? o->env_kv[2 * i + 1] : "") != NULL;
  }
  if (ok && o->timeout_ms > 0)
    ok = cJSON_AddNumberToObject(b, "timeout", (double)o->timeout_ms + SERVER_TIMEOUT_GRACE_MS) != NULL;
  char *s = ok ? cJSON_PrintUnformatted(b) : NULL;
  cJSON_Delete(b);
  if (!s) return NULL;
  char *r = strdup(s); /* our allocator, freed with free() */
  cJSON_free(s);
  return r;
}

osb_exec_cmd *osb_exec_run(osb_engine *e, const osb_exec *x, const osb_exec_run_opts *o,
                           const osb_exec_callbacks *cb, void *ud, char *errbuf, size_t errlen) {
  if (!o->command || !o->command[0]) {
    snprintf(errbuf, errlen, "command must be a non-empty string");
    return NULL;
  }
  if (o->timeout_ms < 0) {
    snprintf(errbuf, errlen, "timeoutMs must be >= 0");
    return NULL;
  }
  osb_exec_cmd *c = calloc(1, sizeof *c);
  if (!c) goto oom;
  c->refs = 2; /* the caller's and the engine's */
  c->body = build_body(o);
  c->parser = osb_events_new(0, on_event, c);
  if (!c->body || !c->parser || osb_conn_copy(&c->cf, x) != 0) goto oom;
  c->high_water = o->output_high_water ? o->output_high_water : DEFAULT_HIGH_WATER;
  c->low_water = c->high_water / 4;
  osb_tail_init(&c->out, o->max_retained);
  osb_tail_init(&c->err, o->max_retained);
  c->client_timeout_ms = o->timeout_ms;
  c->cb = *cb;
  c->ud = ud;
  if (osb_engine_post(e, run_job, c) != 0) {
    snprintf(errbuf, errlen, "the native engine is shutting down");
    cmd_free(c);
    return NULL;
  }
  return c;
oom:
  if (c) cmd_free(c);
  snprintf(errbuf, errlen, "out of memory");
  return NULL;
}

static void resume_job(osb_engine *e, void *arg, int shutdown) {
  (void)e;
  osb_exec_cmd *c = arg;
  if (!shutdown && c->net_paused && c->stream && !c->completed) {
    c->net_paused = 0;
    osb_http_resume(c->stream);
  }
  osb_exec_cmd_release(c);
}

void osb_exec_output_consumed(osb_engine *e, osb_exec_cmd *c, size_t n) {
  size_t left = __atomic_sub_fetch(&c->outstanding, n, __ATOMIC_SEQ_CST);
  if (left > c->low_water || !__atomic_exchange_n(&c->pause_flag, 0, __ATOMIC_SEQ_CST)) return;
  osb_exec_cmd_retain(c);
  if (!e || osb_engine_post(e, resume_job, c) != 0) osb_exec_cmd_release(c);
}

typedef struct {
  osb_exec_cmd *c;
  osb_exec_done_fn done;
  void *ud;
} cancel_req;

static void cancel_job(osb_engine *e, void *arg, int shutdown) {
  (void)e;
  cancel_req *q = arg;
  osb_exec_cmd *c = q->c;
  if (shutdown || c->completed) {
    q->done(q->ud, NULL);
  } else {
    waiter *w = calloc(1, sizeof *w);
    if (!w) {
      q->done(q->ud, NULL);
    } else {
      w->done = q->done;
      w->ud = q->ud;
      w->next = c->waiters;
      c->waiters = w;
      c->cancelled = 1;
      if (c->id) send_delete(c); /* else at init */
    }
  }
  osb_exec_cmd_release(c);
  free(q);
}

int osb_exec_cancel(osb_engine *e, osb_exec_cmd *c, osb_exec_done_fn done, void *ud) {
  cancel_req *q = calloc(1, sizeof *q);
  if (!q) return -1;
  q->c = c;
  q->done = done;
  q->ud = ud;
  osb_exec_cmd_retain(c);
  if (osb_engine_post(e, cancel_job, q) != 0) {
    __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    free(q);
    return -1;
  }
  return 0;
}
