/* Output batching: two buffers, a flush timer, a threshold (see batch.h). */
#include "batch.h"

void osb_batch_start(osb_batch *b, uv_loop_t *loop, osb_batch_flush_fn on_flush, osb_batch_closed_fn on_closed,
                     void *ud) {
  uv_timer_init(loop, &b->timer);
  b->timer.data = b;
  b->on_flush = on_flush;
  b->on_closed = on_closed;
  b->ud = ud;
}

int osb_batch_append(osb_batch *b, int which, const char *p, size_t n) {
  return osb_buf_append(&b->buf[which ? 1 : 0], p, n);
}

void osb_batch_flush(osb_batch *b) {
  uv_timer_stop(&b->timer);
  osb_buf *o = &b->buf[0], *e = &b->buf[1];
  if (!o->len && !e->len) return;
  b->flushed = 1;
  b->last_flush = uv_now(b->timer.loop);
  b->on_flush(b->ud, o->data ? o->data : "", o->len, e->data ? e->data : "", e->len);
  osb_buf_reset(o);
  osb_buf_reset(e);
}

static void on_timer(uv_timer_t *t) { osb_batch_flush(t->data); }

void osb_batch_kick(osb_batch *b) {
  if (b->buf[0].len + b->buf[1].len >= OSB_BATCH_BYTES) osb_batch_flush(b);
  else if (!uv_is_active((uv_handle_t *)&b->timer)) {
    int quiet = !b->flushed || uv_now(b->timer.loop) - b->last_flush >= OSB_BATCH_DELAY_MS;
    uv_timer_start(&b->timer, on_timer, quiet ? 0 : OSB_BATCH_DELAY_MS, 0);
  }
}

static void on_handle_closed(uv_handle_t *h) {
  osb_batch *b = h->data;
  if (--b->closing == 0) b->on_closed(b->ud);
}

void osb_batch_close(osb_batch *b, uv_timer_t *const *others, size_t n) {
  b->closing = (int)n + 1;
  uv_timer_stop(&b->timer);
  uv_close((uv_handle_t *)&b->timer, on_handle_closed);
  for (size_t i = 0; i < n; i++) {
    uv_timer_stop(others[i]);
    others[i]->data = b; /* closing: its timer callback never runs again */
    uv_close((uv_handle_t *)others[i], on_handle_closed);
  }
}

void osb_batch_free(osb_batch *b) {
  osb_buf_free(&b->buf[0]);
  osb_buf_free(&b->buf[1]);
}
