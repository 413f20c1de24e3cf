/* An execd connection: the settings every execd client (commands, code, upload, processes) sends requests with —
 * base URL (no trailing '/'), the endpoint headers as "Name: value" lines, their values as the secrets to redact
 * from errors, the request and stream-idle timeouts, and an optional CA bundle. An osb_conn owns all its strings;
 * an operation takes its own copy (osb_conn_copy) so it outlives the client it came from. Not thread-safe: fill it
 * on one thread, then only read it. */
#ifndef OSB_CONN_H
#define OSB_CONN_H
#include <stddef.h>
#include "core/engine.h"
#include "core/http.h"

typedef struct osb_conn {
  char *base_url;   /* http(s)://host:port[/prefix], trailing '/' removed */
  char **headers;   /* nheaders "Name: value" lines, NULL-terminated */
  char **secrets;   /* the nheaders header values, NULL-terminated (for osb_redact / osb_error_from_http) */
  size_t nheaders;
  long timeout_ms;  /* per request */
  long idle_ms;     /* stream watchdog */
  char *ca_file;    /* NULL = osb_tls_default_ca() (core/tls_ca.h) */
} osb_conn;

/* Validates and copies: base_url must be http(s); header_kv is 2*nheaders strings (name, value; a NULL value is
 * ""), checked like the lifecycle headers, and the lifecycle API key is refused. timeout_ms / idle_ms <= 0 take
 * the defaults 30000 / 10000. Returns 0, or -1 with err set and c left empty. */
int osb_conn_init(osb_conn *c, const char *base_url, const char *const *header_kv, size_t nheaders,
                  long timeout_ms, long idle_ms, char *err, size_t errlen);
/* The same on the heap (osb_conn_free): NULL + err on bad input. The execd and code interpreter clients are
 * osb_conn values (execd.h, code.h). */
osb_conn *osb_conn_new(const char *base_url, const char *const *header_kv, size_t nheaders, long timeout_ms,
                       long idle_ms, char *err, size_t errlen);
void osb_conn_free(osb_conn *c);
/* https: trust the PEM CA bundle at path (copied). Returns 0, or -1 (message) when not readable. */
int osb_conn_set_ca_file(osb_conn *c, const char *path, char *err, size_t errlen);
/* A deep copy for an operation. Returns 0, or -1 on OOM (dst left empty). */
int osb_conn_copy(osb_conn *dst, const osb_conn *src);
/* Frees the strings and empties c (safe on an empty or zeroed osb_conn). */
void osb_conn_clear(osb_conn *c);
/* The endpoint header lines plus nextra extra lines, in that order: a malloc'd, NULL-terminated array of
 * borrowed pointers (free the array only); *n = its length. NULL on OOM. */
const char **osb_conn_headers(const osb_conn *c, const char *const *extra, size_t nextra, size_t *n);

/* Starts a request on the engine thread (call it there): the URL is base_url followed by the formatted path, the
 * headers the endpoint's plus nextra extra lines, with the CA file; method, body, timeouts and callbacks come from
 * *o (its url, headers, nheaders and ca_file are set here). Returns the request, or NULL when out of memory. */
osb_http_req *osb_conn_start(osb_engine *e, const osb_conn *c, osb_http_opts *o, const char *const *extra,
                             size_t nextra, const char *path_fmt, ...) __attribute__((format(printf, 6, 7)));

/* String vectors: a deep copy of n strings (NULL-terminated; NULL on OOM), and freeing n of them and the array. */
char **osb_strv_dup(char *const *v, size_t n);
void osb_strv_free(char **v, size_t n);

#endif
