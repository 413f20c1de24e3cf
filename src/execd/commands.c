/* execd's commands API in C (xd.h; the request rules in cmdreq.h): the Node execd's commands.js, byte for byte where a client sees it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2, memmem */
#endif
#include "cmdreq.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pwd.h>
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

#include "events.h"
#include "json.h"
#include "lines.h"
#include "logring.h"
#include "spawn.h"
#include "xd.h"

extern char **environ;

#define PING_INTERVAL_MS 3000
#define INTERRUPT_GRACE_MS 3000
/* After the process exits, how long its pipes may stay open (a grandchild holding them) before we stop reading. */
#define PIPE_DRAIN_MS 200
#define FINISHED_RECORDS_MAX 1000
#define FINISHED_LOG_BUDGET (16u * 1024u * 1024u)
#define FINISHED_RETENTION_MS (24ull * 3600ull * 1000ull)
#define SWEEP_MS (3600u * 1000u)
/* A stream write that leaves this many bytes queued means the client's buffer is full (Node's highWaterMark). */
#define STREAM_HWM 16384

/* ------------------------------------------------------------------------------------------------------------ */
/* The module */

typedef struct module module;
typedef struct cmd cmd;
typedef struct stream stream;

typedef struct waiter {
  xd_res *res;
  cmd *rec;
  struct waiter *next;
} waiter;

struct cmd {
  module *m;
  cmd *prev, *next; /* every record (running and finished) */
  cmd *fin_next;    /* finished records, oldest first */
  char id[33];
  char *content;
  int background;
  int running;
  int relay; /* a foreground command signals are relayed to (--signal-forwarding) */
  int exit_code;
  char *error;      /* the status route's `error` (NULL: none) */
  int start_error;  /* error is a start failure's message */
  char started_at[40], finished_at[40];
  uint64_t start_ms, end_ms;
  pid_t pid; /* the process group to signal; 0 once finished */
  int exited, wstatus;
  /* foreground */
  uv_pipe_t pipes[2];
  int pipe_open[2];
  int eofs;
  xd_lines split[2];
  int paused;       /* pipes not read: the client's buffer is full */
  int after_resume; /* the drain deadline waits for the client */
  stream *st;
  /* background */
  uv_pipe_t bgpipe;
  int bg_open;
  xd_logring log;
  uv_timer_t drain_timer, timeout_timer, kill_timer;
  waiter *waiters;
  int handles; /* libuv handles not yet closed */
  int freeing;
};

struct stream {
  module *m;
  stream *prev, *next;
  xd_res *res; /* NULL once the client went away or the response ended */
  cmd *rec;    /* the foreground command it streams, until the final event */
  uv_timer_t ping, tail;
  int handles;
  int bp_paused;
  int tailing;
  int freeing;
};

struct module {
  uv_loop_t *loop;
  char *workspace;
  int forwarding;
  uint64_t tail_ms;
  int (*code_interrupt)(const char *id, xd_res *res);
  int (*interrupt_other)(const char *id);
  const char *shell; /* "bash" or "sh" */
  cmd *all_head, *all_tail;
  cmd *fin_head, *fin_tail;
  size_t nfin;
  stream *streams;
  uv_signal_t sigchld;
  uv_timer_t sweeper;
  int handles;
  int closing;
  char readbuf[65536];
};


/* RFC 3339 with nanoseconds, like Go's time.RFC3339Nano for UTC (trailing zeros trimmed). */
static void now_stamp(char out[40]) {
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
  char frac[16];
  snprintf(frac, sizeof frac, "%09ld", ts.tv_nsec);
  size_t fl = 9;
  while (fl > 0 && frac[fl - 1] == '0') fl--;
  frac[fl] = 0;
  snprintf(out + n, 40 - n, "%s%s%s", fl ? "." : "", frac, "Z");
}

static void random_id(char out[33]) {
  unsigned char b[16];
  xd_random16(b);
  for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}


/* --- handle bookkeeping ---------------------------------------------------------------------------------------- */

static void module_maybe_free(module *m);

static void cmd_release(cmd *rec) {
  module *m = rec->m;
  xd_lines_free(&rec->split[0]);
  xd_lines_free(&rec->split[1]);
  xd_logring_free(&rec->log);
  free(rec->content);
  free(rec->error);
  free(rec);
  m->handles--;
  module_maybe_free(m);
}

static void on_cmd_handle_closed(uv_handle_t *h) {
  cmd *rec = h->data;
  if (--rec->handles == 0 && rec->freeing) cmd_release(rec);
}

static void cmd_close_handle(cmd *rec, uv_handle_t *h) {
  (void)rec;
  if (!uv_is_closing(h)) uv_close(h, on_cmd_handle_closed);
}

static void close_pipe(cmd *rec, int k) {
  if (!rec->pipe_open[k]) return;
  rec->pipe_open[k] = 0;
  uv_read_stop((uv_stream_t *)&rec->pipes[k]);
  cmd_close_handle(rec, (uv_handle_t *)&rec->pipes[k]);
}

static void close_bgpipe(cmd *rec) {
  if (!rec->bg_open) return;
  rec->bg_open = 0;
  uv_read_stop((uv_stream_t *)&rec->bgpipe);
  cmd_close_handle(rec, (uv_handle_t *)&rec->bgpipe);
}

static void unlink_all(cmd *rec) {
  module *m = rec->m;
  if (rec->prev) rec->prev->next = rec->next;
  else m->all_head = rec->next;
  if (rec->next) rec->next->prev = rec->prev;
  else m->all_tail = rec->prev;
  rec->prev = rec->next = NULL;
}

/* Drops the record (unlinked from the finished queue by the caller): closes its handles, frees it when closed. */
static void cmd_free(cmd *rec) {
  unlink_all(rec);
  rec->freeing = 1;
  xd_lines_discard(&rec->split[0]);
  xd_lines_discard(&rec->split[1]);
  close_pipe(rec, 0);
  close_pipe(rec, 1);
  close_bgpipe(rec); /* a grandchild may still write: its output goes nowhere now */
  cmd_close_handle(rec, (uv_handle_t *)&rec->drain_timer);
  cmd_close_handle(rec, (uv_handle_t *)&rec->timeout_timer);
  cmd_close_handle(rec, (uv_handle_t *)&rec->kill_timer);
}

static cmd *find_cmd(module *m, const char *id) {
  for (cmd *r = m->all_head; r; r = r->next) {
    if (strcmp(r->id, id) == 0) return r;
  }
  return NULL;
}

/* Drops the oldest finished records beyond the count, log-bytes and age bounds. */
static void prune(module *m) {
  uint64_t log_bytes = 0;
  for (cmd *r = m->fin_head; r; r = r->fin_next) log_bytes += r->log.size;
  uint64_t now = xd_wall_ms();
  uint64_t oldest = now > FINISHED_RETENTION_MS ? now - FINISHED_RETENTION_MS : 0;
  while (m->fin_head &&
         (m->nfin > FINISHED_RECORDS_MAX || log_bytes > FINISHED_LOG_BUDGET || m->fin_head->end_ms < oldest)) {
    cmd *r = m->fin_head;
    m->fin_head = r->fin_next;
    if (!m->fin_head) m->fin_tail = NULL;
    m->nfin--;
    log_bytes -= r->log.size;
    cmd_free(r);
  }
}

static void on_sweep(uv_timer_t *t) { prune(t->data); }

static void signal_group(cmd *rec, int sig) {
  if (rec->pid > 0) kill(-rec->pid, sig); /* already gone: nothing to do */
}

/* --- streams ------------------------------------------------------------------------------------------------- */

static void on_stream_handle_closed(uv_handle_t *h) {
  stream *st = h->data;
  if (--st->handles == 0) {
    module *m = st->m;
    free(st);
    m->handles--;
    module_maybe_free(m);
  }
}

/* Replaces a callback registration on a response that this module no longer follows. */
static void nothing(void *arg) { (void)arg; }

static void stream_free(stream *st) {
  if (st->freeing) return;
  st->freeing = 1;
  module *m = st->m;
  if (st->prev) st->prev->next = st->next;
  else m->streams = st->next;
  if (st->next) st->next->prev = st->prev;
  if (st->res) {
    xd_res_on_close(st->res, nothing, NULL);
    xd_stream_on_drain(st->res, nothing, NULL);
  }
  st->res = NULL;
  uv_close((uv_handle_t *)&st->ping, on_stream_handle_closed);
  uv_close((uv_handle_t *)&st->tail, on_stream_handle_closed);
}

/* signalForwarding: upstream execd relays every signal it receives to the process group of the foreground command
 * running at that moment. A write to a command stream whose client already closed raises SIGPIPE in execd, which
 * is relayed like any other (the strict version of the race, as in the Node execd). */
static void relay(module *m, int sig) {
  for (cmd *r = m->all_head; r; r = r->next) {
    if (r->relay && r->running) signal_group(r, sig);
  }
}

static void write_to_closed(stream *st) {
  if (st->m->forwarding) relay(st->m, SIGPIPE);
}

typedef xd_event event;

/* Writes one event; 0 when the client's buffer is full (the caller should wait for drain), else 1. */
static int write_event(stream *st, const event *ev) {
  if (!st->res || xd_res_closed(st->res)) {
    write_to_closed(st);
    return 1;
  }
  osb_buf b = {0};
  int ok = 1;
  if (xd_event_append(&b, ev) != 0) ok = 1; /* out of memory: the event is lost, the stream goes on */
  else if (xd_stream_write(st->res, b.data, b.len) != 0) write_to_closed(st);
  else ok = xd_stream_pending(st->res) < STREAM_HWM;
  osb_buf_free(&b);
  return ok;
}

static void on_tail(uv_timer_t *t) {
  stream *st = t->data;
  if (st->res && !xd_res_closed(st->res)) {
    xd_res *res = st->res;
    xd_res_on_close(res, nothing, NULL);
    xd_stream_on_drain(res, nothing, NULL);
    st->res = NULL;
    xd_stream_end(res);
  } else {
    write_to_closed(st); /* the terminating chunk written to a stream its client closed */
  }
  stream_free(st);
}

/* execd keeps the response open for its graceful-shutdown tail after the final event. */
static void end_stream(stream *st) {
  if (!st->res && !st->m->forwarding) {
    stream_free(st);
    return;
  }
  st->tailing = 1;
  uv_timer_start(&st->tail, on_tail, st->m->tail_ms, 0);
}

static void resume_output(cmd *rec);

/* Backpressure released: the client's buffer drained, or the client went away. */
static void bp_release(void *arg) {
  stream *st = arg;
  if (!st->bp_paused) return;
  st->bp_paused = 0;
  if (st->rec) resume_output(st->rec);
}

static void on_client_close(void *arg) {
  stream *st = arg;
  if (st->res) xd_stream_on_drain(st->res, nothing, NULL); /* released here, below */
  st->res = NULL;
  uv_timer_stop(&st->ping);
  cmd *rec = st->rec;
  if (rec) { /* nobody listens: read the rest of the output and drop it */
    xd_lines_discard(&rec->split[0]);
    xd_lines_discard(&rec->split[1]);
  }
  bp_release(st);
  if (st->tailing && !st->m->forwarding) {
    uv_timer_stop(&st->tail);
    stream_free(st);
  }
}

static stream *stream_open(module *m, xd_res *res) {
  stream *st = calloc(1, sizeof *st);
  if (!st) return NULL;
  st->m = m;
  st->res = res;
  uv_timer_init(m->loop, &st->ping);
  uv_timer_init(m->loop, &st->tail);
  st->ping.data = st->tail.data = st;
  st->handles = 2;
  m->handles++;
  st->next = m->streams;
  if (m->streams) m->streams->prev = st;
  m->streams = st;
  xd_stream_open(res);
  xd_res_on_close(res, on_client_close, st);
  return st;
}

static void on_ping(uv_timer_t *t) {
  stream *st = t->data;
  /* no ping while output waits for the client: it would only pile up behind it */
  if (!st->res || st->bp_paused || xd_stream_pending(st->res) >= STREAM_HWM) return;
  event ev = {.type = "ping", .text = "pong", .text_len = 4};
  write_event(st, &ev);
}

/* --- the running command ------------------------------------------------------------------------------------- */

static void pause_output(cmd *rec) {
  rec->paused = 1;
  for (int k = 0; k < 2; k++) {
    if (rec->pipe_open[k]) uv_read_stop((uv_stream_t *)&rec->pipes[k]);
  }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  cmd *rec = h->data;
  buf->base = rec->m->readbuf;
  buf->len = sizeof rec->m->readbuf;
}

static void end_fg(cmd *rec);
static void on_fg_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void on_drain_deadline(uv_timer_t *t);

static void resume_output(cmd *rec) {
  rec->paused = 0;
  xd_lines_resume(&rec->split[0]);
  xd_lines_resume(&rec->split[1]);
  if (rec->paused) return; /* what was held filled the client's buffer again */
  for (int k = 0; k < 2; k++) {
    if (rec->pipe_open[k]) uv_read_start((uv_stream_t *)&rec->pipes[k], on_alloc, on_fg_read);
  }
  if (rec->after_resume) {
    rec->after_resume = 0;
    uv_timer_start(&rec->drain_timer, on_drain_deadline, PIPE_DRAIN_MS, 0);
  }
}

/* A line of foreground output: one event; 0 (hold the rest) while the client's buffer is full. */
static int on_line(cmd *rec, int k, const char *text, size_t len) {
  stream *st = rec->st;
  if (!st || !st->res) return 1;
  event ev = {.type = k ? "stderr" : "stdout", .text = text, .text_len = len};
  int ok = write_event(st, &ev);
  if (ok || st->bp_paused || !st->res) return !st->bp_paused;
  st->bp_paused = 1;
  pause_output(rec);
  xd_stream_on_drain(st->res, bp_release, st);
  return 0;
}
static int on_stdout_line(void *arg, const char *t, size_t n) { return on_line(arg, 0, t, n); }
static int on_stderr_line(void *arg, const char *t, size_t n) { return on_line(arg, 1, t, n); }

static void on_fg_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  cmd *rec = s->data;
  int k = s == (uv_stream_t *)&rec->pipes[1];
  if (n > 0) {
    xd_lines_push(&rec->split[k], buf->base, (size_t)n);
    return;
  }
  if (n == 0) return;
  close_pipe(rec, k);
  rec->eofs++;
  if (rec->eofs == 2 && rec->exited) end_fg(rec);
}

static void on_bg_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  cmd *rec = s->data;
  if (n > 0) xd_logring_push(&rec->log, buf->base, (size_t)n);
  else if (n < 0) close_bgpipe(rec);
}

static void final_event(cmd *rec, event *ev, char *num, size_t cap) {
  memset(ev, 0, sizeof *ev);
  if (rec->start_error) {
    ev->type = "error";
    ev->ename = "CommandExecError";
    ev->evalue = ev->traceback = rec->error;
  } else if (rec->exit_code == 0) {
    ev->type = "execution_complete";
    uint64_t now = xd_wall_ms();
    /* Go's omitempty: a 0 ms execution_time is left out */
    if (now > rec->start_ms) ev->has_time = 1, ev->time = now - rec->start_ms;
  } else {
    snprintf(num, cap, "%d", rec->exit_code);
    ev->type = "error";
    ev->ename = "CommandExecError";
    ev->evalue = num;
    ev->traceback = rec->error ? rec->error : "";
  }
}

static void finish(cmd *rec, int code, int sig, const char *spawn_error) {
  if (!rec->running) return;
  module *m = rec->m;
  rec->running = 0;
  if (!rec->background) { /* upstream resets its signal handling process-wide when a command ends */
    for (cmd *r = m->all_head; r; r = r->next) r->relay = 0;
  }
  now_stamp(rec->finished_at);
  rec->end_ms = xd_wall_ms();
  uv_timer_stop(&rec->timeout_timer);
  uv_timer_stop(&rec->kill_timer);
  uv_timer_stop(&rec->drain_timer);
  char buf[64];
  if (spawn_error) {
    rec->exit_code = -1;
    rec->error = strdup(spawn_error);
    rec->start_error = 1;
  } else if (sig) {
    rec->exit_code = -1;
    char sb[16];
    snprintf(buf, sizeof buf, "signal: %s", xd_signal_text(sig, sb, sizeof sb));
    rec->error = strdup(buf);
  } else {
    rec->exit_code = code;
    if (code != 0) {
      snprintf(buf, sizeof buf, "exit status %d", code);
      rec->error = strdup(buf);
    }
  }
  rec->pid = 0;
  if (m->fin_tail) m->fin_tail->fin_next = rec;
  else m->fin_head = rec;
  m->fin_tail = rec;
  m->nfin++;
  /* the stream's final event, then every DELETE waiting for the end */
  stream *st = rec->st;
  if (st) {
    rec->st = NULL;
    st->rec = NULL;
    uv_timer_stop(&st->ping);
    event ev;
    char num[16];
    final_event(rec, &ev, num, sizeof num);
    write_event(st, &ev);
    end_stream(st);
  }
  while (rec->waiters) {
    waiter *w = rec->waiters;
    rec->waiters = w->next;
    xd_res_on_close(w->res, nothing, NULL);
    xd_send_empty(w->res);
    free(w);
  }
  prune(m);
}

static void end_fg(cmd *rec) {
  if (!rec->running) return;
  xd_lines_flush(&rec->split[0]);
  xd_lines_flush(&rec->split[1]);
  int code = 0, sig = 0;
  if (WIFSIGNALED(rec->wstatus)) sig = WTERMSIG(rec->wstatus);
  else code = WEXITSTATUS(rec->wstatus);
  finish(rec, code, sig, NULL);
}

/* A grandchild may keep the pipes open; like execd (which waits for the process, not the pipes) stop reading soon,
 * counting only time in which we read: output held back for a slow client is not dropped. */
static void on_drain_deadline(uv_timer_t *t) {
  cmd *rec = t->data;
  if (!rec->running) return;
  if (rec->paused) {
    rec->after_resume = 1;
    return;
  }
  /* What the process wrote before it exited is in the pipes now (a process cannot exit with its write pending): read
   * it to the end before closing, so a deadline that fires before the loop polled them (a loop that was busy, e.g.
   * starting 200 commands) loses nothing. */
  for (int k = 0; k < 2; k++) {
    uv_os_fd_t fd;
    if (!rec->pipe_open[k] || uv_fileno((uv_handle_t *)&rec->pipes[k], &fd) != 0) continue;
    ssize_t n;
    while (!rec->paused && (n = read(fd, rec->m->readbuf, sizeof rec->m->readbuf)) > 0) {
      xd_lines_push(&rec->split[k], rec->m->readbuf, (size_t)n);
    }
  }
  if (rec->paused) { /* the client's buffer filled meanwhile: the deadline counts again once it drained */
    rec->after_resume = 1;
    return;
  }
  close_pipe(rec, 0);
  close_pipe(rec, 1);
  end_fg(rec);
}

static void on_exit_status(cmd *rec, int wstatus) {
  rec->exited = 1;
  rec->wstatus = wstatus;
  if (rec->background) {
    if (WIFSIGNALED(wstatus)) finish(rec, 0, WTERMSIG(wstatus), NULL);
    else finish(rec, WEXITSTATUS(wstatus), 0, NULL);
    return;
  }
  if (rec->eofs == 2) {
    end_fg(rec);
    return;
  }
  uv_update_time(rec->m->loop); /* the 200 ms count from now, not from the start of a busy loop turn */
  uv_timer_start(&rec->drain_timer, on_drain_deadline, PIPE_DRAIN_MS, 0);
}

static void on_sigchld(uv_signal_t *h, int signum) {
  (void)signum;
  module *m = h->data;
  /* collect first: finishing one record may prune others */
  for (;;) {
    cmd *hit = NULL;
    int status = 0;
    for (cmd *r = m->all_head; r; r = r->next) {
      if (r->pid > 0 && !r->exited && waitpid(r->pid, &status, WNOHANG) == r->pid) {
        hit = r;
        break;
      }
    }
    if (!hit) return;
    on_exit_status(hit, status);
  }
}

static void on_timeout(uv_timer_t *t) { signal_group(t->data, SIGKILL); }
static void on_kill_grace(uv_timer_t *t) { signal_group(t->data, SIGKILL); }

/* --- starting a command -------------------------------------------------------------------------------------- */

/* The environment of a command: execd's, then the EXECD_ENVS file, then the request's envs. A malloc'd
 * NULL-terminated array of malloc'd "NAME=value" strings (free with free_env), or NULL on OOM. */
static int env_set(char ***envp, size_t *n, const char *name, size_t nlen, const char *value) {
  char *kv = malloc(nlen + strlen(value) + 2);
  if (!kv) return -1;
  memcpy(kv, name, nlen);
  kv[nlen] = '=';
  strcpy(kv + nlen + 1, value);
  for (size_t i = 0; i < *n; i++) {
    if (strncmp((*envp)[i], name, nlen) == 0 && (*envp)[i][nlen] == '=') {
      free((*envp)[i]);
      (*envp)[i] = kv;
      return 0;
    }
  }
  char **grown = realloc(*envp, (*n + 2) * sizeof **envp);
  if (!grown) return free(kv), -1;
  *envp = grown;
  grown[(*n)++] = kv;
  grown[*n] = NULL;
  return 0;
}

static void free_env(char **envp) {
  for (char **e = envp; e && *e; e++) free(*e);
  free(envp);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* JavaScript's String(v) of a JSON value (an env value that is not a string). */
static void js_string(const cJSON *v, osb_buf *out) {
  if (cJSON_IsString(v)) osb_buf_append_str(out, v->valuestring);
  else if (cJSON_IsNumber(v)) xd_js_number(out, v->valuedouble);
  else if (cJSON_IsBool(v)) osb_buf_append_str(out, cJSON_IsTrue(v) ? "true" : "false");
  else if (cJSON_IsArray(v)) {
    int first = 1;
    for (const cJSON *e = v->child; e; e = e->next) {
      if (!first) osb_buf_append(out, ",", 1);
      first = 0;
      if (!cJSON_IsNull(e)) js_string(e, out);
    }
  } else if (cJSON_IsObject(v)) osb_buf_append_str(out, "[object Object]");
}

static char **build_env(const cJSON *envs) {
  char **envp = calloc(1, sizeof *envp);
  size_t n = 0;
  if (!envp) return NULL;
  for (char **e = environ; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    if (eq && env_set(&envp, &n, *e, (size_t)(eq - *e), eq + 1) != 0) goto oom;
  }
  const char *file = getenv("EXECD_ENVS");
  if (file && *file) {
    FILE *f = fopen(file, "r"); /* a missing EXECD_ENVS file is ignored */
    if (f) {
      osb_buf all = {0};
      char chunk[4096];
      size_t got;
      while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) osb_buf_append(&all, chunk, got);
      fclose(f);
      for (char *line = all.data; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *eq = strchr(line, '=');
        if (eq && eq > line) {
          const char *k = line, *ke = eq;
          while (k < ke && is_space(*k)) k++;
          while (ke > k && is_space(ke[-1])) ke--;
          if (env_set(&envp, &n, k, (size_t)(ke - k), eq + 1) != 0) {
            osb_buf_free(&all);
            goto oom;
          }
        }
        line = nl ? nl + 1 : NULL;
      }
      osb_buf_free(&all);
    }
  }
  if (cJSON_IsObject(envs)) {
    for (const cJSON *e = envs->child; e; e = e->next) {
      osb_buf v = {0};
      js_string(e, &v);
      int rc = env_set(&envp, &n, e->string, strlen(e->string), v.data ? v.data : "");
      osb_buf_free(&v);
      if (rc != 0) goto oom;
    }
  }
  return envp;
oom:
  free_env(envp);
  return NULL;
}

/* Node's spawn errors: these codes are reported by an `error` event after the record exists ("spawn bash EACCES"),
 * others are thrown before it does ("spawn EPERM"). */
static int async_spawn_error(int err) {
  return err == EACCES || err == EAGAIN || err == EMFILE || err == ENFILE || err == ENOENT;
}

static cmd *cmd_new(module *m, const char *content, int background) {
  cmd *rec = calloc(1, sizeof *rec);
  if (!rec) return NULL;
  rec->content = strdup(content);
  if (!rec->content) return free(rec), NULL;
  rec->m = m;
  rec->background = background;
  rec->running = 1;
  random_id(rec->id);
  now_stamp(rec->started_at);
  rec->start_ms = xd_wall_ms();
  xd_lines_init(&rec->split[0], XD_MAX_LINE_BYTES, on_stdout_line, rec);
  xd_lines_init(&rec->split[1], XD_MAX_LINE_BYTES, on_stderr_line, rec);
  xd_logring_init(&rec->log, XD_LOG_RING_BYTES);
  uv_timer_init(m->loop, &rec->drain_timer);
  uv_timer_init(m->loop, &rec->timeout_timer);
  uv_timer_init(m->loop, &rec->kill_timer);
  rec->drain_timer.data = rec->timeout_timer.data = rec->kill_timer.data = rec;
  rec->handles = 3;
  m->handles++;
  return rec;
}

static void link_cmd(module *m, cmd *rec) {
  rec->prev = m->all_tail;
  if (m->all_tail) m->all_tail->next = rec;
  else m->all_head = rec;
  m->all_tail = rec;
}

/* Starts the command. Returns the record (running, or finished with a start error that Node reports after the
 * spawn), or NULL with the message of a start error Node throws before any record exists in err. */
/* Node's check of spawn arguments for NUL characters: `The argument 'args[1]' ...` for the command; for the
 * environment `The property 'options.env['KEY']' ...` (key, then value, in the environment's order). 1 when s has
 * one (the message is in err). */
static int nul_refused_len(const osb_buf *what, const char *s, const char *nul, osb_buf *err) {
  osb_buf raw = {0};
  int hit = xd_unmark_nul(s, nul, &raw) > 0;
  if (hit) {
    osb_buf_append(err, what->data, what->len);
    osb_buf_append_str(err, " must be a string without null bytes. Received ");
    xd_js_inspect_str(raw.data, raw.len, err);
  }
  osb_buf_free(&raw);
  return hit;
}

static int nul_refused(const char *what, const char *s, const char *nul, osb_buf *err) {
  osb_buf w = {0};
  osb_buf_append_str(&w, what);
  int hit = nul_refused_len(&w, s, nul, err);
  osb_buf_free(&w);
  return hit;
}

static int env_nul_refused(char *const *envp, const char *nul, osb_buf *err) {
  for (char *const *e = envp; *e; e++) {
    if (!strstr(*e, nul)) continue;
    const char *eq = strchr(*e, '=');
    osb_buf key = {0}, what = {0};
    osb_buf_append(&key, *e, eq ? (size_t)(eq - *e) : strlen(*e));
    osb_buf_append_str(&what, "The property 'options.env['");
    xd_unmark_nul(key.data ? key.data : "", nul, &what);
    osb_buf_append_str(&what, "']'");
    /* the message names the key as it is, NUL bytes included */
    int hit = nul_refused_len(&what, key.data ? key.data : "", nul, err) || nul_refused_len(&what, eq ? eq + 1 : "", nul, err);
    osb_buf_free(&key);
    osb_buf_free(&what);
    if (hit) return 1;
  }
  return 0;
}

static cmd *start(module *m, const cJSON *body, const char *cwd, const char *nul, int background, osb_buf *err) {
  const char *command = xd_json_get(body, "command")->valuestring;
  if (nul[0] && nul_refused("The argument 'args[1]'", command, nul, err)) return NULL;
  const cJSON *uid = xd_json_get(body, "uid");
  const cJSON *gid = xd_json_get(body, "gid");
  static const char *const idn[] = {"uid", "gid"};
  const cJSON *ids[] = {uid, gid};
  for (int i = 0; i < 2; i++) {
    if (xd_json_present(ids[i]) && ids[i]->valuedouble > 2147483647.0) { /* Node's int32 check of spawn options */
      osb_buf_appendf(err, "The \"options.%s\" property must be of type int32. Received type number (", idn[i]);
      xd_js_number(err, ids[i]->valuedouble);
      osb_buf_append(err, ")", 1);
      return NULL;
    }
  }
  char **envp = build_env(xd_json_get(body, "envs"));
  if (!envp) return osb_buf_append_str(err, "out of memory"), NULL;
  if (nul[0] && env_nul_refused(envp, nul, err)) {
    free_env(envp);
    return NULL;
  }
  cmd *rec = cmd_new(m, command, background);
  if (!rec) {
    free_env(envp);
    osb_buf_append_str(err, "out of memory");
    return NULL;
  }
  char path[4096];
  int fds[4] = {-1, -1, -1, -1}; /* read end, write end (stdout or the merged output), and stderr's */
  int in = -1;
  int e = xd_find_exec(m->shell, envp, path, sizeof path);
  if (!e) {
    int p1[2] = {-1, -1}, p2[2] = {-1, -1};
    in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    /* background: one Unix stream socket pair for stdout and stderr (merged in write order, as the Node execd) */
    int made = background ? socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p1) : pipe2(p1, O_CLOEXEC);
    if (in < 0 || made != 0 || (!background && pipe2(p2, O_CLOEXEC) != 0)) {
      e = errno;
      if (in >= 0) close(in);
      in = -1;
      for (int k = 0; k < 2; k++) {
        if (p1[k] >= 0) close(p1[k]);
        if (p2[k] >= 0) close(p2[k]);
      }
    } else {
      fds[0] = p1[0];
      fds[1] = xd_high_fd(p1[1]);
      fds[2] = p2[0];
      fds[3] = background ? -1 : xd_high_fd(p2[1]);
      in = xd_high_fd(in);
    }
  }
  pid_t pid = -e;
  if (!e) {
    char *argv[] = {(char *)m->shell, "-c", (char *)command, NULL};
    xd_spawn_spec s = {
        .path = path, .argv = argv, .envp = envp, .cwd = cwd, .in = in, .out = fds[1],
        .err = background ? fds[1] : fds[3],
        .set_uid = xd_json_present(uid), .set_gid = xd_json_present(gid),
        .uid = xd_json_present(uid) ? (uid_t)uid->valuedouble : 0, .gid = xd_json_present(gid) ? (gid_t)gid->valuedouble : 0,
    };
    pid = xd_spawn(&s);
    /* the process has its own copies; EOF comes when it and its children are done */
    close(in);
    close(fds[1]);
    if (fds[3] >= 0) close(fds[3]);
  }
  free_env(envp);
  if (pid < 0) {
    for (int k = 0; k < 3; k += 2) {
      if (fds[k] >= 0) close(fds[k]);
    }
    int code = (int)-pid;
    const char *name = uv_err_name(uv_translate_sys_error(code));
    if (!async_spawn_error(code)) {
      osb_buf_appendf(err, "spawn %s", name);
      rec->freeing = 1; /* never linked: released once its timers closed */
      rec->running = 0;
      cmd_close_handle(rec, (uv_handle_t *)&rec->drain_timer);
      cmd_close_handle(rec, (uv_handle_t *)&rec->timeout_timer);
      cmd_close_handle(rec, (uv_handle_t *)&rec->kill_timer);
      return NULL;
    }
    link_cmd(m, rec);
    char msg[96];
    snprintf(msg, sizeof msg, "spawn %s %s", m->shell, name);
    rec->start_error = 1;
    finish(rec, 0, 0, msg);
    return rec;
  }
  rec->pid = pid;
  link_cmd(m, rec);
  if (background) {
    uv_pipe_init(m->loop, &rec->bgpipe, 0);
    rec->bgpipe.data = rec;
    rec->handles++;
    rec->bg_open = 1;
    if (uv_pipe_open(&rec->bgpipe, fds[0]) == 0) uv_read_start((uv_stream_t *)&rec->bgpipe, on_alloc, on_bg_read);
    else close_bgpipe(rec);
  } else {
    int rfd[2] = {fds[0], fds[2]};
    for (int k = 0; k < 2; k++) {
      uv_pipe_init(m->loop, &rec->pipes[k], 0);
      rec->pipes[k].data = rec;
      rec->handles++;
      rec->pipe_open[k] = 1;
      if (uv_pipe_open(&rec->pipes[k], rfd[k]) != 0) {
        close_pipe(rec, k);
        rec->eofs++;
      }
    }
    if (m->forwarding) rec->relay = 1;
  }
  const cJSON *timeout = xd_json_get(body, "timeout");
  double ms = xd_json_present(timeout) && timeout->valuedouble != 0 ? xd_go_duration_ms(timeout->valuedouble) : 0;
  if (ms > 0) uv_timer_start(&rec->timeout_timer, on_timeout, ms >= 1.8e19 ? UINT64_MAX : (uint64_t)ceil(ms), 0);
  return rec;
}

/* --- routes ------------------------------------------------------------------------------------------------- */

static const char *default_cwd(module *m, char *buf, size_t cap) {
  struct stat st;
  if (m->workspace && *m->workspace && stat(m->workspace, &st) == 0 && S_ISDIR(st.st_mode)) return m->workspace;
  if (getcwd(buf, cap)) return buf;
  return "/";
}

/* The cwd of a request, like upstream: validated with `$VAR`/`${VAR}` and a leading `~` expanded from execd's
 * environment, then expanded again with the request's envs over it; a relative result is relative to execd's own
 * working directory. 0 with the path in out, else the status of the error answer (message in msg). */
static int request_cwd(const cJSON *body, const char *cwd, const char *nul, osb_buf *out, osb_buf *msg) {
  osb_buf checked = {0}, err = {0}, expanded = {0}, raw = {0}, rawchecked = {0};
  int status = 0;
  xd_unmark_nul(cwd, nul, &raw); /* the cwd as sent (NUL characters and all) */
  if (xd_expand_path(cwd, environ, &checked, &err) != 0) {
    osb_buf_appendf(msg, "%scannot resolve working directory ", XD_INVALID_REQUEST);
    xd_js_json_str(msg, raw.data ? raw.data : "", raw.len);
    osb_buf_appendf(msg, ": %s", err.data ? err.data : "out of memory");
    status = 400;
    goto done;
  }
  struct stat st;
  if (xd_unmark_nul(checked.data, nul, &rawchecked) > 0) { /* Node's fs refuses a path with NUL before any stat */
    osb_buf_appendf(msg, "%sworking directory does not exist: ", XD_INVALID_REQUEST);
    osb_buf_append(msg, raw.data, raw.len);
    osb_buf_append_str(msg, ": The argument 'path' must be a string, Uint8Array, or URL without null bytes. Received ");
    xd_js_inspect_str(rawchecked.data, rawchecked.len, msg);
    status = 400;
    goto done;
  }
  if (stat(checked.data, &st) != 0) {
    int e = errno;
    osb_buf_appendf(msg, "%sworking directory does not exist: %s: stat %s: %s", XD_INVALID_REQUEST, cwd, checked.data,
                    uv_strerror(uv_translate_sys_error(e)));
    status = 400;
    goto done;
  }
  if (!S_ISDIR(st.st_mode)) {
    osb_buf_appendf(msg, "%sworking directory path is not a directory: %s", XD_INVALID_REQUEST, cwd);
    status = 400;
    goto done;
  }
  char **envp = build_env(xd_json_get(body, "envs"));
  osb_buf_reset(&err);
  if (!envp || xd_expand_path(cwd, envp, &expanded, &err) != 0 || xd_path_resolve(expanded.data, out) != 0) {
    osb_buf_appendf(msg, "error running commands resolve request cwd %s: %s", cwd, err.data ? err.data : "out of memory");
    status = 500;
  }
  free_env(envp);
done:
  osb_buf_free(&checked);
  osb_buf_free(&err);
  osb_buf_free(&expanded);
  osb_buf_free(&raw);
  osb_buf_free(&rawchecked);
  return status;
}

/* xd_send_error for a message that may hold NUL bytes (a request's strings, \u0000 and all). */
static void send_error_text(xd_res *res, int status, const char *code, const osb_buf *msg) {
  osb_buf b = {0};
  osb_buf_append_str(&b, "{\"code\":");
  xd_json_str(&b, code, strlen(code));
  osb_buf_append_str(&b, ",\"message\":");
  xd_json_str(&b, msg->data ? msg->data : "out of memory", msg->data ? msg->len : 13);
  if (osb_buf_append(&b, "}", 1) == 0) xd_send_json(res, status, b.data, b.len);
  else xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
  osb_buf_free(&b);
}

static void run(module *m, const xd_req *req, xd_res *res) {
  osb_buf msg = {0};
  cJSON *body = NULL;
  char nul[5];
  if (xd_cmd_parse(req->body, req->body_len, &body, nul, &msg) != 0) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", msg.data ? msg.data : "out of memory");
    osb_buf_free(&msg);
    return;
  }
  const cJSON *jcwd = xd_json_get(body, "cwd");
  osb_buf cwd = {0};
  char here[4096];
  if (cJSON_IsString(jcwd) && jcwd->valuestring[0]) {
    int status = request_cwd(body, jcwd->valuestring, nul, &cwd, &msg);
    if (status) {
      send_error_text(res, status, status == 400 ? "INVALID_REQUEST_BODY" : "RUNTIME_ERROR", &msg);
      goto done;
    }
  } else {
    osb_buf_append_str(&cwd, default_cwd(m, here, sizeof here));
  }
  int background = cJSON_IsTrue(xd_json_get(body, "background"));
  osb_buf_reset(&msg);
  cmd *rec = start(m, body, cwd.data, nul, background, &msg);
  stream *st = stream_open(m, res);
  if (!st) { /* out of memory: the command runs; its client learns nothing */
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto done;
  }
  char id[33];
  if (rec) memcpy(id, rec->id, sizeof id);
  else random_id(id);
  event ev = {.type = "init", .text = id, .text_len = 32};
  write_event(st, &ev);
  event ping = {.type = "ping", .text = "pong", .text_len = 4};
  write_event(st, &ping);
  if (!rec || rec->start_error) {
    const char *text = rec ? rec->error : msg.data ? msg.data : "out of memory";
    event err = {.type = "error", .ename = "CommandExecError", .evalue = text, .traceback = text,
                 .error_len = rec || !msg.data ? strlen(text) : msg.len};
    if (!rec || !background) write_event(st, &err);
    else {
      event done_ev = {.type = "execution_complete"};
      write_event(st, &done_ev); /* the spawn error is reported through the status route */
    }
    end_stream(st);
    goto done;
  }
  if (background) {
    event done_ev = {.type = "execution_complete"};
    write_event(st, &done_ev);
    end_stream(st);
    goto done;
  }
  st->rec = rec;
  rec->st = st;
  uv_timer_start(&st->ping, on_ping, PING_INTERVAL_MS, PING_INTERVAL_MS);
  for (int k = 0; k < 2; k++) {
    if (rec->pipe_open[k]) uv_read_start((uv_stream_t *)&rec->pipes[k], on_alloc, on_fg_read);
  }
done:
  cJSON_Delete(body);
  osb_buf_free(&cwd);
  osb_buf_free(&msg);
}

static void status_route(module *m, xd_res *res, const char *id) {
  cmd *rec = find_cmd(m, id);
  osb_buf b = {0};
  if (!rec) {
    osb_buf_appendf(&b, "command not found: %s", id);
    xd_send_error(res, 404, "INVALID_REQUEST_BODY", b.data ? b.data : "command not found");
    osb_buf_free(&b);
    return;
  }
  osb_buf_append_str(&b, "{\"id\":");
  xd_json_str(&b, rec->id, strlen(rec->id));
  osb_buf_append_str(&b, ",\"content\":");
  xd_json_str(&b, rec->content, strlen(rec->content));
  osb_buf_appendf(&b, ",\"running\":%s", rec->running ? "true" : "false");
  if (!rec->running) {
    osb_buf_appendf(&b, ",\"exit_code\":%d", rec->exit_code);
    if (rec->error && rec->error[0]) {
      osb_buf_append_str(&b, ",\"error\":");
      xd_json_str(&b, rec->error, strlen(rec->error));
    }
  }
  osb_buf_appendf(&b, ",\"started_at\":\"%s\"", rec->started_at);
  if (!rec->running) osb_buf_appendf(&b, ",\"finished_at\":\"%s\"", rec->finished_at);
  osb_buf_append(&b, "}", 1);
  if (b.data) xd_send_json(res, 200, b.data, b.len);
  else xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
  osb_buf_free(&b);
}

static void logs_route(module *m, const xd_req *req, xd_res *res, const char *id) {
  cmd *rec = find_cmd(m, id);
  osb_buf b = {0};
  if (!rec || !rec->background) {
    if (!rec) osb_buf_appendf(&b, "command not found: %s", id);
    else osb_buf_appendf(&b, "command %s is not running in background", id);
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", b.data ? b.data : "command not found");
    osb_buf_free(&b);
    return;
  }
  /* like execd: a cursor that is not an integer counts as 0; a negative one fails the seek (execd's text names the
   * log file it would keep in $TMPDIR; ours is the in-memory ring) */
  char *raw = xd_query(req, "cursor");
  double cursor = 0;
  if (raw) {
    const char *p = raw + (raw[0] == '+' || raw[0] == '-');
    int digits = *p != 0;
    for (const char *q = p; *q; q++) digits &= *q >= '0' && *q <= '9';
    if (digits) cursor = strtod(raw, NULL);
    free(raw);
  }
  if (cursor < 0) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = getenv("TMP");
    if (!tmp || !*tmp) tmp = getenv("TEMP");
    if (!tmp || !*tmp) tmp = "/tmp";
    osb_buf j = {0}, path = {0};
    osb_buf_appendf(&j, "%s/%s.output", tmp, id);
    xd_path_normalize(j.data ? j.data : "", 1, &path);
    osb_buf_appendf(&b, "error seek file: seek %s: invalid argument", path.data ? path.data : "");
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", b.data ? b.data : "error seek file");
    osb_buf_free(&j);
    osb_buf_free(&path);
    osb_buf_free(&b);
    return;
  }
  const xd_logring *log = &rec->log;
  double end = (double)log->end, start = (double)xd_logring_start(log);
  if (cursor < end) xd_logring_read(log, (uint64_t)cursor, &b);
  char tail[64], dropped[64];
  osb_buf tc = {0};
  if (cursor < end) osb_buf_appendf(&tc, "%llu", (unsigned long long)log->end);
  else xd_js_number(&tc, cursor);
  snprintf(tail, sizeof tail, "Execd-Commands-Tail-Cursor: %s", tc.data ? tc.data : "0");
  osb_buf_free(&tc);
  const char *headers[3] = {"Content-Type: text/plain; charset=utf-8", tail, dropped};
  size_t nh = 2;
  /* bytes between the cursor and the oldest retained byte were dropped from the bounded log */
  if (cursor < start) {
    snprintf(dropped, sizeof dropped, "Execd-Commands-Dropped-Bytes: %llu", (unsigned long long)(start - cursor));
    nh = 3;
  }
  xd_send(res, 200, headers, nh, b.data ? b.data : "", b.len);
  osb_buf_free(&b);
}

static void on_waiter_close(void *arg) {
  waiter *w = arg;
  cmd *rec = w->rec;
  for (waiter **p = &rec->waiters; *p; p = &(*p)->next) {
    if (*p == w) {
      *p = w->next;
      break;
    }
  }
  free(w);
}

static int interrupt(module *m, const xd_req *req, xd_res *res) {
  char *id = xd_query(req, "id");
  if (!id || !*id) {
    free(id);
    xd_send_error(res, 400, "MISSING_QUERY", "missing query parameter 'id'");
    return 1;
  }
  cmd *rec = find_cmd(m, id);
  if (!rec) {
    /* a code context or a code shell run (code.c), else a bash session (sessions.c: closed) */
    int taken = m->code_interrupt && m->code_interrupt(id, res);
    int other = !taken && m->interrupt_other && m->interrupt_other(id);
    free(id);
    if (taken) return 1;
    if (other) {
      xd_send_empty(res);
      return 1;
    }
    xd_send_error(res, 500, "RUNTIME_ERROR", "error interruptting code context. no such session"); /* execd's spelling */
    return 1;
  }
  if (!rec->running) {
    osb_buf b = {0};
    osb_buf_appendf(&b, "error interruptting code context. command session %s is not running", id);
    xd_send_error(res, 500, "RUNTIME_ERROR", b.data ? b.data : "error interruptting code context");
    osb_buf_free(&b);
    free(id);
    return 1;
  }
  free(id);
  waiter *w = calloc(1, sizeof *w);
  if (!w) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  w->res = res;
  w->rec = rec;
  w->next = rec->waiters;
  rec->waiters = w;
  xd_res_on_close(res, on_waiter_close, w);
  signal_group(rec, SIGTERM);
  if (!uv_is_active((uv_handle_t *)&rec->kill_timer)) uv_timer_start(&rec->kill_timer, on_kill_grace, INTERRUPT_GRACE_MS, 0);
  return 1;
}

/* Percent-decodes a path segment of the canonical path (the id of a route). Caller frees. */

int xd_commands_route(void *module_, const xd_req *req, xd_res *res) {
  module *m = module_;
  const char *p = req->path;
  if (strcmp(p, "/command") == 0) {
    if (strcmp(req->method, "POST") == 0) {
      run(m, req, res);
      return 1;
    }
    if (strcmp(req->method, "DELETE") == 0) return interrupt(m, req, res);
    return 0;
  }
  if (strcmp(req->method, "GET") != 0 || strncmp(p, "/command/", 9) != 0) return 0;
  const char *rest = p + 9;
  int is_status = strncmp(rest, "status/", 7) == 0 && rest[7] && !strchr(rest + 7, '/');
  const char *seg;
  size_t seglen;
  if (is_status) {
    seg = rest + 7;
    seglen = strlen(seg);
  } else {
    const char *slash = strchr(rest, '/');
    if (!slash || slash == rest || strcmp(slash, "/logs") != 0) return 0;
    seg = rest;
    seglen = (size_t)(slash - rest);
  }
  char *id = xd_decode_segment(seg, seglen);
  if (!id) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  if (is_status) status_route(m, res, id);
  else logs_route(m, req, res, id);
  free(id);
  return 1;
}

void xd_commands_relay_signal(void *module_, int sig) {
  module *m = module_;
  if (m) relay(m, sig);
}

static int find_shell(void) {
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  for (const char *p = path;;) {
    const char *e = strchr(p, ':');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len) {
      char buf[4096];
      struct stat st;
      int n = snprintf(buf, sizeof buf, "%.*s/bash", (int)len, p);
      if (n > 0 && (size_t)n < sizeof buf && stat(buf, &st) == 0) return 1;
    }
    if (!e) return 0;
    p = e + 1;
  }
}

static void on_module_handle_closed(uv_handle_t *h) {
  module *m = h->data;
  m->handles--;
  module_maybe_free(m);
}

static void module_maybe_free(module *m) {
  if (m->closing && m->handles == 0) {
    free(m->workspace);
    free(m);
  }
}

void *xd_commands_new(const xd_ctx *ctx) {
  module *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->loop = ctx->loop;
  m->workspace = ctx->workspace ? strdup(ctx->workspace) : NULL;
  if (ctx->workspace && !m->workspace) return free(m), NULL;
  m->forwarding = ctx->signal_forwarding;
  m->tail_ms = ctx->command_tail_ms;
  m->code_interrupt = ctx->code_interrupt;
  m->interrupt_other = ctx->interrupt_other;
  m->shell = find_shell() ? "bash" : "sh";
  if (uv_signal_init(m->loop, &m->sigchld) != 0) {
    free(m->workspace);
    free(m);
    return NULL;
  }
  m->sigchld.data = m;
  uv_signal_start(&m->sigchld, on_sigchld, SIGCHLD);
  uv_timer_init(m->loop, &m->sweeper);
  m->sweeper.data = m;
  uv_timer_start(&m->sweeper, on_sweep, SWEEP_MS, SWEEP_MS);
  uv_unref((uv_handle_t *)&m->sweeper);
  m->handles = 2;
  return m;
}

void xd_commands_close(void *module_) {
  module *m = module_;
  if (!m || m->closing) return;
  m->closing = 1;
  for (cmd *r = m->all_head; r; r = r->next) {
    if (r->running) signal_group(r, SIGKILL);
  }
  while (m->streams) {
    stream *st = m->streams;
    if (st->rec) {
      st->rec->st = NULL;
      st->rec = NULL;
    }
    stream_free(st);
  }
  while (m->all_head) {
    cmd *r = m->all_head;
    while (r->waiters) {
      waiter *w = r->waiters;
      r->waiters = w->next;
      xd_res_on_close(w->res, nothing, NULL);
      xd_send_empty(w->res);
      free(w);
    }
    r->running = 0;
    r->pid = 0;
    cmd_free(r);
  }
  m->fin_head = m->fin_tail = NULL;
  m->nfin = 0;
  uv_close((uv_handle_t *)&m->sigchld, on_module_handle_closed);
  uv_close((uv_handle_t *)&m->sweeper, on_module_handle_closed);
}
