/* An execd connection's settings (see conn.h). */
#define _GNU_SOURCE
#include "conn.h"
#include "lifecycle.h"
#include "core/buf.h"

#include <stdarg.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void osb_strv_free(char **v, size_t n) {
  if (!v) return;
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

char **osb_strv_dup(char *const *v, size_t n) {
  char **r = calloc(n + 1, sizeof *r);
  if (!r) return NULL;
  for (size_t i = 0; i < n; i++)
    if (!(r[i] = strdup(v[i]))) {
      osb_strv_free(r, i);
      return NULL;
    }
  return r;
}

void osb_conn_clear(osb_conn *c) {
  free(c->base_url);
  osb_strv_free(c->headers, c->nheaders);
  osb_strv_free(c->secrets, c->nheaders);
  free(c->ca_file);
  memset(c, 0, sizeof *c);
}

int osb_conn_init(osb_conn *c, const char *base_url, const char *const *header_kv, size_t nheaders,
                  long timeout_ms, long idle_ms, char *err, size_t errlen) {
  memset(c, 0, sizeof *c);
  if (osb_check_base_url(base_url, err, errlen) != 0) return -1;
  for (size_t i = 0; i < nheaders; i++) {
    if (osb_check_header(header_kv[2 * i], header_kv[2 * i + 1], err, errlen) != 0) return -1;
    if (strcasecmp(header_kv[2 * i], "OPEN-SANDBOX-API-KEY") == 0) {
      snprintf(err, errlen, "the lifecycle API key must not be sent to execd");
      return -1;
    }
  }
  c->base_url = strdup(base_url);
  c->headers = calloc(nheaders + 1, sizeof *c->headers);
  c->secrets = calloc(nheaders + 1, sizeof *c->secrets);
  if (!c->base_url || !c->headers || !c->secrets) goto oom;
  for (size_t i = 0; i < nheaders; i++) {
    const char *v = header_kv[2 * i + 1] ? header_kv[2 * i + 1] : "";
    size_t n = strlen(header_kv[2 * i]) + strlen(v) + 3;
    c->headers[i] = malloc(n);
    c->secrets[i] = strdup(v);
    c->nheaders = i + 1;
    if (!c->headers[i] || !c->secrets[i]) goto oom;
    snprintf(c->headers[i], n, "%s: %s", header_kv[2 * i], v);
  }
  size_t n = strlen(c->base_url);
  while (n > 0 && c->base_url[n - 1] == '/') c->base_url[--n] = 0;
  c->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
  c->idle_ms = idle_ms > 0 ? idle_ms : 10000;
  return 0;
oom:
  osb_conn_clear(c);
  snprintf(err, errlen, "out of memory");
  return -1;
}

osb_conn *osb_conn_new(const char *base_url, const char *const *header_kv, size_t nheaders, long timeout_ms,
                       long idle_ms, char *err, size_t errlen) {
  osb_conn *c = calloc(1, sizeof *c);
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (osb_conn_init(c, base_url, header_kv, nheaders, timeout_ms, idle_ms, err, errlen) != 0) {
    free(c);
    return NULL;
  }
  return c;
}

void osb_conn_free(osb_conn *c) {
  if (!c) return;
  osb_conn_clear(c);
  free(c);
}

int osb_conn_set_ca_file(osb_conn *c, const char *path, char *err, size_t errlen) {
  if (osb_check_ca_file(path, err, errlen) != 0) return -1;
  char *p = strdup(path);
  if (!p) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  free(c->ca_file);
  c->ca_file = p;
  return 0;
}

int osb_conn_copy(osb_conn *dst, const osb_conn *src) {
  memset(dst, 0, sizeof *dst);
  dst->base_url = strdup(src->base_url);
  dst->headers = osb_strv_dup(src->headers, src->nheaders);
  dst->secrets = osb_strv_dup(src->secrets, src->nheaders);
  dst->nheaders = src->nheaders;
  dst->timeout_ms = src->timeout_ms;
  dst->idle_ms = src->idle_ms;
  dst->ca_file = src->ca_file ? strdup(src->ca_file) : NULL;
  if (dst->base_url && dst->headers && dst->secrets && (!src->ca_file || dst->ca_file)) return 0;
  osb_conn_clear(dst);
  return -1;
}

const char **osb_conn_headers(const osb_conn *c, const char *const *extra, size_t nextra, size_t *n) {
  const char **h = calloc(c->nheaders + nextra + 1, sizeof *h);
  if (!h) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < c->nheaders; i++) h[k++] = c->headers[i];
  for (size_t i = 0; i < nextra; i++) h[k++] = extra[i];
  *n = k;
  return h;
}

osb_http_req *osb_conn_start(osb_engine *e, const osb_conn *c, osb_http_opts *o, const char *const *extra,
                             size_t nextra, const char *path_fmt, ...) {
  osb_buf url;
  osb_buf_init(&url);
  size_t n = 0;
  const char **h = osb_conn_headers(c, extra, nextra, &n);
  osb_http_req *r = NULL;
  va_list ap;
  va_start(ap, path_fmt);
  char *path = NULL;
  int ok = vasprintf(&path, path_fmt, ap) >= 0;
  va_end(ap);
  if (h && ok && osb_buf_append_str(&url, c->base_url) == 0 && osb_buf_append_str(&url, path) == 0) {
    o->url = url.data;
    o->headers = h;
    o->nheaders = n;
    o->ca_file = c->ca_file;
    r = osb_http_start(e, o);
    o->url = NULL; /* copied by the HTTP layer; ours are freed below */
    o->headers = NULL;
  }
  if (ok) free(path);
  free(h);
  osb_buf_free(&url);
  return r;
}
