/* execd event-stream parser (see events.h). */
#include "events.h"
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct osb_events {
  osb_buf line; /* the current partial line */
  osb_buf text; /* a decoded "text" with a NUL in it (see text_with_nul), valid during the callback */
  size_t max_line;
  osb_events_cb cb;
  void *ud;
  int state; /* OSB_EVENTS_OK / STOPPED / ERROR */
  char err[256];
  /* lenient mode: an oversized line (see events.h) */
  int lenient, over, over_text, has_name;
  osb_ev_type over_type;
  char over_name[32];
  unsigned long long over_bytes, dropped;
  int cnt; /* counting the rest of its text: 0 no (done), 1 in the string, 2 after '\\', 3 in "\\u" hex digits */
  int hex_left, low_pending;
  unsigned hex;
};

void osb_events_set_lenient(osb_events *p, int on) { p->lenient = on != 0; }

osb_events *osb_events_new(size_t max_line, osb_events_cb cb, void *ud) {
  osb_events *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->max_line = max_line ? max_line : OSB_EVENTS_DEFAULT_MAX_LINE;
  p->cb = cb;
  p->ud = ud;
  return p;
}

void osb_events_free(osb_events *p) {
  if (!p) return;
  osb_buf_free(&p->line);
  osb_buf_free(&p->text);
  free(p);
}

const char *osb_events_error(const osb_events *p) { return p->err; }

static int fail(osb_events *p, const char *msg, const char *line, size_t len) {
  char snippet[64];
  size_t n = len < 40 ? len : 40;
  size_t j = 0;
  for (size_t i = 0; i < n && j < sizeof snippet - 1; i++) { /* printable ASCII only */
    unsigned char c = (unsigned char)line[i];
    snippet[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  snippet[j] = 0;
  if (line && len)
    snprintf(p->err, sizeof p->err, "%s: %s%s", msg, snippet, len > n ? "..." : "");
  else
    snprintf(p->err, sizeof p->err, "%s", msg);
  p->state = OSB_EVENTS_ERROR;
  return OSB_EVENTS_ERROR;
}

static const char *str_field(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num_field(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const struct {
  const char *name;
  osb_ev_type type;
} TYPES[] = {
    {"init", OSB_EV_INIT},
    {"ping", OSB_EV_PING},
    {"stdout", OSB_EV_STDOUT},
    {"stderr", OSB_EV_STDERR},
    {"result", OSB_EV_RESULT},
    {"execution_count", OSB_EV_EXECUTION_COUNT},
    {"status", OSB_EV_STATUS},
    {"error", OSB_EV_ERROR},
    {"execution_complete", OSB_EV_COMPLETE},
};

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Index after the JSON string that starts at s[i] (a '"'), or len when it does not end. */
static size_t skip_string(const char *s, size_t len, size_t i) {
  for (i++; i < len; i++) {
    if (s[i] == '\\') i++;
    else if (s[i] == '"') return i + 1;
  }
  return len;
}

static int hex4(const char *s, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return -1;
  }
  *out = v;
  return 0;
}

/* Decodes the JSON string body s[0..n) (between the quotes) into out (room for n bytes; decoded is never longer).
 * Returns the decoded length, or -1 on a malformed escape. */
static long decode_string(const char *s, size_t n, char *out) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] != '\\') {
      out[o++] = s[i];
      continue;
    }
    if (++i >= n) return -1;
    switch (s[i]) {
      case 'b': out[o++] = '\b'; break;
      case 'f': out[o++] = '\f'; break;
      case 'n': out[o++] = '\n'; break;
      case 'r': out[o++] = '\r'; break;
      case 't': out[o++] = '\t'; break;
      case 'u': {
        unsigned cp, lo;
        if (i + 4 >= n || hex4(s + i + 1, &cp) != 0) return -1;
        i += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
          if (i + 6 >= n || s[i + 1] != '\\' || s[i + 2] != 'u' || hex4(s + i + 3, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
            return -1;
          i += 6;
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return -1;
        }
        if (cp < 0x80) {
          out[o++] = (char)cp;
        } else if (cp < 0x800) {
          out[o++] = (char)(0xC0 | (cp >> 6));
          out[o++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
          out[o++] = (char)(0xE0 | (cp >> 12));
          out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
          out[o++] = (char)(0x80 | (cp & 0x3F));
        } else {
          out[o++] = (char)(0xF0 | (cp >> 18));
          out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
          out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
          out[o++] = (char)(0x80 | (cp & 0x3F));
        }
        break;
      }
      default: out[o++] = s[i]; break; /* \" \\ \/ */
    }
  }
  return (long)o;
}

/* True when the raw JSON text s[0..n) has a "\u0000" escape (not one whose backslash is itself escaped). */
static int has_nul_escape(const char *s, size_t n) {
  for (size_t k = 0; k < n; k++) {
    if (s[k] != '\\') continue;
    if (k + 6 <= n && memcmp(s + k + 1, "u0000", 5) == 0) return 1;
    k++;
  }
  return 0;
}

/* cJSON decodes "\u0000" into a NUL inside a C string, so a text with one would end there. When the raw value of
 * the object's first top-level "text" member has such an escape, it is decoded here instead, into p->text (a line
 * cJSON accepted, so the value is well-formed; a decoded string is never longer than its raw form). Returns 1 when
 * p->text / *out_len hold the text, 0 when cJSON's string is complete, -1 when out of memory. */
static int text_with_nul(osb_events *p, const char *s, size_t len, size_t *out_len) {
  int depth = 0;
  for (size_t i = 0; i < len;) {
    char c = s[i];
    if (c != '"') {
      if (c == '{' || c == '[') depth++;
      else if (c == '}' || c == ']') depth--;
      i++;
      continue;
    }
    size_t after = skip_string(s, len, i);
    if (depth != 1 || after - i != 6 || memcmp(s + i, "\"text\"", 6) != 0) {
      i = after;
      continue;
    }
    size_t j = after;
    while (j < len && is_ws(s[j])) j++;
    if (j >= len || s[j] != ':') { /* the string "text" as a value */
      i = after;
      continue;
    }
    for (j++; j < len && is_ws(s[j]); j++) {}
    if (j >= len || s[j] != '"') return 0;
    size_t vend = skip_string(s, len, j);
    if (vend - j < 2) return 0;
    const char *body = s + j + 1;
    size_t n = vend - j - 2;
    if (!has_nul_escape(body, n)) return 0;
    osb_buf_reset(&p->text);
    if (osb_buf_reserve_exact(&p->text, n) != 0) return -1;
    long got = decode_string(body, n, p->text.data);
    if (got < 0) return 0;
    p->text.len = (size_t)got;
    p->text.data[got] = '\0';
    *out_len = (size_t)got;
    return 1;
  }
  return 0;
}

/* ---- lenient mode: oversized lines ---- */

static size_t put_utf8(char *out, unsigned cp) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Decodes the start of a JSON string body s[0..n) into out (room for n bytes) up to its closing quote (*closed = 1),
 * the end of s, or an escape that is cut off or malformed there. *consumed = raw bytes decoded. */
static size_t decode_partial(const char *s, size_t n, char *out, size_t *consumed, int *closed) {
  size_t o = 0, i = 0;
  *closed = 0;
  while (i < n) {
    if (s[i] == '"') {
      *closed = 1;
      break;
    }
    if (s[i] != '\\') {
      out[o++] = s[i++];
      continue;
    }
    if (i + 1 >= n) break;
    char e = s[i + 1];
    if (e != 'u') {
      out[o++] = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
      i += 2;
      continue;
    }
    unsigned cp, lo;
    size_t step = 6;
    if (i + 6 > n || hex4(s + i + 2, &cp) != 0) break;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (i + 12 > n || s[i + 6] != '\\' || s[i + 7] != 'u' || hex4(s + i + 8, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
        break;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      step = 12;
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      break;
    }
    o += put_utf8(out + o, cp); /* never longer than its escape */
    i += step;
  }
  *consumed = i;
  return o;
}

/* Counts the decoded bytes of the rest of an oversized line's text, one raw byte at a time. */
static void count_text(osb_events *p, const char *s, size_t n) {
  for (size_t i = 0; i < n && p->cnt; i++) {
    unsigned char c = (unsigned char)s[i];
    if (p->cnt == 1) {
      if (c == '\\') {
        p->cnt = 2;
      } else if (c == '"') {
        p->cnt = 0; /* the end of the text: the rest of the line is other fields */
      } else {
        p->dropped++;
        p->low_pending = 0;
      }
    } else if (p->cnt == 2) {
      if (c == 'u') {
        p->cnt = 3;
        p->hex_left = 4;
        p->hex = 0;
      } else {
        p->dropped++;
        p->low_pending = 0;
        p->cnt = 1;
      }
    } else {
      unsigned v = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 0;
      p->hex = (p->hex << 4) | v;
      if (--p->hex_left > 0) continue;
      unsigned cp = p->hex;
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        p->dropped += 4; /* the pair's character */
        p->low_pending = 1;
      } else if (cp >= 0xDC00 && cp <= 0xDFFF && p->low_pending) {
        p->low_pending = 0;
      } else {
        p->low_pending = 0;
        p->dropped += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
      }
      p->cnt = 1;
    }
  }
}

/* The kept prefix of an oversized line (p->line, max_line bytes) is in: find its "type" and, for stdout/stderr, the
 * decodable start of its "text" (into p->text); then count the rest of the text as it streams by. */
static int begin_oversized(osb_events *p) {
  const char *s = p->line.data;
  size_t len = p->line.len;
  p->over = 1;
  p->over_bytes = len;
  p->over_text = p->has_name = 0;
  p->over_type = OSB_EV_OVERSIZED;
  p->dropped = 0;
  p->cnt = p->low_pending = 0;
  while (len && is_ws(*s)) s++, len--;
  if (len >= 5 && memcmp(s, "data:", 5) == 0) {
    s += 5, len -= 5;
    while (len && is_ws(*s)) s++, len--;
  }
  size_t text_at = 0;
  int depth = 0;
  for (size_t i = 0; i < len;) {
    char c = s[i];
    if (c != '"') {
      if (c == '{' || c == '[') depth++;
      else if (c == '}' || c == ']') depth--;
      i++;
      continue;
    }
    size_t after = skip_string(s, len, i);
    if (after >= len) break; /* a string cut off at the end of the prefix */
    size_t j = after;
    while (j < len && is_ws(s[j])) j++;
    if (depth != 1 || j >= len || s[j] != ':') { /* not a key of the event object */
      i = after;
      continue;
    }
    const char *key = s + i + 1;
    size_t klen = after - i - 2;
    for (j++; j < len && is_ws(s[j]); j++) {}
    if (j >= len) break;
    if (s[j] != '"') {
      i = j;
      continue;
    }
    size_t vend = skip_string(s, len, j);
    if (klen == 4 && memcmp(key, "type", 4) == 0 && vend < len && vend - j - 2 < sizeof p->over_name &&
        !memchr(s + j + 1, '\\', vend - j - 2)) {
      memcpy(p->over_name, s + j + 1, vend - j - 2);
      p->over_name[vend - j - 2] = 0;
      p->has_name = 1;
      for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++)
        if (strcmp(TYPES[t].name, p->over_name) == 0) p->over_type = TYPES[t].type;
    } else if (klen == 4 && memcmp(key, "text", 4) == 0 && !text_at) {
      text_at = j + 1;
    }
    i = vend;
  }
  if ((p->over_type != OSB_EV_STDOUT && p->over_type != OSB_EV_STDERR) || !text_at) {
    p->over_type = OSB_EV_OVERSIZED;
    return OSB_EVENTS_OK;
  }
  size_t n = len - text_at, consumed = 0;
  int closed = 0;
  osb_buf_reset(&p->text);
  if (osb_buf_reserve_exact(&p->text, n + 1) != 0) return fail(p, "out of memory", NULL, 0);
  size_t o = decode_partial(s + text_at, n, p->text.data, &consumed, &closed);
  size_t full = o;
  size_t j = o; /* a character cut off at the end is not delivered: its bytes count as dropped */
  while (j > 0 && o - j < 3 && ((unsigned char)p->text.data[j - 1] & 0xC0) == 0x80) j--;
  if (j > 0) {
    unsigned char lead = (unsigned char)p->text.data[j - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need > o - (j - 1)) o = j - 1;
  }
  p->text.len = o;
  p->text.data[o] = '\0';
  p->dropped = full - o;
  p->over_text = 1;
  if (!closed) {
    p->cnt = 1;
    count_text(p, s + text_at + consumed, n - consumed);
  }
  return OSB_EVENTS_OK;
}

/* The oversized line has ended: deliver it. */
static int end_oversized(osb_events *p) {
  osb_event ev;
  memset(&ev, 0, sizeof ev);
  ev.execution_time = ev.execution_count = ev.timestamp = -1;
  ev.type = p->over_type;
  ev.type_name = p->has_name ? p->over_name : NULL;
  ev.line_bytes = p->over_bytes;
  if (p->over_text) {
    ev.text = p->text.data;
    ev.text_len = p->text.len;
    ev.text_dropped = p->dropped;
  }
  p->over = 0;
  p->cnt = 0;
  osb_buf_reset(&p->line);
  if (p->cb(p->ud, &ev)) {
    p->state = OSB_EVENTS_STOPPED;
    return OSB_EVENTS_STOPPED;
  }
  return OSB_EVENTS_OK;
}

static int starts_with(const char *s, size_t len, const char *prefix) {
  size_t n = strlen(prefix);
  return len >= n && memcmp(s, prefix, n) == 0;
}

/* Parses one complete line (without its "\n"). */
static int handle_line(osb_events *p, const char *s, size_t len) {
  if (len && s[len - 1] == '\r') len--;
  while (len && (*s == ' ' || *s == '\t')) s++, len--;
  if (len == 0) return OSB_EVENTS_OK;
  if (s[0] == ':' || starts_with(s, len, "event:") || starts_with(s, len, "id:") || starts_with(s, len, "retry:"))
    return OSB_EVENTS_OK;
  if (starts_with(s, len, "data:")) {
    s += 5, len -= 5;
    while (len && (*s == ' ' || *s == '\t')) s++, len--;
    if (len == 0) return OSB_EVENTS_OK;
  }
  const char *end = NULL;
  cJSON *o = cJSON_ParseWithLengthOpts(s, len, &end, 0);
  if (!o) return fail(p, "malformed event (not JSON)", s, len);
  while (end && end < s + len && (*end == ' ' || *end == '\t' || *end == '\r')) end++;
  if (end && end < s + len) {
    cJSON_Delete(o);
    return fail(p, "malformed event (trailing data)", s, len);
  }
  if (!cJSON_IsObject(o)) {
    cJSON_Delete(o);
    return fail(p, "malformed event (not an object)", s, len);
  }
  osb_event ev;
  memset(&ev, 0, sizeof ev);
  ev.json = o;
  ev.execution_time = num_field(o, "execution_time");
  ev.execution_count = num_field(o, "execution_count");
  ev.timestamp = num_field(o, "timestamp");
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
  if (type && !cJSON_IsString(type)) {
    cJSON_Delete(o);
    return fail(p, "malformed event (type is not a string)", s, len);
  }
  if (!type) {
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(o, "error");
    const char *code = str_field(o, "code");
    const char *msg = str_field(o, "message");
    if (!code && !msg && cJSON_IsString(err)) msg = err->valuestring;
    if (!code && !msg) {
      ev.type = OSB_EV_UNKNOWN; /* a type-less object that is not an error: ignored by callers */
    } else {
      ev.type = OSB_EV_STREAM_ERROR;
      ev.code = code ? code : "";
      ev.message = msg ? msg : "";
    }
  } else {
    ev.type_name = type->valuestring;
    ev.type = OSB_EV_UNKNOWN;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
      if (strcmp(TYPES[i].name, type->valuestring) == 0) ev.type = TYPES[i].type;
    ev.text = str_field(o, "text");
    if (ev.text) {
      ev.text_len = strlen(ev.text);
      int has_nul = has_nul_escape(s, len) ? text_with_nul(p, s, len, &ev.text_len) : 0;
      if (has_nul < 0) {
        cJSON_Delete(o);
        return fail(p, "out of memory", NULL, 0);
      }
      if (has_nul) ev.text = p->text.data;
    }
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(o, "results");
    ev.results = cJSON_IsObject(res) ? res : NULL;
    if (ev.type == OSB_EV_ERROR) {
      const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
      if (!cJSON_IsObject(e)) {
        cJSON_Delete(o);
        return fail(p, "malformed error event (no error object)", s, len);
      }
      ev.ename = str_field(e, "ename");
      ev.evalue = str_field(e, "evalue");
      const cJSON *tb = cJSON_GetObjectItemCaseSensitive(e, "traceback");
      ev.traceback = cJSON_IsArray(tb) ? tb : NULL;
    }
  }
  int stop = p->cb(p->ud, &ev);
  cJSON_Delete(o);
  if (stop) {
    p->state = OSB_EVENTS_STOPPED;
    return OSB_EVENTS_STOPPED;
  }
  return OSB_EVENTS_OK;
}

int osb_events_feed(osb_events *p, const char *data, size_t len) {
  if (p->state != OSB_EVENTS_OK) return p->state;
  while (len) {
    const char *nl = memchr(data, '\n', len);
    size_t take = nl ? (size_t)(nl - data) : len;
    int rc;
    if (!p->over && p->line.len + take > p->max_line) {
      if (!p->lenient) return fail(p, "event line too long", NULL, 0);
      size_t room = p->max_line - p->line.len; /* keep the first max_line bytes, count the rest */
      if (osb_buf_append(&p->line, data, room) != 0) return fail(p, "out of memory", NULL, 0);
      rc = begin_oversized(p);
      if (rc != OSB_EVENTS_OK) return rc;
      data += room, len -= room, take -= room;
    }
    if (p->over) {
      count_text(p, data, take);
      p->over_bytes += take;
      if (!nl) return OSB_EVENTS_OK;
      rc = end_oversized(p);
    } else if (!nl) {
      if (osb_buf_append(&p->line, data, take) != 0) return fail(p, "out of memory", NULL, 0);
      return OSB_EVENTS_OK;
    } else if (p->line.len) { /* complete the buffered partial line */
      if (osb_buf_append(&p->line, data, take) != 0) return fail(p, "out of memory", NULL, 0);
      rc = handle_line(p, p->line.data, p->line.len);
      osb_buf_reset(&p->line);
    } else {
      rc = handle_line(p, data, take); /* parse in place: no copy for whole lines */
    }
    if (rc != OSB_EVENTS_OK) return rc;
    data += take + 1;
    len -= take + 1;
  }
  return OSB_EVENTS_OK;
}

int osb_events_finish(osb_events *p) {
  if (p->state != OSB_EVENTS_OK) return p->state;
  if (p->over) return end_oversized(p);
  if (p->line.len == 0) return OSB_EVENTS_OK;
  int rc = handle_line(p, p->line.data, p->line.len);
  osb_buf_reset(&p->line);
  return rc;
}
