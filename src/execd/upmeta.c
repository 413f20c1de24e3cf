/* The upload's metadata as Go's execd reads it (upmeta.h). */
#include "upmeta.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json.h"

/* Go's UnmarshalTypeError value kind of a JSON value */
static int json_kind(osb_buf *out, const cJSON *v) {
  if (cJSON_IsString(v)) return osb_buf_append_str(out, "string");
  if (cJSON_IsBool(v)) return osb_buf_append_str(out, "bool");
  if (cJSON_IsArray(v)) return osb_buf_append_str(out, "array");
  if (cJSON_IsObject(v)) return osb_buf_append_str(out, "object");
  if (osb_buf_append_str(out, "number ") != 0) return -1;
  return xd_js_number(out, v->valuedouble);
}

/* ---- Go's encoding/json syntax check (scanner.go's states), for the text of an invalid metadata part ---- */

enum { PS_OBJ_KEY, PS_OBJ_VALUE, PS_ARR };
enum {
  J_BEGIN_VALUE_OR_EMPTY, J_BEGIN_VALUE, J_BEGIN_STRING_OR_EMPTY, J_BEGIN_STRING, J_END_VALUE, J_END_TOP, J_STR,
  J_STR_ESC, J_STR_U, J_NEG, J_ONE, J_ZERO, J_DOT, J_DOT0, J_E, J_ESIGN, J_E0, J_LIT
};
#define GO_JSON_MAX_DEPTH 10000

typedef struct {
  int step;
  char *stack; /* parse states, GO_JSON_MAX_DEPTH + 1 at most */
  size_t depth;
  int end_top;
  int u_left;       /* hex digits left in a \u escape */
  const char *lit;  /* the rest of a literal (true, false, null) expected, and its name */
  const char *lit_name;
  int err;          /* an error was recorded */
  osb_buf *msg;
} goscan;

static int is_jspace(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* quoteChar: the byte as Go's strconv.Quote writes string(rune(c)), in single quotes */
static void quote_char(osb_buf *o, unsigned char c) {
  static const char hex[] = "0123456789abcdef";
  if (c == '\'') {
    osb_buf_append_str(o, "'\\''");
    return;
  }
  if (c == '"') {
    osb_buf_append_str(o, "'\"'");
    return;
  }
  osb_buf_append_str(o, "'");
  const char *esc = c == '\a' ? "\\a" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                  : c == '\t' ? "\\t" : c == '\v' ? "\\v" : c == '\\' ? "\\\\" : NULL;
  if (esc) osb_buf_append_str(o, esc);
  else if (c < 0x20 || c == 0x7f) osb_buf_appendf(o, "\\x%c%c", hex[c >> 4], hex[c & 15]);
  else if (c < 0x80) osb_buf_append(o, &c, 1);
  else if (c < 0xa1 || c == 0xad) osb_buf_appendf(o, "\\u00%c%c", hex[c >> 4], hex[c & 15]); /* not printable */
  else {
    char u[2] = {(char)(0xc0 | (c >> 6)), (char)(0x80 | (c & 0x3f))};
    osb_buf_append(o, u, 2);
  }
  osb_buf_append_str(o, "'");
}

static void gs_error(goscan *g, unsigned char c, const char *context) {
  g->err = 1;
  osb_buf_append_str(g->msg, "invalid character ");
  quote_char(g->msg, c);
  osb_buf_appendf(g->msg, " %s", context);
}

static void gs_push(goscan *g, unsigned char c, char ps, int next) {
  if (g->depth >= GO_JSON_MAX_DEPTH) {
    gs_error(g, c, "exceeded max depth");
    return;
  }
  g->stack[g->depth++] = ps;
  g->step = next;
}

static void gs_pop(goscan *g) {
  g->depth--;
  if (g->depth == 0) {
    g->step = J_END_TOP;
    g->end_top = 1;
  } else {
    g->step = J_END_VALUE;
  }
}

static void gs_step(goscan *g, unsigned char c);

static void gs_end_value(goscan *g, unsigned char c) {
  if (g->depth == 0) {
    g->step = J_END_TOP;
    g->end_top = 1;
    if (!is_jspace(c)) gs_error(g, c, "after top-level value");
    return;
  }
  if (is_jspace(c)) {
    g->step = J_END_VALUE;
    return;
  }
  char *ps = &g->stack[g->depth - 1];
  if (*ps == PS_OBJ_KEY) {
    if (c == ':') {
      *ps = PS_OBJ_VALUE;
      g->step = J_BEGIN_VALUE;
    } else gs_error(g, c, "after object key");
  } else if (*ps == PS_OBJ_VALUE) {
    if (c == ',') {
      *ps = PS_OBJ_KEY;
      g->step = J_BEGIN_STRING;
    } else if (c == '}') gs_pop(g);
    else gs_error(g, c, "after object key:value pair");
  } else {
    if (c == ',') g->step = J_BEGIN_VALUE;
    else if (c == ']') gs_pop(g);
    else gs_error(g, c, "after array element");
  }
}

static void gs_begin_value(goscan *g, unsigned char c) {
  if (is_jspace(c)) return;
  switch (c) {
    case '{': gs_push(g, c, PS_OBJ_KEY, J_BEGIN_STRING_OR_EMPTY); return;
    case '[': gs_push(g, c, PS_ARR, J_BEGIN_VALUE_OR_EMPTY); return;
    case '"': g->step = J_STR; return;
    case '-': g->step = J_NEG; return;
    case '0': g->step = J_ZERO; return;
    case 't': g->step = J_LIT, g->lit = "rue", g->lit_name = "true"; return;
    case 'f': g->step = J_LIT, g->lit = "alse", g->lit_name = "false"; return;
    case 'n': g->step = J_LIT, g->lit = "ull", g->lit_name = "null"; return;
    default:
      if (c >= '1' && c <= '9') g->step = J_ONE;
      else gs_error(g, c, "looking for beginning of value");
  }
}

static int is_hex(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static void gs_step(goscan *g, unsigned char c) {
  int digit = c >= '0' && c <= '9';
  switch (g->step) {
    case J_BEGIN_VALUE_OR_EMPTY:
      if (is_jspace(c)) return;
      if (c == ']') gs_end_value(g, c);
      else gs_begin_value(g, c);
      return;
    case J_BEGIN_VALUE: gs_begin_value(g, c); return;
    case J_BEGIN_STRING_OR_EMPTY:
      if (is_jspace(c)) return;
      if (c == '}') {
        g->stack[g->depth - 1] = PS_OBJ_VALUE;
        gs_end_value(g, c);
        return;
      }
      /* fall through */
    case J_BEGIN_STRING:
      if (is_jspace(c)) return;
      if (c == '"') g->step = J_STR;
      else gs_error(g, c, "looking for beginning of object key string");
      return;
    case J_END_VALUE: gs_end_value(g, c); return;
    case J_END_TOP:
      if (!is_jspace(c)) gs_error(g, c, "after top-level value");
      return;
    case J_STR:
      if (c == '"') g->step = J_END_VALUE;
      else if (c == '\\') g->step = J_STR_ESC;
      else if (c < 0x20) gs_error(g, c, "in string literal");
      return;
    case J_STR_ESC:
      if (c && strchr("bfnrt\\/\"", c)) g->step = J_STR;
      else if (c == 'u') g->step = J_STR_U, g->u_left = 4;
      else gs_error(g, c, "in string escape code");
      return;
    case J_STR_U:
      if (!is_hex(c)) gs_error(g, c, "in \\u hexadecimal character escape");
      else if (--g->u_left == 0) g->step = J_STR;
      return;
    case J_NEG:
      if (c == '0') g->step = J_ZERO;
      else if (c >= '1' && c <= '9') g->step = J_ONE;
      else gs_error(g, c, "in numeric literal");
      return;
    case J_ONE:
      if (digit) return;
      /* fall through */
    case J_ZERO:
      if (c == '.') g->step = J_DOT;
      else if (c == 'e' || c == 'E') g->step = J_E;
      else gs_end_value(g, c);
      return;
    case J_DOT:
      if (digit) g->step = J_DOT0;
      else gs_error(g, c, "after decimal point in numeric literal");
      return;
    case J_DOT0:
      if (digit) return;
      if (c == 'e' || c == 'E') g->step = J_E;
      else gs_end_value(g, c);
      return;
    case J_E:
      if (c == '+' || c == '-') {
        g->step = J_ESIGN;
        return;
      }
      /* fall through */
    case J_ESIGN:
      if (digit) g->step = J_E0;
      else gs_error(g, c, "in exponent of numeric literal");
      return;
    case J_E0:
      if (!digit) gs_end_value(g, c);
      return;
    case J_LIT:
      if ((unsigned char)*g->lit == c) {
        if (!*++g->lit) g->step = J_END_VALUE;
      } else {
        char ctx[64];
        snprintf(ctx, sizeof ctx, "in literal %s (expecting '%c')", g->lit_name, *g->lit);
        gs_error(g, c, ctx);
      }
      return;
  }
}

/* json.Unmarshal's syntax check (checkValid) of text: 0 valid, 1 with Go's message in msg, -1 OOM */
int xd_go_json_check(const char *text, size_t len, osb_buf *msg) {
  goscan g = {0};
  g.step = J_BEGIN_VALUE;
  g.msg = msg;
  if (!(g.stack = malloc(GO_JSON_MAX_DEPTH))) return -1;
  for (size_t i = 0; i < len && !g.err; i++) gs_step(&g, (unsigned char)text[i]);
  if (!g.err && !g.end_top) {
    gs_step(&g, ' ');
    if (!g.err && !g.end_top) {
      g.err = 1;
      osb_buf_reset(msg);
      osb_buf_append_str(msg, "unexpected end of JSON input");
    }
  }
  free(g.stack);
  return g.err ? 1 : 0;
}

void xd_upmeta_free(xd_upmeta *m) {
  free(m->path);
  free(m->owner);
  free(m->group);
}

/* json.Unmarshal into model.FileMetadata (fields matched case-insensitively, the last one given wins, null leaves a
 * field alone). 0, or 1 with the 400's text in msg, -1 OOM. */
int xd_upmeta_read(const char *text, size_t len, xd_upmeta *md, osb_buf *msg) {
  memset(md, 0, sizeof *md);
  osb_buf syn = {0};
  int chk = xd_go_json_check(text, len, &syn);
  if (chk != 0) {
    int rc = chk < 0 || osb_buf_appendf(msg, "invalid metadata format. %s", syn.data ? syn.data : "") != 0 ? -1 : 1;
    osb_buf_free(&syn);
    return rc;
  }
  osb_buf_free(&syn);
  cJSON *root = cJSON_ParseWithLength(text, len);
  /* valid for Go; cJSON refuses deeper than its 1,000 levels */
  if (!root) return osb_buf_append_str(msg, "invalid metadata format. exceeded max depth") == 0 ? 1 : -1;
  int rc = 0;
  if (cJSON_IsNull(root)) goto out;
  if (!cJSON_IsObject(root)) {
    rc = osb_buf_append_str(msg, "invalid metadata format. json: cannot unmarshal ") || json_kind(msg, root) ||
                 osb_buf_append_str(msg, " into Go value of type model.FileMetadata")
             ? -1 : 1;
    goto out;
  }
  static const char *const names[] = {"path", "owner", "group", "mode"};
  for (const cJSON *f = root->child; f && rc == 0; f = f->next) {
    int which = -1;
    for (int i = 0; i < 4; i++)
      if (f->string && strcasecmp(f->string, names[i]) == 0) which = i;
    if (which < 0 || cJSON_IsNull(f)) continue;
    int ok = which == 3 ? cJSON_IsNumber(f) && xd_is_integer(f->valuedouble) && f->valuedouble >= -9.2e18 &&
                              f->valuedouble <= 9.2e18
                        : cJSON_IsString(f);
    if (!ok) {
      if (msg->len) continue; /* Go reports the first */
      rc = osb_buf_append_str(msg, "invalid metadata format. json: cannot unmarshal ") || json_kind(msg, f) ||
                   osb_buf_appendf(msg, " into Go struct field FileMetadata.%s of type %s", names[which],
                                   which == 3 ? "int" : "string")
               ? -1 : 0;
      continue;
    }
    if (which == 3) {
      md->mode = (long long)f->valuedouble;
      md->has_mode = md->mode != 0;
      continue;
    }
    char **slot = which == 0 ? &md->path : which == 1 ? &md->owner : &md->group;
    free(*slot);
    *slot = NULL;
    if (*f->valuestring && !(*slot = strdup(f->valuestring))) rc = -1; /* "" is not given (Go: owner != "") */
  }
  if (rc == 0 && msg->len) rc = 1;
out:
  if (rc == 0 && !md->path) rc = osb_buf_append_str(msg, "metadata path is empty") == 0 ? 1 : -1;
  cJSON_Delete(root);
  return rc;
}

/* strconv.ParseUint(s, 8, 32): 0 with *v, else 1 with Go's error text in msg ("invalid syntax", "value out of range") */
int xd_upmeta_octal(const char *s, unsigned long *v, osb_buf *msg) {
  unsigned long long n = 0;
  const char *why = *s ? NULL : "invalid syntax";
  for (const char *p = s; *p && !why; p++) {
    if (*p < '0' || *p > '7') why = "invalid syntax";
    else if ((n = n * 8 + (unsigned)(*p - '0')) > 0xffffffffull) why = "value out of range";
  }
  if (!why) {
    *v = (unsigned long)n;
    return 0;
  }
  return osb_buf_appendf(msg, "strconv.ParseUint: parsing \"%s\": %s", s, why) == 0 ? 1 : -1;
}

