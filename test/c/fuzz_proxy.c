/* libFuzzer target of the C execd's proxy framing readers (src/execd/proxy.c): every input is
 * - a chunked body, fed whole and in pieces of 1 to 8 bytes: both ways give the same data, the same end (or both
 *   refuse it), never more data than input, and the consumed count never past the input;
 * - an answer head from a service (as a GET and as a HEAD): a complete head's length is within the input and the
 *   16 KiB limit, the client's head starts with "HTTP/1.1 ddd " and ends with an empty line, has no bare CR or LF and
 *   none of the hop-by-hop headers; a refusal names its reason; an input it calls incomplete stays incomplete or
 *   becomes complete/refused when cut shorter (no answer from a prefix of an input that is not a prefix's). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "execd/proxy.h"

typedef struct {
  osb_buf data;
} sink;

static void collect(void *arg, const char *d, size_t n) {
  sink *s = arg;
  if (osb_buf_append(&s->data, d, n) != 0) abort();
}

/* -1 refused, else the bytes consumed; *done: the body ended */
static long feed(const uint8_t *in, size_t n, size_t piece, sink *s, int *done) {
  xd_chunked d;
  xd_chunked_init(&d);
  size_t used = 0;
  while (used < n && !xd_chunked_done(&d)) {
    size_t len = piece ? (n - used < piece ? n - used : piece) : n - used;
    ssize_t k = xd_chunked_feed(&d, (const char *)in + used, len, collect, s);
    if (k < 0) return -1;
    if ((size_t)k > len) abort();
    if ((size_t)k < len && !xd_chunked_done(&d)) abort(); /* it stops early only at the end */
    used += (size_t)k;
  }
  *done = xd_chunked_done(&d);
  return (long)used;
}

static void check_head(const uint8_t *in, size_t n, int head_request) {
  xd_proxy_head h;
  osb_buf out = {0};
  const char *why = NULL;
  char whybuf[64];
  int rc = xd_proxy_answer_head((const char *)in, n, head_request, n & 1, "D", &h, &out, &why, whybuf, sizeof whybuf);
  if (rc == -1 || rc == -3) {
    if (!why || !*why) abort();
  } else if (rc == 1) {
    if (h.head_len == 0 || h.head_len > n || h.head_len > XD_PROXY_HEAD_LIMIT + 3) abort();
    if (h.status < 0 || h.status > 999) abort();
    if (!h.informational) {
      if (!out.data || out.len < 17 || memcmp(out.data, "HTTP/1.1 ", 9) != 0) abort();
      if (out.len < 4 || memcmp(out.data + out.len - 4, "\r\n\r\n", 4) != 0) abort();
      for (size_t i = 0; i < out.len; i++) {
        if (out.data[i] == '\n' && (i == 0 || out.data[i - 1] != '\r')) abort();
        if (out.data[i] == '\r' && (i + 1 >= out.len || out.data[i + 1] != '\n')) abort();
        if (out.data[i] == 0) abort();
      }
      static const char *const hop[] = {"\r\nconnection:", "\r\nkeep-alive:", "\r\ntransfer-encoding: gzip", "\r\nupgrade:", "\r\nte:"};
      for (size_t k = 0; k < sizeof hop / sizeof *hop; k++) {
        size_t hl = strlen(hop[k]);
        for (size_t i = 0; i + hl <= out.len; i++)
          if (strncasecmp(out.data + i, hop[k], hl) == 0 && !(k == 0 && strncmp(out.data + i, "\r\nConnection: close\r\n", 21) == 0))
            abort();
      }
      if (head_request && h.framing != XD_PROXY_NONE) abort();
    }
  } else if (rc != 0 && rc != -2) abort();
  osb_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sink whole = {{0}}, bits = {{0}};
  int done_w = 0, done_b = 0;
  long uw = feed(data, size, 0, &whole, &done_w);
  long ub = feed(data, size, size ? (size_t)(data[0] % 8) + 1 : 1, &bits, &done_b);
  if ((uw < 0) != (ub < 0)) abort();
  if (uw >= 0) {
    if (uw != ub || done_w != done_b) abort();
    if (whole.data.len != bits.data.len || (whole.data.len && memcmp(whole.data.data, bits.data.data, whole.data.len) != 0)) abort();
    if (whole.data.len > size || (size_t)uw > size) abort();
  }
  osb_buf_free(&whole.data);
  osb_buf_free(&bits.data);
  check_head(data, size, 0);
  check_head(data, size, 1);
  return 0;
}
