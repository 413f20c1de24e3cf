/* The C execd tests' loopback (test_xd_*.c): the server under test with one route module on 127.0.0.1, and the
 * client's connection to it. */
#ifndef XD_LOOPBACK_H
#define XD_LOOPBACK_H
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "execd/server.h"

/* A server on `loop` asking the one module `route` (borrowed: the server keeps the pointer, so it must outlive it),
 * handing everything else to `handoff`, listening on 127.0.0.1 on a free port (*port). NULL when it cannot start;
 * the caller closes it (xd_server_close). */
static inline xd_server *xd_listen_one(uv_loop_t *loop, const xd_route *route, xd_handoff_fn handoff, int *port) {
  xd_server_opts o = {0};
  o.loop = loop;
  o.routes = route;
  o.nroutes = 1;
  o.handoff = handoff;
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
  int fd = socket(AF_INET, SOCK_STREAM, 0);
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
#ifdef OSB_TEST_HARNESS_H
#include <pthread.h>
/* The whole run of a route module's test (test_xd_commands.c, test_xd_dirs.c, test_xd_upload.c): a temporary
 * workspace (ws), the module made from ctx (loop and workspace filled in here) and served on loopback (port),
 * client(NULL) on a thread while the loop runs; once it calls xd_module_test_done() the server and the module
 * close, the loop ends and the workspace is removed. Returns the harness's summary (the process's exit code). */
typedef struct {
  const char *name;                  /* the temporary directory's prefix */
  xd_ctx ctx;                        /* options of the module (loop and workspace set here) */
  void *(*make)(const xd_ctx *ctx);
  xd_route_fn route;
  void (*close)(void *module);
  void *(*client)(void *arg);
  xd_handoff_fn handoff;
} xd_module_test;

static uv_async_t xd_mt_done_async;
static xd_server *xd_mt_server;
static void *xd_mt_module;
static void (*xd_mt_close)(void *module);

static inline void xd_module_test_done(void) { uv_async_send(&xd_mt_done_async); }

static inline void xd_mt_on_done(uv_async_t *a) {
  uv_close((uv_handle_t *)a, NULL);
  xd_server_close(xd_mt_server);
  xd_mt_close(xd_mt_module);
}

static inline int xd_run_module_test(xd_module_test *t, char ws[256], int *port) {
  if (!t_tempdir(ws, 256, t->name)) {
    printf("cannot make a temporary directory\n0 passed, 1 failed\n");
    return 1;
  }
  uv_loop_t loop;
  uv_loop_init(&loop);
  t->ctx.loop = &loop;
  t->ctx.workspace = ws;
  xd_mt_module = t->make(&t->ctx);
  xd_mt_close = t->close;
  xd_route route = {xd_mt_module, t->route};
  xd_mt_server = xd_mt_module ? xd_listen_one(&loop, &route, t->handoff, port) : NULL;
  if (!xd_mt_server) {
    printf("server did not start\n0 passed, 1 failed\n");
    return 1;
  }
  uv_async_init(&loop, &xd_mt_done_async, xd_mt_on_done);
  pthread_t th;
  pthread_create(&th, NULL, t->client, NULL);
  uv_run(&loop, UV_RUN_DEFAULT); /* returns once the server and the module closed every handle */
  pthread_join(th, NULL);
  CHECK(uv_loop_close(&loop) == 0);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", ws);
  if (system(cmd) != 0) printf("could not remove %s\n", ws);
  return t_summary();
}
#endif
#endif
