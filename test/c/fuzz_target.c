/* libFuzzer target of the C execd's request-target parser (src/execd/server.c xd_parse_target, the rules of
 * lib/dev-server/execd/http.js parseTarget). Every input is parsed; a refusal must name its reason, and a target
 * with a byte outside visible ASCII must be refused. An accepted one must come out canonical: the path starts with
 * '/', holds only unreserved characters, sub-delims, ':', '@', '/' and %XX escapes in capitals (never %2F or %5C),
 * no empty segment but a trailing one, no "." or ".." segment; the query only visible ASCII and no '#'. Parsing
 * that canonical form again must accept it and give the same path and query (one parse, the same object). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "execd/server.h"

static int keep(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c && strchr("-._~!$&'()*+,;=:@", c));
}
static int upper_hex(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); }

static void check_path(const char *p) {
  if (p[0] != '/') abort();
  size_t seg_start = 1;
  for (size_t i = 1;; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '/' || c == '\0') {
      size_t len = i - seg_start;
      if (len == 0 && c == '/') abort(); /* "//" */
      if ((len == 1 && p[seg_start] == '.') || (len == 2 && p[seg_start] == '.' && p[seg_start + 1] == '.')) abort();
      if (c == '\0') break;
      seg_start = i + 1;
      continue;
    }
    if (c == '%') {
      if (!upper_hex((unsigned char)p[i + 1]) || !upper_hex((unsigned char)p[i + 2])) abort();
      if ((p[i + 1] == '2' && p[i + 2] == 'F') || (p[i + 1] == '5' && p[i + 2] == 'C')) abort();
      /* an escaped byte is one the canonical form must escape */
      unsigned v = (unsigned)strtoul((char[]){p[i + 1], p[i + 2], 0}, NULL, 16);
      if (keep((unsigned char)v)) abort();
      i += 2;
      continue;
    }
    if (!keep(c)) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  xd_target t;
  memset(&t, 0, sizeof t);
  int visible = 1;
  for (size_t i = 0; i < size; i++)
    if (data[i] < 0x21 || data[i] > 0x7e) visible = 0;
  if (xd_parse_target((const char *)data, size, &t) != 0) {
    if (!t.error) abort(); /* only out of memory has no reason, and the fuzzer's inputs are small */
    if (t.path || t.query) abort();
    return 0;
  }
  if (!visible || !t.path || !t.query || t.error) abort();
  check_path(t.path);
  for (const char *q = t.query; *q; q++)
    if (*q == '#' || (unsigned char)*q < 0x21 || (unsigned char)*q > 0x7e) abort();
  /* canonical in, the same out */
  size_t pl = strlen(t.path), ql = strlen(t.query);
  char *again = malloc(pl + ql + 2);
  if (!again) abort();
  memcpy(again, t.path, pl);
  size_t n = pl;
  if (ql) {
    again[n++] = '?';
    memcpy(again + n, t.query, ql);
    n += ql;
  }
  xd_target u;
  memset(&u, 0, sizeof u);
  if (xd_parse_target(again, n, &u) != 0) abort();
  if (strcmp(u.path, t.path) != 0 || strcmp(u.query, t.query) != 0) abort();
  free(u.path);
  free(u.query);
  free(again);
  free(t.path);
  free(t.query);
  return 0;
}
