/* libFuzzer target of the C execd's multipart/form-data reader (src/execd/multipart.c). An input is a Content-Type
 * value up to the first newline, then the body. Invariants: the result is one of the four; XD_MP_NOT_MULTIPART
 * exactly when the type does not start with multipart/form-data (any case); on XD_MP_OK every part lies inside the
 * body, after the previous one, does not contain the delimiter ("\r\n--" + boundary, found here by a search of its
 * own), a metadata part is at most XD_MP_METADATA_LIMIT bytes and there are at most XD_MP_MAX_PARTS; on any other
 * result nothing is returned. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "execd/multipart.h"

static int contains(const char *h, size_t hl, const char *n, size_t nl) {
  for (size_t i = 0; nl <= hl && i <= hl - nl; i++)
    if (memcmp(h + i, n, nl) == 0) return 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nl = memchr(data, '\n', size);
  if (!nl) return 0;
  size_t ctl = (size_t)(nl - data);
  char *ct = malloc(ctl + 1);
  if (!ct) return 0;
  memcpy(ct, data, ctl);
  ct[ctl] = '\0';
  size_t blen = size - ctl - 1;
  char *body = malloc(blen ? blen : 1);
  if (!body) {
    free(ct);
    return 0;
  }
  memcpy(body, nl + 1, blen);
  xd_mp_part *parts = (xd_mp_part *)1;
  size_t n = 99;
  int rc = xd_multipart_parse(ct, body, blen, &parts, &n);
  if (rc != XD_MP_OK && rc != XD_MP_NOT_MULTIPART && rc != XD_MP_OTHER && rc != XD_MP_NOMEM) abort();
  int is_form = strncasecmp(ct, "multipart/form-data", 19) == 0;
  if ((rc == XD_MP_NOT_MULTIPART) != !is_form) abort();
  if (rc != XD_MP_OK && (parts != NULL || n != 0)) abort();
  if (rc == XD_MP_OK) {
    if (n > XD_MP_MAX_PARTS || (n > 0 && !parts)) abort();
    /* the boundary as the type gives it (the reader accepts only these shapes) */
    const char *b = strcasestr(ct, "boundary=");
    if (!b) abort();
    b += 9;
    size_t bl = 0;
    char delim[128] = "\r\n--";
    if (*b == '"') {
      b++;
      while (b[bl] && b[bl] != '"') bl++;
    } else {
      while (b[bl] && b[bl] != ';' && b[bl] != ' ' && b[bl] != '\t') bl++;
    }
    if (bl == 0 || bl > 70) abort();
    memcpy(delim + 4, b, bl);
    const char *prev = body;
    for (size_t i = 0; i < n; i++) {
      if (parts[i].data < prev || parts[i].data + parts[i].len > body + blen) abort();
      if (contains(parts[i].data, parts[i].len, delim, 4 + bl)) abort();
      if (parts[i].is_metadata && parts[i].len > XD_MP_METADATA_LIMIT) abort();
      prev = parts[i].data + parts[i].len;
    }
  }
  if (rc == XD_MP_OK) free(parts);
  free(body);
  free(ct);
  return 0;
}
