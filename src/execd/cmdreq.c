/* The request rules of execd's commands API (cmdreq.h): body validation, timeout duration, path expansion. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2, memmem */
#endif
#include "cmdreq.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>
#include <uv.h>

#include "idfile.h"
#include "json.h"

static int parse_checked(const char *body, size_t len, const char *orig, size_t orig_len, cJSON **out, osb_buf *msg);

#define INT64_MAX_D 9223372036854775808.0 /* 2^63: what a double holds of Go's int64 maximum */


double xd_go_duration_ms(double timeout_ms) {
  uint64_t v;
  if (timeout_ms >= 0) v = timeout_ms >= 18446744073709551616.0 ? 0 : (uint64_t)timeout_ms;
  else v = (uint64_t)0 - (uint64_t)(-timeout_ms);
  int64_t ns = (int64_t)(v * 1000000u); /* wraps like Go's int64 multiplication */
  return ns > 0 ? (double)ns / 1e6 : 0;
}

static const char *json_kind(const cJSON *v) {
  if (cJSON_IsArray(v)) return "array";
  if (cJSON_IsNull(v)) return "null";
  if (cJSON_IsBool(v)) return "bool";
  if (cJSON_IsNumber(v)) return "number";
  if (cJSON_IsString(v)) return "string";
  return "object";
}

const cJSON *xd_json_get(const cJSON *obj, const char *key) {
  const cJSON *found = NULL;
  for (const cJSON *c = cJSON_IsObject(obj) ? obj->child : NULL; c; c = c->next) {
    if (c->string && strcmp(c->string, key) == 0) found = c;
  }
  return found;
}

int xd_json_present(const cJSON *v) { return v && !cJSON_IsNull(v); }

static int is_int(const cJSON *v) { return cJSON_IsNumber(v) && xd_is_integer(v->valuedouble); }

static const char DECODE[] = "error parsing request, MAYBE invalid body format. ";
const char XD_INVALID_REQUEST[] = "invalid request, validation error ";

/* The text of Go's JSON decoder for what does not parse: input that ends too early is "unexpected EOF". */
static void syntax_text(const char *body, size_t len, const char *at, osb_buf *msg) {
  size_t off = at && at >= body && at <= body + len ? (size_t)(at - body) : len;
  if (len > 0 && off == len - 1) {
    /* cJSON reports an error at the end of its input on the last byte: parsed again with a space after it, input
     * that is only cut short fails past that byte */
    char *padded = malloc(len + 2);
    if (padded) {
      memcpy(padded, body, len);
      padded[len] = ' ';
      padded[len + 1] = 0;
      cJSON_Delete(cJSON_ParseWithLengthOpts(padded, len + 1, NULL, 0));
      const char *e = cJSON_GetErrorPtr();
      if (e && e >= padded + len) off = len;
      free(padded);
    }
  }
  size_t i = off;
  while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r')) i++;
  if (i >= len) {
    osb_buf_append_str(msg, "unexpected EOF");
    return;
  }
  unsigned char c = (unsigned char)body[off < len ? off : len - 1];
  if (c >= 0x20 && c < 0x7f && c != '\'') osb_buf_appendf(msg, "invalid character '%c' in JSON at offset %zu", c, off);
  else osb_buf_appendf(msg, "invalid character 0x%02x in JSON at offset %zu", c, off);
}

/* Case-insensitive search of an ASCII needle in len bytes. */
static int has_ci(const char *b, size_t len, const char *needle) {
  size_t n = strlen(needle);
  for (size_t i = 0; i + n <= len; i++) {
    if (strncasecmp(b + i, needle, n) == 0) return 1;
  }
  return 0;
}

/* The body with every \u0000 escape inside a JSON string replaced by `esc` (a surrogate pair's escapes); -1 when
 * out of memory, else the number replaced (0: out untouched). */
static long rewrite_nul_escapes(const char *b, size_t len, const char *esc, osb_buf *out) {
  long n = 0;
  int in_string = 0;
  size_t run = 0;
  for (size_t i = 0; i < len; i++) {
    if (!in_string) {
      in_string = b[i] == '"';
      continue;
    }
    if (b[i] == '"') {
      in_string = 0;
    } else if (b[i] == '\\' && i + 1 < len) {
      if (b[i + 1] == 'u' && i + 5 < len && memcmp(b + i + 2, "0000", 4) == 0) {
        if (osb_buf_append(out, b + run, i - run) != 0 || osb_buf_append_str(out, esc) != 0) return -1;
        n++;
        run = i + 6;
      }
      i++; /* the escaped character */
    }
  }
  if (n > 0 && osb_buf_append(out, b + run, len - run) != 0) return -1;
  return n;
}

int xd_cmd_parse(const char *body, size_t len, cJSON **out, char nul[5], osb_buf *msg) {
  /* JSON strings with NUL characters: cJSON's strings end at a NUL, so each \u0000 escape is parsed as a character
   * the body does not contain otherwise (a plane 13-16 noncharacter), which stands for NUL in the strings */
  static const struct {
    const char *utf8, *high, *esc;
  } markers[] = {
      {"\xf4\x8f\xbf\xbf", "\\udbff", "\\udbff\\udfff"},
      {"\xf3\xbf\xbf\xbf", "\\udbbf", "\\udbbf\\udfff"},
      {"\xf3\xaf\xbf\xbf", "\\udb7f", "\\udb7f\\udfff"},
      {"\xf3\x9f\xbf\xbf", "\\udb3f", "\\udb3f\\udfff"},
  };
  nul[0] = 0;
  osb_buf rewritten = {0};
  const char *orig = body;
  size_t orig_len = len;
  if (has_ci(body, len, "\\u0000")) {
    size_t k = 0;
    while (k < 4 && (memmem(body, len, markers[k].utf8, 4) || has_ci(body, len, markers[k].high))) k++;
    long n = k < 4 ? rewrite_nul_escapes(body, len, markers[k].esc, &rewritten) : 0;
    if (n < 0 || k == 4) {
      osb_buf_free(&rewritten);
      osb_buf_reset(msg);
      osb_buf_appendf(msg, "%s%s", DECODE, n < 0 ? "out of memory" : "NUL characters in strings that contain U+10FFFF, U+FFFFF, U+EFFFF and U+DFFFF too");
      return -1;
    }
    if (n > 0) {
      memcpy(nul, markers[k].utf8, 5);
      body = rewritten.data;
      len = rewritten.len;
    }
  }
  int rc = parse_checked(body, len, orig, orig_len, out, msg);
  osb_buf_free(&rewritten);
  if (rc != 0) nul[0] = 0;
  return rc;
}

/* xd_cmd_parse on the (rewritten) body; orig: the body as received, for the position of a syntax error. */
static int parse_checked(const char *body, size_t len, const char *orig, size_t orig_len, cJSON **out, osb_buf *msg) {
  static const struct {
    const char *key, *go;
    int (*ok)(const cJSON *);
  } fields[] = {
      {"command", "string", cJSON_IsString},
      {"cwd", "string", cJSON_IsString},
      {"timeout", "int64", is_int},
      {"background", "bool", cJSON_IsBool},
  };
  *out = NULL;
  osb_buf_reset(msg);
  osb_buf_append_str(msg, DECODE);
  if (len == 0) return osb_buf_append_str(msg, "EOF"), -1;
  cJSON *b = NULL;
  osb_buf syntax = {0};
  if (xd_json_parse(body, len, &b, &syntax) != 0) {
    cJSON *o = NULL;
    osb_buf as_sent = {0}; /* the position in the body as received */
    if (orig != body && xd_json_parse(orig, orig_len, &o, &as_sent) != 0) osb_buf_append(msg, as_sent.data, as_sent.len);
    else osb_buf_append(msg, syntax.data, syntax.len);
    cJSON_Delete(o);
    osb_buf_free(&as_sent);
    osb_buf_free(&syntax);
    return -1;
  }
  if (!cJSON_IsObject(b)) {
    osb_buf_appendf(msg, "json: cannot unmarshal %s into Go value of type model.RunCommandRequest", json_kind(b));
    goto fail;
  }
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    const cJSON *v = xd_json_get(b, fields[i].key);
    if (xd_json_present(v) && !fields[i].ok(v)) {
      osb_buf_appendf(msg, "json: cannot unmarshal %s into Go struct field RunCommandRequest.%s of type %s",
                      json_kind(v), fields[i].key, fields[i].go);
      goto fail;
    }
  }
  const cJSON *timeout = xd_json_get(b, "timeout");
  if (is_int(timeout) && fabs(timeout->valuedouble) > INT64_MAX_D) {
    osb_buf_appendf(msg, "json: cannot unmarshal number %s%.0f into Go struct field RunCommandRequest.timeout of type int64",
                    timeout->valuedouble < 0 ? "-" : "", fabs(timeout->valuedouble));
    goto fail;
  }
  static const char *const ids[] = {"uid", "gid"};
  for (int i = 0; i < 2; i++) {
    const cJSON *v = xd_json_get(b, ids[i]);
    if (xd_json_present(v) && (!is_int(v) || v->valuedouble < 0)) {
      osb_buf_appendf(msg, "%s must be a non-negative integer", ids[i]);
      goto fail;
    }
  }
  const cJSON *envs = xd_json_get(b, "envs");
  if (xd_json_present(envs) && !cJSON_IsObject(envs)) {
    osb_buf_append_str(msg, "envs must be an object of strings");
    goto fail;
  }
  osb_buf_reset(msg);
  osb_buf_append_str(msg, XD_INVALID_REQUEST);
  const cJSON *command = xd_json_get(b, "command");
  if (!cJSON_IsString(command) || command->valuestring[0] == 0) {
    osb_buf_append_str(msg, "Key: 'RunCommandRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag");
    goto fail;
  }
  if (xd_json_present(timeout) && timeout->valuedouble < 0) {
    osb_buf_append_str(msg, "Key: 'RunCommandRequest.TimeoutMs' Error:Field validation for 'TimeoutMs' failed on the 'gte' tag");
    goto fail;
  }
  if (xd_json_present(xd_json_get(b, "gid")) && !xd_json_present(xd_json_get(b, "uid"))) {
    osb_buf_append_str(msg, "uid is required when gid is provided");
    goto fail;
  }
  osb_buf_reset(msg);
  *out = b;
  return 0;
fail:
  cJSON_Delete(b);
  return -1;
}

const char *xd_env_get(char *const *envp, const char *name, size_t name_len) {
  for (char *const *e = envp; e && *e; e++) {
    if (strncmp(*e, name, name_len) == 0 && (*e)[name_len] == '=') return *e + name_len + 1;
  }
  return NULL;
}

static int name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int name_char(char c) { return name_start(c) || (c >= '0' && c <= '9'); }

/* At p (a '$'): the variable reference there (name, its length, the reference's length), or 0 when none. */
static size_t var_at(const char *p, const char **name, size_t *nlen) {
  if (p[1] == '{' && name_start(p[2])) {
    size_t i = 3;
    while (name_char(p[i])) i++;
    if (p[i] == '}') {
      *name = p + 2;
      *nlen = i - 2;
      return i + 1;
    }
  }
  if (name_start(p[1])) {
    size_t i = 2;
    while (name_char(p[i])) i++;
    *name = p + 1;
    *nlen = i - 1;
    return i;
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* os.homedir(): $HOME, else the home of the process's uid in the sandbox's own /etc/passwd (idfile.c; glibc's
 * getpwuid went through NSS, which a static binary in a foreign root cannot load), else "/". */
static int append_home(osb_buf *out) {
  const char *h = getenv("HOME");
  if (h && *h) return osb_buf_append_str(out, h);
  int r = xd_idfile_home_of((long long)getuid(), out);
  if (r < 0) return -1;
  return r ? 0 : osb_buf_append_str(out, "/");
}

int xd_expand_path(const char *p, char *const *envp, osb_buf *out, osb_buf *err) {
  osb_buf s = {0};
  osb_buf_reset(out);
  /* `$$` (the shell's pid variable, never set in execd's environment) expands to nothing */
  for (const char *q = p; *q; q++) {
    if (q[0] == '$' && q[1] == '$') q++;
    else osb_buf_append(&s, q, 1);
  }
  if (!s.data) osb_buf_append(&s, "", 0);
  char **missing = NULL;
  size_t nmissing = 0;
  int rc = 0;
  for (const char *q = s.data; *q; q++) {
    const char *name;
    size_t nlen, rlen;
    if (*q != '$' || (rlen = var_at(q, &name, &nlen)) == 0) continue;
    if (!xd_env_get(envp, name, nlen)) {
      char **grown = realloc(missing, (nmissing + 1) * sizeof *missing);
      if (!grown) {
        rc = -1;
        break;
      }
      missing = grown;
      missing[nmissing++] = strndup(name, nlen);
    }
    q += rlen - 1;
  }
  if (nmissing > 0) {
    qsort(missing, nmissing, sizeof *missing, cmp_str);
    osb_buf_reset(err);
    osb_buf_append_str(err, "path references undefined environment variables: ");
    for (size_t i = 0; i < nmissing; i++) {
      if (i > 0 && missing[i] && missing[i - 1] && strcmp(missing[i], missing[i - 1]) == 0) continue;
      if (i > 0) osb_buf_append(err, ",", 1);
      if (missing[i]) osb_buf_append_str(err, missing[i]);
    }
    rc = -1;
  }
  for (size_t i = 0; i < nmissing; i++) free(missing[i]);
  free(missing);
  if (rc != 0) {
    osb_buf_free(&s);
    return -1;
  }
  osb_buf x = {0};
  for (const char *q = s.data; *q;) {
    const char *name;
    size_t nlen, rlen;
    if (*q == '$' && (rlen = var_at(q, &name, &nlen)) != 0) {
      osb_buf_append_str(&x, xd_env_get(envp, name, nlen));
      q += rlen;
    } else {
      osb_buf_append(&x, q, 1);
      q++;
    }
  }
  osb_buf_free(&s);
  const char *e = x.data ? x.data : "";
  if (strcmp(e, "~") == 0) {
    rc = append_home(out);
  } else if (strncmp(e, "~/", 2) == 0) {
    osb_buf j = {0};
    if (append_home(&j) == 0) osb_buf_appendf(&j, "/%s", e + 2);
    rc = xd_path_normalize(j.data ? j.data : "", 1, out);
    osb_buf_free(&j);
  } else {
    rc = osb_buf_append_str(out, e);
  }
  osb_buf_free(&x);
  return rc;
}

int xd_path_normalize(const char *p, int keep_trailing, osb_buf *out) {
  osb_buf_reset(out);
  int abs = p[0] == '/';
  size_t plen = strlen(p);
  int trailing = plen > 0 && p[plen - 1] == '/';
  /* segments kept, as offsets into out */
  size_t *starts = malloc((plen / 2 + 2) * sizeof *starts);
  if (!starts) return -1;
  size_t n = 0;
  if (abs) osb_buf_append(out, "/", 1);
  size_t base = out->len;
  for (const char *q = p; *q;) {
    while (*q == '/') q++;
    const char *e = q;
    while (*e && *e != '/') e++;
    size_t len = (size_t)(e - q);
    if (len == 0 || (len == 1 && q[0] == '.')) {
      /* nothing */
    } else if (len == 2 && q[0] == '.' && q[1] == '.' && (n > 0 && !(out->len - starts[n - 1] == 2 && strncmp(out->data + starts[n - 1], "..", 2) == 0))) {
      out->len = n > 1 ? starts[n - 1] - 1 : base;
      out->data[out->len] = 0;
      n--;
    } else if (len == 2 && q[0] == '.' && q[1] == '.' && abs) {
      /* `..` above the root stays at the root */
    } else {
      if (n > 0) osb_buf_append(out, "/", 1);
      starts[n++] = out->len;
      osb_buf_append(out, q, len);
    }
    q = e;
  }
  free(starts);
  if (out->len == 0 && !abs) osb_buf_append(out, ".", 1);
  if (keep_trailing && trailing && out->len > 0 && out->data[out->len - 1] != '/') osb_buf_append(out, "/", 1);
  if (!out->data) osb_buf_append(out, "", 0);
  return out->data ? 0 : -1;
}

int xd_path_resolve(const char *p, osb_buf *out) {
  if (p[0] == '/') return xd_path_normalize(p, 0, out);
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "/");
  osb_buf j = {0};
  osb_buf_appendf(&j, "%s/%s", cwd, p);
  int rc = xd_path_normalize(j.data ? j.data : "/", 0, out);
  osb_buf_free(&j);
  return rc;
}

int xd_expand_abs_path(const char *p, char *const *envp, const char *workspace, char **abs, char **err) {
  osb_buf x = {0}, e = {0}, joined = {0}, out = {0};
  int rc = -1;
  *abs = *err = NULL;
  if (xd_expand_path(p, envp, &x, &e) != 0) {
    if (e.len && (*err = osb_buf_steal(&e, NULL)) != NULL) rc = 1;
    goto done;
  }
  if (x.data && x.data[0] == '/') rc = osb_buf_append_str(&joined, x.data);
  else rc = osb_buf_appendf(&joined, "%s/%s", workspace, x.data ? x.data : "");
  if (rc == 0) rc = xd_path_resolve(joined.data, &out);
  if (rc == 0 && !(*abs = osb_buf_steal(&out, NULL))) rc = -1;
done:
  osb_buf_free(&x);
  osb_buf_free(&e);
  osb_buf_free(&joined);
  osb_buf_free(&out);
  return rc;
}


long xd_unmark_nul(const char *s, const char *nul, osb_buf *out) {
  size_t ml = strlen(nul);
  long n = 0;
  const char *p = s;
  if (ml > 0) {
    const char *hit;
    while ((hit = strstr(p, nul)) != NULL) {
      if (osb_buf_append(out, p, (size_t)(hit - p)) != 0 || osb_buf_append(out, "", 1) != 0) return -1;
      n++;
      p = hit + ml;
    }
  }
  return osb_buf_append_str(out, p) != 0 ? -1 : n;
}

/* UTF-16 code units of the UTF-8 character starting with byte c (a stray byte counts as one U+FFFD). */
static size_t utf16_units(unsigned char c) { return c >= 0xf0 && c <= 0xf4 ? 2 : 1; }

static int inspect_one(const char *s, size_t len, osb_buf *out) {
  static const char hex[] = "0123456789ABCDEF";
  char q = '\'';
  if (memchr(s, '\'', len)) {
    if (!memchr(s, '"', len)) q = '"';
    else if (!memchr(s, '`', len) && !memmem(s, len, "${", 2)) q = '`';
  }
  if (osb_buf_append(out, &q, 1) != 0) return -1;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[5] = {'\\', 'x', 0, 0, 0};
    const char *e = NULL;
    size_t elen = 4;
    int c1 = c == 0xc2 && i + 1 < len && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f;
    if (c1) c = (unsigned char)s[++i]; /* a C1 control character, escaped as \xHH like the C0 ones */
    if (c < 0x20 || c == 0x7f || c1) {
      e = esc;
      esc[2] = hex[c >> 4];
      esc[3] = hex[c & 15];
      if (c == '\b') e = "\\b", elen = 2;
      else if (c == '\t') e = "\\t", elen = 2;
      else if (c == '\n') e = "\\n", elen = 2;
      else if (c == '\f') e = "\\f", elen = 2;
      else if (c == '\r') e = "\\r", elen = 2;
    } else if (c == '\\') {
      e = "\\\\", elen = 2;
    } else if (c == '\'' && q == '\'') {
      e = "\\'", elen = 2;
    }
    if (e ? osb_buf_append(out, e, elen) : osb_buf_append(out, &s[i], 1)) return -1;
  }
  return osb_buf_append(out, &q, 1);
}

int xd_js_inspect_str(const char *s, size_t len, osb_buf *out) {
  osb_buf t = {0};
  size_t units = 0;
  for (size_t i = 0; i < len; i++) {
    if (((unsigned char)s[i] & 0xc0) != 0x80) units += utf16_units((unsigned char)s[i]);
  }
  int rc = 0;
  if (units > 124 && memchr(s, '\n', len)) { /* a long text is split after each newline, the pieces joined by + */
    for (size_t at = 0; at < len && rc == 0;) {
      const char *nl = memchr(s + at, '\n', len - at);
      size_t end = nl ? (size_t)(nl - s) + 1 : len;
      if (at > 0) rc = osb_buf_append_str(&t, " +\n  ");
      if (rc == 0) rc = inspect_one(s + at, end - at, &t);
      at = end;
    }
  } else {
    rc = inspect_one(s, len, &t);
  }
  if (rc == 0) { /* Node's error texts keep the first 128 characters of it, then "..." */
    size_t u = 0, i = 0;
    while (i < t.len) {
      size_t w = utf16_units((unsigned char)t.data[i]), step = 1;
      while (i + step < t.len && ((unsigned char)t.data[i + step] & 0xc0) == 0x80) step++;
      if (u + w > 128) break;
      u += w;
      i += step;
    }
    rc = osb_buf_append(out, t.data ? t.data : "", i);
    if (rc == 0 && i < t.len) rc = osb_buf_append_str(out, "...");
  }
  osb_buf_free(&t);
  return rc;
}

char *xd_decode_segment(const char *s, size_t len) {
  char *out = malloc(len + 1);
  if (!out) return NULL;
  size_t n = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '%' && i + 2 < len && isxdigit((unsigned char)s[i + 1]) && isxdigit((unsigned char)s[i + 2])) {
      char hex[3] = {s[i + 1], s[i + 2], 0};
      out[n++] = (char)strtol(hex, NULL, 16);
      i += 2;
    } else {
      out[n++] = s[i];
    }
  }
  out[n] = 0;
  return out;
}

int xd_json_parse(const char *body, size_t len, cJSON **out, osb_buf *msg) {
  const char *end = NULL;
  cJSON *b = cJSON_ParseWithLengthOpts(body, len, &end, 0);
  if (b) {
    const char *p = end;
    while (p < body + len && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p < body + len) { /* JSON.parse refuses anything after the value */
      cJSON_Delete(b);
      b = NULL;
      end = p;
    }
  } else {
    end = cJSON_GetErrorPtr();
  }
  *out = b;
  if (b) return 0;
  syntax_text(body, len, end, msg);
  return -1;
}

void xd_random16(unsigned char b[16]) {
  size_t got = 0;
  while (got < 16) {
    ssize_t r = getrandom(b + got, 16 - got, 0);
    if (r > 0) got += (size_t)r;
    else if (errno != EINTR) break;
  }
  if (got < 16) { /* no getrandom: the clock, pid and a counter, still unique per process */
    static uint64_t seq;
    uint64_t t = uv_hrtime() ^ ((uint64_t)getpid() << 40);
    seq++;
    memcpy(b, &t, 8);
    memcpy(b + 8, &seq, 8);
  }
}
