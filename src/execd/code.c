/* execd's code interpreter in C (xd.h: xd_code_*): the Node execd's code.js, code-kernel.js and code-shell.js, where
 * a client sees them, and the real execd's texts (codeinterpreting.go).
 *   POST   /code/context  {"language","cwd"}     -> {"id","language"[,"cwd"]} once the kernel said ready
 *   GET    /code/contexts[?language=]            GET|DELETE /code/contexts/{id}      DELETE /code/contexts?language=
 *   POST   /code  {"context":{"id","language"},"code"}   -> event stream (init, ping, execution_count, stdout/stderr,
 *          result*, then execution_complete or status "error" + error); without context.language: `bash -c code`
 *          with /command's events (line-split output)
 *   DELETE /code?id=  (and DELETE /command?id= through xd_code_interrupt): SIGINT to a context's kernel, SIGTERM
 *          (then SIGKILL after 3 s) to a shell run
 * One kernel process per context (python3, node or an interactive bash; the programs in --code-kernels), in its own
 * session; the protocol (codeproto.h): JSON lines on the kernel's fd 3 (a socket pair), output on its stdout and
 * stderr ended by the cell's random marker, so every byte of a cell's output is on the stream before its final event.
 * Bounds: output goes out as it is read (an event per read of at most 64 KiB, never splitting a UTF-8 character;
 * a client not reading stops the reads, so the kernel blocks on its writes), a control line at most 32 MiB (a larger
 * rich result is dropped), a cell's results and error at most 64 MiB together, 4,096 replies. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "cmdreq.h"
#include "codeproto.h"
#include "json.h"
#include "lines.h"
#include "spawn.h"
#include "xd.h"

extern char **environ;

#define PING_INTERVAL_MS 3000
#define READY_TIMEOUT_MS 20000
#define INTERRUPT_GRACE_MS 5000 /* a cell that ignores SIGINT this long gets its kernel killed */
#define DIED_DRAIN_MS 500       /* a dead kernel's pipes get this long to deliver what they hold */
#define SHELL_TERM_GRACE_MS 3000
#define PIPE_DRAIN_MS 200
#define STREAM_HWM 16384
#define REPLIES_MAX 4096
#define REPLIES_BYTES_MAX (64u * 1024u * 1024u)
#define READ_CHUNK 65536
/* Output is sent in batches: what the kernel writes within OUT_BATCH_MS (e.g. print's text and its "\n", two writes)
 * goes out as one event, at most OUT_BATCH_MAX bytes of text each (ipykernel batches its stream output too). */
#define OUT_BATCH_MS 10
#define OUT_BATCH_MAX 65536

enum { L_PYTHON, L_JAVASCRIPT, L_BASH, NLANG };
static const char *const LANGS[NLANG] = {"python", "javascript", "bash"};

typedef struct module module;
typedef struct ctxt ctxt;
typedef struct kernel kernel;
typedef struct cell cell;
typedef struct srun srun;
typedef struct creation creation;

struct ctxt {
  module *m;
  ctxt *prev, *next;
  char id[37];
  int lang;
  char *dir;
  kernel *k;
  unsigned long count;
  int running, deleted, listed;
  int refs;
};

struct kernel {
  module *m;
  kernel *next;
  int lang;
  char *dir;
  pid_t pid, pgid;
  int exited, wstatus, started, failed;
  uv_pipe_t out, err, ctl, in;
  int open[4]; /* out, err, ctl, in */
  uv_timer_t ready_timer, grace_timer, died_timer;
  int handles, closing, owned;
  xd_kline lines;
  xd_kdemux dm[2];
  cell *cell;
  void (*on_start)(void *arg, kernel *k, const char *err);
  void *start_arg;
  int paused;
};

struct cell {
  module *m;
  ctxt *c;
  kernel *k;
  xd_res *res;
  uv_timer_t ping, batch;
  int handles;
  osb_buf pend; /* output read and not yet sent (one stream's, at most OUT_BATCH_MAX + one read) */
  int pend_k;
  uint64_t started;
  cJSON *replies[REPLIES_MAX];
  size_t nreplies, reply_bytes;
  int done, has_exit, exit, interrupted, bp_paused;
  char *code; /* until sent (a restart may come first) */
  size_t code_len;
};

struct srun {
  module *m;
  srun *prev, *next;
  char id[33];
  pid_t pid;
  int running, exited, wstatus, finished;
  uv_pipe_t pipes[2];
  int pipe_open[2], eofs;
  xd_lines split[2];
  uv_timer_t drain, kill, ping;
  int handles;
  int paused, after_resume, bp_paused;
  uint64_t started;
  xd_res *res;
  struct waiter *waiters;
};

typedef struct waiter {
  xd_res *res;
  srun *r;
  struct waiter *next;
} waiter;

/* a POST /code waiting for its context (a default context being created, a dead kernel being restarted) */
typedef struct pending {
  module *m;
  xd_res *res;
  char *code;
  size_t code_len;
  struct pending *next;
} pending;

struct creation {
  module *m;
  int lang;
  char *dir;
  int err;         /* mkdir's errno */
  char *err_path;  /* the path mkdir failed on */
  uv_work_t work;
  xd_res *res;     /* POST /code/context */
  char *cwd;       /* as the request gave it ("" none) */
  int is_default;
  ctxt *restart;   /* a restart of this context's dead kernel */
  pending *waiters;
};

struct module {
  uv_loop_t *loop;
  char *workspace, *kernel_dir, *node;
  ctxt *ctx_head, *ctx_tail;
  ctxt *defaults[NLANG];
  creation *default_creating[NLANG];
  kernel *kernels;
  srun *runs;
  uv_signal_t sigchld;
  int handles, closing;
  char readbuf[READ_CHUNK];
};

static void module_maybe_free(module *m);
static void nothing(void *arg) { (void)arg; }

static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int lang_of(const char *s) {
  for (int i = 0; i < NLANG; i++) {
    if (strcmp(s, LANGS[i]) == 0) return i;
  }
  return -1;
}

static const char *sig_name(int sig, char *buf, size_t cap) {
  static const char *const names[] = {
      NULL, "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE", "SIGKILL", "SIGUSR1",
      "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP",
      "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR",
      "SIGSYS"};
  if (sig > 0 && (size_t)sig < sizeof names / sizeof names[0]) return names[sig];
  snprintf(buf, cap, "%d", sig);
  return buf;
}

static void uuid4(char out[37]) {
  unsigned char b[16];
  xd_random16(b);
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  char *o = out;
  for (int i = 0; i < 16; i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *o++ = '-';
    o += snprintf(o, 3, "%02x", b[i]);
  }
}

static void hex_id(char out[33]) {
  unsigned char b[16];
  xd_random16(b);
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* ---------------------------------------------------------------------------------------------- events */

typedef struct {
  const char *type;
  const char *text;
  size_t text_len;
  unsigned long count; /* execution_count (0: none) */
  uint64_t time;       /* execution_time (0: none) */
  const char *results; /* raw JSON of the results object */
  size_t results_len;
  const char *error;   /* raw JSON of the error object */
  size_t error_len;
} event;

/* One event, in the field order of execd's ServerStreamEvent. 1 while the client keeps up, 0 when its buffer is
 * full (wait for drain). A gone client: 1, nothing written. */
static int write_event(xd_res *res, const event *ev) {
  if (!res || xd_res_closed(res)) return 1;
  osb_buf b = {0};
  osb_buf_append_str(&b, "{\"type\":");
  xd_json_str(&b, ev->type, strlen(ev->type));
  if (ev->text) {
    osb_buf_append_str(&b, ",\"text\":");
    xd_json_str(&b, ev->text, ev->text_len);
  }
  if (ev->count) osb_buf_appendf(&b, ",\"execution_count\":%lu", ev->count);
  if (ev->time) osb_buf_appendf(&b, ",\"execution_time\":%llu", (unsigned long long)ev->time);
  osb_buf_appendf(&b, ",\"timestamp\":%llu", (unsigned long long)wall_ms());
  if (ev->results) {
    osb_buf_append_str(&b, ",\"results\":");
    osb_buf_append(&b, ev->results, ev->results_len);
  }
  if (ev->error) {
    osb_buf_append_str(&b, ",\"error\":");
    osb_buf_append(&b, ev->error, ev->error_len);
  }
  int rc = osb_buf_append_str(&b, "}\n\n");
  int ok = 1;
  if (rc == 0 && b.data && xd_stream_write(res, b.data, b.len) == 0) ok = xd_stream_pending(res) < STREAM_HWM;
  osb_buf_free(&b);
  return ok;
}

static void write_simple(xd_res *res, const char *type, const char *text) {
  event ev = {.type = type, .text = text, .text_len = text ? strlen(text) : 0};
  write_event(res, &ev);
}

/* {"ename":..,"evalue":..,"traceback":[text]} */
static void error_json(osb_buf *b, const char *ename, const char *evalue, const char *trace) {
  osb_buf_append_str(b, "{\"ename\":");
  xd_json_str(b, ename, strlen(ename));
  osb_buf_append_str(b, ",\"evalue\":");
  xd_json_str(b, evalue, strlen(evalue));
  osb_buf_append_str(b, ",\"traceback\":[");
  if (trace) xd_json_str(b, trace, strlen(trace));
  osb_buf_append_str(b, "]}");
}

static void write_error_event(xd_res *res, const char *ename, const char *evalue, const char *trace) {
  osb_buf b = {0};
  error_json(&b, ename, evalue, trace);
  event ev = {.type = "error", .error = b.data, .error_len = b.len};
  if (b.data) write_event(res, &ev);
  osb_buf_free(&b);
}

/* xd_send_error for a message built here (any bytes) */
static void send_error_buf(xd_res *res, int status, const char *code, const osb_buf *msg) {
  xd_send_error(res, status, code, msg->data ? msg->data : "out of memory");
}

/* ---------------------------------------------------------------------------------------------- contexts */

static void ctx_unref(ctxt *c) {
  if (--c->refs > 0) return;
  module *m = c->m;
  free(c->dir);
  free(c);
  m->handles--;
  module_maybe_free(m);
}

static ctxt *find_ctx(module *m, const char *id) {
  for (ctxt *c = m->ctx_head; c; c = c->next) {
    if (strcmp(c->id, id) == 0) return c;
  }
  return NULL;
}

static void kernel_release(kernel *k);

static void ctx_delete(ctxt *c) {
  module *m = c->m;
  if (!c->listed) return;
  c->deleted = 1;
  c->listed = 0;
  if (c->prev) c->prev->next = c->next;
  else m->ctx_head = c->next;
  if (c->next) c->next->prev = c->prev;
  else m->ctx_tail = c->prev;
  c->prev = c->next = NULL;
  if (m->defaults[c->lang] == c) m->defaults[c->lang] = NULL;
  kernel *k = c->k;
  c->k = NULL;
  if (k) kernel_release(k); /* killed; a running cell ends with "the context was deleted" */
  ctx_unref(c);
}

/* ---------------------------------------------------------------------------------------------- kernels */

static void kernel_maybe_free(kernel *k) {
  if (k->handles || k->owned || k->cell || (k->pid > 0 && !k->exited)) return;
  module *m = k->m;
  for (kernel **p = &m->kernels; *p; p = &(*p)->next) {
    if (*p == k) {
      *p = k->next;
      break;
    }
  }
  xd_kline_free(&k->lines);
  free(k->dir);
  free(k);
  m->handles--;
  module_maybe_free(m);
}

static void on_kernel_handle_closed(uv_handle_t *h) {
  kernel *k = h->data;
  k->handles--;
  kernel_maybe_free(k);
}

static void kclose(kernel *k, int i) {
  uv_handle_t *hs[4] = {(uv_handle_t *)&k->out, (uv_handle_t *)&k->err, (uv_handle_t *)&k->ctl, (uv_handle_t *)&k->in};
  if (!k->open[i]) return;
  k->open[i] = 0;
  if (i < 3) uv_read_stop((uv_stream_t *)hs[i]);
  uv_close(hs[i], on_kernel_handle_closed);
}

/* everything closed: the kernel is gone and no cell needs it */
static void kernel_close_all(kernel *k) {
  if (k->closing) return;
  k->closing = 1;
  for (int i = 0; i < 4; i++) kclose(k, i);
  uv_close((uv_handle_t *)&k->ready_timer, on_kernel_handle_closed);
  uv_close((uv_handle_t *)&k->grace_timer, on_kernel_handle_closed);
  uv_close((uv_handle_t *)&k->died_timer, on_kernel_handle_closed);
}

static void kernel_kill(kernel *k) {
  if (k->pgid > 0 && !k->exited) kill(-k->pgid, SIGKILL);
}

static void kernel_release(kernel *k) {
  k->owned = 0;
  kernel_kill(k);
  if (k->exited && !k->cell) kernel_close_all(k);
  kernel_maybe_free(k);
}

static void cell_finish(cell *cl, const char *died);

static void kernel_pause(kernel *k, int paused) {
  k->paused = paused;
  for (int i = 0; i < 2; i++) {
    if (!k->open[i]) continue;
    if (paused) uv_read_stop((uv_stream_t *)(i ? &k->err : &k->out));
  }
}

static void on_k_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf) {
  (void)s;
  kernel *k = h->data;
  buf->base = k->m->readbuf;
  buf->len = sizeof k->m->readbuf;
}

static void on_k_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void kernel_resume(kernel *k) {
  k->paused = 0;
  for (int i = 0; i < 2; i++) {
    if (k->open[i]) uv_read_start((uv_stream_t *)(i ? &k->err : &k->out), on_k_alloc, on_k_read);
  }
}

static void maybe_finish(kernel *k) {
  cell *cl = k->cell;
  if (cl && cl->done && k->dm[0].done && k->dm[1].done) cell_finish(cl, NULL);
}

static void cell_bp_release(void *arg);

/* sends the batch of output as one event (backpressure: the kernel's pipes are not read while the client is full) */
static void flush_batch(cell *cl) {
  uv_timer_stop(&cl->batch);
  if (!cl->pend.len) return;
  event ev = {.type = cl->pend_k ? "stderr" : "stdout", .text = cl->pend.data, .text_len = cl->pend.len};
  int ok = write_event(cl->res, &ev);
  if (cl->pend.cap > 2 * OUT_BATCH_MAX) osb_buf_free(&cl->pend);
  else osb_buf_reset(&cl->pend);
  if (!ok && !cl->bp_paused && cl->res) {
    cl->bp_paused = 1;
    kernel_pause(cl->k, 1);
    xd_stream_on_drain(cl->res, cell_bp_release, cl);
  }
}

static void on_batch(uv_timer_t *t) { flush_batch(t->data); }

static void forward(cell *cl, int k2, const char *text, size_t len) {
  if (!cl->res) return;
  if (cl->pend.len && cl->pend_k != k2) flush_batch(cl); /* the other stream's output goes first */
  cl->pend_k = k2;
  if (osb_buf_append(&cl->pend, text, len) != 0) return; /* out of memory: lost */
  if (cl->pend.len >= OUT_BATCH_MAX) flush_batch(cl);
  else if (!uv_is_active((uv_handle_t *)&cl->batch)) uv_timer_start(&cl->batch, on_batch, OUT_BATCH_MS, 0);
}
static void fwd_out(void *arg, const char *t, size_t n) { forward(arg, 0, t, n); }
static void fwd_err(void *arg, const char *t, size_t n) { forward(arg, 1, t, n); }

static void died_now(kernel *k);

static void on_k_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  kernel *k = s->data;
  int i = s == (uv_stream_t *)&k->err;
  if (n > 0) {
    if (k->cell) xd_kdemux_feed(&k->dm[i], buf->base, (size_t)n, i ? fwd_err : fwd_out, k->cell);
    maybe_finish(k);
    return;
  }
  if (n == 0) return;
  kclose(k, i);
  if (k->exited && !k->open[0] && !k->open[1] && k->cell) died_now(k);
}

static void on_line(void *arg, const char *line, size_t len) {
  kernel *k = arg;
  cJSON *tree;
  int exit, has_exit;
  int kind = xd_kmsg_parse(line, len, &tree, &exit, &has_exit);
  if (kind == XD_KMSG_READY) {
    if (!k->started && !k->failed) {
      k->started = 1;
      uv_timer_stop(&k->ready_timer);
      void (*cb)(void *, kernel *, const char *) = k->on_start;
      k->on_start = NULL;
      if (cb) cb(k->start_arg, k, NULL);
    }
    return;
  }
  cell *cl = k->cell;
  if (!cl || kind == XD_KMSG_OTHER) {
    cJSON_Delete(tree);
    return;
  }
  if (kind == XD_KMSG_DONE) {
    cl->done = 1;
    cl->has_exit = has_exit;
    cl->exit = exit;
    maybe_finish(k);
    return;
  }
  if (cl->nreplies >= REPLIES_MAX || len > REPLIES_BYTES_MAX - cl->reply_bytes) {
    cJSON_Delete(tree); /* over the cell's bounds: dropped */
    return;
  }
  cl->reply_bytes += len;
  cl->replies[cl->nreplies++] = tree;
}

static void on_ctl_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  kernel *k = s->data;
  if (n > 0) xd_kline_push(&k->lines, buf->base, (size_t)n, on_line, k);
  else if (n < 0) kclose(k, 2);
}

/* the start failed: the creator hears of it; the kernel is no one's (killed, freed once reaped and closed) */
static void start_failed(kernel *k, const char *msg) {
  k->failed = 1;
  uv_timer_stop(&k->ready_timer);
  void (*cb)(void *, kernel *, const char *) = k->on_start;
  k->on_start = NULL;
  if (cb) cb(k->start_arg, NULL, msg);
  k->owned = 0;
  kernel_kill(k);
  if (k->exited && !k->cell) kernel_close_all(k);
}

static void on_ready_timeout(uv_timer_t *t) {
  kernel *k = t->data;
  char msg[128];
  snprintf(msg, sizeof msg, "%s kernel did not start within %d ms", LANGS[k->lang], READY_TIMEOUT_MS);
  kernel_kill(k);
  start_failed(k, msg);
}

static void died_now(kernel *k) {
  uv_timer_stop(&k->died_timer);
  cell *cl = k->cell;
  if (!cl) return;
  char how[64], sb[16], msg[160];
  if (WIFSIGNALED(k->wstatus)) snprintf(how, sizeof how, "signal %s", sig_name(WTERMSIG(k->wstatus), sb, sizeof sb));
  else snprintf(how, sizeof how, "code %d", WEXITSTATUS(k->wstatus));
  snprintf(msg, sizeof msg, "the %s kernel exited (%s); its state is lost", LANGS[k->lang], how);
  cell_finish(cl, msg);
}

static void on_died_timer(uv_timer_t *t) { died_now(t->data); }

static void kernel_exited(kernel *k, int wstatus) {
  k->exited = 1;
  k->wstatus = wstatus;
  if (k->pgid > 0) kill(-k->pgid, SIGKILL); /* leftovers of its process group */
  if (!k->started && !k->failed) {
    char how[64], sb[16], msg[160];
    if (WIFSIGNALED(wstatus)) snprintf(how, sizeof how, "%s", sig_name(WTERMSIG(wstatus), sb, sizeof sb));
    else snprintf(how, sizeof how, "code %d", WEXITSTATUS(wstatus));
    snprintf(msg, sizeof msg, "%s kernel exited during start-up (%s)", LANGS[k->lang], how);
    start_failed(k, msg);
  }
  if (k->cell) {
    if (k->paused) kernel_resume(k); /* what the pipes hold is read (and dropped if nobody listens) */
    if (!k->open[0] && !k->open[1]) died_now(k);
    else uv_timer_start(&k->died_timer, on_died_timer, DIED_DRAIN_MS, 0);
    return;
  }
  kernel_close_all(k);
  kernel_maybe_free(k);
}

static char *shell_quote(const char *s, size_t n, size_t *out_len) {
  osb_buf b = {0};
  osb_buf_append(&b, "'", 1);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\'') osb_buf_append_str(&b, "'\\''");
    else osb_buf_append(&b, s + i, 1);
  }
  if (osb_buf_append(&b, "'", 1) != 0) {
    osb_buf_free(&b);
    return NULL;
  }
  return osb_buf_steal(&b, out_len);
}

typedef struct {
  uv_write_t w;
  char *data;
} wreq;

static void on_written(uv_write_t *w, int status) {
  (void)status;
  wreq *r = (wreq *)w;
  free(r->data);
  free(r);
}

/* queues data (taken) on a kernel's stdin or control socket; -1 when it cannot */
static int kwrite(kernel *k, int i, char *data, size_t len) {
  uv_stream_t *s = (uv_stream_t *)(i == 3 ? &k->in : &k->ctl);
  wreq *r = malloc(sizeof *r);
  if (!k->open[i] || !r) {
    free(r);
    free(data);
    return -1;
  }
  r->data = data;
  uv_buf_t b = uv_buf_init(data, (unsigned)len);
  if (uv_write(&r->w, s, &b, 1, on_written) != 0) {
    free(data);
    free(r);
    return -1;
  }
  return 0;
}

/* The environment of a kernel: execd's, then the language's own variables. */
static char **kernel_env(const char *const *extra) {
  size_t n = 0, ne = 0;
  for (char **e = environ; e && *e; e++) n++;
  while (extra[ne]) ne++;
  char **env = calloc(n + ne + 1, sizeof *env);
  if (!env) return NULL;
  size_t o = 0;
  for (char **e = environ; e && *e; e++) {
    int over = 0;
    for (size_t j = 0; j < ne; j++) {
      size_t kl = strchr(extra[j], '=') - extra[j] + 1;
      if (strncmp(*e, extra[j], kl) == 0) over = 1;
    }
    if (!over) env[o++] = *e;
  }
  for (size_t j = 0; j < ne; j++) env[o++] = (char *)extra[j];
  env[o] = NULL;
  return env;
}

/* Starts a kernel in dir; cb(arg, k, NULL) once it said ready, or cb(arg, NULL, message) (the process is then
 * killed). Returns the kernel, or NULL with the message in err (nothing started, cb not called). */
static kernel *kernel_start(module *m, int lang, const char *dir, void (*cb)(void *, kernel *, const char *), void *arg,
                            osb_buf *err) {
  char file[4096], script[4096];
  const char *file_name;
  static const char *const py_env[] = {"PYTHONUNBUFFERED=1", "PYTHONIOENCODING=utf-8", "MPLBACKEND=Agg", NULL};
  static const char *const bash_env[] = {"PS1=", "PS2=", "PS0=", NULL};
  static const char *const no_env[] = {NULL};
  static const char *const scripts[NLANG] = {"code-python-kernel.py", "code-node-kernel.mjs", "code-bash-kernel.sh"};
  const char *const *extra = lang == L_PYTHON ? py_env : lang == L_BASH ? bash_env : no_env;
  if (!m->kernel_dir) {
    osb_buf_appendf(err, "cannot start the %s kernel: execd was started without --code-kernels", LANGS[lang]);
    return NULL;
  }
  snprintf(script, sizeof script, "%s/%s", m->kernel_dir, scripts[lang]);
  if (lang == L_PYTHON) {
    struct stat st;
    file_name = stat("/usr/bin/python3", &st) == 0 ? "/usr/bin/python3" : "python3"; /* Debian's (matplotlib) */
  } else if (lang == L_JAVASCRIPT) {
    file_name = m->node ? m->node : "node";
  } else {
    file_name = "bash";
  }
  char **envp = kernel_env(extra);
  if (!envp) return osb_buf_append_str(err, "out of memory"), NULL;
  int e = strchr(file_name, '/') ? 0 : xd_find_exec(file_name, envp, file, sizeof file);
  if (strchr(file_name, '/')) snprintf(file, sizeof file, "%s", file_name);
  int out[2] = {-1, -1}, errp[2] = {-1, -1}, ctl[2] = {-1, -1}, in[2] = {-1, -1};
  int devnull = -1;
  pid_t pid = -1;
  if (!e) {
    if (pipe2(out, O_CLOEXEC) || pipe2(errp, O_CLOEXEC) || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) ||
        (lang == L_BASH ? pipe2(in, O_CLOEXEC) : (devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0))
      e = errno ? errno : EMFILE;
  }
  if (!e) {
    out[1] = xd_high_fd(out[1]);
    errp[1] = xd_high_fd(errp[1]);
    ctl[1] = xd_high_fd(ctl[1]);
    int child_in = lang == L_BASH ? (in[0] = xd_high_fd(in[0])) : (devnull = xd_high_fd(devnull));
    char *argv[8];
    int a = 0;
    argv[a++] = (char *)file_name;
    if (lang == L_PYTHON) argv[a++] = "-u", argv[a++] = script;
    else if (lang == L_JAVASCRIPT) argv[a++] = script;
    else argv[a++] = "--norc", argv[a++] = "--noprofile", argv[a++] = "--noediting", argv[a++] = "-i", argv[a++] = "+m";
    argv[a] = NULL;
    xd_spawn_spec s = {.path = file, .argv = argv, .envp = envp, .cwd = dir, .in = child_in, .out = out[1],
                       .err = errp[1], .fd3 = ctl[1]};
    pid = xd_spawn(&s);
    if (pid < 0) e = (int)-pid;
  }
  free(envp);
  int child_fds[] = {out[1], errp[1], ctl[1], in[0], devnull};
  for (size_t i = 0; i < 5; i++) {
    if (child_fds[i] >= 0) close(child_fds[i]);
  }
  if (e) {
    int ours[] = {out[0], errp[0], ctl[0], in[1]};
    for (size_t i = 0; i < 4; i++) {
      if (ours[i] >= 0) close(ours[i]);
    }
    osb_buf_appendf(err, "cannot start the %s kernel: spawn %s %s", LANGS[lang], file_name,
                    uv_err_name(uv_translate_sys_error(e)));
    return NULL;
  }
  kernel *k = calloc(1, sizeof *k);
  if (!k) { /* out of memory: the process goes */
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(out[0]), close(errp[0]), close(ctl[0]);
    if (in[1] >= 0) close(in[1]);
    osb_buf_append_str(err, "out of memory");
    return NULL;
  }
  k->m = m;
  k->lang = lang;
  k->dir = strdup(dir);
  k->pid = k->pgid = pid;
  k->owned = 1;
  k->on_start = cb;
  k->start_arg = arg;
  xd_kline_init(&k->lines, XD_KLINE_MAX);
  xd_kdemux_reset(&k->dm[0], NULL, 0);
  xd_kdemux_reset(&k->dm[1], NULL, 0);
  uv_stream_t *ss[4] = {(uv_stream_t *)&k->out, (uv_stream_t *)&k->err, (uv_stream_t *)&k->ctl, (uv_stream_t *)&k->in};
  int fds[4] = {out[0], errp[0], ctl[0], in[1]};
  for (int i = 0; i < 4; i++) {
    if (fds[i] < 0) continue;
    uv_pipe_init(m->loop, (uv_pipe_t *)ss[i], 0);
    ss[i]->data = k;
    k->handles++;
    k->open[i] = 1;
    if (uv_pipe_open((uv_pipe_t *)ss[i], fds[i]) != 0) {
      close(fds[i]);
      kclose(k, i);
    }
  }
  uv_timer_init(m->loop, &k->ready_timer);
  uv_timer_init(m->loop, &k->grace_timer);
  uv_timer_init(m->loop, &k->died_timer);
  k->ready_timer.data = k->grace_timer.data = k->died_timer.data = k;
  k->handles += 3;
  k->next = m->kernels;
  m->kernels = k;
  m->handles++;
  if (k->open[0]) uv_read_start(ss[0], on_k_alloc, on_k_read);
  if (k->open[1]) uv_read_start(ss[1], on_k_alloc, on_k_read);
  if (k->open[2]) uv_read_start(ss[2], on_k_alloc, on_ctl_read);
  uv_timer_start(&k->ready_timer, on_ready_timeout, READY_TIMEOUT_MS, 0);
  if (lang == L_BASH) {
    osb_buf b = {0};
    size_t ql;
    char *q = shell_quote(script, strlen(script), &ql);
    osb_buf_append_str(&b, "source ");
    if (q) osb_buf_append(&b, q, ql);
    free(q);
    osb_buf_append(&b, "\n", 1);
    size_t len;
    char *data = osb_buf_steal(&b, &len);
    if (data) kwrite(k, 3, data, len);
  }
  return k;
}

/* SIGINT to the kernel's process group; a cell that ignores it for 5 s gets its kernel killed. */
static void on_grace(uv_timer_t *t) {
  kernel *k = t->data;
  if (k->cell) kernel_kill(k);
}

static void kernel_interrupt(kernel *k) {
  if (k->exited) return;
  kill(-k->pgid, SIGINT);
  cell *cl = k->cell;
  if (cl && !uv_is_active((uv_handle_t *)&k->grace_timer)) {
    cl->interrupted = 1;
    uv_timer_start(&k->grace_timer, on_grace, INTERRUPT_GRACE_MS, 0);
  }
}

/* ---------------------------------------------------------------------------------------------- cells */

static void on_cell_ping_closed(uv_handle_t *h) {
  cell *cl = h->data;
  if (--cl->handles) return;
  module *m = cl->m;
  osb_buf_free(&cl->pend);
  free(cl);
  m->handles--;
  module_maybe_free(m);
}

static void cell_bp_release(void *arg) {
  cell *cl = arg;
  if (!cl->bp_paused) return;
  cl->bp_paused = 0;
  if (cl->k && cl->k->cell == cl) kernel_resume(cl->k);
}

static void on_cell_client_close(void *arg) {
  cell *cl = arg;
  if (cl->res) xd_stream_on_drain(cl->res, nothing, NULL);
  cl->res = NULL;
  uv_timer_stop(&cl->ping);
  uv_timer_stop(&cl->batch);
  osb_buf_free(&cl->pend);
  cell_bp_release(cl);
  /* like the real execd when the request's context is cancelled: the cell is interrupted */
  if (cl->k && cl->k->cell == cl) kernel_interrupt(cl->k);
}

static void on_cell_ping(uv_timer_t *t) {
  cell *cl = t->data;
  if (!cl->res || xd_stream_pending(cl->res) >= STREAM_HWM) return;
  write_simple(cl->res, "ping", "pong");
}

/* The cell's end: results, then execution_complete or status + error; the stream ends; the context is free. */
static void cell_finish(cell *cl, const char *died) {
  kernel *k = cl->k;
  ctxt *c = cl->c;
  if (k->cell != cl) return;
  uv_timer_stop(&k->grace_timer);
  uv_timer_stop(&k->died_timer);
  if (died) {
    xd_kdemux_flush(&k->dm[0], fwd_out, cl);
    xd_kdemux_flush(&k->dm[1], fwd_err, cl);
  }
  flush_batch(cl);
  k->cell = NULL;
  xd_kdemux_reset(&k->dm[0], NULL, 0);
  xd_kdemux_reset(&k->dm[1], NULL, 0);
  if (k->paused) kernel_resume(k);
  xd_res *res = cl->res;
  osb_buf err = {0};
  for (size_t i = 0; i < cl->nreplies; i++) {
    cJSON *r = cl->replies[i];
    int dup;
    const cJSON *type = xd_json_member(r, "type", &dup);
    if (strcmp(type->valuestring, "result") == 0) {
      const cJSON *data = xd_json_member(r, "data", &dup);
      osb_buf b = {0};
      if (cJSON_IsObject(data)) xd_kjson_write(&b, data, 1);
      else osb_buf_append_str(&b, "{}");
      event ev = {.type = "result", .results = b.data, .results_len = b.len};
      if (b.data) write_event(res, &ev);
      osb_buf_free(&b);
    } else { /* the last error reply counts */
      osb_buf_reset(&err);
      static const char *const names[] = {"ename", "evalue", "traceback"};
      osb_buf_append(&err, "{", 1);
      for (int f = 0; f < 3; f++) {
        const cJSON *v = xd_json_member(r, names[f], &dup);
        if (f == 2 && (!v || cJSON_IsNull(v))) {
          osb_buf_append_str(&err, ",\"traceback\":[]");
          continue;
        }
        if (!v) continue; /* undefined: left out, as JSON.stringify does */
        osb_buf_appendf(&err, "%s\"%s\":", err.len > 1 ? "," : "", names[f]);
        xd_kjson_write(&err, v, 0);
      }
      osb_buf_append(&err, "}", 1);
    }
  }
  if (died) {
    const char *evalue = c->deleted ? "the context was deleted" : died;
    osb_buf_reset(&err);
    error_json(&err, cl->interrupted ? "KeyboardInterrupt" : "DeadKernelError", evalue, evalue);
  } else if (!err.len && cl->has_exit && cl->exit) {
    if (cl->interrupted && cl->exit == 130) error_json(&err, "KeyboardInterrupt", "", "KeyboardInterrupt");
    else {
      char num[16], trace[32];
      snprintf(num, sizeof num, "%d", cl->exit);
      snprintf(trace, sizeof trace, "exit status %d", cl->exit);
      error_json(&err, "CommandExecError", num, trace);
    }
  }
  if (err.len) {
    write_simple(res, "status", "error");
    event ev = {.type = "error", .error = err.data, .error_len = err.len};
    write_event(res, &ev);
  } else {
    uint64_t t = wall_ms() - cl->started;
    event ev = {.type = "execution_complete", .time = t < 1 ? 1 : t};
    write_event(res, &ev);
  }
  osb_buf_free(&err);
  for (size_t i = 0; i < cl->nreplies; i++) cJSON_Delete(cl->replies[i]);
  if (res) {
    xd_res_on_close(res, nothing, NULL);
    xd_stream_on_drain(res, nothing, NULL);
    xd_stream_end(res);
  }
  cl->res = NULL;
  c->running = 0;
  ctx_unref(c);
  cl->k = NULL;
  free(cl->code);
  uv_close((uv_handle_t *)&cl->ping, on_cell_ping_closed);
  uv_close((uv_handle_t *)&cl->batch, on_cell_ping_closed);
  if (k->exited) kernel_close_all(k);
  kernel_maybe_free(k);
}

/* Runs code on the context's (live) kernel; the response becomes the cell's stream. Takes `code`. */
static void cell_start(module *m, ctxt *c, xd_res *res, char *code, size_t code_len) {
  kernel *k = c->k;
  cell *cl = calloc(1, sizeof *cl);
  if (!cl) {
    free(code);
    c->running = 0;
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return;
  }
  cl->m = m;
  cl->c = c;
  c->refs++;
  cl->k = k;
  cl->res = res;
  cl->started = wall_ms();
  uv_timer_init(m->loop, &cl->ping);
  uv_timer_init(m->loop, &cl->batch);
  cl->ping.data = cl->batch.data = cl;
  cl->handles = 2;
  m->handles++;
  xd_stream_open(res);
  xd_res_on_close(res, on_cell_client_close, cl);
  write_simple(res, "init", c->id);
  write_simple(res, "ping", "pong");
  c->count++;
  event cnt = {.type = "execution_count", .count = c->count};
  write_event(res, &cnt);
  uv_timer_start(&cl->ping, on_cell_ping, PING_INTERVAL_MS, PING_INTERVAL_MS);
  char marker[64];
  unsigned char rb[16];
  xd_random16(rb);
  int ml = snprintf(marker, sizeof marker, "\x1eOSB-CELL-");
  for (int i = 0; i < 12; i++) ml += snprintf(marker + ml, sizeof marker - (size_t)ml, "%02x", rb[i]);
  ml += snprintf(marker + ml, sizeof marker - (size_t)ml, "\x1e");
  k->cell = cl;
  xd_kdemux_reset(&k->dm[0], marker, (size_t)ml);
  xd_kdemux_reset(&k->dm[1], marker, (size_t)ml);
  if (k->exited) {
    free(code);
    cell_finish(cl, "the kernel is not running");
    return;
  }
  osb_buf b = {0};
  if (c->lang == L_BASH) {
    size_t ql;
    char *q = shell_quote(code, code_len, &ql);
    osb_buf_append_str(&b, "__osb_run ");
    if (q) osb_buf_append(&b, q, ql);
    free(q);
    osb_buf_append_str(&b, "\n__osb_done ");
    q = shell_quote(marker, (size_t)ml, &ql);
    if (q) osb_buf_append(&b, q, ql);
    free(q);
    osb_buf_append(&b, "\n", 1);
  } else {
    osb_buf_append_str(&b, "{\"code\":");
    xd_js_json_str(&b, code, code_len);
    osb_buf_append_str(&b, ",\"marker\":");
    xd_js_json_str(&b, marker, (size_t)ml);
    osb_buf_append_str(&b, "}\n");
  }
  free(code);
  size_t len;
  char *data = osb_buf_steal(&b, &len);
  if (!data || kwrite(k, c->lang == L_BASH ? 3 : 2, data, len) != 0) kernel_kill(k); /* the cell ends as died */
}

/* ---------------------------------------------------------------------------------------------- creating contexts */

static void creation_free(creation *cr) {
  module *m = cr->m;
  free(cr->dir);
  free(cr->err_path);
  free(cr->cwd);
  free(cr);
  m->handles--;
  module_maybe_free(m);
}

static void run_in_context(module *m, ctxt *c, xd_res *res, char *code, size_t code_len);

/* the creation ended: ctx (listed) or the error message */
static void creation_done(creation *cr, ctxt *c, const char *msg) {
  module *m = cr->m;
  if (cr->res) {
    xd_res_on_close(cr->res, nothing, NULL);
    if (c) {
      osb_buf b = {0};
      osb_buf_append_str(&b, "{\"id\":");
      xd_json_str(&b, c->id, strlen(c->id));
      osb_buf_append_str(&b, ",\"language\":");
      xd_json_str(&b, LANGS[c->lang], strlen(LANGS[c->lang]));
      if (cr->cwd && cr->cwd[0]) {
        osb_buf_append_str(&b, ",\"cwd\":");
        xd_json_str(&b, cr->cwd, strlen(cr->cwd));
      }
      if (osb_buf_append(&b, "}", 1) == 0) xd_send_json(cr->res, 200, b.data, b.len);
      else xd_send_error(cr->res, 500, "RUNTIME_ERROR", "out of memory");
      osb_buf_free(&b);
    } else {
      osb_buf b = {0};
      osb_buf_appendf(&b, "error creating code context. %s", msg);
      send_error_buf(cr->res, 500, "RUNTIME_ERROR", &b);
      osb_buf_free(&b);
    }
  }
  if (cr->is_default && m->default_creating[cr->lang] == cr) {
    m->default_creating[cr->lang] = NULL;
    if (c) m->defaults[cr->lang] = c;
  }
  /* the POST /code requests that waited for it, in the order they came */
  while (cr->waiters) {
    pending *p = cr->waiters;
    cr->waiters = p->next;
    if (p->res) {
      xd_res_on_close(p->res, nothing, NULL);
      if (c && c->listed) run_in_context(m, c, p->res, p->code, p->code_len), p->code = NULL;
      else {
        osb_buf b = {0};
        osb_buf_appendf(&b, "error running codes %s", c ? "context not found" : msg);
        send_error_buf(p->res, 500, "RUNTIME_ERROR", &b);
        osb_buf_free(&b);
      }
    }
    free(p->code);
    free(p);
  }
  creation_free(cr);
}

static void on_creation_client_close(void *arg) { ((creation *)arg)->res = NULL; }

static void on_pending_close(void *arg) {
  pending *p = arg;
  p->res = NULL;
}

static void on_kernel_ready(void *arg, kernel *k, const char *msg) {
  creation *cr = arg;
  module *m = cr->m;
  if (cr->restart) { /* a dead kernel replaced: the waiting cell runs on the new one */
    ctxt *c = cr->restart;
    pending *p = cr->waiters;
    cr->waiters = NULL;
    if (k && c->listed) {
      if (c->k) kernel_release(c->k);
      c->k = k;
    } else if (k) {
      k->on_start = NULL;
      kernel_release(k);
    }
    if (p && p->res) {
      xd_res_on_close(p->res, nothing, NULL);
      if (k && c->listed) cell_start(m, c, p->res, p->code, p->code_len), p->code = NULL;
      else {
        osb_buf b = {0};
        osb_buf_appendf(&b, "error running codes %s", k ? "context not found" : msg);
        send_error_buf(p->res, 500, "RUNTIME_ERROR", &b);
        osb_buf_free(&b);
        c->running = 0;
      }
    } else {
      c->running = 0;
    }
    if (p) {
      free(p->code);
      free(p);
    }
    ctx_unref(c);
    creation_free(cr);
    return;
  }
  if (!k) {
    creation_done(cr, NULL, msg);
    return;
  }
  ctxt *c = calloc(1, sizeof *c);
  if (!c) {
    kernel_release(k);
    creation_done(cr, NULL, "out of memory");
    return;
  }
  c->m = m;
  uuid4(c->id);
  c->lang = cr->lang;
  c->dir = cr->dir;
  cr->dir = NULL;
  c->k = k;
  c->refs = 1;
  c->listed = 1;
  m->handles++;
  c->prev = m->ctx_tail;
  if (m->ctx_tail) m->ctx_tail->next = c;
  else m->ctx_head = c;
  m->ctx_tail = c;
  creation_done(cr, c, NULL);
}

/* mkdir -p on the thread pool (mkdirp.js: one component at a time, so every failure is an error) */
static void mkdirp_work(uv_work_t *w) {
  creation *cr = w->data;
  struct stat st;
  if (stat(cr->dir, &st) == 0 && S_ISDIR(st.st_mode)) return;
  size_t n = strlen(cr->dir);
  char *p = malloc(n + 1);
  if (!p) {
    cr->err = ENOMEM;
    return;
  }
  for (size_t i = 1; i <= n; i++) {
    if (i < n && cr->dir[i] != '/') continue;
    memcpy(p, cr->dir, i);
    p[i] = 0;
    if (mkdir(p, 0777) == 0) continue;
    int e = errno;
    if (e == EEXIST) {
      if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) continue;
      e = ENOTDIR;
    }
    cr->err = e;
    cr->err_path = p;
    return;
  }
  free(p);
}

static void mkdirp_done(uv_work_t *w, int status) {
  (void)status;
  creation *cr = w->data;
  module *m = cr->m;
  if (cr->err) {
    osb_buf b = {0};
    int ue = uv_translate_sys_error(cr->err);
    osb_buf_appendf(&b, "%s: %s, mkdir '%s'", uv_err_name(ue), uv_strerror(ue), cr->err_path ? cr->err_path : cr->dir);
    creation_done(cr, NULL, b.data ? b.data : "out of memory");
    osb_buf_free(&b);
    return;
  }
  if (m->closing) {
    creation_done(cr, NULL, "execd is shutting down");
    return;
  }
  osb_buf err = {0};
  if (!kernel_start(m, cr->lang, cr->dir, on_kernel_ready, cr, &err)) {
    creation_done(cr, NULL, err.data ? err.data : "out of memory");
  }
  osb_buf_free(&err);
}

static const char *default_cwd(module *m, char *buf, size_t cap) {
  struct stat st;
  if (m->workspace && *m->workspace && stat(m->workspace, &st) == 0 && S_ISDIR(st.st_mode)) return m->workspace;
  if (getcwd(buf, cap)) return buf;
  return "/";
}

/* Starts creating a context (language checked, cwd expanded, then mkdir -p and the kernel). NULL with the error's
 * message in msg when it fails at once. */
static creation *create_context(module *m, const char *language, const char *cwd, osb_buf *msg) {
  int lang = lang_of(language);
  if (lang < 0) {
    osb_buf_append_str(msg, "no kernel found for language ");
    xd_js_json_str(msg, language, strlen(language));
    osb_buf_append_str(msg, " (supported: python, javascript, bash)");
    return NULL;
  }
  osb_buf dir = {0};
  if (cwd && cwd[0]) {
    osb_buf ex = {0}, err = {0};
    if (xd_expand_path(cwd, environ, &ex, &err) != 0) {
      osb_buf_append(msg, err.data ? err.data : "out of memory", err.data ? err.len : 13);
      osb_buf_free(&ex);
      osb_buf_free(&err);
      return NULL;
    }
    xd_path_resolve(ex.data, &dir);
    osb_buf_free(&ex);
    osb_buf_free(&err);
  } else {
    char here[4096];
    osb_buf_append_str(&dir, default_cwd(m, here, sizeof here));
  }
  creation *cr = calloc(1, sizeof *cr);
  if (!cr || !dir.data) {
    free(cr);
    osb_buf_free(&dir);
    osb_buf_append_str(msg, "out of memory");
    return NULL;
  }
  cr->m = m;
  cr->lang = lang;
  cr->dir = osb_buf_steal(&dir, NULL);
  cr->work.data = cr;
  m->handles++;
  if (uv_queue_work(m->loop, &cr->work, mkdirp_work, mkdirp_done) != 0) {
    m->handles--;
    free(cr->dir);
    free(cr);
    osb_buf_append_str(msg, "cannot queue work");
    return NULL;
  }
  return cr;
}

/* ---------------------------------------------------------------------------------------------- shell runs */

static void srun_unlink(srun *r) {
  module *m = r->m;
  if (r->prev) r->prev->next = r->next;
  else if (m->runs == r) m->runs = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
}

static void on_srun_handle_closed(uv_handle_t *h) {
  srun *r = h->data;
  if (--r->handles) return;
  module *m = r->m;
  xd_lines_free(&r->split[0]);
  xd_lines_free(&r->split[1]);
  free(r);
  m->handles--;
  module_maybe_free(m);
}

static void srun_close_pipe(srun *r, int k) {
  if (!r->pipe_open[k]) return;
  r->pipe_open[k] = 0;
  uv_read_stop((uv_stream_t *)&r->pipes[k]);
  uv_close((uv_handle_t *)&r->pipes[k], on_srun_handle_closed);
}

static void srun_group(srun *r, int sig) {
  if (r->running && r->pid > 0) kill(-r->pid, sig);
}

static void srun_resume(srun *r);

static void srun_bp_release(void *arg) {
  srun *r = arg;
  if (!r->bp_paused) return;
  r->bp_paused = 0;
  srun_resume(r);
}

static int srun_line(srun *r, int k, const char *text, size_t len) {
  if (!r->res) return 1;
  event ev = {.type = k ? "stderr" : "stdout", .text = text, .text_len = len};
  if (write_event(r->res, &ev) || r->bp_paused || !r->res) return !r->bp_paused;
  r->bp_paused = 1;
  r->paused = 1;
  for (int i = 0; i < 2; i++) {
    if (r->pipe_open[i]) uv_read_stop((uv_stream_t *)&r->pipes[i]);
  }
  xd_stream_on_drain(r->res, srun_bp_release, r);
  return 0;
}
static int srun_out(void *arg, const char *t, size_t n) { return srun_line(arg, 0, t, n); }
static int srun_err(void *arg, const char *t, size_t n) { return srun_line(arg, 1, t, n); }

static void on_s_alloc(uv_handle_t *h, size_t s, uv_buf_t *buf) {
  (void)s;
  srun *r = h->data;
  buf->base = r->m->readbuf;
  buf->len = sizeof r->m->readbuf;
}

static void srun_end(srun *r);

static void on_s_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  srun *r = s->data;
  int k = s == (uv_stream_t *)&r->pipes[1];
  if (n > 0) {
    xd_lines_push(&r->split[k], buf->base, (size_t)n);
    return;
  }
  if (n == 0) return;
  srun_close_pipe(r, k);
  r->eofs++;
  if (r->eofs == 2 && r->exited) srun_end(r);
}

static void on_s_drain(uv_timer_t *t);

static void srun_resume(srun *r) {
  r->paused = 0;
  xd_lines_resume(&r->split[0]);
  xd_lines_resume(&r->split[1]);
  if (r->paused) return;
  for (int k = 0; k < 2; k++) {
    if (r->pipe_open[k]) uv_read_start((uv_stream_t *)&r->pipes[k], on_s_alloc, on_s_read);
  }
  if (r->after_resume) {
    r->after_resume = 0;
    uv_timer_start(&r->drain, on_s_drain, PIPE_DRAIN_MS, 0);
  }
}

static void on_s_drain(uv_timer_t *t) {
  srun *r = t->data;
  if (r->finished) return;
  if (r->paused) {
    r->after_resume = 1;
    return;
  }
  for (int k = 0; k < 2; k++) {
    uv_os_fd_t fd;
    if (!r->pipe_open[k] || uv_fileno((uv_handle_t *)&r->pipes[k], &fd) != 0) continue;
    ssize_t n;
    while (!r->paused && (n = read(fd, r->m->readbuf, sizeof r->m->readbuf)) > 0) {
      xd_lines_push(&r->split[k], r->m->readbuf, (size_t)n);
    }
  }
  if (r->paused) {
    r->after_resume = 1;
    return;
  }
  srun_end(r);
}

static void srun_release_waiters(srun *r) {
  while (r->waiters) {
    waiter *w = r->waiters;
    r->waiters = w->next;
    xd_res_on_close(w->res, nothing, NULL);
    xd_send_empty(w->res);
    free(w);
  }
}

static void srun_close_handles(srun *r) {
  srun_close_pipe(r, 0);
  srun_close_pipe(r, 1);
  uv_close((uv_handle_t *)&r->drain, on_srun_handle_closed);
  uv_close((uv_handle_t *)&r->kill, on_srun_handle_closed);
  uv_close((uv_handle_t *)&r->ping, on_srun_handle_closed);
}

/* the final event (exit status, or the start error), the stream's end */
static void srun_finish(srun *r, const char *start_error) {
  if (r->finished) return;
  r->finished = 1;
  r->running = 0;
  srun_unlink(r);
  xd_lines_flush(&r->split[0]);
  xd_lines_flush(&r->split[1]);
  xd_res *res = r->res;
  if (start_error) write_error_event(res, "CommandExecError", start_error, start_error);
  else if (WIFEXITED(r->wstatus) && WEXITSTATUS(r->wstatus) == 0) {
    uint64_t t = wall_ms() - r->started;
    event ev = {.type = "execution_complete", .time = t < 1 ? 1 : t};
    write_event(res, &ev);
  } else if (WIFSIGNALED(r->wstatus)) {
    int sig = WTERMSIG(r->wstatus);
    char sb[16], trace[48];
    snprintf(trace, sizeof trace, "signal: %s",
             sig == SIGKILL ? "killed" : sig == SIGTERM ? "terminated" : sig_name(sig, sb, sizeof sb));
    write_error_event(res, "CommandExecError", "-1", trace);
  } else {
    char num[16], trace[32];
    snprintf(num, sizeof num, "%d", WEXITSTATUS(r->wstatus));
    snprintf(trace, sizeof trace, "exit status %d", WEXITSTATUS(r->wstatus));
    write_error_event(res, "CommandExecError", num, trace);
  }
  if (res) {
    xd_res_on_close(res, nothing, NULL);
    xd_stream_on_drain(res, nothing, NULL);
    xd_stream_end(res);
  }
  r->res = NULL;
  srun_release_waiters(r);
  srun_close_handles(r);
}

static void srun_end(srun *r) {
  if (!r->finished) srun_finish(r, NULL);
}

static void srun_exited(srun *r, int wstatus) {
  r->exited = 1;
  r->wstatus = wstatus;
  r->running = 0;
  uv_timer_stop(&r->kill);
  if (r->eofs == 2) {
    srun_end(r);
    return;
  }
  uv_update_time(r->m->loop);
  uv_timer_start(&r->drain, on_s_drain, PIPE_DRAIN_MS, 0);
}

static void on_s_kill(uv_timer_t *t) {
  srun *r = t->data;
  if (!r->exited && r->pid > 0) kill(-r->pid, SIGKILL);
}

static void on_srun_client_close(void *arg) {
  srun *r = arg;
  if (r->res) xd_stream_on_drain(r->res, nothing, NULL);
  r->res = NULL;
  uv_timer_stop(&r->ping);
  xd_lines_discard(&r->split[0]);
  xd_lines_discard(&r->split[1]);
  srun_bp_release(r);
}

static void on_srun_ping(uv_timer_t *t) {
  srun *r = t->data;
  if (!r->res || r->bp_paused || xd_stream_pending(r->res) >= STREAM_HWM) return;
  write_simple(r->res, "ping", "pong");
}

/* POST /code without context.language: `bash -c code` with /command's events */
static void run_shell(module *m, xd_res *res, const char *code) {
  srun *r = calloc(1, sizeof *r);
  if (!r) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return;
  }
  r->m = m;
  hex_id(r->id);
  r->started = wall_ms();
  r->res = res;
  xd_lines_init(&r->split[0], XD_MAX_LINE_BYTES, srun_out, r);
  xd_lines_init(&r->split[1], XD_MAX_LINE_BYTES, srun_err, r);
  uv_timer_init(m->loop, &r->drain);
  uv_timer_init(m->loop, &r->kill);
  uv_timer_init(m->loop, &r->ping);
  r->drain.data = r->kill.data = r->ping.data = r;
  r->handles = 3;
  m->handles++;
  xd_stream_open(res);
  xd_res_on_close(res, on_srun_client_close, r);
  write_simple(res, "init", r->id);
  write_simple(res, "ping", "pong");

  char here[4096], path[4096];
  const char *cwd = default_cwd(m, here, sizeof here);
  int e = xd_find_exec("bash", environ, path, sizeof path);
  int p1[2] = {-1, -1}, p2[2] = {-1, -1}, in = -1;
  if (!e && (pipe2(p1, O_CLOEXEC) || pipe2(p2, O_CLOEXEC) || (in = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0))
    e = errno ? errno : EMFILE;
  pid_t pid = -1;
  if (!e) {
    p1[1] = xd_high_fd(p1[1]);
    p2[1] = xd_high_fd(p2[1]);
    in = xd_high_fd(in);
    char *argv[] = {"bash", "-c", (char *)code, NULL};
    xd_spawn_spec s = {.path = path, .argv = argv, .envp = environ, .cwd = cwd, .in = in, .out = p1[1], .err = p2[1]};
    pid = xd_spawn(&s);
    if (pid < 0) e = (int)-pid;
  }
  int theirs[] = {p1[1], p2[1], in};
  for (int i = 0; i < 3; i++) {
    if (theirs[i] >= 0) close(theirs[i]);
  }
  if (e) {
    if (p1[0] >= 0) close(p1[0]);
    if (p2[0] >= 0) close(p2[0]);
    char msg[64];
    snprintf(msg, sizeof msg, "spawn bash %s", uv_err_name(uv_translate_sys_error(e)));
    r->finished = 0;
    srun_finish(r, msg);
    return;
  }
  r->pid = pid;
  r->running = 1;
  r->next = m->runs;
  if (m->runs) m->runs->prev = r;
  m->runs = r;
  int fds[2] = {p1[0], p2[0]};
  for (int k = 0; k < 2; k++) {
    uv_pipe_init(m->loop, &r->pipes[k], 0);
    r->pipes[k].data = r;
    r->handles++;
    r->pipe_open[k] = 1;
    if (uv_pipe_open(&r->pipes[k], fds[k]) != 0) {
      close(fds[k]);
      srun_close_pipe(r, k);
      r->eofs++;
    } else {
      uv_read_start((uv_stream_t *)&r->pipes[k], on_s_alloc, on_s_read);
    }
  }
  uv_timer_start(&r->ping, on_srun_ping, PING_INTERVAL_MS, PING_INTERVAL_MS);
}

static void on_waiter_close(void *arg) {
  waiter *w = arg;
  for (waiter **p = &w->r->waiters; *p; p = &(*p)->next) {
    if (*p == w) {
      *p = w->next;
      break;
    }
  }
  free(w);
}

/* ---------------------------------------------------------------------------------------------- SIGCHLD */

static void on_sigchld(uv_signal_t *h, int signum) {
  (void)signum;
  module *m = h->data;
  for (;;) {
    int status = 0, hit = 0;
    for (kernel *k = m->kernels; k && !hit; k = k->next) {
      if (k->pid > 0 && !k->exited && waitpid(k->pid, &status, WNOHANG) == k->pid) {
        hit = 1;
        kernel_exited(k, status);
      }
    }
    for (srun *r = m->runs; r && !hit; r = r->next) {
      if (r->pid > 0 && !r->exited && waitpid(r->pid, &status, WNOHANG) == r->pid) {
        hit = 1;
        srun_exited(r, status);
      }
    }
    if (!hit) return;
  }
}

/* ---------------------------------------------------------------------------------------------- routes */

static void run_in_context(module *m, ctxt *c, xd_res *res, char *code, size_t code_len) {
  if (c->running) {
    xd_stream_open(res);
    write_simple(res, "init", c->id);
    static const char busy[] = "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running codes session is busy\"}";
    xd_stream_write(res, busy, sizeof busy - 1); /* bare, no blank line after it */
    xd_stream_end(res);
    free(code);
    return;
  }
  c->running = 1;
  if (c->k && !c->k->exited) {
    cell_start(m, c, res, code, code_len);
    return;
  }
  /* like Jupyter's auto-restart: a dead kernel is replaced by a fresh one (its state is gone) */
  creation *cr = calloc(1, sizeof *cr);
  pending *p = calloc(1, sizeof *p);
  osb_buf err = {0};
  if (cr && p) {
    cr->m = m;
    cr->lang = c->lang;
    cr->restart = c;
    c->refs++;
    m->handles++;
    p->m = m;
    p->res = res;
    p->code = code;
    p->code_len = code_len;
    cr->waiters = p;
    if (kernel_start(m, c->lang, c->dir, on_kernel_ready, cr, &err)) {
      xd_res_on_close(res, on_pending_close, p);
      osb_buf_free(&err);
      return;
    }
    m->handles--;
    c->refs--;
  } else {
    osb_buf_append_str(&err, "out of memory");
  }
  free(cr);
  free(p);
  free(code);
  c->running = 0;
  osb_buf msg = {0};
  osb_buf_appendf(&msg, "error running codes %s", err.data ? err.data : "out of memory");
  send_error_buf(res, 500, "RUNTIME_ERROR", &msg);
  osb_buf_free(&msg);
  osb_buf_free(&err);
}

static const char BAD_BODY[] = "error parsing request, MAYBE invalid body format. ";

/* the body as a JSON object, or an answer sent (0) */
static cJSON *parse_object(const xd_req *req, xd_res *res) {
  osb_buf msg = {0};
  cJSON *body = NULL;
  osb_buf_append_str(&msg, BAD_BODY);
  if (req->body_len == 0) osb_buf_append_str(&msg, "EOF");
  else if (xd_json_parse(req->body, req->body_len, &body, &msg) == 0 && !cJSON_IsObject(body)) {
    cJSON_Delete(body);
    body = NULL;
    osb_buf_append_str(&msg, "expected a JSON object");
  }
  if (!body) send_error_buf(res, 400, "INVALID_REQUEST_BODY", &msg);
  osb_buf_free(&msg);
  return body;
}

/* JavaScript's String(v) of a JSON value (context.id / context.language given as something else) */
static void js_string(const cJSON *v, osb_buf *out) {
  if (cJSON_IsString(v)) osb_buf_append_str(out, v->valuestring);
  else if (cJSON_IsNumber(v)) xd_js_number(out, v->valuedouble);
  else if (cJSON_IsBool(v)) osb_buf_append_str(out, cJSON_IsTrue(v) ? "true" : "false");
  else if (cJSON_IsArray(v)) {
    for (const cJSON *e = v->child; e; e = e->next) {
      if (e != v->child) osb_buf_append(out, ",", 1);
      if (!cJSON_IsNull(e)) js_string(e, out);
    }
  } else if (cJSON_IsObject(v)) osb_buf_append_str(out, "[object Object]");
  else osb_buf_append_str(out, "null");
}

/* JavaScript truthiness of a JSON value */
static int truthy(const cJSON *v) {
  if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return 0;
  if (cJSON_IsString(v)) return v->valuestring[0] != 0;
  if (cJSON_IsNumber(v)) return v->valuedouble != 0;
  return 1;
}

static void post_context(module *m, const xd_req *req, xd_res *res) {
  cJSON *body = parse_object(req, res);
  if (!body) return;
  int dup;
  const cJSON *lang = xd_json_member(body, "language", &dup), *cwd = xd_json_member(body, "cwd", &dup);
  if ((xd_json_present(lang) && !cJSON_IsString(lang)) || (xd_json_present(cwd) && !cJSON_IsString(cwd))) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. language and cwd must be strings");
    cJSON_Delete(body);
    return;
  }
  const char *l = xd_json_present(lang) ? lang->valuestring : "", *d = xd_json_present(cwd) ? cwd->valuestring : "";
  osb_buf msg = {0};
  creation *cr = create_context(m, l, d, &msg);
  if (!cr) {
    osb_buf b = {0};
    osb_buf_appendf(&b, "error creating code context. %s", msg.data ? msg.data : "out of memory");
    send_error_buf(res, 500, "RUNTIME_ERROR", &b);
    osb_buf_free(&b);
  } else {
    cr->res = res;
    cr->cwd = strdup(d);
    xd_res_on_close(res, on_creation_client_close, cr);
  }
  osb_buf_free(&msg);
  cJSON_Delete(body);
}

static void public_ctx(osb_buf *b, const ctxt *c) {
  osb_buf_append_str(b, "{\"id\":");
  xd_json_str(b, c->id, strlen(c->id));
  osb_buf_append_str(b, ",\"language\":");
  xd_json_str(b, LANGS[c->lang], strlen(LANGS[c->lang]));
  osb_buf_append(b, "}", 1);
}

static void list_contexts(module *m, const xd_req *req, xd_res *res) {
  char *language = xd_query(req, "language");
  osb_buf b = {0};
  osb_buf_append(&b, "[", 1);
  int first = 1;
  for (ctxt *c = m->ctx_head; c; c = c->next) {
    if (language && language[0] && strcmp(language, LANGS[c->lang]) != 0) continue;
    if (!first) osb_buf_append(&b, ",", 1);
    first = 0;
    public_ctx(&b, c);
  }
  if (osb_buf_append(&b, "]", 1) == 0) xd_send_json(res, 200, b.data, b.len);
  else xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
  osb_buf_free(&b);
  free(language);
}

static void not_found(xd_res *res, const char *id) {
  osb_buf b = {0};
  osb_buf_appendf(&b, "context %s not found", id);
  send_error_buf(res, 404, "CONTEXT_NOT_FOUND", &b);
  osb_buf_free(&b);
}

static void run_code(module *m, const xd_req *req, xd_res *res) {
  cJSON *body = parse_object(req, res);
  if (!body) return;
  int dup;
  const cJSON *code = xd_json_member(body, "code", &dup), *spec = xd_json_member(body, "context", &dup);
  if (!cJSON_IsString(code) || !code->valuestring[0]) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY",
                  "invalid request, validation error Key: 'RunCodeRequest.Code' Error:Field validation for 'Code' failed on the 'required' tag");
    goto done;
  }
  if (xd_json_present(spec) && !cJSON_IsObject(spec)) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. context must be an object");
    goto done;
  }
  const cJSON *lang = xd_json_present(spec) ? xd_json_member(spec, "language", &dup) : NULL;
  const cJSON *id = xd_json_present(spec) ? xd_json_member(spec, "id", &dup) : NULL;
  if (!truthy(lang)) {
    run_shell(m, res, code->valuestring);
    goto done;
  }
  char *copy = strdup(code->valuestring);
  size_t copy_len = strlen(code->valuestring);
  if (!copy) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto done;
  }
  if (truthy(id)) {
    osb_buf s = {0};
    js_string(id, &s);
    ctxt *c = s.data ? find_ctx(m, s.data) : NULL;
    osb_buf_free(&s);
    if (!c) {
      free(copy);
      xd_send_error(res, 500, "RUNTIME_ERROR", "error running codes context not found");
      goto done;
    }
    run_in_context(m, c, res, copy, copy_len);
    goto done;
  }
  osb_buf ls = {0};
  js_string(lang, &ls);
  int l = ls.data ? lang_of(ls.data) : -1;
  if (l >= 0 && m->defaults[l]) {
    osb_buf_free(&ls);
    run_in_context(m, m->defaults[l], res, copy, copy_len);
    goto done;
  }
  creation *cr = l >= 0 ? m->default_creating[l] : NULL;
  osb_buf msg = {0};
  if (!cr) {
    cr = create_context(m, ls.data ? ls.data : "", "", &msg);
    if (cr) {
      cr->is_default = 1;
      m->default_creating[l] = cr;
    }
  }
  osb_buf_free(&ls);
  pending *p = cr ? calloc(1, sizeof *p) : NULL;
  if (!p) {
    free(copy);
    osb_buf b = {0};
    osb_buf_appendf(&b, "error running codes %s", msg.data ? msg.data : "out of memory");
    send_error_buf(res, 500, "RUNTIME_ERROR", &b);
    osb_buf_free(&b);
    osb_buf_free(&msg);
    goto done;
  }
  osb_buf_free(&msg);
  p->m = m;
  p->res = res;
  p->code = copy;
  p->code_len = copy_len;
  pending **tail = &cr->waiters;
  while (*tail) tail = &(*tail)->next;
  *tail = p;
  xd_res_on_close(res, on_pending_close, p);
done:
  cJSON_Delete(body);
}

int xd_code_interrupt(void *module_, const char *id, xd_res *res) {
  module *m = module_;
  if (!m) return 0;
  ctxt *c = find_ctx(m, id);
  if (c) {
    if (c->k && c->k->cell) kernel_interrupt(c->k);
    xd_send_empty(res);
    return 1;
  }
  for (srun *r = m->runs; r; r = r->next) {
    if (strcmp(r->id, id) != 0) continue;
    if (!r->running) {
      xd_send_empty(res);
      return 1;
    }
    waiter *w = calloc(1, sizeof *w);
    if (!w) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      return 1;
    }
    w->res = res;
    w->r = r;
    w->next = r->waiters;
    r->waiters = w;
    xd_res_on_close(res, on_waiter_close, w);
    srun_group(r, SIGTERM);
    if (!uv_is_active((uv_handle_t *)&r->kill)) uv_timer_start(&r->kill, on_s_kill, SHELL_TERM_GRACE_MS, 0);
    return 1;
  }
  return 0;
}

int xd_code_route(void *module_, const xd_req *req, xd_res *res) {
  module *m = module_;
  const char *p = req->path, *meth = req->method;
  int get = strcmp(meth, "GET") == 0, post = strcmp(meth, "POST") == 0, del = strcmp(meth, "DELETE") == 0;
  if (strcmp(p, "/code") == 0) {
    if (post) run_code(m, req, res);
    else if (del) {
      char *id = xd_query(req, "id");
      if (!id || !*id) xd_send_error(res, 400, "MISSING_QUERY", "missing query parameter 'id'");
      else if (!xd_code_interrupt(m, id, res))
        xd_send_error(res, 500, "RUNTIME_ERROR", "error interruptting code context. no such session"); /* execd's spelling */
      free(id);
    } else return 0;
    return 1;
  }
  if (strcmp(p, "/code/context") == 0) {
    if (!post) return 0;
    post_context(m, req, res);
    return 1;
  }
  if (strcmp(p, "/code/contexts") == 0) {
    if (get) list_contexts(m, req, res);
    else if (del) {
      char *language = xd_query(req, "language");
      if (!language || !*language) xd_send_error(res, 400, "MISSING_QUERY", "missing query parameter 'language'");
      else {
        for (ctxt *c = m->ctx_head, *n; c; c = n) {
          n = c->next;
          if (strcmp(LANGS[c->lang], language) == 0) ctx_delete(c);
        }
        xd_send_empty(res);
      }
      free(language);
    } else return 0;
    return 1;
  }
  if (strncmp(p, "/code/contexts/", 15) != 0 || !p[15] || strchr(p + 15, '/') || !(get || del)) return 0;
  char *id = xd_decode_segment(p + 15, strlen(p + 15));
  if (!id) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  ctxt *c = find_ctx(m, id);
  if (!c) not_found(res, id);
  else if (get) {
    osb_buf b = {0};
    public_ctx(&b, c);
    if (b.data) xd_send_json(res, 200, b.data, b.len);
    else xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    osb_buf_free(&b);
  } else {
    ctx_delete(c);
    xd_send_empty(res);
  }
  free(id);
  return 1;
}

/* ---------------------------------------------------------------------------------------------- module */

static void on_module_handle_closed(uv_handle_t *h) {
  module *m = h->data;
  m->handles--;
  module_maybe_free(m);
}

static void module_maybe_free(module *m) {
  if (m->closing && m->handles == 0) {
    free(m->workspace);
    free(m->kernel_dir);
    free(m->node);
    free(m);
  }
}

void *xd_code_new(const xd_ctx *ctx) {
  module *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->loop = ctx->loop;
  m->workspace = ctx->workspace ? strdup(ctx->workspace) : NULL;
  m->kernel_dir = ctx->code_kernels ? strdup(ctx->code_kernels) : NULL;
  m->node = ctx->node_path ? strdup(ctx->node_path) : NULL;
  if (uv_signal_init(m->loop, &m->sigchld) != 0) {
    free(m->workspace);
    free(m->kernel_dir);
    free(m->node);
    free(m);
    return NULL;
  }
  m->sigchld.data = m;
  uv_signal_start(&m->sigchld, on_sigchld, SIGCHLD);
  m->handles = 1;
  return m;
}

void xd_code_close(void *module_) {
  module *m = module_;
  if (!m || m->closing) return;
  m->closing = 1;
  /* the server closed its connections first: every stream's client is gone */
  while (m->ctx_head) ctx_delete(m->ctx_head);
  for (int l = 0; l < NLANG; l++) {
    creation *cr = m->default_creating[l];
    if (cr) cr->is_default = 0;
    m->default_creating[l] = NULL;
  }
  for (kernel *k = m->kernels; k; k = k->next) {
    if (k->pid > 0 && !k->exited) {
      kill(-k->pgid, SIGKILL);
      int st;
      if (waitpid(k->pid, &st, 0) == k->pid) k->exited = 1, k->wstatus = st;
    }
  }
  for (kernel *k = m->kernels, *n; k; k = n) {
    n = k->next;
    if (!k->started && !k->failed) start_failed(k, "execd is shutting down");
    if (k->cell) died_now(k);
    k->owned = 0;
    kernel_close_all(k);
  }
  while (m->runs) {
    srun *r = m->runs;
    if (r->pid > 0 && !r->exited) {
      kill(-r->pid, SIGKILL);
      int st;
      if (waitpid(r->pid, &st, 0) == r->pid) r->wstatus = st, r->exited = 1;
    }
    srun_finish(r, NULL);
  }
  uv_close((uv_handle_t *)&m->sigchld, on_module_handle_closed);
}
