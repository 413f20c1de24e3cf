/* The C execd's HTTP/1.1 server (server.c): listens on execd's Unix socket or TCP port, parses each request once
 * (request line, headers, Content-Length or chunked body; bounded, or handed to the route as it arrives for
 * POST /files/upload: xd_body_read), checks the access token, answers GET /ping, asks the route modules in order and
 * answers what none takes as the real execd's router does (404 `404 page not found`, or 301 for a GET route with a
 * trailing slash). Pipelined requests are answered in order (one at a time per connection); a
 * connection idle for XD_IDLE_MS between requests is closed. One libuv loop (the caller's), main thread only.
 *
 * Ownership: the server owns its connections and the xd_req/xd_res it gives the routes (xd.h). The options' strings
 * and route table are borrowed and must outlive the server. */
#ifndef XD_SERVER_H
#define XD_SERVER_H
#include <stddef.h>
#include <uv.h>
#include "xd.h"

/* Idle keep-alive connections are closed after this long without a request (main.js: keepAliveTimeout 60 s). */
#define XD_IDLE_MS 60000u
/* Request line + headers larger than this are refused (431, as Node's http server with its 16 KiB default). */
#define XD_HEAD_LIMIT (16u * 1024u)
/* A too-large body gets its 413 (Connection: close) as soon as it is known to pass XD_BODY_LIMIT, and is still read
 * and dropped up to this many bytes more (http.js DISCARD_LIMIT), so a client still writing it is not reset before
 * it reads the answer; then the connection closes. One declared beyond it: the 413 and the close at once. */
#define XD_DISCARD_LIMIT (256u * 1024u * 1024u)

typedef struct {
  void *module;
  xd_route_fn route;
} xd_route;

typedef struct {
  uv_loop_t *loop;
  const char *token;          /* required X-EXECD-ACCESS-TOKEN; "" or NULL: no check */
  const xd_route *routes;     /* asked in order */
  size_t nroutes;
} xd_server_opts;

typedef struct xd_server xd_server;

/* NULL on OOM. */
xd_server *xd_server_new(const xd_server_opts *opts);
/* Listens on a Unix socket (a stale file at `path` is removed first). Returns 0, or a negative libuv error. */
int xd_server_listen_unix(xd_server *s, const char *path);
/* Listens on host:port (port 0: any); *bound gets the port. Returns 0, or a negative libuv error. */
int xd_server_listen_tcp(xd_server *s, const char *host, int port, int *bound);
/* Closes the listener and every connection (routes' on_close callbacks run); frees the server once the handles are
 * closed (the loop must run on). */
void xd_server_close(xd_server *s);

/* Whether a method + canonical path is routed as soon as its head is in, its body read by the route as it arrives
 * (xd_body_read), with no size limit: POST /files/upload. */
int xd_server_streams_body(const char *method, const char *path);

/* --- the request target rules (http.js parseTarget), exposed for the fuzz target and tests --- */
typedef struct {
  char *path;        /* canonical path, malloc'd (NULL on error) */
  char *query;       /* raw query after '?', malloc'd, "" when none */
  const char *error; /* static text of the refusal, or NULL */
  int malformed;     /* the refusal is a malformed escape (Go's own raw 400) */
} xd_target;
/* Parses `raw` (len bytes). Returns 0 (t->path/query set, caller frees both) or -1 (t->error set; -1 with error NULL
 * is OOM). */
int xd_parse_target(const char *raw, size_t len, xd_target *t);

#endif
