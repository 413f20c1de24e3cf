/* Growable byte buffer and tail-retention buffer (see buf.h). */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void osb_buf_init(osb_buf *b) { memset(b, 0, sizeof *b); }

static int reserve(osb_buf *b, size_t extra) {
  if (extra > SIZE_MAX - b->len - 1) return -1;
  size_t need = b->len + extra + 1;
  if (need <= b->cap) return 0;
  size_t ncap = b->cap ? b->cap : 256;
  while (ncap < need) ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
  char *nd = realloc(b->data, ncap);
  if (!nd) return -1;
  b->data = nd;
  b->cap = ncap;
  return 0;
}

int osb_buf_reserve_exact(osb_buf *b, size_t extra) {
  if (extra > SIZE_MAX - b->len - 1) return -1;
  size_t need = b->len + extra + 1;
  if (need <= b->cap) return 0;
  char *nd = realloc(b->data, need);
  if (!nd) return -1;
  if (!b->data) nd[0] = 0;
  b->data = nd;
  b->cap = need;
  return 0;
}

int osb_buf_append(osb_buf *b, const void *p, size_t n) {
  if (reserve(b, n) != 0) return -1;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = 0;
  return 0;
}

int osb_buf_append_str(osb_buf *b, const char *s) { return osb_buf_append(b, s, strlen(s)); }

int osb_buf_appendf(osb_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || reserve(b, (size_t)n) != 0) return -1;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return 0;
}

void osb_buf_consume(osb_buf *b, size_t n) {
  if (n >= b->len) {
    osb_buf_reset(b);
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
  b->data[b->len] = 0;
}

void osb_buf_reset(osb_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = 0;
}

char *osb_buf_steal(osb_buf *b, size_t *len) {
  if (!b->data) {
    if (reserve(b, 0) != 0) return NULL;
    b->data[0] = 0;
  }
  char *d = b->data;
  if (len) *len = b->len;
  osb_buf_init(b);
  return d;
}

void osb_buf_free(osb_buf *b) {
  free(b->data);
  osb_buf_init(b);
}

void osb_tail_init(osb_tail *t, int64_t limit) {
  memset(t, 0, sizeof *t);
  t->limit = limit;
}

int osb_tail_append(osb_tail *t, const void *p, size_t n) {
  t->total += n;
  if (t->limit < 0) {
    if (osb_buf_append(&t->b, p, n) != 0) {
      t->dropped += n;
      return -1;
    }
    return 0;
  }
  size_t limit = (size_t)t->limit;
  if (n >= limit) { /* the chunk alone fills the window */
    t->dropped += (t->b.len - t->start) + (n - limit);
    osb_buf_reset(&t->b);
    t->start = 0;
    const char *tail = (const char *)p + (n - limit);
    if (osb_buf_append(&t->b, tail, limit) != 0) {
      t->dropped += limit;
      return -1;
    }
    return 0;
  }
  size_t kept = t->b.len - t->start;
  if (kept + n > limit) {
    size_t excess = kept + n - limit;
    t->start += excess;
    t->dropped += excess;
  }
  if (t->start > 0 && t->start >= limit) { /* compact: amortised O(1) per byte */
    osb_buf_consume(&t->b, t->start);
    t->start = 0;
  }
  if (osb_buf_append(&t->b, p, n) != 0) {
    t->dropped += n;
    return -1;
  }
  return 0;
}

const char *osb_tail_data(const osb_tail *t, size_t *len) {
  *len = t->b.len - t->start;
  return t->b.data ? t->b.data + t->start : "";
}

void osb_tail_align_utf8(osb_tail *t) {
  if (t->dropped == 0) return;
  for (int i = 0; i < 3 && t->start < t->b.len; i++) {
    unsigned char c = (unsigned char)t->b.data[t->start];
    if ((c & 0xC0) != 0x80) break;
    t->start++;
    t->dropped++;
  }
}

void osb_tail_free(osb_tail *t) {
  osb_buf_free(&t->b);
  t->start = 0;
}
