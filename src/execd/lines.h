/* Line splitter for command output (lines.c), the rules of the Node execd's lines.js: a byte stream is split on \n,
 * \r and \r\n (a \r\n across two pushes counts once); each line is delivered without its terminator, an empty line
 * as "\n", a trailing partial line only by xd_lines_flush. A line longer than max_line bytes is delivered in pieces
 * of at most max_line bytes, each cut back to a UTF-8 character boundary, so memory stays bounded. When the
 * callback returns 0 (the consumer is full) the splitter stops after that line and keeps the rest of the pushed
 * bytes (copied) until xd_lines_resume. The bytes delivered are raw (any bytes; the JSON writer replaces what is
 * not UTF-8). Owner: one thread; the splitter owns its buffers; the text passed to fn is valid during the call. */
#ifndef XD_LINES_H
#define XD_LINES_H
#include <stddef.h>
#include "core/buf.h"

/* Longest line delivered as one piece (1 MiB). */
#define XD_MAX_LINE_BYTES (1024u * 1024u)

/* Returns 1 to go on, 0 to stop after this line. */
typedef int (*xd_line_fn)(void *arg, const char *text, size_t len);

typedef struct {
  xd_line_fn fn;
  void *arg;
  size_t max_line;
  osb_buf cur;  /* bytes of the current, unterminated line */
  osb_buf held; /* pushed bytes not yet split (after the callback asked to stop) */
  int pending_cr;
  int discarding;
  int blocked;
} xd_lines;

void xd_lines_init(xd_lines *l, size_t max_line, xd_line_fn fn, void *arg);
/* Splits and delivers; keeps what follows a stop. Returns 0, -1 when out of memory (bytes lost). */
int xd_lines_push(xd_lines *l, const char *p, size_t n);
/* Delivers what was kept since the callback asked to stop (it may stop again). */
int xd_lines_resume(xd_lines *l);
/* Drops everything kept and everything pushed from now on (nobody listens any more). */
void xd_lines_discard(xd_lines *l);
/* The output ended: delivers everything kept and the partial line, whatever the callback returns. */
void xd_lines_flush(xd_lines *l);
/* 1 while the consumer asked to stop and bytes wait. */
int xd_lines_blocked(const xd_lines *l);
void xd_lines_free(xd_lines *l);

#endif
