/* The C execd's route interface (src/execd/): what a route module (commands.c, dirs.c, ...) sees of the HTTP server
 * (server.c). One libuv loop on the main thread runs everything; nothing here is thread-safe.
 *
 * The server parses each request ONCE (the rules of lib/dev-server/execd/http.js parseTarget: a refused target never
 * reaches a route), checks X-EXECD-ACCESS-TOKEN, answers GET /ping itself, then asks each route module in turn; a
 * request no module takes gets the real execd's router answer (404 `404 page not found`, text/plain).
 *
 * Ownership: an xd_req and everything it points to belong to the server and stay valid until the route has finished
 * its response (xd_send* / xd_stream_end) or the client went away (the on_close callback has returned). An xd_res is
 * the server's too; a route must not touch it after it finished it or after its on_close callback ran. */
#ifndef XD_H
#define XD_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct {
  const char *method;    /* "GET", "POST", ... (NUL-terminated) */
  const char *path;      /* canonical path (segments re-encoded the one way, see parseTarget), e.g. "/command/status/ab" */
  const char *query;     /* raw query string after '?', "" when none (never NULL) */
  const char *body;      /* the whole request body (Content-Length or chunked, at most XD_BODY_LIMIT), NUL-terminated;
                          * "" when body_streamed */
  size_t body_len;
  int body_streamed;     /* the body is not read yet: the route takes it as it comes (xd_body_read) */
  int wants_close;       /* the request asked for Connection: close */
  const char *const *header_kv; /* 2*nheaders strings, names lower-cased, in arrival order */
  size_t nheaders;
} xd_req;

/* Largest request body read into xd_req.body (execd's 64 MiB); a larger one is answered 413 by the server. */
#define XD_BODY_LIMIT (64u * 1024u * 1024u)

/* First header of that (lower-case) name, or NULL. */
const char *xd_header(const xd_req *r, const char *name);
/* First value of query parameter `key` ('+' = space, %XX decoded), malloc'd, or NULL when absent. Caller frees. */
char *xd_query(const xd_req *r, const char *key);
/* Every value of query parameter `key`, in order (URLSearchParams.getAll), decoded like xd_query: v[i] malloc'd and
 * NUL-terminated, len[i] its length (a %00 makes it larger than strlen). */
typedef struct {
  char **v;
  size_t *len;
  size_t n;
} xd_query_list;
/* 0 with *out filled (n = 0: none; free it with xd_query_list_free either way), -1 on OOM (nothing to free). */
int xd_query_all(const xd_req *r, const char *key, xd_query_list *out);
void xd_query_list_free(xd_query_list *l);

typedef struct xd_res xd_res;

/* --- complete answers (each finishes the response; the connection then serves its next request or closes) --- */
/* status + headers ("Name: value" strings, CRLF added) + body with Content-Length. */
void xd_send(xd_res *res, int status, const char *const *headers, size_t nheaders, const void *body, size_t len);
/* As xd_send, for a HEAD request: the head with Content-Length: content_length and no body. */
void xd_send_head(xd_res *res, int status, const char *const *headers, size_t nheaders, size_t content_length);
/* Content-Type: application/json; charset=utf-8 */
void xd_send_json(xd_res *res, int status, const char *json, size_t len);
/* {"code":...,"message":...} written like Go's encoding/json (xd_json_str), application/json */
void xd_send_error(xd_res *res, int status, const char *code, const char *message);
/* 200, Content-Length: 0, no body */
void xd_send_empty(xd_res *res);

/* --- fixed-length streamed answers (a file's bytes, with bounded memory): the head with Content-Length, then the body
 * in pieces as the route reads them; backpressure with xd_stream_pending / xd_stream_on_drain, xd_res_on_close as for
 * the event streams. Not for a HEAD request (xd_send_head). --- */
/* Writes the head: status, headers, Date, Content-Length: content_length (and Connection: close when asked). */
void xd_body_open(xd_res *res, int status, const char *const *headers, size_t nheaders, uint64_t content_length);
/* Queues len bytes of the body (what goes past content_length is dropped). 0; -1 when the client is gone. */
int xd_body_write(xd_res *res, const void *data, size_t len);
/* The response is finished; when fewer bytes than announced were written (a file that shrank) the connection is closed
 * after them, as Go's server does. */
void xd_body_end(xd_res *res);

/* --- streamed answers: text/event-stream, chunked (each xd_stream_write is one chunk, written at once) --- */
/* Headers as the real execd sends them: Content-Type: text/event-stream, Cache-Control: no-cache,
 * Connection: keep-alive (or close when the request asked for it), X-Accel-Buffering: no, Transfer-Encoding: chunked. */
void xd_stream_open(xd_res *res);
/* Queues one chunk. Returns 0; -1 when the client is gone (nothing queued). */
int xd_stream_write(xd_res *res, const void *data, size_t len);
/* Bytes queued on the socket and not yet written (backpressure: stop reading the producer above some bound). */
size_t xd_stream_pending(const xd_res *res);
/* fn(arg) once, when the queued bytes drop to 0 (or the client went away). Replaces a previous registration. */
void xd_stream_on_drain(xd_res *res, void (*fn)(void *arg), void *arg);
/* The terminating chunk; the response is finished. */
void xd_stream_end(xd_res *res);
/* True once the client closed or reset the connection (writes are then dropped). */
int xd_res_closed(const xd_res *res);
/* True once the client ended its side of the connection (FIN) while its answer is under way: it half-closed and
 * still reads (the answer goes out, as from Go's server), or it closed (the answer is lost). */
int xd_res_peer_ended(const xd_res *res);
/* fn(arg) once if the client goes away before the response is finished. Replaces a previous registration. */
void xd_res_on_close(xd_res *res, void (*fn)(void *arg), void *arg);

/* --- request bodies read as they arrive (server.h xd_server_streams_body: POST /files/upload) ---
 * Such a request is routed as soon as its head is in (body_streamed set, body ""), with no size limit. The route that
 * takes it calls xd_body_read; the body's bytes then come through on_data as they are read (Content-Length or
 * chunked framing removed), then on_end once, when it is whole. A body cut short, a client gone, or bad chunked
 * framing (the server answers Go's raw 400 and closes) is the res's on_close callback instead. The route should
 * answer after on_end: an answer before it closes the connection (the rest of the body is not read). */
typedef struct {
  void (*on_data)(void *arg, const char *data, size_t len); /* data borrowed for the call */
  void (*on_end)(void *arg);
} xd_body_callbacks;
/* Starts the flow (callbacks borrowed; they must outlive the body). Nothing when res is gone or not streamed. */
void xd_body_read(xd_res *res, const xd_body_callbacks *cb, void *arg);
/* Backpressure: 1 = no on_data until resumed (the socket is not read meanwhile), 0 = resume. */
void xd_body_pause(xd_res *res, int paused);

/* --- upgraded connections (WebSocket): after its 101 answer the connection is the route's, as a byte pipe --- */
typedef struct xd_raw xd_raw;
typedef struct {
  void (*on_data)(void *arg, const char *data, size_t len); /* bytes from the client */
  void (*on_end)(void *arg);   /* the client closed or reset the connection, or the server is closing: the xd_raw is
                                * gone after this returns (no more calls, and the route must not use it) */
  void (*on_drain)(void *arg); /* every queued byte was written (after an xd_raw_write) */
} xd_raw_callbacks;
/* Writes `head` (the whole answer head, e.g. "HTTP/1.1 101 ...\r\n\r\n"; none when len is 0) and turns the request's
 * connection into a raw byte pipe: res is finished; bytes the client sent after the request head (e.g. the body of a
 * /proxy/{port} request, which the server does not read: xd_proxy_route) come through on_data (from the next loop turn on). Callbacks are
 * borrowed and must outlive the pipe. NULL when the client is already gone (nothing called). */
xd_raw *xd_upgrade(xd_res *res, const char *head, size_t len, const xd_raw_callbacks *cb, void *arg);
/* From now on the client's FIN (end of its side) calls fn(arg) instead of ending the pipe: reading stops, the pipe
 * stays open for writing (a half-closed client still gets its answer). */
void xd_raw_on_eof(xd_raw *r, void (*fn)(void *arg));
/* Gives the pipe back to the server as an HTTP connection once the route's exchange is over (proxy.c, after a
 * request it read itself): `rest` (len bytes, copied; e.g. the next pipelined request, read past the end of the one
 * the route served) and whatever the client sent since are read as the next request, from the next loop turn on.
 * No callback runs after this call and the route must not use r again. */
void xd_raw_release(xd_raw *r, const char *rest, size_t len);
/* Queues the parts (copied into one write). 0, or -1 when the connection is gone or failing (on_end follows). */
int xd_raw_write(xd_raw *r, const char *const *parts, const size_t *lens, size_t nparts);
/* Bytes queued and not yet written. */
size_t xd_raw_pending(const xd_raw *r);
/* Stops (1) or resumes (0) reading from the client. */
void xd_raw_pause(xd_raw *r, int paused);
/* Closes the connection once what is queued is written (FIN), or at once (`now`): no callback runs after this call. */
void xd_raw_close(xd_raw *r, int now);
/* The upgrade header a request asks for ("websocket"), or NULL when it is not an upgrade. */
const char *xd_upgrade_of(const xd_req *req);

/* --- Go-compatible JSON text (what encoding/json writes): --- */
/* Appends s (len bytes, any bytes) as a JSON string literal: \" \\ \n \r \t, other bytes < 0x20 as \u00XX, < > &
 * U+2028 U+2029 as \u003c \u003e \u0026 \u2028 \u2029, invalid UTF-8 bytes as \ufffd. Returns 0, -1 on OOM. */
struct osb_buf;
int xd_json_str(struct osb_buf *out, const char *s, size_t len);

/* --- route modules --- */
/* Returns 1 when the module takes the request (it answers now or later through res), 0 when it is not its route
 * (nothing touched). */
typedef int (*xd_route_fn)(void *module, const xd_req *req, xd_res *res);

/* What every module gets at start (from execd's command line). */
typedef struct {
  uv_loop_t *loop;
  const char *workspace;     /* --workspace: default cwd of commands */
  int signal_forwarding;     /* --signal-forwarding */
  int pty_exit_race;         /* --pty-exit-race */
  int pty_close_linger;      /* --pty-close-linger */
  uint64_t command_tail_ms;  /* --command-tail-ms: how long a /command stream stays open after its final event */
  /* --signal-forwarding: hands a signal to the foreground command (commands.c), e.g. the SIGPIPE of a PTY client's
   * closed connection (pty.c) */
  void (*relay_signal)(int sig);
  /* --code-kernels: the directory of the code interpreter's kernel programs (code-python-kernel.py, ...), or NULL */
  const char *code_kernels;
  /* --node: the node that runs the javascript kernel (NULL: `node` on PATH) */
  const char *node_path;
  /* DELETE /command?id= of an id commands.c does not know: the code module's contexts and shell runs
   * (xd_code_interrupt). 1 when it took the request (answered now or later), 0 when the id is not its either. */
  int (*code_interrupt)(const char *id, xd_res *res);
  /* DELETE /command?id= of an id the commands module does not know: 1 when another native module took it (a bash
   * session, which upstream's Interrupt closes: sessions.c), 0 when none has it. NULL: none. */
  int (*interrupt_other)(const char *id);
} xd_ctx;

/* --- the native modules, in the order the server asks them (server.c) --- */
/* commands.c: POST /command, DELETE /command?id=, GET /command/status/{id}, GET /command/{id}/logs */
void *xd_commands_new(const xd_ctx *ctx);          /* NULL on OOM */
int xd_commands_route(void *module, const xd_req *req, xd_res *res);
void xd_commands_relay_signal(void *module, int sig); /* --signal-forwarding: a signal execd received */
void xd_commands_close(void *module);              /* shutdown: kills running commands, frees everything */
/* dirs.c: POST /directories */
void *xd_dirs_new(const xd_ctx *ctx);
int xd_dirs_route(void *module, const xd_req *req, xd_res *res);
void xd_dirs_close(void *module);
/* upload.c: POST /files/upload of any size, Content-Length or chunked, its body read as it arrives (xd_body_read) */
void *xd_upload_new(const xd_ctx *ctx);
int xd_upload_route(void *module, const xd_req *req, xd_res *res);
void xd_upload_close(void *module);
/* files.c: GET /files/info, GET and HEAD /files/download (bytes, Range, offset/limit lines, streamed past 8 MiB),
 * GET /files/search, GET /directories/list */
void *xd_files_new(const xd_ctx *ctx);
int xd_files_route(void *module, const xd_req *req, xd_res *res);
void xd_files_close(void *module);
/* proxy.c: ANY /proxy/{port}/{path}, HTTP and upgrades, to 127.0.0.1:{port} (44772: this execd, wherever it
 * listens). With a port 1..65535 the request's body is not read by the server: the route takes the connection right
 * after the head (xd_upgrade with no head) and streams it; any other /proxy/ path is its 400 after the body. */
void *xd_proxy_new(const xd_ctx *ctx);
/* Where this execd listens, for /proxy/44772: its Unix socket (socket_path), else host:port. 0, -1 on OOM. */
int xd_proxy_set_self(void *module, const char *socket_path, const char *host, int port);
int xd_proxy_route(void *module, const xd_req *req, xd_res *res);
void xd_proxy_close(void *module); /* shutdown: ends every exchange */
/* The port of a canonical path `/proxy/{port}[/...]`: 1..65535, 0 when the port is not (the 400), -1 when the path is
 * not the proxy's. */
int xd_proxy_port(const char *path);
/* pty.c: POST /pty, GET and DELETE /pty/{id}, the WebSocket GET /pty/{id}/ws */
void *xd_pty_new(const xd_ctx *ctx);
int xd_pty_route(void *module, const xd_req *req, xd_res *res);
void xd_pty_close(void *module);               /* shutdown: closes its clients, kills its runs */
/* code.c: POST /code/context, GET /code/contexts[/{id}], DELETE /code/contexts[/{id}], POST /code, DELETE /code */
void *xd_code_new(const xd_ctx *ctx);
int xd_code_route(void *module, const xd_req *req, xd_res *res);
/* Interrupts the context or shell run `id` (DELETE /code?id=, DELETE /command?id=): 1 when it is one (answered now
 * or once the run ended), 0 when the id is unknown (nothing sent). */
int xd_code_interrupt(void *module, const char *id, xd_res *res);
void xd_code_close(void *module);              /* shutdown: kills the kernels and shell runs */
/* sessions.c: POST /session, POST /session/{id}/run, DELETE /session/{id} */
void *xd_sessions_new(const xd_ctx *ctx);
int xd_sessions_route(void *module, const xd_req *req, xd_res *res);
/* DELETE /command?id= of a session id: the session is closed as by DELETE /session/{id}; 1 when it was one. */
int xd_sessions_interrupt(void *module, const char *id);
void xd_sessions_close(void *module);          /* shutdown: kills the runs, removes the sessions' files */
/* metrics.c: GET /metrics, GET /metrics/watch */
void *xd_metrics_new(const xd_ctx *ctx);
int xd_metrics_route(void *module, const xd_req *req, xd_res *res);
void xd_metrics_close(void *module);           /* shutdown: ends its streams */

#endif
