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
#endif
