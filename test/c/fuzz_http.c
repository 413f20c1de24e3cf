/* libFuzzer target of the C execd's HTTP/1.1 request reader (src/execd/server.c: request line, headers, the target,
 * Content-Length and chunked bodies, bodies streamed to a route, pipelining, Expect, upgrades, the 413 and 431
 * answers): each input is written as it is to a real connection of a real server on loopback, then the client
 * half-closes. The one route answers every request it is given (a streamed body is read to its end first, as
 * upload.c reads one) but a path starting with /no or ending with '/': those get the server's own 404 or 301. Invariants: no memory error (ASan/UBSan); whatever comes back is a sequence of answers that
 * each start with "HTTP/1.1 "; the server closes the connection once the client has half-closed (no request holds
 * a connection whose client is gone: a 10 s deadline, far above the milliseconds an input takes). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"
#include "xd_loopback.h"

/* a request whose body the route reads as it arrives */
typedef struct {
  xd_res *res;
  size_t got;
} streamed;

static void streamed_data(void *arg, const char *data, size_t len) {
  (void)data;
  ((streamed *)arg)->got += len;
}
static void streamed_end(void *arg) {
  streamed *s = arg;
  char text[64];
  int n = snprintf(text, sizeof text, "{\"got\":%zu}", s->got);
  xd_res_on_close(s->res, NULL, NULL);
  xd_send_json(s->res, 200, text, (size_t)n);
  free(s);
}
static void streamed_gone(void *arg) { free(arg); }
static const xd_body_callbacks STREAMED = {streamed_data, streamed_end};

static int route(void *module, const xd_req *req, xd_res *res) {
  (void)module;
  /* declined: what no route takes is the server's own answer (404, or the 301 of a trailing slash with the query) */
  size_t pl = strlen(req->path);
  if (strncmp(req->path, "/no", 3) == 0 || (pl > 1 && req->path[pl - 1] == '/')) return 0;
  if (req->body_streamed) {
    streamed *s = calloc(1, sizeof *s);
    if (!s) abort();
    s->res = res;
    xd_res_on_close(res, streamed_gone, s);
    xd_body_read(res, &STREAMED, s);
    return 1;
  }
  /* touch what a route reads: the headers, every query value, the body */
  size_t sum = req->body_len + strlen(req->path) + strlen(req->method);
  for (size_t i = 0; i < req->nheaders; i++) sum += strlen(req->header_kv[2 * i]) + strlen(req->header_kv[2 * i + 1]);
  xd_query_list all;
  if (xd_query_all(req, "path", &all) == 0) {
    for (size_t i = 0; i < all.n; i++) sum += all.len[i];
    xd_query_list_free(&all);
  }
  char text[64];
  int n = snprintf(text, sizeof text, "{\"sum\":%zu}", sum);
  if (strcmp(req->method, "HEAD") == 0) xd_send_head(res, 200, NULL, 0, (size_t)n);
  else xd_send_json(res, 200, text, (size_t)n);
  return 1;
}

static uv_loop_t loop;
static int port;

static void setup(void) {
  static xd_route r = {NULL, route};
  signal(SIGPIPE, SIG_IGN); /* a write after the server closed fails with EPIPE instead */
  uv_loop_init(&loop);
  if (!xd_listen_one(&loop, &r, 1, &port)) abort();
}

/* what came back: answers one after the other, each starting with the status line's protocol */
static void check_answers(const char *got, size_t len) {
  if (len == 0) return;
  if (len < 9 || memcmp(got, "HTTP/1.1 ", 9) != 0) {
    fprintf(stderr, "not an HTTP answer: %.*s\n", (int)(len > 200 ? 200 : len), got);
    abort();
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) {
    setup();
    ready = 1;
  }
  int fd = xd_dial(port, 10);
  if (fd < 0) abort();
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  size_t sent = 0;
  char *got = NULL;
  size_t got_len = 0;
  int half_closed = 0;
  double deadline = now_s() + 10;
  for (;;) {
    if (now_s() > deadline) {
      fprintf(stderr, "the server kept a connection open 10 s after its client half-closed (%zu bytes sent)\n", sent);
      abort();
    }
    while (sent < size) { /* what the socket takes now; the rest once the server has read */
      ssize_t n = write(fd, data + sent, size - sent);
      if (n <= 0) break;
      sent += (size_t)n;
    }
    if (sent == size && !half_closed) {
      shutdown(fd, SHUT_WR);
      half_closed = 1;
    }
    uv_run(&loop, UV_RUN_NOWAIT);
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (got_len < 65536) { /* the start of what came back is enough to check */
        size_t keep = (size_t)n < 65536 - got_len ? (size_t)n : 65536 - got_len;
        char *g = realloc(got, got_len + keep);
        if (!g) abort();
        got = g;
        memcpy(got + got_len, buf, keep);
        got_len += keep;
      }
      continue;
    }
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break; /* closed (or reset) by the server */
    struct pollfd p = {fd, POLLIN, 0}; /* nothing yet: the server's loop turns again after a short wait */
    poll(&p, 1, 1);
  }
  check_answers(got, got_len);
  free(got);
  close(fd);
  /* the server's side of the connection is closed in a later loop turn */
  for (int i = 0; i < 4; i++) uv_run(&loop, UV_RUN_NOWAIT);
  return 0;
}
