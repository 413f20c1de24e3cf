/* proxy.c: execd's reverse proxy `ANY /proxy/{port}/{path}` to 127.0.0.1:{port} inside the sandbox, HTTP and
 * WebSocket (any Upgrade), as the Node execd's lib/dev-server/execd/proxy.js answers it (whose helpers the lifecycle
 * server still uses on the host) and upstream's execd proxies (components/execd/pkg/web/proxy.go). /proxy/44772 reaches
 * this execd itself wherever it listens (its Unix socket or TCP port: xd_proxy_set_self).
 *
 * - The request goes to the service on a connection of its own with `Connection: close` (Node: agent false): the
 *   client's headers in order, names in Go's canonical form (what upstream's proxy sends; the server has only the
 *   lower-cased names), without the hop-by-hop ones and Host, then `Host: 127.0.0.1:{port}` (`localhost` for execd's
 *   socket). Toward a sandbox's own service the token headers (OpenSandbox-Secure-Access, X-EXECD-ACCESS-TOKEN) are
 *   dropped; toward execd itself they are kept (it checks its own).
 * - Bodies stream both ways with backpressure: the client's connection is this module's byte pipe right after the
 *   request head (xd_upgrade with no answer head; xd_raw_release gives it back to the server after the exchange, so
 *   keep-alive and pipelining go on), its body (Content-Length or chunked, re-chunked toward the service) is written
 *   as it comes, and reading stops while more than XD_PROXY_HIGH bytes wait for the other side. The answer is read
 *   (proxy.h xd_proxy_answer_head), its head passed on without the hop-by-hop headers, its body with its
 *   Content-Length or chunked; memory per exchange is bounded whatever the body's size.
 * - Errors as proxy.js answers them: a service that cannot be reached, resets or answers something that is not HTTP
 *   before its head is in is a 502 {"code":"PROXY_ERROR","message":"cannot reach port N: ECONNREFUSED"} ("the sandbox"
 *   for execd's socket); a status Node cannot pass on is "invalid answer from port N: Invalid status code: 99"; after
 *   the head was passed on, a failure closes the client's connection. A port that is not 1..65535 is a 400
 *   INVALID_REQUEST_BODY "invalid port: X".
 * - An upgrade request (Connection: upgrade + Upgrade) is replayed to the service with its Connection and Upgrade
 *   headers, then bytes are relayed both ways until either side ends (a half-close is passed on); a service that
 *   cannot be reached is proxy.js's raw 502 `cannot reach port N`, a bad port its raw 400; the connection is closed
 *   after.
 *
 * Ownership: the module owns its exchanges (pxy); each lives until both the client's pipe is given back or gone and
 * its connection to the service is closed. Loop thread only. */
#include "proxy.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "xd.h"

/* reading a side stops while more than this waits to be written to the other */
#define XD_PROXY_HIGH (256u * 1024u)
/* client bytes after a finished request (the next pipelined one) read before reading stops until the answer is out */
#define XD_PROXY_REST_MAX (64u * 1024u)
#define XD_PROXY_READ (64u * 1024u)
#define EXECD_PORT 44772

/* ------------------------------------------------------------------ chunked bodies */

enum { CK_SIZE, CK_EXT, CK_SIZE_LF, CK_DATA, CK_DATA_CR, CK_DATA_LF, CK_TRAILER, CK_TRAILER_LINE, CK_TRAILER_LF, CK_DONE };

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

void xd_chunked_init(xd_chunked *d) { memset(d, 0, sizeof *d); }

int xd_chunked_done(const xd_chunked *d) { return d->state == CK_DONE; }

/* the size line ended */
static void size_line_end(xd_chunked *d) {
  d->line = 0;
  d->digits = 0;
  d->state = d->size == 0 ? CK_TRAILER : CK_DATA;
}

ssize_t xd_chunked_feed(xd_chunked *d, const char *p, size_t n, void (*on_data)(void *arg, const char *data, size_t len),
                        void *arg) {
  size_t i = 0;
  while (i < n && d->state != CK_DONE) {
    if (d->state == CK_DATA) {
      size_t take = n - i < d->size ? n - i : (size_t)d->size;
      if (on_data) on_data(arg, p + i, take);
      i += take;
      d->size -= take;
      if (d->size == 0) d->state = CK_DATA_CR;
      continue;
    }
    unsigned char ch = (unsigned char)p[i++];
    if (d->state == CK_SIZE || d->state == CK_EXT || d->state == CK_TRAILER_LINE || d->state == CK_TRAILER ||
        d->state == CK_SIZE_LF || d->state == CK_TRAILER_LF) {
      if (++d->line > XD_PROXY_LINE_LIMIT) return -1;
    }
    if (d->state >= CK_TRAILER && d->state <= CK_TRAILER_LF && ++d->trailer > XD_PROXY_HEAD_LIMIT) return -1;
    switch (d->state) {
      case CK_SIZE: {
        int v = hexval(ch);
        if (v >= 0) {
          if (d->size >> 56) return -1;
          d->size = d->size * 16 + (uint64_t)v;
          d->digits++;
        } else if (d->digits == 0) return -1;
        else if (ch == ';' || ch == ' ' || ch == '\t') d->state = CK_EXT;
        else if (ch == '\r') d->state = CK_SIZE_LF;
        else if (ch == '\n') size_line_end(d);
        else return -1;
        break;
      }
      case CK_EXT:
        if (ch == '\n') size_line_end(d);
        break;
      case CK_SIZE_LF:
        if (ch != '\n') return -1;
        size_line_end(d);
        break;
      case CK_DATA_CR:
        if (ch == '\r') d->state = CK_DATA_LF;
        else if (ch == '\n') d->state = CK_SIZE;
        else return -1;
        break;
      case CK_DATA_LF:
        if (ch != '\n') return -1;
        d->state = CK_SIZE;
        break;
      case CK_TRAILER: /* at the start of a trailer line: an empty one ends the body */
        if (ch == '\n') d->state = CK_DONE;
        else if (ch == '\r') d->state = CK_TRAILER_LF;
        else d->state = CK_TRAILER_LINE;
        break;
      case CK_TRAILER_LF:
        if (ch == '\n') d->state = CK_DONE;
        else d->state = CK_TRAILER_LINE;
        break;
      case CK_TRAILER_LINE:
        if (ch == '\n') {
          d->state = CK_TRAILER;
          d->line = 0;
        }
        break;
      default:
        return -1;
    }
  }
  return (ssize_t)i;
}

/* ------------------------------------------------------------------ answer heads */

/* Node's http.STATUS_CODES, for an answer without a reason phrase */
static const char *node_status_text(int s) {
  switch (s) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 102: return "Processing";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 207: return "Multi-Status";
    case 208: return "Already Reported";
    case 226: return "IM Used";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 305: return "Use Proxy";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 407: return "Proxy Authentication Required";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 418: return "I'm a Teapot";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Entity";
    case 423: return "Locked";
    case 424: return "Failed Dependency";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 506: return "Variant Also Negotiates";
    case 507: return "Insufficient Storage";
    case 508: return "Loop Detected";
    case 509: return "Bandwidth Limit Exceeded";
    case 510: return "Not Extended";
    case 511: return "Network Authentication Required";
    default: return "unknown";
  }
}

static int is_tchar(unsigned char ch) {
  return isalnum(ch) || (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* a header value byte Node's parser and writer both accept */
static int value_ok(unsigned char ch) { return ch == '\t' || (ch >= 0x20 && ch != 0x7f); }

static int name_is(const char *n, size_t nl, const char *want) { return strlen(want) == nl && strncasecmp(n, want, nl) == 0; }

/* hop-by-hop headers of an answer (proxy.js: its request list but Host) */
static int answer_hop(const char *n, size_t nl) {
  static const char *const hop[] = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                                    "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection"};
  for (size_t i = 0; i < sizeof hop / sizeof *hop; i++)
    if (name_is(n, nl, hop[i])) return 1;
  return 0;
}

/* the last comma-separated token of v[0..vl) is `chunked` */
static int ends_chunked(const char *v, size_t vl) {
  while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t' || v[vl - 1] == ',')) vl--;
  size_t s = vl;
  while (s > 0 && v[s - 1] != ',' && v[s - 1] != ' ' && v[s - 1] != '\t') s--;
  return vl - s == 7 && strncasecmp(v + s, "chunked", 7) == 0;
}

int xd_proxy_answer_head(const char *buf, size_t len, int head_request, int close, const char *date, xd_proxy_head *h,
                         osb_buf *out, const char **why, char *whybuf, size_t whycap) {
  memset(h, 0, sizeof *h);
  *why = NULL;
  /* where the head ends: an empty line (CRLF or LF) */
  size_t end = 0;
  for (size_t i = 0; i + 1 < len && i < XD_PROXY_HEAD_LIMIT; i++) {
    if (buf[i] != '\n') continue;
    if (buf[i + 1] == '\n') {
      end = i + 2;
      break;
    }
    if (buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n') {
      end = i + 3;
      break;
    }
  }
  /* the status line can be refused before the head is whole */
  size_t sl = 0;
  while (sl < len && buf[sl] != '\n') sl++;
  static const char proto[] = "HTTP/1.";
  for (size_t i = 0; i < len && i < sizeof proto - 1; i++)
    if (buf[i] != proto[i]) return *why = "HPE_INVALID_CONSTANT", -1;
  if (end == 0) {
    if (len > XD_PROXY_HEAD_LIMIT) return *why = "HPE_HEADER_OVERFLOW", -1;
    return 0;
  }
  /* HTTP/1.x SP 3DIGIT [SP reason] */
  size_t lineend = sl > 0 && buf[sl - 1] == '\r' ? sl - 1 : sl;
  if (lineend < 12 || (buf[7] != '0' && buf[7] != '1')) return *why = "HPE_INVALID_VERSION", -1;
  if (buf[8] != ' ') return *why = "HPE_INVALID_VERSION", -1;
  if (!isdigit((unsigned char)buf[9]) || !isdigit((unsigned char)buf[10]) || !isdigit((unsigned char)buf[11]))
    return *why = "HPE_INVALID_STATUS", -1;
  h->status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
  const char *reason = buf + 12;
  size_t rl = 0;
  if (lineend > 12) {
    if (buf[12] != ' ') return *why = "HPE_INVALID_STATUS", -1;
    reason = buf + 13;
    rl = lineend - 13;
  }
  for (size_t i = 0; i < rl; i++)
    if (reason[i] == '\r' || reason[i] == 0) return *why = "HPE_INVALID_STATUS", -1;
  h->head_len = end;
  /* the headers: checked, framing read */
  const char *cl = NULL;
  size_t cll = 0;
  int te = 0, chunked = 0, has_date = 0;
  for (size_t p = sl + 1; p < end;) {
    size_t e = p;
    while (e < end && buf[e] != '\n') e++;
    size_t le = e > p && buf[e - 1] == '\r' ? e - 1 : e;
    if (le == p) break; /* the empty line */
    size_t c = p;
    while (c < le && buf[c] != ':') c++;
    if (c == p || c == le) return *why = "HPE_INVALID_HEADER_TOKEN", -1;
    for (size_t k = p; k < c; k++)
      if (!is_tchar((unsigned char)buf[k])) return *why = "HPE_INVALID_HEADER_TOKEN", -1;
    size_t v = c + 1, ve = le;
    while (v < ve && (buf[v] == ' ' || buf[v] == '\t')) v++;
    while (ve > v && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t')) ve--;
    for (size_t k = v; k < ve; k++)
      if (!value_ok((unsigned char)buf[k])) return *why = "HPE_INVALID_HEADER_TOKEN", -1;
    const char *n = buf + p;
    size_t nl = c - p;
    if (name_is(n, nl, "content-length")) {
      if (ve == v || ve - v > 15) return *why = "HPE_INVALID_CONTENT_LENGTH", -1;
      for (size_t k = v; k < ve; k++)
        if (!isdigit((unsigned char)buf[k])) return *why = "HPE_INVALID_CONTENT_LENGTH", -1;
      if (cl) return *why = "HPE_UNEXPECTED_CONTENT_LENGTH", -1;
      cl = buf + v;
      cll = ve - v;
    } else if (name_is(n, nl, "transfer-encoding")) {
      te = 1;
      chunked = ends_chunked(buf + v, ve - v);
    } else if (name_is(n, nl, "date")) has_date = 1;
    p = e + 1;
  }
  if (cl && te) return *why = "HPE_UNEXPECTED_CONTENT_LENGTH", -1;
  if (h->status >= 100 && h->status < 200) {
    h->informational = 1;
    return 1;
  }
  /* what Node's server would refuse to write (res.writeHead) */
  if (h->status < 100) {
    snprintf(whybuf, whycap, "Invalid status code: %d", h->status);
    return *why = whybuf, -3;
  }
  for (size_t i = 0; i < rl; i++)
    if (!value_ok((unsigned char)reason[i])) return *why = "Invalid character in statusMessage", -3;
  if (head_request || h->status == 204 || h->status == 304) h->framing = XD_PROXY_NONE;
  else if (chunked) h->framing = XD_PROXY_CHUNKED;
  else if (te) h->framing = XD_PROXY_CLOSE;
  else if (cl) {
    h->framing = XD_PROXY_LENGTH;
    h->length = strtoull(cl, NULL, 10);
    (void)cll;
  } else h->framing = XD_PROXY_CLOSE;
  h->chunk_out = h->framing == XD_PROXY_CHUNKED || h->framing == XD_PROXY_CLOSE;
  /* the client's head */
  int rc = osb_buf_appendf(out, "HTTP/1.1 %03d ", h->status);
  if (rc == 0) rc = rl ? osb_buf_append(out, reason, rl) : osb_buf_append_str(out, node_status_text(h->status));
  if (rc == 0) rc = osb_buf_append(out, "\r\n", 2);
  for (size_t p = sl + 1; p < end && rc == 0;) {
    size_t e = p;
    while (e < end && buf[e] != '\n') e++;
    size_t le = e > p && buf[e - 1] == '\r' ? e - 1 : e;
    if (le == p) break;
    size_t c = p;
    while (buf[c] != ':') c++;
    size_t v = c + 1, ve = le;
    while (v < ve && (buf[v] == ' ' || buf[v] == '\t')) v++;
    while (ve > v && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t')) ve--;
    if (!answer_hop(buf + p, c - p)) {
      rc = osb_buf_append(out, buf + p, c - p);
      if (rc == 0) rc = osb_buf_append(out, ": ", 2);
      if (rc == 0) rc = osb_buf_append(out, buf + v, ve - v);
      if (rc == 0) rc = osb_buf_append(out, "\r\n", 2);
    }
    p = e + 1;
  }
  if (rc == 0 && !has_date) rc = osb_buf_appendf(out, "Date: %s\r\n", date);
  if (rc == 0 && close) rc = osb_buf_append_str(out, "Connection: close\r\n");
  if (rc == 0 && h->chunk_out) rc = osb_buf_append_str(out, "Transfer-Encoding: chunked\r\n");
  if (rc == 0) rc = osb_buf_append(out, "\r\n", 2);
  return rc == 0 ? 1 : -2;
}

/* ------------------------------------------------------------------ the route */

int xd_proxy_port(const char *path) {
  if (strncmp(path, "/proxy/", 7) != 0) return -1;
  const char *s = path + 7;
  long port = 0;
  size_t n = 0;
  for (; s[n] && s[n] != '/'; n++) {
    if (!isdigit((unsigned char)s[n])) return 0;
    if (port <= 65535) port = port * 10 + (s[n] - '0');
  }
  return n > 0 && port >= 1 && port <= 65535 ? (int)port : 0;
}

typedef struct pxy pxy;

typedef struct {
  uv_loop_t *loop;
  char *self_socket; /* execd's own Unix socket, or NULL: its TCP host and port */
  char *self_host;
  int self_port;
  pxy *list;
  size_t live;
  int closing;
} proxy_mod;

enum { RQ_BODY_NONE, RQ_LENGTH, RQ_CHUNKED };
enum { AN_HEAD, AN_BODY, AN_DONE };

struct pxy {
  proxy_mod *m;
  pxy *prev, *next;
  xd_raw *client; /* NULL once given back or gone */
  union {
    uv_handle_t h;
    uv_stream_t s;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } up;
  uv_connect_t connect;
  int up_open;     /* the handle is initialised and not yet closed */
  int up_closing;  /* uv_close called */
  int connected;
  int up_reading;
  int up_dead;     /* nothing more is written to the service (gone, or the exchange is over) */
  int upgrade;
  int port;
  int self;
  int head_request;
  int wants_close;
  /* client -> service */
  osb_buf pre;        /* what goes to the service once connected (the head, body bytes that came meanwhile) */
  size_t up_queued;   /* bytes written to the service and not yet done */
  int rq;             /* RQ_* */
  uint64_t rq_left;
  xd_chunked rq_ch;
  int rq_done;
  int client_paused;
  int client_eof;
  osb_buf rest;       /* client bytes after the request (the next request), given back with the pipe */
  /* service -> client */
  char *rbuf;
  osb_buf ahead;      /* the answer head being read */
  int an;             /* AN_* */
  xd_proxy_head head;
  uint64_t an_left;
  xd_chunked an_ch;
  int sent;           /* bytes of an answer went to the client */
  int up_paused;
  int depth;          /* callbacks of this exchange running: it is not freed under them */
};

static void up_start_reading(pxy *p);
static void up_shutdown(pxy *p);
static void answer_bytes(pxy *p, const char *d, size_t n);
static void maybe_finish(pxy *p);

static const char *http_date(char *buf, size_t cap) {
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(buf, cap, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

static void pxy_free_if_done(pxy *p) {
  if (p->client || p->up_open || p->depth) return;
  proxy_mod *m = p->m;
  if (p->prev) p->prev->next = p->next;
  else if (m->list == p) m->list = p->next;
  if (p->next) p->next->prev = p->prev;
  osb_buf_free(&p->pre);
  osb_buf_free(&p->rest);
  osb_buf_free(&p->ahead);
  free(p->rbuf);
  free(p);
  m->live--;
  if (m->closing && m->live == 0) {
    free(m->self_socket);
    free(m->self_host);
    free(m);
  }
}

static void up_closed(uv_handle_t *h) {
  pxy *p = h->data;
  p->up_open = 0;
  pxy_free_if_done(p);
}

static void up_close(pxy *p) {
  p->up_dead = 1;
  if (!p->up_open || p->up_closing) return;
  p->up_closing = 1;
  uv_close(&p->up.h, up_closed);
}

/* the client's pipe is no longer ours: closed (at once, or after what is queued), or given back to the server */
static void client_close(pxy *p, int now) {
  xd_raw *c = p->client;
  p->client = NULL;
  if (c) xd_raw_close(c, now);
}

static void pxy_abort(pxy *p) {
  client_close(p, 1);
  up_close(p);
  pxy_free_if_done(p);
}

static void client_pause(pxy *p, int paused) {
  if (!p->client || p->client_paused == paused) return;
  p->client_paused = paused;
  xd_raw_pause(p->client, paused);
}

static size_t up_pending(const pxy *p) { return p->pre.len + p->up_queued; }

/* ---- writing to the service */

typedef struct {
  uv_write_t w;
  pxy *p;
  size_t len;
  char data[];
} upw;

static void up_written(uv_write_t *w, int status) {
  upw *u = (upw *)w;
  pxy *p = u->p;
  p->up_queued -= u->len;
  free(u);
  if (status < 0) {
    /* the service stopped reading (it may have answered already): the rest of the body is dropped */
    p->up_dead = 1;
    p->pre.len = 0;
  }
  if (p->client && !p->rq_done && up_pending(p) <= XD_PROXY_HIGH / 2) client_pause(p, 0);
  pxy_free_if_done(p);
}

/* queues the parts for the service (copied): before the connection is made into `pre` */
static void up_write(pxy *p, const char *const *parts, const size_t *lens, size_t n) {
  if (p->up_dead) return;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += lens[i];
  if (total == 0) return;
  if (!p->connected) {
    for (size_t i = 0; i < n; i++)
      if (osb_buf_append(&p->pre, parts[i], lens[i]) != 0) {
        pxy_abort(p);
        return;
      }
  } else {
    upw *u = malloc(sizeof *u + total);
    if (!u) {
      pxy_abort(p);
      return;
    }
    u->p = p;
    u->len = 0;
    for (size_t i = 0; i < n; i++) {
      memcpy(u->data + u->len, parts[i], lens[i]);
      u->len += lens[i];
    }
    uv_buf_t b = uv_buf_init(u->data, (unsigned)u->len);
    if (uv_write(&u->w, &p->up.s, &b, 1, up_written) != 0) {
      free(u);
      p->up_dead = 1;
      return;
    }
    p->up_queued += u->len;
  }
  if (up_pending(p) > XD_PROXY_HIGH) client_pause(p, 1);
}

static void up_write1(pxy *p, const char *d, size_t n) {
  const char *parts[1] = {d};
  size_t lens[1] = {n};
  up_write(p, parts, lens, 1);
}

/* a piece of a chunked request body, re-chunked toward the service */
static void rq_chunk_data(void *arg, const char *d, size_t n) {
  pxy *p = arg;
  if (n == 0 || p->up_dead) return;
  char pre[24];
  int k = snprintf(pre, sizeof pre, "%zx\r\n", n);
  const char *parts[3] = {pre, d, "\r\n"};
  size_t lens[3] = {(size_t)k, n, 2};
  up_write(p, parts, lens, 3);
}

/* ---- writing to the client */

static void client_write(pxy *p, const char *const *parts, const size_t *lens, size_t n) {
  if (!p->client) return;
  if (xd_raw_write(p->client, parts, lens, n) != 0) return; /* on_end follows */
  p->sent = 1;
  if (xd_raw_pending(p->client) > XD_PROXY_HIGH && p->up_reading) {
    uv_read_stop(&p->up.s);
    p->up_reading = 0;
    p->up_paused = 1;
  }
}

static void client_write1(pxy *p, const char *d, size_t n) {
  const char *parts[1] = {d};
  size_t lens[1] = {n};
  client_write(p, parts, lens, 1);
}

static const char *describe(const pxy *p, char *buf, size_t cap) {
  if (p->self && p->m->self_socket) return "the sandbox";
  snprintf(buf, cap, "port %d", p->self ? p->m->self_port : p->port);
  return buf;
}

/* The exchange failed: before anything of an answer went out, the client gets proxy.js's 502 (kind: "cannot reach"
 * or "invalid answer from", detail after ": "); after it, its connection is closed. */
static void fail(pxy *p, const char *kind, const char *detail) {
  up_close(p);
  if (!p->client) {
    pxy_free_if_done(p);
    return;
  }
  if (p->sent) {
    pxy_abort(p);
    return;
  }
  char where[32];
  const char *to = describe(p, where, sizeof where);
  osb_buf msg = {0}, body = {0}, head = {0};
  int rc;
  if (p->upgrade) { /* proxyUpgrade's raw answer: no detail, the connection closed after it */
    rc = osb_buf_appendf(&msg, "cannot reach %s", to);
    if (rc == 0) rc = osb_buf_append_str(&body, "{\"code\":\"PROXY_ERROR\",\"message\":");
    if (rc == 0) rc = xd_json_str((struct osb_buf *)&body, msg.data, msg.len);
    if (rc == 0) rc = osb_buf_append_str(&body, "}");
    if (rc == 0)
      rc = osb_buf_appendf(&head, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                                  "Connection: close\r\n\r\n", body.len);
  } else {
    rc = osb_buf_appendf(&msg, "%s %s: %s", kind, to, detail);
    if (rc == 0) rc = osb_buf_append_str(&body, "{\"code\":\"PROXY_ERROR\",\"message\":");
    if (rc == 0) rc = xd_json_str((struct osb_buf *)&body, msg.data, msg.len);
    if (rc == 0) rc = osb_buf_append_str(&body, "}");
    char date[40];
    if (rc == 0)
      rc = osb_buf_appendf(&head, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json; charset=utf-8\r\n%sDate: %s\r\n"
                                  "Content-Length: %zu\r\n\r\n", p->wants_close ? "Connection: close\r\n" : "",
                           http_date(date, sizeof date), body.len);
  }
  if (rc == 0) {
    const char *parts[2] = {head.data, body.data};
    size_t lens[2] = {head.len, body.len};
    client_write(p, parts, lens, 2);
  }
  osb_buf_free(&msg);
  osb_buf_free(&body);
  osb_buf_free(&head);
  if (rc != 0 || p->upgrade) {
    client_close(p, rc != 0);
    pxy_free_if_done(p);
    return;
  }
  p->an = AN_DONE; /* the answer is out; the request's body is read to its end, then the connection goes on */
  maybe_finish(p);
}

/* The exchange is over once the answer is out and the request read: the client's connection goes back to the server
 * (or is closed after the answer when the request asked for it). */
static void maybe_finish(pxy *p) {
  if (p->an != AN_DONE) return;
  if (p->upgrade) return;
  up_close(p);
  if (!p->client) {
    pxy_free_if_done(p);
    return;
  }
  if (!p->rq_done) { /* the answer came before the whole body: the rest is read and dropped */
    client_pause(p, 0);
    return;
  }
  xd_raw *c = p->client;
  p->client = NULL;
  if (p->wants_close) xd_raw_close(c, 0);
  else xd_raw_release(c, p->rest.data ? p->rest.data : "", p->rest.len);
  pxy_free_if_done(p);
}

/* ---- the service's side */

static void up_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  (void)suggested;
  pxy *p = h->data;
  *b = uv_buf_init(p->rbuf, XD_PROXY_READ);
}

static void an_chunk_data(void *arg, const char *d, size_t n) {
  pxy *p = arg;
  if (n == 0) return;
  char pre[24];
  int k = snprintf(pre, sizeof pre, "%zx\r\n", n);
  const char *parts[3] = {pre, d, "\r\n"};
  size_t lens[3] = {(size_t)k, n, 2};
  client_write(p, parts, lens, 3);
}

/* the answer's body ended */
static void answer_end(pxy *p) {
  if (p->head.chunk_out) client_write1(p, "0\r\n\r\n", 5);
  p->an = AN_DONE;
  maybe_finish(p);
}

static void answer_bytes(pxy *p, const char *d, size_t n) {
  while (n > 0 && p->an != AN_DONE && p->client) {
    if (p->an == AN_HEAD) {
      if (osb_buf_append(&p->ahead, d, n) != 0) {
        pxy_abort(p);
        return;
      }
      n = 0;
      osb_buf out = {0};
      const char *why;
      char whybuf[64], date[40];
      for (;;) {
        int rc = xd_proxy_answer_head(p->ahead.data, p->ahead.len, p->head_request, p->wants_close,
                                      http_date(date, sizeof date), &p->head, &out, &why, whybuf, sizeof whybuf);
        if (rc == 0) return;
        if (rc == -2) {
          osb_buf_free(&out);
          pxy_abort(p);
          return;
        }
        if (rc < 0) {
          fail(p, rc == -3 ? "invalid answer from" : "cannot reach", why);
          return;
        }
        if (!p->head.informational) break;
        osb_buf_consume(&p->ahead, p->head.head_len); /* a 1xx: not passed on (Node's client drops them) */
        if (p->ahead.len == 0) return;
      }
      client_write1(p, out.data, out.len);
      osb_buf_free(&out);
      p->an = AN_BODY;
      p->an_left = p->head.length;
      /* the body bytes that came with the head */
      osb_buf tail = p->ahead;
      memset(&p->ahead, 0, sizeof p->ahead);
      if (p->head.framing == XD_PROXY_NONE || (p->head.framing == XD_PROXY_LENGTH && p->an_left == 0)) answer_end(p);
      else if (tail.len > p->head.head_len) answer_bytes(p, tail.data + p->head.head_len, tail.len - p->head.head_len);
      osb_buf_free(&tail);
      return;
    }
    /* AN_BODY */
    if (p->head.framing == XD_PROXY_LENGTH) {
      size_t take = n < p->an_left ? n : (size_t)p->an_left;
      client_write1(p, d, take);
      p->an_left -= take;
      n = 0; /* what follows the body is not the client's */
      if (p->an_left == 0) answer_end(p);
    } else if (p->head.framing == XD_PROXY_CHUNKED) {
      ssize_t used = xd_chunked_feed(&p->an_ch, d, n, an_chunk_data, p);
      if (used < 0) {
        fail(p, "cannot reach", "HPE_INVALID_CHUNK_SIZE");
        return;
      }
      n = 0;
      if (xd_chunked_done(&p->an_ch)) answer_end(p);
    } else { /* until the service closes */
      an_chunk_data(p, d, n);
      n = 0;
    }
  }
}

static void up_read_(pxy *p, ssize_t n, const uv_buf_t *b) {
  if (n == 0) return;
  if (n > 0) {
    if (!p->upgrade) answer_bytes(p, b->base, (size_t)n);
    else client_write1(p, b->base, (size_t)n);
    return;
  }
  uv_read_stop(&p->up.s);
  p->up_reading = 0;
  if (p->upgrade) { /* the service ended: the client gets the rest, then the end (an error before any byte: 502) */
    if (n != UV_EOF && !p->sent) {
      fail(p, "cannot reach", uv_err_name((int)n));
      return;
    }
    up_close(p);
    client_close(p, n != UV_EOF);
    return;
  }
  if (p->an == AN_HEAD) {
    fail(p, "cannot reach", n == UV_EOF ? "ECONNRESET" : uv_err_name((int)n));
    return;
  }
  if (p->an == AN_BODY && p->head.framing == XD_PROXY_CLOSE && n == UV_EOF) {
    answer_end(p);
    return;
  }
  if (p->an == AN_BODY) { /* cut short: the client cannot be told but by the connection's end */
    pxy_abort(p);
    return;
  }
  up_close(p);
}

static void up_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  pxy *p = s->data;
  p->depth++;
  up_read_(p, n, b);
  p->depth--;
  pxy_free_if_done(p);
}

static void up_start_reading(pxy *p) {
  if (p->up_reading || p->up_dead || !p->connected) return;
  if (uv_read_start(&p->up.s, up_alloc, up_read) == 0) p->up_reading = 1;
}

static void up_shutdown_done(uv_shutdown_t *sd, int status) {
  (void)status;
  free(sd);
}

/* the client ended its side of an upgraded connection: so does the service's */
static void up_shutdown(pxy *p) {
  if (p->up_dead || !p->up_open || p->up_closing) return;
  uv_shutdown_t *sd = malloc(sizeof *sd);
  if (sd && uv_shutdown(sd, &p->up.s, up_shutdown_done) != 0) free(sd);
}

static void up_connected(uv_connect_t *req, int status) {
  pxy *p = req->data;
  p->depth++;
  if (status == UV_ECANCELED || p->up_closing) {
  } else if (status < 0) fail(p, "cannot reach", uv_err_name(status));
  else {
    p->connected = 1;
    osb_buf pre = p->pre;
    memset(&p->pre, 0, sizeof p->pre);
    if (pre.len) up_write1(p, pre.data, pre.len);
    osb_buf_free(&pre);
    up_start_reading(p);
    if (p->upgrade && p->client_eof) up_shutdown(p);
  }
  p->depth--;
  pxy_free_if_done(p);
}

/* ---- the client's side */

static void client_data_(pxy *p, const char *d, size_t n) {
  if (p->upgrade) {
    up_write1(p, d, n);
    return;
  }
  while (n > 0 && !p->rq_done) {
    if (p->rq == RQ_LENGTH) {
      size_t take = n < p->rq_left ? n : (size_t)p->rq_left;
      up_write1(p, d, take);
      p->rq_left -= take;
      d += take;
      n -= take;
      if (p->rq_left == 0) p->rq_done = 1;
    } else if (p->rq == RQ_CHUNKED) {
      ssize_t used = xd_chunked_feed(&p->rq_ch, d, n, rq_chunk_data, p);
      if (used < 0) { /* bad framing: Go's raw 400 unless an answer started, then the end */
        static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                                  "Connection: close\r\n\r\n400 Bad Request";
        up_close(p);
        if (!p->sent && p->client) {
          client_write1(p, bad, sizeof bad - 1);
          client_close(p, 0);
          pxy_free_if_done(p);
        } else pxy_abort(p);
        return;
      }
      d += used;
      n -= (size_t)used;
      if (xd_chunked_done(&p->rq_ch)) {
        up_write1(p, "0\r\n\r\n", 5);
        p->rq_done = 1;
      }
    } else p->rq_done = 1;
    if (!p->client) return; /* ended meanwhile */
  }
  if (n > 0) { /* the next request: kept for the server */
    if (osb_buf_append(&p->rest, d, n) != 0) {
      pxy_abort(p);
      return;
    }
  }
  if (p->rq_done) {
    if (p->rest.len >= XD_PROXY_REST_MAX) client_pause(p, 1);
    if (p->an == AN_DONE) maybe_finish(p);
  }
}

static void client_data(void *arg, const char *d, size_t n) {
  pxy *p = arg;
  p->depth++;
  client_data_(p, d, n);
  p->depth--;
  pxy_free_if_done(p);
}

static void client_eof(void *arg) {
  pxy *p = arg;
  p->client_eof = 1;
  p->depth++;
  if (p->upgrade) { /* half-close passed on: the service may still answer */
    if (p->connected) up_shutdown(p);
  } else if (!p->rq_done) pxy_abort(p); /* a request cut short */
  p->depth--;
  pxy_free_if_done(p);
}

static void client_end(void *arg) {
  pxy *p = arg;
  p->client = NULL;
  up_close(p);
  pxy_free_if_done(p);
}

static void client_drain(void *arg) {
  pxy *p = arg;
  if (p->up_paused && !p->up_dead) {
    p->up_paused = 0;
    up_start_reading(p);
  }
}

static void noop_data(void *arg, const char *d, size_t n) {
  (void)arg, (void)d, (void)n;
}
static void noop_end(void *arg) { (void)arg; }
static const xd_raw_callbacks no_cbs = {.on_data = noop_data, .on_end = noop_end};

static const xd_raw_callbacks client_cbs = {.on_data = client_data, .on_end = client_end, .on_drain = client_drain};

/* ---- the request head toward the service */

/* request headers never forwarded (proxy.js HOP_BY_HOP; Connection and Upgrade kept for an upgrade) */
static int request_hop(const char *n, int upgrade) {
  static const char *const hop[] = {"keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                                    "trailers", "transfer-encoding", "proxy-connection", "host"};
  if (strcmp(n, "connection") == 0 || strcmp(n, "upgrade") == 0) return !upgrade;
  for (size_t i = 0; i < sizeof hop / sizeof *hop; i++)
    if (strcmp(n, hop[i]) == 0) return 1;
  return 0;
}

/* Go's canonical form of a (lower-case) header name: the first letter and each one after '-' upper case */
static int append_canonical(osb_buf *b, const char *n) {
  int up = 1;
  for (size_t i = 0; n[i]; i++) {
    char ch = up ? (char)toupper((unsigned char)n[i]) : n[i];
    if (osb_buf_append(b, &ch, 1) != 0) return -1;
    up = n[i] == '-';
  }
  return 0;
}

/* the query as the URL parser gives it (url.search): the bytes it percent-encodes in a special URL's query */
static int append_query(osb_buf *b, const char *q) {
  if (!*q) return 0;
  if (osb_buf_append(b, "?", 1) != 0) return -1;
  for (; *q; q++) {
    int rc = strchr("\"'<>", *q) ? osb_buf_appendf(b, "%%%02X", (unsigned char)*q) : osb_buf_append(b, q, 1);
    if (rc != 0) return -1;
  }
  return 0;
}

static int method_no_default_body(const char *m) {
  static const char *const ms[] = {"GET", "HEAD", "DELETE", "OPTIONS", "TRACE", "CONNECT"};
  for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
    if (strcmp(m, ms[i]) == 0) return 1;
  return 0;
}

static int request_head(pxy *p, const xd_req *req, const char *rest) {
  osb_buf *b = &p->pre;
  int rc = osb_buf_appendf(b, "%s %s", req->method, rest ? rest : "/");
  if (rc == 0) rc = append_query(b, req->query);
  if (rc == 0) rc = osb_buf_append_str(b, " HTTP/1.1\r\n");
  for (size_t i = 0; i < req->nheaders && rc == 0; i++) {
    const char *n = req->header_kv[2 * i], *v = req->header_kv[2 * i + 1];
    if (request_hop(n, p->upgrade)) continue;
    if (!p->self && (strcmp(n, "opensandbox-secure-access") == 0 || strcmp(n, "x-execd-access-token") == 0)) continue;
    rc = append_canonical(b, n);
    if (rc == 0) rc = osb_buf_appendf(b, ": %s\r\n", v);
  }
  if (rc != 0) return rc;
  if (p->self && p->m->self_socket) rc = osb_buf_append_str(b, "Host: localhost\r\n");
  else rc = osb_buf_appendf(b, "Host: 127.0.0.1:%d\r\n", p->self ? p->m->self_port : p->port);
  if (rc == 0 && !p->upgrade) {
    rc = osb_buf_append_str(b, "Connection: close\r\n");
    if (rc == 0 && p->rq == RQ_CHUNKED) rc = osb_buf_append_str(b, "Transfer-Encoding: chunked\r\n");
    else if (rc == 0 && p->rq == RQ_BODY_NONE && !xd_header(req, "content-length") && !method_no_default_body(req->method))
      rc = osb_buf_append_str(b, "Content-Length: 0\r\n");
  }
  if (rc == 0) rc = osb_buf_append(b, "\r\n", 2);
  return rc;
}

static int connect_up(pxy *p) {
  proxy_mod *m = p->m;
  p->up.h.data = p;
  p->connect.data = p;
  int rc;
  if (p->self && m->self_socket) {
    if ((rc = uv_pipe_init(m->loop, &p->up.pipe, 0)) != 0) return rc;
    p->up_open = 1;
    uv_pipe_connect(&p->connect, &p->up.pipe, m->self_socket, up_connected);
    return 0;
  }
  struct sockaddr_storage ss;
  const char *host = p->self && m->self_host ? m->self_host : "127.0.0.1";
  int port = p->self ? m->self_port : p->port;
  if ((rc = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss)) != 0 &&
      (rc = uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss)) != 0)
    return rc;
  if ((rc = uv_tcp_init(m->loop, &p->up.tcp)) != 0) return rc;
  p->up_open = 1;
  uv_tcp_nodelay(&p->up.tcp, 1);
  return uv_tcp_connect(&p->connect, &p->up.tcp, (const struct sockaddr *)&ss, up_connected);
}

/* ---- module */

void *xd_proxy_new(const xd_ctx *ctx) {
  proxy_mod *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->loop = ctx->loop;
  m->self_port = EXECD_PORT;
  return m;
}

int xd_proxy_set_self(void *module, const char *socket_path, const char *host, int port) {
  proxy_mod *m = module;
  free(m->self_socket);
  free(m->self_host);
  m->self_socket = socket_path ? strdup(socket_path) : NULL;
  m->self_host = host ? strdup(host) : NULL;
  m->self_port = port;
  return (socket_path && !m->self_socket) || (host && !m->self_host) ? -1 : 0;
}

void xd_proxy_close(void *module) {
  proxy_mod *m = module;
  if (!m) return;
  m->closing = 1;
  m->live++; /* held while the exchanges are ended */
  while (m->list) {
    pxy *p = m->list;
    m->list = p->next;
    if (m->list) m->list->prev = NULL;
    p->prev = p->next = NULL;
    client_close(p, 1);
    up_close(p);
    pxy_free_if_done(p);
  }
  m->live--;
  if (m->live == 0) {
    free(m->self_socket);
    free(m->self_host);
    free(m);
  }
}

/* Out of memory before the exchange starts: a 500, and the connection closed after it (its body is unread). */
static void oom_close(xd_res *res) {
#define OOM_BODY "{\"code\":\"RUNTIME_ERROR\",\"message\":\"out of memory\"}"
  static const char head[] = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json; charset=utf-8\r\n"
                             "Connection: close\r\nContent-Length: 50\r\n\r\n" OOM_BODY;
  _Static_assert(sizeof OOM_BODY - 1 == 50, "the 500's Content-Length");
#undef OOM_BODY
  xd_raw *r = xd_upgrade(res, head, sizeof head - 1, &no_cbs, NULL);
  if (r) xd_raw_close(r, 0);
}

int xd_proxy_route(void *module, const xd_req *req, xd_res *res) {
  proxy_mod *m = module;
  int port = xd_proxy_port(req->path);
  if (port < 0) return 0;
  int upgrade = xd_upgrade_of(req) != NULL;
  if (port == 0) { /* the body was read by the server (xd_server_native_candidate) */
    if (upgrade) {
      static const char bad[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
      xd_raw *r = xd_upgrade(res, bad, sizeof bad - 1, &no_cbs, NULL);
      if (r) xd_raw_close(r, 0);
      return 1;
    }
    const char *seg = req->path + 7, *end = strchr(seg, '/');
    osb_buf msg = {0};
    if (osb_buf_append_str(&msg, "invalid port: ") != 0 || osb_buf_append(&msg, seg, end ? (size_t)(end - seg) : strlen(seg)) != 0) {
      osb_buf_free(&msg);
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      return 1;
    }
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", msg.data);
    osb_buf_free(&msg);
    return 1;
  }
  pxy *p = calloc(1, sizeof *p);
  if (!p || !(p->rbuf = malloc(XD_PROXY_READ))) {
    free(p);
    oom_close(res); /* the body is not read: answered, then the connection closes */
    return 1;
  }
  p->m = m;
  p->port = port;
  p->self = port == EXECD_PORT;
  p->upgrade = upgrade;
  p->head_request = strcmp(req->method, "HEAD") == 0;
  p->wants_close = req->wants_close;
  const char *cl = xd_header(req, "content-length");
  if (xd_header(req, "transfer-encoding")) p->rq = RQ_CHUNKED;
  else if (cl && strtoull(cl, NULL, 10) > 0) {
    p->rq = RQ_LENGTH;
    p->rq_left = strtoull(cl, NULL, 10);
  } else p->rq = RQ_BODY_NONE;
  p->rq_done = !upgrade && p->rq == RQ_BODY_NONE;
  if (request_head(p, req, strchr(req->path + 7, '/')) != 0) {
    osb_buf_free(&p->pre);
    free(p->rbuf);
    free(p);
    return 0;
  }
  m->live++;
  p->next = m->list;
  if (m->list) m->list->prev = p;
  m->list = p;
  /* the client's connection is ours from after its head (req is not used after this) */
  p->depth++;
  p->client = xd_upgrade(res, NULL, 0, &client_cbs, p);
  if (p->client) {
    xd_raw_on_eof(p->client, client_eof);
    int rc = connect_up(p);
    if (rc != 0) fail(p, "cannot reach", uv_err_name(rc));
  }
  p->depth--;
  pxy_free_if_done(p);
  return 1;
}
