/* The code-interpreter kernel protocol, execd's side (see codeproto.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include "codeproto.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "xd.h"

/* ------------------------------------------------------------------------------------------- control lines */

void xd_kline_init(xd_kline *k, size_t max) {
  memset(k, 0, sizeof *k);
  k->max = max;
}

int xd_kline_push(xd_kline *k, const char *p, size_t n, xd_kline_fn fn, void *arg) {
  int rc = 0;
  while (n > 0) {
    const char *nl = memchr(p, '\n', n);
    size_t seg = nl ? (size_t)(nl - p) : n;
    if (!k->dropping) {
      if (seg > k->max - k->cur.len) { /* over the bound: this line is dropped whole */
        osb_buf_free(&k->cur);
        k->dropping = 1;
        k->dropped++;
      } else if (seg && osb_buf_append(&k->cur, p, seg) != 0) {
        osb_buf_free(&k->cur);
        k->dropping = 1;
        rc = -1;
      }
    }
    if (!nl) break;
    if (!k->dropping) fn(arg, k->cur.data ? k->cur.data : "", k->cur.len);
    k->dropping = 0;
    if (k->cur.len > 65536) osb_buf_free(&k->cur); /* a large line's memory is not kept for the next ones */
    else osb_buf_reset(&k->cur);
    p += seg + 1;
    n -= seg + 1;
  }
  return rc;
}

void xd_kline_free(xd_kline *k) { osb_buf_free(&k->cur); }

int xd_kmsg_parse(const char *line, size_t len, cJSON **tree, int *exit, int *has_exit) {
  *tree = NULL;
  *exit = 0;
  *has_exit = 0;
  cJSON *j = cJSON_ParseWithLength(line, len);
  if (!j) return XD_KMSG_OTHER;
  int dup;
  const cJSON *type = cJSON_IsObject(j) ? xd_json_member(j, "type", &dup) : NULL;
  int kind = XD_KMSG_OTHER;
  if (cJSON_IsString(type)) {
    if (strcmp(type->valuestring, "ready") == 0) kind = XD_KMSG_READY;
    else if (strcmp(type->valuestring, "result") == 0) kind = XD_KMSG_RESULT;
    else if (strcmp(type->valuestring, "error") == 0) kind = XD_KMSG_ERROR;
    else if (strcmp(type->valuestring, "done") == 0) kind = XD_KMSG_DONE;
  }
  if (kind == XD_KMSG_DONE) {
    const cJSON *e = xd_json_member(j, "exit", &dup);
    if (cJSON_IsNumber(e)) {
      double v = e->valuedouble;
      *has_exit = 1;
      *exit = v > 2147483647.0 ? 2147483647 : v < -2147483648.0 ? (-2147483647 - 1) : (int)v;
    }
  }
  if (kind == XD_KMSG_RESULT || kind == XD_KMSG_ERROR) *tree = j;
  else cJSON_Delete(j);
  return kind;
}

/* ------------------------------------------------------------------------------------------- Go's JSON text */

typedef struct {
  const cJSON *item;
  const char *key; /* as written (text/plain renamed) */
  int renamed;
  size_t index;
} member;

/* by key as written; among equal keys the renamed one, then the later one, last: the last of a run wins */
static int cmp_member(const void *a, const void *b) {
  const member *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  if (c) return c;
  if (x->renamed != y->renamed) return x->renamed - y->renamed;
  return x->index < y->index ? -1 : x->index > y->index;
}

static int write_value(osb_buf *out, const cJSON *v, int rename) {
  if (cJSON_IsString(v)) return xd_json_str(out, v->valuestring, strlen(v->valuestring));
  if (cJSON_IsNumber(v)) return xd_js_number(out, v->valuedouble);
  if (cJSON_IsTrue(v)) return osb_buf_append_str(out, "true");
  if (cJSON_IsFalse(v)) return osb_buf_append_str(out, "false");
  if (cJSON_IsArray(v)) {
    if (osb_buf_append(out, "[", 1) != 0) return -1;
    for (const cJSON *e = v->child; e; e = e->next) {
      if (e != v->child && osb_buf_append(out, ",", 1) != 0) return -1;
      if (write_value(out, e, 0) != 0) return -1;
    }
    return osb_buf_append(out, "]", 1);
  }
  if (cJSON_IsObject(v)) {
    size_t n = 0;
    for (const cJSON *e = v->child; e; e = e->next) n++;
    member *ms = n ? malloc(n * sizeof *ms) : NULL;
    if (n && !ms) return -1;
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
      int r = rename && strcmp(e->string, "text/plain") == 0;
      ms[i] = (member){e, r ? "text" : e->string, r, i};
    }
    if (n) qsort(ms, n, sizeof *ms, cmp_member);
    int rc = osb_buf_append(out, "{", 1);
    int first = 1;
    for (i = 0; rc == 0 && i < n; i++) {
      /* a duplicated key: the last one wins, as in a Go map */
      if (i + 1 < n && strcmp(ms[i].key, ms[i + 1].key) == 0) continue;
      const char *key = ms[i].key;
      if (!first) rc |= osb_buf_append(out, ",", 1);
      first = 0;
      rc |= xd_json_str(out, key, strlen(key));
      rc |= osb_buf_append(out, ":", 1);
      if (rc == 0) rc = write_value(out, ms[i].item, 0);
    }
    free(ms);
    return rc ? -1 : osb_buf_append(out, "}", 1);
  }
  return osb_buf_append_str(out, "null");
}

int xd_kjson_write(osb_buf *out, const cJSON *v, int rename_text_plain) {
  /* a bundle with both "text" and "text/plain": the renamed text/plain wins (Go's map gets either, at random) */
  return write_value(out, v, rename_text_plain);
}

/* ------------------------------------------------------------------------------------------- output demux */

void xd_kdemux_reset(xd_kdemux *d, const char *marker, size_t mlen) {
  memset(d, 0, sizeof *d);
  if (marker && mlen > 0 && mlen <= XD_KMARKER_MAX) {
    memcpy(d->marker, marker, mlen);
    d->mlen = mlen;
  }
}

/* Bytes at the end of b[0..n) that begin a UTF-8 character the end cut (0..3). */
static size_t incomplete_tail(const unsigned char *b, size_t n) {
  for (size_t k = 1; k <= 3 && k <= n; k++) {
    unsigned char c = b[n - k];
    if ((c & 0xC0) == 0x80) continue;
    if (c < 0xC0 || c >= 0xF8) return 0;
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    return need > k ? k : 0;
  }
  return 0;
}

static void emit(xd_kdemux *d, const char *b, size_t n, int final, xd_kdemux_fn fn, void *arg) {
  size_t keep = final ? 0 : incomplete_tail((const unsigned char *)b, n);
  if (n - keep > 0) fn(arg, b, n - keep);
  memcpy(d->carry, b + n - keep, keep);
  d->ncarry = keep;
}

void xd_kdemux_feed(xd_kdemux *d, const char *p, size_t n, xd_kdemux_fn fn, void *arg) {
  if (!d->mlen || d->done || n == 0) return;
  size_t pre = d->ncarry + d->nheld, len = pre + n;
  char *buf = malloc(len);
  if (!buf) return; /* out of memory: these bytes are lost */
  memcpy(buf, d->carry, d->ncarry);
  memcpy(buf + d->ncarry, d->held, d->nheld);
  memcpy(buf + pre, p, n);
  size_t from = d->ncarry;
  char *at = memmem(buf + from, len - from, d->marker, d->mlen);
  if (at) {
    d->ncarry = d->nheld = 0;
    if (at > buf) fn(arg, buf, (size_t)(at - buf));
    d->done = 1;
    free(buf);
    return;
  }
  size_t keep = 0;
  for (size_t k = d->mlen - 1; k > 0; k--) {
    if (k <= len - from && memcmp(buf + len - k, d->marker, k) == 0) {
      keep = k;
      break;
    }
  }
  memcpy(d->held, buf + len - keep, keep);
  d->nheld = keep;
  d->ncarry = 0;
  emit(d, buf, len - keep, 0, fn, arg);
  free(buf);
}

void xd_kdemux_flush(xd_kdemux *d, xd_kdemux_fn fn, void *arg) {
  if (!d->mlen || d->done) return;
  char buf[sizeof d->carry + sizeof d->held];
  size_t n = 0;
  memcpy(buf, d->carry, d->ncarry);
  n += d->ncarry;
  memcpy(buf + n, d->held, d->nheld);
  n += d->nheld;
  d->ncarry = d->nheld = 0;
  if (n) fn(arg, buf, n);
  d->done = 1;
}
