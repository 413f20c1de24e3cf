/* Errors of the OpenSandbox clients as values: the `kind`/`status`/`code`/`message`/`requestId`/`attempts`
 * of the native API contract (docs/ARCHITECTURE.md). Also maps an HTTP result (transport failure or non-2xx
 * body: {code,message}, execd's {"error": …}, FastAPI's 422 {"detail": […]}, non-JSON) onto one, with secrets
 * redacted from the message. */
#ifndef OSB_ERROR_H
#define OSB_ERROR_H
#include <stddef.h>
#include "core/http.h"

typedef enum {
  OSB_KIND_NONE = 0,
  OSB_KIND_API,       /* the server answered non-2xx */
  OSB_KIND_TRANSPORT, /* connect/reset/TLS/DNS */
  OSB_KIND_TIMEOUT,   /* our deadline */
  OSB_KIND_CANCELLED,
  OSB_KIND_PROTOCOL,  /* malformed response or stream */
  OSB_KIND_STREAM     /* an error object inside an execd stream */
} osb_kind;

typedef struct {
  osb_kind kind;
  long status;          /* HTTP status for api errors, else 0 */
  char code[96];        /* server code, or ours: TRANSPORT, TIMEOUT, HTTP_<status>, … */
  char message[1024];
  char request_id[128]; /* "" when unknown */
  int attempts;
} osb_error;

const char *osb_kind_name(osb_kind k); /* "api", "transport", … */

/* Sets every field (request_id cleared, attempts 1). */
void osb_error_set(osb_error *e, osb_kind kind, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* From a finished HTTP request that failed (res->error != OK) or answered non-2xx. secrets: NULL-terminated
 * list of strings that must never appear in the message (replaced by "***"). fallback_request_id is used when
 * the response carried no X-Request-ID (may be NULL). */
void osb_error_from_http(osb_error *e, const osb_http_result *res, const char *const *secrets,
                         const char *fallback_request_id);

/* A 2xx answer whose body is not what the API promises: protocol kind, UNEXPECTED_RESPONSE,
 * "unexpected response: <why> (HTTP <status>)", with the status, attempts and X-Request-ID (else fallback). */
void osb_error_unexpected(osb_error *e, const osb_http_result *res, const char *why, const char *fallback_request_id);

/* The body of an answer as a malloc'd NUL-terminated string, or NULL with e set (OUT_OF_MEMORY). */
char *osb_body_text(const osb_http_result *res, osb_error *e);

/* Replaces every occurrence of each secret (non-empty, NULL-terminated list) in s (size cap) with "***". */
void osb_redact(char *s, size_t cap, const char *const *secrets);

#endif
