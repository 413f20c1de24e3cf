/* Error values and HTTP error mapping (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>

const char *osb_kind_name(osb_kind k) {
  switch (k) {
    case OSB_KIND_API: return "api";
    case OSB_KIND_TRANSPORT: return "transport";
    case OSB_KIND_TIMEOUT: return "timeout";
    case OSB_KIND_CANCELLED: return "cancelled";
    case OSB_KIND_PROTOCOL: return "protocol";
    case OSB_KIND_STREAM: return "stream";
    default: return "none";
  }
}

void osb_error_set(osb_error *e, osb_kind kind, const char *code, const char *fmt, ...) {
  memset(e, 0, sizeof *e);
  e->kind = kind;
  e->attempts = 1;
  snprintf(e->code, sizeof e->code, "%s", code);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
}

void osb_redact(char *s, size_t cap, const char *const *secrets) {
  char out[2048];
  if (cap > sizeof out) cap = sizeof out;
  for (size_t i = 0; secrets && secrets[i]; i++) {
    size_t n = strlen(secrets[i]);
    if (n == 0 || !strstr(s, secrets[i])) continue;
    size_t j = 0;
    for (const char *p = s; *p && j + 1 < cap;) {
      if (strncmp(p, secrets[i], n) == 0) {
        for (int k = 0; k < 3 && j + 1 < cap; k++) out[j++] = '*';
        p += n;
      } else {
        out[j++] = *p++;
      }
    }
    out[j] = 0;
    memcpy(s, out, j + 1);
  }
}

/* Copies printable text (controls become spaces), at most max bytes; appends "..." when cut. */
static void copy_text(char *dst, size_t cap, const char *src, size_t len, size_t max) {
  size_t j = strlen(dst);
  size_t n = len < max ? len : max;
  for (size_t i = 0; i < n && j + 1 < cap; i++) {
    unsigned char c = (unsigned char)src[i];
    dst[j++] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
  }
  if (len > n && j + 4 < cap) memcpy(dst + j, "...", 3), j += 3;
  dst[j] = 0;
}

/* FastAPI validation errors: "body.timeout: Input should be … ; query.page: …" */
static void summarise_detail(char *dst, size_t cap, const cJSON *detail) {
  dst[0] = 0;
  const cJSON *item;
  int first = 1;
  cJSON_ArrayForEach(item, detail) {
    char one[512] = "";
    const cJSON *loc = cJSON_GetObjectItemCaseSensitive(item, "loc");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(item, "msg");
    const cJSON *part;
    cJSON_ArrayForEach(part, loc) {
      size_t l = strlen(one);
      if (l) snprintf(one + l, sizeof one - l, ".");
      l = strlen(one);
      if (cJSON_IsString(part)) snprintf(one + l, sizeof one - l, "%s", part->valuestring);
      else if (cJSON_IsNumber(part)) snprintf(one + l, sizeof one - l, "%d", part->valueint);
    }
    size_t l = strlen(one);
    snprintf(one + l, sizeof one - l, "%s%s", l ? ": " : "", cJSON_IsString(msg) ? msg->valuestring : "invalid");
    size_t d = strlen(dst);
    if (!first && d + 2 < cap) snprintf(dst + d, cap - d, "; ");
    copy_text(dst, cap, one, strlen(one), cap);
    first = 0;
  }
  if (!dst[0]) snprintf(dst, cap, "request validation failed");
}

void osb_error_from_http(osb_error *e, const osb_http_result *res, const char *const *secrets,
                         const char *fallback_request_id) {
  memset(e, 0, sizeof *e);
  e->attempts = res->attempts > 0 ? res->attempts : 1;
  const char *rid = res->request_id ? res->request_id : fallback_request_id;
  if (rid) snprintf(e->request_id, sizeof e->request_id, "%s", rid);
  switch (res->error) {
    case OSB_HTTP_OK: break;
    case OSB_HTTP_ETIMEOUT:
    case OSB_HTTP_EIDLE:
      e->kind = OSB_KIND_TIMEOUT;
      snprintf(e->code, sizeof e->code, "%s", res->error == OSB_HTTP_EIDLE ? "STREAM_IDLE" : "TIMEOUT");
      snprintf(e->message, sizeof e->message, "%s", res->message);
      return;
    case OSB_HTTP_ECANCELLED:
    case OSB_HTTP_ESHUTDOWN:
      e->kind = OSB_KIND_CANCELLED;
      snprintf(e->code, sizeof e->code, "%s", res->error == OSB_HTTP_ESHUTDOWN ? "SHUTDOWN" : "CANCELLED");
      snprintf(e->message, sizeof e->message, "%s", res->message);
      return;
    case OSB_HTTP_ETOOLARGE:
      e->kind = OSB_KIND_PROTOCOL;
      snprintf(e->code, sizeof e->code, "RESPONSE_TOO_LARGE");
      snprintf(e->message, sizeof e->message, "%s", res->message);
      return;
    default:
      e->kind = OSB_KIND_TRANSPORT;
      snprintf(e->code, sizeof e->code, "TRANSPORT");
      snprintf(e->message, sizeof e->message, "%s", res->message[0] ? res->message : "transport error");
      osb_redact(e->message, sizeof e->message, secrets);
      return;
  }
  e->kind = OSB_KIND_API;
  e->status = res->status;
  snprintf(e->code, sizeof e->code, "HTTP_%ld", res->status);
  cJSON *doc = res->body_len ? cJSON_ParseWithLength(res->body, res->body_len) : NULL;
  if (doc && !cJSON_IsObject(doc)) { /* e.g. Go's "404 page not found": cJSON reads its leading 404 as a number */
    cJSON_Delete(doc);
    doc = NULL;
  }
  const cJSON *code = doc ? cJSON_GetObjectItemCaseSensitive(doc, "code") : NULL;
  const cJSON *msg = doc ? cJSON_GetObjectItemCaseSensitive(doc, "message") : NULL;
  const cJSON *err = doc ? cJSON_GetObjectItemCaseSensitive(doc, "error") : NULL;
  const cJSON *detail = doc ? cJSON_GetObjectItemCaseSensitive(doc, "detail") : NULL;
  if (cJSON_IsString(code) && code->valuestring[0]) {
    e->code[0] = 0;
    copy_text(e->code, sizeof e->code, code->valuestring, strlen(code->valuestring), sizeof e->code);
  }
  if (cJSON_IsString(msg)) copy_text(e->message, sizeof e->message, msg->valuestring, strlen(msg->valuestring), 900);
  else if (cJSON_IsString(err)) copy_text(e->message, sizeof e->message, err->valuestring, strlen(err->valuestring), 900);
  else if (cJSON_IsArray(detail)) summarise_detail(e->message, sizeof e->message, detail);
  else if (cJSON_IsString(detail)) copy_text(e->message, sizeof e->message, detail->valuestring, strlen(detail->valuestring), 900);
  else {
    snprintf(e->message, sizeof e->message, "HTTP %ld", res->status);
    if (res->body_len && !doc) {
      strcat(e->message, ": ");
      copy_text(e->message, sizeof e->message, res->body, res->body_len, 200);
    }
  }
  if (!e->message[0]) snprintf(e->message, sizeof e->message, "HTTP %ld", res->status);
  cJSON_Delete(doc);
  osb_redact(e->message, sizeof e->message, secrets);
  osb_redact(e->code, sizeof e->code, secrets);
}

void osb_error_unexpected(osb_error *e, const osb_http_result *res, const char *why, const char *fallback_request_id) {
  osb_error_set(e, OSB_KIND_PROTOCOL, "UNEXPECTED_RESPONSE", "unexpected response: %s (HTTP %ld)", why, res->status);
  e->status = res->status;
  e->attempts = res->attempts;
  const char *rid = res->request_id ? res->request_id : fallback_request_id;
  snprintf(e->request_id, sizeof e->request_id, "%s", rid ? rid : "");
}

char *osb_body_text(const osb_http_result *res, osb_error *e) {
  char *s = malloc(res->body_len + 1);
  if (!s) {
    osb_error_set(e, OSB_KIND_PROTOCOL, "OUT_OF_MEMORY", "out of memory");
    return NULL;
  }
  if (res->body_len) memcpy(s, res->body, res->body_len);
  s[res->body_len] = 0;
  return s;
}
