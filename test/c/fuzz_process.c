/* libFuzzer target of the PTY WebSocket input (ptyframe.c), what execd sends for a background process.
 * Part 1: the input is cut into frames (a header byte each: bit 0 binary/text, the rest the length), every frame
 * is parsed, replay frames go through the offset bookkeeping and all output through the marker scanner; the
 * scanner must account for every byte (delivered + stripped + held back == bytes in, nothing held after the
 * flush) and never hold more than OSB_PTY_HOLD_MAX bytes.
 * Part 2: the input (0x1f bytes removed) is program output; the wrapper's holder marker (a pid from the input), stdin
 * frame-written marker, stderr end marker and exit marker are
 * inserted at input-chosen places, the result is fed in input-chosen chunk sizes, and what comes out must be the
 * program output exactly, with both markers seen and the exit status read back (no marker text leaks). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "opensandbox/ptyframe.h"

#define NONCE "0123456789abcdef0123456789abcdef"
#define CAP 16384

typedef struct {
  char out[CAP];
  size_t n[2];
  size_t total;
} sink;

static void on_emit(void *ud, int which, const char *s, size_t n) {
  sink *k = ud;
  if (which != 0 && which != 1) abort();
  if (n == 0) abort(); /* empty emits are never made */
  k->n[which] += n;
  if (which == 0) {
    if (k->total + n > CAP) abort(); /* more out than went in */
    memcpy(k->out + k->total, s, n);
    k->total += n;
  }
}

static void frames(const uint8_t *data, size_t size) {
  osb_pty_markers m;
  osb_pty_markers_init(&m, NONCE);
  sink k;
  memset(&k, 0, sizeof k);
  size_t in[2] = {0, 0}, stripped[2] = {0, 0};
  uint64_t received = 0, gap = 0;
  size_t off = 0;
  while (off < size) {
    unsigned h = data[off++];
    size_t len = h >> 1;
    if (len > size - off) len = size - off;
    const char *d = (const char *)data + off;
    off += len;
    osb_pty_frame f;
    int kind = osb_pty_frame_parse(h & 1, d, len, &f);
    if (kind != f.kind) abort();
    if (f.len && (f.data < d || f.data + f.len > d + len)) abort();
    if (kind == OSB_PTY_STDOUT || kind == OSB_PTY_STDERR) {
      int w = kind == OSB_PTY_STDERR;
      received += f.len;
      in[w] += f.len;
      stripped[w] += osb_pty_markers_scan(&m, w, f.data, f.len, on_emit, &k);
    } else if (kind == OSB_PTY_REPLAY) {
      uint64_t before = received;
      size_t skip = osb_pty_replay_skip(&received, f.offset, f.len, &gap);
      if (skip > f.len || received < before) abort();
      if (skip < f.len) {
        if (received != f.offset + f.len) abort();
        in[0] += f.len - skip;
        stripped[0] += osb_pty_markers_scan(&m, 0, f.data + skip, f.len - skip, on_emit, &k);
      }
    } else if (kind == OSB_PTY_ERROR) {
      if (strlen(f.error_code) >= sizeof f.error_code || strlen(f.error_text) >= sizeof f.error_text) abort();
    }
    for (int w = 0; w < 2; w++) {
      if (m.hold_len[w] > OSB_PTY_HOLD_MAX) abort();
      if (k.n[w] + stripped[w] + m.hold_len[w] != in[w]) abort();
    }
  }
  for (int w = 0; w < 2; w++) {
    osb_pty_markers_flush(&m, w, on_emit, &k);
    if (m.hold_len[w] != 0 || k.n[w] + stripped[w] != in[w]) abort();
  }
}

static void markers(const uint8_t *data, size_t size) {
  if (size < 3) return;
  unsigned step_seed = data[0], where = data[1];
  int code = (int)data[2] - 128;
  long hpid = 1 + (long)data[2] * 7919;
  data += 3, size -= 3;
  static char clean[CAP], stream[CAP];
  size_t cn = 0;
  for (size_t i = 0; i < size && cn < CAP / 2; i++)
    if (data[i] != 0x1f) clean[cn++] = (char)data[i];
  char err_m[64], exit_m[64], w_m[64], h_m[64];
  int hl = snprintf(h_m, sizeof h_m, "\x1fOSB-H:%s:%ld\x1f", NONCE, hpid);
  int el = snprintf(err_m, sizeof err_m, "\x1fOSB-ERR:%s\x1f", NONCE);
  int wl = snprintf(w_m, sizeof w_m, "\x1fOSB-W:%s\x1f", NONCE); /* a stdin frame-written marker, then the end marker */
  int xl = snprintf(exit_m, sizeof exit_m, "\x1fOSB-EXIT:%s:%d\x1f", NONCE, code);
  size_t a = cn ? (where & 15) * cn / 15 : 0, b = cn ? (where >> 4) * cn / 15 : 0;
  if (a > b) {
    size_t t = a;
    a = b;
    b = t;
  }
  size_t sn = 0;
  memcpy(stream + sn, clean, a), sn += a;
  memcpy(stream + sn, h_m, (size_t)hl), sn += (size_t)hl;
  memcpy(stream + sn, w_m, (size_t)wl), sn += (size_t)wl;
  memcpy(stream + sn, err_m, (size_t)el), sn += (size_t)el;
  memcpy(stream + sn, clean + a, b - a), sn += b - a;
  memcpy(stream + sn, exit_m, (size_t)xl), sn += (size_t)xl;
  memcpy(stream + sn, clean + b, cn - b), sn += cn - b;

  osb_pty_markers m;
  osb_pty_markers_init(&m, NONCE);
  sink k;
  memset(&k, 0, sizeof k);
  size_t stripped = 0;
  unsigned r = step_seed;
  for (size_t off = 0; off < sn;) {
    r = r * 1103515245u + 12345u;
    size_t step = (size_t)((r >> 16) % 70) + 1;
    if (step > sn - off) step = sn - off;
    stripped += osb_pty_markers_scan(&m, 0, stream + off, step, on_emit, &k);
    off += step;
  }
  osb_pty_markers_flush(&m, 0, on_emit, &k);
  if (!m.got_err || !m.got_exit || m.exit_code != code || m.wrote != 1 || m.holder_pid != hpid) abort();
  if (stripped != (size_t)(hl + wl + el + xl)) abort();
  if (k.total != cn || memcmp(k.out, clean, cn) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > CAP / 2) size = CAP / 2;
  frames(data, size);
  markers(data, size);
  return 0;
}
