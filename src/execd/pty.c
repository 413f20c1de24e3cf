/* execd's interactive PTY API in C (xd.h: xd_pty_*), the Node execd's pty.js, pty-session.js, pty-conn.js and
 * pty-replay.js byte for byte where a client sees it (docs/opensandbox-protocol.md §6.5; docs/dev-server-execd.md):
 *   POST /pty {cwd?, command?} -> 201 {session_id}   (nothing starts until the first WebSocket connect)
 *   GET /pty/{id} -> {session_id, running, output_offset}     DELETE /pty/{id} -> 200 (SIGKILL the group)
 *   GET /pty/{id}/ws?pty=0|1&since=N&takeover=1 -> WebSocket; 404 / 409 JSON before the upgrade.
 *
 * A session holds its bash runs (one per start: a client that connects after a run exited starts it again), a replay
 * ring of its newest 1 MiB of output (grown with the output, not allocated whole) and the attached client.
 *   PTY mode:  bash --norc --noprofile on a pseudo-terminal of its own (posix_openpt; 80x24; the slave the new
 *              session's controlling terminal; TERM=xterm). Exit is reported once the terminal is drained: EIO (no
 *              slave left open), or 100 ms without output (a background process holds it), at most 2 s.
 *   pipe mode: bash with three pipes, stderr apart; stdin cannot be closed (as upstream). Exit is reported at once
 *              (processExit), the run's end once both pipes are at EOF or 2 s after the exit.
 * Both run in their own session (setsid) and process group, started with vfork (spawn.h) on libuv's thread pool (the
 * vfork returns once the child has exec'd, which waits for a CPU on a busy machine: not the loop's business), watched
 * through a pidfd (poll) or, where pidfd_open is refused, on SIGCHLD with waitpid on the run's own pid.
 *
 * The WebSocket (wsproto.h) speaks the real execd's frames:
 *   server -> client: [0x03 + u64 BE offset + replay], {"type":"connected",...}, 0x01 stdout / PTY, 0x02 stderr,
 *                     {"type":"pong"}, {"type":"error","error","code"}, {"type":"exit","exit_code"} then close 1000
 *                     "process exited"; 4001 "TAKEN_OVER" on takeover.
 *   client -> server: 0x00 + stdin, {"type":"stdin","data"}, {"type":"resize","cols","rows"},
 *                     {"type":"signal","signal"}, {"type":"ping"}.
 * RFC 6455 pings every 30 s; a client silent for 60 s is dropped. Frames made in one loop turn leave in one write.
 * --pty-exit-race: live output is held 250 ms and what is held at process exit is dropped (it stays in the replay).
 * --pty-close-linger: a client's close is answered but the TCP connection is never closed by us.
 * --signal-forwarding: a client that closes while its run is exiting (killed by DELETE, or exited) makes execd's
 * write of the exit frame fail: SIGPIPE goes to the foreground command (xd_ctx.relay_signal), as upstream. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <uv.h>
#include <cjson/cJSON.h>

#include "cmdreq.h"
#include "fsops.h"
#include "core/buf.h"
#include "json.h"
#include "spawn.h"
#include "wsproto.h"
#include "xd.h"

#define REPLAY_BYTES (1024u * 1024u)
#define REPLAY_GROW_FROM 4096u
#define DRAIN_MS 2000           /* pipe mode: the end of a run at most this long after its exit */
#define PTY_QUIET_MS 100        /* PTY mode: the terminal counts as drained after this long without output */
#define PING_MS 30000
#define READ_TIMEOUT_MS 60000
#define RACE_HOLD_MS 250
#define KILLED_EXIT_HOLD_MS 200 /* signal forwarding: the exit frame of a run killed by DELETE waits this long */
#define CLOSE_WAIT_MS 5000      /* after our close frame: the client's answer, else the connection is cut */
#define HIGH_WATER (8u * 1024u * 1024u) /* queued toward a client, or toward a process's stdin: stop reading */
#define STDIN_LOW_WATER (1024u * 1024u)
#define READ_CHUNK 65536u

typedef struct module module;
typedef struct session session;
typedef struct run run;
typedef struct wsconn wsconn;

/* ---------------------------------------------------------------- replay ring */

typedef struct {
  char *buf;      /* until it holds REPLAY_BYTES: linear, the byte at offset o at buf[o] */
  size_t cap;
  uint64_t total; /* bytes ever written; the byte at offset o lives at buf[o % REPLAY_BYTES] */
} replay;

static int replay_write(replay *r, const char *data, size_t n) {
  if (n >= REPLAY_BYTES) {
    r->total += n - REPLAY_BYTES;
    data += n - REPLAY_BYTES;
    n = REPLAY_BYTES;
  }
  uint64_t need64 = r->total + n < REPLAY_BYTES ? r->total + n : REPLAY_BYTES;
  size_t need = (size_t)need64;
  if (need > r->cap) {
    size_t cap = r->cap ? r->cap : REPLAY_GROW_FROM;
    while (cap < need) cap *= 2;
    if (cap > REPLAY_BYTES) cap = REPLAY_BYTES;
    char *b = realloc(r->buf, cap); /* still linear: offsets keep their index */
    if (!b) return -1;
    r->buf = b;
    r->cap = cap;
  }
  size_t head = (size_t)(r->total % REPLAY_BYTES);
  size_t first = n < REPLAY_BYTES - head ? n : REPLAY_BYTES - head;
  memcpy(r->buf + head, data, first);
  if (first < n) memcpy(r->buf, data + first, n - first);
  r->total += n;
  return 0;
}

/* the retained bytes from `since` (clamped to the oldest retained one) to the end, appended to out; *offset: where
 * they start */
static int replay_read(const replay *r, int64_t since, osb_buf *out, uint64_t *offset) {
  if (since >= 0 && (uint64_t)since >= r->total) {
    *offset = r->total;
    return 0;
  }
  uint64_t oldest = r->total > REPLAY_BYTES ? r->total - REPLAY_BYTES : 0;
  uint64_t from = since < 0 || (uint64_t)since < oldest ? oldest : (uint64_t)since;
  size_t count = (size_t)(r->total - from), start = (size_t)(from % REPLAY_BYTES);
  size_t first = count < REPLAY_BYTES - start ? count : REPLAY_BYTES - start;
  *offset = from;
  if (osb_buf_append(out, r->buf + start, first) != 0) return -1;
  return first < count ? osb_buf_append(out, r->buf, count - first) : 0;
}

/* ---------------------------------------------------------------- structures */

struct run {
  session *s;
  run *next;
  int is_pty;
  pid_t pid;        /* 0 once the process exit was reported */
  pid_t pgid;       /* its process group, kept after exit */
  int status_code;  /* waitpid's, as an exit code (-1: killed by a signal), once reaped */
  int reaped;
  int exit_code;
  int exited;       /* processExit reported */
  int drained;      /* exit (end of output) reported */
  int relay_on_gone; /* --signal-forwarding: relay SIGPIPE when the process is gone (a client closed meanwhile) */
  int paused;
  uv_pipe_t in;     /* pipe mode: stdin */
  uv_pipe_t out[2]; /* pipe mode: stdout, stderr; PTY mode: out[0] is the terminal's master side (read and write) */
  int in_open, out_open[2];
  int eofs;         /* output streams at their end */
  int pidfd;
  uv_poll_t pidpoll;
  int poll_open;
  uv_timer_t drain;
  int handles;      /* open handles; a run is freed (with its session's list) only when 0 */
  int waiting;      /* in the module's SIGCHLD list (no pidfd) */
  int starting;     /* its spawn is under way (spawn_done) */
  uint64_t reaped_at;
  run *wnext;
};

struct session {
  module *m;
  session *next; /* in the module's table (while it is there) */
  char id[37];
  char *cwd;
  char *command;
  replay rp;
  run *runs;   /* newest first */
  run *cur;    /* the latest run */
  wsconn *holder;
  int closed;  /* DELETEd (or execd shutting down): gone from the table */
};

typedef struct held {
  struct held *next;
  uint64_t due;
  size_t len;
  char frame[];
} held;

struct wsconn {
  module *m;
  session *s;  /* NULL once detached */
  run *r;      /* the run it shows (valid while s is set) */
  xd_raw *raw; /* NULL once the connection is gone */
  xd_ws_parser parser;
  int live, done, closing, linger;
  osb_buf out;  /* frames of this loop turn, written together */
  int dirty;
  wsconn *dnext;
  uv_timer_t ping, reader, later, race;
  int handles;
  held *held_head, *held_tail;
  int later_exit_code; /* the exit frame the `later` timer sends (KILLED_EXIT_HOLD_MS) */
  int later_is_exit;
  uint64_t serial;     /* tells a stdin write's connection from a later one */
  long long since;     /* the replay it asked for */
  int stdin_paused;    /* not read while its process's stdin holds more than HIGH_WATER */
};

struct module {
  uv_loop_t *loop;
  char *workspace;
  int exit_race, close_linger, forwarding;
  void (*relay_signal)(int sig);
  session *sessions;
  run *waiting; /* runs watched on SIGCHLD */
  uv_signal_t sigchld;
  uv_check_t check;
  uv_idle_t idle;
  wsconn *dirty;
  int handles;
  int objects; /* sessions and connections not yet freed (a deleted session lives on until its runs are closed) */
  uint64_t serials;
  int closing;
  /* big stdin messages' buffers, kept for the next ones (a fresh multi-MiB buffer costs a page fault per 4 KiB, more
   * than the copy): at most STDIN_POOL of at most STDIN_POOL_MAX bytes each, freed with the module */
  osb_buf pool[2];
};
#define STDIN_POOL 2
#define STDIN_POOL_MAX (8u * 1024u * 1024u)

static const char *const SIGNAL_NAMES[] = {"SIGINT", "SIGTERM", "SIGKILL", "SIGQUIT", "SIGHUP"};
static const int SIGNAL_NUMS[] = {SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP};

static uint64_t now_ms(module *m) { return uv_now(m->loop); }

static void module_maybe_free(module *m);
static void session_maybe_free(session *s);
static void conn_output(wsconn *c, int stream, const char *data, size_t n);
static void conn_run_event(wsconn *c, run *r, int is_exit, int code);
static void run_set_paused(run *r, int paused);
static void conn_flush(wsconn *c);

/* ---------------------------------------------------------------- runs */

static void on_run_handle_closed(uv_handle_t *h) {
  run *r = h->data;
  r->handles--;
  session *s = r->s;
  if (r->handles == 0) session_maybe_free(s);
}

static void run_close_handle(run *r, uv_handle_t *h) {
  h->data = r;
  if (!uv_is_closing(h)) uv_close(h, on_run_handle_closed);
}

static void run_unwait(run *r) {
  if (!r->waiting) return;
  module *m = r->s->m;
  for (run **p = &m->waiting; *p; p = &(*p)->wnext) {
    if (*p == r) {
      *p = r->wnext;
      break;
    }
  }
  r->waiting = 0;
}

/* every handle of a run whose end was reported (or that never started) */
static void run_close_all(run *r) {
  if (r->in_open) run_close_handle(r, (uv_handle_t *)&r->in);
  r->in_open = 0;
  for (int k = 0; k < 2; k++) {
    if (r->out_open[k]) run_close_handle(r, (uv_handle_t *)&r->out[k]);
    r->out_open[k] = 0;
  }
  if (r->poll_open) {
    uv_poll_stop(&r->pidpoll);
    run_close_handle(r, (uv_handle_t *)&r->pidpoll);
    r->poll_open = 0;
  }
  if (r->pidfd >= 0) {
    close(r->pidfd);
    r->pidfd = -1;
  }
  run_unwait(r);
  run_close_handle(r, (uv_handle_t *)&r->drain);
}

static void group_signal(pid_t pgid, int sig) {
  if (pgid > 0) kill(-pgid, sig);
}

/* the run exited, its output is drained, and nothing is left in its group */
static int run_finished(const run *r) {
  if (!r->exited || !r->drained) return 0;
  if (r->pgid <= 0) return 1;
  return kill(-r->pgid, 0) != 0;
}

static void run_relay_gone(run *r) {
  if (!r->relay_on_gone) return;
  r->relay_on_gone = 0;
  module *m = r->s->m;
  if (m->relay_signal) m->relay_signal(SIGPIPE);
}

static void run_event(run *r, int is_exit) {
  session *s = r->s;
  if (s->holder) conn_run_event(s->holder, r, is_exit, r->exit_code);
}

static void run_process_exit(run *r, int code) {
  if (r->exited) return;
  r->exited = 1;
  r->exit_code = code;
  r->pid = 0;
  run_relay_gone(r);
  run_event(r, 0);
}

static void run_drained(run *r) {
  if (r->drained || !r->exited) return;
  r->drained = 1;
  uv_timer_stop(&r->drain);
  run_event(r, 1);
  run_close_all(r);
}

static void on_drain_timer(uv_timer_t *t) {
  run *r = t->data;
  if (r->is_pty) { /* the terminal is quiet (or the 2 s are up): the process exit counts now */
    run_process_exit(r, r->status_code);
  }
  run_drained(r);
}

/* the process was reaped with `wstatus` */
static void run_reaped(run *r, int wstatus) {
  if (r->reaped) return;
  r->reaped = 1;
  r->status_code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  run_unwait(r);
  if (r->poll_open) {
    uv_poll_stop(&r->pidpoll);
    run_close_handle(r, (uv_handle_t *)&r->pidpoll);
    r->poll_open = 0;
  }
  uv_update_time(r->s->m->loop); /* the bounds count from now, not from the start of a busy loop turn */
  r->reaped_at = uv_now(r->s->m->loop);
  if (r->is_pty) {
    if (!r->out_open[0]) {
      run_process_exit(r, r->status_code);
      run_drained(r);
      return;
    }
    r->drain.data = r;
    uv_timer_start(&r->drain, on_drain_timer, PTY_QUIET_MS, 0);
    return;
  }
  run_process_exit(r, r->status_code);
  if (r->eofs >= 2) run_drained(r);
  else uv_timer_start(&r->drain, on_drain_timer, DRAIN_MS, 0);
}

static void try_reap(run *r) {
  int st;
  if (r->reaped || r->pgid <= 0) return;
  pid_t got = waitpid(r->pgid, &st, WNOHANG);
  if (got == r->pgid) run_reaped(r, st);
}

static void on_pidfd(uv_poll_t *h, int status, int events) {
  (void)status;
  (void)events;
  try_reap(h->data);
}

static void on_sigchld(uv_signal_t *h, int signum) {
  (void)signum;
  module *m = h->data;
  for (run *r = m->waiting, *next; r; r = next) {
    next = r->wnext;
    try_reap(r);
  }
}

static void on_out_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)h;
  (void)suggested;
  static char chunk[READ_CHUNK]; /* one loop thread: the bytes are copied out before the next read */
  *buf = uv_buf_init(chunk, sizeof chunk);
}

static void run_output_end(run *r, int k) {
  if (r->out_open[k]) {
    run_close_handle(r, (uv_handle_t *)&r->out[k]);
    r->out_open[k] = 0;
  }
  r->eofs++;
  if (r->is_pty) {
    /* EIO: no slave side left open: drained (the exit, if it was reaped already, counts now) */
    if (r->reaped) {
      run_process_exit(r, r->status_code);
      run_drained(r);
    }
    return;
  }
  if (r->exited && r->eofs >= 2) run_drained(r);
}

static void on_out_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  run *r = st->data;
  int k = st == (uv_stream_t *)&r->out[1] ? 1 : 0;
  if (n == 0) return;
  if (n < 0) {
    run_output_end(r, k);
    return;
  }
  session *s = r->s;
  replay_write(&s->rp, buf->base, (size_t)n);
  if (s->holder) conn_output(s->holder, r->is_pty ? 1 : k + 1, buf->base, (size_t)n);
  if (r->is_pty && r->reaped && !r->drained) { /* draining: quiet for PTY_QUIET_MS, within DRAIN_MS of the exit */
    if (uv_now(s->m->loop) - r->reaped_at < DRAIN_MS - PTY_QUIET_MS) uv_timer_start(&r->drain, on_drain_timer, PTY_QUIET_MS, 0);
  }
}

static void run_set_paused(run *r, int paused) {
  if (paused == r->paused) return;
  r->paused = paused;
  if (r->starting) return; /* read from spawn_done on, unless paused then */
  for (int k = 0; k < 2; k++) {
    if (!r->out_open[k]) continue;
    if (paused) uv_read_stop((uv_stream_t *)&r->out[k]);
    else uv_read_start((uv_stream_t *)&r->out[k], on_out_alloc, on_out_read);
  }
}

static void session_set_paused(session *s, int paused) {
  for (run *r = s->runs; r; r = r->next) run_set_paused(r, paused);
}

/* execd's environment (TERM=xterm in PTY mode), NULL-terminated, malloc'd (strings borrowed from environ but TERM) */
static char **run_env(int is_pty) {
  extern char **environ;
  size_t n = 0;
  while (environ[n]) n++;
  char **env = malloc((n + 2) * sizeof *env);
  if (!env) return NULL;
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    if (is_pty && strncmp(environ[i], "TERM=", 5) == 0) continue;
    env[j++] = environ[i];
  }
  if (is_pty) env[j++] = (char *)"TERM=xterm";
  env[j] = NULL;
  return env;
}

static void run_free(run *r) { free(r); }

/* A run's start on libuv's thread pool: the vfork blocks its thread until the child has exec'd, which on a busy
 * machine waits for the child to get a CPU (1.5 ms median, 40 ms at worst with 300 processes starting): the loop
 * stays free meanwhile (accepting, answering, streaming). Everything the child uses lives here until it exec'd. */
typedef struct {
  uv_work_t work;
  run *r;
  char **env;
  char path[4096];
  char *argv[6];
  xd_spawn_spec sp;
  int child_fds[3]; /* closed once the child has them (-1: none) */
  pid_t pid;        /* xd_spawn's result */
} spawn_job;

static void conn_attach(wsconn *c);
static void conn_start_failed(wsconn *c, const char *text, size_t len);
static void run_kill(run *r);

static void spawn_work(uv_work_t *w) {
  spawn_job *j = w->data;
  j->pid = xd_spawn(&j->sp);
}

/* the failure text of a start that did not happen (errno e) */
static void start_error(session *s, int e, osb_buf *err) {
  struct stat st;
  if (e == ENOENT && stat(s->cwd, &st) != 0) osb_buf_appendf(err, "working directory %s does not exist", s->cwd);
  else osb_buf_appendf(err, "spawn bash %s", uv_err_name(uv_translate_sys_error(e)));
}

/* a run that could not start: over at once (exit -1), its handles closed */
static void run_start_failed(run *r) {
  r->starting = 0;
  r->exited = r->drained = r->reaped = 1;
  r->exit_code = -1;
  run_close_all(r);
}

static void spawn_done(uv_work_t *w, int status) {
  spawn_job *j = w->data;
  run *r = j->r;
  session *s = r->s;
  module *m = s->m;
  for (int k = 0; k < 3; k++) {
    if (j->child_fds[k] >= 0) close(j->child_fds[k]);
  }
  pid_t pid = status == 0 ? j->pid : -ECANCELED;
  free(j->env);
  free(j);
  r->handles--; /* the job's */
  wsconn *h = s->holder;
  if (pid < 0) {
    osb_buf err = {0};
    start_error(s, (int)-pid, &err);
    run_start_failed(r);
    if (h && !h->live && !h->done) conn_start_failed(h, err.data ? err.data : "", err.len);
    osb_buf_free(&err);
    session_maybe_free(s);
    return;
  }
  r->starting = 0;
  r->pid = r->pgid = pid;
  for (int k = 0; k < 2; k++) {
    if (r->out_open[k] && !r->paused) uv_read_start((uv_stream_t *)&r->out[k], on_out_alloc, on_out_read);
  }
  /* the exit: a pidfd where the kernel gives one, else SIGCHLD */
  r->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (r->pidfd >= 0 && uv_poll_init(m->loop, &r->pidpoll, r->pidfd) == 0) {
    r->pidpoll.data = r;
    r->handles++;
    r->poll_open = 1;
    uv_poll_start(&r->pidpoll, UV_READABLE, on_pidfd);
  } else {
    if (r->pidfd >= 0) close(r->pidfd);
    r->pidfd = -1;
    r->waiting = 1;
    r->wnext = m->waiting;
    m->waiting = r;
  }
  if (s->closed) run_kill(r); /* DELETEd while it started */
  if (h && !h->live && !h->done && r == s->cur) conn_attach(h);
  try_reap(r); /* it may be gone already (its SIGCHLD came before it was listed) */
}

/* Starts a run of the session: 0 (it is starting: the holder attaches when it runs, see spawn_done), or -1 with the
 * START_FAILED text in err. */
static int run_start(session *s, int is_pty, osb_buf *err) {
  module *m = s->m;
  /* forget what finished (its group empty too) */
  for (run **p = &s->runs; *p;) {
    run *r = *p;
    if (r->handles == 0 && run_finished(r)) {
      *p = r->next;
      run_free(r);
    } else {
      p = &r->next;
    }
  }
  run *r = calloc(1, sizeof *r);
  spawn_job *j = calloc(1, sizeof *j);
  if (!r || !j) {
    free(r);
    free(j);
    return osb_buf_append_str(err, "out of memory"), -1;
  }
  r->s = s;
  r->is_pty = is_pty;
  r->pidfd = -1;
  uv_timer_init(m->loop, &r->drain);
  r->drain.data = r;
  r->handles = 1;
  r->next = s->runs;
  s->runs = r;
  s->cur = r;

  j->r = r;
  j->child_fds[0] = j->child_fds[1] = j->child_fds[2] = -1;
  j->env = run_env(is_pty);
  int fds[6] = {-1, -1, -1, -1, -1, -1}; /* pipe mode: in r/w, out r/w, err r/w; PTY: master, slave */
  struct stat cst;
  /* a working directory that is gone fails before any spawn (and again in the child, if it goes in between) */
  int e = !j->env ? ENOMEM : stat(s->cwd, &cst) != 0 ? ENOENT : xd_find_exec("bash", j->env, j->path, sizeof j->path);
  if (e == 0) {
    if (is_pty) {
      fds[0] = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
      if (fds[0] < 0 || grantpt(fds[0]) != 0 || unlockpt(fds[0]) != 0) e = errno ? errno : EIO;
      char name[128];
      if (!e && ptsname_r(fds[0], name, sizeof name) != 0) e = errno ? errno : EIO;
      if (!e && (fds[1] = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) e = errno;
      if (!e) {
        struct winsize ws = {.ws_row = 24, .ws_col = 80};
        ioctl(fds[0], TIOCSWINSZ, &ws);
        fds[0] = xd_high_fd(fds[0]);
        fds[1] = xd_high_fd(fds[1]);
        if (fds[0] < 0 || fds[1] < 0) e = EMFILE;
      }
    } else {
      for (int k = 0; k < 3 && !e; k++) {
        if (pipe2(fds + 2 * k, O_CLOEXEC) != 0) e = errno;
      }
      for (int k = 0; k < 6 && !e; k++) {
        if ((fds[k] = xd_high_fd(fds[k])) < 0) e = EMFILE;
      }
    }
  }
  if (e) {
    for (int k = 0; k < 6; k++) {
      if (fds[k] >= 0) close(fds[k]);
    }
    free(j->env);
    free(j);
    start_error(s, e, err);
    run_start_failed(r);
    return -1;
  }
  /* the parent's ends into libuv now: stdin written while it starts waits in the pipe, as in the Node execd; the
   * output is read once it runs (spawn_done), so that what it writes first goes live to the client attaching then */
  if (is_pty) {
    j->child_fds[0] = fds[1];
    uv_pipe_init(m->loop, &r->out[0], 0);
    r->out[0].data = r;
    r->handles++;
    r->out_open[0] = 1;
    r->eofs = 1; /* one output stream */
    if (uv_pipe_open(&r->out[0], fds[0]) != 0) {
      close(fds[0]);
      run_output_end(r, 0);
    }
  } else {
    j->child_fds[0] = fds[0];
    j->child_fds[1] = fds[3];
    j->child_fds[2] = fds[5];
    uv_pipe_init(m->loop, &r->in, 0);
    r->in.data = r;
    r->handles++;
    r->in_open = 1;
    if (uv_pipe_open(&r->in, fds[1]) != 0) {
      close(fds[1]);
      run_close_handle(r, (uv_handle_t *)&r->in);
      r->in_open = 0;
    }
    int rd[2] = {fds[2], fds[4]};
    for (int k = 0; k < 2; k++) {
      uv_pipe_init(m->loop, &r->out[k], 0);
      r->out[k].data = r;
      r->handles++;
      r->out_open[k] = 1;
      if (uv_pipe_open(&r->out[k], rd[k]) != 0) {
        close(rd[k]);
        run_output_end(r, k);
      }
    }
  }
  j->argv[0] = "bash";
  j->argv[1] = "--norc";
  j->argv[2] = "--noprofile";
  j->argv[3] = s->command[0] ? "-c" : NULL;
  j->argv[4] = s->command;
  j->sp = (xd_spawn_spec){.path = j->path, .argv = j->argv, .envp = j->env, .cwd = s->cwd};
  if (is_pty) {
    j->sp.in = j->sp.out = j->sp.err = j->child_fds[0];
    j->sp.ctty = 1;
  } else {
    j->sp.in = j->child_fds[0];
    j->sp.out = j->child_fds[1];
    j->sp.err = j->child_fds[2];
  }
  r->starting = 1;
  r->handles++; /* the job's: the run (its session's cwd and command the child reads) lives until it is done */
  j->work.data = j;
  if (uv_queue_work(m->loop, &j->work, spawn_work, spawn_done) != 0) {
    j->pid = xd_spawn(&j->sp); /* no pool: here, as before */
    spawn_done(&j->work, 0);
  }
  return 0;
}

/* SIGKILL to the run's group (the shell if it still runs, and whatever it left behind); stdin closed */
static void run_kill(run *r) {
  group_signal(r->pgid, SIGKILL);
  run_set_paused(r, 0);
  if (r->in_open) {
    run_close_handle(r, (uv_handle_t *)&r->in);
    r->in_open = 0;
  }
}

typedef struct {
  uv_write_t w;
  run *r;          /* its handle is open until this callback ran: r and its session are alive */
  uint64_t serial; /* the connection that wrote it: told of a failure if it is still the session's client */
  osb_buf taken;   /* the WebSocket message it writes from, when taken from the parser (else data holds a copy) */
  char data[];
} stdin_write;

/* A buffer back to the module's pool (freed when the pool is full or it is too big). */
static void pool_put(module *m, osb_buf *b) {
  for (int i = 0; i < STDIN_POOL && b->cap && b->cap <= STDIN_POOL_MAX + 1; i++) {
    if (m->pool[i].cap == 0) {
      m->pool[i] = *b;
      m->pool[i].len = 0;
      memset(b, 0, sizeof *b);
      return;
    }
  }
  osb_buf_free(b);
}

/* ---------------------------------------------------------------- sessions */

static void session_maybe_free(session *s) {
  if (!s->closed || s->holder) return;
  for (run *r = s->runs; r; r = r->next) {
    if (r->handles > 0) return;
  }
  while (s->runs) {
    run *r = s->runs;
    s->runs = r->next;
    run_free(r);
  }
  module *m = s->m;
  free(s->rp.buf);
  free(s->cwd);
  free(s->command);
  free(s);
  m->objects--;
  module_maybe_free(m);
}

static session *find_session(module *m, const char *id) {
  for (session *s = m->sessions; s; s = s->next) {
    if (strcmp(s->id, id) == 0) return s;
  }
  return NULL;
}

static void session_unlist(session *s) {
  module *m = s->m;
  for (session **p = &m->sessions; *p; p = &(*p)->next) {
    if (*p == s) {
      *p = s->next;
      break;
    }
  }
  s->next = NULL;
}

/* GET /pty/{id}'s `running`: its process runs (not while it starts, as the Node execd) */
static int session_running(const session *s) { return s->cur && s->cur->pid != 0; }
/* a new client attaches to what runs or starts, else starts it */
static int session_live(const session *s) { return s->cur && (s->cur->pid != 0 || s->cur->starting); }

static void session_kill(session *s) {
  s->closed = 1;
  for (run *r = s->runs; r; r = r->next) run_kill(r);
}

/* ---------------------------------------------------------------- WebSocket connections */

static void conn_detach(wsconn *c);
static void conn_gone(wsconn *c, int now);

static void on_conn_handle_closed(uv_handle_t *h) {
  wsconn *c = h->data;
  if (--c->handles > 0) return;
  module *m = c->m;
  osb_buf_free(&c->out);
  xd_ws_parser_free(&c->parser);
  free(c);
  m->objects--;
  module_maybe_free(m);
}

static void on_idle(uv_idle_t *h) { (void)h; }

static void conn_schedule(wsconn *c) {
  if (c->dirty) return;
  c->dirty = 1;
  module *m = c->m;
  if (!m->dirty) uv_idle_start(&m->idle, on_idle); /* the loop must not block in poll before the check runs */
  c->dnext = m->dirty;
  m->dirty = c;
}

/* queues one frame (header + up to two payload parts) in this turn's batch */
static void conn_frame(wsconn *c, int opcode, const void *a, size_t alen, const void *b, size_t blen) {
  if (!c->raw) return;
  unsigned char h[10];
  size_t hl = xd_ws_frame_header(h, opcode, (uint64_t)(alen + blen));
  if (osb_buf_append(&c->out, (const char *)h, hl) != 0 || (alen && osb_buf_append(&c->out, a, alen) != 0) ||
      (blen && osb_buf_append(&c->out, b, blen) != 0)) {
    conn_gone(c, 1);
    return;
  }
  conn_schedule(c);
}

static void conn_text(wsconn *c, const osb_buf *json) {
  conn_frame(c, 1, json->data, json->len, "\n", 1); /* execd's text frames end with a newline */
}

static void conn_error(wsconn *c, const char *code, const char *text, size_t len) {
  osb_buf b = {0};
  int rc = osb_buf_append_str(&b, "{\"type\":\"error\",\"error\":");
  if (rc == 0) rc = xd_json_str((struct osb_buf *)&b, text, len);
  if (rc == 0) rc = osb_buf_appendf(&b, ",\"code\":\"%s\"}", code);
  if (rc == 0) conn_text(c, &b);
  osb_buf_free(&b);
}

static void conn_close_frame(wsconn *c, unsigned code, const char *reason) {
  unsigned char p[125];
  size_t n = xd_ws_close_payload(p, code, reason);
  conn_frame(c, 8, p, n, NULL, 0);
}

static void conn_stop_timers(wsconn *c) {
  uv_timer_stop(&c->ping);
  uv_timer_stop(&c->reader);
  uv_timer_stop(&c->race);
  for (held *h = c->held_head, *n; h; h = n) {
    n = h->next;
    free(h);
  }
  c->held_head = c->held_tail = NULL;
}

/* no longer the session's client (output, events and backpressure stop reaching it) */
static void conn_detach(wsconn *c) {
  if (c->done) return;
  c->done = 1;
  conn_stop_timers(c);
  if (c->stdin_paused && c->raw) { /* its frames no longer go to a process: read on (a close answer among them) */
    c->stdin_paused = 0;
    xd_raw_pause(c->raw, 0);
  }
  session *s = c->s;
  c->s = NULL;
  c->r = NULL;
  if (s && s->holder == c) {
    s->holder = NULL;
    session_set_paused(s, 0);
    session_maybe_free(s);
  }
}

/* the connection ends (closed once what is queued is written, or cut `now`); its handles are closed, then it is
 * freed */
static void conn_gone(wsconn *c, int now) {
  conn_detach(c);
  if (c->raw) {
    conn_flush(c);
    xd_raw *raw = c->raw;
    c->raw = NULL;
    xd_raw_close(raw, now);
  }
  if (c->dirty) {
    for (wsconn **p = &c->m->dirty; *p; p = &(*p)->dnext) {
      if (*p == c) {
        *p = c->dnext;
        break;
      }
    }
    c->dirty = 0;
  }
  uv_timer_stop(&c->later);
  uv_handle_t *hs[] = {(uv_handle_t *)&c->ping, (uv_handle_t *)&c->reader, (uv_handle_t *)&c->later, (uv_handle_t *)&c->race};
  for (size_t i = 0; i < 4; i++) {
    if (!uv_is_closing(hs[i])) uv_close(hs[i], on_conn_handle_closed);
  }
}

static void on_close_wait(uv_timer_t *t) { conn_gone(t->data, 1); }

/* our close frame (code, reason); the client's answer ends the connection, or CLOSE_WAIT_MS does */
static void conn_finish(wsconn *c, unsigned code, const char *reason) {
  if (c->done) return;
  conn_detach(c);
  c->closing = 1;
  conn_close_frame(c, code, reason);
  c->later_is_exit = 0;
  uv_timer_start(&c->later, on_close_wait, CLOSE_WAIT_MS, 0);
}

static void conn_exited(wsconn *c, int code) {
  osb_buf b = {0};
  if (osb_buf_appendf(&b, "{\"type\":\"exit\",\"exit_code\":%d}", code) == 0) conn_text(c, &b);
  osb_buf_free(&b);
  conn_finish(c, 1000, "process exited");
}

static void conn_flush(wsconn *c) {
  if (!c->raw || c->out.len == 0) {
    osb_buf_reset(&c->out);
    return;
  }
  const char *parts[] = {c->out.data};
  size_t lens[] = {c->out.len};
  int rc = xd_raw_write(c->raw, parts, lens, 1);
  osb_buf_reset(&c->out);
  if (c->out.cap > 4 * READ_CHUNK) osb_buf_free(&c->out);
  if (rc != 0) return; /* on_end follows */
  if (c->s && c->s->holder == c && xd_raw_pending(c->raw) > HIGH_WATER) session_set_paused(c->s, 1);
}

static void on_check(uv_check_t *h) {
  module *m = h->data;
  while (m->dirty) {
    wsconn *c = m->dirty;
    m->dirty = c->dnext;
    c->dirty = 0;
    conn_flush(c);
  }
  uv_idle_stop(&m->idle);
}

static void on_race(uv_timer_t *t);

static void race_arm(wsconn *c) {
  if (!c->held_head) return;
  uint64_t now = now_ms(c->m), due = c->held_head->due;
  uv_timer_start(&c->race, on_race, due > now ? due - now : 0, 0);
}

static void on_race(uv_timer_t *t) {
  wsconn *c = t->data;
  uint64_t now = now_ms(c->m);
  while (c->held_head && c->held_head->due <= now) {
    held *h = c->held_head;
    c->held_head = h->next;
    if (!c->held_head) c->held_tail = NULL;
    if (!c->done) conn_frame(c, 2, h->frame, h->len, NULL, 0);
    free(h);
  }
  race_arm(c);
}

static void conn_output(wsconn *c, int stream, const char *data, size_t n) {
  if (c->done || !c->live) return;
  char type = stream == 2 ? 0x02 : 0x01;
  if (!c->m->exit_race) {
    conn_frame(c, 2, &type, 1, data, n);
    return;
  }
  held *h = malloc(sizeof *h + 1 + n);
  if (!h) return;
  h->next = NULL;
  h->due = now_ms(c->m) + RACE_HOLD_MS;
  h->len = 1 + n;
  h->frame[0] = type;
  memcpy(h->frame + 1, data, n);
  if (c->held_tail) c->held_tail->next = h;
  else c->held_head = h;
  c->held_tail = h;
  if (c->held_head == h) race_arm(c);
}

static void on_later(uv_timer_t *t) {
  wsconn *c = t->data;
  if (c->later_is_exit) {
    c->later_is_exit = 0;
    if (!c->done) conn_exited(c, c->later_exit_code);
    return;
  }
  conn_gone(c, 1);
}

static void conn_run_event(wsconn *c, run *r, int is_exit, int code) {
  if (c->done || !c->live || r != c->r) return;
  if (is_exit != !c->m->exit_race) return; /* race: the process exit; else the end of its output */
  /* strict form of upstream's race after DELETE /pty: a client that closes as soon as the DELETE answered always
   * closes before the exit frame is written (then conn_client_gone relays SIGPIPE) */
  if (c->m->forwarding && c->s->closed) {
    c->later_is_exit = 1;
    c->later_exit_code = code;
    uv_timer_start(&c->later, on_later, KILLED_EXIT_HOLD_MS, 0);
    return;
  }
  conn_exited(c, code);
}

/* the client closed the connection (or its close frame came) before we closed it: upstream's exit watcher still
 * writes the exit frame to it once a process that is already exiting is gone, and that EPIPE's SIGPIPE reaches
 * the foreground command (--signal-forwarding) */
static void conn_client_gone(wsconn *c) {
  run *r = c->r;
  session *s = c->s;
  int pending = !c->done && !c->closing && c->live && r && s && (s->closed || r->exited);
  conn_detach(c);
  if (!pending || !c->m->forwarding) return;
  r->relay_on_gone = 1;
  if (r->exited) run_relay_gone(r);
}

static void on_stdin_written(uv_write_t *w, int status) {
  stdin_write *sw = (stdin_write *)w;
  wsconn *h = sw->r->s->holder, *c = h && h->serial == sw->serial ? h : NULL;
  /* stdin backpressure: the client's frames are read again once the process took most of what waited */
  if (h && h->stdin_paused && h->raw && (status < 0 || uv_stream_get_write_queue_size(w->handle) < STDIN_LOW_WATER)) {
    h->stdin_paused = 0;
    xd_raw_pause(h->raw, 0);
    if (!h->done) uv_timer_again(&h->reader);
  }
  if (sw->taken.cap) pool_put(sw->r->s->m, &sw->taken);
  free(sw);
  if (status < 0 && status != UV_ECANCELED && c && !c->done) {
    const char *msg = status == UV_EPIPE ? "write EPIPE" : uv_strerror(status);
    conn_error(c, "STDIN_WRITE_FAILED", msg, strlen(msg));
    conn_finish(c, 1011, "stdin write failed");
  }
}

/* Writes n bytes of stdin into the running process: from msg (a message taken from the parser, data pointing into
 * it: no copy) or else a copy of data. */
static void conn_stdin(wsconn *c, const char *data, size_t n, osb_buf *msg) {
  session *s = c->s;
  run *r = s ? s->cur : NULL;
  const char *fail = NULL;
  if (!r || r->exited) fail = "session not running";
  else if (r->is_pty ? !r->out_open[0] : !r->in_open) fail = "stdin is closed";
  if (fail) {
    conn_error(c, "STDIN_WRITE_FAILED", fail, strlen(fail));
    conn_finish(c, 1011, "stdin write failed");
    return;
  }
  if (n == 0) return;
  stdin_write *sw = malloc(sizeof *sw + (msg ? 0 : n));
  if (!sw) return;
  sw->r = r;
  sw->serial = c->serial;
  memset(&sw->taken, 0, sizeof sw->taken);
  if (msg) {
    sw->taken = *msg;
    memset(msg, 0, sizeof *msg);
  } else {
    memcpy(sw->data, data, n);
    data = sw->data;
  }
  uv_buf_t b = uv_buf_init((char *)data, (unsigned)n);
  uv_stream_t *to = r->is_pty ? (uv_stream_t *)&r->out[0] : (uv_stream_t *)&r->in;
  if (uv_write(&sw->w, to, &b, 1, on_stdin_written) != 0) {
    osb_buf_free(&sw->taken);
    free(sw);
    conn_error(c, "STDIN_WRITE_FAILED", "stdin is closed", 15);
    conn_finish(c, 1011, "stdin write failed");
    return;
  }
  if (uv_stream_get_write_queue_size(to) > HIGH_WATER && c->raw && !c->stdin_paused) {
    c->stdin_paused = 1; /* a process that does not read its stdin: no more frames are read from its client */
    xd_raw_pause(c->raw, 1);
    uv_timer_stop(&c->reader); /* its silence is ours meanwhile */
  }
}

static int signal_num(const char *name) {
  for (size_t i = 0; i < sizeof SIGNAL_NUMS / sizeof *SIGNAL_NUMS; i++) {
    if (strcmp(name, SIGNAL_NAMES[i]) == 0) return SIGNAL_NUMS[i];
  }
  return 0;
}

/* JSON.stringify of a frame's member for the error texts (null when absent) */
static void js_value(const cJSON *v, osb_buf *out) {
  if (!v || cJSON_IsNull(v)) {
    osb_buf_append_str(out, "null");
  } else if (cJSON_IsString(v)) {
    xd_js_json_str(out, v->valuestring, strlen(v->valuestring));
  } else if (cJSON_IsNumber(v)) {
    xd_js_number(out, v->valuedouble);
  } else {
    char *t = cJSON_PrintUnformatted(v);
    if (t) osb_buf_append_str(out, t);
    free(t);
  }
}

static int frame_int(const cJSON *v, double *out) {
  if (!cJSON_IsNumber(v) || !xd_is_integer(v->valuedouble)) return 0;
  *out = v->valuedouble;
  return 1;
}

static void conn_text_frame(wsconn *c, const unsigned char *data, size_t len) {
  cJSON *f = NULL;
  osb_buf msg = {0};
  if (xd_json_parse((const char *)data, len, &f, &msg) != 0) {
    osb_buf e = {0};
    osb_buf_append_str(&e, "invalid JSON frame: ");
    osb_buf_append(&e, msg.data ? msg.data : "", msg.len);
    conn_error(c, "INVALID_FRAME", e.data ? e.data : "", e.len);
    osb_buf_free(&e);
    osb_buf_free(&msg);
    return;
  }
  osb_buf_free(&msg);
  const cJSON *type = cJSON_IsObject(f) ? xd_json_get(f, "type") : NULL;
  const char *t = cJSON_IsString(type) ? type->valuestring : "";
  osb_buf e = {0};
  if (strcmp(t, "stdin") == 0) {
    const cJSON *d = xd_json_get(f, "data");
    if (!cJSON_IsString(d)) osb_buf_append_str(&e, "stdin frame needs a string \"data\"");
    else conn_stdin(c, d->valuestring, strlen(d->valuestring), NULL);
  } else if (strcmp(t, "resize") == 0) {
    double cols, rows;
    if (frame_int(xd_json_get(f, "cols"), &cols) && frame_int(xd_json_get(f, "rows"), &rows) && cols > 0 && rows > 0 &&
        cols <= 0xffff && rows <= 0xffff) {
      run *r = c->s ? c->s->cur : NULL;
      if (r && r->is_pty && !r->exited && r->out_open[0]) {
        uv_os_fd_t fd;
        struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
        if (uv_fileno((uv_handle_t *)&r->out[0], &fd) == 0) ioctl(fd, TIOCSWINSZ, &ws);
      }
    } else {
      osb_buf_append_str(&e, "resize frame needs positive integer \"cols\" and \"rows\"");
    }
  } else if (strcmp(t, "signal") == 0) {
    const cJSON *sg = xd_json_get(f, "signal");
    int sig = cJSON_IsString(sg) ? signal_num(sg->valuestring) : 0;
    if (sig) {
      run *r = c->s ? c->s->cur : NULL;
      if (r && r->pid) group_signal(r->pid, sig);
    } else {
      osb_buf_append_str(&e, "unsupported signal ");
      if (sg) js_value(sg, &e);
      else osb_buf_append_str(&e, "undefined");
      osb_buf_append_str(&e, " (SIGINT, SIGTERM, SIGKILL, SIGQUIT, SIGHUP)");
    }
  } else if (strcmp(t, "ping") == 0) {
    static const osb_buf pong = {(char *)"{\"type\":\"pong\"}", 15, 0};
    conn_text(c, &pong);
  } else {
    osb_buf_append_str(&e, "unknown frame type ");
    js_value(type, &e);
  }
  if (e.len) conn_error(c, "INVALID_FRAME", e.data, e.len);
  osb_buf_free(&e);
  cJSON_Delete(f);
}

static void ws_on_message(void *ud, int binary, const unsigned char *data, size_t len) {
  wsconn *c = ud;
  if (!c->done) uv_timer_again(&c->reader); /* a detached client's timers stay stopped */
  if (c->done) return;
  if (!binary) {
    conn_text_frame(c, data, len);
    return;
  }
  if (len == 0) return;
  if (data[0] != 0x00) {
    char t[48];
    int n = snprintf(t, sizeof t, "unknown binary frame type 0x%02x", data[0]);
    conn_error(c, "INVALID_FRAME", t, (size_t)n);
    return;
  }
  osb_buf msg = {0};
  if (len > 64 * 1024) xd_ws_take_message(&c->parser, &msg); /* a big write: no copy */
  conn_stdin(c, (const char *)data + 1, len - 1, msg.cap ? &msg : NULL);
  osb_buf_free(&msg); /* not written: still ours */
}

static void ws_on_buffer(void *ud, osb_buf *msg, uint64_t announced) {
  wsconn *c = ud;
  module *m = c->m;
  int best = -1;
  for (int i = 0; i < STDIN_POOL; i++) { /* the smallest that holds the message, else the biggest */
    size_t cap = m->pool[i].cap;
    if (!cap) continue;
    if (best < 0) best = i;
    else if (cap > announced ? (m->pool[best].cap <= announced || cap < m->pool[best].cap) : cap > m->pool[best].cap) best = i;
  }
  if (best < 0) return;
  *msg = m->pool[best];
  memset(&m->pool[best], 0, sizeof m->pool[best]);
}

static void ws_on_ping(void *ud, const unsigned char *data, size_t len) {
  wsconn *c = ud;
  if (!c->done) uv_timer_again(&c->reader); /* a detached client's timers stay stopped */
  if (!c->closing) conn_frame(c, 10, data, len, NULL, 0);
}

static void ws_on_pong(void *ud, const unsigned char *data, size_t len) {
  (void)data;
  (void)len;
  wsconn *c = ud;
  if (!c->done) uv_timer_again(&c->reader); /* a detached client's timers stay stopped */
}

static void ws_on_close(void *ud, unsigned code, const unsigned char *reason, size_t len) {
  (void)reason;
  (void)len;
  wsconn *c = ud;
  c->parser.stop = 1;
  if (c->closing) { /* the answer to our close: done */
    conn_gone(c, 0);
    return;
  }
  /* the client's close: answered with its code and no reason (ws echoes, execd's answer has no reason) */
  if (c->linger) { /* --pty-close-linger: like the real execd, the TCP connection is never closed by us */
    conn_client_gone(c);
    conn_close_frame(c, code, NULL);
    return;
  }
  conn_client_gone(c);
  conn_close_frame(c, code, NULL);
  c->closing = 1;
  conn_gone(c, 0); /* FIN once the answer is written */
}

static const xd_ws_callbacks WS_CB = {ws_on_message, ws_on_ping, ws_on_pong, ws_on_close, ws_on_buffer};

static void raw_on_data(void *arg, const char *data, size_t len) {
  wsconn *c = arg;
  if (!c->raw || c->parser.stop) return;
  int rc = xd_ws_parse(&c->parser, (const unsigned char *)data, len, &WS_CB, c);
  if (rc > 0 && c->raw) { /* a protocol error: our close with its code (no reason), then the connection ends */
    conn_client_gone(c);
    conn_close_frame(c, (unsigned)rc, NULL);
    c->closing = 1;
    conn_gone(c, 0);
  } else if (rc < 0 && c->raw) {
    conn_gone(c, 1);
  }
}

static void raw_on_end(void *arg) {
  wsconn *c = arg;
  c->raw = NULL;
  conn_client_gone(c);
  conn_gone(c, 1);
}

static void raw_on_drain(void *arg) {
  wsconn *c = arg;
  if (c->s && c->s->holder == c) session_set_paused(c->s, 0);
}

static const xd_raw_callbacks RAW_CB = {raw_on_data, raw_on_end, raw_on_drain};

static void on_ping_timer(uv_timer_t *t) {
  wsconn *c = t->data;
  conn_frame(c, 9, NULL, 0, NULL, 0);
}

static void on_reader_timeout(uv_timer_t *t) { conn_gone(t->data, 1); }

/* ---------------------------------------------------------------- routes */

static void send_not_found(xd_res *res, const char *id) {
  osb_buf b = {0};
  osb_buf_appendf(&b, "pty session %s not found", id);
  xd_send_error(res, 404, "CONTEXT_NOT_FOUND", b.data ? b.data : "pty session not found");
  osb_buf_free(&b);
}

static void random_uuid(char out[37]) {
  unsigned char b[16];
  xd_random16(b);
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4],
           b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static const char *default_cwd(module *m, char *buf, size_t cap) {
  struct stat st;
  if (m->workspace && *m->workspace && stat(m->workspace, &st) == 0) return m->workspace;
  if (getcwd(buf, cap)) return buf;
  return "/";
}

static void create(module *m, const xd_req *req, xd_res *res) {
  static const char PREFIX[] = "error parsing request: ";
  cJSON *body = NULL;
  osb_buf msg = {0}, cwd = {0}, tmp = {0};
  osb_buf_append_str(&msg, PREFIX);
  int status = 400;
  const char *code = "INVALID_REQUEST_BODY";
  if (req->body_len > 0 && xd_json_parse(req->body, req->body_len, &body, &msg) != 0) goto fail;
  if (body && !cJSON_IsNull(body) && (!cJSON_IsObject(body))) {
    osb_buf_append_str(&msg, "expected a JSON object");
    goto fail;
  }
  const cJSON *fields[2] = {NULL, NULL};
  static const char *const names[2] = {"cwd", "command"};
  for (int k = 0; k < 2; k++) {
    fields[k] = cJSON_IsObject(body) ? xd_json_get(body, names[k]) : NULL;
    if (xd_json_present(fields[k]) && !cJSON_IsString(fields[k])) {
      osb_buf_appendf(&msg, "\"%s\" must be a string", names[k]);
      goto fail;
    }
  }
  char here[4096];
  const char *base = default_cwd(m, here, sizeof here);
  const char *want = cJSON_IsString(fields[0]) ? fields[0]->valuestring : "";
  if (*want) {
    extern char **environ;
    osb_buf_reset(&msg);
    if (xd_expand_path(want, environ, &tmp, &msg) != 0) goto fail;
    osb_buf joined = {0};
    if (tmp.data[0] == '/') osb_buf_append_str(&joined, tmp.data);
    else osb_buf_appendf(&joined, "%s/%s", base, tmp.data);
    int rc = xd_path_normalize(joined.data, 0, &cwd);
    osb_buf_free(&joined);
    if (rc != 0) {
      osb_buf_reset(&msg);
      osb_buf_append_str(&msg, "out of memory");
      status = 500;
      code = "RUNTIME_ERROR";
      goto fail;
    }
    char *first = NULL;
    xd_oserr err = {0};
    if (xd_mkdirp(cwd.data, &first, &err) != 0) { /* mkdirp.js mkdirpSync, its error as Node's message */
      osb_buf_reset(&msg);
      osb_buf_append_str(&msg, "error creating pty session: error creating PTY session work directory: ");
      xd_oserr_node_text(&msg, &err);
      xd_oserr_free(&err);
      status = 500;
      code = "RUNTIME_ERROR";
      goto fail;
    }
    free(first);
  } else {
    osb_buf_append_str(&cwd, base);
  }
  session *s = calloc(1, sizeof *s);
  const char *command = cJSON_IsString(fields[1]) ? fields[1]->valuestring : "";
  if (!s || !(s->command = strdup(command)) || !cwd.data) {
    if (s) free(s->command);
    free(s);
    osb_buf_reset(&msg);
    osb_buf_append_str(&msg, "out of memory");
    status = 500;
    code = "RUNTIME_ERROR";
    goto fail;
  }
  s->m = m;
  m->objects++;
  s->cwd = osb_buf_steal(&cwd, NULL);
  do random_uuid(s->id);
  while (find_session(m, s->id));
  s->next = m->sessions;
  m->sessions = s;
  char out[64];
  int n = snprintf(out, sizeof out, "{\"session_id\":\"%s\"}", s->id);
  xd_send_json(res, 201, out, (size_t)n);
  cJSON_Delete(body);
  osb_buf_free(&msg);
  osb_buf_free(&tmp);
  return;
fail:
  xd_send_error(res, status, code, msg.data ? msg.data : "out of memory");
  cJSON_Delete(body);
  osb_buf_free(&msg);
  osb_buf_free(&cwd);
  osb_buf_free(&tmp);
}

static void reject_upgrade(xd_res *res, int status, const char *code, const char *message) {
  xd_send_error(res, status, code, message);
}

/* ws's handshake refusals (text/html body naming what is wrong) */
static void refuse_handshake(xd_res *res, int status, const char *text) {
  static const char *const h405[] = {"Content-Type: text/html", "Connection: close"};
  static const char *const h400v[] = {"Content-Type: text/html", "Sec-WebSocket-Version: 13, 8", "Connection: close"};
  int version = strstr(text, "Version") != NULL;
  xd_send(res, status, version ? h400v : h405, version ? 3 : 2, text, strlen(text));
}

static long long parse_since(const char *v) {
  if (!v) return 0;
  /* Number.parseInt: leading whitespace, a sign, digits; anything else after is ignored; no digits: 0 */
  while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r' || *v == '\f' || *v == '\v') v++;
  int neg = 0;
  if (*v == '+' || *v == '-') neg = *v++ == '-';
  long long n = 0;
  int digits = 0;
  for (; *v >= '0' && *v <= '9'; v++, digits++) {
    if (n < (long long)1e17) n = n * 10 + (*v - '0');
  }
  return digits ? (neg ? -n : n) : 0;
}

static void upgrade(module *m, const xd_req *req, xd_res *res, const char *id) {
  session *s = find_session(m, id);
  if (!s) {
    osb_buf b = {0};
    osb_buf_appendf(&b, "pty session %s not found", id);
    reject_upgrade(res, 404, "CONTEXT_NOT_FOUND", b.data ? b.data : "pty session not found");
    osb_buf_free(&b);
    return;
  }
  char *takeover = xd_query(req, "takeover");
  int take = takeover && strcmp(takeover, "1") == 0;
  free(takeover);
  if (s->holder && !take) {
    osb_buf b = {0};
    osb_buf_appendf(&b, "another client is already connected to pty session %s", id);
    reject_upgrade(res, 409, "ALREADY_CONNECTED", b.data ? b.data : "already connected");
    osb_buf_free(&b);
    return;
  }
  const char *up = xd_upgrade_of(req), *key = xd_header(req, "sec-websocket-key");
  const char *version = xd_header(req, "sec-websocket-version");
  if (strcmp(req->method, "GET") != 0) return refuse_handshake(res, 405, "Invalid HTTP method");
  if (!up || strcasecmp(up, "websocket") != 0) return refuse_handshake(res, 400, "Invalid Upgrade header");
  if (!xd_ws_key_valid(key)) return refuse_handshake(res, 400, "Missing or invalid Sec-WebSocket-Key header");
  if (!version || (strcmp(version, "13") != 0 && strcmp(version, "8") != 0))
    return refuse_handshake(res, 400, "Missing or invalid Sec-WebSocket-Version header");
  wsconn *c = calloc(1, sizeof *c);
  if (!c) return xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
  c->m = m;
  m->objects++;
  c->serial = ++m->serials;
  c->linger = m->close_linger;
  uv_timer_t *ts[] = {&c->ping, &c->reader, &c->later, &c->race};
  for (size_t i = 0; i < 4; i++) {
    uv_timer_init(m->loop, ts[i]);
    ts[i]->data = c;
  }
  c->handles = 4;
  char accept[29];
  xd_ws_accept(key, accept);
  osb_buf head = {0};
  osb_buf_appendf(&head, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n", accept);
  const char *proto = xd_header(req, "sec-websocket-protocol");
  if (proto && *proto) { /* ws picks the first offered subprotocol */
    size_t n = strcspn(proto, ", \t");
    osb_buf_appendf(&head, "Sec-WebSocket-Protocol: %.*s\r\n", (int)n, proto);
  }
  osb_buf_append_str(&head, "\r\n");
  char *pty_q = xd_query(req, "pty"), *since_q = xd_query(req, "since");
  int pipe_mode = pty_q && strcmp(pty_q, "0") == 0;
  c->since = parse_since(since_q);
  free(pty_q);
  free(since_q);
  c->raw = head.data ? xd_upgrade(res, head.data, head.len, &RAW_CB, c) : NULL;
  osb_buf_free(&head);
  if (!c->raw) {
    conn_gone(c, 1);
    return;
  }
  uv_timer_start(&c->ping, on_ping_timer, PING_MS, PING_MS);
  uv_timer_start(&c->reader, on_reader_timeout, READ_TIMEOUT_MS, READ_TIMEOUT_MS);
  /* the session is this client's now; the previous holder is closed 4001 */
  wsconn *previous = s->holder;
  s->holder = c;
  c->s = s;
  if (previous) {
    conn_finish(previous, 4001, "TAKEN_OVER");
    session_set_paused(s, 0); /* the previous client's backpressure is not this one's */
  }
  if (!session_live(s)) {
    osb_buf err = {0};
    if (s->closed || run_start(s, !pipe_mode, &err) != 0) {
      if (s->closed) osb_buf_append_str(&err, "pty session is closing");
      conn_start_failed(c, err.data ? err.data : "", err.len);
      osb_buf_free(&err);
      return;
    }
    osb_buf_free(&err);
  }
  if (!s->cur->starting) conn_attach(c); /* else when it runs (spawn_done) */
}

/* replay (from `since`), connected, then live output: in one step, so no byte is lost or sent twice */
static void conn_attach(wsconn *c) {
  session *s = c->s;
  module *m = c->m;
  c->r = s->cur;
  osb_buf data = {0};
  uint64_t offset = 0;
  replay_read(&s->rp, c->since, &data, &offset);
  if (data.len > 0) {
    unsigned char pre[9];
    pre[0] = 0x03;
    for (int i = 0; i < 8; i++) pre[1 + i] = (unsigned char)(offset >> (56 - 8 * i));
    conn_frame(c, 2, pre, 9, data.data, data.len);
  }
  osb_buf_free(&data);
  osb_buf con = {0};
  osb_buf_appendf(&con, "{\"type\":\"connected\",\"session_id\":\"%s\",\"mode\":\"%s\"}", s->id, c->r->is_pty ? "pty" : "pipe");
  conn_text(c, &con);
  osb_buf_free(&con);
  c->live = 1;
  /* a run that already ended gets its exit frame now */
  run *r = c->r;
  if (r->drained || (m->exit_race && r->exited)) conn_exited(c, r->exit_code);
}

static void conn_start_failed(wsconn *c, const char *text, size_t len) {
  conn_error(c, "START_FAILED", text, len);
  conn_finish(c, 1011, "start failed");
}

int xd_pty_route(void *module_, const xd_req *req, xd_res *res) {
  module *m = module_;
  const char *p = req->path;
  if (strcmp(p, "/pty") == 0) {
    if (strcmp(req->method, "POST") != 0) return 0;
    create(m, req, res);
    return 1;
  }
  if (strncmp(p, "/pty/", 5) != 0) return 0;
  const char *seg = p + 5, *slash = strchr(seg, '/');
  size_t seglen = slash ? (size_t)(slash - seg) : strlen(seg);
  int ws = slash && strcmp(slash, "/ws") == 0 && xd_upgrade_of(req);
  if (seglen == 0 || (slash && !ws)) return 0;
  if (!ws && strcmp(req->method, "GET") != 0 && strcmp(req->method, "DELETE") != 0) return 0;
  char *id = xd_decode_segment(seg, seglen);
  if (!id) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  if (ws) {
    upgrade(m, req, res, id);
  } else {
    session *s = find_session(m, id);
    if (!s) {
      send_not_found(res, id);
    } else if (strcmp(req->method, "GET") == 0) {
      char out[160];
      int n = snprintf(out, sizeof out, "{\"session_id\":\"%s\",\"running\":%s,\"output_offset\":%llu}", s->id,
                       session_running(s) ? "true" : "false", (unsigned long long)s->rp.total);
      xd_send_json(res, 200, out, (size_t)n);
    } else {
      session_unlist(s);
      session_kill(s);
      xd_send_empty(res);
      session_maybe_free(s);
    }
  }
  free(id);
  return 1;
}

/* ---------------------------------------------------------------- module */

static void on_module_handle_closed(uv_handle_t *h) {
  module *m = h->data;
  m->handles--;
  module_maybe_free(m);
}

static void module_maybe_free(module *m) {
  if (!m->closing || m->handles > 0 || m->objects > 0) return;
  for (int i = 0; i < STDIN_POOL; i++) osb_buf_free(&m->pool[i]);
  free(m->workspace);
  free(m);
}

void *xd_pty_new(const xd_ctx *ctx) {
  module *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->loop = ctx->loop;
  m->workspace = ctx->workspace ? strdup(ctx->workspace) : NULL;
  if (ctx->workspace && !m->workspace) return free(m), NULL;
  m->exit_race = ctx->pty_exit_race;
  m->close_linger = ctx->pty_close_linger;
  m->forwarding = ctx->signal_forwarding;
  m->relay_signal = ctx->relay_signal;
  uv_signal_init(m->loop, &m->sigchld);
  m->sigchld.data = m;
  uv_signal_start(&m->sigchld, on_sigchld, SIGCHLD);
  uv_check_init(m->loop, &m->check);
  m->check.data = m;
  uv_check_start(&m->check, on_check);
  uv_unref((uv_handle_t *)&m->check);
  uv_idle_init(m->loop, &m->idle);
  m->idle.data = m;
  m->handles = 3;
  return m;
}

void xd_pty_close(void *module_) {
  module *m = module_;
  if (!m || m->closing) return;
  m->closing = 1;
  while (m->sessions) {
    session *s = m->sessions;
    session_unlist(s);
    if (s->holder) conn_finish(s->holder, 1001, "execd shutting down");
    session_kill(s);
    session_maybe_free(s);
  }
  on_check(&m->check);
  uv_close((uv_handle_t *)&m->sigchld, on_module_handle_closed);
  uv_close((uv_handle_t *)&m->check, on_module_handle_closed);
  uv_close((uv_handle_t *)&m->idle, on_module_handle_closed);
}
