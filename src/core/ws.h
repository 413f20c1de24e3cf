/* WebSocket client on libwebsockets, on its own thread: one lws context per osb_ws, served by
 * `while (!stop) lws_service(ctx, 0)` with lws' default poll backend (never lws' libuv mode inside Node, see the
 * native-build notes). Other threads hand work over through a mutex-protected queue and lws_cancel_service(); the
 * queue is drained in LWS_CALLBACK_EVENT_WAIT_CANCELLED on the lws thread.
 *
 * Every entry point is thread-safe. Callbacks run on the lws thread with the context mutex held, so they must be
 * short and must not call back into this module (post the work elsewhere instead). Messages are delivered whole
 * (fragments reassembled). After osb_ws_close() returns, no callback of that connection runs or will run. */
#ifndef OSB_WS_H
#define OSB_WS_H
#include <stddef.h>

typedef struct osb_ws osb_ws;
typedef struct osb_ws_conn osb_ws_conn;

typedef struct {
  /* The upgrade succeeded. */
  void (*on_open)(void *ud);
  /* One whole message; p is borrowed. */
  void (*on_message)(void *ud, int binary, const char *p, size_t n);
  /* Exactly once unless osb_ws_close() came first: the connection ended. code = the peer's close code (0 when
   * none: connect failure, reset), reason = its reason or our error text, http_status = the handshake's HTTP
   * status when the upgrade was refused (404, 409, …), else 0. Strings are borrowed. */
  void (*on_close)(void *ud, int code, const char *reason, int http_status);
} osb_ws_callbacks;

/* Starts the lws thread. NULL + err on failure. */
osb_ws *osb_ws_start(char *err, size_t errlen);
/* Stops the thread and destroys the context. Connections still open are dropped WITHOUT callbacks (owners must
 * have closed theirs, or must not rely on on_close after this). Then frees w. Not from the lws thread. */
void osb_ws_stop(osb_ws *w);

/* Starts a connection to url (ws:// or wss://; http:// and https:// are accepted as aliases). ca_file: PEM
 * bundle that wss servers are verified with (copied), NULL = osb_tls_default_ca() (tls_ca.h); a file that cannot
 * be loaded ends the connection through on_close. header_kv: 2*nh strings (name, value), sent on the handshake.
 * Returns a handle with one reference for the caller, or NULL + err (bad URL, stopping, OOM; no callback then). */
osb_ws_conn *osb_ws_connect(osb_ws *w, const char *url, const char *ca_file, const char *const *header_kv,
                            size_t nh, const osb_ws_callbacks *cb, void *ud, char *err, size_t errlen);
/* Queues a message (copied). Returns 0, or -1 when the connection is closed/closing or on OOM. */
int osb_ws_send(osb_ws_conn *c, int binary, const void *p, size_t n);
/* A message built in place (no copy of a big payload): osb_ws_buf_alloc returns room for n payload bytes (with the
 * headroom libwebsockets needs before it), owned by the caller, or NULL on OOM; osb_ws_send_buf queues it, taking it
 * in every case (freed once sent, or at once on -1: connection closed/closing); osb_ws_buf_free frees one not sent.
 * A big buffer (128 KiB to 8 MiB) comes from, and once written goes back to, the two spares of c's WebSocket thread
 * (freed with it): fresh pages would cost a page fault per 4 KiB. A binary message over 256 KiB is written as
 * fragments of 256 KiB (no copy of its unsent rest in libwebsockets). */
void *osb_ws_buf_alloc(osb_ws_conn *c, size_t n);
int osb_ws_send_buf(osb_ws_conn *c, int binary, void *payload, size_t n);
void osb_ws_buf_free(void *payload);
/* Flow control: paused = 1 stops reading from the socket (the peer's sends then back up), 0 resumes. Applies
 * also to a connection still connecting. */
void osb_ws_pause(osb_ws_conn *c, int paused);
/* Detaches the callbacks (none runs after this returns) and closes the connection with 1000. Idempotent. */
void osb_ws_close(osb_ws_conn *c);
/* Drops the caller's reference (closes first if still open). */
void osb_ws_conn_release(osb_ws_conn *c);

typedef struct {
  long threads;     /* 1 while the lws thread runs */
  long connections; /* connections not yet gone (connecting, open or closing) */
} osb_ws_stats;
void osb_ws_get_stats(osb_ws *w, osb_ws_stats *out);

#endif
