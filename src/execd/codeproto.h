/* The code-interpreter kernel protocol, execd's side (codeproto.c), for code.c: the pure parsers of what a kernel
 * process (lib/dev-server/execd/code-*-kernel.*, run as the sandbox user: untrusted input) writes.
 *  - Control lines: the kernel's fd 3 carries JSON lines {"type":"ready"}, {"type":"result","data":{mime: value}},
 *    {"type":"error","ename","evalue","traceback"}, {"type":"done"[,"exit":N]}. xd_kline splits them, each line at
 *    most XD_KLINE_MAX bytes (a longer one is dropped whole and counted); xd_kmsg_parse reads one.
 *  - Output demux: the kernel's stdout and stderr carry the cell's output, then the cell's random marker. xd_kdemux
 *    forwards the bytes before the marker as text pieces (never splitting a UTF-8 character across two pieces, at
 *    most the size of one push plus 3 bytes each), holds back at most the marker's length - 1 bytes that may begin
 *    it, and reports the marker.
 * Ownership: each struct owns its buffers (free with its _free); the bytes given to a callback are valid during the
 * call. No state beyond the structs; one thread. */
#ifndef XD_CODEPROTO_H
#define XD_CODEPROTO_H
#include <stddef.h>
#include "core/buf.h"

/* Longest control line kept (a rich result, e.g. a base64 PNG): 32 MiB. */
#define XD_KLINE_MAX (32u * 1024u * 1024u)
/* Longest cell marker. */
#define XD_KMARKER_MAX 64u

typedef void (*xd_kline_fn)(void *arg, const char *line, size_t len);
typedef struct {
  osb_buf cur;
  size_t max;
  int dropping;       /* the current line went over max: skipped up to its newline */
  unsigned long dropped; /* lines dropped for their length */
} xd_kline;
void xd_kline_init(xd_kline *k, size_t max);
/* Splits on '\n' and calls fn for each complete line (without the newline). Returns 0, -1 on OOM (the current
 * line is then dropped). */
int xd_kline_push(xd_kline *k, const char *p, size_t n, xd_kline_fn fn, void *arg);
void xd_kline_free(xd_kline *k);

enum { XD_KMSG_OTHER = 0, XD_KMSG_READY, XD_KMSG_RESULT, XD_KMSG_ERROR, XD_KMSG_DONE };
struct cJSON;
/* Parses one control line: its kind (XD_KMSG_OTHER for a line that is not a JSON object with a known "type": to be
 * ignored) and, for RESULT and ERROR, *tree (the caller's, cJSON_Delete; NULL otherwise); for DONE, *exit and
 * *has_exit (an "exit" that is a number, truncated to int range). */
int xd_kmsg_parse(const char *line, size_t len, struct cJSON **tree, int *exit, int *has_exit);

/* Writes a JSON value the way Go's encoding/json writes it after decoding into interface{}: object keys sorted
 * (bytewise), strings with xd_json_str, numbers as float64 (JavaScript's shortest form), nesting bounded by cJSON's
 * parser. rename_text_plain: a top-level key "text/plain" is written as "text" (execd's result bundle). 0, -1 OOM. */
int xd_kjson_write(osb_buf *out, const struct cJSON *v, int rename_text_plain);

typedef void (*xd_kdemux_fn)(void *arg, const char *text, size_t len);
typedef struct {
  char marker[XD_KMARKER_MAX];
  size_t mlen;     /* 0: no cell (bytes are dropped) */
  char held[XD_KMARKER_MAX + 4];
  size_t nheld;    /* bytes that may begin the marker */
  char carry[4];
  size_t ncarry;   /* the start of a UTF-8 character cut by the end of a push */
  int done;        /* the marker was seen */
} xd_kdemux;
/* Starts a cell with this marker (mlen 1..XD_KMARKER_MAX), or none (marker NULL). */
void xd_kdemux_reset(xd_kdemux *d, const char *marker, size_t mlen);
/* Feeds bytes; fn gets the text before the marker. After the marker (d->done) bytes are dropped. */
void xd_kdemux_feed(xd_kdemux *d, const char *p, size_t n, xd_kdemux_fn fn, void *arg);
/* The stream ended before the marker: forwards what was held back; d->done is then set. */
void xd_kdemux_flush(xd_kdemux *d, xd_kdemux_fn fn, void *arg);

#endif
