/* Lifecycle client of the OpenSandbox sandboxes API (see lifecycle.h). */
#define _GNU_SOURCE
#include "lifecycle.h"
#include "core/buf.h"
#include "core/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <curl/curl.h>
#include <cjson/cJSON.h>

struct osb_lc {
  char *base_url; /* without a trailing "/" */
  char *api_key;  /* NULL when none */
  char *ca_file;  /* NULL = osb_tls_default_ca() (core/tls_ca.h) */
  long timeout_ms;
};

typedef enum { RES_JSON, RES_NONE, RES_ENDPOINT } res_mode;

typedef struct {
  char *method, *url, *body;
  char *headers[5];
  size_t nheaders;
  char *secret;
  char *ca_file;
  char request_id[33];
  long timeout_ms;
  int retry;
  res_mode mode;
  osb_lc_done_fn done;
  void *ud;
} lc_call;

void osb_new_request_id(char out[33]) {
  unsigned char raw[16];
  if (uv_random(NULL, NULL, raw, sizeof raw, 0, NULL) != 0) {
    static unsigned long counter;
    unsigned long v = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) ^ (unsigned long)(uintptr_t)out;
    memcpy(raw, &v, sizeof v);
    memcpy(raw + 8, &v, sizeof v);
  }
  for (int i = 0; i < 16; i++) sprintf(out + 2 * i, "%02x", raw[i]);
  out[32] = 0;
}

char *osb_url_escape(const char *s) {
  char *t = curl_easy_escape(NULL, s, (int)strlen(s));
  if (!t) return NULL;
  char *r = strdup(t);
  curl_free(t);
  return r;
}

int osb_check_base_url(const char *url, char *err, size_t errlen) {
  if (!url || (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)) {
    snprintf(err, errlen, "baseUrl must start with http:// or https://");
    return -1;
  }
  for (const unsigned char *p = (const unsigned char *)url; *p; p++)
    if (*p <= 0x20 || *p == 0x7f) {
      snprintf(err, errlen, "baseUrl must not contain spaces or control characters");
      return -1;
    }
  return 0;
}

int osb_check_header(const char *name, const char *value, char *err, size_t errlen) {
  if (!name || !*name) {
    snprintf(err, errlen, "header name must not be empty");
    return -1;
  }
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    if (*p <= 0x20 || *p >= 0x7f || *p == ':') {
      snprintf(err, errlen, "invalid header name");
      return -1;
    }
  for (const unsigned char *p = (const unsigned char *)value; p && *p; p++)
    if (*p == '\r' || *p == '\n') {
      snprintf(err, errlen, "header values must not contain CR or LF");
      return -1;
    }
  return 0;
}

osb_lc *osb_lc_new(const char *base_url, const char *api_key, long timeout_ms, char *err, size_t errlen) {
  if (osb_check_base_url(base_url, err, errlen) != 0) return NULL;
  if (api_key && osb_check_header("OPEN-SANDBOX-API-KEY", api_key, err, errlen) != 0) return NULL;
  osb_lc *lc = calloc(1, sizeof *lc);
  if (!lc) goto oom;
  lc->base_url = strdup(base_url);
  lc->api_key = api_key && *api_key ? strdup(api_key) : NULL;
  if (!lc->base_url || (api_key && *api_key && !lc->api_key)) goto oom;
  size_t n = strlen(lc->base_url);
  while (n > 0 && lc->base_url[n - 1] == '/') lc->base_url[--n] = 0;
  lc->timeout_ms = timeout_ms > 0 ? timeout_ms : 30000;
  return lc;
oom:
  osb_lc_free(lc);
  snprintf(err, errlen, "out of memory");
  return NULL;
}

int osb_check_ca_file(const char *path, char *err, size_t errlen) {
  if (!path || !*path || access(path, R_OK) != 0) {
    snprintf(err, errlen, "caFile is not a readable file");
    return -1;
  }
  return 0;
}

int osb_lc_set_ca_file(osb_lc *lc, const char *path, char *err, size_t errlen) {
  if (osb_check_ca_file(path, err, errlen) != 0) return -1;
  char *p = strdup(path);
  if (!p) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  free(lc->ca_file);
  lc->ca_file = p;
  return 0;
}

void osb_lc_free(osb_lc *lc) {
  if (!lc) return;
  free(lc->base_url);
  free(lc->api_key);
  free(lc->ca_file);
  free(lc);
}

static void call_free(lc_call *c) {
  free(c->method);
  free(c->url);
  free(c->body);
  for (size_t i = 0; i < c->nheaders; i++) free(c->headers[i]);
  free(c->secret);
  free(c->ca_file);
  free(c);
}

static void complete(lc_call *c, const osb_error *err, char *json, const char *date) {
  c->done(c->ud, err, json, date);
  call_free(c);
}

static void on_http_done(void *ud, const osb_http_result *res) {
  lc_call *c = ud;
  const char *secrets[] = {c->secret, NULL};
  osb_error err;
  if (res->error != OSB_HTTP_OK || res->status < 200 || res->status > 299) {
    osb_error_from_http(&err, res, secrets, c->request_id);
    complete(c, &err, NULL, res->date);
    return;
  }
  if (c->mode == RES_NONE) {
    complete(c, NULL, NULL, res->date);
    return;
  }
  cJSON *doc = cJSON_ParseWithLength(res->body, res->body_len);
  const char *why = NULL;
  if (!doc || !cJSON_IsObject(doc)) why = "response body is not a JSON object";
  else if (c->mode == RES_ENDPOINT && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(doc, "endpoint")))
    why = "endpoint response has no \"endpoint\" string";
  cJSON_Delete(doc);
  if (why) {
    osb_error_unexpected(&err, res, why, c->request_id);
    complete(c, &err, NULL, res->date);
    return;
  }
  char *json = osb_body_text(res, &err);
  complete(c, json ? NULL : &err, json, res->date);
}

static void run_call(osb_engine *e, void *arg, int shutdown) {
  lc_call *c = arg;
  osb_error err;
  if (shutdown) {
    osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "engine shutting down");
    complete(c, &err, NULL, NULL);
    return;
  }
  osb_http_opts o;
  memset(&o, 0, sizeof o);
  o.method = c->method;
  o.url = c->url;
  o.headers = (const char *const *)c->headers;
  o.nheaders = c->nheaders;
  o.body = c->body;
  o.body_len = c->body ? strlen(c->body) : 0;
  o.timeout_ms = c->timeout_ms;
  o.retry_connect = c->retry;
  o.ca_file = c->ca_file;
  o.on_done = on_http_done;
  o.ud = c;
  if (!osb_http_start(e, &o)) {
    osb_error_set(&err, OSB_KIND_TRANSPORT, "OUT_OF_MEMORY", "out of memory");
    complete(c, &err, NULL, NULL);
  }
}

/* path: already escaped, starts with "/". Takes ownership of nothing. */
static int submit(osb_engine *e, const osb_lc *lc, const char *method, const char *path, const char *body,
                  res_mode mode, osb_lc_done_fn done, void *ud, char *errbuf, size_t errlen) {
  lc_call *c = calloc(1, sizeof *c);
  if (!c) goto oom;
  osb_buf url;
  osb_buf_init(&url);
  if (osb_buf_append_str(&url, lc->base_url) || osb_buf_append_str(&url, path)) {
    osb_buf_free(&url);
    goto oom;
  }
  c->url = osb_buf_steal(&url, NULL);
  c->method = strdup(method);
  c->body = body ? strdup(body) : NULL;
  c->secret = lc->api_key ? strdup(lc->api_key) : NULL;
  c->ca_file = lc->ca_file ? strdup(lc->ca_file) : NULL;
  osb_new_request_id(c->request_id);
  char line[512];
  snprintf(line, sizeof line, "X-Request-ID: %s", c->request_id);
  c->headers[c->nheaders++] = strdup(line);
  c->headers[c->nheaders++] = strdup("Accept: application/json");
  /* "Content-Type:" (empty) removes curl's form type from a body-less POST */
  c->headers[c->nheaders++] = strdup(body ? "Content-Type: application/json" : "Content-Type:");
  if (lc->api_key) {
    size_t n = strlen(lc->api_key) + 32;
    char *h = malloc(n);
    if (h) snprintf(h, n, "OPEN-SANDBOX-API-KEY: %s", lc->api_key);
    c->headers[c->nheaders++] = h;
  }
  int ok = c->url && c->method && (!body || c->body) && (!lc->api_key || c->secret) &&
           (!lc->ca_file || c->ca_file);
  for (size_t i = 0; i < c->nheaders; i++) ok = ok && c->headers[i];
  if (!ok) goto oom;
  c->timeout_ms = lc->timeout_ms;
  c->retry = strcmp(method, "GET") == 0;
  c->mode = mode;
  c->done = done;
  c->ud = ud;
  if (osb_engine_post(e, run_call, c) != 0) {
    call_free(c);
    snprintf(errbuf, errlen, "the native engine is shutting down");
    return -1;
  }
  return 0;
oom:
  if (c) call_free(c);
  snprintf(errbuf, errlen, "out of memory");
  return -1;
}

static int check_id(const char *what, const char *id, char *errbuf, size_t errlen) {
  if (!id || !*id) {
    snprintf(errbuf, errlen, "%s id must be a non-empty string", what);
    return -1;
  }
  return 0;
}

/* "<collection>/<escaped id><suffix>"; collection is "/sandboxes" or "/snapshots" */
static int id_route_in(osb_engine *e, const osb_lc *lc, const char *collection, const char *method, const char *id,
                       const char *suffix, const char *body, res_mode mode, osb_lc_done_fn done, void *ud,
                       char *errbuf, size_t errlen) {
  if (check_id(strcmp(collection, "/snapshots") == 0 ? "snapshot" : "sandbox", id, errbuf, errlen) != 0) return -1;
  char *eid = osb_url_escape(id);
  osb_buf path;
  osb_buf_init(&path);
  if (!eid || osb_buf_appendf(&path, "%s/%s%s", collection, eid, suffix)) {
    free(eid);
    osb_buf_free(&path);
    snprintf(errbuf, errlen, "out of memory");
    return -1;
  }
  free(eid);
  int rc = submit(e, lc, method, path.data, body, mode, done, ud, errbuf, errlen);
  osb_buf_free(&path);
  return rc;
}

/* "/sandboxes/<escaped id><suffix>" */
static int id_route(osb_engine *e, const osb_lc *lc, const char *method, const char *id, const char *suffix,
                    const char *body, res_mode mode, osb_lc_done_fn done, void *ud, char *errbuf, size_t errlen) {
  return id_route_in(e, lc, "/sandboxes", method, id, suffix, body, mode, done, ud, errbuf, errlen);
}

/* POST /sandboxes/<id><suffix> with the JSON object {key: value} ({} when value is NULL). */
static int post_field(osb_engine *e, const osb_lc *lc, const char *id, const char *suffix, const char *key,
                      const char *value, osb_lc_done_fn done, void *ud, char *errbuf, size_t errlen) {
  cJSON *o = cJSON_CreateObject();
  if (!o || (value && !cJSON_AddStringToObject(o, key, value))) {
    cJSON_Delete(o);
    snprintf(errbuf, errlen, "out of memory");
    return -1;
  }
  char *body = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  if (!body) {
    snprintf(errbuf, errlen, "out of memory");
    return -1;
  }
  int rc = id_route(e, lc, "POST", id, suffix, body, RES_JSON, done, ud, errbuf, errlen);
  cJSON_free(body);
  return rc;
}

int osb_lc_create(osb_engine *e, const osb_lc *lc, const char *request_json, osb_lc_done_fn done, void *ud,
                  char *errbuf, size_t errlen) {
  if (!request_json) {
    snprintf(errbuf, errlen, "create needs a request body");
    return -1;
  }
  return submit(e, lc, "POST", "/sandboxes", request_json, RES_JSON, done, ud, errbuf, errlen);
}

int osb_lc_get(osb_engine *e, const osb_lc *lc, const char *id, osb_lc_done_fn done, void *ud, char *errbuf,
               size_t errlen) {
  return id_route(e, lc, "GET", id, "", NULL, RES_JSON, done, ud, errbuf, errlen);
}

int osb_lc_delete(osb_engine *e, const osb_lc *lc, const char *id, osb_lc_done_fn done, void *ud, char *errbuf,
                  size_t errlen) {
  return id_route(e, lc, "DELETE", id, "", NULL, RES_NONE, done, ud, errbuf, errlen);
}

int osb_lc_pause(osb_engine *e, const osb_lc *lc, const char *id, osb_lc_done_fn done, void *ud, char *errbuf,
                 size_t errlen) {
  return id_route(e, lc, "POST", id, "/pause", NULL, RES_NONE, done, ud, errbuf, errlen);
}

int osb_lc_resume(osb_engine *e, const osb_lc *lc, const char *id, osb_lc_done_fn done, void *ud, char *errbuf,
                  size_t errlen) {
  return id_route(e, lc, "POST", id, "/resume", NULL, RES_NONE, done, ud, errbuf, errlen);
}

int osb_lc_renew(osb_engine *e, const osb_lc *lc, const char *id, const char *expires_at, osb_lc_done_fn done,
                 void *ud, char *errbuf, size_t errlen) {
  if (!expires_at || !*expires_at) {
    snprintf(errbuf, errlen, "renew needs an expiresAt timestamp");
    return -1;
  }
  return post_field(e, lc, id, "/renew-expiration", "expiresAt", expires_at, done, ud, errbuf, errlen);
}

int osb_lc_endpoint(osb_engine *e, const osb_lc *lc, const char *id, long port, int use_server_proxy,
                    osb_lc_done_fn done, void *ud, char *errbuf, size_t errlen) {
  if (port < 1 || port > 65535) {
    snprintf(errbuf, errlen, "port must be an integer in 1..65535");
    return -1;
  }
  char suffix[96];
  snprintf(suffix, sizeof suffix, "/endpoints/%ld%s", port, use_server_proxy ? "?use_server_proxy=true" : "");
  return id_route(e, lc, "GET", id, suffix, NULL, RES_ENDPOINT, done, ud, errbuf, errlen);
}

int osb_lc_patch_metadata(osb_engine *e, const osb_lc *lc, const char *id, const char *patch_json,
                          osb_lc_done_fn done, void *ud, char *errbuf, size_t errlen) {
  if (!patch_json) {
    snprintf(errbuf, errlen, "patchMetadata needs a patch object");
    return -1;
  }
  return id_route(e, lc, "PATCH", id, "/metadata", patch_json, RES_JSON, done, ud, errbuf, errlen);
}

/* Appends "state=…" for each state, then page and pageSize (0 = omitted); *sep is '?' or '&'. 0 or -1 (OOM). */
static int append_paging(osb_buf *path, char *sep, const char *const *states, size_t nstates, long page,
                         long page_size) {
  for (size_t i = 0; i < nstates; i++) {
    char *s = osb_url_escape(states[i]);
    int bad = !s || osb_buf_appendf(path, "%cstate=%s", *sep, s) != 0;
    free(s);
    if (bad) return -1;
    *sep = '&';
  }
  if (page > 0) {
    if (osb_buf_appendf(path, "%cpage=%ld", *sep, page) != 0) return -1;
    *sep = '&';
  }
  if (page_size > 0) {
    if (osb_buf_appendf(path, "%cpageSize=%ld", *sep, page_size) != 0) return -1;
    *sep = '&';
  }
  return 0;
}

int osb_lc_list(osb_engine *e, const osb_lc *lc, const char *const *meta_kv, size_t nmeta,
                const char *const *states, size_t nstates, long page, long page_size, osb_lc_done_fn done,
                void *ud, char *errbuf, size_t errlen) {
  osb_buf inner, path;
  osb_buf_init(&inner);
  osb_buf_init(&path);
  int ok = osb_buf_append_str(&path, "/sandboxes") == 0;
  char sep = '?';
  /* metadata: ONE parameter whose value is the url-encoding of "k1=v1&k2=v2" (each k, v escaped first) */
  for (size_t i = 0; ok && i < nmeta; i++) {
    char *k = osb_url_escape(meta_kv[2 * i]), *v = osb_url_escape(meta_kv[2 * i + 1] ? meta_kv[2 * i + 1] : "");
    ok = k && v && osb_buf_appendf(&inner, "%s%s=%s", i ? "&" : "", k, v) == 0;
    free(k);
    free(v);
  }
  if (ok && nmeta) {
    char *outer = osb_url_escape(inner.data);
    ok = outer && osb_buf_appendf(&path, "%cmetadata=%s", sep, outer) == 0;
    sep = '&';
    free(outer);
  }
  if (ok) ok = append_paging(&path, &sep, states, nstates, page, page_size) == 0;
  int rc = -1;
  if (!ok) snprintf(errbuf, errlen, "out of memory");
  else rc = submit(e, lc, "GET", path.data, NULL, RES_JSON, done, ud, errbuf, errlen);
  osb_buf_free(&inner);
  osb_buf_free(&path);
  return rc;
}

int osb_lc_snapshot_create(osb_engine *e, const osb_lc *lc, const char *sandbox_id, const char *name,
                           osb_lc_done_fn done, void *ud, char *errbuf, size_t errlen) {
  if (name && !*name) {
    snprintf(errbuf, errlen, "snapshot name must not be empty");
    return -1;
  }
  return post_field(e, lc, sandbox_id, "/snapshots", "name", name, done, ud, errbuf, errlen);
}

int osb_lc_snapshot_get(osb_engine *e, const osb_lc *lc, const char *snapshot_id, osb_lc_done_fn done, void *ud,
                        char *errbuf, size_t errlen) {
  return id_route_in(e, lc, "/snapshots", "GET", snapshot_id, "", NULL, RES_JSON, done, ud, errbuf, errlen);
}

int osb_lc_snapshot_delete(osb_engine *e, const osb_lc *lc, const char *snapshot_id, osb_lc_done_fn done,
                           void *ud, char *errbuf, size_t errlen) {
  return id_route_in(e, lc, "/snapshots", "DELETE", snapshot_id, "", NULL, RES_NONE, done, ud, errbuf, errlen);
}

int osb_lc_snapshot_list(osb_engine *e, const osb_lc *lc, const char *sandbox_id, const char *const *states,
                         size_t nstates, long page, long page_size, osb_lc_done_fn done, void *ud, char *errbuf,
                         size_t errlen) {
  osb_buf path;
  osb_buf_init(&path);
  int ok = osb_buf_append_str(&path, "/snapshots") == 0;
  char sep = '?';
  if (ok && sandbox_id && *sandbox_id) {
    char *s = osb_url_escape(sandbox_id);
    ok = s && osb_buf_appendf(&path, "%csandboxId=%s", sep, s) == 0;
    sep = '&';
    free(s);
  }
  if (ok) ok = append_paging(&path, &sep, states, nstates, page, page_size) == 0;
  int rc = -1;
  if (!ok) snprintf(errbuf, errlen, "out of memory");
  else rc = submit(e, lc, "GET", path.data, NULL, RES_JSON, done, ud, errbuf, errlen);
  osb_buf_free(&path);
  return rc;
}
