/* HTTP on curl multi + uv_poll/uv_timer on the engine loop (see http.h). */
#define _GNU_SOURCE
#include "http.h"
#include "tls_ca.h"
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/socket.h>
#include <curl/curl.h>

#define DEFAULT_MAX_BODY ((size_t)32 * 1024 * 1024)
#define NONSTREAM_ERROR_BODY ((size_t)1024 * 1024) /* non-2xx body kept for streamed requests */
#define RETRY_BASE_MS 100
#define RETRY_MAX_MS 2000
#define RETRY_MAX_NO_DEADLINE 5

typedef struct sock_ctx {
  uv_poll_t poll;
  curl_socket_t fd;
  osb_http_ctx *c;
  struct sock_ctx *next;
} sock_ctx;

struct osb_http_ctx {
  osb_engine *e;
  CURLM *multi;
  uv_timer_t timer;
  sock_ctx *socks;
  int in_action;          /* >0 while inside curl_multi_socket_action (curl callbacks may run) */
  osb_http_req *deferred; /* requests with a pending add or cancel */
};

struct osb_http_req {
  osb_active active; /* first member */
  osb_engine *e;
  osb_http_ctx *c;
  CURL *easy;
  struct curl_slist *headers;
  char *url, *method, *body, *ca_file;
  size_t body_len;
  int has_body;
  osb_buf resp;
  size_t max_body;
  char errbuf[CURL_ERROR_SIZE];
  char request_id[128];
  char date[64]; /* the Date response header */
  long status;
  osb_http_data_fn on_data;
  osb_http_begin_fn on_begin;
  osb_http_done_fn on_done;
  void *ud;
  uv_timer_t watchdog, retry;
  int open_handles;
  uint64_t deadline, idle_ms, last_activity;
  long timeout_ms;
  int retry_connect, refused_final, attempts;
  int want_pause, paused, add_failed, in_multi, done, stopped, streamed, too_large, cancel_pending, add_pending, on_deferred;
  osb_http_req *next_deferred;
};

static void finish(osb_http_req *r, int error, const char *message);
static void process_deferred(osb_http_ctx *c);
static void check_done(osb_http_ctx *c);

/* ---- sockets and timers (the lab pattern) ---- */

static void on_sock_closed(uv_handle_t *h) { free(h->data); }

static void unlink_sock(osb_http_ctx *c, sock_ctx *s) {
  for (sock_ctx **pp = &c->socks; *pp; pp = &(*pp)->next)
    if (*pp == s) {
      *pp = s->next;
      return;
    }
}

static void close_sock(osb_http_ctx *c, sock_ctx *s) {
  unlink_sock(c, s);
  uv_poll_stop(&s->poll);
  uv_close((uv_handle_t *)&s->poll, on_sock_closed);
}

static void after_action(osb_http_ctx *c) {
  process_deferred(c);
  check_done(c);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  sock_ctx *s = p->data;
  osb_http_ctx *c = s->c;
  int flags = 0, running = 0;
  if (status < 0) flags = CURL_CSELECT_ERR;
  else {
    if (events & UV_READABLE) flags |= CURL_CSELECT_IN;
    if (events & UV_WRITABLE) flags |= CURL_CSELECT_OUT;
  }
  c->in_action++;
  curl_multi_socket_action(c->multi, s->fd, flags, &running);
  c->in_action--;
  after_action(c);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp) {
  (void)easy;
  osb_http_ctx *c = userp;
  sock_ctx *s = socketp;
  if (what == CURL_POLL_REMOVE) {
    if (s) {
      close_sock(c, s);
      curl_multi_assign(c->multi, fd, NULL);
    }
    return 0;
  }
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->fd = fd;
    s->c = c;
    if (uv_poll_init_socket(osb_engine_loop(c->e), &s->poll, fd) != 0) {
      free(s);
      return -1;
    }
    s->poll.data = s;
    s->next = c->socks;
    c->socks = s;
    curl_multi_assign(c->multi, fd, s);
  }
  int ev = 0;
  if (what & CURL_POLL_IN) ev |= UV_READABLE;
  if (what & CURL_POLL_OUT) ev |= UV_WRITABLE;
  uv_poll_start(&s->poll, ev, on_poll);
  return 0;
}

static void on_curl_timeout(uv_timer_t *t) {
  osb_http_ctx *c = t->data;
  int running = 0;
  c->in_action++;
  curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  c->in_action--;
  after_action(c);
}

static int on_curl_timer(CURLM *m, long ms, void *userp) {
  (void)m;
  osb_http_ctx *c = userp;
  if (ms < 0) uv_timer_stop(&c->timer);
  else uv_timer_start(&c->timer, on_curl_timeout, (uint64_t)ms, 0);
  return 0;
}

static curl_socket_t on_open_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *a) {
  (void)purpose;
  osb_http_req *r = ud;
  curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
  if (fd != CURL_SOCKET_BAD) osb_engine_count(r->e, OSB_COUNT_SOCKETS, 1);
  return fd;
}

/* Connections outlive their easy handle (keep-alive cache), so this gets the ctx, not the request. */
static int on_close_socket(void *ud, curl_socket_t fd) {
  osb_http_ctx *c = ud;
  for (sock_ctx *s = c->socks; s; s = s->next)
    if (s->fd == fd) { /* curl normally sends CURL_POLL_REMOVE first; never close a polled fd */
      close_sock(c, s);
      break;
    }
  osb_engine_count(c->e, OSB_COUNT_SOCKETS, -1);
  return close(fd);
}

/* ---- context ---- */

osb_http_ctx *osb_http_ctx_new(osb_engine *e) {
  osb_http_ctx *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->e = e;
  c->multi = curl_multi_init();
  if (!c->multi) {
    free(c);
    return NULL;
  }
  uv_timer_init(osb_engine_loop(e), &c->timer);
  c->timer.data = c;
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
  curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
  curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
  curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, 32L);
  return c;
}

static void on_ctx_timer_closed(uv_handle_t *h) { free(h->data); }

void osb_http_ctx_free(osb_http_ctx *c) {
  if (!c) return;
  curl_multi_cleanup(c->multi); /* closes cached connections (on_close_socket) */
  c->multi = NULL;
  while (c->socks) close_sock(c, c->socks);
  uv_timer_stop(&c->timer);
  uv_close((uv_handle_t *)&c->timer, on_ctx_timer_closed);
}

/* ---- requests ---- */

static size_t on_write(char *p, size_t sz, size_t n, void *ud) {
  osb_http_req *r = ud;
  size_t len = sz * n;
  r->last_activity = uv_now(osb_engine_loop(r->e));
  if (r->stopped || r->done) return 0;
  if (r->want_pause) { /* flow control: curl keeps these bytes and hands them over again after resume */
    if (!r->paused) osb_engine_count(r->e, OSB_COUNT_PAUSED, 1);
    r->paused = 1;
    return CURL_WRITEFUNC_PAUSE;
  }
  long status = 0;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  r->status = status;
  if (r->on_data && status >= 200 && status < 300) {
    if (!r->streamed && r->on_begin) {
      curl_off_t cl = -1;
      if (curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) != CURLE_OK) cl = -1;
      r->on_begin(r->ud, status, (long long)cl);
    }
    r->streamed = 1;
    int rc = r->on_data(r->ud, status, p, len);
    if (rc == 1) {
      r->stopped = 1;
      return 0; /* ends the transfer (CURLE_WRITE_ERROR, reported as stopped) */
    }
    if (rc == 2) r->want_pause = 1; /* applied at the next chunk */
    return len;
  }
  size_t limit = r->on_data ? NONSTREAM_ERROR_BODY : r->max_body;
  if (r->resp.len + len > limit) {
    if (r->on_data) { /* an error body for a streamed request: keep the head only */
      osb_buf_append(&r->resp, p, limit - r->resp.len);
      return len;
    }
    r->too_large = 1;
    return 0;
  }
  if (osb_buf_append(&r->resp, p, len) != 0) return 0;
  return len;
}

/* Copies the value of header line p (len bytes) into out when its name (lowercase, with ':') matches: blanks
 * trimmed, printable ASCII only (nothing from the network is trusted), truncated to cap - 1 bytes. */
static void capture_header(const char *p, size_t len, const char *name, char *out, size_t cap) {
  size_t nl = strlen(name);
  if (len <= nl || strncasecmp(p, name, nl) != 0) return;
  const char *v = p + nl, *end = p + len;
  while (v < end && (*v == ' ' || *v == '\t')) v++;
  while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t')) end--;
  size_t vl = (size_t)(end - v);
  if (vl >= cap) vl = cap - 1;
  size_t j = 0;
  for (size_t i = 0; i < vl; i++)
    if ((unsigned char)v[i] >= 0x20 && (unsigned char)v[i] < 0x7f) out[j++] = v[i];
  out[j] = 0;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  osb_http_req *r = ud;
  size_t len = sz * n;
  r->last_activity = uv_now(osb_engine_loop(r->e));
  if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) r->request_id[0] = r->date[0] = 0; /* a new response (e.g. after 100) */
  capture_header(p, len, "x-request-id:", r->request_id, sizeof r->request_id);
  capture_header(p, len, "date:", r->date, sizeof r->date);
  return len;
}

static void on_req_handle_closed(uv_handle_t *h) {
  osb_http_req *r = h->data;
  if (--r->open_handles > 0) return;
  osb_buf_free(&r->resp);
  free(r);
}

static void arm_watchdog(osb_http_req *r);

static void on_watchdog(uv_timer_t *t) {
  osb_http_req *r = t->data;
  if (r->done) return;
  if (r->add_failed) {
    finish(r, OSB_HTTP_ETRANSPORT, r->errbuf);
    return;
  }
  uint64_t now = osb_engine_now(r->e);
  char msg[128];
  if (r->deadline && now >= r->deadline) {
    snprintf(msg, sizeof msg, "request timed out after %ld ms", r->timeout_ms);
    finish(r, OSB_HTTP_ETIMEOUT, msg);
    return;
  }
  if (r->idle_ms && r->in_multi && !r->paused && !r->want_pause && now - r->last_activity >= r->idle_ms) {
    snprintf(msg, sizeof msg, "no data received for %llu ms", (unsigned long long)r->idle_ms);
    finish(r, OSB_HTTP_EIDLE, msg);
    return;
  }
  arm_watchdog(r);
}

static void arm_watchdog(osb_http_req *r) {
  uint64_t now = osb_engine_now(r->e), next = 0;
  if (r->deadline) next = r->deadline;
  if (r->idle_ms && !r->paused && !r->want_pause) { /* no idle watchdog while paused by flow control */
    uint64_t idle_at = (r->in_multi ? r->last_activity : now) + r->idle_ms;
    if (!next || idle_at < next) next = idle_at;
  }
  if (!next) return;
  uv_timer_start(&r->watchdog, on_watchdog, next > now ? next - now : 0, 0);
}

static void send_attempt(osb_http_req *r) {
  osb_http_ctx *c = r->c;
  if (c->in_action) { /* curl forbids multi calls from inside its callbacks */
    r->add_pending = 1;
    if (!r->on_deferred) {
      r->on_deferred = 1;
      r->next_deferred = c->deferred;
      c->deferred = r;
    }
    return;
  }
  osb_buf_reset(&r->resp);
  r->status = 0;
  r->errbuf[0] = 0;
  r->request_id[0] = 0;
  r->date[0] = 0;
  r->attempts++;
  r->last_activity = osb_engine_now(r->e);
  CURLMcode mc = curl_multi_add_handle(c->multi, r->easy);
  if (mc != CURLM_OK) { /* reported from the watchdog: on_done never runs inside osb_http_start */
    snprintf(r->errbuf, sizeof r->errbuf, "%s", curl_multi_strerror(mc));
    r->add_failed = 1;
    uv_timer_start(&r->watchdog, on_watchdog, 0, 0);
    return;
  }
  r->in_multi = 1;
  arm_watchdog(r);
}

static void on_retry(uv_timer_t *t) {
  osb_http_req *r = t->data;
  if (!r->done) send_attempt(r);
}

static int is_connect_failure(CURLcode rc, long status) {
  if (status != 0) return 0; /* a response started: never retry */
  return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_GOT_NOTHING ||
         rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR;
}

static void transfer_done(osb_http_req *r, CURLcode rc) {
  long status = 0;
  curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
  r->status = status;
  curl_multi_remove_handle(r->c->multi, r->easy);
  r->in_multi = 0;
  if (r->stopped || rc == CURLE_OK) {
    finish(r, OSB_HTTP_OK, "");
    return;
  }
  if (r->too_large) {
    finish(r, OSB_HTTP_ETOOLARGE, "response body too large");
    return;
  }
  const char *msg = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    finish(r, OSB_HTTP_ETIMEOUT, msg);
    return;
  }
  if (r->retry_connect && is_connect_failure(rc, status) && !(r->refused_final && rc == CURLE_COULDNT_CONNECT)) {
    uint64_t backoff = RETRY_BASE_MS << (r->attempts - 1 < 5 ? r->attempts - 1 : 5);
    if (backoff > RETRY_MAX_MS) backoff = RETRY_MAX_MS;
    uint64_t now = osb_engine_now(r->e);
    int fits = r->deadline ? now + backoff < r->deadline : r->attempts < RETRY_MAX_NO_DEADLINE;
    if (fits) {
      uv_timer_start(&r->retry, on_retry, backoff, 0);
      arm_watchdog(r);
      return;
    }
  }
  finish(r, OSB_HTTP_ETRANSPORT, msg);
}

static void check_done(osb_http_ctx *c) {
  CURLMsg *m;
  int left;
  while ((m = curl_multi_info_read(c->multi, &left))) {
    if (m->msg != CURLMSG_DONE) continue;
    CURLcode rc = m->data.result; /* m is invalid after remove */
    osb_http_req *r = NULL;
    curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
    transfer_done(r, rc);
  }
}

static void process_deferred(osb_http_ctx *c) {
  while (c->deferred) {
    osb_http_req *r = c->deferred;
    c->deferred = r->next_deferred;
    r->on_deferred = 0;
    if (r->done) continue;
    if (r->cancel_pending) finish(r, OSB_HTTP_ECANCELLED, "request cancelled");
    else if (r->add_pending) {
      r->add_pending = 0;
      send_attempt(r);
    }
  }
}

static void finish(osb_http_req *r, int error, const char *message) {
  if (r->done) return;
  r->done = 1;
  osb_http_ctx *c = r->c;
  if (r->in_multi) {
    curl_multi_remove_handle(c->multi, r->easy); /* closes the connection of an unfinished transfer */
    r->in_multi = 0;
  }
  if (r->on_deferred) { /* unlink from the deferred list */
    for (osb_http_req **pp = &c->deferred; *pp; pp = &(*pp)->next_deferred)
      if (*pp == r) {
        *pp = r->next_deferred;
        break;
      }
    r->on_deferred = 0;
  }
  uv_timer_stop(&r->watchdog);
  uv_timer_stop(&r->retry);
  if (r->paused) osb_engine_count(r->e, OSB_COUNT_PAUSED, -1);
  r->paused = 0;
  osb_engine_remove_active(r->e, &r->active);
  osb_engine_count(r->e, OSB_COUNT_REQUESTS, -1);
  osb_http_result res;
  memset(&res, 0, sizeof res);
  res.error = error;
  res.status = r->status;
  res.body = r->resp.data ? r->resp.data : "";
  res.body_len = r->resp.len;
  res.request_id = r->request_id[0] ? r->request_id : NULL;
  res.date = r->date[0] ? r->date : NULL;
  res.message = message ? message : "";
  res.attempts = r->attempts;
  res.stopped = r->stopped;
  res.streamed = r->streamed;
  r->on_done(r->ud, &res);
  curl_easy_cleanup(r->easy);
  r->easy = NULL;
  curl_slist_free_all(r->headers);
  free(r->url);
  free(r->method);
  free(r->body);
  free(r->ca_file);
  r->headers = NULL;
  r->url = r->method = r->body = r->ca_file = NULL;
  uv_close((uv_handle_t *)&r->watchdog, on_req_handle_closed);
  uv_close((uv_handle_t *)&r->retry, on_req_handle_closed);
}

static void abort_req(osb_active *a) { finish((osb_http_req *)a, OSB_HTTP_ESHUTDOWN, "engine shutting down"); }

void osb_http_cancel(osb_http_req *r) {
  if (!r || r->done) return;
  if (r->c->in_action) {
    r->cancel_pending = 1;
    if (!r->on_deferred) {
      r->on_deferred = 1;
      r->next_deferred = r->c->deferred;
      r->c->deferred = r;
    }
    return;
  }
  finish(r, OSB_HTTP_ECANCELLED, "request cancelled");
}

void osb_http_resume(osb_http_req *r) {
  if (!r || r->done || (!r->want_pause && !r->paused)) return;
  osb_http_ctx *c = r->c;
  int was_paused = r->paused;
  r->want_pause = 0;
  r->paused = 0;
  r->last_activity = osb_engine_now(r->e);
  if (was_paused) osb_engine_count(r->e, OSB_COUNT_PAUSED, -1);
  arm_watchdog(r); /* the idle watchdog was off while a pause was requested or in force */
  if (!was_paused || !r->in_multi) return;
  c->in_action++; /* curl hands the held bytes to on_write from inside curl_easy_pause */
  CURLcode rc = curl_easy_pause(r->easy, CURLPAUSE_CONT);
  c->in_action--;
  /* A write error while flushing the held bytes comes back here (e.g. on_data ended the transfer at a final
   * event): finish now rather than waiting for the socket to tell the multi. */
  if (rc != CURLE_OK && !r->done) {
    if (r->stopped) finish(r, OSB_HTTP_OK, "");
    else finish(r, OSB_HTTP_ETRANSPORT, r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc));
  }
  after_action(c);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

osb_http_req *osb_http_start(osb_engine *e, const osb_http_opts *o) {
  osb_http_req *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->e = e;
  r->c = osb_engine_http(e);
  r->url = dup_or_null(o->url);
  r->method = dup_or_null(o->method ? o->method : "GET");
  r->has_body = o->body != NULL;
  if (r->has_body && o->take_body) {
    r->body = (char *)o->body; /* the caller's allocation, taken (no copy of a large upload) */
    r->body_len = o->body_len;
  } else if (r->has_body) {
    r->body = malloc(o->body_len + 1);
    if (r->body) {
      memcpy(r->body, o->body, o->body_len);
      r->body[o->body_len] = 0;
    }
    r->body_len = o->body_len;
  }
  r->ca_file = dup_or_null(o->ca_file);
  r->easy = curl_easy_init();
  int ok = r->url && r->method && r->easy && (!r->has_body || r->body) && (!o->ca_file || r->ca_file);
  for (size_t i = 0; ok && i < o->nheaders; i++) {
    struct curl_slist *n = curl_slist_append(r->headers, o->headers[i]);
    if (!n) ok = 0;
    else r->headers = n;
  }
  struct curl_slist *n = ok ? curl_slist_append(r->headers, "Expect:") : NULL;
  if (!n) ok = 0;
  else r->headers = n;
  if (!ok) {
    if (r->easy) curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    free(r->url);
    free(r->method);
    if (!o->take_body) free(r->body); /* a taken body stays the caller's when the request cannot start */
    free(r->ca_file);
    free(r);
    return NULL;
  }
  r->on_data = o->on_data;
  r->on_begin = o->on_begin;
  r->on_done = o->on_done;
  r->ud = o->ud;
  r->max_body = o->max_body ? o->max_body : DEFAULT_MAX_BODY;
  r->timeout_ms = o->timeout_ms;
  r->retry_connect = o->retry_connect;
  r->refused_final = o->refused_final;
  r->idle_ms = o->idle_timeout_ms > 0 ? (uint64_t)o->idle_timeout_ms : 0;
  r->deadline = o->timeout_ms > 0 ? osb_engine_now(e) + (uint64_t)o->timeout_ms : 0;

  CURL *h = r->easy;
  curl_easy_setopt(h, CURLOPT_URL, r->url);
  curl_easy_setopt(h, CURLOPT_PRIVATE, r);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
  curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, r);
  curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, r->c);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->headers);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (r->ca_file) {
    curl_easy_setopt(h, CURLOPT_CAINFO, r->ca_file);
  } else {
    const osb_tls_ca *ca = osb_tls_default_ca();
    if (ca->file) curl_easy_setopt(h, CURLOPT_CAINFO, ca->file);
    if (ca->dir) curl_easy_setopt(h, CURLOPT_CAPATH, ca->dir);
  }
  if (r->has_body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
  }
  if (strcmp(r->method, "GET") == 0) curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  else if (strcmp(r->method, "POST") == 0) {
    if (!r->has_body) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
  } else curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);

  uv_timer_init(osb_engine_loop(e), &r->watchdog);
  uv_timer_init(osb_engine_loop(e), &r->retry);
  r->watchdog.data = r->retry.data = r;
  r->open_handles = 2;
  r->active.abort = abort_req;
  osb_engine_add_active(e, &r->active);
  osb_engine_count(e, OSB_COUNT_REQUESTS, 1);
  osb_engine_count(e, OSB_COUNT_STARTED, 1);
  send_attempt(r);
  return r;
}
