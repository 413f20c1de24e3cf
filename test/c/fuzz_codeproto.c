/* libFuzzer target of the code-interpreter kernel protocol (src/execd/codeproto.c): what a kernel process, run as the
 * sandbox user, writes to execd. The input is taken three ways:
 *  - control lines: split with a small bound (so long lines are dropped) fed whole and fed in pieces of 1 to 8 bytes,
 *    which must give the same lines; every line kept is at most the bound, and each is parsed (xd_kmsg_parse) and a
 *    result's or error's tree written back as Go's JSON (xd_kjson_write), whose text must parse again;
 *  - the same bytes through the output demux with a marker taken from the input's first byte, fed whole and fed in
 *    pieces: both must forward the same text, which is the input up to the marker (all of it after a flush when there
 *    is none), in pieces that are never empty. (Cutting at character boundaries is test_xd_code.c's.) */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "execd/codeproto.h"

#define BOUND 64

typedef struct {
  osb_buf all;
  size_t lines;
} acc;

static void on_line(void *arg, const char *line, size_t len) {
  acc *a = arg;
  if (len > BOUND) abort();
  osb_buf_append(&a->all, line, len);
  osb_buf_append(&a->all, "\n", 1);
  a->lines++;
  cJSON *t;
  int exit, has;
  int kind = xd_kmsg_parse(line, len, &t, &exit, &has);
  if ((kind == XD_KMSG_RESULT || kind == XD_KMSG_ERROR) != (t != NULL)) abort();
  if (t) {
    osb_buf b = {0};
    if (xd_kjson_write(&b, t, kind == XD_KMSG_RESULT) == 0) {
      cJSON *again = cJSON_ParseWithLength(b.data, b.len);
      if (!again) abort();
      cJSON_Delete(again);
    }
    osb_buf_free(&b);
    cJSON_Delete(t);
  }
}

static void on_text(void *arg, const char *t, size_t n) {
  osb_buf *b = arg;
  if (n == 0) abort();
  osb_buf_append(b, t, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *d = (const char *)data;
  acc whole = {0}, pieces = {0};
  xd_kline k1, k2;
  xd_kline_init(&k1, BOUND);
  xd_kline_init(&k2, BOUND);
  xd_kline_push(&k1, d, size, on_line, &whole);
  for (size_t i = 0; i < size;) {
    size_t n = 1 + (data[i] & 7);
    if (n > size - i) n = size - i;
    xd_kline_push(&k2, d + i, n, on_line, &pieces);
    i += n;
  }
  if (whole.lines != pieces.lines || whole.all.len != pieces.all.len ||
      (whole.all.len && memcmp(whole.all.data, pieces.all.data, whole.all.len) != 0) || k1.dropped != k2.dropped)
    abort();
  xd_kline_free(&k1);
  xd_kline_free(&k2);
  osb_buf_free(&whole.all);
  osb_buf_free(&pieces.all);

  if (size < 2) return 0;
  /* the marker: 1 to 8 bytes from the input's start, the demuxed stream the rest */
  size_t mlen = 1 + (data[0] & 7);
  if (mlen > size - 1) mlen = size - 1;
  const char *marker = d + 1, *s = d + 1 + mlen;
  size_t sn = size - 1 - mlen;
  osb_buf o1 = {0}, o2 = {0};
  xd_kdemux m1, m2;
  xd_kdemux_reset(&m1, marker, mlen);
  xd_kdemux_reset(&m2, marker, mlen);
  xd_kdemux_feed(&m1, s, sn, on_text, &o1);
  for (size_t i = 0; i < sn;) {
    size_t n = 1 + ((unsigned char)s[i] % 5);
    if (n > sn - i) n = sn - i;
    xd_kdemux_feed(&m2, s + i, n, on_text, &o2);
    i += n;
  }
  xd_kdemux_flush(&m1, on_text, &o1);
  xd_kdemux_flush(&m2, on_text, &o2);
  const char *at = sn >= mlen ? memmem(s, sn, marker, mlen) : NULL;
  size_t want = at ? (size_t)(at - s) : sn;
  if (o1.len != want || o2.len != want || (want && (memcmp(o1.data, s, want) != 0 || memcmp(o2.data, s, want) != 0)))
    abort();
  osb_buf_free(&o1);
  osb_buf_free(&o2);
  return 0;
}
