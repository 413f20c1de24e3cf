/* multipart/form-data of POST /files/upload, read as it arrives the way Go's mime/multipart reads it (multipart.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, memrchr */
#endif
#include "multipart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"

#define MAX_BOUNDARY 1000 /* a longer one is refused (Go's 4 KiB buffer could not hold its delimiter lines) */
#define MAX_PARAMS 64     /* disposition parameters looked at */

enum { S_PREAMBLE, S_HEADERS, S_BODY, S_BETWEEN, S_DONE, S_BAD };

struct xd_mp {
  const xd_mp_callbacks *cb;
  void *arg;
  osb_buf buf;      /* bytes not yet decided */
  char *dash;       /* "--" boundary */
  size_t dash_len;
  char *nldash;     /* nl "--" boundary: "\r\n--b", or "\n--b" once the first delimiter line ends in a bare LF */
  size_t nldash_len;
  int state;
  int expect_new;   /* between parts: the nl after a part's content was read, a delimiter line must come */
  size_t parts;
  size_t hscan;     /* header block: how far it was searched for its blank line */
  int kind;         /* the current part: 1 metadata, 0 file, -1 a plain field, -2 ignored */
  unsigned long long total; /* bytes of the current part's content so far */
  unsigned long long values; /* bytes of plain fields */
  int qp;           /* the current part is Content-Transfer-Encoding: quoted-printable (decoded, as Go's NextPart) */
  osb_buf qline;    /* its line being read */
};

/* ---------------------------------------------------------------- mime.ParseMediaType */

static int is_tspecial(unsigned char c) { return c && strchr("()<>@,;:\\\"/[]?=", c) != NULL; }
static int is_token_char(unsigned char c) { return c > 0x20 && c < 0x7f && !is_tspecial(c); }
static int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

typedef struct {
  const char *p, *end;
} span;

static void skip_space(span *s) {
  while (s->p < s->end && is_space((unsigned char)*s->p)) s->p++;
}

static size_t token_len(const char *p, const char *end) {
  size_t n = 0;
  while (p + n < end && is_token_char((unsigned char)p[n])) n++;
  return n;
}

typedef struct {
  char key[80]; /* lower-cased; longer keys are not ones looked at (kept cut, never equal to one) */
  osb_buf val;
} param;

typedef struct {
  char type[64]; /* the media type, lower-cased ("" when too long: never equal to one looked at) */
  param p[MAX_PARAMS];
  size_t n;
} media;

static void media_free(media *m) {
  for (size_t i = 0; i < m->n; i++) osb_buf_free(&m->p[i].val);
  m->n = 0;
}

/* consumeValue: a token or a quoted string (a backslash escapes only a tspecial). 1 read, 0 not a value, -1 OOM. */
static int consume_value(span *s, osb_buf *out) {
  if (s->p >= s->end) return 0;
  if (*s->p != '"') {
    size_t n = token_len(s->p, s->end);
    if (n == 0) return 0;
    if (osb_buf_append(out, s->p, n) != 0) return -1;
    s->p += n;
    return 1;
  }
  for (const char *q = s->p + 1; q < s->end; q++) {
    if (*q == '"') {
      s->p = q + 1;
      return 1;
    }
    if (*q == '\\' && q + 1 < s->end && is_tspecial((unsigned char)q[1])) q++;
    else if (*q == '\r' || *q == '\n') return 0;
    if (osb_buf_append(out, q, 1) != 0) return -1;
  }
  return 0;
}

/* Parses v[0..len) as mime.ParseMediaType does. 0 read, 1 refused (the type and params are then not to be used),
 * -1 OOM. */
static int parse_media(const char *v, size_t len, media *m) {
  memset(m, 0, sizeof *m);
  const char *end = v + len, *semi = memchr(v, ';', len);
  span t = {v, semi ? semi : end};
  skip_space(&t);
  while (t.end > t.p && is_space((unsigned char)t.end[-1])) t.end--;
  size_t tl = (size_t)(t.end - t.p);
  /* checkMediaTypeDisposition: token, or token/token */
  size_t a = token_len(t.p, t.end);
  if (a == 0) return 1;
  if (a < tl) {
    if (t.p[a] != '/') return 1;
    size_t b = token_len(t.p + a + 1, t.end);
    if (b == 0 || a + 1 + b != tl) return 1;
  }
  if (tl < sizeof m->type)
    for (size_t i = 0; i < tl; i++) m->type[i] = (char)((t.p[i] >= 'A' && t.p[i] <= 'Z') ? t.p[i] + 32 : t.p[i]);
  span s = {t.end, end};
  if (semi) s.p = semi;
  for (;;) {
    skip_space(&s);
    if (s.p >= s.end) break;
    /* consumeMediaParam */
    const char *start = s.p;
    int ok = 0;
    osb_buf val = {0};
    char key[80];
    size_t kl = 0;
    if (*s.p == ';') {
      s.p++;
      skip_space(&s);
      kl = token_len(s.p, s.end);
      const char *k = s.p;
      s.p += kl;
      skip_space(&s);
      if (kl > 0 && s.p < s.end && *s.p == '=') {
        s.p++;
        skip_space(&s);
        const char *before = s.p;
        int r = consume_value(&s, &val);
        if (r < 0) {
          media_free(m);
          return -1;
        }
        ok = r == 1 || s.p != before;
        size_t cl = kl < sizeof key - 1 ? kl : sizeof key - 1;
        for (size_t i = 0; i < cl; i++) key[i] = (char)((k[i] >= 'A' && k[i] <= 'Z') ? k[i] + 32 : k[i]);
        key[cl] = 0;
      }
    }
    if (!ok) {
      osb_buf_free(&val);
      /* a trailing semicolon is ignored */
      span rest = {start, end};
      skip_space(&rest);
      while (rest.end > rest.p && is_space((unsigned char)rest.end[-1])) rest.end--;
      if (rest.end - rest.p == 1 && *rest.p == ';') break;
      media_free(m);
      return 1;
    }
    /* a key given twice with different values is refused */
    int dup = 0;
    for (size_t i = 0; i < m->n && !dup; i++) {
      if (strcmp(m->p[i].key, key) != 0) continue;
      if (m->p[i].val.len != val.len || (val.len && memcmp(m->p[i].val.data, val.data, val.len) != 0)) {
        osb_buf_free(&val);
        media_free(m);
        return 1;
      }
      dup = 1;
    }
    if (dup || m->n == MAX_PARAMS) {
      osb_buf_free(&val);
      continue;
    }
    if (!val.data && osb_buf_reserve_exact(&val, 0) != 0) {
      media_free(m);
      return -1;
    }
    memcpy(m->p[m->n].key, key, strlen(key) + 1);
    m->p[m->n++].val = val;
  }
  return 0;
}

static const osb_buf *media_raw(const media *m, const char *key) {
  for (size_t i = 0; i < m->n; i++)
    if (strcmp(m->p[i].key, key) == 0) return &m->p[i].val;
  return NULL;
}

static int hexv(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* percentHexUnescape appended to out: 1, 0 a bad escape, -1 OOM */
static int pct_unescape(const char *s, size_t n, osb_buf *out) {
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= n || hexv(s[i + 1]) < 0 || hexv(s[i + 2]) < 0) return 0;
      c = (char)(hexv(s[i + 1]) * 16 + hexv(s[i + 2]));
      i += 2;
    }
    if (osb_buf_append(out, &c, 1) != 0) return -1;
  }
  return 1;
}

/* decode2231Enc: charset'lang'pct-encoded, charset us-ascii or utf-8. 1, 0 refused, -1 OOM */
static int decode_2231(const osb_buf *v, osb_buf *out) {
  const char *q1 = memchr(v->data, '\'', v->len);
  if (!q1) return 0;
  const char *q2 = memchr(q1 + 1, '\'', v->len - (size_t)(q1 + 1 - v->data));
  if (!q2) return 0;
  size_t cl = (size_t)(q1 - v->data);
  if (!((cl == 8 && strncasecmp(v->data, "us-ascii", 8) == 0) || (cl == 5 && strncasecmp(v->data, "utf-8", 5) == 0)))
    return 0;
  return pct_unescape(q2 + 1, v->len - (size_t)(q2 + 1 - v->data), out);
}

/* The value of parameter `key` as ParseMediaType gives it (RFC 2231 "key*" and "key*0", "key*1*", ... override a
 * plain "key"). 1 with *out set (possibly empty), 0 absent, -1 OOM. */
static int media_param(const media *m, const char *key, osb_buf *out) {
  char k[80];
  int has_cont = 0;
  for (size_t i = 0; i < m->n; i++) {
    size_t kl = strlen(key);
    if (strncmp(m->p[i].key, key, kl) == 0 && m->p[i].key[kl] == '*') has_cont = 1;
  }
  if (has_cont) {
    snprintf(k, sizeof k, "%s*", key);
    const osb_buf *ext = media_raw(m, k);
    if (ext) {
      int r = decode_2231(ext, out);
      if (r != 0) return r;
      osb_buf_reset(out);
    } else {
      int valid = 0;
      for (int n = 0;; n++) {
        snprintf(k, sizeof k, "%s*%d", key, n);
        const osb_buf *v = media_raw(m, k);
        if (v) {
          valid = 1;
          if (osb_buf_append(out, v->data, v->len) != 0) return -1;
          continue;
        }
        snprintf(k, sizeof k, "%s*%d*", key, n);
        v = media_raw(m, k);
        if (!v) break;
        valid = 1;
        osb_buf piece = {0};
        int r = n == 0 ? decode_2231(v, &piece) : pct_unescape(v->data, v->len, &piece);
        if (r < 0 || (piece.len && osb_buf_append(out, piece.data, piece.len) != 0)) {
          osb_buf_free(&piece);
          return -1;
        }
        osb_buf_free(&piece);
      }
      if (valid) return 1;
    }
  }
  const osb_buf *plain = media_raw(m, key);
  if (!plain) return 0;
  return osb_buf_append(out, plain->data, plain->len) == 0 ? 1 : -1;
}

/* ---------------------------------------------------------------- the request's Content-Type */

int xd_mp_new(const char *content_type, const xd_mp_callbacks *cb, void *arg, xd_mp **out) {
  *out = NULL;
  if (!*content_type) return XD_MP_NOT_MULTIPART;
  media md;
  int r = parse_media(content_type, strlen(content_type), &md);
  if (r < 0) return XD_MP_NOMEM;
  if (r > 0 || strcmp(md.type, "multipart/form-data") != 0) {
    media_free(&md);
    return XD_MP_NOT_MULTIPART;
  }
  osb_buf bv = {0}; /* Go: params["boundary"], RFC 2231 forms included */
  r = media_param(&md, "boundary", &bv);
  media_free(&md);
  if (r < 0) return XD_MP_NOMEM;
  if (r == 0 || bv.len > MAX_BOUNDARY) {
    osb_buf_free(&bv);
    return XD_MP_NOT_MULTIPART;
  }
  xd_mp *m = calloc(1, sizeof *m);
  if (!m || !(m->dash = malloc(bv.len + 2)) || !(m->nldash = malloc(bv.len + 4))) {
    if (m) free(m->dash);
    free(m);
    osb_buf_free(&bv);
    return XD_MP_NOMEM;
  }
  memcpy(m->dash, "--", 2);
  if (bv.len) memcpy(m->dash + 2, bv.data, bv.len);
  m->dash_len = bv.len + 2;
  memcpy(m->nldash, "\r\n", 2);
  memcpy(m->nldash + 2, m->dash, m->dash_len);
  m->nldash_len = m->dash_len + 2;
  osb_buf_free(&bv);
  m->cb = cb;
  m->arg = arg;
  m->state = m->dash_len == 2 ? S_BAD : S_PREAMBLE; /* an empty boundary: "multipart: boundary is empty" */
  *out = m;
  return XD_MP_OK;
}

void xd_mp_free(xd_mp *m) {
  if (!m) return;
  osb_buf_free(&m->buf);
  osb_buf_free(&m->qline);
  free(m->dash);
  free(m->nldash);
  free(m);
}

/* ---------------------------------------------------------------- lines between parts */

static const char *nl_of(const xd_mp *m) { return m->nldash; }
static size_t nl_len(const xd_mp *m) { return m->nldash_len - m->dash_len; }

static const char *skip_lwsp(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  return p;
}

/* "--boundary--", then transport padding, then nl or nothing */
static int is_final(const xd_mp *m, const char *line, size_t n) {
  if (n < m->dash_len + 2 || memcmp(line, m->dash, m->dash_len) != 0 || memcmp(line + m->dash_len, "--", 2) != 0) return 0;
  const char *rest = skip_lwsp(line + m->dash_len + 2, line + n);
  size_t rl = (size_t)(line + n - rest);
  return rl == 0 || (rl == nl_len(m) && memcmp(rest, nl_of(m), rl) == 0);
}

/* "--boundary", then transport padding, then nl (a bare LF at the first one switches the reader to LF lines) */
static int is_delimiter(xd_mp *m, const char *line, size_t n) {
  if (n < m->dash_len || memcmp(line, m->dash, m->dash_len) != 0) return 0;
  const char *rest = skip_lwsp(line + m->dash_len, line + n);
  size_t rl = (size_t)(line + n - rest);
  if (m->parts == 0 && rl == 1 && rest[0] == '\n' && nl_len(m) == 2) {
    memmove(m->nldash, m->nldash + 1, m->nldash_len - 1);
    m->nldash_len--;
  }
  return rl == nl_len(m) && memcmp(rest, nl_of(m), rl) == 0;
}

/* one line (with its '\n', or the last bytes at the end of the body) where a delimiter or a part separator goes:
 * 0 read, 1 bad, -1 stop */
static int between_line(xd_mp *m, const char *line, size_t n) {
  if (is_delimiter(m, line, n)) {
    if (++m->parts > XD_MP_MAX_PARTS) return 1;
    m->state = S_HEADERS;
    m->hscan = 0;
    m->expect_new = 0;
    return 0;
  }
  if (is_final(m, line, n)) {
    m->state = S_DONE;
    return 0;
  }
  if (m->expect_new) return 1;
  if (m->parts == 0) return 0; /* preamble */
  if (n == nl_len(m) && memcmp(line, nl_of(m), n) == 0) {
    m->expect_new = 1;
    return 0;
  }
  return 1;
}

/* ---------------------------------------------------------------- a part's header block (textproto) */

static int is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int valid_value_byte(unsigned char c) { return c >= 0x80 || c == '\t' || (c >= 0x20 && c <= 0x7e); }

/* The header block [h, h+n) (its lines, the blank one excluded): the part's kind, and whether it is quoted-printable.
 * 0 read, 1 bad, -1 OOM. */
static int part_head(const char *h, size_t n, int *kind, int *qp) {
  *kind = -2;
  *qp = 0;
  int have_cte = 0;
  const char *end = h + n;
  if (n > 0 && (*h == ' ' || *h == '\t')) return 1; /* malformed initial line */
  osb_buf disp = {0};
  int have_disp = 0, rc = 0;
  const char *p = h;
  while (p < end && rc == 0) {
    /* one header: its line and the continuation lines after it (joined by one space, each trimmed) */
    osb_buf kv = {0};
    for (int first = 1; p < end; first = 0) {
      const char *eol = memchr(p, '\n', (size_t)(end - p));
      const char *le = eol ? eol : end;
      const char *next = eol ? eol + 1 : end;
      if (le > p && le[-1] == '\r') le--;
      if (!first) {
        const char *a = p, *b = le;
        while (a < b && (*a == ' ' || *a == '\t')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
        while (kv.len && (kv.data[kv.len - 1] == ' ' || kv.data[kv.len - 1] == '\t')) kv.len--;
        if (osb_buf_append(&kv, " ", 1) != 0 || osb_buf_append(&kv, a, (size_t)(b - a)) != 0) rc = -1;
      } else if (osb_buf_append(&kv, p, (size_t)(le - p)) != 0) {
        rc = -1;
      }
      p = next;
      if (rc || p >= end || (*p != ' ' && *p != '\t')) break;
    }
    if (rc) {
      osb_buf_free(&kv);
      break;
    }
    const char *line = kv.data ? kv.data : "", *colon = memchr(line, ':', kv.len);
    if (!colon) rc = 1;
    for (const char *q = line; rc == 0 && q < colon; q++)
      if (!is_tchar((unsigned char)*q)) rc = 1; /* validHeaderFieldByte */
    for (const char *q = colon ? colon + 1 : line; rc == 0 && q < line + kv.len; q++)
      if (!valid_value_byte((unsigned char)*q)) rc = 1;
    if (rc == 0 && colon != line && (size_t)(colon - line) == 19 && strncasecmp(line, "content-disposition", 19) == 0 &&
        !have_disp) {
      const char *v = colon + 1, *ve = line + kv.len;
      while (v < ve && (*v == ' ' || *v == '\t')) v++;
      while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
      have_disp = 1;
      if (osb_buf_append(&disp, v, (size_t)(ve - v)) != 0) rc = -1;
    }
    if (rc == 0 && colon != line && (size_t)(colon - line) == 25 && strncasecmp(line, "content-transfer-encoding", 25) == 0 &&
        !have_cte) {
      const char *v = colon + 1, *ve = line + kv.len;
      while (v < ve && (*v == ' ' || *v == '\t')) v++;
      while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
      have_cte = 1;
      *qp = ve - v == 16 && strncasecmp(v, "quoted-printable", 16) == 0;
    }
    osb_buf_free(&kv);
  }
  if (rc != 0 || !have_disp) {
    osb_buf_free(&disp);
    return rc;
  }
  media md;
  int r = parse_media(disp.data ? disp.data : "", disp.len, &md);
  osb_buf_free(&disp);
  if (r < 0) return -1;
  if (r > 0) return 0; /* a disposition Go cannot parse: no name, the part is skipped */
  osb_buf name = {0}, file = {0};
  int hn = 0, hf = 0;
  if (strcmp(md.type, "form-data") == 0) {
    hn = media_param(&md, "name", &name);
    hf = hn >= 0 ? media_param(&md, "filename", &file) : 0;
  }
  media_free(&md);
  if (hn < 0 || hf < 0) {
    osb_buf_free(&name);
    osb_buf_free(&file);
    return -1;
  }
  if (hn == 1 && name.len > 0) {
    if (hf == 1 && file.len > 0) {
      if (name.len == 8 && memcmp(name.data, "metadata", 8) == 0) *kind = 1;
      else if (name.len == 4 && memcmp(name.data, "file", 4) == 0) *kind = 0;
    } else {
      *kind = -1; /* a plain field: counted against XD_MP_VALUE_LIMIT */
    }
  }
  osb_buf_free(&name);
  osb_buf_free(&file);
  return 0;
}

/* ---------------------------------------------------------------- the reader */

/* Go's matchAfterPrefix of the bytes after a delimiter prefix: 1 a delimiter, -1 content, 0 undecided */
static int after_prefix(const char *b, size_t n, size_t plen, int eof) {
  if (n == plen) return eof ? 1 : 0;
  unsigned char c = (unsigned char)b[plen];
  if (c == ' ' || c == '\t' || c == '\r' || c == '\n') return 1;
  if (c == '-') {
    if (n == plen + 1) return eof ? -1 : 0;
    if (b[plen + 1] == '-') return 1;
  }
  return -1;
}

/* the decoded bytes of the current part */
static int deliver(xd_mp *m, const char *d, size_t n) {
  if (n == 0) return 0;
  if (m->kind == -1) {
    m->values += n;
    return m->values > XD_MP_VALUE_LIMIT ? 1 : 0;
  }
  if (m->kind < 0) return 0;
  return m->cb->on_data(m->arg, d, n) ? -1 : 0;
}

static int qp_hex(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* One line of a quoted-printable part (its '\n' included, or the part's last bytes: at_end), as Go's
 * mime/quotedprintable Reader decodes it: trailing white space dropped, "=" at the end a soft line break, "=XX" a
 * byte, "=" not followed by two hex digits a literal one unless at the line's end, other control bytes refused.
 * 0, 1 bad, -1 stop. */
static int qp_line(xd_mp *m, const char *l, size_t n, int at_end) {
  int has_lf = n > 0 && l[n - 1] == '\n', has_cr = n > 1 && has_lf && l[n - 2] == '\r';
  size_t t = n;
  while (t > 0 && (l[t - 1] == ' ' || l[t - 1] == '\t' || l[t - 1] == '\r' || l[t - 1] == '\n')) t--;
  int bad_after = 0, add_nl = 0;
  if (t > 0 && l[t - 1] == '=') {
    const char *right = l + t;
    size_t rl = n - t;
    t--;
    if (!(rl >= 1 && right[0] == '\n') && !(rl >= 2 && right[0] == '\r' && right[1] == '\n') && !(rl == 0 && t > 0 && at_end))
      bad_after = 1;
  } else if (has_lf) {
    add_nl = has_cr ? 2 : 1;
  }
  char out[256];
  size_t o = 0;
  for (size_t i = 0; i < t; i++) {
    unsigned char b = (unsigned char)l[i];
    if (b == '=') {
      if (t - i >= 3 && qp_hex((unsigned char)l[i + 1]) >= 0 && qp_hex((unsigned char)l[i + 2]) >= 0) {
        b = (unsigned char)(qp_hex((unsigned char)l[i + 1]) * 16 + qp_hex((unsigned char)l[i + 2]));
        i += 2;
      } else if (!(t - i >= 2 && l[i + 1] != '\r' && l[i + 1] != '\n')) {
        return 1;
      }
    } else if (!(b == '\t' || b == '\r' || b == '\n' || b >= 0x80 || (b >= ' ' && b <= '~'))) {
      return 1;
    }
    out[o++] = (char)b;
    if (o == sizeof out) {
      int r = deliver(m, out, o);
      if (r) return r;
      o = 0;
    }
  }
  int r = o ? deliver(m, out, o) : 0;
  if (r == 0 && add_nl) r = deliver(m, &"\r\n"[add_nl == 2 ? 0 : 1], (size_t)add_nl);
  return r ? r : bad_after;
}

/* content bytes of the current part: handed on, through the quoted-printable decoder when it is one */
static int emit(xd_mp *m, const char *d, size_t n) {
  if (n == 0) return 0;
  m->total += n;
  if (!m->qp || m->kind == -2) return deliver(m, d, n);
  while (n > 0) {
    const char *nl = memchr(d, '\n', n);
    size_t take = nl ? (size_t)(nl - d) + 1 : n;
    if (osb_buf_append(&m->qline, d, take) != 0) return -1;
    d += take;
    n -= take;
    if (!nl) {
      if (m->qline.len >= XD_MP_LINE_LIMIT) return 1; /* Go's 4 KiB line buffer is full */
      break;
    }
    if (m->qline.len > XD_MP_LINE_LIMIT) return 1;
    int r = qp_line(m, m->qline.data, m->qline.len, 0);
    osb_buf_reset(&m->qline);
    if (r) return r;
  }
  return 0;
}

/* Reads what is buffered. 0 needs more (or done), 1 bad, -1 stop (OOM or a callback). */
static int run(xd_mp *m, int eof) {
  size_t pos = 0;
  int rc = 0;
  while (rc == 0) {
    const char *d = m->buf.data + pos;
    size_t n = m->buf.len - pos;
    if (m->state == S_DONE) {
      pos = m->buf.len;
      break;
    }
    if (m->state == S_PREAMBLE || m->state == S_BETWEEN) {
      const char *nl = memchr(d, '\n', n);
      if (!nl) {
        if (eof) rc = n && is_final(m, d, n) ? (m->state = S_DONE, 0) : 1;
        else if (n >= XD_MP_LINE_LIMIT) rc = 1;
        break;
      }
      size_t ll = (size_t)(nl - d) + 1;
      if (ll > XD_MP_LINE_LIMIT) {
        rc = 1;
        break;
      }
      rc = between_line(m, d, ll);
      pos += ll;
      continue;
    }
    if (m->state == S_HEADERS) {
      /* the blank line: a line start (the block's start, or after a '\n') followed by "\n" or "\r\n" */
      size_t at = m->hscan, end = 0;
      int found = 0;
      while (at < n) {
        if ((at == 0 || d[at - 1] == '\n')) {
          if (d[at] == '\n') {
            end = at + 1;
            found = 1;
            break;
          }
          if (d[at] == '\r') {
            if (at + 1 >= n) break;
            if (d[at + 1] == '\n') {
              end = at + 2;
              found = 1;
              break;
            }
          }
        }
        at++;
      }
      if (!found) {
        m->hscan = at;
        if (eof || n > XD_MP_HEAD_LIMIT) rc = 1;
        break;
      }
      if (end > XD_MP_HEAD_LIMIT) {
        rc = 1;
        break;
      }
      int kind, qp;
      rc = part_head(d, at, &kind, &qp);
      if (rc) break;
      m->kind = kind;
      m->qp = qp;
      osb_buf_reset(&m->qline);
      m->total = 0;
      pos += end;
      m->state = S_BODY;
      if (kind >= 0 && m->cb->on_part(m->arg, kind)) rc = -1;
      continue;
    }
    /* S_BODY: Go's scanUntilBoundary */
    size_t take = 0;
    int ends = 0, more = 0;
    if (m->total == 0 && n >= m->dash_len && memcmp(d, m->dash, m->dash_len) == 0) {
      int r = after_prefix(d, n, m->dash_len, eof);
      if (r < 0) take = m->dash_len;
      else if (r == 0) more = 1;
      else ends = 1;
    } else if (m->total == 0 && n < m->dash_len && memcmp(d, m->dash, n) == 0) {
      more = 1;
    } else {
      const char *hit = n >= m->nldash_len ? memmem(d, n, m->nldash, m->nldash_len) : NULL;
      if (hit) {
        size_t i = (size_t)(hit - d);
        int r = after_prefix(hit, n - i, m->nldash_len, eof);
        if (r < 0) take = i + m->nldash_len;
        else if (r == 0) take = i, more = 1;
        else take = i, ends = 1;
      } else if (n < m->nldash_len && memcmp(d, m->nldash, n) == 0) {
        more = 1;
      } else {
        const char *last = n ? memrchr(d, m->nldash[0], n) : NULL;
        size_t i = last ? (size_t)(last - d) : n;
        if (last && n - i < m->nldash_len && memcmp(last, m->nldash, n - i) == 0) take = i;
        else take = n;
        more = 1;
      }
    }
    if (take) {
      int r = emit(m, d, take);
      if (r) {
        rc = r;
        break;
      }
      pos += take;
    }
    if (ends) {
      if (m->qp && m->kind != -2 && m->qline.len) { /* the part's last line, without its newline */
        rc = qp_line(m, m->qline.data, m->qline.len, 1);
        osb_buf_reset(&m->qline);
        if (rc) break;
      }
      m->state = S_BETWEEN;
      m->expect_new = 0;
      if (m->kind >= 0 && m->cb->on_part_end(m->arg)) rc = -1;
      continue;
    }
    if (more && take == 0) {
      if (eof) rc = 1; /* cut short: io.ErrUnexpectedEOF */
      break;
    }
    if (more && eof && pos == m->buf.len) {
      rc = 1;
      break;
    }
  }
  osb_buf_consume(&m->buf, pos);
  return rc;
}

int xd_mp_feed(xd_mp *m, const char *data, size_t len) {
  if (m->state == S_BAD) return XD_MP_BAD;
  if (m->state == S_DONE) return XD_MP_OK;
  /* in slices, so that what is buffered stays small */
  while (len > 0) {
    size_t n = len < 65536 ? len : 65536;
    if (osb_buf_append(&m->buf, data, n) != 0) return XD_MP_NOMEM;
    data += n;
    len -= n;
    int rc = run(m, 0);
    if (rc < 0) return XD_MP_NOMEM;
    if (rc > 0) {
      m->state = S_BAD;
      osb_buf_free(&m->buf);
      return XD_MP_BAD;
    }
    if (m->state == S_DONE) {
      osb_buf_free(&m->buf);
      return XD_MP_OK;
    }
  }
  return XD_MP_OK;
}

int xd_mp_finish(xd_mp *m) {
  if (m->state == S_BAD) return XD_MP_BAD;
  if (m->state != S_DONE) {
    int rc = run(m, 1);
    if (rc < 0) return XD_MP_NOMEM;
    if (rc > 0 || m->state != S_DONE) {
      m->state = S_BAD;
      return XD_MP_BAD;
    }
  }
  return XD_MP_OK;
}
