/* Output batching of the engine thread: the stdout and stderr bytes of one streamed run (a /command stream, a /code
 * cell, a process's WebSocket) are gathered in two buffers and handed to the owner in one call, when they reach
 * OSB_BATCH_BYTES together or OSB_BATCH_DELAY_MS after the first byte of a batch, whichever comes first — except a
 * batch that starts OSB_BATCH_DELAY_MS or more after the previous flush (after a quiet spell: an answer to input, the
 * first output), which is handed over at the end of the loop turn, so interactive round trips wait for no timer while
 * continuous output still comes at most once per OSB_BATCH_DELAY_MS plus that leading batch.
 *
 * Ownership: an osb_batch is embedded in its owner (zero-initialised, e.g. by calloc) and owns its two buffers and
 * its uv timer; the owner keeps the memory alive until the close callback has run, then calls osb_batch_free. Every
 * call but osb_batch_free runs on the thread of the loop given to osb_batch_start (the engine thread). The bytes
 * passed to the flush callback are valid during the call only. Flow-control accounting is the owner's: it does it
 * in its flush callback. */
#ifndef OSB_BATCH_H
#define OSB_BATCH_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include "core/buf.h"

#define OSB_BATCH_DELAY_MS 5
#define OSB_BATCH_BYTES ((size_t)64 * 1024)

/* One batch: out (stdout) and err (stderr), either possibly empty but not both; never NULL. */
typedef void (*osb_batch_flush_fn)(void *ud, const char *out, size_t out_len, const char *err, size_t err_len);
/* The batch's timer and the handles given to osb_batch_close are all closed: the owner may be freed now. */
typedef void (*osb_batch_closed_fn)(void *ud);

typedef struct {
  osb_buf buf[2]; /* 0 = stdout, 1 = stderr */
  uv_timer_t timer;
  osb_batch_flush_fn on_flush;
  osb_batch_closed_fn on_closed;
  void *ud;
  int closing; /* handles still to be closed */
  int flushed;  /* a flush happened, at last_flush (loop time, ms) */
  uint64_t last_flush;
} osb_batch;

/* Engine thread: initialises the timer on loop. Before it only osb_batch_append and osb_batch_free are valid. */
void osb_batch_start(osb_batch *b, uv_loop_t *loop, osb_batch_flush_fn on_flush, osb_batch_closed_fn on_closed,
                     void *ud);
/* Adds n bytes to stream which (0 stdout, 1 stderr) without flushing. Returns 0, or -1 when out of memory (the
 * batch unchanged). */
int osb_batch_append(osb_batch *b, int which, const char *p, size_t n);
/* After appends: flushes now when the batch holds OSB_BATCH_BYTES or more, else arms the timer (when not armed):
 * 0 ms after a quiet spell (see above), else OSB_BATCH_DELAY_MS. */
void osb_batch_kick(osb_batch *b);
/* Hands what is batched to on_flush now (nothing when empty) and disarms the timer. */
void osb_batch_flush(osb_batch *b);
/* Closes the batch's timer and the n owner's timers in others (stopped here; their data is reused), then calls
 * on_closed once, after the last one is closed. Nothing is flushed: flush first when the bytes matter. Once. */
void osb_batch_close(osb_batch *b, uv_timer_t *const *others, size_t n);
/* Frees the buffers (any thread, once no callback of the batch can run: before start or after on_closed). */
void osb_batch_free(osb_batch *b);

#endif
