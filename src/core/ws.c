/* WebSocket client on its own libwebsockets thread (see ws.h). */
#include "ws.h"
#include "buf.h"
#include "tls_ca.h"

#include <libwebsockets.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define MAX_MESSAGE (64u * 1024u * 1024u)
#define MAX_CONNECTING 32 /* handshakes in flight at once; the rest wait (a burst must not overflow a backlog) */

typedef struct out_msg {
  struct out_msg *next;
  int binary;
  size_t n;
  size_t sent; /* lws thread: payload bytes written so far (a big binary message goes in fragments) */
  size_t cap;  /* payload bytes it has room for */
  unsigned char data[]; /* LWS_PRE headroom + n bytes */
} out_msg;

enum { C_PENDING = 0, C_CONNECTING, C_OPEN, C_GONE };

struct osb_ws_conn {
  osb_ws *w;
  int refs;                /* guarded by w->mu: the caller's + the lws side's */
  osb_ws_callbacks cb;     /* guarded by w->mu */
  void *ud;
  int detached;            /* osb_ws_close was called: no more callbacks, close soon */
  int notified;            /* on_close delivered (or detached) */
  int state;               /* guarded by w->mu */
  out_msg *qhead, *qtail;  /* guarded by w->mu */
  out_msg *cur;            /* lws thread: the message being written in fragments (out of the queue) */
  int queued;              /* in w's work list (guarded by w->mu) */
  int in_slot;             /* lws thread: counted in w->nconnecting */
  int want_paused;         /* guarded by w->mu: osb_ws_pause */
  int is_paused;           /* lws thread: rx flow control applied */
  struct osb_ws_conn *wait_next; /* lws thread: in w's waiting list (holds a reference) */
  int refs_w;              /* holds a reference to w */
  struct osb_ws_conn *work_next;
  struct lws *wsi;         /* lws thread only */
  /* connect parameters (immutable after connect) */
  char *host, *path, *hosthdr;
  char *ca_file;           /* NULL = the context's default (tls_ca.h) */
  int port, ssl;
  char **hdr_names, **hdr_values;
  size_t nh;
  /* lws thread only */
  osb_buf rx;
  int rx_binary;
  int peer_code;
  char peer_reason[124];
};

struct osb_ws {
  struct lws_context *ctx;
  uv_thread_t thread;
  uv_mutex_t mu;
  int stop;               /* guarded by mu */
  osb_ws_conn *work;      /* guarded by mu: conns with something to do */
  osb_ws_conn *waiting, *waiting_tail; /* lws thread: conns waiting for a handshake slot */
  int nconnecting;        /* lws thread */
  long nconns;            /* atomic */
  long running;           /* atomic */
  struct ca_vhost *ca_vhosts; /* lws thread: one client vhost per caFile in use */
  int refs;               /* guarded by mu: the owner's (until stop) + one per connection */
  /* guarded by mu: big messages' buffers kept for the next ones (fresh pages of a multi-MiB buffer cost a page fault
   * per 4 KiB, more than filling them), at most SPARE_MAX bytes each, freed with w */
  struct out_msg *spare[2];
};
#define SPARE_MIN (256u * 1024u)
#define SPARE_MAX (8u * 1024u * 1024u)

/* lws verifies a server with its vhost's CA store: connections with their own caFile use a vhost made for that
 * file on first use (kept until the context goes). */
typedef struct ca_vhost {
  struct ca_vhost *next;
  struct lws_vhost *vh;
  char path[];
} ca_vhost;

/* Drops a reference to w (mu not held); frees it with the last one. */
static void ws_unref(osb_ws *w) {
  uv_mutex_lock(&w->mu);
  int last = --w->refs == 0;
  uv_mutex_unlock(&w->mu);
  if (last) {
    for (size_t i = 0; i < sizeof w->spare / sizeof *w->spare; i++) free(w->spare[i]);
    uv_mutex_destroy(&w->mu);
    free(w);
  }
}

/* A written message's buffer: kept as a spare when it is big (and there is room), else freed. */
static void msg_done(osb_ws *w, out_msg *m) {
  if (m->cap >= SPARE_MIN && m->cap <= SPARE_MAX) {
    uv_mutex_lock(&w->mu);
    for (size_t i = 0; m && i < sizeof w->spare / sizeof *w->spare; i++) {
      if (!w->spare[i]) {
        w->spare[i] = m;
        m = NULL;
      }
    }
    uv_mutex_unlock(&w->mu);
  }
  free(m);
}

static void conn_free(osb_ws_conn *c) {
  osb_ws *w = c->refs_w ? c->w : NULL;
  free(c->cur);
  out_msg *m = c->qhead;
  while (m) {
    out_msg *n = m->next;
    free(m);
    m = n;
  }
  for (size_t i = 0; i < c->nh; i++) {
    free(c->hdr_names[i]);
    free(c->hdr_values[i]);
  }
  free(c->hdr_names);
  free(c->hdr_values);
  free(c->host);
  free(c->path);
  free(c->hosthdr);
  free(c->ca_file);
  osb_buf_free(&c->rx);
  free(c);
  if (w) ws_unref(w);
}

/* Drops one reference; w->mu must be held. Returns 1 when the caller must free c (after unlocking). */
static int unref_locked(osb_ws_conn *c) { return --c->refs == 0; }

/* Adds c to the work list and wakes the lws thread; w->mu must be held. */
static void schedule_locked(osb_ws_conn *c) {
  if (c->queued || c->w->stop) return;
  c->queued = 1;
  c->refs++;
  c->work_next = c->w->work;
  c->w->work = c;
  lws_cancel_service(c->w->ctx);
}

/* A handshake ended (established or failed): hand its slot to the next waiting connection. lws thread. */
static void release_slot(osb_ws_conn *c) {
  osb_ws *w = c->w;
  if (!c->in_slot) return;
  c->in_slot = 0;
  w->nconnecting--;
  osb_ws_conn *n = w->waiting;
  if (!n) return;
  w->waiting = n->wait_next;
  if (!w->waiting) w->waiting_tail = NULL;
  n->wait_next = NULL;
  uv_mutex_lock(&w->mu);
  schedule_locked(n); /* takes its own work reference */
  int f = unref_locked(n); /* the waiting-list reference */
  uv_mutex_unlock(&w->mu);
  if (f) conn_free(n);
}

/* The lws side is done with c: the wsi is gone or never existed. Reports on_close once. */
static void gone(osb_ws_conn *c, const char *reason, int http_status) {
  osb_ws *w = c->w;
  release_slot(c);
  uv_mutex_lock(&w->mu);
  c->state = C_GONE;
  c->wsi = NULL;
  if (!c->notified && !c->detached && !w->stop && c->cb.on_close) {
    c->notified = 1;
    c->cb.on_close(c->ud, c->peer_code, c->peer_code ? c->peer_reason : (reason ? reason : "connection closed"),
                   http_status);
  }
  c->notified = 1;
  int f = unref_locked(c);
  uv_mutex_unlock(&w->mu);
  __atomic_sub_fetch(&w->nconns, 1, __ATOMIC_RELAXED);
  if (f) conn_free(c);
}

static struct lws_vhost *vhost_for_ca(osb_ws *w, const char *path);

static void start_connect(osb_ws_conn *c) {
  osb_ws *w = c->w;
  struct lws_client_connect_info ci;
  memset(&ci, 0, sizeof ci);
  ci.context = w->ctx;
  if (c->ca_file && c->ssl && !(ci.vhost = vhost_for_ca(w, c->ca_file))) {
    uv_mutex_lock(&w->mu);
    c->state = C_CONNECTING;
    uv_mutex_unlock(&w->mu);
    gone(c, "cannot load the certificates of caFile", 0);
    return;
  }
  ci.address = c->host;
  ci.port = c->port;
  ci.ssl_connection = c->ssl ? LCCSCF_USE_SSL : 0;
  ci.path = c->path;
  ci.host = c->hosthdr;
  ci.origin = c->hosthdr;
  ci.ietf_version_or_minus_one = -1;
  ci.local_protocol_name = "osb-ws";
  ci.opaque_user_data = c;
  ci.pwsi = &c->wsi;
  uv_mutex_lock(&w->mu);
  c->state = C_CONNECTING;
  uv_mutex_unlock(&w->mu);
  if (!lws_client_connect_via_info(&ci)) {
    /* lws may already have reported CONNECTION_ERROR (and cleared pwsi); gone() is idempotent for on_close,
     * but the lws-side reference must be dropped once: only when no wsi callback did it. */
    if (c->state != C_GONE) gone(c, "cannot start the WebSocket connection", 0);
  }
}

/* Takes connections off the work list one at a time, under mu: once c->queued is 0 another thread may schedule c
 * again and rewrite c->work_next, so the list is never walked outside the lock. */
static void drain_work(osb_ws *w) {
  for (;;) {
    uv_mutex_lock(&w->mu);
    osb_ws_conn *c = w->work;
    if (!c) {
      uv_mutex_unlock(&w->mu);
      return;
    }
    w->work = c->work_next;
    c->work_next = NULL;
    c->queued = 0;
    int state = c->state;
    uv_mutex_unlock(&w->mu);
    if (state == C_PENDING) {
      if (c->detached) {
        gone(c, "closed before connecting", 0);
      } else if (w->nconnecting >= MAX_CONNECTING) {
        uv_mutex_lock(&w->mu);
        c->refs++; /* the waiting list's */
        uv_mutex_unlock(&w->mu);
        c->wait_next = NULL;
        if (w->waiting_tail) w->waiting_tail->wait_next = c;
        else w->waiting = c;
        w->waiting_tail = c;
      } else {
        w->nconnecting++;
        c->in_slot = 1;
        start_connect(c);
      }
    } else if (state == C_OPEN && c->wsi) {
      uv_mutex_lock(&w->mu);
      int want = c->want_paused;
      uv_mutex_unlock(&w->mu);
      if (want != c->is_paused) {
        c->is_paused = want;
        lws_rx_flow_control(c->wsi, !want);
      }
      lws_callback_on_writable(c->wsi);
    }
    uv_mutex_lock(&w->mu);
    int f = unref_locked(c); /* the work-list reference */
    uv_mutex_unlock(&w->mu);
    if (f) conn_free(c);
  }
}

static int deliver(osb_ws_conn *c, struct lws *wsi, const void *in, size_t len) {
  if (c->rx.len == 0 && lws_is_first_fragment(wsi)) c->rx_binary = lws_frame_is_binary(wsi);
  if (c->rx.len + len > MAX_MESSAGE) {
    lws_close_reason(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, (unsigned char *)"message too large", 17);
    snprintf(c->peer_reason, sizeof c->peer_reason, "WebSocket message larger than %u bytes", MAX_MESSAGE);
    c->peer_code = 1009;
    return -1;
  }
  if (osb_buf_append(&c->rx, in, len) != 0) return -1;
  if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) != 0) return 0;
  uv_mutex_lock(&c->w->mu);
  if (!c->detached && !c->w->stop && c->cb.on_message) c->cb.on_message(c->ud, c->rx_binary, c->rx.data ? c->rx.data : "", c->rx.len);
  uv_mutex_unlock(&c->w->mu);
  osb_buf_reset(&c->rx);
  if (c->rx.cap > 1024 * 1024) osb_buf_free(&c->rx); /* don't keep a huge buffer around */
  return 0;
}

/* A binary message bigger than this goes as fragments of this size, one per writable callback: what the socket does
 * not take at once libwebsockets copies into a buffer of its own, a copy (and fresh pages) of most of a 4 MiB stdin
 * frame when written whole. Each fragment's header goes into the LWS_PRE bytes before it, which belong to the
 * previous fragment, already written or copied by then. */
#define WRITE_FRAGMENT (256u * 1024u)

static int write_one(osb_ws_conn *c, struct lws *wsi) {
  osb_ws *w = c->w;
  out_msg *m = c->cur;
  uv_mutex_lock(&w->mu);
  if (!m && (m = c->qhead) != NULL) {
    c->qhead = m->next;
    if (!c->qhead) c->qtail = NULL;
    m->sent = 0;
  }
  int queued = c->qhead != NULL;
  int closing = c->detached;
  uv_mutex_unlock(&w->mu);
  if (m) {
    size_t left = m->n - m->sent, k = left;
    int proto = m->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT;
    if (m->binary && left > WRITE_FRAGMENT) k = WRITE_FRAGMENT;
    if (m->sent) proto = LWS_WRITE_CONTINUATION;
    if (k < left) proto |= LWS_WRITE_NO_FIN;
    int rc = lws_write(wsi, m->data + LWS_PRE + m->sent, k, (enum lws_write_protocol)proto);
    m->sent += k;
    c->cur = rc >= 0 && m->sent < m->n ? m : NULL;
    if (!c->cur) msg_done(w, m);
    if (rc < 0) return -1;
  }
  if (c->cur || queued) { /* a message queued later asks for a writable callback itself (osb_ws_send_buf) */
    lws_callback_on_writable(wsi);
    return 0;
  }
  if (closing) {
    lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, (unsigned char *)"", 0);
    return -1;
  }
  return 0;
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
  (void)user;
  osb_ws_conn *c = wsi ? lws_get_opaque_user_data(wsi) : NULL;
  switch (reason) {
  case LWS_CALLBACK_EVENT_WAIT_CANCELLED: {
    struct lws_context *ctx = lws_get_context(wsi);
    osb_ws *w = ctx ? lws_context_user(ctx) : NULL;
    if (w) drain_work(w);
    return 0;
  }
  case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
    if (!c) return 0;
    unsigned char **p = (unsigned char **)in, *end = *p + len;
    for (size_t i = 0; i < c->nh; i++) {
      if (lws_add_http_header_by_name(wsi, (const unsigned char *)c->hdr_names[i], (const unsigned char *)c->hdr_values[i],
                                      (int)strlen(c->hdr_values[i]), p, end))
        return -1;
    }
    return 0;
  }
  case LWS_CALLBACK_CLIENT_ESTABLISHED:
    if (!c) return 0;
    release_slot(c);
    uv_mutex_lock(&c->w->mu);
    c->state = C_OPEN;
    if (!c->detached && !c->w->stop && c->cb.on_open) c->cb.on_open(c->ud);
    int pending = c->qhead != NULL || c->detached;
    int want = c->want_paused;
    uv_mutex_unlock(&c->w->mu);
    if (want) {
      c->is_paused = 1;
      lws_rx_flow_control(wsi, 0);
    }
    if (pending) lws_callback_on_writable(wsi);
    return 0;
  case LWS_CALLBACK_CLIENT_RECEIVE:
    return c ? deliver(c, wsi, in, len) : 0;
  case LWS_CALLBACK_CLIENT_WRITEABLE:
    return c ? write_one(c, wsi) : 0;
  case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
    if (c && len >= 2) {
      const unsigned char *b = in;
      c->peer_code = (b[0] << 8) | b[1];
      size_t rl = len - 2 < sizeof c->peer_reason - 1 ? len - 2 : sizeof c->peer_reason - 1;
      memcpy(c->peer_reason, b + 2, rl);
      c->peer_reason[rl] = 0;
    } else if (c) {
      c->peer_code = 1005;
      snprintf(c->peer_reason, sizeof c->peer_reason, "closed without a status");
    }
    return 0;
  case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
    if (!c) return 0;
    int status = (int)lws_http_client_http_response(wsi);
    char msg[160];
    snprintf(msg, sizeof msg, "%s%.*s", status ? "WebSocket upgrade refused: " : "WebSocket connection failed: ",
             in ? (int)len : 0, in ? (const char *)in : "");
    if (!in || !len) snprintf(msg, sizeof msg, status ? "WebSocket upgrade refused" : "WebSocket connection failed");
    /* lws follows with WSI_DESTROY for this wsi when it was created; unbind first so that gone() runs once. */
    lws_set_opaque_user_data(wsi, NULL);
    gone(c, msg, status);
    return 0;
  }
  case LWS_CALLBACK_CLIENT_CLOSED:
    if (!c) return 0;
    lws_set_opaque_user_data(wsi, NULL);
    gone(c, "connection closed", 0);
    return 0;
  case LWS_CALLBACK_WSI_DESTROY:
    if (!c) return 0;
    lws_set_opaque_user_data(wsi, NULL);
    gone(c, "connection closed", 0);
    return 0;
  default:
    return 0;
  }
}

static const struct lws_protocols protocols[] = {
  {"osb-ws", callback, 0, 65536, 0, NULL, 0},
  {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* The client vhost that verifies servers with path's certificates, made on first use. lws thread. */
static struct lws_vhost *vhost_for_ca(osb_ws *w, const char *path) {
  for (ca_vhost *v = w->ca_vhosts; v; v = v->next)
    if (strcmp(v->path, path) == 0) return v->vh;
  size_t n = strlen(path) + 1;
  ca_vhost *v = malloc(sizeof *v + n);
  if (!v) return NULL;
  memcpy(v->path, path, n);
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.protocols = protocols;
  info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
  info.vhost_name = v->path;
  info.client_ssl_ca_filepath = v->path;
  info.gid = -1;
  info.uid = -1;
  v->vh = lws_create_vhost(w->ctx, &info);
  if (!v->vh) {
    free(v);
    return NULL;
  }
  v->next = w->ca_vhosts;
  w->ca_vhosts = v;
  return v->vh;
}

static void worker(void *arg) {
  osb_ws *w = arg;
  for (;;) {
    uv_mutex_lock(&w->mu);
    int stop = w->stop;
    uv_mutex_unlock(&w->mu);
    if (stop) break;
    if (lws_service(w->ctx, 0) < 0) break;
  }
}

static uv_once_t g_log_once = UV_ONCE_INIT;
static void quiet_logs(void) { lws_set_log_level(LLL_ERR, NULL); }

osb_ws *osb_ws_start(char *err, size_t errlen) {
  uv_once(&g_log_once, quiet_logs);
  osb_ws *w = calloc(1, sizeof *w);
  if (!w) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  uv_mutex_init(&w->mu);
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.port = CONTEXT_PORT_NO_LISTEN;
  info.protocols = protocols;
  info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
  /* without a file lws' OpenSSL uses its default paths, which honour SSL_CERT_DIR */
  info.client_ssl_ca_filepath = osb_tls_default_ca()->file;
  info.user = w;
  info.gid = -1;
  info.uid = -1;
  w->ctx = lws_create_context(&info);
  if (!w->ctx) {
    snprintf(err, errlen, "lws_create_context failed");
    uv_mutex_destroy(&w->mu);
    free(w);
    return NULL;
  }
  int rc = uv_thread_create(&w->thread, worker, w);
  if (rc != 0) {
    snprintf(err, errlen, "uv_thread_create: %s", uv_strerror(rc));
    lws_context_destroy(w->ctx);
    uv_mutex_destroy(&w->mu);
    free(w);
    return NULL;
  }
  __atomic_store_n(&w->running, 1, __ATOMIC_RELAXED);
  w->refs = 1;
  return w;
}

void osb_ws_stop(osb_ws *w) {
  if (!w) return;
  uv_mutex_lock(&w->mu);
  w->stop = 1;
  osb_ws_conn *list = w->work;
  w->work = NULL;
  uv_mutex_unlock(&w->mu);
  lws_cancel_service(w->ctx);
  uv_thread_join(&w->thread);
  __atomic_store_n(&w->running, 0, __ATOMIC_RELAXED);
  /* Work never picked up: connections that never started give up their lws-side reference here. */
  while (list) {
    osb_ws_conn *c = list;
    list = c->work_next;
    c->queued = 0;
    if (c->state == C_PENDING) gone(c, "shutdown", 0);
    uv_mutex_lock(&w->mu);
    int f = unref_locked(c);
    uv_mutex_unlock(&w->mu);
    if (f) conn_free(c);
  }
  while (w->waiting) { /* never got a handshake slot */
    osb_ws_conn *c = w->waiting;
    w->waiting = c->wait_next;
    if (c->state == C_PENDING) gone(c, "shutdown", 0);
    uv_mutex_lock(&w->mu);
    int f = unref_locked(c);
    uv_mutex_unlock(&w->mu);
    if (f) conn_free(c);
  }
  w->waiting_tail = NULL;
  lws_context_destroy(w->ctx); /* WSI_DESTROY for every live wsi: drops their references without callbacks */
  w->ctx = NULL;
  while (w->ca_vhosts) { /* the vhosts went with the context */
    ca_vhost *v = w->ca_vhosts;
    w->ca_vhosts = v->next;
    free(v);
  }
  ws_unref(w); /* freed now, or when the last connection handle is released */
}

/* Splits ws[s]://host[:port][/path] (http[s] accepted). Returns 0 or -1. */
static int parse_url(osb_ws_conn *c, const char *url, char *err, size_t errlen) {
  const char *p;
  if (!strncmp(url, "ws://", 5)) p = url + 5, c->ssl = 0;
  else if (!strncmp(url, "wss://", 6)) p = url + 6, c->ssl = 1;
  else if (!strncmp(url, "http://", 7)) p = url + 7, c->ssl = 0;
  else if (!strncmp(url, "https://", 8)) p = url + 8, c->ssl = 1;
  else {
    snprintf(err, errlen, "WebSocket URL must start with ws://, wss://, http:// or https://");
    return -1;
  }
  const char *slash = strchr(p, '/');
  size_t hl = slash ? (size_t)(slash - p) : strlen(p);
  if (hl == 0) {
    snprintf(err, errlen, "WebSocket URL has no host");
    return -1;
  }
  char *hostport = strndup(p, hl);
  if (!hostport) return -1;
  c->hosthdr = strdup(hostport);
  char *portp = NULL;
  if (hostport[0] == '[') {
    char *close = strchr(hostport, ']');
    if (!close) {
      free(hostport);
      snprintf(err, errlen, "WebSocket URL has a malformed IPv6 host");
      return -1;
    }
    *close = 0;
    c->host = strdup(hostport + 1);
    if (close[1] == ':') portp = close + 2;
  } else {
    char *colon = strrchr(hostport, ':');
    if (colon) {
      *colon = 0;
      portp = colon + 1;
    }
    c->host = strdup(hostport);
  }
  c->port = c->ssl ? 443 : 80;
  if (portp) {
    char *end;
    long port = strtol(portp, &end, 10);
    if (*portp == 0 || *end || port < 1 || port > 65535) {
      free(hostport);
      snprintf(err, errlen, "WebSocket URL has an invalid port");
      return -1;
    }
    c->port = (int)port;
  }
  free(hostport);
  c->path = strdup(slash ? slash : "/");
  if (!c->host || !c->path || !c->hosthdr) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  return 0;
}

osb_ws_conn *osb_ws_connect(osb_ws *w, const char *url, const char *ca_file, const char *const *header_kv,
                            size_t nh, const osb_ws_callbacks *cb, void *ud, char *err, size_t errlen) {
  osb_ws_conn *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  c->w = w;
  c->cb = *cb;
  c->ud = ud;
  if (!url || parse_url(c, url, err, errlen) != 0) {
    if (!url) snprintf(err, errlen, "WebSocket URL missing");
    conn_free(c);
    return NULL;
  }
  if (ca_file && !(c->ca_file = strdup(ca_file))) {
    snprintf(err, errlen, "out of memory");
    conn_free(c);
    return NULL;
  }
  if (nh) {
    c->hdr_names = calloc(nh, sizeof(char *));
    c->hdr_values = calloc(nh, sizeof(char *));
    if (!c->hdr_names || !c->hdr_values) {
      snprintf(err, errlen, "out of memory");
      conn_free(c);
      return NULL;
    }
    c->nh = nh;
    for (size_t i = 0; i < nh; i++) {
      size_t nl = strlen(header_kv[2 * i]);
      c->hdr_names[i] = malloc(nl + 2);
      c->hdr_values[i] = strdup(header_kv[2 * i + 1]);
      if (!c->hdr_names[i] || !c->hdr_values[i]) {
        snprintf(err, errlen, "out of memory");
        conn_free(c);
        return NULL;
      }
      memcpy(c->hdr_names[i], header_kv[2 * i], nl);
      memcpy(c->hdr_names[i] + nl, ":", 2);
    }
  }
  uv_mutex_lock(&w->mu);
  if (w->stop) {
    uv_mutex_unlock(&w->mu);
    snprintf(err, errlen, "the WebSocket thread is stopping");
    conn_free(c);
    return NULL;
  }
  c->refs = 2; /* caller + lws side */
  c->refs_w = 1;
  w->refs++;
  c->state = C_PENDING;
  __atomic_add_fetch(&w->nconns, 1, __ATOMIC_RELAXED);
  schedule_locked(c);
  uv_mutex_unlock(&w->mu);
  return c;
}

void *osb_ws_buf_alloc(osb_ws_conn *c, size_t n) {
  out_msg *m = NULL;
  if (n >= SPARE_MIN / 2 && n <= SPARE_MAX) { /* the smallest spare that holds n */
    osb_ws *w = c->w;
    size_t best = 0, nspare = sizeof w->spare / sizeof *w->spare;
    uv_mutex_lock(&w->mu);
    for (size_t i = 0; i < nspare; i++) {
      if (w->spare[i] && w->spare[i]->cap >= n && (!m || w->spare[i]->cap < m->cap)) m = w->spare[i], best = i;
    }
    if (m) w->spare[best] = NULL;
    uv_mutex_unlock(&w->mu);
  }
  if (!m) {
    size_t cap = n >= SPARE_MIN / 2 && n < SPARE_MIN ? SPARE_MIN : n; /* a size worth keeping afterwards */
    if (!(m = malloc(sizeof *m + LWS_PRE + cap))) return NULL;
    m->cap = cap;
  }
  return m->data + LWS_PRE;
}

static out_msg *buf_msg(void *payload) { return (out_msg *)((unsigned char *)payload - LWS_PRE - offsetof(out_msg, data)); }

void osb_ws_buf_free(void *payload) {
  if (payload) free(buf_msg(payload));
}

int osb_ws_send(osb_ws_conn *c, int binary, const void *p, size_t n) {
  void *b = osb_ws_buf_alloc(c, n);
  if (!b) return -1;
  if (n) memcpy(b, p, n);
  return osb_ws_send_buf(c, binary, b, n);
}

int osb_ws_send_buf(osb_ws_conn *c, int binary, void *payload, size_t n) {
  out_msg *m = buf_msg(payload);
  m->next = NULL;
  m->binary = binary;
  m->n = n;
  osb_ws *w = c->w;
  uv_mutex_lock(&w->mu);
  if (c->detached || c->state == C_GONE || w->stop) {
    uv_mutex_unlock(&w->mu);
    free(m);
    return -1;
  }
  if (c->qtail) c->qtail->next = m;
  else c->qhead = m;
  c->qtail = m;
  if (c->state == C_OPEN) schedule_locked(c);
  uv_mutex_unlock(&w->mu);
  return 0;
}

void osb_ws_pause(osb_ws_conn *c, int paused) {
  if (!c) return;
  uv_mutex_lock(&c->w->mu);
  c->want_paused = paused != 0;
  if (c->state == C_OPEN) schedule_locked(c);
  uv_mutex_unlock(&c->w->mu);
}

void osb_ws_close(osb_ws_conn *c) {
  if (!c) return;
  osb_ws *w = c->w;
  uv_mutex_lock(&w->mu);
  if (!c->detached) {
    c->detached = 1;
    c->notified = 1;
    if (c->state != C_GONE) schedule_locked(c);
  }
  uv_mutex_unlock(&w->mu);
}

void osb_ws_conn_release(osb_ws_conn *c) {
  if (!c) return;
  osb_ws_close(c);
  uv_mutex_lock(&c->w->mu);
  int f = unref_locked(c);
  uv_mutex_unlock(&c->w->mu);
  if (f) conn_free(c);
}

void osb_ws_get_stats(osb_ws *w, osb_ws_stats *out) {
  out->threads = w ? __atomic_load_n(&w->running, __ATOMIC_RELAXED) : 0;
  out->connections = w ? __atomic_load_n(&w->nconns, __ATOMIC_RELAXED) : 0;
}
