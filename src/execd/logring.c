/* Bounded output log of a background command (logring.h). */
#include "logring.h"

#include <stdlib.h>
#include <string.h>

void xd_logring_init(xd_logring *r, size_t cap) {
  memset(r, 0, sizeof *r);
  r->cap = cap ? cap : XD_LOG_RING_BYTES;
}

uint64_t xd_logring_start(const xd_logring *r) { return r->end - r->size; }

/* Copies retained bytes [off, off + n) (offsets relative to the oldest retained byte) to dst. */
static void copy_out(const xd_logring *r, size_t off, size_t n, char *dst) {
  size_t at = (r->head + off) % (r->alloc ? r->alloc : 1);
  size_t first = r->alloc - at < n ? r->alloc - at : n;
  memcpy(dst, r->data + at, first);
  memcpy(dst + first, r->data, n - first);
}

/* Makes room for `want` retained bytes (<= cap), linearising the ring. */
static int grow(xd_logring *r, size_t want) {
  size_t na = r->alloc ? r->alloc : 4096;
  while (na < want) na *= 2;
  if (na > r->cap) na = r->cap;
  char *nd = malloc(na);
  if (!nd) return -1;
  if (r->size) copy_out(r, 0, r->size, nd);
  free(r->data);
  r->data = nd;
  r->alloc = na;
  r->head = 0;
  return 0;
}

int xd_logring_push(xd_logring *r, const void *p, size_t n) {
  const char *src = p;
  if (n == 0) return 0;
  r->end += n;
  if (n >= r->cap) { /* only the newest cap bytes of this write stay */
    src += n - r->cap;
    n = r->cap;
    r->size = 0;
    r->head = 0;
  }
  size_t want = r->size + n > r->cap ? r->cap : r->size + n;
  if (want > r->alloc && grow(r, want) != 0) {
    r->size = 0; /* keep the counters true: nothing retained */
    r->head = 0;
    return -1;
  }
  if (r->size + n > r->alloc) { /* full: drop the oldest bytes */
    size_t drop = r->size + n - r->alloc;
    r->head = (r->head + drop) % r->alloc;
    r->size -= drop;
  }
  size_t tail = (r->head + r->size) % r->alloc;
  size_t first = r->alloc - tail < n ? r->alloc - tail : n;
  memcpy(r->data + tail, src, first);
  memcpy(r->data, src + first, n - first);
  r->size += n;
  return 0;
}

int xd_logring_read(const xd_logring *r, uint64_t from, osb_buf *out) {
  uint64_t start = xd_logring_start(r);
  if (from > r->end) from = r->end;
  if (from < start) from = start;
  size_t skip = (size_t)(from - start);
  size_t n = r->size - skip;
  if (n == 0) return 0;
  if (osb_buf_reserve_exact(out, n) != 0) return -1;
  copy_out(r, skip, n, out->data + out->len);
  out->len += n;
  out->data[out->len] = 0;
  return 0;
}

void xd_logring_free(xd_logring *r) {
  free(r->data);
  memset(r, 0, sizeof *r);
}
