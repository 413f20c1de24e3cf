/* libFuzzer target of the C execd's glob patterns (src/execd/glob.c, GET /files/search). An input is a pattern up to
 * the first newline, then names separated by newlines. Invariants: compiling answers 0, 1 or -1 and nothing else; a
 * compiled pattern matches a name the same way twice (the scratch space is reset between matches); a pattern without
 * any of `*?[{\` and of ASCII only matches exactly the name equal to it (a byte that is not UTF-8 reads as U+FFFD, so
 * two such bytes match each other); `*` and `**` match every name without a '/'. A slow input
 * (backtracking) is a libFuzzer timeout. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "execd/glob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nl = memchr(data, '\n', size);
  size_t plen = nl ? (size_t)(nl - data) : size;
  const char *pat = (const char *)data;
  xd_glob *g = NULL;
  int rc = xd_glob_compile(pat, plen, &g);
  if (rc != 0 && rc != 1 && rc != -1) abort();
  if ((rc == 0) != (g != NULL)) abort();
  int plain = 1;
  for (size_t i = 0; i < plen; i++)
    if ((strchr("*?[{\\", pat[i]) && pat[i]) || (unsigned char)pat[i] >= 0x80) plain = 0;
  if (plain && rc == 1) abort();
  xd_glob *star = NULL;
  if (xd_glob_compile("*", 1, &star) < 0) star = NULL;
  size_t at = nl ? plen + 1 : size;
  while (at <= size && g) {
    const uint8_t *e = memchr(data + at, '\n', size - at);
    size_t nlen = e ? (size_t)(e - (data + at)) : size - at;
    const char *name = (const char *)data + at;
    int m = xd_glob_match(g, name, nlen);
    if (m != xd_glob_match(g, name, nlen)) abort();
    if (plain && m != (nlen == plen && memcmp(name, pat, plen) == 0)) abort();
    if (star && !memchr(name, '/', nlen) && !xd_glob_match(star, name, nlen)) abort();
    at += nlen + 1;
  }
  xd_glob_free(star);
  xd_glob_free(g);
  return 0;
}
