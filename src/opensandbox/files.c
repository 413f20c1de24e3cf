/* execd file upload (see files.h): builds one multipart/form-data body with a (metadata, file) pair per file and
 * sends it with osb_http_start on the engine thread. */
#include "opensandbox/files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/random.h>
#include <cjson/cJSON.h>
#include "core/buf.h"
#include "core/http.h"
#include "opensandbox/conn.h"

struct osb_upload {
  int refs; /* atomic: the caller's and the engine's */
  osb_engine *engine;
  osb_conn execd; /* base URL, endpoint header lines, secrets */
  char content_type[128]; /* the multipart Content-Type header line */
  char *body;
  size_t body_len;
  long timeout_ms;
  osb_http_req *req;  /* engine thread only */
  int finished;       /* engine thread only */
  int cancel_pending; /* engine thread only: cancel arrived before the request started */
  osb_upload_done_fn done;
  void *ud;
};

static void upload_free(osb_upload *u) {
  osb_conn_clear(&u->execd);
  free(u->body);
  free(u);
}

void osb_upload_release(osb_upload *u) {
  if (u && __atomic_sub_fetch(&u->refs, 1, __ATOMIC_ACQ_REL) == 0) upload_free(u);
}

static void finish(osb_upload *u, const osb_error *err) {
  u->finished = 1;
  u->req = NULL;
  u->done(u->ud, err);
  osb_upload_release(u); /* the engine's reference */
}

static void on_http_done(void *ud, const osb_http_result *res) {
  osb_upload *u = ud;
  if (res->error == OSB_HTTP_OK && res->status >= 200 && res->status < 300) {
    finish(u, NULL);
    return;
  }
  osb_error err;
  osb_error_from_http(&err, res, (const char *const *)u->execd.secrets, NULL);
  finish(u, &err);
}

static void start_job(osb_engine *e, void *arg, int shutdown) {
  osb_upload *u = arg;
  osb_error err;
  if (shutdown) {
    osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "the native engine is shutting down");
    finish(u, &err);
    return;
  }
  if (u->cancel_pending) {
    osb_error_set(&err, OSB_KIND_CANCELLED, "CANCELLED", "upload cancelled");
    finish(u, &err);
    return;
  }
  const char *const extra[] = {u->content_type};
  osb_http_opts o = {0};
  o.method = "POST";
  o.body = u->body;
  o.body_len = u->body_len;
  o.take_body = 1;
  o.timeout_ms = u->timeout_ms;
  o.on_done = on_http_done;
  o.ud = u;
  u->req = osb_conn_start(e, &u->execd, &o, extra, 1, "/files/upload");
  if (!u->req) {
    osb_error_set(&err, OSB_KIND_TRANSPORT, "ENOMEM", "out of memory starting the upload");
    finish(u, &err);
    return;
  }
  u->body = NULL; /* taken by the HTTP layer (no second copy of a large upload) */
}

static void cancel_job(osb_engine *e, void *arg, int shutdown) {
  (void)e;
  (void)shutdown;
  osb_upload *u = arg;
  if (!u->finished) {
    if (u->req) osb_http_cancel(u->req);
    else u->cancel_pending = 1;
  }
  osb_upload_release(u);
}

void osb_upload_cancel(osb_engine *e, osb_upload *u) {
  if (!e || !u) return;
  __atomic_add_fetch(&u->refs, 1, __ATOMIC_ACQ_REL);
  if (osb_engine_post(e, cancel_job, u) != 0) osb_upload_release(u);
}

int osb_mode_valid(long mode) {
  if (mode < 0 || mode > 7777) return 0;
  for (long m = mode; m; m /= 10)
    if (m % 10 > 7) return 0;
  return 1;
}

/* Appends one part header; the metadata part must carry a filename. */
static int part_header(osb_buf *b, const char *boundary, const char *name, const char *filename, const char *type) {
  return osb_buf_appendf(b, "--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\nContent-Type: %s\r\n\r\n",
                        boundary, name, filename, type);
}

/* The base name of path for the file part's filename, with quotes and control characters replaced. */
static void safe_filename(const char *path, char *out, size_t cap) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  size_t j = 0;
  for (size_t i = 0; base[i] && j + 1 < cap; i++) {
    unsigned char c = (unsigned char)base[i];
    out[j++] = (c < 0x20 || c == '"' || c == '\\' || c == 0x7f) ? '_' : (char)c;
  }
  if (j == 0 && cap > 4) j = (size_t)snprintf(out, cap, "file");
  out[j] = 0;
}

static char *build_body(const osb_upload_file *files, size_t n, const char *boundary, size_t *len_out, char *errbuf,
                        size_t errlen) {
  osb_buf b;
  osb_buf_init(&b);
  /* one allocation for the whole body: the file bytes plus generous room for the part headers and metadata */
  size_t total = 64;
  for (size_t i = 0; i < n; i++) {
    size_t part = files[i].len + 2 * strlen(files[i].path) + 512;
    if (part < files[i].len || total + part < total) goto oom;
    total += part;
  }
  if (osb_buf_reserve_exact(&b, total) != 0) goto oom;
  for (size_t i = 0; i < n; i++) {
    cJSON *meta = cJSON_CreateObject();
    if (!meta || !cJSON_AddStringToObject(meta, "path", files[i].path) ||
        (files[i].mode && !cJSON_AddNumberToObject(meta, "mode", files[i].mode))) {
      cJSON_Delete(meta);
      goto oom;
    }
    char *json = cJSON_PrintUnformatted(meta);
    cJSON_Delete(meta);
    if (!json) goto oom;
    char fname[256];
    safe_filename(files[i].path, fname, sizeof fname);
    int rc = part_header(&b, boundary, "metadata", "metadata", "application/json") || osb_buf_append(&b, json, strlen(json)) ||
             osb_buf_append(&b, "\r\n", 2) || part_header(&b, boundary, "file", fname, "application/octet-stream") ||
             osb_buf_append(&b, files[i].data, files[i].len) || osb_buf_append(&b, "\r\n", 2);
    free(json);
    if (rc) goto oom;
  }
  if (osb_buf_appendf(&b, "--%s--\r\n", boundary)) goto oom;
  return osb_buf_steal(&b, len_out);
oom:
  osb_buf_free(&b);
  snprintf(errbuf, errlen, "out of memory building the upload");
  return NULL;
}

osb_upload *osb_upload_start(osb_engine *e, const char *base_url, const char *const *header_kv, size_t nheaders,
                             const char *ca_file, const osb_upload_file *files, size_t n, long timeout_ms,
                             osb_upload_done_fn done, void *ud, char *errbuf, size_t errlen) {
  if (!e || !base_url || !*base_url || !done) {
    snprintf(errbuf, errlen, "upload: engine, base URL and callback are required");
    return NULL;
  }
  if (!files || n == 0) {
    snprintf(errbuf, errlen, "upload: at least one file is required");
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    if (!files[i].path || files[i].path[0] != '/') {
      snprintf(errbuf, errlen, "upload: file %zu: path must be absolute", i);
      return NULL;
    }
    if (!osb_mode_valid(files[i].mode)) {
      snprintf(errbuf, errlen, "upload: file %zu: mode %d is not octal digits (e.g. 644)", i, files[i].mode);
      return NULL;
    }
    if (files[i].len && !files[i].data) {
      snprintf(errbuf, errlen, "upload: file %zu has no data", i);
      return NULL;
    }
  }
  osb_upload *u = calloc(1, sizeof *u);
  if (!u) goto oom;
  if (osb_conn_init(&u->execd, base_url, header_kv, nheaders, 0, 0, errbuf, errlen) != 0) {
    free(u);
    return NULL;
  }
  if (ca_file && osb_conn_set_ca_file(&u->execd, ca_file, errbuf, errlen) != 0) {
    osb_conn_clear(&u->execd);
    free(u);
    return NULL;
  }
  u->refs = 2;
  u->engine = e;
  u->done = done;
  u->ud = ud;
  u->timeout_ms = timeout_ms;
  /* 128 random bits: the boundary must not occur in any file's bytes */
  unsigned char rnd[16];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (unsigned char)(rand() ^ ((uintptr_t)u >> (i % 8)));
  }
  char boundary[64] = "mastra-opensandbox-";
  for (size_t i = 0, o = strlen(boundary); i < sizeof rnd; i++, o += 2) snprintf(boundary + o, 3, "%02x", rnd[i]);
  snprintf(u->content_type, sizeof u->content_type, "Content-Type: multipart/form-data; boundary=%s", boundary);
  u->body = build_body(files, n, boundary, &u->body_len, errbuf, errlen);
  if (!u->body) {
    upload_free(u);
    return NULL;
  }
  if (osb_engine_post(e, start_job, u) != 0) {
    snprintf(errbuf, errlen, "the native engine is shutting down");
    upload_free(u);
    return NULL;
  }
  return u;
oom:
  snprintf(errbuf, errlen, "out of memory starting the upload");
  return NULL;
}
