/* Process-table tests (src/opensandbox/process.c) against a real execd (the dev-server's, started standalone by
 * run.sh; EXECD_URL): live stdout/stderr kept apart, exact exit codes, marker stripping, stdin round trip, kill
 * confirmed by the server, timeout (124), reattach by pid (replay from 0, no second run), unknown pid, bad input,
 * many concurrent processes, and engine shutdown with processes running (no leaks under ASan and valgrind). */
#include <stdlib.h>
#include "harness.h"
#include "core/buf.h"
#include "core/engine.h"
#include "core/ws.h"
#include "opensandbox/process.h"

static const char *EXECD;
static osb_engine *E;
static osb_ws *W;

typedef struct {
  latch started, exited, op;
  uv_mutex_t mu;
  int start_failed;
  char code[96];
  char pid[200];
  osb_buf out, err; /* every batch */
  int exit_code, killed, timed_out, batches;
  char error_text[256];
  char rout[256];
  size_t rout_len;
  int op_flag, op_failed;
  char op_code[96];
} rec;

static void rec_init(rec *r) {
  memset(r, 0, sizeof *r);
  latch_init(&r->started);
  latch_init(&r->exited);
  latch_init(&r->op);
  uv_mutex_init(&r->mu);
}
static void rec_free(rec *r) {
  latch_destroy(&r->started);
  latch_destroy(&r->exited);
  latch_destroy(&r->op);
  uv_mutex_destroy(&r->mu);
  osb_buf_free(&r->out);
  osb_buf_free(&r->err);
}
/* Snapshot of the collected stdout (NUL-terminated copy into buf). */
static const char *outs(rec *r, char *buf, size_t cap) {
  uv_mutex_lock(&r->mu);
  snprintf(buf, cap, "%s", r->out.data ? r->out.data : "");
  uv_mutex_unlock(&r->mu);
  return buf;
}

static void on_started(void *ud, const osb_error *err, const char *pid) {
  rec *r = ud;
  if (err) {
    r->start_failed = 1;
    snprintf(r->code, sizeof r->code, "%s", err->code);
  } else {
    snprintf(r->pid, sizeof r->pid, "%s", pid);
  }
  latch_hit(&r->started);
}
static void on_output(void *ud, const char *o, size_t ol, const char *e, size_t el) {
  rec *r = ud;
  uv_mutex_lock(&r->mu);
  osb_buf_append(&r->out, o, ol);
  osb_buf_append(&r->err, e, el);
  r->batches++;
  uv_mutex_unlock(&r->mu);
}
static void on_exit_cb(void *ud, const osb_proc_exit *x) {
  rec *r = ud;
  r->exit_code = x->exit_code;
  r->killed = x->killed;
  r->timed_out = x->timed_out;
  snprintf(r->error_text, sizeof r->error_text, "%s", x->error_text ? x->error_text : "");
  r->rout_len = x->out_len;
  snprintf(r->rout, sizeof r->rout, "%.*s", (int)x->out_len, x->out);
  latch_hit(&r->exited);
}
static const osb_proc_callbacks CB = {on_started, on_output, on_exit_cb};

static void on_op(void *ud, const osb_error *err, int flag) {
  rec *r = ud;
  r->op_flag = flag;
  r->op_failed = err != NULL;
  if (err) snprintf(r->op_code, sizeof r->op_code, "%s", err->code);
  latch_hit(&r->op);
}

static osb_proc *spawn(rec *r, const char *cmd, int stdin_ignore, long timeout_ms, int64_t max_retained) {
  osb_proc_opts o;
  memset(&o, 0, sizeof o);
  o.base_url = EXECD;
  o.command = cmd;
  o.stdin_ignore = stdin_ignore;
  o.timeout_ms = timeout_ms;
  o.max_retained = max_retained;
  const char *env[] = {"GREETING", "hi 'there'"};
  o.env_kv = env;
  o.nenv = 1;
  char err[256] = "";
  osb_proc *p = osb_proc_start(E, W, &o, &CB, r, err, sizeof err);
  if (!p) printf("  spawn failed: %s\n", err);
  return p;
}

static void test_output_and_exit(void) {
  rec r;
  rec_init(&r);
  osb_proc *p = spawn(&r, "echo \"$GREETING\"; echo to-err >&2; printf 'no newline'; exit 42", 1, 0, -1);
  CHECK(p != NULL);
  CHECK(latch_wait(&r.started, 1, 20000) && !r.start_failed);
  CHECK(strchr(r.pid, '.') != NULL && strlen(r.pid) > 33);
  CHECK(latch_wait(&r.exited, 1, 20000));
  CHECK(r.exit_code == 42 && !r.killed && !r.timed_out && r.error_text[0] == 0);
  CHECK_STR(r.out.data, "hi 'there'\nno newline");
  CHECK_STR(r.err.data, "to-err\n");
  CHECK_STR(r.rout, "hi 'there'\nno newline");
  osb_proc_release(p);
  rec_free(&r);
}

static void test_stdin_and_kill(void) {
  rec r;
  rec_init(&r);
  osb_proc *p = spawn(&r, "head -1; echo after-head; sleep 30", 0, 0, -1);
  CHECK(latch_wait(&r.started, 1, 20000) && !r.start_failed);
  CHECK(osb_proc_write(p, "line one\nline two\n", 18, on_op, &r) == 0);
  CHECK(latch_wait(&r.op, 1, 20000) && !r.op_failed);
  char buf[256];
  uint64_t deadline = uv_hrtime() + 20000000000ull;
  while (!strstr(outs(&r, buf, sizeof buf), "after-head") && uv_hrtime() < deadline) uv_sleep(10);
  CHECK_STR(outs(&r, buf, sizeof buf), "line one\nafter-head\n");
  CHECK(osb_proc_kill(p, on_op, &r) == 0);
  CHECK(latch_wait(&r.op, 2, 20000) && !r.op_failed && r.op_flag == 1);
  CHECK(latch_wait(&r.exited, 1, 20000) && r.killed && r.exit_code == 137);
  CHECK(osb_proc_kill(p, on_op, &r) == 0); /* after exit: not killed again */
  CHECK(latch_wait(&r.op, 3, 20000) && !r.op_failed && r.op_flag == 0);
  CHECK(osb_proc_write(p, "x", 1, on_op, &r) == 0);
  CHECK(latch_wait(&r.op, 4, 20000) && r.op_failed && !strcmp(r.op_code, "PROCESS_EXITED"));
  osb_proc_release(p);
  rec_free(&r);
}

/* closeStdin: binary bytes (NUL, 0xff, every remainder of the base64 framing, one frame boundary) reach the command
 * exactly and it sees EOF; later writes fail STDIN_CLOSED, closing again is fine. */
static void test_close_stdin(void) {
  rec r;
  rec_init(&r);
  osb_proc *p = spawn(&r, "od -An -v -tu1 | tr -s ' \\n' '  '", 0, 0, -1);
  CHECK(latch_wait(&r.started, 1, 20000) && !r.start_failed);
  static unsigned char big[49 * 1024 + 1]; /* more than one frame */
  for (size_t i = 0; i < sizeof big; i++) big[i] = (unsigned char)(i * 7);
  CHECK(osb_proc_write(p, "\0", 1, on_op, &r) == 0);
  CHECK(osb_proc_write(p, "\xff\x01", 2, on_op, &r) == 0);
  CHECK(osb_proc_write(p, "abc", 3, on_op, &r) == 0);
  CHECK(osb_proc_write(p, "", 0, on_op, &r) == 0);
  CHECK(osb_proc_write(p, big, sizeof big, on_op, &r) == 0);
  CHECK(osb_proc_close_stdin(p, on_op, &r) == 0);
  CHECK(osb_proc_close_stdin(p, on_op, &r) == 0);
  CHECK(latch_wait(&r.op, 7, 20000) && !r.op_failed);
  CHECK(osb_proc_write(p, "x", 1, on_op, &r) == 0);
  CHECK(latch_wait(&r.op, 8, 20000));
  CHECK(r.op_failed && !strcmp(r.op_code, "STDIN_CLOSED"));
  CHECK(latch_wait(&r.exited, 1, 20000) && r.exit_code == 0);
  osb_buf want;
  osb_buf_init(&want);
  osb_buf_append_str(&want, " 0 255 1 97 98 99");
  for (size_t i = 0; i < sizeof big; i++) osb_buf_appendf(&want, " %u", (unsigned)big[i]);
  osb_buf_append_str(&want, " ");
  uv_mutex_lock(&r.mu);
  CHECK(r.out.len == want.len && memcmp(r.out.data, want.data, want.len) == 0);
  uv_mutex_unlock(&r.mu);
  osb_buf_free(&want);
  osb_proc_release(p);
  rec_free(&r);
}

static void test_timeout(void) {
  rec r;
  rec_init(&r);
  osb_proc *p = spawn(&r, "echo started; sleep 30", 1, 500, -1);
  CHECK(latch_wait(&r.exited, 1, 20000));
  CHECK(r.exit_code == 124 && r.timed_out && r.killed);
  CHECK_STR(r.out.data, "started\n");
  osb_proc_release(p);
  rec_free(&r);
}

static void test_reattach(void) {
  rec a, b;
  rec_init(&a);
  rec_init(&b);
  /* counts its runs in a file: a second run of the command would print run-2 */
  osb_proc *p = spawn(&a, "f=/tmp/osb-c-runs-$$-$RANDOM; echo x >> $f; echo run-$(wc -l < $f); read l; echo got-$l", 0, 0, -1);
  CHECK(latch_wait(&a.started, 1, 20000) && !a.start_failed);
  char buf[256];
  uint64_t deadline = uv_hrtime() + 20000000000ull;
  while (!strstr(outs(&a, buf, sizeof buf), "run-1") && uv_hrtime() < deadline) uv_sleep(10);
  /* a second client attaches by pid (takeover), replays from 0, sends stdin and sees the exit */
  osb_proc_opts o;
  memset(&o, 0, sizeof o);
  o.base_url = EXECD;
  o.attach_pid = a.pid;
  o.max_retained = -1;
  char err[256] = "";
  osb_proc *q = osb_proc_start(E, W, &o, &CB, &b, err, sizeof err);
  CHECK(q != NULL);
  CHECK(latch_wait(&b.started, 1, 20000) && !b.start_failed);
  deadline = uv_hrtime() + 20000000000ull;
  while (!strstr(outs(&b, buf, sizeof buf), "run-1") && uv_hrtime() < deadline) uv_sleep(10);
  CHECK(osb_proc_write(q, "hello\n", 6, on_op, &b) == 0);
  CHECK(latch_wait(&b.exited, 1, 20000));
  CHECK(b.exit_code == 0);
  CHECK_STR(b.out.data, "run-1\ngot-hello\n");
  /* the first client was taken over */
  CHECK(latch_wait(&a.exited, 1, 20000) && a.exit_code == -1 && strstr(a.error_text, "took over"));
  osb_proc_release(p);
  osb_proc_release(q);
  rec_free(&a);
  rec_free(&b);
}

static void test_bad_input(void) {
  rec r;
  rec_init(&r);
  osb_proc_opts o;
  memset(&o, 0, sizeof o);
  o.base_url = EXECD;
  char err[256] = "";
  o.attach_pid = "not-a-pid";
  CHECK(osb_proc_start(E, W, &o, &CB, &r, err, sizeof err) == NULL && strstr(err, "not a process id"));
  o.attach_pid = "0b5e6a8e-0000-4000-8000-000000000000.0123456789abcdef0123456789abcdef";
  osb_proc *p = osb_proc_start(E, W, &o, &CB, &r, err, sizeof err);
  CHECK(p != NULL);
  CHECK(latch_wait(&r.started, 1, 20000) && r.start_failed);
  CHECK_STR(r.code, "PROCESS_NOT_FOUND");
  osb_proc_release(p);
  o.attach_pid = NULL;
  o.command = "";
  CHECK(osb_proc_start(E, W, &o, &CB, &r, err, sizeof err) == NULL && strstr(err, "non-empty"));
  o.command = "true";
  const char *env[] = {"BAD-NAME", "x"};
  o.env_kv = env;
  o.nenv = 1;
  CHECK(osb_proc_start(E, W, &o, &CB, &r, err, sizeof err) == NULL && strstr(err, "identifier"));
  o.nenv = 0;
  o.base_url = "ftp://x";
  CHECK(osb_proc_start(E, W, &o, &CB, &r, err, sizeof err) == NULL);
  rec_free(&r);
}

static void test_many(void) {
  enum { N = 40 };
  static rec rs[N];
  osb_proc *ps[N];
  char cmd[128];
  for (int i = 0; i < N; i++) {
    rec_init(&rs[i]);
    snprintf(cmd, sizeof cmd, "seq 1 200 | sed 's/^/p%d-/'; exit %d", i, i % 7);
    ps[i] = spawn(&rs[i], cmd, 1, 0, 64);
  }
  int ok = 0;
  for (int i = 0; i < N; i++) {
    if (!latch_wait(&rs[i].exited, 1, 60000)) continue;
    char want[32];
    snprintf(want, sizeof want, "p%d-200\n", i);
    size_t wl = strlen(want);
    int lines = 0;
    for (size_t k = 0; k < rs[i].out.len; k++) lines += rs[i].out.data[k] == '\n';
    if (rs[i].exit_code == i % 7 && lines == 200 && rs[i].rout_len <= 64 && rs[i].out.len > wl &&
        !strcmp(rs[i].out.data + rs[i].out.len - wl, want))
      ok++;
    else
      printf("  process %d: exit %d, %d lines, retained %zu\n", i, rs[i].exit_code, lines, rs[i].rout_len);
  }
  CHECK(ok == N);
  for (int i = 0; i < N; i++) {
    osb_proc_release(ps[i]);
    rec_free(&rs[i]);
  }
}

static void wait_idle(void) {
  uint64_t deadline = uv_hrtime() + 20000000000ull;
  osb_ws_stats ws;
  do {
    osb_ws_get_stats(W, &ws);
    if (osb_proc_count() == 0 && ws.connections == 0) break;
    uv_sleep(10);
  } while (uv_hrtime() < deadline);
  CHECK(osb_proc_count() == 0);
  CHECK(ws.connections == 0);
}

static void test_table_drains(void) { wait_idle(); }

static void test_shutdown_with_running(void) {
  rec r;
  rec_init(&r);
  osb_proc *p = spawn(&r, "echo up; sleep 30", 1, 0, -1);
  CHECK(latch_wait(&r.started, 1, 20000) && !r.start_failed);
  char buf[64];
  uint64_t deadline = uv_hrtime() + 20000000000ull;
  while (!strstr(outs(&r, buf, sizeof buf), "up") && uv_hrtime() < deadline) uv_sleep(10);
  osb_engine_stop(E); /* settles the process */
  E = NULL;
  CHECK(latch_wait(&r.exited, 1, 1000) && r.exit_code == -1 && strstr(r.error_text, "shutting down"));
  osb_ws_stop(W);
  W = NULL;
  osb_proc_release(p);
  rec_free(&r);
}

int main(void) {
  if (!t_peers(&EXECD, NULL, 0)) return 1;
  char err[256];
  E = osb_engine_start(err, sizeof err);
  W = osb_ws_start(err, sizeof err);
  if (!E || !W) {
    printf("start: %s\n0 passed, 1 failed\n", err);
    return 1;
  }
  RUN(test_output_and_exit);
  RUN(test_stdin_and_kill);
  RUN(test_close_stdin);
  RUN(test_timeout);
  RUN(test_reattach);
  RUN(test_bad_input);
  RUN(test_many);
  RUN(test_table_drains);
  RUN(test_shutdown_with_running);
  return t_summary();
}
