/* UTF-8 checks (utf8.h). */
#include "utf8.h"

#include <stdint.h>
#include <string.h>

size_t xd_utf8_seq(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) len = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (n < len) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
  }
  return len;
}

int xd_utf8_valid(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (n - i >= 8) { /* eight ASCII bytes at a time */
      uint64_t w;
      memcpy(&w, s + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    size_t l = xd_utf8_seq(s + i, n - i);
    if (l == 0) return 0;
    i += l;
  }
  return 1;
}

size_t xd_utf8_cut(const unsigned char *b, size_t n) {
  size_t cut = n;
  while (cut + 3 > n && cut > 0 && (b[cut] & 0xc0) == 0x80) cut--;
  if (cut == 0 || (b[cut] & 0xc0) == 0x80) return n;
  return cut;
}
