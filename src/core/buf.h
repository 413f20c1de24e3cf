/* Byte buffers of the C core: a growable buffer (osb_buf) and a tail-retention buffer (osb_tail) that keeps
 * only the newest N bytes and counts what it dropped. Not thread-safe: one owner thread at a time. */
#ifndef OSB_BUF_H
#define OSB_BUF_H
#include <stddef.h>
#include <stdint.h>

typedef struct osb_buf {
  char *data; /* owned; NUL-terminated when non-NULL (the NUL is not counted in len) */
  size_t len;
  size_t cap;
} osb_buf;

/* Zero-initialised osb_buf is a valid empty buffer. */
void osb_buf_init(osb_buf *b);
/* Appends n bytes. Returns 0, or -1 when out of memory (b unchanged). */
int osb_buf_append(osb_buf *b, const void *p, size_t n);
/* Grows the capacity to exactly len + extra (+ the NUL) when it is smaller, so n appends up to that size never
 * reallocate (one allocation for a body of known length). Returns 0, or -1 when out of memory. */
int osb_buf_reserve_exact(osb_buf *b, size_t extra);
int osb_buf_append_str(osb_buf *b, const char *s);
/* printf-style append (truncation never happens; -1 on OOM). */
int osb_buf_appendf(osb_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Removes the first n bytes (n > len removes everything). */
void osb_buf_consume(osb_buf *b, size_t n);
void osb_buf_reset(osb_buf *b); /* len = 0, keeps memory */
/* Gives the caller ownership of the data (malloc'd, NUL-terminated, never NULL unless OOM); b becomes empty. */
char *osb_buf_steal(osb_buf *b, size_t *len);
void osb_buf_free(osb_buf *b);

/* Tail retention: keeps the newest `limit` bytes (limit < 0 = unbounded). */
typedef struct {
  osb_buf b;
  size_t start;     /* retained bytes are b.data[start .. b.len) */
  int64_t limit;
  uint64_t dropped; /* bytes received but no longer retained */
  uint64_t total;   /* bytes received */
} osb_tail;

void osb_tail_init(osb_tail *t, int64_t limit);
/* Returns 0, or -1 when out of memory (then the bytes count as dropped). */
int osb_tail_append(osb_tail *t, const void *p, size_t n);
/* The retained bytes (valid until the next append/free). */
const char *osb_tail_data(const osb_tail *t, size_t *len);
/* Drops leading UTF-8 continuation bytes (at most 3) so the retained text starts on a character boundary;
 * they are added to `dropped`. Only meaningful once something was dropped. */
void osb_tail_align_utf8(osb_tail *t);
void osb_tail_free(osb_tail *t);

#endif
