/* What the C execd's event streams share (events.c): the JSON text of one execd stream event as Go's encoding/json
 * writes execd's ServerStreamEvent (field order type, text, execution_time, timestamp, error; empty fields left out),
 * the wall clock of its timestamps, Go's texts of a signal that ended a process and of a duration. Used by commands.c (/command)
 * and sessions.c (/session/{id}/run). No state; the caller owns every osb_buf. */
#ifndef XD_EVENTS_H
#define XD_EVENTS_H
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"

/* One event. text: NULL for none (text_len bytes, any bytes: xd_json_str escapes them); has_time: execution_time is
 * written (Go's omitempty: the caller leaves it out when it is 0); an error event when ename is set. */
typedef struct {
  const char *type;
  const char *text;
  size_t text_len;
  int has_time;
  uint64_t time;
  const char *ename, *evalue, *traceback;
  size_t error_len; /* of evalue and traceback when they are the same text with NUL bytes (else 0: strlen) */
} xd_event;

/* Appends the event's JSON followed by the blank line ("\n\n") of execd's framing, timestamped now. 0, -1 on OOM. */
int xd_event_append(osb_buf *b, const xd_event *ev);

/* Milliseconds since the epoch (CLOCK_REALTIME), as Go's time.Now().UnixMilli(). */
uint64_t xd_wall_ms(void);

/* The text of the signal in a wait status's error, as in "signal: killed" (Go's names; a signal without one is its
 * SIG name, a real-time one its number, as the Node execd wrote them). buf (cap bytes) holds a number's text. */
const char *xd_signal_text(int sig, char *buf, size_t cap);

/* Go's time.Duration.String() of ns nanoseconds: "0s", "300ms", "1s", "1.5s", "1m30s", "24h0m0s", "1.5\u00b5s" (the
 * micro sign in UTF-8), "-2s". out: at most 33 bytes with the NUL. */
void xd_go_duration_text(int64_t ns, char out[40]);

#endif
