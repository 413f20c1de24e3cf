/* The C execd's HTTP server (src/execd/server.c) on loopback with a test route module: a client thread sends raw
 * bytes while the main thread runs the loop. Checked byte for byte (Date values masked): GET /ping, the token's 401
 * after the body, Go's raw 400s, the target refusals, 431, the immediate 413 (and the prompt one of a body still being
 * written), a half-closed client still answered, Content-Length and chunked bodies,
 * pipelined answers in order (a late answer holds the ones after it), Connection: close, streamed answers, a client
 * leaving mid-stream (the route's on_close), 100 Continue, what no route takes (the real execd's router: 404
 * `404 page not found`, the 301 of a GET route with a trailing slash, an upgrade no route takes), and the
 * request-target and query rules as units. */
#include "harness.h"
#include "xd_loopback.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/buf.h"
#include "execd/server.h"
#include "execd/xd.h"

static int port;
static uv_loop_t loop;
static uv_async_t done_async;
static xd_server *server;
static _Atomic int stream_gone; /* the streaming route's on_close ran */

/* ------------------------------------------------------------ the test's route module (loop thread) */

typedef struct {
  xd_res *res;
  uv_timer_t t;
  int n;
} streamer;

static void streamer_closed(uv_handle_t *h) { free(h->data); }

static void stream_gone_cb(void *arg) {
  streamer *s = arg;
  stream_gone = 1;
  s->res = NULL;
  uv_timer_stop(&s->t);
  uv_close((uv_handle_t *)&s->t, streamer_closed);
}

static void stream_tick(uv_timer_t *t) {
  streamer *s = t->data;
  char ev[32];
  int n = snprintf(ev, sizeof ev, "event %d\n\n", s->n);
  xd_stream_write(s->res, ev, (size_t)n);
  if (++s->n < 3) return;
  xd_res_on_close(s->res, NULL, NULL);
  xd_stream_end(s->res);
  uv_timer_stop(t);
  uv_close((uv_handle_t *)t, streamer_closed);
}

/* /command/echo: the body back; /command/late: 200 "late" after 50 ms; /command/stream: three events 10 ms apart, or
 * (?forever) events until the client leaves; anything else: not ours. */
static void late_fire(uv_timer_t *t) {
  xd_res *res = t->data;
  static const char *const h[] = {"Content-Type: text/plain"};
  xd_send(res, 200, h, 1, "late", 4);
  uv_close((uv_handle_t *)t, (uv_close_cb)free);
}

static int route(void *module, const xd_req *req, xd_res *res) {
  (void)module;
  if (strcmp(req->path, "/command/echo") == 0) {
    static const char *const h[] = {"Content-Type: text/plain"};
    xd_send(res, 200, h, 1, req->body, req->body_len);
    return 1;
  }
  if (strcmp(req->path, "/command/late") == 0) {
    uv_timer_t *t = malloc(sizeof *t);
    uv_timer_init(&loop, t);
    t->data = res;
    uv_timer_start(t, late_fire, 50, 0);
    return 1;
  }
  if (strcmp(req->path, "/command/stream") == 0) {
    streamer *s = calloc(1, sizeof *s);
    s->res = res;
    uv_timer_init(&loop, &s->t);
    s->t.data = s;
    xd_stream_open(res);
    xd_res_on_close(res, stream_gone_cb, s);
    char *forever = xd_query(req, "forever");
    if (forever) s->n = -1000000;
    free(forever);
    uv_timer_start(&s->t, stream_tick, 10, 10);
    return 1;
  }
  return 0;
}

/* ------------------------------------------------------------ the client (its own thread) */

static int dial(void) { return xd_dial(port, 10); }

/* Sends `req` on a new connection and reads until EOF (or `want` bytes when > 0); the answer with every Date value
 * replaced by <date> (malloc'd). */
static char *exchange(const char *req, size_t want) {
  int fd = dial();
  if (fd < 0) return strdup("(no connection)");
  size_t rl = strlen(req);
  if (write(fd, req, rl) != (ssize_t)rl) {
    close(fd);
    return strdup("(write failed)");
  }
  osb_buf b = {0};
  char buf[4096];
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r <= 0) break;
    osb_buf_append(&b, buf, (size_t)r);
    if (want && b.len >= want) break;
  }
  close(fd);
  osb_buf out = {0};
  osb_buf_append(&out, "", 0);
  const char *p = b.data ? b.data : "";
  const char *d;
  while ((d = strstr(p, "Date: ")) != NULL) {
    osb_buf_append(&out, p, (size_t)(d - p));
    osb_buf_append_str(&out, "Date: <date>");
    const char *e = strstr(d, "\r\n");
    p = e ? e : d + strlen(d);
  }
  osb_buf_append_str(&out, p);
  osb_buf_free(&b);
  return osb_buf_steal(&out, NULL);
}

#define TOK "X-EXECD-ACCESS-TOKEN: tok\r\n"
#define PING "GET /ping HTTP/1.1\r\nHost: x\r\n" TOK "\r\n"
#define PING_OK "HTTP/1.1 200 OK\r\nDate: <date>\r\nContent-Length: 0\r\n\r\n"
#define GO_400 "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"

static void expect(const char *req, const char *answer) {
  char *got = exchange(req, 0);
  CHECK_STR(got, answer);
  free(got);
}

static void test_ping_and_token(void) {
  expect("GET /ping HTTP/1.1\r\nHost: x\r\n" TOK "Connection: close\r\n\r\n",
         "HTTP/1.1 200 OK\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 0\r\n\r\n");
  /* 401 after the body was read; the connection stays usable */
  expect("POST /command/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
         "GET /ping HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: tok2\r\nConnection: close\r\n\r\n",
         "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json; charset=utf-8\r\nDate: <date>\r\n"
         "Content-Length: 72\r\n\r\n{\"error\":\"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN\"}"
         "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n"
         "Date: <date>\r\nContent-Length: 72\r\n\r\n{\"error\":\"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN\"}");
}

static void test_refusals(void) {
  expect("GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", GO_400);
  expect("GET /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", GO_400);
  expect("GET /ping HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", GO_400);
  expect("GET /ping HTTP/2.0\r\nHost: x\r\n\r\n", GO_400);
  expect("GET  /ping HTTP/1.1\r\nHost: x\r\n\r\n", GO_400);
  expect("GET /command/%zz HTTP/1.1\r\nHost: x\r\n" TOK "\r\n", GO_400);
  expect("GET /ping HTTP/1.1\r\n" TOK "\r\n",
         "HTTP/1.1 400 Bad Request: missing required Host header\r\nContent-Type: text/plain; charset=utf-8\r\n"
         "Connection: close\r\n\r\n400 Bad Request: missing required Host header");
  expect("GET /a/../ping HTTP/1.1\r\nHost: x\r\n" TOK "\r\n",
         "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n"
         "Date: <date>\r\nContent-Length: 81\r\n\r\n"
         "{\"code\":\"INVALID_REQUEST_PATH\",\"message\":\"dot segment (. or ..) in request path\"}");
  /* a bad chunk */
  expect("POST /command/echo HTTP/1.1\r\nHost: x\r\n" TOK "Transfer-Encoding: chunked\r\n\r\nzz\r\n", GO_400);
  /* a head over 16 KiB */
  osb_buf big = {0};
  osb_buf_append_str(&big, "GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: ");
  for (int i = 0; i < 17000; i++) osb_buf_append(&big, "a", 1);
  osb_buf_append_str(&big, "\r\n\r\n");
  expect(big.data, "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n");
  osb_buf_free(&big);
  /* a declared body beyond 64 MiB + 256 MiB: the 413 at once, then the connection closes */
  expect("POST /command/echo HTTP/1.1\r\nHost: x\r\n" TOK "Content-Length: 400000000\r\n\r\n",
         "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json; charset=utf-8\r\n"
         "Connection: close\r\nDate: <date>\r\nContent-Length: 83\r\n\r\n"
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"request body larger than 67108864 bytes\"}");
}

/* issue 32: a client that sends its whole request and then half-closes its side (shutdown SHUT_WR) still gets the
 * answer, as from Go's server (the connection closes after it) */
static void test_half_close(void) {
  int fd = dial();
  const char *req = "GET /command/late HTTP/1.1\r\nHost: x\r\n" TOK "\r\n";
  CHECK(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
  CHECK(shutdown(fd, SHUT_WR) == 0);
  char buf[1024];
  size_t got = 0;
  ssize_t n;
  while (got < sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)n;
  buf[got] = 0;
  CHECK(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
  CHECK(got >= 4 && strcmp(buf + got - 4, "late") == 0);
  close(fd);
}

/* issue 32: a body over 64 MiB gets its 413 at once (Connection: close), while the client is still writing it; what
 * it writes next is still read (no reset), then the connection closes */
static void test_too_large_prompt(void) {
  int fd = dial();
  char head[256];
  int hl = snprintf(head, sizeof head, "POST /command/echo HTTP/1.1\r\nHost: x\r\n" TOK "Content-Length: %u\r\n\r\n",
                    64u * 1024u * 1024u + 10u);
  CHECK(write(fd, head, (size_t)hl) == hl);
  static char chunk[256 * 1024];
  memset(chunk, 'a', sizeof chunk);
  CHECK(write(fd, chunk, sizeof chunk) == (ssize_t)sizeof chunk);
  const char *want = "HTTP/1.1 413 Request Entity Too Large\r\nContent-Type: application/json; charset=utf-8\r\n"
                     "Connection: close\r\nDate: ";
  char buf[1024];
  size_t got = 0;
  ssize_t n;
  while (got < 200 && (n = read(fd, buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)n; /* within 10 s */
  buf[got] = 0;
  CHECK(strncmp(buf, want, strlen(want)) == 0);
  CHECK(strstr(buf, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"request body larger than 67108864 bytes\"}") != NULL);
  for (int i = 0; i < 8; i++) CHECK(write(fd, chunk, sizeof chunk) == (ssize_t)sizeof chunk); /* still read */
  CHECK(shutdown(fd, SHUT_WR) == 0);
  CHECK(read(fd, buf, sizeof buf) == 0); /* then closed */
  close(fd);
}

static void test_pipelined(void) {
  /* a late answer holds the ones after it; Content-Length and chunked bodies; Connection: close ends it */
  expect(PING "GET /command/late HTTP/1.1\r\nHost: x\r\n" TOK "\r\n"
              "POST /command/echo HTTP/1.1\r\nHost: x\r\n" TOK "Content-Length: 5\r\n\r\nhello"
              "POST /command/echo HTTP/1.1\r\nHost: x\r\n" TOK "Transfer-Encoding: chunked\r\n\r\n"
              "3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: x\r\n\r\n"
              "GET /ping HTTP/1.1\r\nHost: x\r\n" TOK "Connection: close\r\n\r\n" PING,
         PING_OK
         "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: <date>\r\nContent-Length: 4\r\n\r\nlate"
         "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: <date>\r\nContent-Length: 5\r\n\r\nhello"
         "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: <date>\r\nContent-Length: 5\r\n\r\nabcde"
         "HTTP/1.1 200 OK\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 0\r\n\r\n");
}

static void test_expect_continue(void) {
  /* the body waits for 100 Continue (HTTP/1.1 Expect: 100-continue), then the answer */
  int fd = dial();
  const char *head = "POST /command/echo HTTP/1.1\r\nHost: x\r\n" TOK "Expect: 100-continue\r\nContent-Length: 4\r\n"
                     "Connection: close\r\n\r\n";
  CHECK(write(fd, head, strlen(head)) == (ssize_t)strlen(head));
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = 0;
  CHECK_STR(buf, "HTTP/1.1 100 Continue\r\n\r\n");
  CHECK(write(fd, "body", 4) == 4);
  size_t got = 0;
  while (got < sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)n;
  buf[got] = 0;
  CHECK(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0);
  CHECK(got >= 4 && strcmp(buf + got - 4, "body") == 0);
  close(fd);
}

static void test_stream(void) {
  expect("GET /command/stream HTTP/1.1\r\nHost: x\r\n" TOK "Connection: close\r\n\r\n",
         "HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Type: text/event-stream\r\n"
         "X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\nDate: <date>\r\n\r\n"
         "9\r\nevent 0\n\n\r\n9\r\nevent 1\n\n\r\n9\r\nevent 2\n\n\r\n0\r\n\r\n");
  /* the client leaves mid-stream: the route hears it */
  stream_gone = 0;
  int fd = dial();
  const char *req = "GET /command/stream?forever=1 HTTP/1.1\r\nHost: x\r\n" TOK "\r\n";
  CHECK(write(fd, req, strlen(req)) == (ssize_t)strlen(req));
  char buf[512];
  CHECK(read(fd, buf, sizeof buf) > 0);
  close(fd);
  for (int i = 0; i < 500 && !stream_gone; i++) usleep(10000);
  CHECK(stream_gone);
}

#define NOT_FOUND "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nDate: <date>\r\nContent-Length: 18\r\n\r\n"
#define NOT_FOUND_CLOSE \
  "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 18\r\n\r\n"

static void test_not_found(void) {
  /* what no route takes: Go's mux answer (01-ping-auth-404.json), the connection going on; after the body was read */
  expect(PING "GET /no/such/route HTTP/1.1\r\nHost: x\r\n" TOK "\r\n"
              "GET /command HTTP/1.1\r\nHost: x\r\n" TOK "\r\n"
              "PUT /ping HTTP/1.1\r\nHost: x\r\n" TOK "Content-Length: 3\r\n\r\nabc"
              "DELETE /files/info?path=/ HTTP/1.1\r\nHost: x\r\n" TOK "Transfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
              "GET /ping HTTP/1.1\r\nHost: x\r\n" TOK "Connection: close\r\n\r\n",
         PING_OK NOT_FOUND "404 page not found" NOT_FOUND "404 page not found" NOT_FOUND "404 page not found"
         NOT_FOUND "404 page not found" "HTTP/1.1 200 OK\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 0\r\n\r\n");
  /* HEAD: the head alone, with the length the GET's body would have */
  expect("HEAD /ping HTTP/1.1\r\nHost: x\r\n" TOK "\r\nHEAD /no HTTP/1.1\r\nHost: x\r\n" TOK "Connection: close\r\n\r\n",
         NOT_FOUND NOT_FOUND_CLOSE);
  /* the token comes first, for unknown routes too */
  expect("GET /no/such/route HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n"
         "Date: <date>\r\nContent-Length: 72\r\n\r\n{\"error\":\"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN\"}");
  /* GET <route>/ of a GET route without parameters: gin's 301 to the path without the slash (http.Redirect's body;
   * the query kept, HTML-escaped in the body); other methods, other paths, and the root: 404 */
  expect("GET /ping/ HTTP/1.1\r\nHost: x\r\n" TOK "\r\n"
         "GET /files/info/?path=/a&b=%3C HTTP/1.1\r\nHost: x\r\n" TOK "\r\n"
         "HEAD /ping/ HTTP/1.1\r\nHost: x\r\n" TOK "\r\n"
         "GET /command/ HTTP/1.1\r\nHost: x\r\n" TOK "\r\n"
         "GET /metrics/watch/ HTTP/1.1\r\nHost: x\r\n" TOK "Connection: close\r\n\r\n",
         "HTTP/1.1 301 Moved Permanently\r\nContent-Type: text/html; charset=utf-8\r\nLocation: /ping\r\nDate: <date>\r\n"
         "Content-Length: 40\r\n\r\n<a href=\"/ping\">Moved Permanently</a>.\n\n"
         "HTTP/1.1 301 Moved Permanently\r\nContent-Type: text/html; charset=utf-8\r\nLocation: /files/info?path=/a&b=%3C\r\n"
         "Date: <date>\r\nContent-Length: 64\r\n\r\n<a href=\"/files/info?path=/a&amp;b=%3C\">Moved Permanently</a>.\n\n"
         NOT_FOUND NOT_FOUND "404 page not found"
         "HTTP/1.1 301 Moved Permanently\r\nContent-Type: text/html; charset=utf-8\r\nLocation: /metrics/watch\r\n"
         "Connection: close\r\nDate: <date>\r\nContent-Length: 49\r\n\r\n"
         "<a href=\"/metrics/watch\">Moved Permanently</a>.\n\n");
  /* an upgrade no route takes: routed like any request (token, target), its 404 closes the connection; what the
   * client sends after the head (WebSocket frames it sent early, a reset) changes nothing */
  expect("GET /code/ws HTTP/1.1\r\nHost: x\r\n" TOK "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n", NOT_FOUND_CLOSE "404 page not found");
  expect("GET /code/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
         "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n"
         "Date: <date>\r\nContent-Length: 72\r\n\r\n{\"error\":\"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN\"}");
  expect("GET /a/../ws HTTP/1.1\r\nHost: x\r\n" TOK "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
         "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n"
         "Date: <date>\r\nContent-Length: 81\r\n\r\n"
         "{\"code\":\"INVALID_REQUEST_PATH\",\"message\":\"dot segment (. or ..) in request path\"}");
  expect("GET /%zz HTTP/1.1\r\nHost: x\r\n" TOK "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n", GO_400);
  /* the client resets right after its upgrade request (the Node execd died of this): the server goes on */
  for (int i = 0; i < 20; i++) {
    int fd = dial();
    const char *u = "GET /no/ws HTTP/1.1\r\nHost: x\r\n" TOK "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x85";
    CHECK(write(fd, u, strlen(u)) == (ssize_t)strlen(u));
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
  }
  expect("GET /ping HTTP/1.1\r\nHost: x\r\n" TOK "Connection: close\r\n\r\n",
         "HTTP/1.1 200 OK\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 0\r\n\r\n");
}

/* ------------------------------------------------------------ units */

static void target(const char *raw, const char *path, const char *query, const char *error) {
  xd_target t;
  int rc = xd_parse_target(raw, strlen(raw), &t);
  if (path) {
    CHECK(rc == 0);
    CHECK_STR(t.path, path);
    CHECK_STR(t.query, query);
  } else {
    CHECK(rc == -1);
    CHECK_STR(t.error, error);
  }
  free(t.path);
  free(t.query);
}

static void test_target_rules(void) {
  target("/command/status/ab", "/command/status/ab", "", NULL);
  target("/comm%61nd/%7e%41%22(x)", "/command/~A%22(x)", "", NULL);
  target("/a/", "/a/", "", NULL);
  target("/", "/", "", NULL);
  target("/p?x=%zz&y", "/p", "x=%zz&y", NULL);
  target("http://host:1", "/", "", NULL);
  target("HTTPS://host?q=1", "/", "q=1", NULL);
  target("http://host/a%ff", "/a%FF", "", NULL);
  target("", NULL, NULL, "empty request target");
  target("/a\x7f", NULL, NULL, "request target with a space, control or non-ASCII byte");
  target("/\xc3\xa9", NULL, NULL, "request target with a space, control or non-ASCII byte");
  target("*", NULL, NULL, "request target must be a path or an absolute http URL");
  target("/a#b", NULL, NULL, "fragment (#) in request target");
  target("/a%2", NULL, NULL, "invalid URL escape");
  target("/a//b", NULL, NULL, "empty path segment (//) in request target");
  target("/a%2Fb", NULL, NULL, "encoded or backslash path separator in request target");
  target("/a\\b", NULL, NULL, "encoded or backslash path separator in request target");
  target("/%2e%2E/x", NULL, NULL, "dot segment (. or ..) in request path");
  target("/x/.", NULL, NULL, "dot segment (. or ..) in request path");
  target("/x/...", "/x/...", "", NULL);
  xd_target t;
  CHECK(xd_parse_target("/%zz", 4, &t) == -1 && t.malformed);
}

static void test_query(void) {
  const char *kv[] = {"host", "x", "connection", "close"};
  xd_req r = {0};
  r.query = "a=1&b=x%20y+z&c&b=2&%64=d";
  r.header_kv = kv;
  r.nheaders = 2;
  char *v = xd_query(&r, "b");
  CHECK_STR(v, "x y z");
  free(v);
  v = xd_query(&r, "c");
  CHECK_STR(v, "");
  free(v);
  v = xd_query(&r, "d");
  CHECK_STR(v, "d");
  free(v);
  CHECK(xd_query(&r, "e") == NULL);
  CHECK_STR(xd_header(&r, "connection"), "close");
  CHECK(xd_header(&r, "upgrade") == NULL);
}

static void *client(void *arg) {
  (void)arg;
  RUN(test_ping_and_token);
  RUN(test_refusals);
  RUN(test_pipelined);
  RUN(test_half_close);
  RUN(test_too_large_prompt);
  RUN(test_expect_continue);
  RUN(test_stream);
  RUN(test_not_found);
  uv_async_send(&done_async);
  return NULL;
}

static void on_done(uv_async_t *a) {
  uv_close((uv_handle_t *)a, NULL);
  xd_server_close(server);
}

int main(void) {
  RUN(test_target_rules);
  RUN(test_query);
  uv_loop_init(&loop);
  xd_route routes[] = {{NULL, route}};
  xd_server_opts o = {0};
  o.loop = &loop;
  o.token = "tok";
  o.routes = routes;
  o.nroutes = 1;
  server = xd_server_new(&o);
  int rc = server ? xd_server_listen_tcp(server, "127.0.0.1", 0, &port) : -1;
  if (rc != 0) {
    printf("server did not start (%d)\n0 passed, 1 failed\n", rc);
    return 1;
  }
  uv_async_init(&loop, &done_async, on_done);
  pthread_t t;
  pthread_create(&t, NULL, client, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  CHECK(uv_loop_close(&loop) == 0);
  return t_summary();
}
