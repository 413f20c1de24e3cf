/* execd event-stream parser: incremental over arbitrary chunk boundaries. Lines are split on "\n" (a trailing
 * "\r" is removed), blank lines are skipped, an optional "data:" prefix is stripped, "event:", "id:", "retry:"
 * and ":" lines are ignored; every other line must be one JSON object, dispatched by its "type". A type-less
 * {"code","message"} (or {"error": …}) object is a stream error event. A "text" with "\u0000" escapes keeps its NUL
 * bytes (text_len counts them; cJSON alone would end the string there). Nothing from the network is trusted:
 * a line longer than max_line, a non-JSON line or a non-object line is a protocol error. Not thread-safe.
 * Lenient mode (osb_events_set_lenient, used by the code interpreter, where one event can carry megabytes: a cell's
 * whole print, an image): a line longer than max_line is not an error. Its first max_line bytes are kept; when it is
 * a "stdout"/"stderr" event whose "text" starts in them, the decodable part of the text there is delivered as that
 * event with text_dropped = the decoded bytes of the rest (counted as the line streams by, never stored); any other
 * oversized line is delivered as OSB_EV_OVERSIZED (type_name sniffed from the kept bytes, or NULL). */
#ifndef OSB_EVENTS_H
#define OSB_EVENTS_H
#include <stddef.h>
#include <cjson/cJSON.h>

typedef enum {
  OSB_EV_INIT,
  OSB_EV_PING,
  OSB_EV_STDOUT,
  OSB_EV_STDERR,
  OSB_EV_RESULT,
  OSB_EV_EXECUTION_COUNT,
  OSB_EV_STATUS,
  OSB_EV_ERROR,
  OSB_EV_COMPLETE,     /* execution_complete */
  OSB_EV_STREAM_ERROR, /* type-less {code,message} / {error} */
  OSB_EV_UNKNOWN,      /* an unknown "type", or a type-less non-error object (forward compatibility: ignore it) */
  OSB_EV_OVERSIZED     /* lenient mode: a line over max_line that is not stdout/stderr (see above) */
} osb_ev_type;

/* One event. Every pointer is borrowed: valid only during the callback. Absent fields are NULL / -1. */
typedef struct {
  osb_ev_type type;
  const char *type_name;  /* the "type" string, NULL for stream errors */
  const char *text;       /* "text" (init/ping/stdout/stderr/status), NULL if absent */
  size_t text_len;
  double execution_time;  /* ms, -1 if absent */
  double execution_count; /* -1 if absent */
  double timestamp;       /* unix ms, -1 if absent */
  const char *ename;      /* error: "error.ename" */
  const char *evalue;     /* error: "error.evalue" (a decimal exit code for commands, or a message) */
  const cJSON *traceback; /* error: "error.traceback" array, or NULL */
  const cJSON *results;   /* result: "results" object, or NULL */
  const char *code;       /* stream error: "code" ("" if absent) */
  const char *message;    /* stream error: "message" / "error" text ("" if absent) */
  const cJSON *json;      /* the whole object; NULL for an oversized line (lenient mode) */
  unsigned long long text_dropped; /* lenient mode, oversized stdout/stderr: decoded text bytes not delivered */
  unsigned long long line_bytes;   /* lenient mode, oversized line: its length in bytes (0 otherwise) */
} osb_event;

/* Returns 0 to continue, non-zero to stop parsing (osb_events_feed then returns OSB_EVENTS_STOPPED). */
typedef int (*osb_events_cb)(void *ud, const osb_event *ev);

enum { OSB_EVENTS_OK = 0, OSB_EVENTS_STOPPED = 1, OSB_EVENTS_ERROR = -1 };

typedef struct osb_events osb_events;

#define OSB_EVENTS_DEFAULT_MAX_LINE ((size_t)16 * 1024 * 1024)

/* Returns a new parser (caller frees it with osb_events_free) or NULL when out of memory. */
osb_events *osb_events_new(size_t max_line, osb_events_cb cb, void *ud);
/* Lenient mode on/off (see above); set it before the first feed. */
void osb_events_set_lenient(osb_events *p, int on);
/* Feeds a chunk. Returns OSB_EVENTS_OK, OSB_EVENTS_STOPPED (the callback asked to stop; later feeds are
 * ignored and return STOPPED too) or OSB_EVENTS_ERROR (see osb_events_error; later feeds return ERROR). */
int osb_events_feed(osb_events *p, const char *data, size_t len);
/* End of stream: parses a final line that had no "\n". Same return values as feed. */
int osb_events_finish(osb_events *p);
/* The protocol error message (static storage inside p), "" when none. */
const char *osb_events_error(const osb_events *p);
void osb_events_free(osb_events *p);

#endif
