/* The C execd's WebSocket protocol module (src/execd/wsproto.c): the handshake's key check and accept value, the
 * server's frame headers and close bodies, and the client-frame parser against ws v8's receiver rules: whole,
 * fragmented and interleaved messages fed whole, a byte at a time and in random splits; every protocol error with
 * its close code; the 16 MiB message limit across fragments, found from the headers alone; close frames; the stop
 * flag; and what ws itself did with 250 recorded streams (test/fixtures/ws-receiver). Pure module: no server, no
 * loop; run from test/c (run.sh does), where the recorded file is ../fixtures/ws-receiver/cases.txt. */
#include "harness.h"

#include <stdint.h>

#include "execd/wsproto.h"

/* ---- a recorder of the parser's callbacks: one text line per event ---- */

typedef struct {
  osb_buf log;         /* "M t|b <escaped bytes>\n", "P ...\n", "O ...\n", "C <code> <escaped reason>\n" */
  size_t last_len;     /* length of the last message */
  int stop_after;      /* set p->stop after this many events (0: never) */
  int events;
  unsigned char *copy; /* the last message's bytes (malloc'd) */
  xd_ws_parser *p;
} rec;

static void rec_free(rec *r) {
  osb_buf_free(&r->log);
  free(r->copy);
  r->copy = NULL;
}

static void esc(rec *r, const unsigned char *d, size_t n) {
  if (n > 64) {
    osb_buf_appendf(&r->log, "<%zu bytes>", n);
    return;
  }
  for (size_t i = 0; i < n; i++) {
    if (d[i] >= 0x20 && d[i] < 0x7f && d[i] != '\\') osb_buf_append(&r->log, d + i, 1);
    else osb_buf_appendf(&r->log, "\\x%02x", d[i]);
  }
}

static void event(rec *r) {
  osb_buf_append_str(&r->log, "\n");
  if (r->stop_after && ++r->events == r->stop_after) r->p->stop = 1;
}

static void on_message(void *ud, int binary, const unsigned char *data, size_t len) {
  rec *r = ud;
  osb_buf_append_str(&r->log, binary ? "M b " : "M t ");
  esc(r, data, len);
  r->last_len = len;
  free(r->copy);
  r->copy = malloc(len ? len : 1);
  if (r->copy && len) memcpy(r->copy, data, len);
  event(r);
}
static void on_ping(void *ud, const unsigned char *data, size_t len) {
  rec *r = ud;
  osb_buf_append_str(&r->log, "P ");
  esc(r, data, len);
  event(r);
}
static void on_pong(void *ud, const unsigned char *data, size_t len) {
  rec *r = ud;
  osb_buf_append_str(&r->log, "O ");
  esc(r, data, len);
  event(r);
}
static void on_close(void *ud, unsigned code, const unsigned char *reason, size_t len) {
  rec *r = ud;
  osb_buf_appendf(&r->log, "C %u ", code);
  esc(r, reason, len);
  event(r);
}
static const xd_ws_callbacks cbs = {on_message, on_ping, on_pong, on_close, NULL};

static const char *logtext(rec *r) { return r->log.data ? r->log.data : ""; }

/* ---- client frames ---- */

/* Appends one masked frame: b0 (FIN, RSV, opcode) as given, the shortest length encoding unless len_form is 126 or
 * 127, mask m (NULL: no mask bit and no key). */
static void frame_ex(osb_buf *out, unsigned b0, const void *payload, size_t len, int len_form, const unsigned char *m) {
  unsigned char h[14];
  size_t hl = 0;
  unsigned mb = m ? 0x80 : 0;
  h[hl++] = (unsigned char)b0;
  if (len_form == 127 || (len_form == 0 && len > 0xffff)) {
    h[hl++] = (unsigned char)(mb | 127);
    for (int i = 0; i < 8; i++) h[hl++] = (unsigned char)((uint64_t)len >> (56 - 8 * i));
  } else if (len_form == 126 || (len_form == 0 && len >= 126)) {
    h[hl++] = (unsigned char)(mb | 126);
    h[hl++] = (unsigned char)(len >> 8);
    h[hl++] = (unsigned char)len;
  } else {
    h[hl++] = (unsigned char)(mb | len);
  }
  if (m) memcpy(h + hl, m, 4), hl += 4;
  osb_buf_append(out, h, hl);
  size_t at = out->len;
  osb_buf_append(out, payload, len);
  for (size_t i = 0; m && i < len; i++) out->data[at + i] ^= (char)m[i & 3];
}

static const unsigned char MASK[4] = {0x37, 0xfa, 0x21, 0x3d};

static void frame(osb_buf *out, unsigned b0, const char *text) { frame_ex(out, b0, text, strlen(text), 0, MASK); }

/* Feeds all of s at once to a fresh parser; returns the result, the log in r (caller frees r->log). */
static int feed_all(rec *r, xd_ws_parser *p, const void *s, size_t n) {
  memset(r, 0, sizeof *r);
  memset(p, 0, sizeof *p);
  r->p = p;
  return xd_ws_parse(p, s, n, &cbs, r);
}

/* ---- handshake ---- */

static void test_accept(void) {
  char out[29];
  xd_ws_accept("dGhlIHNhbXBsZSBub25jZQ==", out); /* RFC 6455 section 1.3 */
  CHECK_STR(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
  xd_ws_accept("AAAAAAAAAAAAAAAAAAAAAA==", out);
  CHECK_STR(out, "ICX+Yqv66kxgM0FcWaLWlFLwTAI=");
  /* SHA-1's padding at every boundary: 36, 55, 56, 64 and 136 bytes hashed (Node's crypto gave the values) */
  xd_ws_accept("", out);
  CHECK_STR(out, "Kfh9QIsMVZcl6xEPYxPHzW8SZ8w=");
  xd_ws_accept("zzzzzzzzzzzzzzzzzzz", out);
  CHECK_STR(out, "ZfnACNNnWPP0Q/V/cL4ojFmgp1A=");
  xd_ws_accept("zzzzzzzzzzzzzzzzzzzz", out);
  CHECK_STR(out, "KXdPCK/Rnav3htElj0ByIQhb/OY=");
  xd_ws_accept("yyyyyyyyyyyyyyyyyyyyyyyyyyyy", out);
  CHECK_STR(out, "3Tz4M8ZJI2IV3J0PDvikC8a39Ks=");
  char longkey[101];
  memset(longkey, 'x', 100);
  longkey[100] = 0;
  xd_ws_accept(longkey, out);
  CHECK_STR(out, "DJTE+uYDnPxiT+W6VvIG/iPUxv8=");
}

static void test_key_valid(void) {
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25jZQ==") == 1);
  CHECK(xd_ws_key_valid("AAAAAAAAAAAAAAAAAAAAAA==") == 1);
  CHECK(xd_ws_key_valid("+/+/+/+/+/+/09azAZ+/+/==") == 1);
  CHECK(xd_ws_key_valid(NULL) == 0);
  CHECK(xd_ws_key_valid("") == 0);
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25jZQ=") == 0);   /* 23 chars */
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25jZQ===") == 0); /* 25 */
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25jZQ==\n") == 0);
  CHECK(xd_ws_key_valid(" dGhlIHNhbXBsZSBub25jZQ==") == 0);
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25jZQA=") == 0); /* not "==" */
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25jZ===") == 0); /* '=' among the 22 */
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25jZ-==") == 0); /* base64url's '-' */
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25jZ_==") == 0);
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25j\xc3\xa9==") == 0);
  CHECK(xd_ws_key_valid("dGhlIHNhbXBsZSBub25jZQ") == 0);
}

/* ---- the server's frames ---- */

static void test_frame_header(void) {
  unsigned char h[10];
  CHECK(xd_ws_frame_header(h, 2, 0) == 2 && h[0] == 0x82 && h[1] == 0);
  CHECK(xd_ws_frame_header(h, 1, 125) == 2 && h[0] == 0x81 && h[1] == 125);
  CHECK(xd_ws_frame_header(h, 2, 126) == 4 && h[0] == 0x82 && h[1] == 126 && h[2] == 0 && h[3] == 126);
  CHECK(xd_ws_frame_header(h, 2, 65535) == 4 && h[1] == 126 && h[2] == 0xff && h[3] == 0xff);
  static const unsigned char l65536[10] = {0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0};
  CHECK(xd_ws_frame_header(h, 2, 65536) == 10 && memcmp(h, l65536, 10) == 0);
  static const unsigned char big[10] = {0x81, 127, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
  CHECK(xd_ws_frame_header(h, 1, 0x0102030405060708ull) == 10 && memcmp(h, big, 10) == 0);
  CHECK(xd_ws_frame_header(h, 8, 2) == 2 && h[0] == 0x88 && h[1] == 2);
  CHECK(xd_ws_frame_header(h, 9, 0) == 2 && h[0] == 0x89);
  CHECK(xd_ws_frame_header(h, 10, 5) == 2 && h[0] == 0x8a && h[1] == 5);
}

static void test_close_payload(void) {
  unsigned char b[125];
  CHECK(xd_ws_close_payload(b, 1000, "bye") == 5 && memcmp(b, "\x03\xe8" "bye", 5) == 0);
  CHECK(xd_ws_close_payload(b, 4001, "TAKEN_OVER") == 12 && memcmp(b, "\x0f\xa1TAKEN_OVER", 12) == 0);
  CHECK(xd_ws_close_payload(b, 1009, NULL) == 2 && b[0] == 0x03 && b[1] == 0xf1);
  CHECK(xd_ws_close_payload(b, 1002, "") == 2 && b[0] == 0x03 && b[1] == 0xea);
  CHECK(xd_ws_close_payload(b, 0, "ignored") == 0);
  CHECK(xd_ws_close_payload(b, 1005, "ignored") == 0);
  char reason[201];
  memset(reason, 'a', 200);
  reason[200] = 0;
  CHECK(xd_ws_close_payload(b, 1000, reason) == 125 && b[124] == 'a');
  memset(reason, 'a', 123);
  reason[123] = 0;
  CHECK(xd_ws_close_payload(b, 1000, reason) == 125);
  /* 122 'a' then U+00E9 (2 bytes): 124 bytes, cut before the character rather than inside it */
  memset(reason, 'a', 122);
  memcpy(reason + 122, "\xc3\xa9", 3);
  CHECK(xd_ws_close_payload(b, 1000, reason) == 124 && b[123] == 'a');
  /* 121 'a' then U+20AC (3 bytes): cut after 121 */
  memset(reason, 'a', 121);
  memcpy(reason + 121, "\xe2\x82\xac", 4);
  CHECK(xd_ws_close_payload(b, 1000, reason) == 123);
  /* 120 'a' then U+20AC: it ends at 123, whole */
  memset(reason, 'a', 120);
  memcpy(reason + 120, "\xe2\x82\xac" "b", 5);
  CHECK(xd_ws_close_payload(b, 1000, reason) == 125 && b[124] == 0xac);
}

/* ---- the parser ---- */

static void test_single_frames(void) {
  osb_buf s = {0};
  frame(&s, 0x81, "hello");
  frame(&s, 0x81, "");
  frame(&s, 0x82, "");
  unsigned char bytes[256];
  for (int i = 0; i < 256; i++) bytes[i] = (unsigned char)i;
  frame_ex(&s, 0x82, bytes, 4, 0, MASK);
  frame_ex(&s, 0x82, bytes, 256, 0, MASK); /* 16-bit length */
  frame_ex(&s, 0x81, "h\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10, 0, MASK);
  static const unsigned char zero[4] = {0, 0, 0, 0};
  frame_ex(&s, 0x81, "zero mask", 9, 0, zero);
  frame_ex(&s, 0x81, "short in 16 bits", 16, 126, MASK); /* non-minimal lengths: ws takes them */
  frame_ex(&s, 0x81, "short in 64 bits", 16, 127, MASK);
  xd_ws_parser p;
  rec r;
  CHECK(feed_all(&r, &p, s.data, s.len) == 0);
  CHECK(p.consumed == s.len);
  CHECK_STR(logtext(&r), "M t hello\nM t \nM b \nM b \\x00\\x01\\x02\\x03\nM b <256 bytes>\n"
                         "M t h\\xc3\\xa9\\xe2\\x82\\xac\\xf0\\x9f\\x98\\x80\nM t zero mask\nM t short in 16 bits\n"
                         "M t short in 64 bits\n");
  CHECK(r.last_len == 16);
  rec_free(&r);
  xd_ws_parser_free(&p);
  osb_buf_reset(&s);

  /* 70,000 bytes: the 64-bit length; every byte unmasked where it belongs */
  size_t n = 70000;
  unsigned char *big = malloc(n);
  for (size_t i = 0; i < n; i++) big[i] = (unsigned char)(i * 7 + 3);
  frame_ex(&s, 0x82, big, n, 0, MASK);
  CHECK((unsigned char)s.data[1] == (0x80 | 127));
  CHECK(feed_all(&r, &p, s.data, s.len) == 0);
  CHECK_STR(logtext(&r), "M b <70000 bytes>\n");
  CHECK(r.copy && r.last_len == n && memcmp(r.copy, big, n) == 0);
  rec_free(&r);
  xd_ws_parser_free(&p);
  free(big);
  osb_buf_free(&s);
}

/* A stream of every kind of frame: a text message in three fragments with a ping and a pong between them, a binary
 * one in two (the first empty), a UTF-8 character split across fragments, pings with and without data, a 300-byte
 * binary message (16-bit length) and the close frame, then bytes after it that must be ignored. */
static void mixed_stream(osb_buf *s) {
  frame(s, 0x01, "Hel");
  frame(s, 0x89, "p1");
  frame(s, 0x00, "lo, ");
  frame(s, 0x8a, "");
  frame(s, 0x80, "world");
  frame(s, 0x02, "");
  frame(s, 0x80, "\x01\x02");
  frame(s, 0x01, "\xe2");
  frame(s, 0x00, "\x82");
  frame(s, 0x89, "");
  frame(s, 0x80, "\xac!");
  unsigned char b[300];
  for (int i = 0; i < 300; i++) b[i] = (unsigned char)(255 - i);
  frame_ex(s, 0x82, b, sizeof b, 0, MASK);
  frame(s, 0x88, "\x03\xe8" "done");
  frame(s, 0x81, "after close");
}

static const char MIXED_LOG[] = "P p1\nO \nM t Hello, world\nM b \\x01\\x02\nP \n"
                                "M t \\xe2\\x82\\xac!\nM b <300 bytes>\nC 1000 done\n";

static void test_fragments_with_ping(void) {
  osb_buf s = {0};
  mixed_stream(&s);
  xd_ws_parser p;
  rec r;
  CHECK(feed_all(&r, &p, s.data, s.len) == 0);
  CHECK_STR(logtext(&r), MIXED_LOG);
  CHECK(r.last_len == 300 && r.copy[0] == 255 && r.copy[299] == (unsigned char)(255 - 299));
  /* the bytes after the close frame are not parsed, and a later feed is ignored */
  const char *after = strstr(logtext(&r), "C 1000");
  CHECK(after != NULL);
  CHECK(p.consumed == s.len - (2 + 4 + strlen("after close")));
  osb_buf extra = {0};
  frame(&extra, 0x81, "more");
  CHECK(xd_ws_parse(&p, (const unsigned char *)extra.data, extra.len, &cbs, &r) == 0);
  CHECK_STR(logtext(&r), MIXED_LOG);
  rec_free(&r);
  xd_ws_parser_free(&p);
  osb_buf_free(&extra);
  osb_buf_free(&s);
}

/* Feeds s in pieces whose lengths next_len gives; every piece must be consumed whole. Returns the log (malloc'd). */
static char *feed_split(const osb_buf *s, size_t (*next_len)(size_t left, unsigned *seed), unsigned seed) {
  xd_ws_parser p;
  rec r;
  memset(&p, 0, sizeof p);
  memset(&r, 0, sizeof r);
  r.p = &p;
  size_t at = 0, close_end = s->len - (2 + 4 + strlen("after close"));
  int ok = 1;
  while (at < s->len) {
    size_t n = next_len(s->len - at, &seed);
    if (xd_ws_parse(&p, (const unsigned char *)s->data + at, n, &cbs, &r) != 0) ok = 0;
    /* everything up to the close frame's end is parsed, nothing after it */
    size_t want = at + n <= close_end ? n : at < close_end ? close_end - at : 0;
    if (p.consumed != want) ok = 0;
    at += n;
  }
  char *log = strdup(ok ? logtext(&r) : "(a piece was not consumed whole, or an error)");
  rec_free(&r);
  xd_ws_parser_free(&p);
  return log;
}

static size_t one_byte(size_t left, unsigned *seed) {
  (void)left, (void)seed;
  return 1;
}
static size_t random_len(size_t left, unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  size_t n = (*seed >> 16) % 24; /* 0 to 23: empty feeds too */
  return n < left ? n : left;
}

static void test_byte_boundaries(void) {
  osb_buf s = {0};
  mixed_stream(&s);
  char *log = feed_split(&s, one_byte, 0);
  CHECK_STR(log, MIXED_LOG);
  free(log);
  for (unsigned seed = 1; seed <= 300; seed++) {
    log = feed_split(&s, random_len, seed);
    if (strcmp(log, MIXED_LOG) != 0) printf("  seed %u: %s\n", seed, log);
    CHECK_STR(log, MIXED_LOG);
    free(log);
  }
  osb_buf_free(&s);
}

/* Feeds s whole; the result must be code and the log before it want_log; after an error or a close frame a later
 * frame is ignored. */
static void expect_error(const osb_buf *s, int code, const char *want_log, int line) {
  xd_ws_parser p;
  rec r;
  int rc = feed_all(&r, &p, s->data, s->len);
  if (rc != code || strcmp(logtext(&r), want_log) != 0) {
    printf("  FAIL line %d: rc %d (want %d), log \"%s\" (want \"%s\")\n", line, rc, code, logtext(&r), want_log);
    t_cur_failed = 1;
  }
  osb_buf more = {0};
  frame(&more, 0x81, "later");
  int ended = code != 0 || strncmp(want_log, "C ", 2) == 0;
  if (ended && (xd_ws_parse(&p, (const unsigned char *)more.data, more.len, &cbs, &r) != 0 ||
                strcmp(logtext(&r), want_log) != 0)) {
    printf("  FAIL line %d: input after the error was parsed\n", line);
    t_cur_failed = 1;
  }
  osb_buf_free(&more);
  rec_free(&r);
  xd_ws_parser_free(&p);
}

#define EXPECT(code, log, ...)          \
  do {                                  \
    osb_buf s_ = {0};                   \
    __VA_ARGS__;                        \
    expect_error(&s_, code, log, __LINE__); \
    osb_buf_free(&s_);                  \
  } while (0)

static void test_protocol_errors(void) {
  /* 1002 */
  EXPECT(1002, "", frame_ex(&s_, 0x81, "hi", 2, 0, NULL));             /* unmasked */
  EXPECT(1002, "", frame(&s_, 0xc1, "hi"));                            /* RSV1 (no permessage-deflate) */
  EXPECT(1002, "", frame(&s_, 0xa1, "hi"));                            /* RSV2 */
  EXPECT(1002, "", frame(&s_, 0x91, "hi"));                            /* RSV3 */
  EXPECT(1002, "", frame(&s_, 0xc9, ""));                              /* RSV1 on a ping */
  EXPECT(1002, "", frame(&s_, 0x83, "x"));                             /* reserved data opcodes */
  EXPECT(1002, "", frame(&s_, 0x87, "x"));
  EXPECT(1002, "", frame(&s_, 0x8b, "x"));                             /* reserved control opcodes */
  EXPECT(1002, "", frame(&s_, 0x8f, "x"));
  EXPECT(1002, "", frame(&s_, 0x09, "p"));                             /* fragmented ping */
  EXPECT(1002, "", frame(&s_, 0x08, ""));                              /* fragmented close */
  {
    char p126[126];
    memset(p126, 'p', sizeof p126);
    EXPECT(1002, "", frame_ex(&s_, 0x89, p126, 126, 0, MASK));         /* control frame over 125 bytes */
    EXPECT(1002, "", frame_ex(&s_, 0x8a, p126, 5, 126, MASK));         /* its 16-bit form, even for 5 bytes */
    EXPECT(0, "P <125 bytes>\n", frame_ex(&s_, 0x89, p126, 125, 0, MASK));
  }
  EXPECT(1002, "", frame(&s_, 0x88, "\x03"));                          /* close body of 1 byte */
  EXPECT(1002, "", frame(&s_, 0x80, "lo"));                            /* continuation without a start */
  EXPECT(1002, "", frame(&s_, 0x00, "lo"));
  EXPECT(1002, "M t ab\n", frame(&s_, 0x81, "ab"); frame(&s_, 0x80, "c")); /* ... after a whole message */
  EXPECT(1002, "", frame(&s_, 0x01, "ab"); frame(&s_, 0x81, "c"));     /* a new message inside a fragmented one */
  EXPECT(1002, "P x\n", frame(&s_, 0x02, "ab"); frame(&s_, 0x89, "x"); frame(&s_, 0x02, "c"));
  EXPECT(1002, "", frame(&s_, 0x01, "ab"); frame(&s_, 0x82, "c"));
  /* close codes: ws's isValidStatusCode */
  static const char *bad_codes[] = {"\x00\x00", "\x03\xe7", "\x03\xec", "\x03\xed", "\x03\xee", "\x03\xf7",
                                    "\x0b\xb7", "\x13\x88", "\xff\xff"}; /* 0 999 1004 1005 1006 1015 2999 5000 65535 */
  for (size_t i = 0; i < sizeof bad_codes / sizeof *bad_codes; i++)
    EXPECT(1002, "", frame_ex(&s_, 0x88, bad_codes[i], 2, 0, MASK));
  EXPECT(0, "C 1000 \n", frame_ex(&s_, 0x88, "\x03\xe8", 2, 0, MASK));
  EXPECT(0, "C 1003 \n", frame_ex(&s_, 0x88, "\x03\xeb", 2, 0, MASK));
  EXPECT(0, "C 1007 \n", frame_ex(&s_, 0x88, "\x03\xef", 2, 0, MASK));
  EXPECT(0, "C 1014 \n", frame_ex(&s_, 0x88, "\x03\xf6", 2, 0, MASK));
  EXPECT(0, "C 3000 x\n", frame_ex(&s_, 0x88, "\x0b\xb8x", 3, 0, MASK));
  EXPECT(0, "C 4999 \n", frame_ex(&s_, 0x88, "\x13\x87", 2, 0, MASK));
  /* 1007: a text message or close reason that is not UTF-8 */
  static const char *bad_utf8[] = {"\xff", "\xc0\x80", "\xc1\xbf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xed\xbf\xbf",
                                   "\xf0\x80\x80\xaf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xe2\x82", "\x80",
                                   "ok\xc3", "\xc3(", "abcdefghijklmnopqrstuvwxyz\xfe"};
  for (size_t i = 0; i < sizeof bad_utf8 / sizeof *bad_utf8; i++) {
    EXPECT(1007, "", frame(&s_, 0x81, bad_utf8[i]));
    EXPECT(1007, "", frame(&s_, 0x01, "a"); frame(&s_, 0x80, bad_utf8[i]));
    char body[40] = "\x03\xe8";
    strcpy(body + 2, bad_utf8[i]);
    EXPECT(1007, "", frame_ex(&s_, 0x88, body, 2 + strlen(bad_utf8[i]), 0, MASK));
  }
  /* binary messages are never checked */
  EXPECT(0, "M b \\xff\\xc0\\x80\n", frame(&s_, 0x82, "\xff\xc0\x80"));
  /* the largest code points, and U+D7FF / U+E000 around the surrogates, are valid */
  EXPECT(0, "M t \\xf4\\x8f\\xbf\\xbf\\xed\\x9f\\xbf\\xee\\x80\\x80\\xef\\xbf\\xbf\n",
         frame(&s_, 0x81, "\xf4\x8f\xbf\xbf\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf"));
  /* UTF-8 is checked on the whole message, as ws does: a protocol error in a later fragment wins over bad text in
   * an earlier one */
  EXPECT(1002, "", frame(&s_, 0x01, "\xff"); frame(&s_, 0x81, "x"));
}

static void test_max_payload(void) {
  const size_t max = XD_WS_MAX_PAYLOAD;
  unsigned char *data = malloc(max);
  for (size_t i = 0; i < max; i++) data[i] = (unsigned char)(i % 251);
  osb_buf a = {0}; /* a binary message's first fragment: max - 1 bytes */
  frame_ex(&a, 0x02, data, max - 1, 0, MASK);

  /* exactly max across fragments, a ping between them (control frames do not count), then a small message */
  osb_buf s = {0};
  osb_buf_append(&s, a.data, a.len);
  frame(&s, 0x89, "x");
  frame_ex(&s, 0x00, data + max - 1, 1, 0, MASK);
  frame(&s, 0x80, "");
  frame(&s, 0x81, "ok");
  xd_ws_parser p;
  rec r;
  CHECK(feed_all(&r, &p, s.data, s.len) == 0);
  CHECK_STR(logtext(&r), "P x\nM b <16777216 bytes>\nM t ok\n");
  CHECK(r.copy && memcmp(r.copy, "ok", 2) == 0);
  rec_free(&r);
  xd_ws_parser_free(&p);
  s.len = a.len + 2 + 4 + 1; /* keep the first fragment and the ping */
  frame_ex(&s, 0x00, data + max - 1, 1, 0, MASK);
  CHECK(feed_all(&r, &p, s.data, s.len) == 0);
  CHECK_STR(logtext(&r), "P x\n");
  /* one byte more, announced in a continuation's header: 1009 before its mask or payload arrive */
  static const unsigned char cont1[2] = {0x80, 0x81};
  CHECK(xd_ws_parse(&p, cont1, 2, &cbs, &r) == 1009);
  CHECK(p.consumed == 2);
  CHECK(p.msg.cap == 0); /* the message is released at the error */
  CHECK_STR(logtext(&r), "P x\n");
  rec_free(&r);
  xd_ws_parser_free(&p);

  /* the buffer grows with the bytes that arrived, not with the length announced */
  CHECK(feed_all(&r, &p, a.data, 14 + 10) == 0);
  CHECK(p.consumed == 24 && p.msg.len == 10 && p.msg.cap <= 1025);
  rec_free(&r);
  xd_ws_parser_free(&p);

  /* one frame of max + 1, of 2^53 - 1 (ws's largest), 2^53 and 2^63 bytes: 1009 from the 10 header bytes alone */
  static const uint64_t lens[] = {XD_WS_MAX_PAYLOAD + 1ull, (1ull << 53) - 1, 1ull << 53, 1ull << 63, UINT64_MAX};
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
    unsigned char h[10] = {0x82, 0x80 | 127};
    for (int k = 0; k < 8; k++) h[2 + k] = (unsigned char)(lens[i] >> (56 - 8 * k));
    CHECK(feed_all(&r, &p, h, sizeof h) == 1009);
    CHECK(p.consumed == 10 && p.msg.cap == 0);
    CHECK_STR(logtext(&r), "");
    rec_free(&r);
    xd_ws_parser_free(&p);
  }
  /* a continuation announcing 2^64 - 5 bytes after 10: the sum must not wrap around to 5 */
  {
    osb_buf w = {0};
    frame(&w, 0x02, "0123456789");
    static const unsigned char h[10] = {0x80, 0x80 | 127, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfb};
    osb_buf_append(&w, h, sizeof h);
    CHECK(feed_all(&r, &p, w.data, w.len) == 1009);
    CHECK(p.consumed == w.len);
    rec_free(&r);
    xd_ws_parser_free(&p);
    osb_buf_free(&w);
  }
  /* a text message is limited alike */
  {
    unsigned char h[10] = {0x81, 0x80 | 127, 0, 0, 0, 0, 0x01, 0, 0, 0x01};
    CHECK(feed_all(&r, &p, h, sizeof h) == 1009);
    rec_free(&r);
    xd_ws_parser_free(&p);
  }
  osb_buf_free(&s);
  osb_buf_free(&a);
  free(data);
}

static void test_close(void) {
  osb_buf s = {0};
  xd_ws_parser p;
  rec r;
  /* no body: 1005 */
  frame(&s, 0x88, "");
  size_t close_len = s.len;
  frame(&s, 0x81, "ignored");
  CHECK(feed_all(&r, &p, s.data, s.len) == 0);
  CHECK_STR(logtext(&r), "C 1005 \n");
  CHECK(p.consumed == close_len);
  CHECK(xd_ws_parse(&p, (const unsigned char *)s.data, s.len, &cbs, &r) == 0);
  CHECK(p.consumed == 0);
  CHECK_STR(logtext(&r), "C 1005 \n");
  rec_free(&r);
  xd_ws_parser_free(&p);
  /* code and reason, while a fragmented message is open: the message is dropped */
  osb_buf_reset(&s);
  frame(&s, 0x01, "partial");
  frame(&s, 0x88, "\x0f\xa1TAKEN_OVER \xc3\xa9");
  CHECK(feed_all(&r, &p, s.data, s.len) == 0);
  CHECK_STR(logtext(&r), "C 4001 TAKEN_OVER \\xc3\\xa9\n");
  CHECK(p.msg.cap == 0);
  rec_free(&r);
  xd_ws_parser_free(&p);
  /* a reason of 123 bytes (the largest) */
  char body[126] = "\x03\xe8";
  memset(body + 2, 'r', 123);
  osb_buf_reset(&s);
  frame_ex(&s, 0x88, body, 125, 0, MASK);
  CHECK(feed_all(&r, &p, s.data, s.len) == 0);
  CHECK(strncmp(logtext(&r), "C 1000 <123 bytes>\n", 30) == 0);
  rec_free(&r);
  xd_ws_parser_free(&p);
  /* what xd_ws_close_payload writes, the parser reads back */
  unsigned char out[125];
  size_t n = xd_ws_close_payload(out, 1011, "server error");
  osb_buf_reset(&s);
  frame_ex(&s, 0x88, out, n, 0, MASK);
  CHECK(feed_all(&r, &p, s.data, s.len) == 0);
  CHECK_STR(logtext(&r), "C 1011 server error\n");
  rec_free(&r);
  xd_ws_parser_free(&p);
  osb_buf_free(&s);
}

static void test_stop(void) {
  osb_buf s = {0};
  frame(&s, 0x81, "one");
  size_t first = s.len;
  frame(&s, 0x89, "two");
  frame(&s, 0x01, "thr");
  frame(&s, 0x80, "ee");
  xd_ws_parser p;
  rec r;
  memset(&p, 0, sizeof p);
  memset(&r, 0, sizeof r);
  r.p = &p;
  r.stop_after = 1;
  CHECK(xd_ws_parse(&p, (const unsigned char *)s.data, s.len, &cbs, &r) == 0);
  CHECK(p.consumed == first);
  CHECK_STR(logtext(&r), "M t one\n");
  /* while stop is set nothing is consumed */
  CHECK(xd_ws_parse(&p, (const unsigned char *)s.data + first, s.len - first, &cbs, &r) == 0);
  CHECK(p.consumed == 0);
  CHECK_STR(logtext(&r), "M t one\n");
  /* cleared: the rest goes on where it stopped */
  p.stop = 0;
  CHECK(xd_ws_parse(&p, (const unsigned char *)s.data + first, s.len - first, &cbs, &r) == 0);
  CHECK(p.consumed == s.len - first);
  CHECK_STR(logtext(&r), "M t one\nP two\nM t three\n");
  rec_free(&r);
  xd_ws_parser_free(&p);
  /* a stop in the middle of a piece fed a byte at a time: the piece holding the frame's last byte is consumed */
  memset(&p, 0, sizeof p);
  memset(&r, 0, sizeof r);
  r.p = &p;
  r.stop_after = 2;
  size_t at = 0;
  while (at < s.len && !p.stop) {
    CHECK(xd_ws_parse(&p, (const unsigned char *)s.data + at, 1, &cbs, &r) == 0);
    CHECK(p.consumed == 1);
    at++;
  }
  CHECK(at == first + 2 + 4 + 3);
  CHECK_STR(logtext(&r), "M t one\nP two\n");
  rec_free(&r);
  xd_ws_parser_free(&p);
  osb_buf_free(&s);
}

/* NULL callbacks are skipped, NULL callback table too. */
static void test_no_callbacks(void) {
  osb_buf s = {0};
  mixed_stream(&s);
  xd_ws_parser p;
  memset(&p, 0, sizeof p);
  xd_ws_callbacks only_close = {0};
  only_close.on_close = on_close;
  rec r;
  memset(&r, 0, sizeof r);
  r.p = &p;
  CHECK(xd_ws_parse(&p, (const unsigned char *)s.data, s.len, &only_close, &r) == 0);
  CHECK_STR(logtext(&r), "C 1000 done\n");
  rec_free(&r);
  xd_ws_parser_free(&p);
  CHECK(xd_ws_parse(&p, (const unsigned char *)s.data, s.len, NULL, NULL) == 0);
  CHECK(p.consumed == s.len - (2 + 4 + strlen("after close")));
  xd_ws_parser_free(&p);
  osb_buf_free(&s);
}

/* ---- ws's own behaviour, recorded ---- */

/* The events of one stream in ws-receiver/record.js's format ("M t <hex>;P <hex>;...;E 1002"). */
typedef struct {
  osb_buf out;
} hexlog;

static void hl_sep(hexlog *h) {
  if (h->out.len) osb_buf_append(&h->out, ";", 1);
}
static void hl_hex(hexlog *h, const unsigned char *d, size_t n) {
  for (size_t i = 0; i < n; i++) osb_buf_appendf(&h->out, "%02x", d[i]);
}
static void hl_message(void *ud, int binary, const unsigned char *d, size_t n) {
  hl_sep(ud);
  osb_buf_append_str(&((hexlog *)ud)->out, binary ? "M b " : "M t ");
  hl_hex(ud, d, n);
}
static void hl_ping(void *ud, const unsigned char *d, size_t n) {
  hl_sep(ud);
  osb_buf_append_str(&((hexlog *)ud)->out, "P ");
  hl_hex(ud, d, n);
}
static void hl_pong(void *ud, const unsigned char *d, size_t n) {
  hl_sep(ud);
  osb_buf_append_str(&((hexlog *)ud)->out, "O ");
  hl_hex(ud, d, n);
}
static void hl_close(void *ud, unsigned code, const unsigned char *d, size_t n) {
  hl_sep(ud);
  osb_buf_appendf(&((hexlog *)ud)->out, "C %u ", code);
  hl_hex(ud, d, n);
}
static const xd_ws_callbacks hl_cbs = {hl_message, hl_ping, hl_pong, hl_close, NULL};

/* Parses the stream in pieces of 1 to max_piece bytes (0: whole); the events, malloc'd. */
static char *hl_parse(const unsigned char *s, size_t n, size_t max_piece, unsigned seed) {
  hexlog h = {{0}};
  xd_ws_parser p;
  memset(&p, 0, sizeof p);
  int failed = 0;
  for (size_t at = 0; at < n;) {
    size_t k = n - at;
    if (max_piece) {
      seed = seed * 1103515245u + 12345u;
      size_t want = 1 + (seed >> 16) % max_piece;
      if (want < k) k = want;
    }
    int rc = xd_ws_parse(&p, s + at, k, &hl_cbs, &h);
    if (rc != 0 && !failed) {
      hl_sep(&h);
      osb_buf_appendf(&h.out, "E %d", rc);
      failed = 1;
    }
    at += k;
  }
  xd_ws_parser_free(&p);
  char *text = strdup(h.out.data ? h.out.data : "");
  osb_buf_free(&h.out);
  return text;
}

/* test/fixtures/ws-receiver/cases.txt: what ws v8's receiver did with 250 streams of valid and broken client frames
 * (record.js there); the parser, fed whole, in pieces of up to 40 bytes and a byte at a time, does the same. */
static void test_ws_recorded(void) {
  FILE *f = fopen("../fixtures/ws-receiver/cases.txt", "r");
  CHECK(f != NULL);
  if (!f) return;
  size_t cap = 1 << 16, cases = 0;
  char *line = malloc(cap);
  unsigned char *bytes = malloc(cap);
  while (fgets(line, (int)cap, f)) {
    size_t ll = strlen(line);
    CHECK(ll > 0 && line[ll - 1] == '\n'); /* no line longer than the buffer */
    line[--ll] = '\0';
    char *tab = strchr(line, '\t');
    CHECK(tab != NULL);
    if (!tab) break;
    *tab = '\0';
    const char *want = tab + 1;
    size_t n = strlen(line) / 2;
    for (size_t i = 0; i < n; i++) {
      unsigned v;
      sscanf(line + 2 * i, "%2x", &v);
      bytes[i] = (unsigned char)v;
    }
    size_t pieces[3] = {0, 40, 1};
    for (int k = 0; k < 3; k++) {
      char *got = hl_parse(bytes, n, pieces[k], (unsigned)cases);
      if (strcmp(got, want) != 0) {
        printf("  FAIL case %zu (pieces of %zu): got \"%s\", ws \"%s\"\n", cases + 1, pieces[k], got, want);
        t_cur_failed = 1;
      }
      free(got);
    }
    cases++;
  }
  CHECK(cases == 250);
  free(line);
  free(bytes);
  fclose(f);
}

/* ---- big messages: the owner's buffer (on_buffer) and the message taken (xd_ws_take_message) ---- */

typedef struct {
  xd_ws_parser *p;
  osb_buf given;   /* the buffer on_buffer hands out (moved to the parser) */
  osb_buf taken;   /* the last message taken */
  char *given_at;  /* its data pointer, to see the parser filled it without a copy */
  uint64_t announced;
  int asked, messages;
} owner;

static void ow_message(void *ud, int binary, const unsigned char *data, size_t len) {
  owner *o = ud;
  o->messages++;
  CHECK(binary);
  osb_buf_free(&o->taken);
  if (len > 1000) xd_ws_take_message(o->p, &o->taken);
  if (len > 1000) CHECK(o->taken.data == (const char *)data && o->taken.len == len);
}
static void ow_buffer(void *ud, osb_buf *msg, uint64_t announced) {
  owner *o = ud;
  o->asked++;
  o->announced = announced;
  *msg = o->given;
  memset(&o->given, 0, sizeof o->given);
}
static const xd_ws_callbacks ow_cbs = {ow_message, NULL, NULL, NULL, ow_buffer};

static void test_owner_buffers(void) {
  size_t n = 300 * 1024;
  unsigned char *big = malloc(n);
  for (size_t i = 0; i < n; i++) big[i] = (unsigned char)(i * 7 + (i >> 9));
  osb_buf in = {0};
  frame_ex(&in, 0x02, big, n / 2, 0, MASK);          /* a fragmented binary message: 150 KiB ... */
  frame_ex(&in, 0x80, big + n / 2, n - n / 2, 0, MASK); /* ... and the rest */
  frame_ex(&in, 0x82, big, 10, 0, MASK);            /* a small one: no buffer asked for */
  xd_ws_parser p;
  memset(&p, 0, sizeof p);
  owner o;
  memset(&o, 0, sizeof o);
  o.p = &p;
  osb_buf_reserve_exact(&o.given, 512 * 1024);
  o.given_at = o.given.data;
  for (size_t at = 0; at < in.len;) { /* fed in 1000-byte pieces */
    size_t k = in.len - at < 1000 ? in.len - at : 1000;
    CHECK((xd_ws_parse(&p, (const unsigned char *)in.data + at, k, &ow_cbs, &o)) == (0));
    at += k;
    if (o.messages == 1 && o.taken.data) { /* the first message: in the owner's buffer, taken without a copy */
      CHECK(o.taken.data == o.given_at);
      CHECK(o.taken.len == n);
      CHECK(memcmp(o.taken.data, big, n) == 0);
      CHECK((o.asked) == (1));
      CHECK(o.announced == n / 2); /* what the first frame announced */
      osb_buf_free(&o.taken);
    }
  }
  CHECK((o.messages) == (2));
  CHECK((o.asked) == (1));
  CHECK(o.taken.data == NULL); /* the small one stayed the parser's */
  /* a big message with nothing to give: the parser grows its own buffer, the take leaves it empty */
  osb_buf in2 = {0};
  frame_ex(&in2, 0x82, big, n, 0, MASK);
  CHECK((xd_ws_parse(&p, (const unsigned char *)in2.data, in2.len, &ow_cbs, &o)) == (0));
  CHECK((o.asked) == (2));
  CHECK(o.taken.len == n);
  CHECK(memcmp(o.taken.data, big, n) == 0);
  CHECK(p.msg.cap == 0);
  osb_buf_free(&o.taken);
  osb_buf_free(&o.given);
  osb_buf_free(&in);
  osb_buf_free(&in2);
  xd_ws_parser_free(&p);
  free(big);
}

int main(void) {
  RUN(test_accept);
  RUN(test_key_valid);
  RUN(test_frame_header);
  RUN(test_close_payload);
  RUN(test_single_frames);
  RUN(test_fragments_with_ping);
  RUN(test_byte_boundaries);
  RUN(test_protocol_errors);
  RUN(test_max_payload);
  RUN(test_close);
  RUN(test_stop);
  RUN(test_no_callbacks);
  RUN(test_ws_recorded);
  RUN(test_owner_buffers);
  return t_summary();
}
