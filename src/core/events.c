/* execd event-stream parser (see events.h). */
#include "events.h"
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct osb_events {
  osb_buf line; /* the current partial line */
  size_t max_line;
  osb_events_cb cb;
  void *ud;
  int state; /* OSB_EVENTS_OK / STOPPED / ERROR */
  char err[256];
};

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
    if (ev.text) ev.text_len = strlen(ev.text);
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
    if (p->line.len + take > p->max_line) return fail(p, "event line too long", NULL, 0);
    int rc;
    if (!nl) {
      if (osb_buf_append(&p->line, data, take) != 0) return fail(p, "out of memory", NULL, 0);
      return OSB_EVENTS_OK;
    }
    if (p->line.len) { /* complete the buffered partial line */
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
  if (p->line.len == 0) return OSB_EVENTS_OK;
  int rc = handle_line(p, p->line.data, p->line.len);
  osb_buf_reset(&p->line);
  return rc;
}
