/* execd files/directories operations (see fileops.h): the request (method, URL with percent-encoded query, JSON
 * body, Range) is built on the caller's thread; the engine thread sends it, checks the answer and hands it on. */
#include "opensandbox/fileops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "core/http.h"
#include "opensandbox/files.h"

struct osb_fop {
  int refs; /* atomic: the caller's and the engine's */
  osb_conn conn;
  osb_fop_kind kind;
  const char *method;
  char *path;        /* route + query */
  char *body;        /* JSON, or NULL */
  size_t body_len;
  char range[96];    /* "Range: bytes=a-b" or "" */
  long timeout_ms;
  size_t max_bytes;
  osb_buf data;      /* DOWNLOAD: the bytes so far (reserved from size_hint) */
  int too_large;     /* DOWNLOAD: over max_bytes (settled; the rest is read and discarded) */
  int settled;       /* engine thread only: done was called (the transfer may still drain) */
  osb_http_req *req; /* engine thread only */
  int finished;      /* engine thread only */
  int cancel_pending;
  osb_fop_done_fn done;
  void *ud;
};

static void fop_free(osb_fop *op) {
  osb_conn_clear(&op->conn);
  free(op->path);
  free(op->body);
  osb_buf_free(&op->data);
  free(op);
}

void osb_fop_release(osb_fop *op) {
  if (op && __atomic_sub_fetch(&op->refs, 1, __ATOMIC_ACQ_REL) == 0) fop_free(op);
}

int osb_query_escape(osb_buf *b, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    unsigned char c = *p;
    int keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
               c == '_' || c == '~' || c == '/';
    char enc[3] = {'%', hex[c >> 4], hex[c & 15]};
    if (keep ? osb_buf_append(b, p, 1) : osb_buf_append(b, enc, 3)) return -1;
  }
  return 0;
}

/* Calls done once (data is freed when it was called already). */
static void settle_op(osb_fop *op, const osb_error *err, char *data, size_t len) {
  if (op->settled) {
    free(data);
    return;
  }
  op->settled = 1;
  op->done(op->ud, err, data, len);
}

static void finish(osb_fop *op, const osb_error *err, char *data, size_t len) {
  op->finished = 1;
  op->req = NULL;
  settle_op(op, err, data, len);
  osb_fop_release(op); /* the engine's reference */
}

/* A download over max_bytes fails at once, but the transfer reads on to the end of the body (discarding it, bounded
 * by the request's deadline): closing while execd still writes makes the real execd relay SIGPIPE to its
 * foreground command (docs/opensandbox-protocol.md §5b). */
static int on_data(void *ud, long status, const char *p, size_t n) {
  (void)status;
  osb_fop *op = ud;
  if (op->too_large) return 0;
  if ((op->max_bytes && op->data.len + n > op->max_bytes) || osb_buf_append(&op->data, p, n) != 0) {
    op->too_large = 1;
    osb_error err;
    if (op->max_bytes && op->data.len + n > op->max_bytes)
      osb_error_set(&err, OSB_KIND_PROTOCOL, "RESPONSE_TOO_LARGE", "the file is larger than the %zu-byte limit", op->max_bytes);
    else
      osb_error_set(&err, OSB_KIND_PROTOCOL, "OUT_OF_MEMORY", "out of memory");
    osb_buf_free(&op->data);
    settle_op(op, &err, NULL, 0);
  }
  return 0;
}

/* The body's announced length: one allocation for the whole file when it is known and within the limit (a
 * larger announcement is not trusted: the limit check in on_data decides). */
static void on_begin(void *ud, long status, long long content_length) {
  (void)status;
  osb_fop *op = ud;
  if (content_length <= 0 || (op->max_bytes && (unsigned long long)content_length > op->max_bytes)) return;
  if ((unsigned long long)content_length > (size_t)-1 / 2) return;
  osb_buf_reserve_exact(&op->data, (size_t)content_length); /* best effort: on failure appends grow it */
}

static void on_http_done(void *ud, const osb_http_result *res) {
  osb_fop *op = ud;
  osb_error err;
  if (res->error != OSB_HTTP_OK || res->status < 200 || res->status >= 300) {
    osb_error_from_http(&err, res, (const char *const *)op->conn.secrets, NULL);
    finish(op, &err, NULL, 0);
    return;
  }
  if (op->kind == OSB_FOP_DOWNLOAD) {
    if (op->too_large) {
      osb_error_set(&err, OSB_KIND_PROTOCOL, "RESPONSE_TOO_LARGE", "the file is larger than the %zu-byte limit",
                    op->max_bytes);
      finish(op, &err, NULL, 0);
      return;
    }
    size_t len = 0;
    char *bytes = osb_buf_steal(&op->data, &len);
    if (!bytes) {
      osb_error_set(&err, OSB_KIND_PROTOCOL, "OUT_OF_MEMORY", "out of memory");
      finish(op, &err, NULL, 0);
      return;
    }
    finish(op, NULL, bytes, len);
    return;
  }
  if (op->kind == OSB_FOP_POLICY_GET) {
    /* {"status":"ok","mode":…,"policy":{"defaultAction":…,"egress":[…]}}: the policy object is handed on */
    cJSON *j = cJSON_ParseWithLength(res->body, res->body_len);
    cJSON *pol = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "policy") : NULL;
    char *text = cJSON_IsObject(pol) ? cJSON_PrintUnformatted(pol) : NULL;
    cJSON_Delete(j);
    if (!text) {
      osb_error_unexpected(&err, res, "expected a JSON object with a \"policy\" object", NULL);
      finish(op, &err, NULL, 0);
      return;
    }
    finish(op, NULL, text, strlen(text));
    return;
  }
  int want_object = op->kind == OSB_FOP_INFO || op->kind == OSB_FOP_REPLACE;
  int want_array = op->kind == OSB_FOP_LIST || op->kind == OSB_FOP_SEARCH;
  if (!want_object && !want_array) {
    finish(op, NULL, NULL, 0);
    return;
  }
  cJSON *j = cJSON_ParseWithLength(res->body, res->body_len);
  int ok = j && (want_object ? cJSON_IsObject(j) : cJSON_IsArray(j));
  cJSON_Delete(j);
  if (!ok) {
    osb_error_unexpected(&err, res, want_object ? "expected a JSON object" : "expected a JSON array", NULL);
    finish(op, &err, NULL, 0);
    return;
  }
  char *text = osb_body_text(res, &err);
  if (!text) finish(op, &err, NULL, 0);
  else finish(op, NULL, text, res->body_len);
}

static void start_job(osb_engine *e, void *arg, int shutdown) {
  osb_fop *op = arg;
  osb_error err;
  if (shutdown || op->cancel_pending) {
    if (shutdown) osb_error_set(&err, OSB_KIND_CANCELLED, "SHUTDOWN", "the native engine is shutting down");
    else osb_error_set(&err, OSB_KIND_CANCELLED, "CANCELLED", "file operation cancelled");
    finish(op, &err, NULL, 0);
    return;
  }
  const char *extra[2];
  size_t nextra = 0;
  if (op->body) extra[nextra++] = "Content-Type: application/json";
  if (op->range[0]) extra[nextra++] = op->range;
  osb_http_opts o = {0};
  o.method = op->method;
  o.body = op->body;
  o.body_len = op->body_len;
  o.timeout_ms = op->timeout_ms;
  o.retry_connect = strcmp(op->method, "GET") == 0;
  o.refused_final = 1; /* a refused execd: the caller asks the lifecycle API (lib/recovery.js) at once */
  if (op->kind == OSB_FOP_DOWNLOAD) {
    o.on_data = on_data;
    o.on_begin = on_begin;
  }
  o.on_done = on_http_done;
  o.ud = op;
  op->req = osb_conn_start(e, &op->conn, &o, extra, nextra, "%s", op->path);
  if (!op->req) {
    osb_error_set(&err, OSB_KIND_TRANSPORT, "ENOMEM", "out of memory starting the file operation");
    finish(op, &err, NULL, 0);
  }
}

static void cancel_job(osb_engine *e, void *arg, int shutdown) {
  (void)e;
  (void)shutdown;
  osb_fop *op = arg;
  if (!op->finished) {
    if (op->req) osb_http_cancel(op->req);
    else op->cancel_pending = 1;
  }
  osb_fop_release(op);
}

void osb_fop_cancel(osb_engine *e, osb_fop *op) {
  if (!e || !op) return;
  __atomic_add_fetch(&op->refs, 1, __ATOMIC_ACQ_REL);
  if (osb_engine_post(e, cancel_job, op) != 0) osb_fop_release(op);
}

/* "route?path=a&path=b" (+ extra "&name=value" pairs). */
static int build_path(osb_buf *b, const char *route, const char *const *paths, size_t n, const char *n1,
                      const char *v1, const char *n2, const char *v2) {
  if (osb_buf_append_str(b, route)) return -1;
  for (size_t i = 0; i < n; i++)
    if (osb_buf_append_str(b, i ? "&path=" : "?path=") || osb_query_escape(b, paths[i])) return -1;
  if (n1 && v1 && (osb_buf_appendf(b, "&%s=", n1) || osb_query_escape(b, v1))) return -1;
  if (n2 && v2 && (osb_buf_appendf(b, "&%s=", n2) || osb_query_escape(b, v2))) return -1;
  return 0;
}

/* The /policy bodies: PATCH [{"action","target"}…] from pairs, DELETE [targets…]; NULL on OOM. */
static char *build_policy_body(const osb_fop_req *q) {
  cJSON *root = cJSON_CreateArray();
  int ok = root != NULL;
  if (q->kind == OSB_FOP_POLICY_PATCH) {
    for (size_t i = 0; ok && i + 1 < q->npaths; i += 2) {
      cJSON *rule = cJSON_CreateObject();
      ok = rule && cJSON_AddStringToObject(rule, "action", q->paths[i]) &&
           cJSON_AddStringToObject(rule, "target", q->paths[i + 1]);
      if (ok) ok = cJSON_AddItemToArray(root, rule);
      else cJSON_Delete(rule);
    }
  } else {
    for (size_t i = 0; ok && i < q->npaths; i++) {
      cJSON *t = cJSON_CreateString(q->paths[i]);
      ok = t && cJSON_AddItemToArray(root, t);
      if (!ok) cJSON_Delete(t);
    }
  }
  char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return s;
}

/* The JSON body of the kinds that have one; NULL on OOM. */
static char *build_body(const osb_fop_req *q) {
  if (q->kind == OSB_FOP_POLICY_PATCH || q->kind == OSB_FOP_POLICY_DELETE) return build_policy_body(q);
  cJSON *root = q->kind == OSB_FOP_MOVE ? cJSON_CreateArray() : cJSON_CreateObject();
  cJSON *item = cJSON_CreateObject();
  int ok = root && item;
  if (ok) {
    switch (q->kind) {
      case OSB_FOP_MOVE:
        ok = cJSON_AddStringToObject(item, "src", q->paths[0]) && cJSON_AddStringToObject(item, "dest", q->paths[1]);
        if (ok) ok = cJSON_AddItemToArray(root, item);
        break;
      case OSB_FOP_REPLACE:
        ok = cJSON_AddStringToObject(item, "old", q->text) && cJSON_AddStringToObject(item, "new", q->text2 ? q->text2 : "");
        if (ok) ok = cJSON_AddItemToObject(root, q->paths[0], item);
        break;
      default: /* MKDIR, CHMOD */
        ok = (q->num == 0 || cJSON_AddNumberToObject(item, "mode", (double)q->num)) &&
             cJSON_AddItemToObject(root, q->paths[0], item);
        break;
    }
    if (ok) item = NULL; /* owned by root now */
  }
  char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(item);
  cJSON_Delete(root);
  return s;
}

osb_fop *osb_fop_start(osb_engine *e, const osb_conn *conn, const osb_fop_req *q, osb_fop_done_fn done, void *ud,
                       char *errbuf, size_t errlen) {
  if (!e || !conn || !q || !done) {
    snprintf(errbuf, errlen, "file operation: engine, connection, request and callback are required");
    return NULL;
  }
  int policy = q->kind == OSB_FOP_POLICY_GET || q->kind == OSB_FOP_POLICY_PATCH || q->kind == OSB_FOP_POLICY_DELETE;
  if ((unsigned)q->kind > OSB_FOP_POLICY_DELETE) {
    snprintf(errbuf, errlen, "file operation: wrong kind or number of paths");
    return NULL;
  }
  if (policy) {
    int bad = q->kind == OSB_FOP_POLICY_GET ? q->npaths != 0
              : q->kind == OSB_FOP_POLICY_PATCH ? (!q->paths || q->npaths < 2 || q->npaths % 2)
                                                : (!q->paths || q->npaths < 1);
    for (size_t i = 0; !bad && i < q->npaths; i++) bad = !q->paths[i];
    if (bad) {
      snprintf(errbuf, errlen, q->kind == OSB_FOP_POLICY_DELETE ? "deleteEgressRules needs at least one target"
                               : q->kind == OSB_FOP_POLICY_PATCH ? "patchEgressRules needs at least one rule"
                                                                 : "getEgressPolicy takes no arguments");
      return NULL;
    }
  }
  size_t need = q->kind == OSB_FOP_MOVE ? 2 : 1;
  int many = q->kind == OSB_FOP_INFO || q->kind == OSB_FOP_REMOVE || q->kind == OSB_FOP_RMDIR;
  if (!policy && (!q->paths || (many ? q->npaths < 1 : q->npaths != need))) {
    snprintf(errbuf, errlen, "file operation: wrong kind or number of paths");
    return NULL;
  }
  for (size_t i = 0; !policy && i < q->npaths; i++) {
    if (!q->paths[i] || q->paths[i][0] != '/') {
      snprintf(errbuf, errlen, "file operation: path %zu must be absolute", i);
      return NULL;
    }
  }
  if (q->kind == OSB_FOP_REPLACE && (!q->text || !*q->text)) {
    snprintf(errbuf, errlen, "replace: the text to replace must not be empty");
    return NULL;
  }
  if ((q->kind == OSB_FOP_MKDIR || q->kind == OSB_FOP_CHMOD) && !osb_mode_valid(q->num)) {
    snprintf(errbuf, errlen, "mode %ld is not octal digits (e.g. 755)", q->num);
    return NULL;
  }
  if (q->kind == OSB_FOP_LIST && q->num < 0) {
    snprintf(errbuf, errlen, "list: depth must be >= 0");
    return NULL;
  }
  osb_fop *op = calloc(1, sizeof *op);
  if (!op || osb_conn_copy(&op->conn, conn) != 0) {
    free(op);
    snprintf(errbuf, errlen, "out of memory starting the file operation");
    return NULL;
  }
  op->refs = 2;
  op->kind = q->kind;
  op->done = done;
  op->ud = ud;
  op->timeout_ms = q->timeout_ms;
  op->max_bytes = q->max_bytes;
  osb_buf b;
  osb_buf_init(&b);
  char depth[32];
  snprintf(depth, sizeof depth, "%ld", q->num);
  int rc = 0;
  switch (q->kind) {
    case OSB_FOP_INFO: op->method = "GET"; rc = build_path(&b, "/files/info", q->paths, q->npaths, 0, 0, 0, 0); break;
    case OSB_FOP_REMOVE: op->method = "DELETE"; rc = build_path(&b, "/files", q->paths, q->npaths, 0, 0, 0, 0); break;
    case OSB_FOP_RMDIR: op->method = "DELETE"; rc = build_path(&b, "/directories", q->paths, q->npaths, 0, 0, 0, 0); break;
    case OSB_FOP_LIST: op->method = "GET"; rc = build_path(&b, "/directories/list", q->paths, 1, "depth", depth, 0, 0); break;
    case OSB_FOP_SEARCH: op->method = "GET"; rc = build_path(&b, "/files/search", q->paths, 1, "pattern", q->text, 0, 0); break;
    case OSB_FOP_DOWNLOAD: op->method = "GET"; rc = build_path(&b, "/files/download", q->paths, 1, 0, 0, 0, 0); break;
    case OSB_FOP_MKDIR: op->method = "POST"; rc = osb_buf_append_str(&b, "/directories"); break;
    case OSB_FOP_MOVE: op->method = "POST"; rc = osb_buf_append_str(&b, "/files/mv"); break;
    case OSB_FOP_CHMOD: op->method = "POST"; rc = osb_buf_append_str(&b, "/files/permissions"); break;
    case OSB_FOP_REPLACE: op->method = "POST"; rc = osb_buf_append_str(&b, "/files/replace?verbose=true"); break;
    case OSB_FOP_POLICY_GET: op->method = "GET"; rc = osb_buf_append_str(&b, "/policy"); break;
    case OSB_FOP_POLICY_PATCH: op->method = "PATCH"; rc = osb_buf_append_str(&b, "/policy"); break;
    case OSB_FOP_POLICY_DELETE: op->method = "DELETE"; rc = osb_buf_append_str(&b, "/policy"); break;
  }
  op->path = rc ? NULL : osb_buf_steal(&b, NULL);
  osb_buf_free(&b);
  int with_body = op->method[0] == 'P' || q->kind == OSB_FOP_POLICY_DELETE;
  if (with_body) {
    op->body = build_body(q);
    if (op->body) op->body_len = strlen(op->body);
  }
  if (!op->path || (with_body && !op->body)) goto oom;
  if (q->kind == OSB_FOP_DOWNLOAD) {
    if (q->range_start >= 0) {
      if (q->range_end >= 0) snprintf(op->range, sizeof op->range, "Range: bytes=%lld-%lld", q->range_start, q->range_end);
      else snprintf(op->range, sizeof op->range, "Range: bytes=%lld-", q->range_start);
    }
    size_t hint = q->max_bytes && q->size_hint > q->max_bytes ? q->max_bytes : q->size_hint;
    if (hint && osb_buf_reserve_exact(&op->data, hint) != 0) goto oom;
  }
  if (osb_engine_post(e, start_job, op) != 0) {
    snprintf(errbuf, errlen, "the native engine is shutting down");
    fop_free(op);
    return NULL;
  }
  return op;
oom:
  snprintf(errbuf, errlen, "out of memory starting the file operation");
  fop_free(op);
  return NULL;
}
