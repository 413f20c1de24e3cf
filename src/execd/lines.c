/* Line splitter for command output (lines.h). */
#include "lines.h"
#include "utf8.h"

#include <stdlib.h>
#include <string.h>

void xd_lines_init(xd_lines *l, size_t max_line, xd_line_fn fn, void *arg) {
  memset(l, 0, sizeof *l);
  l->fn = fn;
  l->arg = arg;
  l->max_line = max_line ? max_line : XD_MAX_LINE_BYTES;
}

static void deliver(xd_lines *l, const char *p, size_t n) {
  if (l->fn(l->arg, p, n) == 0) l->blocked = 1;
}

/* Appends bytes of the current line; delivers max_line pieces while more than max_line bytes are held. */
static int add(xd_lines *l, const char *p, size_t n) {
  if (n && osb_buf_append(&l->cur, p, n) != 0) return -1;
  while (l->cur.len > l->max_line) {
    size_t cut = xd_utf8_cut((const unsigned char *)l->cur.data, l->max_line);
    deliver(l, l->cur.data, cut);
    if (l->discarding) return 0;
    osb_buf_consume(&l->cur, cut);
  }
  return 0;
}

static void emit(xd_lines *l) {
  if (l->cur.len == 0) {
    deliver(l, "\n", 1);
  } else {
    /* the callback may push or discard; deliver from a stolen buffer */
    size_t len;
    char *text = osb_buf_steal(&l->cur, &len);
    if (!text) return;
    deliver(l, text, len);
    free(text);
  }
}

static const char *next_term(const char *p, const char *end) {
  for (; p < end; p++) {
    if (*p == '\n' || *p == '\r') return p;
  }
  return NULL;
}

int xd_lines_push(xd_lines *l, const char *p, size_t n) {
  if (l->discarding || n == 0) return 0;
  if (l->blocked) return osb_buf_append(&l->held, p, n);
  const char *end = p + n;
  const char *start = p;
  if (l->pending_cr) {
    l->pending_cr = 0;
    if (*p == '\n') start++;
  }
  const char *i = start;
  while ((i = next_term(i, end)) != NULL) {
    char c = *i;
    if (add(l, start, (size_t)(i - start)) != 0) return -1;
    if (l->discarding) return 0;
    emit(l);
    if (l->discarding) return 0;
    if (c == '\r') {
      if (i + 1 < end) {
        if (i[1] == '\n') i++;
      } else {
        l->pending_cr = 1;
      }
    }
    i++;
    start = i;
    if (l->blocked) return start < end ? osb_buf_append(&l->held, start, (size_t)(end - start)) : 0;
  }
  return add(l, start, (size_t)(end - start));
}

int xd_lines_resume(xd_lines *l) {
  l->blocked = 0;
  if (l->held.len == 0) return 0;
  size_t len;
  char *rest = osb_buf_steal(&l->held, &len);
  if (!rest) return -1;
  int rc = xd_lines_push(l, rest, len);
  free(rest);
  return rc;
}

void xd_lines_discard(xd_lines *l) {
  l->discarding = 1;
  l->blocked = 0;
  osb_buf_free(&l->cur);
  osb_buf_free(&l->held);
}

void xd_lines_flush(xd_lines *l) {
  while (l->held.len > 0 && !l->discarding) {
    if (xd_lines_resume(l) != 0) break;
  }
  l->blocked = 0;
  if (l->cur.len > 0 && !l->discarding) emit(l);
  l->blocked = 0;
  osb_buf_free(&l->cur);
  osb_buf_free(&l->held);
}

int xd_lines_blocked(const xd_lines *l) { return l->blocked; }

void xd_lines_free(xd_lines *l) {
  osb_buf_free(&l->cur);
  osb_buf_free(&l->held);
}
