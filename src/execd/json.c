/* Go-compatible JSON strings and JavaScript number text (json.h). */
#include "json.h"
#include "utf8.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* go: Go's encoding/json (<>& U+2028 U+2029 escaped, an invalid byte as \ufffd); else JavaScript's JSON.stringify
 * of the string Node decodes from the bytes (those as they are, an invalid byte as U+FFFD itself). */
static int json_str(osb_buf *out, const char *str, size_t len, int go) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *s = (const unsigned char *)str;
  if (osb_buf_append(out, "\"", 1) != 0) return -1;
  size_t run = 0; /* start of the bytes copied as they are */
  size_t i = 0;
  while (i < len) {
    unsigned char c = s[i];
    char esc[8];
    size_t elen = 0;
    size_t adv = 1;
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\' && (!go || (c != '<' && c != '>' && c != '&'))) {
      i++;
      continue;
    }
    if (c < 0x80) {
      esc[0] = '\\';
      elen = 2;
      switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
          memcpy(esc, "\\u00", 4);
          esc[4] = hex[c >> 4];
          esc[5] = hex[c & 15];
          elen = 6;
      }
    } else {
      size_t sl = xd_utf8_seq(s + i, len - i);
      if (sl == 0) {
        memcpy(esc, go ? "\\ufffd" : "\xef\xbf\xbd", go ? 6 : 3);
        elen = go ? 6 : 3;
      } else if (go && sl == 3 && c == 0xe2 && s[i + 1] == 0x80 && (s[i + 2] == 0xa8 || s[i + 2] == 0xa9)) {
        memcpy(esc, s[i + 2] == 0xa8 ? "\\u2028" : "\\u2029", 6);
        elen = 6;
        adv = 3;
      } else {
        i += sl;
        continue;
      }
    }
    if (osb_buf_append(out, str + run, i - run) != 0 || osb_buf_append(out, esc, elen) != 0) return -1;
    i += adv;
    run = i;
  }
  if (osb_buf_append(out, str + run, len - run) != 0 || osb_buf_append(out, "\"", 1) != 0) return -1;
  return 0;
}

int xd_json_str(struct osb_buf *out, const char *s, size_t len) { return json_str(out, s, len, 1); }

int xd_js_json_str(osb_buf *out, const char *s, size_t len) { return json_str(out, s, len, 0); }

int xd_is_integer(double v) {
  return isfinite(v) && floor(v) == v;
}

int xd_js_array_index(const char *k) {
  if (!*k || strlen(k) > 10 || (k[0] == '0' && k[1])) return 0;
  for (const char *p = k; *p; p++)
    if (*p < '0' || *p > '9') return 0;
  return strtoull(k, NULL, 10) <= 4294967294ull;
}

int xd_js_number_int(const char *s, size_t n, long long *out) {
  char buf[64];
  while (n && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f')) s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\v' || s[n - 1] == '\f')) n--;
  if (n == 0) {
    *out = 0;
    return 1;
  }
  if (n >= sizeof buf) return 0;
  memcpy(buf, s, n);
  buf[n] = '\0';
  int base = 10;
  const char *d = buf;
  if (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')) base = 16;
  else if (buf[0] == '0' && (buf[1] == 'o' || buf[1] == 'O')) base = 8;
  else if (buf[0] == '0' && (buf[1] == 'b' || buf[1] == 'B')) base = 2;
  if (base != 10) {
    d = buf + 2;
    if (!*d) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(d, &end, base);
    if (*end || errno || *d == '-' || *d == '+' || v > (1ull << 53)) return 0;
    *out = (long long)v;
    return 1;
  }
  for (const char *p = buf; *p; p++) /* strtod would also read hex, inf and nan, which Number() reads otherwise */
    if (!strchr("0123456789+-.eE", *p)) return 0;
  char *end;
  double v = strtod(buf, &end);
  if (*end || !isfinite(v) || floor(v) != v || fabs(v) > 9007199254740992.0) return 0;
  *out = (long long)v;
  return 1;
}

int xd_js_number(osb_buf *out, double v) {
  if (isnan(v)) return osb_buf_append_str(out, "NaN");
  if (isinf(v)) return osb_buf_append_str(out, v < 0 ? "-Infinity" : "Infinity");
  if (v == 0) return osb_buf_append_str(out, "0");
  /* the shortest digit string that reads back as v (ECMAScript Number::toString picks the same digits) */
  char sci[40];
  for (int p = 0; p <= 16; p++) {
    snprintf(sci, sizeof sci, "%.*e", p, v);
    if (strtod(sci, NULL) == v) break;
  }
  /* sci: [-]d[.ddd]e[+-]XX -> digits and decimal exponent n (value = 0.digits * 10^n) */
  const char *p = sci;
  int neg = 0;
  if (*p == '-') neg = 1, p++;
  char digits[24];
  size_t k = 0;
  for (; *p && *p != 'e'; p++) {
    if (*p >= '0' && *p <= '9' && k < sizeof digits - 1) digits[k++] = *p;
  }
  digits[k] = 0;
  int n = atoi(p + 1) + 1;
  if (neg && osb_buf_append(out, "-", 1) != 0) return -1;
  int kk = (int)k;
  if (kk <= n && n <= 21) {
    if (osb_buf_append(out, digits, k) != 0) return -1;
    for (int i = 0; i < n - kk; i++) {
      if (osb_buf_append(out, "0", 1) != 0) return -1;
    }
    return 0;
  }
  if (0 < n && n <= 21) {
    if (osb_buf_append(out, digits, (size_t)n) != 0 || osb_buf_append(out, ".", 1) != 0) return -1;
    return osb_buf_append(out, digits + n, k - (size_t)n);
  }
  if (-6 < n && n <= 0) {
    if (osb_buf_append(out, "0.", 2) != 0) return -1;
    for (int i = 0; i < -n; i++) {
      if (osb_buf_append(out, "0", 1) != 0) return -1;
    }
    return osb_buf_append(out, digits, k);
  }
  if (osb_buf_append(out, digits, 1) != 0) return -1;
  if (k > 1 && (osb_buf_append(out, ".", 1) != 0 || osb_buf_append(out, digits + 1, k - 1) != 0)) return -1;
  return osb_buf_appendf(out, "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
}

/* ---- xd_json_check: the strict JSON grammar ---- */
typedef struct {
  const unsigned char *s;
  size_t n, i;
  int depth;
} jcheck;

enum { J_OK = XD_JSON_OK, J_EOF = XD_JSON_EOF, J_OTHER = XD_JSON_OTHER };
#define J_MAX_DEPTH 512 /* cJSON parses up to 1000 */

static void j_ws(jcheck *j) {
  while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

static int j_hex(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int j_string(jcheck *j) {
  j->i++; /* the opening quote */
  while (j->i < j->n) {
    unsigned c = j->s[j->i];
    if (c == '"') {
      j->i++;
      return J_OK;
    }
    if (c < 0x20) return J_OTHER;
    if (c == '\\') {
      if (j->i + 1 >= j->n) return J_EOF;
      c = j->s[j->i + 1];
      if (c == 'u') {
        unsigned v = 0;
        for (int k = 0; k < 4; k++) {
          if (j->i + 2 + k >= j->n) return J_EOF;
          int h = j_hex(j->s[j->i + 2 + k]);
          if (h < 0) return J_OTHER;
          v = v * 16 + (unsigned)h;
        }
        if (v == 0 || (v >= 0xD800 && v <= 0xDFFF)) return J_OTHER; /* NUL cuts a C string; JS keeps lone surrogates */
        j->i += 6;
        continue;
      }
      if (!strchr("\"\\/bfnrt", (int)c) || c == 0) return J_OTHER;
      j->i += 2;
      continue;
    }
    size_t len = xd_utf8_seq(j->s + j->i, j->n - j->i);
    if (len == 0) return J_OTHER; /* invalid or cut-short UTF-8: the Node execd decodes it to U+FFFD first */
    j->i += len;
  }
  return J_EOF;
}

static int j_digits(jcheck *j) {
  if (j->i >= j->n) return J_EOF;
  if (j->s[j->i] < '0' || j->s[j->i] > '9') return J_OTHER;
  while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
  return J_OK;
}

static int j_number(jcheck *j) {
  int r;
  if (j->s[j->i] == '-') j->i++;
  if (j->i >= j->n) return J_EOF;
  if (j->s[j->i] == '0') j->i++;
  else if ((r = j_digits(j)) != J_OK) return r;
  if (j->i < j->n && j->s[j->i] == '.') {
    j->i++;
    if ((r = j_digits(j)) != J_OK) return r;
  }
  if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
    j->i++;
    if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
    if ((r = j_digits(j)) != J_OK) return r;
  }
  /* the end of the body after a number at the top level is fine; inside a container the caller sees the EOF */
  return J_OK;
}

static int j_value(jcheck *j);

static int j_container(jcheck *j, int object) {
  if (++j->depth > J_MAX_DEPTH) return J_OTHER;
  j->i++;
  j_ws(j);
  if (j->i >= j->n) return J_EOF;
  if (j->s[j->i] == (object ? '}' : ']')) {
    j->i++;
    j->depth--;
    return J_OK;
  }
  for (;;) {
    int r;
    if (object) {
      if (j->i >= j->n) return J_EOF;
      if (j->s[j->i] != '"') return J_OTHER;
      if ((r = j_string(j)) != J_OK) return r;
      j_ws(j);
      if (j->i >= j->n) return J_EOF;
      if (j->s[j->i] != ':') return J_OTHER;
      j->i++;
    }
    if ((r = j_value(j)) != J_OK) return r;
    j_ws(j);
    if (j->i >= j->n) return J_EOF;
    if (j->s[j->i] == ',') {
      j->i++;
      j_ws(j);
      continue;
    }
    if (j->s[j->i] == (object ? '}' : ']')) {
      j->i++;
      j->depth--;
      return J_OK;
    }
    return J_OTHER;
  }
}

static int j_literal(jcheck *j, const char *word) {
  for (size_t k = 0; word[k]; k++) {
    if (j->i + k >= j->n) return J_EOF;
    if (j->s[j->i + k] != (unsigned char)word[k]) return J_OTHER;
  }
  j->i += strlen(word);
  return J_OK;
}

static int j_value(jcheck *j) {
  j_ws(j);
  if (j->i >= j->n) return J_EOF;
  switch (j->s[j->i]) {
  case '{': return j_container(j, 1);
  case '[': return j_container(j, 0);
  case '"': return j_string(j);
  case 't': return j_literal(j, "true");
  case 'f': return j_literal(j, "false");
  case 'n': return j_literal(j, "null");
  default:
    if (j->s[j->i] == '-' || (j->s[j->i] >= '0' && j->s[j->i] <= '9')) return j_number(j);
    return J_OTHER;
  }
}

int xd_json_check(const char *s, size_t n) {
  jcheck j = {(const unsigned char *)s, n, 0, 0};
  int r = j_value(&j);
  if (r != J_OK) return r;
  j_ws(&j);
  return j.i == n ? J_OK : J_OTHER;
}

/* The member `name` of a value object; *dup set when it appears more than once (JavaScript takes the last one). */
const cJSON *xd_json_member(const cJSON *obj, const char *name, int *dup) {
  const cJSON *found = NULL;
  for (const cJSON *c = obj->child; c; c = c->next) {
    if (strcmp(c->string, name) != 0) continue;
    if (found) *dup = 1;
    found = c;
  }
  return found;
}
