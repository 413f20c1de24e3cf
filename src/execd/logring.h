/* Bounded output log of a background command (logring.c), the Node execd's log-ring.js: the newest `cap` bytes of
 * everything the command wrote (stdout and stderr merged in write order), addressed by absolute byte offsets like
 * execd's `logs?cursor=`. Older bytes are dropped; start = end - size is where the retained bytes begin, end the
 * number of bytes ever written. One circular buffer, grown by doubling up to cap. Owner: one thread; the ring owns
 * its memory. */
#ifndef XD_LOGRING_H
#define XD_LOGRING_H
#include <stddef.h>
#include <stdint.h>
#include "core/buf.h"

/* Bytes kept per background command (1 MiB). */
#define XD_LOG_RING_BYTES (1024u * 1024u)

typedef struct {
  char *data;
  size_t cap;   /* most bytes retained */
  size_t alloc; /* bytes allocated (<= cap) */
  size_t head;  /* index of the oldest retained byte */
  size_t size;  /* retained bytes */
  uint64_t end; /* bytes ever pushed */
} xd_logring;

void xd_logring_init(xd_logring *r, size_t cap);
/* Returns 0, -1 when out of memory (then the bytes count as written and dropped). */
int xd_logring_push(xd_logring *r, const void *p, size_t n);
uint64_t xd_logring_start(const xd_logring *r);
/* Appends the retained bytes from absolute offset `from` (clamped to [start, end]) to the end. 0, -1 on OOM. */
int xd_logring_read(const xd_logring *r, uint64_t from, osb_buf *out);
void xd_logring_free(xd_logring *r);

#endif
