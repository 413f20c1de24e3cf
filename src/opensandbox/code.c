/* Code interpreter client: execd's /code contexts and cell streams (see code.h). */
#define _GNU_SOURCE
#include "code.h"
#include "conn.h"
#include "lifecycle.h"
#include "core/batch.h"
#include "core/buf.h"
#include "core/events.h"
#include "core/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#define INTERRUPT_GRACE_MS 10000 /* after DELETE /code?id=: how long the stream may take to end */
#define MAX_TRACEBACK_LINES 200

static char *json_text(cJSON *doc) {
  char *s = doc ? cJSON_PrintUnformatted(doc) : NULL;
  if (!s) return NULL;
  char *r = strdup(s); /* our allocator, freed with free() */
  cJSON_free(s);
  return r;
}

/* ---- plain requests ---- */

typedef enum { RES_ANY, RES_OBJECT, RES_ARRAY } res_mode;

typedef struct {
  osb_conn cf; /* the operation's own copy of the client's settings */
  char *method, *path, *body; /* path: after the base URL, escaped */
  long timeout_ms;
  res_mode mode;
  osb_code_done_fn done;
  void *ud;
} call;

static void call_free(call *c) {
  osb_conn_clear(&c->cf);
  free(c->method);
  free(c->path);
  free(c->body);
  free(c);
}

static void call_complete(call *c, const osb_error *err, char *json) {
  c->done(c->ud, err, json);
  call_free(c);
}

static void call_on_done(void *ud, const osb_http_result *res) {
  call *c = ud;
  osb_error err;
  if (res->error != OSB_HTTP_OK || res->status < 200 || res->status > 299) {
    osb_error_from_http(&err, res, (const char *const *)c->cf.secrets, NULL);
    call_complete(c, &err, NULL);
    return;
  }
  if (c->mode != RES_ANY) {
    cJSON *doc = cJSON_ParseWithLength(res->body, res->body_len);
    int ok = c->mode == RES_OBJECT ? cJSON_IsObject(doc) : cJSON_IsArray(doc);
    cJSON_Delete(doc);
    if (!ok) {
      osb_error_unexpected(&err, res, c->mode == RES_OBJECT ? "body is not a JSON object" : "body is not a JSON array",
                           NULL);
      call_complete(c, &err, NULL);
      return;
    }
  }
  char *json = osb_body_text(res, &err);
  call_complete(c, json ? NULL : &err, json);
}

static void call_job(osb_engine *e, void *arg, int shutdown) {
  call *c = arg;
  osb_error err;
  if (shutdown) {
    osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
    call_complete(c, &err, NULL);
    return;
  }
  static const char *const extra[] = {"Accept: application/json", "Content-Type: application/json"};
  osb_http_opts o;
  memset(&o, 0, sizeof o);
  o.method = c->method;
  o.body = c->body;
  o.body_len = c->body ? strlen(c->body) : 0;
  o.timeout_ms = c->timeout_ms;
  o.retry_connect = strcmp(c->method, "GET") == 0;
  o.refused_final = 1; /* a refused execd: the caller asks the lifecycle API (lib/recovery.js) at once */
  o.on_done = call_on_done;
  o.ud = c;
  osb_http_req *r = osb_conn_start(e, &c->cf, &o, extra, c->body ? 2 : 1, "%s", c->path);
  if (!r) {
    osb_error_set(&err, OSB_KIND_TRANSPORT, "OUT_OF_MEMORY", "out of memory");
    call_complete(c, &err, NULL);
  }
}

/* path: already escaped, starts with "/"; body copied (may be NULL). */
static int submit(osb_engine *e, const osb_code *x, const char *method, const char *path, const char *body,
                  long timeout_ms, res_mode mode, osb_code_done_fn done, void *ud, char *errbuf, size_t errlen) {
  call *c = calloc(1, sizeof *c);
  if (!c || osb_conn_copy(&c->cf, x) != 0) goto oom;
  c->path = strdup(path);
  c->method = strdup(method);
  c->body = body ? strdup(body) : NULL;
  if (!c->path || !c->method || (body && !c->body)) goto oom;
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : x->timeout_ms;
  c->mode = mode;
  c->done = done;
  c->ud = ud;
  if (osb_engine_post(e, call_job, c) != 0) {
    call_free(c);
    snprintf(errbuf, errlen, "the native engine is shutting down");
    return -1;
  }
  return 0;
oom:
  if (c) call_free(c);
  snprintf(errbuf, errlen, "out of memory");
  return -1;
}

static int need(const char *s, const char *what, char *errbuf, size_t errlen) {
  if (s && *s) return 0;
  snprintf(errbuf, errlen, "%s must be a non-empty string", what);
  return -1;
}

/* fmt has exactly one %s, filled with the escaped value. */
static int submit_escaped(osb_engine *e, const osb_code *x, const char *method, const char *fmt, const char *value,
                          res_mode mode, osb_code_done_fn done, void *ud, char *errbuf, size_t errlen) {
  char *ev = osb_url_escape(value);
  osb_buf path;
  osb_buf_init(&path);
  if (!ev || osb_buf_appendf(&path, fmt, ev) != 0) {
    free(ev);
    osb_buf_free(&path);
    snprintf(errbuf, errlen, "out of memory");
    return -1;
  }
  free(ev);
  int rc = submit(e, x, method, path.data, NULL, 0, mode, done, ud, errbuf, errlen);
  osb_buf_free(&path);
  return rc;
}

int osb_code_create_context(osb_engine *e, const osb_code *x, const char *language, const char *cwd,
                            long timeout_ms, osb_code_done_fn done, void *ud, char *errbuf, size_t errlen) {
  if (need(language, "language", errbuf, errlen)) return -1;
  cJSON *b = cJSON_CreateObject();
  int ok = b && cJSON_AddStringToObject(b, "language", language);
  if (ok && cwd && *cwd) ok = cJSON_AddStringToObject(b, "cwd", cwd) != NULL;
  char *body = ok ? json_text(b) : NULL;
  cJSON_Delete(b);
  if (!body) {
    snprintf(errbuf, errlen, "out of memory");
    return -1;
  }
  int rc = submit(e, x, "POST", "/code/context", body, timeout_ms, RES_OBJECT, done, ud, errbuf, errlen);
  free(body);
  return rc;
}

int osb_code_list_contexts(osb_engine *e, const osb_code *x, const char *language, osb_code_done_fn done,
                           void *ud, char *errbuf, size_t errlen) {
  if (!language || !*language)
    return submit(e, x, "GET", "/code/contexts", NULL, 0, RES_ARRAY, done, ud, errbuf, errlen);
  return submit_escaped(e, x, "GET", "/code/contexts?language=%s", language, RES_ARRAY, done, ud, errbuf, errlen);
}

int osb_code_get_context(osb_engine *e, const osb_code *x, const char *id, osb_code_done_fn done, void *ud,
                         char *errbuf, size_t errlen) {
  if (need(id, "context id", errbuf, errlen)) return -1;
  return submit_escaped(e, x, "GET", "/code/contexts/%s", id, RES_OBJECT, done, ud, errbuf, errlen);
}

int osb_code_delete_context(osb_engine *e, const osb_code *x, const char *id, osb_code_done_fn done, void *ud,
                            char *errbuf, size_t errlen) {
  if (need(id, "context id", errbuf, errlen)) return -1;
  return submit_escaped(e, x, "DELETE", "/code/contexts/%s", id, RES_ANY, done, ud, errbuf, errlen);
}

int osb_code_delete_contexts(osb_engine *e, const osb_code *x, const char *language, osb_code_done_fn done,
                             void *ud, char *errbuf, size_t errlen) {
  if (need(language, "language", errbuf, errlen)) return -1;
  return submit_escaped(e, x, "DELETE", "/code/contexts?language=%s", language, RES_ANY, done, ud, errbuf, errlen);
}

int osb_code_interrupt(osb_engine *e, const osb_code *x, const char *id, osb_code_done_fn done, void *ud,
                       char *errbuf, size_t errlen) {
  if (need(id, "context id", errbuf, errlen)) return -1;
  return submit_escaped(e, x, "DELETE", "/code?id=%s", id, RES_ANY, done, ud, errbuf, errlen);
}

/* ---- cells ---- */

typedef struct waiter {
  struct waiter *next;
  void (*done)(void *ud, const osb_error *err);
  void *ud;
} waiter;

struct osb_code_run {
  osb_active active;
  int refs; /* atomic */
  osb_engine *e;
  osb_conn cf; /* the operation's own copy of the client's settings */
  char *body;
  long cell_timeout_ms;
  int64_t max_output, max_results;
  osb_code_callbacks cb;
  void *ud;
  /* engine thread state */
  osb_http_req *stream, *del;
  osb_events *parser;
  osb_buf out, err, results;
  osb_batch batch;
  uint64_t out_dropped, err_dropped;
  size_t results_count, results_dropped;
  uv_timer_t deadline_timer;
  char *id, *status, *ename, *evalue;
  char **traceback;
  size_t ntraceback;
  long execution_count;
  double exec_time;
  uint64_t start_ms;
  int has_error, completed_ev, timed_out, interrupted, stream_cut;
  int settled, teardown, del_sent;
  int has_pending_err;
  osb_error pending_err;
  waiter *waiters;
};

static void run_free(osb_code_run *r) {
  osb_conn_clear(&r->cf);
  free(r->body);
  osb_events_free(r->parser);
  osb_buf_free(&r->out);
  osb_buf_free(&r->err);
  osb_batch_free(&r->batch);
  osb_buf_free(&r->results);
  free(r->id);
  free(r->status);
  free(r->ename);
  free(r->evalue);
  osb_strv_free(r->traceback, r->ntraceback);
  while (r->waiters) {
    waiter *w = r->waiters;
    r->waiters = w->next;
    free(w);
  }
  free(r);
}

void osb_code_run_release(osb_code_run *r) {
  if (r && __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0) run_free(r);
}

static void run_closed(void *ud) { osb_code_run_release(ud); /* the engine's reference */ }

static void maybe_teardown(osb_code_run *r) {
  if (!r->settled || r->stream || r->del || r->teardown) return;
  r->teardown = 1;
  osb_engine_remove_active(r->e, &r->active);
  uv_timer_t *const others[] = {&r->deadline_timer};
  osb_batch_close(&r->batch, others, 1);
}

static void on_flush(void *ud, const char *out, size_t out_len, const char *err, size_t err_len) {
  osb_code_run *r = ud;
  if (r->cb.on_output) r->cb.on_output(r->ud, out, out_len, err, err_len);
}

static void settle_waiters(osb_code_run *r, const osb_error *err) {
  while (r->waiters) {
    waiter *w = r->waiters;
    r->waiters = w->next;
    w->done(w->ud, err);
    free(w);
  }
}

/* Exactly one on_result. err NULL = success with the current state. */
static void settle(osb_code_run *r, const osb_error *err) {
  if (r->settled) return;
  r->settled = 1;
  uv_timer_stop(&r->deadline_timer);
  osb_batch_flush(&r->batch);
  if (err) {
    r->cb.on_result(r->ud, err, NULL);
  } else if (osb_buf_append_str(&r->results, "]") != 0) {
    osb_error oom;
    osb_error_set(&oom, OSB_KIND_PROTOCOL, "OUT_OF_MEMORY", "out of memory");
    r->cb.on_result(r->ud, &oom, NULL);
  } else {
    osb_code_result res;
    memset(&res, 0, sizeof res);
    res.context_id = r->id ? r->id : "";
    res.execution_count = r->execution_count;
    res.execution_time_ms = r->exec_time >= 0 ? r->exec_time : (double)(osb_engine_now(r->e) - r->start_ms);
    res.completed = r->completed_ev;
    res.status = r->status;
    res.out = r->out.data ? r->out.data : "";
    res.out_len = r->out.len;
    res.err = r->err.data ? r->err.data : "";
    res.err_len = r->err.len;
    res.out_dropped = r->out_dropped;
    res.err_dropped = r->err_dropped;
    res.results_json = r->results.data;
    res.results_count = r->results_count;
    res.results_dropped = r->results_dropped;
    res.has_error = r->has_error;
    res.ename = r->ename ? r->ename : "";
    res.evalue = r->evalue ? r->evalue : "";
    res.traceback = (const char *const *)r->traceback;
    res.ntraceback = r->ntraceback;
    res.timed_out = r->timed_out;
    res.interrupted = r->interrupted;
    res.stream_cut = r->stream_cut;
    r->cb.on_result(r->ud, NULL, &res);
  }
  if (!r->del) settle_waiters(r, NULL); /* no interrupt in flight: nothing more will happen */
  if (r->stream) osb_http_cancel(r->stream);
  maybe_teardown(r);
}

static void settle_error(osb_code_run *r, osb_kind kind, const char *code, const char *msg) {
  osb_error err;
  osb_error_set(&err, kind, code, "%s", msg);
  settle(r, &err);
}

static void on_deadline(uv_timer_t *t);

static void on_delete_done(void *ud, const osb_http_result *res) {
  osb_code_run *r = ud;
  r->del = NULL;
  if (res->error != OSB_HTTP_OK || res->status < 200 || res->status > 299) {
    osb_error err;
    osb_error_from_http(&err, res, (const char *const *)r->cf.secrets, NULL);
    settle_waiters(r, &err);
  } else {
    settle_waiters(r, NULL);
  }
  maybe_teardown(r);
}

/* DELETE /code?id=<context>, then give the stream INTERRUPT_GRACE_MS to end. */
static void send_interrupt(osb_code_run *r) {
  if (r->del_sent || !r->id || r->settled) return;
  r->del_sent = 1;
  char *eid = osb_url_escape(r->id);
  if (eid) {
    osb_http_opts o;
    memset(&o, 0, sizeof o);
    o.method = "DELETE";
    o.timeout_ms = r->cf.timeout_ms;
    o.on_done = on_delete_done;
    o.ud = r;
    r->del = osb_conn_start(r->e, &r->cf, &o, NULL, 0, "/code?id=%s", eid);
  }
  free(eid);
  uv_timer_stop(&r->deadline_timer);
  uv_timer_start(&r->deadline_timer, on_deadline, INTERRUPT_GRACE_MS, 0);
  if (!r->del) {
    osb_error err;
    osb_error_set(&err, OSB_KIND_TRANSPORT, "OUT_OF_MEMORY", "out of memory");
    settle_waiters(r, &err);
  }
}

/* The cell timeout (interrupt, then wait for the end of the stream) or the interrupt grace (cut the stream). */
static void on_deadline(uv_timer_t *t) {
  osb_code_run *r = t->data;
  if (r->settled) return;
  if (r->del_sent) {
    r->stream_cut = 1; /* the server did not end the stream after the interrupt */
    settle(r, NULL);
    return;
  }
  r->timed_out = 1;
  if (r->id) {
    send_interrupt(r);
  } else {
    osb_error err;
    osb_error_set(&err, OSB_KIND_TIMEOUT, "TIMEOUT", "the code interpreter did not start the cell within %ld ms",
                  r->cell_timeout_ms);
    settle(r, &err);
  }
}

static void keep_output(osb_code_run *r, int is_err, const char *text, size_t len) {
  osb_buf *kept = is_err ? &r->err : &r->out;
  uint64_t *dropped = is_err ? &r->err_dropped : &r->out_dropped;
  size_t take = len;
  if (*dropped > 0) {
    take = 0; /* once truncated, later output is dropped too (the kept text stays a prefix) */
  } else if (r->max_output >= 0) {
    uint64_t room = (uint64_t)r->max_output > kept->len ? (uint64_t)r->max_output - kept->len : 0;
    if (take > room) {
      take = (size_t)room;
      while (take > 0 && ((unsigned char)text[take] & 0xC0) == 0x80) take--; /* a character boundary */
    }
  }
  if (take && (osb_buf_append(kept, text, take) != 0 || osb_batch_append(&r->batch, is_err, text, take) != 0))
    take = 0;
  *dropped += len - take;
  if (take) osb_batch_kick(&r->batch);
}

static void keep_result(osb_code_run *r, const cJSON *bundle) {
  if (!cJSON_IsObject(bundle)) return;
  char *s = cJSON_PrintUnformatted(bundle);
  if (!s) {
    r->results_dropped++;
    return;
  }
  size_t n = strlen(s);
  size_t used = r->results.len > 1 ? r->results.len - 1 : 0; /* without the leading "[" */
  if ((r->max_results >= 0 && used + n + 1 > (uint64_t)r->max_results) ||
      osb_buf_append_str(&r->results, r->results_count ? "," : "") != 0 || osb_buf_append(&r->results, s, n) != 0) {
    r->results_dropped++;
  } else {
    r->results_count++;
  }
  cJSON_free(s);
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

static void keep_error(osb_code_run *r, const osb_event *ev) {
  r->has_error = 1;
  free(r->ename);
  free(r->evalue);
  osb_strv_free(r->traceback, r->ntraceback);
  r->traceback = NULL;
  r->ntraceback = 0;
  r->ename = dup_or_empty(ev->ename);
  r->evalue = dup_or_empty(ev->evalue);
  int n = cJSON_IsArray(ev->traceback) ? cJSON_GetArraySize(ev->traceback) : 0;
  if (n <= 0) return;
  int first = n > MAX_TRACEBACK_LINES ? n - MAX_TRACEBACK_LINES : 0; /* the last lines matter most */
  r->traceback = calloc((size_t)(n - first) + 1, sizeof *r->traceback);
  if (!r->traceback) return;
  for (int i = first; i < n; i++) {
    const cJSON *line = cJSON_GetArrayItem(ev->traceback, i);
    char *s = strdup(cJSON_IsString(line) ? line->valuestring : "");
    if (!s) break;
    r->traceback[r->ntraceback++] = s;
  }
}

static int on_event(void *ud, const osb_event *ev) {
  osb_code_run *r = ud;
  if (ev->execution_count >= 0) r->execution_count = (long)ev->execution_count;
  switch (ev->type) {
    case OSB_EV_INIT:
      if (ev->text && ev->text[0] && !r->id) {
        r->id = strdup(ev->text);
        if (r->interrupted || r->timed_out) send_interrupt(r);
      }
      return 0;
    case OSB_EV_STDOUT:
    case OSB_EV_STDERR:
      if (ev->text) keep_output(r, ev->type == OSB_EV_STDERR, ev->text, ev->text_len);
      if (ev->text_dropped) { /* a chunk larger than the parser's line bound: the rest of its text was counted */
        if (ev->type == OSB_EV_STDERR) r->err_dropped += ev->text_dropped;
        else r->out_dropped += ev->text_dropped;
      }
      return 0;
    case OSB_EV_OVERSIZED: /* any other event larger than the line bound: counted, not kept */
      if (ev->type_name && strcmp(ev->type_name, "result") == 0) {
        r->results_dropped++;
      } else if (ev->type_name && strcmp(ev->type_name, "error") == 0) {
        osb_event e;
        memset(&e, 0, sizeof e);
        e.ename = "OversizedEvent";
        e.evalue = "the cell's error event was larger than the client's event bound, so its details were dropped";
        keep_error(r, &e);
      }
      return 0;
    case OSB_EV_RESULT:
      keep_result(r, ev->results);
      return 0;
    case OSB_EV_STATUS:
      if (ev->text) {
        free(r->status);
        r->status = strdup(ev->text);
      }
      return 0;
    case OSB_EV_ERROR:
      keep_error(r, ev);
      if (ev->execution_time >= 0) r->exec_time = ev->execution_time;
      return 0;
    case OSB_EV_COMPLETE:
      r->completed_ev = 1; /* NOT the end: output may still follow on a Jupyter-backed execd */
      if (ev->execution_time >= 0) r->exec_time = ev->execution_time;
      return 0;
    case OSB_EV_STREAM_ERROR:
      osb_error_set(&r->pending_err, OSB_KIND_STREAM, ev->code[0] ? ev->code : "STREAM_ERROR", "%s",
                    ev->message[0] ? ev->message : "error in the code stream");
      r->has_pending_err = 1;
      return 1;
    default:
      return 0;
  }
}

static int on_stream_data(void *ud, long status, const char *p, size_t n) {
  (void)status;
  osb_code_run *r = ud;
  if (r->settled) return 1;
  int rc = osb_events_feed(r->parser, p, n);
  if (rc == OSB_EVENTS_ERROR && !r->has_pending_err) {
    osb_error_set(&r->pending_err, OSB_KIND_PROTOCOL, "MALFORMED_STREAM", "%s", osb_events_error(r->parser));
    r->has_pending_err = 1;
  }
  return rc == OSB_EVENTS_OK ? 0 : 1;
}

static void on_stream_done(void *ud, const osb_http_result *res) {
  osb_code_run *r = ud;
  r->stream = NULL;
  if (r->settled) {
    maybe_teardown(r);
    return;
  }
  osb_error err;
  if (res->error == OSB_HTTP_OK && (res->status < 200 || res->status > 299)) {
    osb_error_from_http(&err, res, (const char *const *)r->cf.secrets, NULL);
    settle(r, &err);
    return;
  }
  if (res->error == OSB_HTTP_OK && !res->stopped && !r->has_pending_err) {
    int rc = osb_events_finish(r->parser); /* a last line without "\n" */
    if (rc == OSB_EVENTS_ERROR) {
      osb_error_set(&r->pending_err, OSB_KIND_PROTOCOL, "MALFORMED_STREAM", "%s", osb_events_error(r->parser));
      r->has_pending_err = 1;
    }
  }
  if (r->has_pending_err) {
    r->pending_err.attempts = res->attempts > 0 ? res->attempts : 1;
    settle(r, &r->pending_err);
  } else if (res->error == OSB_HTTP_OK && !r->id && !r->completed_ev && !r->has_error) {
    settle_error(r, OSB_KIND_PROTOCOL, "STREAM_ENDED", "the code stream ended without any event");
  } else if (res->error == OSB_HTTP_OK && !r->completed_ev && !r->has_error && !r->timed_out && !r->interrupted) {
    /* execd ends every cell it ran with execution_complete or error: a stream that just stops after init (the
     * sandbox deleted or the server stopped under the cell) has no result to report. A transport error, so that
     * the caller's recovery asks the lifecycle API whether the sandbox is gone (never retried: the cell may have
     * run). */
    settle_error(r, OSB_KIND_TRANSPORT, "CODE_STREAM_CUT",
                 "the code stream ended before the cell reported its end (no execution_complete or error event)");
  } else if (res->error == OSB_HTTP_OK) {
    settle(r, NULL); /* end of stream: the only "done" of /code */
  } else if (r->del_sent && (r->has_error || r->completed_ev)) {
    r->stream_cut = 1; /* interrupted and the cell already reported how it ended */
    settle(r, NULL);
  } else {
    osb_error_from_http(&err, res, (const char *const *)r->cf.secrets, NULL);
    if (err.kind == OSB_KIND_TIMEOUT && res->error == OSB_HTTP_EIDLE)
      snprintf(err.message, sizeof err.message,
               "the code interpreter sent nothing for %ld ms (no kernel, or the server is stuck)", r->cf.idle_ms);
    settle(r, &err);
  }
}

static void run_abort(osb_active *a) {
  osb_code_run *r = (osb_code_run *)a;
  settle_error(r, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
  if (r->del) osb_http_cancel(r->del);
  if (r->stream) osb_http_cancel(r->stream);
  maybe_teardown(r);
}

static void run_job(osb_engine *e, void *arg, int shutdown) {
  osb_code_run *r = arg;
  r->e = e;
  if (shutdown) {
    osb_error err;
    osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
    r->settled = 1;
    r->cb.on_result(r->ud, &err, NULL);
    settle_waiters(r, NULL);
    osb_code_run_release(r);
    return;
  }
  osb_batch_start(&r->batch, osb_engine_loop(e), on_flush, run_closed, r);
  uv_timer_init(osb_engine_loop(e), &r->deadline_timer);
  r->deadline_timer.data = r;
  r->active.abort = run_abort;
  osb_engine_add_active(e, &r->active);
  r->start_ms = osb_engine_now(e);

  static const char *const extra[] = {"Content-Type: application/json", "Accept: text/event-stream"};
  osb_http_opts o;
  memset(&o, 0, sizeof o);
  o.method = "POST";
  o.body = r->body;
  o.body_len = strlen(r->body);
  o.idle_timeout_ms = r->cf.idle_ms;
  o.on_data = on_stream_data;
  o.on_done = on_stream_done;
  o.ud = r;
  r->stream = osb_conn_start(e, &r->cf, &o, extra, 2, "/code");
  if (!r->stream) {
    settle_error(r, OSB_KIND_TRANSPORT, "OUT_OF_MEMORY", "out of memory");
    return;
  }
  if (r->cell_timeout_ms > 0) uv_timer_start(&r->deadline_timer, on_deadline, (uint64_t)r->cell_timeout_ms, 0);
  if (r->interrupted && r->id) send_interrupt(r);
}

static char *build_run_body(const osb_code_run_opts *o) {
  cJSON *b = cJSON_CreateObject();
  cJSON *ctx = b ? cJSON_AddObjectToObject(b, "context") : NULL;
  int ok = ctx != NULL;
  if (ok && o->context_id && *o->context_id) ok = cJSON_AddStringToObject(ctx, "id", o->context_id) != NULL;
  if (ok) ok = cJSON_AddStringToObject(ctx, "language", o->language) != NULL;
  if (ok) ok = cJSON_AddStringToObject(b, "code", o->code) != NULL;
  char *s = ok ? json_text(b) : NULL;
  cJSON_Delete(b);
  return s;
}

osb_code_run *osb_code_run_start(osb_engine *e, const osb_code *x, const osb_code_run_opts *o,
                                 const osb_code_callbacks *cb, void *ud, char *errbuf, size_t errlen) {
  if (need(o->code, "code", errbuf, errlen) || need(o->language, "language", errbuf, errlen)) return NULL;
  if (o->timeout_ms < 0) {
    snprintf(errbuf, errlen, "timeoutMs must be >= 0");
    return NULL;
  }
  osb_code_run *r = calloc(1, sizeof *r);
  if (!r) goto oom;
  r->refs = 2; /* the caller's and the engine's */
  r->body = build_run_body(o);
  r->parser = osb_events_new(o->max_event_bytes > 0 ? (size_t)o->max_event_bytes : 0, on_event, r);
  if (r->parser) osb_events_set_lenient(r->parser, 1); /* a cell's single print can exceed any line bound */
  if (!r->body || !r->parser || osb_conn_copy(&r->cf, x) != 0) goto oom;
  if (osb_buf_append_str(&r->results, "[") != 0) goto oom;
  r->cell_timeout_ms = o->timeout_ms;
  r->max_output = o->max_output;
  r->max_results = o->max_results;
  r->execution_count = -1;
  r->exec_time = -1;
  r->cb = *cb;
  r->ud = ud;
  if (osb_engine_post(e, run_job, r) != 0) {
    snprintf(errbuf, errlen, "the native engine is shutting down");
    run_free(r);
    return NULL;
  }
  return r;
oom:
  if (r) run_free(r);
  snprintf(errbuf, errlen, "out of memory");
  return NULL;
}

typedef struct {
  osb_code_run *r;
  void (*done)(void *ud, const osb_error *err);
  void *ud;
} interrupt_req;

static void interrupt_job(osb_engine *e, void *arg, int shutdown) {
  (void)e;
  interrupt_req *q = arg;
  osb_code_run *r = q->r;
  waiter *w = NULL;
  if (!shutdown && !r->settled) w = calloc(1, sizeof *w);
  if (!w) {
    q->done(q->ud, NULL); /* already settled (or stopping): nothing to interrupt */
  } else {
    w->done = q->done;
    w->ud = q->ud;
    w->next = r->waiters;
    r->waiters = w;
    r->interrupted = 1;
    if (r->id && !r->del_sent) send_interrupt(r); /* else at init */
    else if (r->del_sent && !r->del) settle_waiters(r, NULL); /* already answered */
  }
  osb_code_run_release(r);
  free(q);
}

int osb_code_run_interrupt(osb_engine *e, osb_code_run *r, void (*done)(void *ud, const osb_error *err),
                           void *ud) {
  interrupt_req *q = calloc(1, sizeof *q);
  if (!q) return -1;
  q->r = r;
  q->done = done;
  q->ud = ud;
  __atomic_add_fetch(&r->refs, 1, __ATOMIC_ACQ_REL);
  if (osb_engine_post(e, interrupt_job, q) != 0) {
    __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL);
    free(q);
    return -1;
  }
  return 0;
}
