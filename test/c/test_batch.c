/* Unit tests of the output batcher (core/batch.h) on a private libuv loop: the timer flush, the threshold flush,
 * joined batches, explicit flushes, and the close of the batch's timer together with the owner's timers. No
 * network, no engine. */
#include <stdlib.h>
#include "harness.h"
#include "core/batch.h"

typedef struct {
  int flushes, closed, owner_timer_fired;
  osb_buf out, err; /* everything flushed, in order */
  size_t last_out, last_err;
} sink;

static void on_flush(void *ud, const char *out, size_t out_len, const char *err, size_t err_len) {
  sink *k = ud;
  k->flushes++;
  CHECK(out != NULL && err != NULL);
  k->last_out = out_len;
  k->last_err = err_len;
  osb_buf_append(&k->out, out, out_len);
  osb_buf_append(&k->err, err, err_len);
}

static void on_closed(void *ud) { ((sink *)ud)->closed++; }

static void on_owner_timer(uv_timer_t *t) { ((sink *)t->data)->owner_timer_fired++; }

static void sink_free(sink *k) {
  osb_buf_free(&k->out);
  osb_buf_free(&k->err);
}

/* A loop, a sink and a started batch flushing into it. */
typedef struct {
  uv_loop_t loop;
  sink k;
  osb_batch b;
} fixture;

static void fx_init(fixture *f) {
  memset(f, 0, sizeof *f);
  uv_loop_init(&f->loop);
  osb_batch_start(&f->b, &f->loop, on_flush, on_closed, &f->k);
}

/* Closes the batch (and nothing else), runs the loop until the close callback ran, frees everything. */
static void fx_done(fixture *f) {
  osb_batch_close(&f->b, NULL, 0);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  CHECK(f->k.closed == 1);
  osb_batch_free(&f->b);
  CHECK(uv_loop_close(&f->loop) == 0);
  sink_free(&f->k);
}

static void test_timer_flush(void) {
  fixture fx;
  fx_init(&fx);
  CHECK(osb_batch_append(&fx.b, 0, "out1 ", 5) == 0);
  CHECK(osb_batch_append(&fx.b, 1, "err1", 4) == 0);
  osb_batch_kick(&fx.b);
  CHECK(fx.k.flushes == 0); /* held for the delay */
  CHECK(uv_is_active((uv_handle_t *)&fx.b.timer));
  CHECK(osb_batch_append(&fx.b, 0, "out2", 4) == 0);
  osb_batch_kick(&fx.b); /* joins the armed batch */
  uv_run(&fx.loop, UV_RUN_DEFAULT); /* returns once the timer fired and nothing is armed */
  CHECK(fx.k.flushes == 1);
  CHECK_STR(fx.k.out.data, "out1 out2");
  CHECK_STR(fx.k.err.data, "err1");
  CHECK(fx.b.buf[0].len == 0 && fx.b.buf[1].len == 0);
  /* the next batch starts afresh: only stderr this time, stdout given as "" */
  CHECK(osb_batch_append(&fx.b, 1, "e2", 2) == 0);
  osb_batch_kick(&fx.b);
  uv_run(&fx.loop, UV_RUN_DEFAULT);
  CHECK(fx.k.flushes == 2 && fx.k.last_out == 0 && fx.k.last_err == 2);
  CHECK_STR(fx.k.err.data, "err1e2");
  fx_done(&fx);
}

/* A batch after a quiet spell (the first, or one OSB_BATCH_DELAY_MS after the last flush) goes at the end of the loop
 * turn; one right after a flush waits for the delay. */
static void test_quiet_batch_next_turn(void) {
  fixture fx;
  fx_init(&fx);
  CHECK(osb_batch_append(&fx.b, 0, "answer", 6) == 0);
  osb_batch_kick(&fx.b);
  CHECK(fx.k.flushes == 0);
  uv_run(&fx.loop, UV_RUN_NOWAIT); /* one turn: the 0 ms timer */
  CHECK(fx.k.flushes == 1);
  CHECK_STR(fx.k.out.data, "answer");
  CHECK(osb_batch_append(&fx.b, 0, "more", 4) == 0);
  osb_batch_kick(&fx.b);
  uv_run(&fx.loop, UV_RUN_NOWAIT); /* within the delay of the last flush: still held */
  CHECK(fx.k.flushes == 1);
  uv_run(&fx.loop, UV_RUN_DEFAULT);
  CHECK(fx.k.flushes == 2);
  CHECK_STR(fx.k.out.data, "answermore");
  uv_sleep(OSB_BATCH_DELAY_MS + 2); /* quiet again */
  uv_update_time(&fx.loop);
  CHECK(osb_batch_append(&fx.b, 1, "late", 4) == 0);
  osb_batch_kick(&fx.b);
  uv_run(&fx.loop, UV_RUN_NOWAIT);
  CHECK(fx.k.flushes == 3);
  fx_done(&fx);
}

static void test_threshold_flush(void) {
  fixture fx;
  fx_init(&fx);
  char *big = malloc(OSB_BATCH_BYTES);
  memset(big, 'x', OSB_BATCH_BYTES);
  CHECK(osb_batch_append(&fx.b, 0, big, OSB_BATCH_BYTES - 1) == 0);
  osb_batch_kick(&fx.b);
  CHECK(fx.k.flushes == 0); /* one byte short of the threshold: the timer waits */
  CHECK(osb_batch_append(&fx.b, 1, "!", 1) == 0);
  osb_batch_kick(&fx.b); /* stdout and stderr together reach it: flushed at once, timer disarmed */
  CHECK(fx.k.flushes == 1 && fx.k.last_out == OSB_BATCH_BYTES - 1 && fx.k.last_err == 1);
  CHECK(!uv_is_active((uv_handle_t *)&fx.b.timer));
  CHECK(osb_batch_append(&fx.b, 0, big, OSB_BATCH_BYTES) == 0);
  osb_batch_kick(&fx.b); /* one append over the threshold */
  CHECK(fx.k.flushes == 2 && fx.k.last_out == OSB_BATCH_BYTES && fx.k.last_err == 0);
  CHECK(fx.k.out.len == 2 * OSB_BATCH_BYTES - 1 && fx.k.out.data[fx.k.out.len - 1] == 'x');
  uv_run(&fx.loop, UV_RUN_DEFAULT); /* nothing armed: no further flush */
  CHECK(fx.k.flushes == 2);
  free(big);
  fx_done(&fx);
}

static void test_explicit_flush(void) {
  fixture fx;
  fx_init(&fx);
  osb_batch_flush(&fx.b); /* empty: no call */
  CHECK(fx.k.flushes == 0);
  CHECK(osb_batch_append(&fx.b, 0, "tail", 4) == 0);
  osb_batch_kick(&fx.b);
  osb_batch_flush(&fx.b); /* what a settle does before its result: now, and the timer disarmed */
  CHECK(fx.k.flushes == 1 && fx.k.last_out == 4 && fx.k.last_err == 0);
  CHECK(!uv_is_active((uv_handle_t *)&fx.b.timer));
  uv_run(&fx.loop, UV_RUN_DEFAULT);
  CHECK(fx.k.flushes == 1);
  CHECK(osb_batch_append(&fx.b, 0, "", 0) == 0);
  osb_batch_flush(&fx.b); /* zero bytes appended: still empty */
  CHECK(fx.k.flushes == 1);
  fx_done(&fx);
}

/* The owner's teardown: the batch's timer and the owner's armed timers are closed together, none of their
 * callbacks runs, and the close callback runs once, after the last handle. Unflushed bytes are not delivered. */
static void test_close_with_owner_timers(void) {
  fixture fx;
  fx_init(&fx);
  uv_timer_t t1, t2;
  uv_timer_init(&fx.loop, &t1);
  uv_timer_init(&fx.loop, &t2);
  t1.data = t2.data = &fx.k;
  uv_timer_start(&t1, on_owner_timer, 0, 0);
  uv_timer_start(&t2, on_owner_timer, 1, 0);
  CHECK(osb_batch_append(&fx.b, 0, "unflushed", 9) == 0);
  osb_batch_kick(&fx.b);
  uv_timer_t *const others[] = {&t1, &t2};
  osb_batch_close(&fx.b, others, 2);
  CHECK(fx.k.closed == 0); /* closes complete on the loop */
  uv_run(&fx.loop, UV_RUN_DEFAULT);
  CHECK(fx.k.closed == 1);
  CHECK(fx.k.owner_timer_fired == 0);
  CHECK(fx.k.flushes == 0);
  osb_batch_free(&fx.b);
  CHECK(uv_loop_close(&fx.loop) == 0); /* every handle closed */
  sink_free(&fx.k);
}

/* A batch that never started (the engine shut down before its job ran) only owns its buffers. */
static void test_free_unstarted(void) {
  osb_batch b = {0};
  CHECK(osb_batch_append(&b, 0, "a", 1) == 0);
  CHECK(osb_batch_append(&b, 1, "b", 1) == 0);
  osb_batch_free(&b);
  osb_batch_free(&b); /* again: a freed batch is empty */
  CHECK(b.buf[0].data == NULL && b.buf[1].data == NULL);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  RUN(test_timer_flush);
  RUN(test_quiet_batch_next_turn);
  RUN(test_threshold_flush);
  RUN(test_explicit_flush);
  RUN(test_close_with_owner_timers);
  RUN(test_free_unstarted);
  return t_summary();
}
