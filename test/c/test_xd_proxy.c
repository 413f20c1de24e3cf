/* The C execd's reverse proxy (src/execd/proxy.c, ANY /proxy/{port}/{path}) through the real server (server.c) on
 * loopback, against a real HTTP service on loopback started here (a thread of blocking sockets). Checked byte for
 * byte (Date values masked): what the service receives (path and query, headers without hop-by-hop and token headers,
 * Host, Connection: close, re-chunked bodies), what the client gets (heads without hop-by-hop headers, chunked when the
 * length is not known, 1xx dropped, HEAD without body), keep-alive and pipelining through it and back to the server's
 * own routes, /proxy/44772 to execd itself on a Unix socket (a second server; tokens kept; ENOENT as "the sandbox"),
 * the 400/502 answers (bad port, refused port, reset,
 * an answer Node cannot pass on), a WebSocket echo (upgrade replayed, bytes both ways, half-close passed on), a body
 * larger than the server's 64 MiB limit streamed with a bounded footprint, an answer held back by a client that does
 * not read (the service blocks: backpressure), a client leaving mid-answer; and the framing readers as units. */
#include "harness.h"
#include "xd_loopback.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/un.h>

#include "core/buf.h"
#include "execd/proxy.h"
#include "execd/server.h"
#include "execd/xd.h"

#define TOKEN "tok"
#define BIG (80u * 1024u * 1024u)

static int port;    /* the server */
static char sock_b[100]; /* the second server, B (execd itself for the first), on a Unix socket */
static int up_port; /* the service */
static int closed_port;
static int up_fd = -1;
static _Atomic int up_stop;
static _Atomic uint64_t up_sent;   /* bytes of /big answers the service wrote */
static _Atomic int up_conns;       /* connections the service accepted */
static char up_head[8192];         /* the last request head the service got (written before it answers) */

/* ------------------------------------------------------------ the service (a thread of its own) */

static uint64_t fnv(uint64_t h, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
  return h;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

typedef struct {
  int fd;
  char buf[65536];
  size_t len, pos;
} conn_in;

/* the next byte, or -1 at the end */
static int in_byte(conn_in *c) {
  if (c->pos == c->len) {
    ssize_t r = read(c->fd, c->buf, sizeof c->buf);
    if (r <= 0) return -1;
    c->len = (size_t)r;
    c->pos = 0;
  }
  return (unsigned char)c->buf[c->pos++];
}

/* reads a request body (Content-Length or chunked): its length and hash; -1 on bad framing */
static int read_body(conn_in *c, long long cl, int chunked, uint64_t *len, uint64_t *hash) {
  *len = 0;
  *hash = 1469598103934665603ull;
  if (!chunked) {
    while ((long long)*len < cl) {
      if (c->pos == c->len && in_byte(c) >= 0) c->pos--;
      if (c->pos == c->len) return -1;
      size_t n = c->len - c->pos;
      if ((long long)n > cl - (long long)*len) n = (size_t)(cl - (long long)*len);
      *hash = fnv(*hash, c->buf + c->pos, n);
      c->pos += n;
      *len += n;
    }
    return 0;
  }
  for (;;) {
    char line[256];
    size_t l = 0;
    int ch;
    while ((ch = in_byte(c)) >= 0 && ch != '\n')
      if (l < sizeof line - 1) line[l++] = (char)ch;
    if (ch < 0) return -1;
    line[l] = 0;
    unsigned long long size = strtoull(line, NULL, 16);
    if (size == 0) { /* trailer: up to the empty line */
      for (;;) {
        l = 0;
        while ((ch = in_byte(c)) >= 0 && ch != '\n') l++;
        if (ch < 0) return -1;
        if (l <= 1) return 0;
      }
    }
    for (unsigned long long left = size; left > 0;) {
      if (c->pos == c->len) {
        if (in_byte(c) < 0) return -1;
        c->pos--;
      }
      size_t k = c->len - c->pos < left ? c->len - c->pos : (size_t)left;
      *hash = fnv(*hash, c->buf + c->pos, k);
      c->pos += k;
      left -= k;
    }
    *len += size;
    if (in_byte(c) != '\r' || in_byte(c) != '\n') return -1;
  }
}

static void serve(int fd) {
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  conn_in *c = calloc(1, sizeof *c);
  c->fd = fd;
  /* the head */
  char head[8192];
  size_t hl = 0;
  int ch;
  while (hl < sizeof head - 1 && (ch = in_byte(c)) >= 0) {
    head[hl++] = (char)ch;
    if (hl >= 4 && memcmp(head + hl - 4, "\r\n\r\n", 4) == 0) break;
  }
  head[hl] = 0;
  memcpy(up_head, head, hl + 1);
  char path[1024] = "";
  sscanf(head, "%*s %1023s", path);
  path[strcspn(path, "?")] = 0;
  const char *clh = strcasestr(head, "\r\nContent-Length: ");
  long long cl = clh ? atoll(clh + 18) : 0;
  int chunked = strcasestr(head, "\r\nTransfer-Encoding: chunked") != NULL;
  if (strncmp(path, "/echo", 5) == 0) {
    uint64_t len, hash;
    if (read_body(c, cl, chunked, &len, &hash) != 0) goto out;
    char body[9000];
    int bn = snprintf(body, sizeof body, "len=%llu hash=%016llx\n%s", (unsigned long long)len, (unsigned long long)hash, head);
    char h[256];
    int n = snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nKeep-Alive: timeout=5\r\nContent-Length: %d\r\n\r\n", bn);
    if (write_all(fd, h, (size_t)n) == 0) write_all(fd, body, (size_t)bn);
  } else if (strcmp(path, "/chunked") == 0) {
    static const char a[] = "HTTP/1.1 201 Made It\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\nConnection: keep-alive\r\n\r\n"
                            "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";
    write_all(fd, a, sizeof a - 1);
  } else if (strcmp(path, "/close") == 0) {
    static const char a[] = "HTTP/1.0 200 \r\nContent-Type: text/plain\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\n\r\nuntil close";
    write_all(fd, a, sizeof a - 1);
  } else if (strcmp(path, "/continue") == 0) {
    static const char a[] = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n";
    write_all(fd, a, sizeof a - 1);
  } else if (strcmp(path, "/head") == 0) {
    static const char a[] = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
    write_all(fd, a, sizeof a - 1);
  } else if (strcmp(path, "/nonsense") == 0) {
    static const char a[] = "HTTP/1.1 099 X\r\nContent-Length: 0\r\n\r\n";
    write_all(fd, a, sizeof a - 1);
  } else if (strcmp(path, "/garbage") == 0) {
    static const char a[] = "SSH-2.0-OpenSSH\r\n";
    write_all(fd, a, sizeof a - 1);
  } else if (strcmp(path, "/reset") == 0) {
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  } else if (strcmp(path, "/big") == 0) {
    char h[128];
    int n = snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %u\r\n\r\n", BIG);
    if (write_all(fd, h, (size_t)n) == 0) {
      static char zeros[65536];
      for (uint64_t sent = 0; sent < BIG; sent += sizeof zeros) {
        if (write_all(fd, zeros, sizeof zeros) != 0) break;
        up_sent += sizeof zeros;
      }
    }
  } else if (strcmp(path, "/ws") == 0) {
    static const char a[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
    write_all(fd, a, sizeof a - 1);
    if (c->pos < c->len) write_all(fd, c->buf + c->pos, c->len - c->pos);
    char b[4096];
    ssize_t r;
    while ((r = read(fd, b, sizeof b)) > 0) /* echo until the client's end */
      if (write_all(fd, b, (size_t)r) != 0) break;
  }
out:
  free(c);
}

static void *service(void *arg) {
  (void)arg;
  while (!up_stop) {
    struct pollfd pf = {up_fd, POLLIN, 0};
    if (poll(&pf, 1, 50) <= 0) continue;
    int fd = accept(up_fd, NULL, NULL);
    if (fd < 0) continue;
    up_conns++;
    serve(fd);
    close(fd);
  }
  return NULL;
}

static int listen_any(int *p) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t al = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *p = ntohs(a.sin_port);
  return fd;
}

/* ------------------------------------------------------------ the client's side */

static int send_all(int fd, const char *p, size_t n) { return write_all(fd, p, n); }

/* Reads one answer (head + body by its framing; chunked decoded) from fd, buffered in *in (what follows is kept).
 * *head gets the head with Date values masked as "DATE", *body the body. 0, or -1. */
static int read_answer(int fd, osb_buf *in, int head_request, osb_buf *head, osb_buf *body) {
  char tmp[65536];
  char *e;
  while (!(e = in->data ? strstr(in->data, "\r\n\r\n") : NULL)) {
    ssize_t r = read(fd, tmp, sizeof tmp);
    if (r <= 0) return -1;
    osb_buf_append(in, tmp, (size_t)r);
  }
  size_t hl = (size_t)(e - in->data) + 4;
  /* the head, Date masked */
  for (size_t i = 0; i < hl;) {
    const char *line = in->data + i, *le = strstr(line, "\r\n");
    size_t ll = (size_t)(le - line) + 2;
    if (ll > 6 && strncmp(line, "Date: ", 6) == 0) osb_buf_append_str(head, "Date: DATE\r\n");
    else osb_buf_append(head, line, ll);
    i += ll;
  }
  osb_buf_consume(in, hl);
  int status = atoi(head->data + 9);
  const char *cl = strcasestr(head->data, "\r\nContent-Length: ");
  int chunked = strcasestr(head->data, "\r\nTransfer-Encoding: chunked") != NULL;
  if (head_request || status == 204 || status == 304 || status == 101) return 0;
  if (cl || !chunked) {
    size_t want = cl ? (size_t)atoll(cl + 18) : SIZE_MAX;
    for (;;) {
      size_t n = in->len < want - body->len ? in->len : want - body->len;
      osb_buf_append(body, in->data, n);
      osb_buf_consume(in, n);
      if (body->len == want) return 0;
      ssize_t r = read(fd, tmp, sizeof tmp);
      if (r <= 0) return cl ? -1 : 0;
      osb_buf_append(in, tmp, (size_t)r);
    }
  }
  for (;;) { /* chunked */
    char *le;
    while (!(le = in->data ? strstr(in->data, "\r\n") : NULL)) {
      ssize_t r = read(fd, tmp, sizeof tmp);
      if (r <= 0) return -1;
      osb_buf_append(in, tmp, (size_t)r);
    }
    size_t size = strtoul(in->data, NULL, 16);
    size_t ll = (size_t)(le - in->data) + 2;
    while (in->len < ll + size + 2) {
      ssize_t r = read(fd, tmp, sizeof tmp);
      if (r <= 0) return -1;
      osb_buf_append(in, tmp, (size_t)r);
    }
    osb_buf_append(body, in->data + ll, size);
    osb_buf_consume(in, ll + size + 2);
    if (size == 0) return 0;
  }
}

/* one exchange on a fresh connection: the request, then the answer; the rest of the connection is left unread */
static int exchange(const char *req, int head_request, osb_buf *head, osb_buf *body) {
  int fd = xd_dial(port, 10);
  if (fd < 0) return -1;
  osb_buf in = {0};
  int rc = send_all(fd, req, strlen(req)) == 0 ? read_answer(fd, &in, head_request, head, body) : -1;
  osb_buf_free(&in);
  close(fd);
  return rc;
}

/* the connection's end comes (EOF) within the read timeout */
static int sees_eof(int fd) {
  char b[256];
  ssize_t r;
  while ((r = read(fd, b, sizeof b)) > 0) {
  }
  return r == 0;
}

static char up_head_copy[8192];
static void take_up_head(void) { memcpy(up_head_copy, up_head, sizeof up_head_copy); }

/* ------------------------------------------------------------ the tests */

static void test_get_headers(void) {
  char req[1024], want[1024];
  snprintf(req, sizeof req,
           "GET /proxy/%d/echo/a%%41?x='y'&z=%%22 HTTP/1.1\r\nHost: h\r\nX-Probe: a\r\nopensandbox-secure-access: s\r\n"
           "X-EXECD-ACCESS-TOKEN: " TOKEN "\r\nKeep-Alive: 5\r\nTE: trailers\r\nx-multi-word-name: v\r\nConnection: close\r\n"
           "Upgrade-Insecure-Requests: 1\r\n\r\n", up_port);
  osb_buf head = {0}, body = {0};
  CHECK(exchange(req, 0, &head, &body) == 0);
  take_up_head();
  /* the path canonical (%41 is A), the query as the URL parser leaves it; tokens and hop-by-hop dropped; Go's names */
  snprintf(want, sizeof want,
           "GET /echo/aA?x=%%27y%%27&z=%%22 HTTP/1.1\r\nX-Probe: a\r\nX-Multi-Word-Name: v\r\nUpgrade-Insecure-Requests: 1\r\n"
           "Host: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", up_port);
  CHECK_STR(up_head_copy, want);
  snprintf(want, sizeof want, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nDate: DATE\r\nConnection: close\r\n\r\n",
           body.len);
  CHECK_STR(head.data, want);
  CHECK(body.data && strncmp(body.data, "len=0 hash=14650fb0739d0383\nGET /echo/aA", 40) == 0);
  osb_buf_free(&head);
  osb_buf_free(&body);
}

static void test_keepalive_pipelined(void) {
  int fd = xd_dial(port, 10);
  char req[1024];
  /* a POST with a body, a GET and execd's own /ping, in one write */
  int n = snprintf(req, sizeof req,
                   "POST /proxy/%d/echo/1 HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\nContent-Length: 5\r\n\r\nhello"
                   "GET /proxy/%d/chunked HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n"
                   "GET /ping HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n", up_port, up_port);
  CHECK(send_all(fd, req, (size_t)n) == 0);
  osb_buf in = {0}, h1 = {0}, b1 = {0}, h2 = {0}, b2 = {0}, h3 = {0}, b3 = {0};
  CHECK(read_answer(fd, &in, 0, &h1, &b1) == 0);
  CHECK(b1.data && strstr(b1.data, "len=5 hash=") == b1.data);
  CHECK(b1.data && strstr(b1.data, "\r\nContent-Length: 5\r\nHost: 127.0.0.1:") != NULL);
  CHECK(read_answer(fd, &in, 0, &h2, &b2) == 0);
  /* the service's reason phrase, its headers without the hop-by-hop ones, chunked again; no trailer */
  CHECK_STR(h2.data, "HTTP/1.1 201 Made It\r\nX-Up: 1\r\nDate: DATE\r\nTransfer-Encoding: chunked\r\n\r\n");
  CHECK_STR(b2.data, "hello world");
  CHECK(read_answer(fd, &in, 0, &h3, &b3) == 0);
  CHECK_STR(h3.data, "HTTP/1.1 200 OK\r\nDate: DATE\r\nContent-Length: 0\r\n\r\n");
  CHECK(in.len == 0);
  osb_buf_free(&in), osb_buf_free(&h1), osb_buf_free(&b1), osb_buf_free(&h2), osb_buf_free(&b2), osb_buf_free(&h3),
      osb_buf_free(&b3);
  close(fd);
}

static void test_chunked_request(void) {
  int fd = xd_dial(port, 10);
  char req[1024];
  int n = snprintf(req, sizeof req,
                   "PUT /proxy/%d/echo/c HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "3;x=y\r\nabc\r\n", up_port);
  CHECK(send_all(fd, req, (size_t)n) == 0);
  /* the rest in pieces: the size line split, a bare LF, a trailer */
  CHECK(send_all(fd, "1", 1) == 0);
  CHECK(send_all(fd, "0\r\n0123456789abcdef\n", 20) == 0);
  CHECK(send_all(fd, "0\r\nX-T: 1\r\n\r\n", 14) == 0);
  osb_buf in = {0}, h = {0}, b = {0};
  CHECK(read_answer(fd, &in, 0, &h, &b) == 0);
  char want[64];
  snprintf(want, sizeof want, "len=19 hash=%016llx\n",
           (unsigned long long)fnv(1469598103934665603ull, "abc0123456789abcdef", 19));
  CHECK(b.data && strncmp(b.data, want, strlen(want)) == 0);
  CHECK(b.data && strstr(b.data, "\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n") != NULL);
  osb_buf_free(&in), osb_buf_free(&h), osb_buf_free(&b);
  close(fd);
}

static void test_close_delimited_head_1xx(void) {
  int fd = xd_dial(port, 10);
  char req[1024];
  int n = snprintf(req, sizeof req,
                   "GET /proxy/%d/close HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n"
                   "HEAD /proxy/%d/head HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n"
                   "DELETE /proxy/%d/continue HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n",
                   up_port, up_port, up_port);
  CHECK(send_all(fd, req, (size_t)n) == 0);
  osb_buf in = {0}, h = {0}, b = {0};
  /* a body that ends with the service's connection: chunked to the client, whose connection goes on; the empty
   * reason is Node's standard one; the service's own Date is kept */
  CHECK(read_answer(fd, &in, 0, &h, &b) == 0);
  CHECK_STR(h.data, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: DATE\r\nTransfer-Encoding: chunked\r\n\r\n");
  CHECK_STR(b.data, "until close");
  osb_buf_reset(&h), osb_buf_reset(&b);
  CHECK(read_answer(fd, &in, 1, &h, &b) == 0);
  CHECK_STR(h.data, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nDate: DATE\r\n\r\n");
  osb_buf_reset(&h);
  CHECK(read_answer(fd, &in, 0, &h, &b) == 0); /* the 100 is not passed on */
  CHECK_STR(h.data, "HTTP/1.1 204 No Content\r\nX-A: b\r\nDate: DATE\r\n\r\n");
  CHECK(b.len == 0 && in.len == 0);
  osb_buf_free(&in), osb_buf_free(&h), osb_buf_free(&b);
  close(fd);
}

/* /proxy/44772 is execd itself, here on a Unix socket (a second server, B): the token goes with the request (it checks
 * its own) */
static void test_self(void) {
  osb_buf h = {0}, b = {0};
  CHECK(exchange("GET /proxy/44772/ping HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\nConnection: close\r\n\r\n", 0,
                 &h, &b) == 0);
  CHECK_STR(h.data, "HTTP/1.1 200 OK\r\nDate: DATE\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  osb_buf_reset(&h);
  /* the inner request is refused without the token: here the outer one is first */
  CHECK(exchange("GET /proxy/44772/ping HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", 0, &h, &b) == 0);
  CHECK(h.data && strncmp(h.data, "HTTP/1.1 401 Unauthorized\r\n", 27) == 0);
  osb_buf_reset(&h), osb_buf_reset(&b);
  /* a bad port inside: the inner server's 400, passed on with its headers */
  CHECK(exchange("GET /proxy/44772/proxy/0x50/ HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\nConnection: close\r\n\r\n",
                 0, &h, &b) == 0);
  CHECK_STR(h.data, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nDate: DATE\r\n"
                    "Content-Length: 62\r\nConnection: close\r\n\r\n");
  CHECK_STR(b.data, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid port: 0x50\"}");
  /* through B's own proxy on to the service: what B forwards */
  osb_buf_reset(&h), osb_buf_reset(&b);
  char req[512];
  snprintf(req, sizeof req, "GET /proxy/44772/proxy/%d/echo/b HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN
                            "\r\nX-Probe: 2\r\nConnection: close\r\n\r\n", up_port);
  CHECK(exchange(req, 0, &h, &b) == 0);
  char want[256];
  snprintf(want, sizeof want, "len=0 hash=14650fb0739d0383\nGET /echo/b HTTP/1.1\r\nX-Probe: 2\r\nHost: 127.0.0.1:%d\r\n"
                              "Connection: close\r\n\r\n", up_port);
  CHECK_STR(b.data, want);
  /* B's own self is a socket that is not there: "the sandbox" */
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {0};
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", sock_b);
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  static const char self_req[] = "GET /proxy/44772/ping HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n";
  CHECK(send_all(fd, self_req, sizeof self_req - 1) == 0);
  osb_buf in = {0};
  osb_buf_reset(&h), osb_buf_reset(&b);
  CHECK(read_answer(fd, &in, 0, &h, &b) == 0);
  CHECK_STR(b.data, "{\"code\":\"PROXY_ERROR\",\"message\":\"cannot reach the sandbox: ENOENT\"}");
  close(fd);
  osb_buf_free(&in), osb_buf_free(&h), osb_buf_free(&b);
}

static void test_errors(void) {
  char req[1024], want[512];
  osb_buf h = {0}, b = {0};
  /* refused: the 502, and the connection goes on (the request's body read to its end first) */
  int fd = xd_dial(port, 10);
  int n = snprintf(req, sizeof req,
                   "POST /proxy/%d/x HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\nContent-Length: 3\r\n\r\nabc"
                   "GET /ping HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n", closed_port);
  CHECK(send_all(fd, req, (size_t)n) == 0);
  osb_buf in = {0};
  CHECK(read_answer(fd, &in, 0, &h, &b) == 0);
  snprintf(want, sizeof want, "{\"code\":\"PROXY_ERROR\",\"message\":\"cannot reach port %d: ECONNREFUSED\"}", closed_port);
  CHECK_STR(b.data, want);
  snprintf(want, sizeof want, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json; charset=utf-8\r\nDate: DATE\r\n"
                              "Content-Length: %zu\r\n\r\n", b.len);
  CHECK_STR(h.data, want);
  osb_buf_reset(&h), osb_buf_reset(&b);
  CHECK(read_answer(fd, &in, 0, &h, &b) == 0);
  CHECK(h.data && strncmp(h.data, "HTTP/1.1 200 OK\r\n", 17) == 0);
  osb_buf_free(&in);
  close(fd);
  /* bad ports: 400 after the body */
  osb_buf_reset(&h), osb_buf_reset(&b);
  CHECK(exchange("POST /proxy/70000/x HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\nContent-Length: 2\r\n"
                 "Connection: close\r\n\r\nab", 0, &h, &b) == 0);
  CHECK_STR(b.data, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid port: 70000\"}");
  osb_buf_reset(&h), osb_buf_reset(&b);
  CHECK(exchange("GET /proxy/ HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\nConnection: close\r\n\r\n", 0, &h, &b) == 0);
  CHECK_STR(b.data, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid port: \"}");
  /* an answer Node's server cannot write, something that is not HTTP, a reset before any answer */
  struct {
    const char *path, *msg;
  } cases[] = {{"nonsense", "invalid answer from port %d: Invalid status code: 99"},
               {"garbage", "cannot reach port %d: HPE_INVALID_CONSTANT"},
               {"reset", "cannot reach port %d: ECONNRESET"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    osb_buf_reset(&h), osb_buf_reset(&b);
    snprintf(req, sizeof req, "GET /proxy/%d/%s HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\nConnection: close\r\n\r\n",
             up_port, cases[i].path);
    CHECK(exchange(req, 0, &h, &b) == 0);
    char msg[128];
    snprintf(msg, sizeof msg, cases[i].msg, up_port);
    snprintf(want, sizeof want, "{\"code\":\"PROXY_ERROR\",\"message\":\"%s\"}", msg);
    CHECK_STR(b.data, want);
    CHECK(h.data && strncmp(h.data, "HTTP/1.1 502 Bad Gateway\r\n", 26) == 0 && strstr(h.data, "\r\nConnection: close\r\n"));
  }
  osb_buf_free(&h), osb_buf_free(&b);
}

static void test_websocket(void) {
  char req[1024], want[1024];
  int fd = xd_dial(port, 10);
  int n = snprintf(req, sizeof req,
                   "GET /proxy/%d/ws?a=1 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                   "X-EXECD-ACCESS-TOKEN: " TOKEN "\r\nOpenSandbox-Secure-Access: s\r\n\r\n\x81\x05hello", up_port);
  CHECK(send_all(fd, req, (size_t)n) == 0);
  char got[256];
  size_t gl = 0;
  static const char answer[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello";
  while (gl < sizeof answer - 1) {
    ssize_t r = read(fd, got + gl, sizeof got - 1 - gl);
    if (r <= 0) break;
    gl += (size_t)r;
  }
  got[gl] = 0;
  CHECK_STR(got, answer);
  take_up_head();
  snprintf(want, sizeof want,
           "GET /ws?a=1 HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-Websocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
           "Sec-Websocket-Version: 13\r\nHost: 127.0.0.1:%d\r\n\r\n", up_port);
  CHECK_STR(up_head_copy, want);
  /* more bytes both ways, then the client's half-close reaches the service, whose end reaches the client */
  CHECK(send_all(fd, "\x82\x03" "abc", 5) == 0);
  gl = 0;
  while (gl < 5) {
    ssize_t r = read(fd, got + gl, 5 - gl);
    if (r <= 0) break;
    gl += (size_t)r;
  }
  CHECK(gl == 5 && memcmp(got, "\x82\x03" "abc", 5) == 0);
  shutdown(fd, SHUT_WR);
  CHECK(sees_eof(fd));
  close(fd);
  /* a refused port: proxy.js's raw 502; a bad port: its raw 400 */
  fd = xd_dial(port, 10);
  n = snprintf(req, sizeof req, "GET /proxy/%d/ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                "X-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n", closed_port);
  CHECK(send_all(fd, req, (size_t)n) == 0);
  gl = 0;
  ssize_t r;
  while ((r = read(fd, got + gl, sizeof got - 1 - gl)) > 0) gl += (size_t)r;
  got[gl] = 0;
  char body[128];
  int bl = snprintf(body, sizeof body, "{\"code\":\"PROXY_ERROR\",\"message\":\"cannot reach port %d\"}", closed_port);
  snprintf(want, sizeof want, "HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                              "Connection: close\r\n\r\n%s", bl, body);
  CHECK_STR(got, want);
  close(fd);
  fd = xd_dial(port, 10);
  static const char bad[] = "GET /proxy/x/ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                            "X-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n";
  CHECK(send_all(fd, bad, sizeof bad - 1) == 0);
  gl = 0;
  while ((r = read(fd, got + gl, sizeof got - 1 - gl)) > 0) gl += (size_t)r;
  got[gl] = 0;
  CHECK_STR(got, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  close(fd);
}

static long maxrss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* A body over the server's 64 MiB limit (no 413: streamed), Content-Length and chunked */
static void test_large_body(void) {
  long before = maxrss_kb();
  char *block = malloc(1u << 20);
  for (size_t i = 0; i < (1u << 20); i++) block[i] = (char)(i * 7 + 3);
  uint64_t want_hash = 1469598103934665603ull;
  for (unsigned i = 0; i < BIG >> 20; i++) want_hash = fnv(want_hash, block, 1u << 20);
  for (int chunked = 0; chunked <= 1; chunked++) {
    int fd = xd_dial(port, 20);
    char req[512];
    int n = chunked ? snprintf(req, sizeof req, "POST /proxy/%d/echo/big HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN
                                                "\r\nTransfer-Encoding: chunked\r\n\r\n", up_port)
                    : snprintf(req, sizeof req, "POST /proxy/%d/echo/big HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN
                                                "\r\nContent-Length: %u\r\n\r\n", up_port, BIG);
    int ok = send_all(fd, req, (size_t)n) == 0;
    for (unsigned i = 0; ok && i < BIG >> 20; i++) {
      if (chunked) ok = send_all(fd, "100000\r\n", 8) == 0;
      ok = ok && send_all(fd, block, 1u << 20) == 0;
      if (chunked) ok = ok && send_all(fd, "\r\n", 2) == 0;
    }
    if (chunked) ok = ok && send_all(fd, "0\r\n\r\n", 5) == 0;
    CHECK(ok);
    osb_buf in = {0}, h = {0}, b = {0};
    CHECK(read_answer(fd, &in, 0, &h, &b) == 0);
    char want[64];
    snprintf(want, sizeof want, "len=%u hash=%016llx\n", BIG, (unsigned long long)want_hash);
    CHECK(b.data && strncmp(b.data, want, strlen(want)) == 0);
    if (!b.data || strncmp(b.data, want, strlen(want)) != 0) printf("  got %.300s\n", b.data ? b.data : h.data ? h.data : "(nothing)");
    osb_buf_free(&in), osb_buf_free(&h), osb_buf_free(&b);
    close(fd);
  }
  free(block);
  long grown = maxrss_kb() - before;
#ifndef __SANITIZE_ADDRESS__ /* ASan keeps freed blocks in quarantine: the figure says nothing there */
  if (grown > 48 * 1024) printf("  RSS grew %ld KiB over 2 x %u MiB through the proxy\n", grown, BIG >> 20);
  CHECK(grown < 48 * 1024);
#else
  (void)grown;
#endif
}

/* An answer the client does not read: the service ends up blocked (bounded by the socket buffers and the proxy's
 * high-water mark), then everything arrives once the client reads; a client that leaves mid-answer ends it */
static void test_backpressure(void) {
  char req[256];
  int fd = xd_dial(port, 20);
  int n = snprintf(req, sizeof req, "GET /proxy/%d/big HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\n\r\n", up_port);
  up_sent = 0;
  CHECK(send_all(fd, req, (size_t)n) == 0);
  /* wait (10 s at most) until the service's writes stall: 300 ms without progress */
  uint64_t last = 0;
  int still = 0;
  for (int i = 0; i < 200 && still < 6; i++) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    uint64_t now = up_sent;
    still = now == last && now > 0 ? still + 1 : 0;
    last = now;
  }
  CHECK(still >= 6);
  CHECK(last < BIG / 2); /* held back, not buffered */
  osb_buf in = {0}, h = {0}, b = {0};
  CHECK(read_answer(fd, &in, 0, &h, &b) == 0);
  CHECK(b.len == BIG);
  osb_buf_free(&in), osb_buf_free(&h), osb_buf_free(&b);
  /* the same connection goes on */
  static const char ping[] = "GET /ping HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN "\r\nConnection: close\r\n\r\n";
  CHECK(send_all(fd, ping, sizeof ping - 1) == 0);
  CHECK(read_answer(fd, &in, 0, &h, &b) == 0);
  close(fd);
  osb_buf_free(&in), osb_buf_free(&h), osb_buf_free(&b);
  /* leaving mid-answer */
  fd = xd_dial(port, 20);
  CHECK(send_all(fd, req, (size_t)n) == 0);
  char tmp[4096];
  CHECK(read(fd, tmp, sizeof tmp) > 0);
  struct linger lg = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(fd);
  /* the server goes on */
  osb_buf_reset(&h), osb_buf_reset(&b);
  CHECK(exchange(ping, 0, &h, &b) == 0);
  CHECK(h.data && strncmp(h.data, "HTTP/1.1 200 OK\r\n", 17) == 0);
  osb_buf_free(&h), osb_buf_free(&b);
}

/* a client that half-closes after its whole request still gets the answer; one that ends it mid-body gets nothing */
static void test_half_close(void) {
  char req[512];
  int fd = xd_dial(port, 10);
  int n = snprintf(req, sizeof req, "POST /proxy/%d/echo/h HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN
                                    "\r\nContent-Length: 2\r\n\r\nhi", up_port);
  CHECK(send_all(fd, req, (size_t)n) == 0);
  shutdown(fd, SHUT_WR);
  osb_buf in = {0}, h = {0}, b = {0};
  CHECK(read_answer(fd, &in, 0, &h, &b) == 0);
  CHECK(b.data && strncmp(b.data, "len=2 ", 6) == 0);
  CHECK(sees_eof(fd));
  close(fd);
  fd = xd_dial(port, 10);
  n = snprintf(req, sizeof req, "POST /proxy/%d/echo/h HTTP/1.1\r\nHost: h\r\nX-EXECD-ACCESS-TOKEN: " TOKEN
                                "\r\nContent-Length: 20\r\n\r\nhi", up_port);
  CHECK(send_all(fd, req, (size_t)n) == 0);
  shutdown(fd, SHUT_WR);
  char tmp[64];
  CHECK(read(fd, tmp, sizeof tmp) == 0);
  close(fd);
  osb_buf_free(&in), osb_buf_free(&h), osb_buf_free(&b);
}

/* ------------------------------------------------------------ the readers as units */

static osb_buf got_data;
static void collect(void *arg, const char *d, size_t n) {
  (void)arg;
  osb_buf_append(&got_data, d, n);
}

static void test_chunked_unit(void) {
  static const char body[] = "4\r\nWiki\r\n5;a=b\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nT: x\r\n\r\nNEXT";
  /* whole, and byte by byte: the same data, the same end */
  for (int pieces = 0; pieces <= 1; pieces++) {
    xd_chunked d;
    xd_chunked_init(&d);
    osb_buf_reset(&got_data);
    size_t used = 0, n = sizeof body - 1;
    while (used < n && !xd_chunked_done(&d)) {
      size_t len = pieces ? 1 : n - used;
      ssize_t k = xd_chunked_feed(&d, body + used, len, collect, NULL);
      CHECK(k >= 0);
      if (k < 0) break;
      used += (size_t)k;
    }
    CHECK(xd_chunked_done(&d));
    CHECK(used == n - 4);
    CHECK(got_data.data && strcmp(got_data.data, "Wikipedia in\r\n\r\nchunks.") == 0);
  }
  static const char *const bad[] = {"x\r\n", "\r\n", "5\rx", "5\r\nhelloX", "5 \r\nhello\r\nz", "1000000000000000\r\n"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    xd_chunked d;
    xd_chunked_init(&d);
    CHECK(xd_chunked_feed(&d, bad[i], strlen(bad[i]), NULL, NULL) == -1);
  }
  /* bounds: a size line, a trailer section */
  osb_buf big = {0};
  osb_buf_append_str(&big, "1;");
  for (int i = 0; i < 5000; i++) osb_buf_append(&big, "x", 1);
  xd_chunked d;
  xd_chunked_init(&d);
  CHECK(xd_chunked_feed(&d, big.data, big.len, NULL, NULL) == -1);
  osb_buf_reset(&big);
  osb_buf_append_str(&big, "0\r\n");
  for (int i = 0; i < 2000; i++) osb_buf_append_str(&big, "X-Trailer: 12345\r\n");
  xd_chunked_init(&d);
  CHECK(xd_chunked_feed(&d, big.data, big.len, NULL, NULL) == -1);
  osb_buf_free(&big);
  osb_buf_free(&got_data);
}

static void test_answer_head_unit(void) {
  xd_proxy_head h;
  const char *why;
  char whybuf[64];
  osb_buf out = {0};
  static const char a[] = "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\nX-A:  b \r\nHost: x\r\n\r\nabc";
  CHECK(xd_proxy_answer_head(a, sizeof a - 1, 0, 0, "D", &h, &out, &why, whybuf, sizeof whybuf) == 1);
  CHECK(h.framing == XD_PROXY_LENGTH && h.length == 3 && h.head_len == sizeof a - 4 && !h.chunk_out);
  CHECK_STR(out.data, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-A: b\r\nHost: x\r\nDate: D\r\n\r\n");
  /* incomplete, and refused as soon as it cannot be HTTP */
  osb_buf_reset(&out);
  CHECK(xd_proxy_answer_head(a, 20, 0, 0, "D", &h, &out, &why, whybuf, sizeof whybuf) == 0);
  CHECK(xd_proxy_answer_head("HTTQ", 4, 0, 0, "D", &h, &out, &why, whybuf, sizeof whybuf) == -1);
  CHECK_STR(why, "HPE_INVALID_CONSTANT");
  struct {
    const char *in;
    int rc;
    const char *why;
  } cases[] = {
      {"HTTP/1.1 2x0 OK\r\n\r\n", -1, "HPE_INVALID_STATUS"},
      {"HTTP/1.2 200 OK\r\n\r\n", -1, "HPE_INVALID_VERSION"},
      {"HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n", -1, "HPE_INVALID_HEADER_TOKEN"},
      {"HTTP/1.1 200 OK\r\nA: \x01\r\n\r\n", -1, "HPE_INVALID_HEADER_TOKEN"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", -1, "HPE_INVALID_CONTENT_LENGTH"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", -1, "HPE_UNEXPECTED_CONTENT_LENGTH"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", -1, "HPE_UNEXPECTED_CONTENT_LENGTH"},
      {"HTTP/1.1 042 X\r\n\r\n", -3, "Invalid status code: 42"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    osb_buf_reset(&out);
    CHECK(xd_proxy_answer_head(cases[i].in, strlen(cases[i].in), 0, 0, "D", &h, &out, &why, whybuf, sizeof whybuf) == cases[i].rc);
    CHECK_STR(why, cases[i].why);
  }
  /* framings: chunked, gzip-then-chunked, other encodings until the end, HEAD, 304, 1xx */
  struct {
    const char *in;
    int head, framing, chunk_out, informational;
  } f[] = {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0, XD_PROXY_CHUNKED, 1, 0},
           {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", 0, XD_PROXY_CLOSE, 1, 0},
           {"HTTP/1.0 200 OK\n\n", 0, XD_PROXY_CLOSE, 1, 0},
           {"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", 1, XD_PROXY_NONE, 0, 0},
           {"HTTP/1.1 304 Not Modified\r\n\r\n", 0, XD_PROXY_NONE, 0, 0},
           {"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", 0, XD_PROXY_NONE, 0, 1}};
  for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
    osb_buf_reset(&out);
    CHECK(xd_proxy_answer_head(f[i].in, strlen(f[i].in), f[i].head, 0, "D", &h, &out, &why, whybuf, sizeof whybuf) == 1);
    CHECK(h.framing == f[i].framing && h.chunk_out == f[i].chunk_out && h.informational == f[i].informational);
  }
  /* a head over 16 KiB */
  osb_buf big = {0};
  osb_buf_append_str(&big, "HTTP/1.1 200 OK\r\n");
  while (big.len <= XD_PROXY_HEAD_LIMIT + 10) osb_buf_append_str(&big, "X-Filler: 0123456789012345678901234567890123456789\r\n");
  osb_buf_reset(&out);
  CHECK(xd_proxy_answer_head(big.data, big.len, 0, 0, "D", &h, &out, &why, whybuf, sizeof whybuf) == -1);
  CHECK_STR(why, "HPE_HEADER_OVERFLOW");
  osb_buf_free(&big);
  osb_buf_free(&out);
}

static void test_port_rule(void) {
  CHECK(xd_proxy_port("/proxy/80") == 80);
  CHECK(xd_proxy_port("/proxy/00080/x") == 80);
  CHECK(xd_proxy_port("/proxy/65535/") == 65535);
  CHECK(xd_proxy_port("/proxy/65536") == 0);
  CHECK(xd_proxy_port("/proxy/0") == 0);
  CHECK(xd_proxy_port("/proxy/") == 0);
  CHECK(xd_proxy_port("/proxy/99999999999999999999") == 0);
  CHECK(xd_proxy_port("/proxy/8a") == 0);
  CHECK(xd_proxy_port("/proxy") == -1);
  CHECK(xd_proxy_port("/proxyx/80") == -1);
}

static void client(void) {
  RUN(test_port_rule);
  RUN(test_chunked_unit);
  RUN(test_answer_head_unit);
  RUN(test_get_headers);
  RUN(test_keepalive_pipelined);
  RUN(test_chunked_request);
  RUN(test_close_delimited_head_1xx);
  RUN(test_self);
  RUN(test_errors);
  RUN(test_websocket);
  RUN(test_half_close);
  RUN(test_large_body);
  RUN(test_backpressure);
}

typedef struct {
  xd_server *server, *server_b;
  void *module, *module_b;
} both;

static void close_both(void *arg) {
  both *b = arg;
  xd_server_close(b->server);
  xd_server_close(b->server_b);
  xd_proxy_close(b->module);
  xd_proxy_close(b->module_b);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  up_fd = listen_any(&up_port);
  int cfd = listen_any(&closed_port); /* bound, then released: nothing listens there */
  if (cfd >= 0) close(cfd);
  if (up_fd < 0 || cfd < 0) {
    printf("cannot listen\n0 passed, 1 failed\n");
    return 1;
  }
  pthread_t svc;
  pthread_create(&svc, NULL, service, NULL);
  uv_loop_t loop;
  uv_loop_init(&loop);
  xd_ctx ctx = {0};
  ctx.loop = &loop;
  void *module = xd_proxy_new(&ctx);
  xd_route route[] = {{module, xd_proxy_route}, XD_DECLINED};
  xd_server_opts o = {0};
  o.loop = &loop;
  o.token = TOKEN;
  o.routes = route;
  o.nroutes = 2;
  xd_server *server = xd_server_new(&o);
  /* B: execd itself on a Unix socket, for the first one's /proxy/44772 */
  char dir[64], sock[100];
  if (!t_tempdir(dir, sizeof dir, "proxy")) return 1;
  snprintf(sock, sizeof sock, "%s/execd.sock", dir);
  snprintf(sock_b, sizeof sock_b, "%s", sock);
  char missing[110];
  snprintf(missing, sizeof missing, "%s/missing.sock", dir);
  void *module_b = xd_proxy_new(&ctx);
  xd_route route_b[] = {{module_b, xd_proxy_route}, XD_DECLINED};
  o.routes = route_b;
  xd_server *server_b = xd_server_new(&o);
  if (!module || !server || xd_server_listen_tcp(server, "127.0.0.1", 0, &port) != 0 || !module_b || !server_b ||
      xd_server_listen_unix(server_b, sock) != 0 || xd_proxy_set_self(module, sock, NULL, 0) != 0 ||
      xd_proxy_set_self(module_b, missing, NULL, 0) != 0) {
    printf("server did not start\n0 passed, 1 failed\n");
    return 1;
  }
  both b = {server, server_b, module, module_b};
  xd_run_client(&loop, client, close_both, &b);
  t_rmtree(dir);
  CHECK(uv_loop_close(&loop) == 0);
  up_stop = 1;
  pthread_join(svc, NULL);
  close(up_fd);
  CHECK(xd_declined == 0);
  return t_summary();
}
