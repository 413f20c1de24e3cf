/* The C execd tests' loopback (test_xd_*.c): the server under test with one route module on 127.0.0.1, and the
 * client's connection to it. */
#ifndef XD_LOOPBACK_H
#define XD_LOOPBACK_H
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include "execd/server.h"

/* A server on `loop` asking the `nroutes` modules `routes` in order (borrowed: the server keeps the pointer, so they
 * must outlive it; end them with XD_DECLINED to count what none takes), listening on 127.0.0.1 on a free port
 * (*port). NULL when it cannot start; the caller closes it (xd_server_close). */
static inline xd_server *xd_listen_one(uv_loop_t *loop, const xd_route *routes, size_t nroutes, int *port) {
  xd_server_opts o = {0};
  o.loop = loop;
  o.routes = routes;
  o.nroutes = nroutes;
  xd_server *server = xd_server_new(&o);
  if (server && xd_server_listen_tcp(server, "127.0.0.1", 0, port) != 0) {
    xd_server_close(server);
    return NULL;
  }
  return server;
}

/* A blocking TCP connection to 127.0.0.1:port, reads bounded by timeout_s seconds: the socket (the caller closes it),
 * or -1. */
static inline int xd_dial(int port, int timeout_s) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); /* not inherited by what the module under test spawns */
  if (fd < 0) return -1;
  struct timeval tv = {timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Sends `method target` with `body` (NULL: none; Content-Length either way) and Connection: close on a fresh
 * connection to 127.0.0.1:port (reads bounded by timeout_s): the socket (the caller reads and closes it), or -1. */
static inline int xd_send_request(int port, int timeout_s, const char *method, const char *target, const char *body) {
  int fd = xd_dial(port, timeout_s);
  if (fd < 0) return -1;
  char head[512];
  size_t bl = body ? strlen(body) : 0;
  int hl = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n",
                    method, target, bl);
  if (hl < 0 || (size_t)hl >= sizeof head || write(fd, head, (size_t)hl) != hl ||
      (bl && write(fd, body, bl) != (ssize_t)bl)) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Reads until the server closes, then closes fd: what came, NUL-terminated, malloc'd (the caller frees);
 * pause_every > 0 makes a slow client (20 ms of sleep after each such many bytes). */
static inline char *xd_read_all(int fd, size_t pause_every) {
  size_t cap = 65536, n = 0, since = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (n + 65537 > cap) buf = realloc(buf, cap *= 2);
    ssize_t r = read(fd, buf + n, 65536);
    if (r <= 0) break;
    n += (size_t)r;
    since += (size_t)r;
    if (pause_every && since >= pause_every) {
      since = 0;
      usleep(20000);
    }
  }
  close(fd);
  buf[n] = 0;
  return buf;
}

/* Sends one whole request (len bytes) on a fresh connection to 127.0.0.1:port and reads the answer until the server
 * closes (the request should ask for Connection: close): its status, and in *body (malloc'd, the caller frees) what
 * follows the head. -1 when there is no HTTP answer (*body NULL). Answers are read up to 64 KiB. */
static inline int xd_roundtrip(int port, const char *req, size_t len, char **body) {
  *body = NULL;
  int fd = xd_dial(port, 10);
  if (fd < 0) return -1;
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, req + off, len - off);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    off += (size_t)w;
  }
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  if (!buf) {
    close(fd);
    return -1;
  }
  for (;;) {
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
    if (n == cap - 1) break;
  }
  close(fd);
  buf[n] = '\0';
  int status = 0;
  const char *b = strstr(buf, "\r\n\r\n");
  if (sscanf(buf, "HTTP/1.1 %d", &status) != 1 || !b) {
    free(buf);
    return -1;
  }
  *body = strdup(b + 4);
  free(buf);
  return *body ? status : -1;
}
/* The permission bits / owner uid of ws/rel (stat, symlinks followed), or -1 when it does not exist. */
static inline int xd_mode_in(const char *ws, const char *rel) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", ws, rel);
  return stat(p, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}
static inline long xd_owner_in(const char *ws, const char *rel) {
  char p[512];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", ws, rel);
  return stat(p, &st) == 0 ? (long)st.st_uid : -1;
}

/* Requests no module of a test's server took (counted on the loop thread by xd_declined_route, the last route of
 * the table: the server then answers them itself, 404 `404 page not found`). */
static _Atomic int xd_declined __attribute__((unused));

static inline int xd_declined_route(void *module, const xd_req *req, xd_res *res) {
  (void)module, (void)req, (void)res;
  xd_declined++;
  return 0;
}
#define XD_DECLINED {NULL, xd_declined_route}

/* The answer of a request no route takes, as xd_roundtrip gives its body. */
#define XD_NOT_FOUND "404 page not found"

typedef struct {
  uv_async_t done;
  void (*client)(void);
  void (*on_done)(void *);
  void *arg;
} xd_client_run;

static inline void *xd_client_thread_(void *p) {
  xd_client_run *r = p;
  r->client();
  uv_async_send(&r->done);
  return NULL;
}

static inline void xd_client_done_(uv_async_t *a) {
  xd_client_run *r = a->data;
  uv_close((uv_handle_t *)a, NULL);
  r->on_done(r->arg);
}

/* Runs client() on a thread of its own while `loop` runs (the client talks to the server over the socket); once it
 * returns, on_done(arg) runs on the loop thread (it closes the server and whatever else keeps the loop running), and
 * this returns when the loop has nothing left to run. */
static inline void xd_run_client(uv_loop_t *loop, void (*client)(void), void (*on_done)(void *), void *arg) {
  xd_client_run r = {.client = client, .on_done = on_done, .arg = arg};
  uv_async_init(loop, &r.done, xd_client_done_);
  r.done.data = &r;
  pthread_t t;
  pthread_create(&t, NULL, xd_client_thread_, &r);
  uv_run(loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
}

/* xd_run_client's on_done for a test whose server alone keeps the loop running */
static inline void xd_close_server(void *server) { xd_server_close(server); }

typedef struct {
  xd_server *server;
  void *module;
  void (*close_fn)(void *);
} xd_module_run_;

/* xd_run_client's on_done of a module test: the server and the module closed on the loop thread (a module with
 * handles of its own, like the commands', keeps the loop running until then) */
static inline void xd_close_both_(void *arg) {
  xd_module_run_ *r = arg;
  xd_server_close(r->server);
  r->close_fn(r->module);
}

/* The main() of a route module's test (harness.h first): a fresh workspace /tmp/osb-test-<name>-XXXXXX written into
 * ws (cap bytes), the module made for it (new_fn, from *base's options when base is given: loop and workspace are set
 * here) and served on loopback (*port; what it does not take is counted in xd_declined, answered 404), client() run, then the server
 * and the module closed and the workspace removed. Returns t_summary(). */
static inline int xd_module_test_with(const char *name, char *ws, size_t cap, int *port, const xd_ctx *base,
                                      void *(*new_fn)(const xd_ctx *), xd_route_fn route_fn, void (*close_fn)(void *),
                                      void (*client)(void)) {
  if (!t_tempdir(ws, cap, name)) {
    printf("cannot make a temporary directory\n0 passed, 1 failed\n");
    return 1;
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  xd_ctx ctx = {0};
  if (base) ctx = *base;
  ctx.loop = &loop;
  ctx.workspace = ws;
  void *module = new_fn(&ctx);
  xd_route routes[] = {{module, route_fn}, XD_DECLINED};
  xd_server *server = module ? xd_listen_one(&loop, routes, 2, port) : NULL;
  if (!server) {
    printf("server did not start\n0 passed, 1 failed\n");
    return 1;
  }
  xd_module_run_ r = {server, module, close_fn};
  xd_run_client(&loop, client, xd_close_both_, &r);
  CHECK(uv_loop_close(&loop) == 0);
  t_rmtree(ws);
  return t_summary();
}

static inline int xd_module_test(const char *name, char *ws, size_t cap, int *port, void *(*new_fn)(const xd_ctx *),
                                 xd_route_fn route_fn, void (*close_fn)(void *), void (*client)(void)) {
  return xd_module_test_with(name, ws, cap, port, NULL, new_fn, route_fn, close_fn, client);
}
#endif
