/* HTTP on a curl multi handle driven by uv_poll/uv_timer on the engine loop. One multi per engine, so HTTP/1.1
 * keep-alive connections are reused across requests. Every request has a deadline (our own uv timer, covering
 * retries), an optional idle watchdog and an optional streaming data callback. Idempotent requests may retry
 * connection failures with backoff inside the deadline. All functions here run on the engine thread only;
 * other threads reach them through osb_engine_post. */
#ifndef OSB_HTTP_H
#define OSB_HTTP_H
#include <stddef.h>
#include "engine.h"

typedef struct osb_http_ctx osb_http_ctx;
typedef struct osb_http_req osb_http_req;

enum {
  OSB_HTTP_OK = 0,
  OSB_HTTP_ETRANSPORT, /* connect/reset/DNS/TLS: message has curl's text */
  OSB_HTTP_ETIMEOUT,   /* our deadline */
  OSB_HTTP_EIDLE,      /* nothing received for idle_timeout_ms */
  OSB_HTTP_ECANCELLED, /* osb_http_cancel */
  OSB_HTTP_ESHUTDOWN,  /* the engine is stopping */
  OSB_HTTP_ETOOLARGE,  /* buffered response body over the limit */
  OSB_HTTP_ENOMEM
};

/* What on_done receives; every pointer is borrowed (valid during the callback only). */
typedef struct {
  int error;              /* OSB_HTTP_* */
  long status;            /* HTTP status, 0 if no response */
  const char *body;       /* buffered body, NUL-terminated ("" when streamed or empty) */
  size_t body_len;
  const char *request_id; /* X-Request-ID response header, or NULL */
  const char *date;       /* Date response header (printable ASCII, at most 63 bytes), or NULL */
  const char *message;    /* error text, "" when error == OK */
  int attempts;           /* how many times the request was sent */
  int stopped;            /* on_data returned 1: the caller ended the transfer early (error is OK) */
  int streamed;           /* the body went to on_data */
} osb_http_result;

/* Streaming: called for body bytes of a 2xx response. Return 0 to continue, 1 to end the transfer now (the
 * connection is closed; on_done follows with error OK and stopped=1), 2 to consume these bytes but pause receiving
 * (flow control: nothing more is read from the socket, the idle watchdog is suspended) until osb_http_resume.
 * Non-2xx bodies are buffered instead. */
typedef int (*osb_http_data_fn)(void *ud, long status, const char *p, size_t n);
/* Optional, streaming only: called once, before the first on_data of a 2xx body, with its Content-Length (-1 when
 * the response has none), e.g. to reserve a buffer of the right size. */
typedef void (*osb_http_begin_fn)(void *ud, long status, long long content_length);
/* Called exactly once, on the engine thread, never from inside osb_http_start. */
typedef void (*osb_http_done_fn)(void *ud, const osb_http_result *res);

typedef struct {
  const char *method;           /* "GET", "POST", "DELETE", "PATCH", … */
  const char *url;              /* copied */
  const char *const *headers;   /* "Name: value" lines, copied */
  size_t nheaders;
  const char *body;             /* copied; NULL = no body */
  size_t body_len;
  int take_body;                /* 1: body is a malloc'd buffer the request takes over (freed with it) instead of a
                                   copy; when osb_http_start returns NULL it is still the caller's */
  long timeout_ms;              /* whole request including retries; 0 = no deadline */
  long idle_timeout_ms;         /* max silence while waiting for/reading the response; 0 = none */
  int retry_connect;            /* retry connection failures with backoff (idempotent requests only) */
  int refused_final;            /* with retry_connect: a refused connect (CURLE_COULDNT_CONNECT) is final at once;
                                   execd's reads: a refused execd means the sandbox may be gone, and the caller asks
                                   the lifecycle API then instead of retrying until the deadline */
  size_t max_body;              /* buffered body limit; 0 = 32 MiB */
  const char *ca_file;          /* PEM CA bundle for https (copied); NULL = osb_tls_default_ca() (tls_ca.h) */
  osb_http_data_fn on_data;     /* NULL = buffer the body */
  osb_http_begin_fn on_begin;   /* optional, with on_data */
  osb_http_done_fn on_done;
  void *ud;
} osb_http_opts;

/* Created/freed by the engine. */
osb_http_ctx *osb_http_ctx_new(osb_engine *e);
void osb_http_ctx_free(osb_http_ctx *c);

/* Starts a request. Returns NULL when out of memory (on_done is then never called). The handle is valid until
 * on_done has been called. */
osb_http_req *osb_http_start(osb_engine *e, const osb_http_opts *o);
/* Resumes a transfer paused by on_data returning 2 (no-op otherwise). Never call it from inside on_data. */
void osb_http_resume(osb_http_req *r);
/* Ends a request early: on_done follows with OSB_HTTP_ECANCELLED (possibly synchronously). No-op once done. */
void osb_http_cancel(osb_http_req *r);

#endif
