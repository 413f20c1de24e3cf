/* libFuzzer target of the C execd's WebSocket client-frame parser (src/execd/wsproto.c). Every input is parsed as a
 * stream of client frames three ways: fed whole, fed in pieces of 1 to 8 bytes, and fed whole with every callback
 * setting stop (the driver clears it and feeds the rest from p->consumed). All three must give the same events and
 * the same result. Invariants: the result is 0, 1002, 1007 or 1009; a message is never larger than
 * XD_WS_MAX_PAYLOAD and a text message is valid UTF-8 (checked here by a decoder of its own); a ping or pong carries
 * at most 125 bytes; a close has a code ws accepts (or 1005 without a reason) and a UTF-8 reason of at most 123
 * bytes; after an error or a close no callback comes and nothing more is consumed. The input is also taken as a
 * handshake key and a close reason: the accept value is 28 base64 characters, a close body at most 125 bytes with a
 * UTF-8 reason when the given one was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "execd/wsproto.h"

/* An independent UTF-8 check: decode each code point and refuse overlongs, surrogates and values above U+10FFFF. */
static int utf8_ok(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n) return 0;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += len;
  }
  return 1;
}

typedef struct {
  uint64_t hash; /* FNV-1a over the events */
  unsigned events;
  int ended;     /* a close was delivered */
  int stop_each; /* set p->stop in every callback */
  int owner;     /* supply buffers (on_buffer, half the announced size: grown by the parser) and take messages */
  xd_ws_parser *p;
} run;

static void mix(run *r, const void *d, size_t n) {
  const unsigned char *b = d;
  for (size_t i = 0; i < n; i++) r->hash = (r->hash ^ b[i]) * 1099511628211ull;
}

static void event(run *r, int kind, const unsigned char *d, size_t n) {
  if (r->ended) abort(); /* nothing after the close */
  r->events++;
  mix(r, &kind, sizeof kind);
  mix(r, &n, sizeof n);
  mix(r, d, n);
  if (r->stop_each) r->p->stop = 1;
}

static void on_message(void *ud, int binary, const unsigned char *d, size_t n) {
  if (n > XD_WS_MAX_PAYLOAD || (!binary && !utf8_ok(d, n)) || (binary != 0 && binary != 1)) abort();
  event(ud, binary ? 'b' : 't', d, n);
  run *r = ud;
  if (r->owner && binary) {
    osb_buf m;
    xd_ws_take_message(r->p, &m);
    if (m.len != n || (n && m.data != (const char *)d)) abort();
    osb_buf_free(&m);
  }
}
static void on_buffer(void *ud, osb_buf *msg, uint64_t announced) {
  run *r = ud;
  if (!r->owner || msg->cap || announced <= 64 * 1024) abort();
  if (osb_buf_reserve_exact(msg, (size_t)(announced / 2)) != 0) abort();
}
static void on_ping(void *ud, const unsigned char *d, size_t n) {
  if (n > 125) abort();
  event(ud, 'P', d, n);
}
static void on_pong(void *ud, const unsigned char *d, size_t n) {
  if (n > 125) abort();
  event(ud, 'O', d, n);
}
static void on_close(void *ud, unsigned code, const unsigned char *d, size_t n) {
  int valid = (code >= 1000 && code <= 1014 && code != 1004 && code != 1005 && code != 1006) ||
              (code >= 3000 && code <= 4999);
  if (code == 1005 ? n != 0 : !valid) abort();
  if (n > 123 || !utf8_ok(d, n)) abort();
  run *r = ud;
  mix(r, &code, sizeof code);
  event(r, 'C', d, n);
  r->ended = 1;
}
static const xd_ws_callbacks cbs = {on_message, on_ping, on_pong, on_close, NULL};
static const xd_ws_callbacks owner_cbs = {on_message, on_ping, on_pong, on_close, on_buffer};

/* Parses data in pieces (piece = 0: whole); returns the result, the events in r. */
static int parse(run *r, const uint8_t *data, size_t size, size_t piece, int stop_each, int owner) {
  xd_ws_parser p;
  memset(&p, 0, sizeof p);
  memset(r, 0, sizeof *r);
  r->hash = 1469598103934665603ull;
  r->p = &p;
  r->stop_each = stop_each;
  r->owner = owner;
  size_t at = 0;
  int rc = 0, failed = 0;
  while (at < size) {
    size_t n = piece ? piece : size - at;
    if (n > size - at) n = size - at;
    unsigned before = r->events;
    int ended = r->ended;
    int x = xd_ws_parse(&p, data + at, n, owner ? &owner_cbs : &cbs, r);
    if (p.consumed > n) abort();
    if (failed || ended) {
      /* after an error or a close: nothing consumed, no callback, 0 */
      if (x != 0 || p.consumed != 0 || r->events != before) abort();
      at += n;
      continue;
    }
    if (x != 0) {
      if (x != 1002 && x != 1007 && x != 1009) abort();
      rc = x;
      failed = 1;
      at += n;
      continue;
    }
    if (p.stop) {
      if (!stop_each || r->events == before) abort();
      p.stop = 0;
      at += p.consumed; /* the rest of this piece again */
      continue;
    }
    if (!r->ended && p.consumed != n) abort(); /* no stop, no end: all of it */
    at += n;
  }
  xd_ws_parser_free(&p);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  run whole, pieces, stopped, owned;
  int a = parse(&whole, data, size, 0, 0, 0);
  int b = parse(&pieces, data, size, 1 + (size % 8), 0, 0);
  int c = parse(&stopped, data, size, 0, 1, 0);
  int d = parse(&owned, data, size, 1 + (size % 5), 0, 1); /* the owner's buffers and takes change nothing seen */
  if (a != b || a != c || a != d) abort();
  if (whole.hash != pieces.hash || whole.hash != stopped.hash || whole.hash != owned.hash ||
      whole.events != pieces.events || whole.events != stopped.events || whole.events != owned.events)
    abort();

  /* the input as a handshake key and as a close reason */
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = '\0';
  char acc[29];
  xd_ws_accept(s, acc);
  if (strlen(acc) != 28 || acc[27] != '=') abort();
  for (int i = 0; i < 27; i++)
    if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", acc[i])) abort();
  int key_ok = strlen(s) == 24 && s[22] == '=' && s[23] == '=';
  for (int i = 0; key_ok && i < 22; i++)
    if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", s[i])) key_ok = 0;
  if (xd_ws_key_valid(s) != key_ok) abort();
  unsigned char body[125];
  size_t bl = xd_ws_close_payload(body, 4000, s);
  size_t rl = strlen(s);
  if (bl < 2 || bl > 125 || body[0] != 0x0f || body[1] != 0xa0) abort();
  if (bl - 2 != (rl < 123 ? rl : bl - 2) || memcmp(body + 2, s, bl - 2) != 0) abort();
  if (utf8_ok((const unsigned char *)s, rl) && !utf8_ok(body + 2, bl - 2)) abort();
  if (rl > 123 && bl - 2 + 3 < 123) abort(); /* a cut goes back at most 3 bytes */
  free(s);
  return 0;
}
