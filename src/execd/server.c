/* The C execd's HTTP/1.1 server (see server.h, xd.h). */
#include "server.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"

/* what a request line/header/chunk-size line may not exceed on its own, and a chunk trailer section in all */
#define LINE_LIMIT 4096u
/* read no further while this much of later (pipelined) requests waits behind the one being answered */
#define PIPELINE_HOLD (256u * 1024u)

static const char UNAUTHORIZED[] = "{\"error\":\"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN\"}";
static const char TOO_LARGE[] = "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"request body larger than 67108864 bytes\"}";
/* Go's net/http answer to a request it cannot parse (http.js answerBadRequest); the connection is closed after it */
static const char GO_BAD_REQUEST[] =
    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request";
/* Node's http server answer to a head over its limit (what execd answered before the C server) */
/* Go's answer to an HTTP/1.1 request without a Host header */
static const char GO_NO_HOST[] = "HTTP/1.1 400 Bad Request: missing required Host header\r\nContent-Type: text/plain; "
                                 "charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: missing required Host header";
static const char HEAD_TOO_LARGE[] = "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n";

typedef struct conn conn;

struct xd_res {
  conn *c;           /* NULL once the connection is gone */
  int streaming;
  int closed;        /* the client went away */
  int close_after;   /* the answer closes the connection */
  int in_gone;       /* its on_close callback is running */
  void (*on_close)(void *);
  void *on_close_arg;
  void (*on_drain)(void *);
  void *on_drain_arg;
  uint64_t body_left; /* xd_body_*: bytes announced and not written yet */
};

enum { ST_HEAD, ST_BODY, ST_ROUTED, ST_CLOSING, ST_RAW };
enum { ACT_ROUTE, ACT_UNAUTHORIZED, ACT_PING, ACT_TOO_LARGE };
enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER };

struct conn {
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  uv_timer_t idle;
  int open_handles;
  xd_server *srv;
  conn *prev, *next;
  int is_unix;
  int closing;
  int eof;
  int reading;
  int in_process;
  size_t pending_writes;
  osb_buf in; /* unconsumed bytes: the current request (unless discarded) and what follows */
  int state;
  /* the current request */
  char *head;   /* copy of request line + headers, tokenised in place */
  size_t head_len; /* raw bytes of the head in `in` (0 once consumed: discarding) */
  char **kv;
  size_t nkv;
  xd_req req;
  char *path, *query;
  int action;
  int chunked;
  int discard;   /* body bytes are consumed, not kept */
  int unbounded; /* discarding without a limit (the 401 / ping answer comes after the body) */
  int too_large;
  uint64_t cl_left;
  int ch_state;
  uint64_t ch_left;
  size_t trailer_bytes;
  size_t pos;    /* parse position in `in` (body) */
  int answered_early; /* the 413 went out while the body is still read (and dropped); the connection closes after it */
  uint64_t body_total;
  osb_buf body;
  xd_res *res;
  int close_pending;   /* close once writes are done */
  int failed;          /* a write could not be queued: closed from the loop, not inside the route's call */
  /* a body read as it arrives (xd_server_streams_body): the route's callbacks, set by xd_body_read */
  int streamed;
  int body_done;   /* the whole streamed body was handed to the route */
  int body_paused; /* the route asked for no more for now (xd_body_pause) */
  const xd_body_callbacks *body_cb;
  void *body_arg;
  /* ST_RAW (xd_upgrade): the route's byte pipe */
  const xd_raw_callbacks *raw_cb; /* NULL once the route closed it or was told it ended */
  void *raw_arg;
  void (*raw_eof)(void *); /* xd_raw_on_eof */
};

struct xd_server {
  xd_server_opts o;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } l;
  int listening;
  int is_unix;
  int closing;
  conn *conns;
  char date[40];
  time_t date_at;
};

typedef struct {
  uv_write_t w;
  conn *c;
  size_t len;
  char data[];
} wreq;

static void conn_close(conn *c);
static void process(conn *c);

/* ---------------------------------------------------------------- small helpers */

static const char *status_text(int s) {
  switch (s) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Request Entity Too Large";
    case 416: return "Requested Range Not Satisfiable";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    default: return "";
  }
}

static const char *http_date(xd_server *s) {
  time_t now = time(NULL);
  if (now != s->date_at) {
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(s->date, sizeof s->date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    s->date_at = now;
  }
  return s->date;
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

static int is_tchar(unsigned char ch) {
  return isalnum(ch) || (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* a comma-separated header value contains `token` (case-insensitive) */
static int has_token(const char *v, const char *token) {
  if (!v) return 0;
  size_t tl = strlen(token);
  const char *p = v;
  while (*p) {
    while (*p == ' ' || *p == '\t' || *p == ',') p++;
    const char *e = p;
    while (*e && *e != ',') e++;
    const char *t = e;
    while (t > p && (t[-1] == ' ' || t[-1] == '\t')) t--;
    if ((size_t)(t - p) == tl && strncasecmp(p, token, tl) == 0) return 1;
    p = e;
  }
  return 0;
}

/* ---------------------------------------------------------------- the request target (http.js parseTarget) */

static int path_keep(unsigned char ch) {
  return isalnum(ch) || (ch && strchr("-._~!$&'()*+,;=:@", ch) != NULL);
}

int xd_parse_target(const char *raw, size_t len, xd_target *t) {
  memset(t, 0, sizeof *t);
  if (len == 0) return t->error = "empty request target", -1;
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)raw[i];
    if (ch < 0x21 || ch > 0x7e) return t->error = "request target with a space, control or non-ASCII byte", -1;
  }
  const char *p = raw, *end = raw + len;
  int slash_prefix = 0;
  size_t skip = 0;
  if (len >= 7 && strncasecmp(p, "http://", 7) == 0) skip = 7;
  else if (len >= 8 && strncasecmp(p, "https://", 8) == 0) skip = 8;
  if (skip) {
    p += skip;
    while (p < end && *p != '/' && *p != '?' && *p != '#') p++;
    if (p == end || *p == '?') slash_prefix = 1;
  }
  if (!slash_prefix && (p == end || *p != '/')) return t->error = "request target must be a path or an absolute http URL", -1;
  if (memchr(p, '#', (size_t)(end - p))) return t->error = "fragment (#) in request target", -1;
  const char *q = memchr(p, '?', (size_t)(end - p));
  const char *pend = q ? q : end;
  osb_buf out = {0};
  if (osb_buf_append(&out, "/", 1) != 0) return -1;
  /* segments of the path after its leading '/' (or of "" when the absolute form had none) */
  const char *seg = slash_prefix ? p : p + 1;
  for (;;) {
    const char *se = seg;
    while (se < pend && *se != '/') se++;
    int last = se >= pend;
    size_t sl = (size_t)(se - seg);
    for (size_t i = 0; i < sl; i++) {
      if (seg[i] == '%' && !(i + 2 < sl && hexval(seg[i + 1]) >= 0 && hexval(seg[i + 2]) >= 0)) {
        osb_buf_free(&out);
        t->malformed = 1;
        return t->error = "invalid URL escape", -1;
      }
    }
    if (sl == 0 && !last) {
      osb_buf_free(&out);
      return t->error = "empty path segment (//) in request target", -1;
    }
    for (size_t i = 0; i < sl; i++) {
      if (seg[i] == '\\' || (seg[i] == '%' && ((seg[i + 1] == '2' && (seg[i + 2] == 'f' || seg[i + 2] == 'F')) ||
                                                (seg[i + 1] == '5' && (seg[i + 2] == 'c' || seg[i + 2] == 'C'))))) {
        osb_buf_free(&out);
        return t->error = "encoded or backslash path separator in request target", -1;
      }
    }
    size_t decoded = 0;
    int dots = 0;
    for (size_t i = 0; i < sl; i++) {
      unsigned char ch = (unsigned char)seg[i];
      if (ch == '%') {
        ch = (unsigned char)(hexval(seg[i + 1]) * 16 + hexval(seg[i + 2]));
        i += 2;
      }
      decoded++;
      if (ch == '.') dots++;
      int rc = path_keep(ch) ? osb_buf_append(&out, &ch, 1) : osb_buf_appendf(&out, "%%%02X", ch);
      if (rc != 0) {
        osb_buf_free(&out);
        return -1;
      }
    }
    if ((decoded == 1 || decoded == 2) && dots == (int)decoded) {
      osb_buf_free(&out);
      return t->error = "dot segment (. or ..) in request path", -1;
    }
    if (last) break;
    if (osb_buf_append(&out, "/", 1) != 0) {
      osb_buf_free(&out);
      return -1;
    }
    seg = se + 1;
  }
  size_t ql = q ? (size_t)(end - q - 1) : 0;
  t->query = malloc(ql + 1);
  if (!t->query) {
    osb_buf_free(&out);
    return -1;
  }
  if (ql) memcpy(t->query, q + 1, ql);
  t->query[ql] = 0;
  t->path = osb_buf_steal(&out, NULL);
  if (!t->path) {
    free(t->query);
    t->query = NULL;
    return -1;
  }
  return 0;
}


int xd_server_streams_body(const char *method, const char *path) {
  return strcmp(method, "POST") == 0 && strcmp(path, "/files/upload") == 0;
}


/* ---------------------------------------------------------------- xd.h: request accessors */

const char *xd_header(const xd_req *r, const char *name) {
  for (size_t i = 0; i < r->nheaders; i++)
    if (strcmp(r->header_kv[2 * i], name) == 0) return r->header_kv[2 * i + 1];
  return NULL;
}

/* decodes s[0..n) ('+' = space, %XX) into a malloc'd string (NUL-terminated; *len its length, which a %00 makes
 * larger than strlen) */
static char *query_decode(const char *s, size_t n, size_t *len) {
  char *out = malloc(n + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '+') out[o++] = ' ';
    else if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
      out[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
      i += 2;
    } else out[o++] = s[i];
  }
  out[o] = 0;
  if (len) *len = o;
  return out;
}

/* The next parameter named `key` at or after *p (URLSearchParams: '&'-separated, a name without '=' has the value ""):
 * its decoded value (malloc'd, *len set), with *p moved past it; NULL when there is none (*p at the end) or on OOM
 * (*p not at the end). */
static char *query_next(const char **p, const char *key, size_t *len) {
  size_t keylen = strlen(key);
  while (**p) {
    const char *s = *p;
    const char *e = strchr(s, '&');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    const char *eq = memchr(s, '=', n);
    size_t kl = eq ? (size_t)(eq - s) : n;
    size_t dl;
    char *k = query_decode(s, kl, &dl);
    if (!k) return NULL;
    int match = dl == keylen && memcmp(k, key, keylen) == 0;
    free(k);
    char *v = match ? (eq ? query_decode(eq + 1, n - kl - 1, len) : query_decode("", 0, len)) : NULL;
    if (match && !v) return NULL;
    *p = e ? e + 1 : s + n;
    if (match) return v;
  }
  return NULL;
}

char *xd_query(const xd_req *r, const char *key) {
  const char *p = r->query;
  return query_next(&p, key, NULL);
}

int xd_query_all(const xd_req *r, const char *key, xd_query_list *out) {
  memset(out, 0, sizeof *out);
  const char *p = r->query;
  size_t cap = 0;
  for (;;) {
    size_t len;
    char *v = query_next(&p, key, &len);
    if (!v) {
      if (!*p) return 0;
      xd_query_list_free(out);
      return -1;
    }
    if (out->n == cap) {
      size_t nc = cap ? cap * 2 : 4;
      char **nv = realloc(out->v, nc * sizeof *nv);
      size_t *nl = nv ? realloc(out->len, nc * sizeof *nl) : NULL;
      if (nv) out->v = nv;
      if (!nl) {
        free(v);
        xd_query_list_free(out);
        return -1;
      }
      out->len = nl;
      cap = nc;
    }
    out->v[out->n] = v;
    out->len[out->n++] = len;
  }
}

void xd_query_list_free(xd_query_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  free(l->len);
  memset(l, 0, sizeof *l);
}

/* ---------------------------------------------------------------- writing */

static void after_write(uv_write_t *w, int status) {
  wreq *r = (wreq *)w;
  conn *c = r->c;
  free(r);
  c->pending_writes--;
  if (status < 0 && !c->closing) {
    conn_close(c);
    return;
  }
  if (c->closing) return;
  if (c->state == ST_RAW) {
    if (c->pending_writes == 0 && c->close_pending) conn_close(c);
    else if (c->raw_cb && c->raw_cb->on_drain && uv_stream_get_write_queue_size(&c->h.stream) == 0) c->raw_cb->on_drain(c->raw_arg);
    return;
  }
  xd_res *res = c->res;
  if (res && res->on_drain && uv_stream_get_write_queue_size(&c->h.stream) == 0) {
    void (*fn)(void *) = res->on_drain;
    res->on_drain = NULL;
    fn(res->on_drain_arg);
  }
  if (c->pending_writes == 0 && c->close_pending) conn_close(c);
}

static void idle_fire(uv_timer_t *t);

/* A write could not be queued (out of memory, a dead socket): the connection is closed on the next loop turn, so a
 * route's on_close callback never runs inside the route's own xd_send or xd_stream_write call. */
static void conn_fail(conn *c) {
  if (c->closing || c->failed) return;
  c->failed = 1;
  if (c->reading) uv_read_stop(&c->h.stream);
  c->reading = 0;
  uv_timer_start(&c->idle, idle_fire, 0, 0);
}

/* queues the parts, copied into one write, on the connection; -1 when it is gone */
static int conn_writev(conn *c, const uv_buf_t *parts, size_t nparts) {
  if (c->closing || c->failed) return -1;
  size_t total = 0;
  for (size_t i = 0; i < nparts; i++) total += parts[i].len;
  wreq *r = malloc(sizeof *r + total);
  if (!r) {
    conn_fail(c);
    return -1;
  }
  r->c = c;
  r->len = 0;
  for (size_t i = 0; i < nparts; i++) {
    if (parts[i].len) memcpy(r->data + r->len, parts[i].base, parts[i].len);
    r->len += parts[i].len;
  }
  uv_buf_t buf = uv_buf_init(r->data, (unsigned)r->len);
  if (uv_write(&r->w, &c->h.stream, &buf, 1, after_write) != 0) {
    free(r);
    conn_fail(c);
    return -1;
  }
  c->pending_writes++;
  return 0;
}

/* queues bytes on the connection; -1 when it is gone */
static int conn_write(conn *c, const void *a, size_t alen, const void *b, size_t blen) {
  uv_buf_t parts[2] = {uv_buf_init((char *)a, (unsigned)alen), uv_buf_init((char *)b, (unsigned)blen)};
  return conn_writev(c, parts, 2);
}

/* ---------------------------------------------------------------- request lifecycle */

static void request_reset(conn *c) {
  free(c->head);
  free(c->kv);
  free(c->path);
  free(c->query);
  osb_buf_free(&c->body);
  c->head = NULL;
  c->kv = NULL;
  c->path = c->query = NULL;
  c->nkv = 0;
  c->head_len = 0;
  memset(&c->req, 0, sizeof c->req);
  c->action = ACT_ROUTE;
  c->chunked = c->discard = c->unbounded = c->too_large = 0;
  c->cl_left = 0;
  c->ch_state = CH_SIZE;
  c->ch_left = 0;
  c->trailer_bytes = 0;
  c->pos = 0;
  c->answered_early = 0;
  c->body_total = 0;
  c->streamed = c->body_done = c->body_paused = 0;
  c->body_cb = NULL;
  c->body_arg = NULL;
  c->state = ST_HEAD;
}

static void idle_fire(uv_timer_t *t) { conn_close(t->data); }

static void idle_arm(conn *c) {
  if (!c->closing && !c->failed) uv_timer_start(&c->idle, idle_fire, XD_IDLE_MS, 0);
}

static void read_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  conn *c = h->data;
  size_t want = c->in.len > 65536 ? c->in.len : 65536;
  if (osb_buf_reserve_exact(&c->in, want) != 0) {
    *buf = uv_buf_init(NULL, 0);
    return;
  }
  *buf = uv_buf_init(c->in.data + c->in.len, (unsigned)(c->in.cap - c->in.len - 1));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void reading(conn *c, int on) {
  if (c->closing || c->failed || c->eof || on == c->reading) return;
  if (on) {
    if (uv_read_start(&c->h.stream, read_alloc, on_read) == 0) c->reading = 1;
  } else {
    uv_read_stop(&c->h.stream);
    c->reading = 0;
  }
}

/* the route finished its answer (or the answer was the server's own): on to the next request */
static void request_done(conn *c) {
  xd_res *res = c->res;
  c->res = NULL;
  int close_after = res ? res->close_after : 0;
  free(res);
  if (c->head_len || c->pos) osb_buf_consume(&c->in, c->discard ? c->pos : c->head_len + c->pos);
  int wants_close = c->req.wants_close;
  request_reset(c);
  if (c->in.len == 0 && c->in.cap > 4u * 65536u) osb_buf_free(&c->in);
  if (close_after || wants_close || c->eof || c->failed) {
    c->state = ST_CLOSING; /* nothing after this answer is read or answered */
    reading(c, 0);
    if (c->pending_writes == 0) conn_close(c);
    else c->close_pending = 1;
    return;
  }
  reading(c, 1);
  if (!c->in_process) process(c);
}

/* the client is gone: tell the route, then close */
static void res_gone(xd_res *res) {
  res->closed = 1;
  res->c = NULL;
  void (*drain)(void *) = res->on_drain;
  res->on_drain = NULL;
  if (drain) drain(res->on_drain_arg);
  void (*fn)(void *) = res->on_close;
  res->on_close = NULL;
  if (fn) {
    res->in_gone = 1;
    fn(res->on_close_arg);
    free(res); /* the route no longer touches it (xd.h) */
  }
  /* without an on_close callback the route still owns it until it finishes it (then freed there) */
}

static void conn_freed(uv_handle_t *h) {
  conn *c = h->data;
  if (--c->open_handles > 0) return;
  request_reset(c);
  osb_buf_free(&c->in);
  free(c);
}

static void conn_close(conn *c) {
  if (c->closing) return;
  c->closing = 1;
  const xd_raw_callbacks *raw = c->raw_cb;
  c->raw_cb = NULL;
  if (raw) raw->on_end(c->raw_arg); /* closing is set: a close or write from the callback does nothing */
  xd_server *s = c->srv;
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  uv_timer_stop(&c->idle);
  xd_res *res = c->res;
  c->res = NULL;
  if (res) res_gone(res);
  uv_close((uv_handle_t *)&c->idle, conn_freed);
  uv_close(&c->h.handle, conn_freed);
}

/* raw answer + close (bad framing, head too large, refusals that end the connection) */
static void answer_raw_close(conn *c, const char *text) {
  c->state = ST_CLOSING;
  reading(c, 0);
  if (conn_write(c, text, strlen(text), NULL, 0) != 0) return;
  c->close_pending = 1;
}

/* ---------------------------------------------------------------- parsing */

/* end of the head (past its blank line) in in[0..len), or 0 when it is not all in */
static size_t head_end(const char *d, size_t len) {
  for (size_t i = 0; i + 1 < len; i++) {
    if (d[i] != '\n') continue;
    if (d[i + 1] == '\n') return i + 2;
    if (d[i + 1] == '\r' && i + 2 < len && d[i + 2] == '\n') return i + 3;
  }
  return 0;
}

/* next line of the head copy at *p (terminated, CR stripped); NULL at the end */
static char *next_line(char **p) {
  char *s = *p;
  char *nl = strchr(s, '\n');
  if (!nl) return NULL;
  *nl = 0;
  if (nl > s && nl[-1] == '\r') nl[-1] = 0;
  *p = nl + 1;
  return s;
}

/* Parses the head of `len` bytes at the start of `in`. Returns 0, 1 a refused target (req.query: its text, NULL for a
 * malformed escape), -1 bad framing (400), -2 OOM, -3 no Host header (HTTP/1.1). */
static int parse_head(conn *c, size_t len) {
  c->head = malloc(len + 1);
  if (!c->head) return -2;
  memcpy(c->head, c->in.data, len);
  c->head[len] = 0;
  if (memchr(c->head, 0, len)) return -1;
  c->head_len = len;
  char *p = c->head;
  char *line = next_line(&p);
  if (!line) return -1;
  /* METHOD SP target SP HTTP/1.x */
  char *sp1 = strchr(line, ' ');
  if (!sp1 || sp1 == line) return -1;
  *sp1 = 0;
  for (char *m = line; *m; m++)
    if (!is_tchar((unsigned char)*m)) return -1;
  char *target = sp1 + 1;
  char *sp2 = strchr(target, ' ');
  if (!sp2 || sp2 == target) return -1;
  *sp2 = 0;
  const char *version = sp2 + 1;
  int http10;
  if (strcmp(version, "HTTP/1.1") == 0) http10 = 0;
  else if (strcmp(version, "HTTP/1.0") == 0) http10 = 1;
  else return -1;
  for (const char *t = target; *t; t++)
    if ((unsigned char)*t < 0x20 || *t == 0x7f) return -1;
  c->req.method = line;
  /* headers: count the lines first */
  size_t n = 0;
  for (char *q = p; *q; q++)
    if (*q == '\n') n++;
  c->kv = malloc((2 * n + 2) * sizeof *c->kv);
  if (!c->kv) return -2;
  c->nkv = 0;
  while ((line = next_line(&p)) != NULL) {
    if (*line == 0) break;
    if (*line == ' ' || *line == '\t') return -1; /* obsolete line folding */
    char *colon = strchr(line, ':');
    if (!colon || colon == line) return -1;
    for (char *k = line; k < colon; k++) {
      if (!is_tchar((unsigned char)*k)) return -1;
      *k = (char)tolower((unsigned char)*k);
    }
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    char *e = v + strlen(v);
    while (e > v && (e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
    for (char *k = v; *k; k++)
      if (((unsigned char)*k < 0x20 && *k != '\t') || *k == 0x7f) return -1;
    c->kv[2 * c->nkv] = line;
    c->kv[2 * c->nkv + 1] = v;
    c->nkv++;
  }
  c->req.header_kv = (const char *const *)c->kv;
  c->req.nheaders = c->nkv;
  /* framing */
  const char *cl = NULL, *te = NULL;
  for (size_t i = 0; i < c->nkv; i++) {
    if (strcmp(c->kv[2 * i], "content-length") == 0) {
      const char *v = c->kv[2 * i + 1];
      if (!*v || strspn(v, "0123456789") != strlen(v) || strlen(v) > 15) return -1;
      if (cl && strcmp(cl, v) != 0) return -1;
      cl = v;
    } else if (strcmp(c->kv[2 * i], "transfer-encoding") == 0) {
      if (te || strcasecmp(c->kv[2 * i + 1], "chunked") != 0) return -1;
      te = c->kv[2 * i + 1];
    }
  }
  if (cl && te) return -1;
  if (!http10 && !xd_header(&c->req, "host")) return -3;
  c->chunked = te != NULL;
  c->cl_left = cl ? strtoull(cl, NULL, 10) : 0;
  const char *connection = xd_header(&c->req, "connection");
  c->req.wants_close = has_token(connection, "close") || (http10 && !has_token(connection, "keep-alive"));
  /* the target, once (an error is kept for the answer) */
  xd_target t;
  int rc = xd_parse_target(target, strlen(target), &t);
  if (rc != 0 && !t.error) return -2;
  if (rc != 0) {
    c->req.path = NULL;
    c->path = NULL;
    /* remembered in `query` as the refusal's text; malformed: the raw Go answer */
    c->req.query = t.malformed ? NULL : t.error;
    return 1;
  }
  c->path = t.path;
  c->query = t.query;
  c->req.path = c->path;
  c->req.query = c->query;
  return 0;
}

static int is_upgrade(const conn *c) {
  return xd_header(&c->req, "upgrade") != NULL && has_token(xd_header(&c->req, "connection"), "upgrade");
}

static int token_ok(const conn *c) {
  const char *want = c->srv->o.token;
  if (!want || !*want) return 1;
  const char *got = xd_header(&c->req, "x-execd-access-token");
  if (!got) return 0;
  size_t wl = strlen(want), gl = strlen(got);
  unsigned char diff = (unsigned char)(wl != gl);
  for (size_t i = 0; i < wl; i++) diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
  return diff == 0;
}

/* A body over XD_BODY_LIMIT: the 413 goes out now (with Connection: close), not after the rest of the body, which is
 * still read and dropped (up to XD_DISCARD_LIMIT more) so that a client still writing it is not reset before it reads
 * the answer; then the connection closes. (Through a relay or proxy that forwards the answer only once it has passed
 * the whole body on, the 413 came after the 100 MB were relayed; a client that waits for the answer before writing
 * more - one with Expect: 100-continue - got it only at the idle timeout.) */
static void too_large_now(conn *c) {
  if (c->answered_early) return;
  c->answered_early = 1;
  char h[256];
  int n = snprintf(h, sizeof h,
                   "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json; charset=utf-8\r\n"
                   "Connection: close\r\nDate: %s\r\nContent-Length: %zu\r\n\r\n",
                   http_date(c->srv), sizeof TOO_LARGE - 1);
  conn_write(c, h, (size_t)n, TOO_LARGE, sizeof TOO_LARGE - 1);
}

/* body bytes [from, from+n) of `in` belong to the request: kept, or counted and dropped */
static int body_take(conn *c, size_t from, size_t n) {
  c->body_total += n;
  if (c->streamed) {
    c->body_cb->on_data(c->body_arg, c->in.data + from, n);
    return 0;
  }
  if (c->discard) return 0;
  if (c->body_total > XD_BODY_LIMIT) {
    c->too_large = 1;
    c->discard = 1;
    osb_buf_free(&c->body);
    if (c->action == ACT_ROUTE) too_large_now(c);
    return 0;
  }
  return osb_buf_append(&c->body, c->in.data + from, n);
}

/* Reads body bytes from `in`. Returns 1 complete, 0 needs more, -1 bad framing, -2 OOM, 2 too large at once, 3 a
 * streamed body's route paused it or finished its answer (nothing more is read now). */
static int read_body(conn *c) {
  size_t base = c->discard || c->streamed ? 0 : c->head_len;
  const xd_res *res = c->res;
  for (;;) {
    if (c->streamed && c->body_paused) return 3;
    size_t avail = c->in.len - base - c->pos;
    const char *d = c->in.data + base + c->pos;
    if (!c->chunked) {
      if (c->cl_left == 0) return 1;
      if (avail == 0) return 0;
      size_t n = avail < c->cl_left ? avail : (size_t)c->cl_left;
      if (body_take(c, base + c->pos, n) != 0) return -2;
      if (c->streamed && (c->res != res || c->closing)) return 3; /* the route answered (the connection closes) */
      if (c->discard || c->streamed) c->pos += n;
      else { /* kept once, in `body`: out of `in` (what follows it moves up) */
        size_t at = base + c->pos;
        memmove(c->in.data + at, c->in.data + at + n, c->in.len - at - n);
        c->in.len -= n;
        c->in.data[c->in.len] = 0;
      }
      c->cl_left -= n;
    } else if (c->ch_state == CH_SIZE || c->ch_state == CH_TRAILER) {
      const char *nl = memchr(d, '\n', avail);
      if (!nl) return avail > LINE_LIMIT ? -1 : 0;
      size_t ll = (size_t)(nl - d) + 1;
      size_t content = ll - 1 - (ll >= 2 && nl[-1] == '\r');
      if (c->ch_state == CH_TRAILER) {
        c->trailer_bytes += ll;
        if (c->trailer_bytes > XD_HEAD_LIMIT) return -1;
        c->pos += ll;
        if (content == 0) return 1;
        continue;
      }
      uint64_t size = 0;
      size_t i = 0;
      for (; i < content && hexval(d[i]) >= 0; i++) {
        if (size >> 56) return -1;
        size = size * 16 + (uint64_t)hexval(d[i]);
      }
      if (i == 0 || (i < content && d[i] != ';' && d[i] != ' ' && d[i] != '\t')) return -1;
      c->pos += ll;
      if (size == 0) c->ch_state = CH_TRAILER;
      else {
        c->ch_state = CH_DATA;
        c->ch_left = size;
      }
    } else if (c->ch_state == CH_DATA) {
      if (avail == 0) return 0;
      size_t n = avail < c->ch_left ? avail : (size_t)c->ch_left;
      if (body_take(c, base + c->pos, n) != 0) return -2;
      if (c->streamed && (c->res != res || c->closing)) return 3;
      c->pos += n;
      c->ch_left -= n;
      if (c->ch_left == 0) c->ch_state = CH_DATA_END;
    } else { /* CH_DATA_END */
      if (avail == 0) return 0;
      if (d[0] == '\n') c->pos += 1;
      else if (d[0] == '\r') {
        if (avail < 2) return 0;
        if (d[1] != '\n') return -1;
        c->pos += 2;
      } else return -1;
      c->ch_state = CH_SIZE;
    }
    if (c->too_large && !c->unbounded && c->body_total > (uint64_t)XD_BODY_LIMIT + XD_DISCARD_LIMIT) return 2;
    if (c->discard || c->streamed) { /* nothing of a discarded or streamed body is kept */
      osb_buf_consume(&c->in, base + c->pos);
      base = 0;
      c->pos = 0;
      c->head_len = 0;
    }
  }
}

static xd_res *new_res(conn *c) {
  xd_res *r = calloc(1, sizeof *r);
  if (r) r->c = c;
  return r;
}

/* GET routes without parameters: with a trailing slash, execd's router (gin's RedirectTrailingSlash) answers 301 to the
 * path without it when no route takes the path as it is */
static const char *const GET_ROUTES[] = {"/ping", "/metrics", "/metrics/watch", "/files/info", "/files/download",
                                         "/files/search", "/directories/list", "/code/contexts"};

/* Go's html.EscapeString (http.Redirect's body) */
static int html_escape(osb_buf *b, const char *s) {
  for (; *s; s++) {
    const char *e = *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '"' ? "&#34;" : *s == '\'' ? "&#39;" : NULL;
    if (e ? osb_buf_append_str(b, e) : osb_buf_append(b, s, 1)) return -1;
  }
  return 0;
}

/* What no route takes: the real execd's router answers. GET <route>/ of a GET_ROUTES route: 301 to the path without the
 * slash (gin: Location keeps the query; http.Redirect's body); anything else (unknown path, wrong method, HEAD /ping):
 * Go's `404 page not found`, text/plain (HEAD: the head alone, with its Content-Length). */
static void not_found(conn *c, xd_res *res) {
  static const char *const h404[] = {"Content-Type: text/plain"};
  const char *m = c->req.method, *p = c->path;
  size_t pl = strlen(p);
  if (strcmp(m, "GET") == 0 && pl > 1 && p[pl - 1] == '/') {
    for (size_t i = 0; i < sizeof GET_ROUTES / sizeof *GET_ROUTES; i++) {
      if (strlen(GET_ROUTES[i]) != pl - 1 || strncmp(GET_ROUTES[i], p, pl - 1) != 0) continue;
      osb_buf loc = {0}, hdr = {0}, body = {0};
      int bad = osb_buf_append(&loc, p, pl - 1) || (*c->query && osb_buf_appendf(&loc, "?%s", c->query));
      bad = bad || osb_buf_appendf(&hdr, "Location: %s", loc.data) || osb_buf_append_str(&body, "<a href=\"") ||
            html_escape(&body, loc.data) || osb_buf_append_str(&body, "\">Moved Permanently</a>.\n\n");
      if (bad) xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      else {
        const char *h[] = {"Content-Type: text/html; charset=utf-8", hdr.data};
        xd_send(res, 301, h, 2, body.data, body.len);
      }
      osb_buf_free(&loc);
      osb_buf_free(&hdr);
      osb_buf_free(&body);
      return;
    }
  }
  if (strcmp(m, "HEAD") == 0) xd_send_head(res, 404, h404, 1, 18);
  else xd_send(res, 404, h404, 1, "404 page not found", 18);
}

/* the request is in (head and body): answer it or route it */
static void dispatch(conn *c) {
  c->state = ST_ROUTED;
  uv_timer_stop(&c->idle);
  c->res = new_res(c);
  if (!c->res) {
    conn_close(c);
    return;
  }
  if (!c->discard) {
    if (!c->body.data && osb_buf_reserve_exact(&c->body, 0) != 0) {
      conn_close(c);
      return;
    }
    c->req.body = c->body.data;
    c->req.body_len = c->body.len;
  } else {
    c->req.body = "";
    c->req.body_len = 0;
  }
  c->req.body_streamed = c->streamed;
  if (c->action == ACT_UNAUTHORIZED) {
    xd_send_json(c->res, 401, UNAUTHORIZED, sizeof UNAUTHORIZED - 1);
    return;
  }
  if (c->too_large) {
    xd_send_json(c->res, 413, TOO_LARGE, sizeof TOO_LARGE - 1);
    return;
  }
  if (c->action == ACT_PING) {
    xd_send_empty(c->res);
    return;
  }
  xd_res *res = c->res;
  xd_server *s = c->srv;
  int taken = 0;
  for (size_t i = 0; i < s->o.nroutes && !taken; i++) {
    const xd_route *r = &s->o.routes[i];
    taken = r->route(r->module, &c->req, res);
  }
  if (!taken) not_found(c, res);
}

/* A streamed body's request: hands what is buffered of its body to the route (xd_body_read), as far as it wants it.
 * Returns 1 when the caller's loop goes on (the body is whole and the route was told), 0 when it stops here. */
static int feed_body(conn *c) {
  if (!c->body_cb || c->body_paused) return 0;
  int rc = read_body(c);
  if (rc == 3) return 0;
  if (rc == 0) {
    if (c->eof) conn_close(c); /* cut short: the route hears of it through its on_close callback */
    return 0;
  }
  if (rc == -2) {
    conn_close(c);
    return 0;
  }
  if (rc == -1) { /* bad framing: the route's answer is not wanted any more (on_close), Go's raw 400 closes */
    xd_res *r = c->res;
    c->res = NULL;
    if (r) res_gone(r);
    answer_raw_close(c, GO_BAD_REQUEST);
    return 0;
  }
  c->body_done = 1;
  c->body_cb->on_end(c->body_arg);
  return 1;
}

/* handles what is buffered, one request at a time */
static void process(conn *c) {
  if (c->in_process) return;
  c->in_process = 1;
  while (!c->closing && !c->failed) {
    if (c->state == ST_ROUTED && c->streamed && !c->body_done) {
      if (feed_body(c)) continue;
      break;
    }
    if (c->state == ST_ROUTED || c->state == ST_CLOSING || c->state == ST_RAW) break;
    if (c->state == ST_HEAD) {
      size_t skip = 0;
      while (skip < c->in.len && (c->in.data[skip] == '\r' || c->in.data[skip] == '\n')) skip++;
      if (skip) osb_buf_consume(&c->in, skip);
      if (c->in.len == 0) {
        if (c->eof) conn_close(c);
        break;
      }
      size_t end = head_end(c->in.data, c->in.len);
      if (end == 0 || end > XD_HEAD_LIMIT) {
        if (end > XD_HEAD_LIMIT || c->in.len > XD_HEAD_LIMIT) answer_raw_close(c, HEAD_TOO_LARGE);
        else if (c->eof) conn_close(c);
        break;
      }
      uv_timer_stop(&c->idle);
      int rc = parse_head(c, end);
      if (rc == -2) {
        conn_close(c);
        break;
      }
      if (rc == -1 || rc == -3) {
        answer_raw_close(c, rc == -3 ? GO_NO_HOST : GO_BAD_REQUEST);
        break;
      }
      /* an upgrade (WebSocket): routed like any request (pty.c's /pty/{id}/ws, proxy.c's); an answer other than a
       * 101 (a refused target, the 401, a route's error, the 404 of a route no module takes) closes the connection */
      if (is_upgrade(c)) c->req.wants_close = 1;
      if (rc == 1) { /* a refused target: answered in order, the connection closed after it */
        if (!c->req.query) {
          answer_raw_close(c, GO_BAD_REQUEST);
          break;
        }
        c->state = ST_ROUTED;
        c->res = new_res(c);
        if (!c->res) {
          conn_close(c);
          break;
        }
        osb_buf b = {0};
        if (osb_buf_appendf(&b, "{\"code\":\"INVALID_REQUEST_PATH\",\"message\":\"%s\"}", c->req.query) != 0) {
          conn_close(c);
          break;
        }
        static const char *const close_hdr[] = {"Content-Type: application/json; charset=utf-8", "Connection: close"};
        c->req.query = "";
        xd_send(c->res, 400, close_hdr, 2, b.data, b.len);
        osb_buf_free(&b);
        break;
      }
      if (!token_ok(c)) {
        c->action = ACT_UNAUTHORIZED; /* the body is read first (a proxy in front still writing it) */
        c->discard = c->unbounded = 1;
      } else if (strcmp(c->req.method, "GET") == 0 && strcmp(c->path, "/ping") == 0) {
        c->action = ACT_PING;
        c->discard = c->unbounded = 1;
      } else if (xd_server_streams_body(c->req.method, c->path)) {
        c->streamed = 1; /* no size limit: the route reads it as it comes (xd_body_read) */
      } else if (!c->chunked && c->cl_left > XD_BODY_LIMIT && xd_proxy_port(c->path) <= 0) {
        c->too_large = c->discard = 1;
        if (c->cl_left > (uint64_t)XD_BODY_LIMIT + XD_DISCARD_LIMIT) {
          c->req.wants_close = 1;
          dispatch(c);
          continue;
        }
        too_large_now(c);
      }
      /* a client waiting for leave to send its body gets it, as from Go's and Node's servers */
      const char *expect = xd_header(&c->req, "expect");
      if (expect && strcasecmp(expect, "100-continue") == 0 && (c->chunked || c->cl_left > 0) && !c->answered_early &&
          c->in.len == c->head_len && conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n", 25, NULL, 0) != 0)
        break;
      if (!c->discard && xd_proxy_port(c->path) > 0) { /* proxy.c streams the body itself (xd_upgrade, no head) */
        dispatch(c);
        continue;
      }
      if (c->discard || c->streamed) { /* the head is not needed any more */
        osb_buf_consume(&c->in, c->head_len);
        c->head_len = 0;
      }
      if (c->streamed) { /* routed now; its body goes to the route as it comes */
        dispatch(c);
        continue;
      }
      c->state = ST_BODY;
    }
    /* ST_BODY */
    int rc = read_body(c);
    if (rc == 0) {
      if (c->eof && c->answered_early) rc = 1; /* closed once the 413 is written (below) */
      else {
        if (c->eof) conn_close(c);
        break;
      }
    }
    if (rc == -2) {
      conn_close(c);
      break;
    }
    if (rc == -1) {
      if (c->answered_early) conn_close(c); /* the answer is out; the rest is not HTTP */
      else answer_raw_close(c, GO_BAD_REQUEST);
      break;
    }
    if (c->answered_early) { /* the 413 is out: the body is read, or as much of it as is read; close */
      c->state = ST_CLOSING;
      reading(c, 0);
      if (c->pending_writes == 0) conn_close(c);
      else c->close_pending = 1;
      break;
    }
    if (rc == 2) c->req.wants_close = 1;
    dispatch(c);
  }
  if (!c->closing && !c->failed) {
    /* hold later pipelined requests while one is answered; read on while a head or body is incomplete, and a streamed
     * body while its route wants more */
    if (c->state == ST_ROUTED && c->streamed && !c->body_done) reading(c, c->body_cb && !c->body_paused);
    else if (c->state == ST_ROUTED && c->in.len > PIPELINE_HOLD) reading(c, 0);
    else if (c->state == ST_HEAD || c->state == ST_BODY) {
      reading(c, 1);
      idle_arm(c); /* a request that does not come (or come whole) within XD_IDLE_MS closes the connection */
    }
  }
  c->in_process = 0;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  (void)buf;
  conn *c = s->data;
  if (n == 0) return;
  if (c->state == ST_RAW) {
    if (n == UV_EOF && c->raw_cb && c->raw_eof) { /* a half-close the route wants to hear of */
      reading(c, 0);
      c->eof = 1;
      c->raw_eof(c->raw_arg);
      return;
    }
    if (n < 0) {
      reading(c, 0);
      conn_close(c); /* on_end */
      return;
    }
    /* the bytes are in the buffer read_alloc gave, after those of the request not handed on yet (raw_leftover):
     * all of them handed on, in order, none kept */
    size_t len = c->in.len + (size_t)n;
    c->in.len = 0;
    if (c->raw_cb) c->raw_cb->on_data(c->raw_arg, c->in.data, len);
    return;
  }
  if (n < 0) {
    reading(c, 0);
    if (n == UV_EOF && c->state == ST_ROUTED && c->res && !c->res->streaming) {
      /* the client sent its request and half-closed its side: the answer still goes out (as Go's server does), then
       * the connection closes; a streamed body not yet whole is cut short (feed_body closes once it is handed on) */
      c->eof = 1;
      c->reading = 0;
      process(c);
      return;
    }
    if (n != UV_EOF || c->state == ST_ROUTED) { /* reset, or the client left while its answer is under way */
      conn_close(c);
      return;
    }
    c->eof = 1;
    c->reading = 0;
    process(c);
    return;
  }
  c->in.len += (size_t)n;
  c->in.data[c->in.len] = 0;
  process(c);
}

/* ---------------------------------------------------------------- xd.h: answers */

static void finish(xd_res *res, int close_after) {
  conn *c = res->c;
  if (!c) { /* the client went away; the route has now finished with it */
    if (!res->in_gone) free(res);
    return;
  }
  res->close_after |= close_after;
  if (c->streamed && !c->body_done) res->close_after = 1; /* answered before its body was read: not read further */
  request_done(c);
}

/* Writes the head (Content-Length: clen) and `len` bytes of body (none for a HEAD request). 0, or -1 (the connection
 * failed: finish it closing). *close_after: the route's headers asked for Connection: close. */
static int write_answer(xd_res *res, int status, const char *const *headers, size_t nheaders, const void *body, size_t len,
                        uint64_t clen, int *close_after) {
  conn *c = res->c;
  osb_buf h = {0};
  int has_conn = 0;
  *close_after = 0;
  int rc = osb_buf_appendf(&h, "HTTP/1.1 %d %s\r\n", status, status_text(status));
  for (size_t i = 0; i < nheaders && rc == 0; i++) {
    if (strncasecmp(headers[i], "connection:", 11) == 0) {
      has_conn = 1;
      if (has_token(headers[i] + 11, "close")) *close_after = 1;
    }
    rc = osb_buf_appendf(&h, "%s\r\n", headers[i]);
  }
  if (rc == 0 && c->req.wants_close && !has_conn) rc = osb_buf_append_str(&h, "Connection: close\r\n");
  if (rc == 0)
    rc = osb_buf_appendf(&h, "Date: %s\r\nContent-Length: %llu\r\n\r\n", http_date(c->srv), (unsigned long long)clen);
  if (rc != 0) {
    osb_buf_free(&h);
    conn_fail(c);
    return -1;
  }
  /* a HEAD answer has the head only (its Content-Length the GET answer's) */
  conn_write(c, h.data, h.len, body, c->req.method && strcmp(c->req.method, "HEAD") == 0 ? 0 : len);
  osb_buf_free(&h);
  return 0;
}

/* the head (Content-Length: clen) and `len` bytes of body */
static void send_answer(xd_res *res, int status, const char *const *headers, size_t nheaders, const void *body, size_t len,
                        size_t clen) {
  conn *c = res->c;
  if (!c) {
    finish(res, 0);
    return;
  }
  res->on_close = NULL; /* the route is done with it: no callback any more */
  res->on_drain = NULL;
  int close_after;
  if (write_answer(res, status, headers, nheaders, body, len, clen, &close_after) != 0) close_after = 1;
  finish(res, close_after);
}

void xd_send(xd_res *res, int status, const char *const *headers, size_t nheaders, const void *body, size_t len) {
  send_answer(res, status, headers, nheaders, body, len, len);
}

void xd_send_head(xd_res *res, int status, const char *const *headers, size_t nheaders, size_t content_length) {
  send_answer(res, status, headers, nheaders, NULL, 0, content_length);
}

void xd_send_json(xd_res *res, int status, const char *json, size_t len) {
  static const char *const h[] = {"Content-Type: application/json; charset=utf-8"};
  xd_send(res, status, h, 1, json, len);
}

void xd_send_error(xd_res *res, int status, const char *code, const char *message) {
  osb_buf b = {0};
  int rc = osb_buf_append_str(&b, "{\"code\":");
  if (rc == 0) rc = xd_json_str((struct osb_buf *)&b, code, strlen(code));
  if (rc == 0) rc = osb_buf_append_str(&b, ",\"message\":");
  if (rc == 0) rc = xd_json_str((struct osb_buf *)&b, message, strlen(message));
  if (rc == 0) rc = osb_buf_append_str(&b, "}");
  if (rc != 0) {
    osb_buf_free(&b);
    static const char oom[] = "{\"code\":\"RUNTIME_ERROR\",\"message\":\"out of memory\"}";
    xd_send_json(res, 500, oom, sizeof oom - 1);
    return;
  }
  xd_send_json(res, status, b.data, b.len);
  osb_buf_free(&b);
}

void xd_send_empty(xd_res *res) { xd_send(res, 200, NULL, 0, NULL, 0); }

void xd_body_open(xd_res *res, int status, const char *const *headers, size_t nheaders, uint64_t content_length) {
  res->streaming = 2;
  res->body_left = content_length;
  int close_after;
  if (res->c && write_answer(res, status, headers, nheaders, NULL, 0, content_length, &close_after) == 0)
    res->close_after |= close_after;
}

int xd_body_write(xd_res *res, const void *data, size_t len) {
  conn *c = res->c;
  if (!c || c->closing || c->failed) return -1;
  if (len > res->body_left) len = (size_t)res->body_left;
  if (len == 0) return 0;
  res->body_left -= len;
  return conn_write(c, data, len, NULL, 0);
}

void xd_body_end(xd_res *res) {
  res->on_close = NULL;
  res->on_drain = NULL;
  /* fewer bytes than the head announced: the client can only learn it from the connection's end (Go's server) */
  finish(res, res->body_left > 0);
}

void xd_stream_open(xd_res *res) {
  conn *c = res->c;
  res->streaming = 1;
  if (!c) return;
  char h[400];
  int n = snprintf(h, sizeof h,
                   "HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nConnection: %s\r\nContent-Type: text/event-stream\r\n"
                   "X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\nDate: %s\r\n\r\n",
                   c->req.wants_close ? "close" : "keep-alive", http_date(c->srv));
  conn_write(c, h, (size_t)n, NULL, 0);
}

int xd_stream_write(xd_res *res, const void *data, size_t len) {
  conn *c = res->c;
  if (!c || c->closing || c->failed) return -1;
  if (len == 0) return 0;
  char pre[24];
  int n = snprintf(pre, sizeof pre, "%zx\r\n", len);
  uv_buf_t parts[3] = {uv_buf_init(pre, (unsigned)n), uv_buf_init((char *)data, (unsigned)len), uv_buf_init("\r\n", 2)};
  return conn_writev(c, parts, 3);
}

size_t xd_stream_pending(const xd_res *res) {
  return res->c ? uv_stream_get_write_queue_size(&res->c->h.stream) : 0;
}

void xd_stream_on_drain(xd_res *res, void (*fn)(void *arg), void *arg) {
  if (!res->c || xd_stream_pending(res) == 0) {
    fn(arg);
    return;
  }
  res->on_drain = fn;
  res->on_drain_arg = arg;
}

void xd_stream_end(xd_res *res) {
  conn *c = res->c;
  res->on_close = NULL;
  res->on_drain = NULL;
  if (c) conn_write(c, "0\r\n\r\n", 5, NULL, 0);
  finish(res, c ? c->req.wants_close : 0);
}

int xd_res_closed(const xd_res *res) { return res->closed || !res->c || res->c->closing || res->c->failed; }

int xd_res_peer_ended(const xd_res *res) { return !res->c || res->c->eof; }

void xd_res_on_close(xd_res *res, void (*fn)(void *arg), void *arg) {
  res->on_close = fn;
  res->on_close_arg = arg;
}

/* ---------------------------------------------------------------- xd.h: streamed request bodies */

void xd_body_read(xd_res *res, const xd_body_callbacks *cb, void *arg) {
  conn *c = res->c;
  if (!c || !c->streamed || c->body_done) return;
  c->body_cb = cb;
  c->body_arg = arg;
  if (!c->in_process) process(c);
}

void xd_body_pause(xd_res *res, int paused) {
  conn *c = res->c;
  if (!c || !c->streamed || c->body_done || c->closing) return;
  c->body_paused = paused;
  if (paused) reading(c, 0);
  else if (!c->in_process) process(c);
}

/* ---------------------------------------------------------------- xd.h: upgraded connections */

const char *xd_upgrade_of(const xd_req *req) {
  const char *u = xd_header(req, "upgrade");
  return u && has_token(xd_header(req, "connection"), "upgrade") ? u : NULL;
}

/* the bytes the client sent after the upgrade request, handed on from the loop (not inside the route's call) */
static void raw_leftover(uv_timer_t *t) {
  conn *c = t->data;
  if (c->closing || !c->raw_cb || c->in.len == 0) return;
  size_t n = c->in.len;
  c->in.len = 0;
  c->raw_cb->on_data(c->raw_arg, c->in.data, n);
}

xd_raw *xd_upgrade(xd_res *res, const char *head, size_t len, const xd_raw_callbacks *cb, void *arg) {
  conn *c = res->c;
  if (!c || c->closing || c->failed) {
    finish(res, 1);
    return NULL;
  }
  if (len > 0 && conn_write(c, head, len, NULL, 0) != 0) {
    finish(res, 1);
    return NULL;
  }
  /* the request stays parsed (freed with the connection); only what follows it is the route's */
  osb_buf_consume(&c->in, c->discard ? c->pos : c->head_len + c->pos);
  c->head_len = c->pos = 0;
  c->res = NULL;
  free(res);
  c->state = ST_RAW;
  c->raw_cb = cb;
  c->raw_arg = arg;
  c->raw_eof = NULL;
  uv_timer_stop(&c->idle);
  if (c->in.len > 0) uv_timer_start(&c->idle, raw_leftover, 0, 0);
  reading(c, 1);
  return (xd_raw *)c;
}

int xd_raw_write(xd_raw *r, const char *const *parts, const size_t *lens, size_t nparts) {
  conn *c = (conn *)r;
  uv_buf_t bufs[8];
  if (nparts > 8) return -1;
  for (size_t i = 0; i < nparts; i++) bufs[i] = uv_buf_init((char *)parts[i], (unsigned)lens[i]);
  return conn_writev(c, bufs, nparts);
}

size_t xd_raw_pending(const xd_raw *r) { return uv_stream_get_write_queue_size(&((const conn *)r)->h.stream); }

void xd_raw_pause(xd_raw *r, int paused) { reading((conn *)r, !paused); }

void xd_raw_close(xd_raw *r, int now) {
  conn *c = (conn *)r;
  c->raw_cb = NULL;
  if (c->closing) return;
  reading(c, 0);
  if (now || c->pending_writes == 0) conn_close(c);
  else c->close_pending = 1;
}

void xd_raw_on_eof(xd_raw *r, void (*fn)(void *arg)) { ((conn *)r)->raw_eof = fn; }

static void raw_released(uv_timer_t *t) {
  conn *c = t->data;
  if (c->closing) return;
  reading(c, 1);
  process(c);
}

void xd_raw_release(xd_raw *r, const char *rest, size_t len) {
  conn *c = (conn *)r;
  c->raw_cb = NULL;
  if (c->closing) return;
  if (c->failed) { /* a write failed: its close was due on the loop (conn_fail), whose timer this would take */
    conn_close(c);
    return;
  }
  /* the next request's bytes: what the route read past its request, then what was not handed to it yet */
  osb_buf in = {0};
  if (osb_buf_reserve_exact(&in, len + c->in.len) != 0) {
    conn_close(c);
    return;
  }
  osb_buf_append(&in, rest, len);
  osb_buf_append(&in, c->in.data, c->in.len);
  osb_buf_free(&c->in);
  c->in = in;
  request_reset(c);
  uv_timer_start(&c->idle, raw_released, 0, 0);
}

/* ---------------------------------------------------------------- listening */

static void on_connection(uv_stream_t *l, int status) {
  xd_server *s = l->data;
  if (status < 0 || s->closing) return;
  conn *c = calloc(1, sizeof *c);
  if (!c) return;
  c->srv = s;
  c->is_unix = s->is_unix;
  int rc = s->is_unix ? uv_pipe_init(s->o.loop, &c->h.pipe, 0) : uv_tcp_init(s->o.loop, &c->h.tcp);
  if (rc != 0) {
    free(c);
    return;
  }
  c->h.handle.data = c;
  uv_timer_init(s->o.loop, &c->idle);
  c->idle.data = c;
  c->open_handles = 2;
  request_reset(c);
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
  if (uv_accept(l, &c->h.stream) != 0) {
    conn_close(c);
    return;
  }
  if (!s->is_unix) uv_tcp_nodelay(&c->h.tcp, 1);
  idle_arm(c);
  reading(c, 1);
}

xd_server *xd_server_new(const xd_server_opts *opts) {
  xd_server *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->o = *opts;
  return s;
}

int xd_server_listen_unix(xd_server *s, const char *path) {
  int rc = uv_pipe_init(s->o.loop, &s->l.pipe, 0);
  if (rc != 0) return rc;
  s->l.handle.data = s;
  s->listening = 1;
  s->is_unix = 1;
  if (unlink(path) != 0 && errno != ENOENT) return uv_translate_sys_error(errno);
  if ((rc = uv_pipe_bind(&s->l.pipe, path)) != 0) return rc;
  return uv_listen(&s->l.stream, 511, on_connection);
}

int xd_server_listen_tcp(xd_server *s, const char *host, int port, int *bound) {
  struct sockaddr_storage ss;
  int rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
  if (rc != 0 && (rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss)) != 0) return rc;
  if ((rc = uv_tcp_init(s->o.loop, &s->l.tcp)) != 0) return rc;
  s->l.handle.data = s;
  s->listening = 1;
  if ((rc = uv_tcp_bind(&s->l.tcp, (const struct sockaddr *)&ss, 0)) != 0) return rc;
  if ((rc = uv_listen(&s->l.stream, 511, on_connection)) != 0) return rc;
  int len = sizeof ss;
  if ((rc = uv_tcp_getsockname(&s->l.tcp, (struct sockaddr *)&ss, &len)) != 0) return rc;
  *bound = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return 0;
}

static void server_freed(uv_handle_t *h) { free(h->data); }

void xd_server_close(xd_server *s) {
  if (s->closing) return;
  s->closing = 1;
  while (s->conns) conn_close(s->conns);
  if (s->listening) uv_close(&s->l.handle, server_freed);
  else free(s);
}
