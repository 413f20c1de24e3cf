/* multipart/form-data of POST /files/upload, read strictly (multipart.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include "multipart.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_BOUNDARY 70      /* RFC 2046 */
#define MAX_PART_HEAD 8192   /* busboy allows 16 KiB; a longer head is handed off */

static int is_tchar(unsigned char c) { /* RFC 9110 token */
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int is_ows(unsigned char c) { return c == ' ' || c == '\t'; }

/* One parameter of a header value at *s (after its ';'): name and value spans. Quoted values without backslashes,
 * token values. 1 = read (s moved past it), 0 = not read exactly (hand off). */
static int next_param(const char **s, const char *end, const char **name, size_t *nlen, const char **val, size_t *vlen) {
  const char *p = *s;
  while (p < end && is_ows((unsigned char)*p)) p++;
  *name = p;
  while (p < end && is_tchar((unsigned char)*p)) p++;
  *nlen = (size_t)(p - *name);
  if (*nlen == 0 || p >= end || *p != '=') return 0;
  p++;
  if (p < end && *p == '"') {
    *val = ++p;
    while (p < end && *p != '"') {
      if (*p == '\\' || (unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) return 0;
      p++;
    }
    if (p >= end) return 0;
    *vlen = (size_t)(p - *val);
    p++;
  } else {
    *val = p;
    while (p < end && is_tchar((unsigned char)*p)) p++;
    *vlen = (size_t)(p - *val);
    if (*vlen == 0) return 0;
  }
  while (p < end && is_ows((unsigned char)*p)) p++;
  if (p < end && *p != ';') return 0;
  if (p < end) p++;
  *s = p;
  return 1;
}

static int name_is(const char *s, size_t n, const char *want) { return strlen(want) == n && strncasecmp(s, want, n) == 0; }

/* the boundary of a Content-Type "multipart/form-data; boundary=..." (1: found, 0: hand off) */
static int boundary_of(const char *ct, const char **b, size_t *blen) {
  const char *end = ct + strlen(ct), *p = ct + 19; /* after "multipart/form-data" */
  while (p < end && is_ows((unsigned char)*p)) p++;
  if (p >= end || *p != ';') return 0;
  p++;
  int found = 0;
  while (p < end) {
    const char *n, *v;
    size_t nl, vl;
    if (!next_param(&p, end, &n, &nl, &v, &vl)) return 0;
    if (!name_is(n, nl, "boundary")) continue;
    if (found++) return 0;
    *b = v;
    *blen = vl;
  }
  if (!found || *blen > MAX_BOUNDARY) return 0;
  for (size_t i = 0; i < *blen; i++) /* RFC 2046 bchars but the space */
    if (!((*b)[i] >= '0' && (*b)[i] <= '9') && !((*b)[i] >= 'a' && (*b)[i] <= 'z') && !((*b)[i] >= 'A' && (*b)[i] <= 'Z') &&
        !strchr("'()+_,-./:=?", (*b)[i]))
      return 0;
  return 1;
}

/* The head of one part (hs..he, its lines without the blank one): *kind 1 metadata, 0 file, -1 a part the Node execd
 * ignores (no name/filename it keeps). 1 = read, 0 = hand off. */
static int part_head(const char *hs, const char *he, int *kind) {
  int disp_seen = 0, ctype_seen = 0;
  *kind = -1;
  const char *line = hs;
  while (line < he) {
    const char *eol = memmem(line, (size_t)(he - line), "\r\n", 2);
    if (!eol) eol = he;
    const char *colon = memchr(line, ':', (size_t)(eol - line));
    if (!colon || colon == line) return 0;
    for (const char *q = line; q < colon; q++)
      if (!is_tchar((unsigned char)*q)) return 0; /* also a folded line (leading space) */
    for (const char *q = colon + 1; q < eol; q++)
      if (((unsigned char)*q < 0x20 && *q != '\t') || (unsigned char)*q > 0x7e) return 0;
    const char *v = colon + 1, *ve = eol;
    while (v < ve && is_ows((unsigned char)*v)) v++;
    while (ve > v && is_ows((unsigned char)ve[-1])) ve--;
    if (name_is(line, (size_t)(colon - line), "content-type")) {
      if (ctype_seen++) return 0;
    } else if (name_is(line, (size_t)(colon - line), "content-disposition")) {
      if (disp_seen++) return 0;
      if ((size_t)(ve - v) < 9 || strncasecmp(v, "form-data", 9) != 0) return 0;
      const char *p = v + 9;
      while (p < ve && is_ows((unsigned char)*p)) p++;
      const char *name = NULL, *file = NULL;
      size_t namel = 0, filel = 0;
      if (p < ve) {
        if (*p != ';') return 0;
        p++;
      }
      while (p < ve) {
        const char *n, *pv;
        size_t nl, pvl;
        if (!next_param(&p, ve, &n, &nl, &pv, &pvl)) return 0;
        if (name_is(n, nl, "name")) {
          if (name) return 0;
          name = pv, namel = pvl;
        } else if (name_is(n, nl, "filename")) {
          if (file) return 0;
          file = pv, filel = pvl;
        } else {
          return 0; /* filename* (RFC 2231) and the rest */
        }
      }
      /* busboy: an empty filename is none, so the part is a field, which the Node execd ignores */
      if (file && filel > 0 && name) {
        if (namel == 8 && memcmp(name, "metadata", 8) == 0) *kind = 1;
        else if (namel == 4 && memcmp(name, "file", 4) == 0) *kind = 0;
      }
    } else {
      return 0; /* Content-Transfer-Encoding and the rest */
    }
    line = eol + 2;
  }
  return disp_seen == 1;
}

int xd_multipart_parse(const char *content_type, const char *body, size_t len, xd_mp_part **parts, size_t *nparts) {
  *parts = NULL;
  *nparts = 0;
  if (strncasecmp(content_type, "multipart/form-data", 19) != 0) return XD_MP_NOT_MULTIPART;
  const char *b = NULL;
  size_t blen = 0;
  if (!boundary_of(content_type, &b, &blen)) return XD_MP_OTHER;
  char delim[4 + MAX_BOUNDARY];
  memcpy(delim, "\r\n--", 4);
  memcpy(delim + 4, b, blen);
  size_t dlen = 4 + blen;
  /* no preamble: the body starts with the first delimiter (its CRLF is implied) */
  if (len < dlen - 2 || memcmp(body, delim + 2, dlen - 2) != 0) return XD_MP_OTHER;
  size_t pos = dlen - 2, count = 0, cap = 0;
  xd_mp_part *out = NULL;
  for (;;) {
    if (pos + 2 > len) goto other;
    if (memcmp(body + pos, "--", 2) == 0) break; /* the last delimiter: what follows is ignored */
    if (memcmp(body + pos, "\r\n", 2) != 0) goto other;
    pos += 2;
    if (++count > XD_MP_MAX_PARTS) goto other;
    const char *hs = body + pos, *he;
    if (len - pos >= 2 && memcmp(hs, "\r\n", 2) == 0) goto other; /* no headers: busboy skips it */
    size_t look = len - pos < MAX_PART_HEAD ? len - pos : MAX_PART_HEAD;
    he = memmem(hs, look, "\r\n\r\n", 4);
    if (!he) goto other;
    int kind;
    if (!part_head(hs, he, &kind)) goto other;
    size_t ds = (size_t)(he + 4 - body);
    const char *de = memmem(body + ds, len - ds, delim, dlen);
    if (!de) goto other; /* cut short */
    size_t dl = (size_t)(de - body) - ds;
    if (kind == 1 && dl > XD_MP_METADATA_LIMIT) goto other;
    if (kind >= 0) {
      if (*nparts == cap) {
        size_t nc = cap ? cap * 2 : 4;
        xd_mp_part *np = realloc(out, nc * sizeof *np);
        if (!np) {
          free(out);
          return XD_MP_NOMEM;
        }
        out = np;
        cap = nc;
      }
      out[(*nparts)++] = (xd_mp_part){kind, body + ds, dl};
    }
    pos = (size_t)(de - body) + dlen;
  }
  *parts = out;
  return XD_MP_OK;
other:
  free(out);
  *nparts = 0;
  return XD_MP_OTHER;
}
