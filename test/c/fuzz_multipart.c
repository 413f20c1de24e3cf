/* libFuzzer target of the C execd's incremental multipart/form-data reader (src/execd/multipart.c). An input is a
 * Content-Type value up to the first newline, one byte that seeds how the body is split, then the body. The body is
 * read twice: whole, then in pieces of pseudo-random sizes (1 byte to 64 KiB). Invariants: the results are among the
 * four; the two reads give the same result and the same events (parts begun with their kind, bytes, ends), so what
 * the reader decides never depends on how the body arrives; every kept part's bytes are inside the body; a part is
 * ended only after it began, and never two at once; at most XD_MP_MAX_PARTS parts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "execd/multipart.h"

typedef struct {
  osb_buf kinds;   /* one char per part begun: '0' file, '1' metadata */
  osb_buf content; /* the bytes of every part, one after another */
  osb_buf ends;    /* where each part ended in content, as text */
  int open;
  size_t parts;
  int bad;
} rec;

static int on_part(void *arg, int kind) {
  rec *r = arg;
  if (r->open || (kind != 0 && kind != 1)) r->bad = 1;
  r->open = 1;
  r->parts++;
  osb_buf_append_str(&r->kinds, kind ? "1" : "0");
  return 0;
}

static int on_data(void *arg, const char *d, size_t n) {
  rec *r = arg;
  if (!r->open || n == 0) r->bad = 1;
  osb_buf_append(&r->content, d, n);
  return 0;
}

static int on_end(void *arg) {
  rec *r = arg;
  if (!r->open) r->bad = 1;
  r->open = 0;
  osb_buf_appendf(&r->ends, "%zu,", r->content.len);
  return 0;
}

static const xd_mp_callbacks CB = {on_part, on_data, on_end};

static void rec_free(rec *r) {
  osb_buf_free(&r->kinds);
  osb_buf_free(&r->content);
  osb_buf_free(&r->ends);
}

static int same(const osb_buf *a, const osb_buf *b) { return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0); }

/* reads the body whole (seed 0) or in pieces; 1 when a reader was made */
static int run(const char *ct, const uint8_t *body, size_t len, unsigned seed, rec *r, int *result) {
  xd_mp *m = NULL;
  int rc = xd_mp_new(ct, &CB, r, &m);
  if (rc != XD_MP_OK) {
    *result = rc;
    return 0;
  }
  size_t off = 0;
  unsigned x = seed * 2654435761u + 1;
  while (off < len && rc == XD_MP_OK) {
    size_t n = len - off;
    if (seed) {
      x = x * 1103515245u + 12345u;
      size_t want = (x >> 8) % 7 == 0 ? (x >> 4) % 65536 + 1 : (x >> 4) % 97 + 1;
      if (want < n) n = want;
    }
    rc = xd_mp_feed(m, (const char *)body + off, n);
    off += n;
  }
  if (rc == XD_MP_OK) rc = xd_mp_finish(m);
  xd_mp_free(m);
  *result = rc;
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nl = memchr(data, '\n', size);
  if (!nl || (size_t)(nl - data) + 2 > size) return 0;
  size_t ctl = (size_t)(nl - data);
  char *ct = malloc(ctl + 1);
  if (!ct) return 0;
  memcpy(ct, data, ctl);
  ct[ctl] = '\0';
  unsigned seed = nl[1] | 1u;
  const uint8_t *body = nl + 2;
  size_t blen = size - ctl - 2;
  rec whole = {0}, split = {0};
  int r1, r2;
  int made = run(ct, body, blen, 0, &whole, &r1);
  run(ct, body, blen, seed, &split, &r2);
  if (r1 != XD_MP_OK && r1 != XD_MP_NOT_MULTIPART && r1 != XD_MP_BAD && r1 != XD_MP_NOMEM) abort();
  if (r1 != r2) abort();
  if (whole.bad || split.bad || whole.parts > XD_MP_MAX_PARTS) abort();
  if (made && r1 == XD_MP_OK && whole.open) abort(); /* a form that ended has no part left open */
  if (whole.content.len > blen) abort();
  /* a form that was read: the same parts, bytes and ends however the body arrived */
  if (r1 == XD_MP_OK && (!same(&whole.kinds, &split.kinds) || !same(&whole.content, &split.content) ||
                         !same(&whole.ends, &split.ends)))
    abort();
  rec_free(&whole);
  rec_free(&split);
  free(ct);
  return 0;
}
