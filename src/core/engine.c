/* Engine thread, job queue and shutdown (see engine.h). */
#include "engine.h"
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>

typedef struct job {
  struct job *next;
  osb_job_fn fn;
  void *arg;
} job;

struct osb_engine {
  uv_thread_t thread;
  uv_loop_t loop;
  uv_async_t wake;
  uv_mutex_t mu;
  job *qhead, *qtail; /* guarded by mu */
  int stopping;       /* guarded by mu */
  osb_active *actives; /* loop thread only */
  struct osb_http_ctx *http;
  long counts[OSB_COUNT_N]; /* atomic, indexed by OSB_COUNT_* */
  long nactives;      /* atomic */
};

static uv_once_t g_once = UV_ONCE_INIT;
static void global_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); } /* never cleaned up in an addon */

uv_loop_t *osb_engine_loop(osb_engine *e) { return &e->loop; }
struct osb_http_ctx *osb_engine_http(osb_engine *e) { return e->http; }
uint64_t osb_engine_now(osb_engine *e) {
  uv_update_time(&e->loop);
  return uv_now(&e->loop);
}

void osb_engine_count(osb_engine *e, int which, long delta) { __atomic_add_fetch(&e->counts[which], delta, __ATOMIC_RELAXED); }

void osb_engine_get_stats(osb_engine *e, osb_engine_stats *out) {
  out->requests_in_flight = __atomic_load_n(&e->counts[OSB_COUNT_REQUESTS], __ATOMIC_RELAXED);
  out->sockets = __atomic_load_n(&e->counts[OSB_COUNT_SOCKETS], __ATOMIC_RELAXED);
  out->actives = __atomic_load_n(&e->nactives, __ATOMIC_RELAXED);
  out->paused = __atomic_load_n(&e->counts[OSB_COUNT_PAUSED], __ATOMIC_RELAXED);
  out->requests_started = __atomic_load_n(&e->counts[OSB_COUNT_STARTED], __ATOMIC_RELAXED);
}

void osb_engine_add_active(osb_engine *e, osb_active *a) {
  a->prev = NULL;
  a->next = e->actives;
  if (e->actives) e->actives->prev = a;
  e->actives = a;
  __atomic_add_fetch(&e->nactives, 1, __ATOMIC_RELAXED);
}

void osb_engine_remove_active(osb_engine *e, osb_active *a) {
  if (a->prev) a->prev->next = a->next;
  else if (e->actives == a) e->actives = a->next;
  else return; /* not registered */
  if (a->next) a->next->prev = a->prev;
  a->next = a->prev = NULL;
  __atomic_sub_fetch(&e->nactives, 1, __ATOMIC_RELAXED);
}

static void on_wake(uv_async_t *h) {
  osb_engine *e = h->data;
  uv_mutex_lock(&e->mu);
  job *q = e->qhead;
  e->qhead = e->qtail = NULL;
  int stop = e->stopping;
  uv_mutex_unlock(&e->mu);
  while (q) {
    job *n = q->next;
    q->fn(e, q->arg, stop);
    free(q);
    q = n;
  }
  if (!stop) return;
  /* Shutdown on the loop thread: abort everything that is alive, then close our own handles; uv_run returns
   * once every handle is closed. */
  while (e->actives) {
    osb_active *a = e->actives;
    a->abort(a);
    if (e->actives == a) osb_engine_remove_active(e, a); /* defensive: abort must remove it */
  }
  osb_http_ctx_free(e->http);
  e->http = NULL;
  uv_close((uv_handle_t *)&e->wake, NULL);
}

static void worker(void *arg) {
  osb_engine *e = arg;
  uv_run(&e->loop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&e->loop);
  if (rc != 0) fprintf(stderr, "mastra-opensandbox: engine loop close: %s\n", uv_strerror(rc));
}

osb_engine *osb_engine_start(char *err, size_t errlen) {
  uv_once(&g_once, global_init);
  osb_engine *e = calloc(1, sizeof *e);
  int rc;
  if (!e) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if ((rc = uv_loop_init(&e->loop)) != 0) {
    snprintf(err, errlen, "uv_loop_init: %s", uv_strerror(rc));
    free(e);
    return NULL;
  }
  uv_mutex_init(&e->mu);
  uv_async_init(&e->loop, &e->wake, on_wake);
  e->wake.data = e;
  e->http = osb_http_ctx_new(e);
  if (!e->http) {
    snprintf(err, errlen, "curl_multi_init failed");
    goto fail;
  }
  /* Everything above happens-before the thread start. */
  if ((rc = uv_thread_create(&e->thread, worker, e)) != 0) {
    snprintf(err, errlen, "uv_thread_create: %s", uv_strerror(rc));
    osb_http_ctx_free(e->http);
    goto fail;
  }
  return e;
fail:
  uv_close((uv_handle_t *)&e->wake, NULL);
  uv_run(&e->loop, UV_RUN_DEFAULT);
  uv_loop_close(&e->loop);
  uv_mutex_destroy(&e->mu);
  free(e);
  return NULL;
}

int osb_engine_post(osb_engine *e, osb_job_fn fn, void *arg) {
  job *j = calloc(1, sizeof *j);
  if (!j) return -1;
  j->fn = fn;
  j->arg = arg;
  uv_mutex_lock(&e->mu);
  if (e->stopping) {
    uv_mutex_unlock(&e->mu);
    free(j);
    return -1;
  }
  if (e->qtail) e->qtail->next = j;
  else e->qhead = j;
  e->qtail = j;
  uv_mutex_unlock(&e->mu);
  uv_async_send(&e->wake);
  return 0;
}

void osb_engine_stop(osb_engine *e) {
  if (!e) return;
  uv_mutex_lock(&e->mu);
  e->stopping = 1;
  uv_mutex_unlock(&e->mu);
  uv_async_send(&e->wake);
  uv_thread_join(&e->thread);
  uv_mutex_destroy(&e->mu);
  free(e);
}
