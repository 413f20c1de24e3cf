/* The request rules of execd's commands API (cmdreq.h): body validation, timeout duration, path expansion. */
#include "cmdreq.h"

#include <errno.h>
#include <math.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"

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

int xd_cmd_parse(const char *body, size_t len, cJSON **out, osb_buf *msg) {
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
  if (!b) return syntax_text(body, len, end, msg), -1;
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

static const char *home_dir(void) {
  const char *h = getenv("HOME");
  if (h && *h) return h;
  struct passwd *pw = getpwuid(getuid());
  return pw && pw->pw_dir ? pw->pw_dir : "/";
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
    rc = osb_buf_append_str(out, home_dir());
  } else if (strncmp(e, "~/", 2) == 0) {
    osb_buf j = {0};
    osb_buf_appendf(&j, "%s/%s", home_dir(), e + 2);
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

