/* execd's bash sessions API in C (xd.h: xd_sessions_*): POST /session, POST /session/{id}/run (an event stream),
 * DELETE /session/{id}, and DELETE /command?id= of a session id (upstream's Interrupt closes it). The Node execd's
 * sessions.js with its texts and framing, upstream's (runtime/bash_session.go and the controller) where that one
 * wrote JavaScript's own.
 *
 * A session is stateful but not interactive, like upstream's: each run is a fresh `bash --noprofile --norc SCRIPT`
 * (bash as upstream, which has no fallback to sh: without bash a run fails to start) in a new session and process
 * group, stdin /dev/null, stdout and stderr one pipe (both are `stdout` events, in write order). The script
 * (`$TMPDIR/session-<id>.sh`) sources the environment the previous run saved (`export -p` into `session-<id>.env`),
 * cds to the saved directory (`session-<id>.cwd`, else the session's, or the run's `cwd`), runs the command, then saves
 * both for the next run. The env file is sourced by bash, never read by execd (its size is the sandbox's business);
 * the cwd file is read bounded. The script is written and the cwd file read on libuv's thread pool, the directory of
 * POST /session made there too. One run at a time per session (another gets the bare `session is busy` object). A
 * run ends when bash exited and its output reached EOF: then `execution_complete`, or an `error` event (exit status
 * or signal), or after a timeout (the process group killed at once) the bare
 * `{"code":"RUNTIME_ERROR","message":"error running in session. timeout after 1s"}` without a blank line; the
 * response ends right after, without /command's tail. A client that goes away cancels its run (process group
 * killed); its output is then read and dropped. Backpressure as /command's: the pipe is not read while more than
 * 16 KiB wait for the client. Processes are reaped on SIGCHLD with waitpid on their own pids.
 *
 * Ownership: the module owns its sessions, runs and their handles; it frees itself once xd_sessions_close was called
 * and every handle and thread pool job is done (the loop must run on). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2 */
#endif
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "sessions.h"

#include "cmdreq.h"
#include "events.h"
#include "fsops.h"
#include "json.h"
#include "lines.h"
#include "spawn.h"
#include "xd.h"

extern char **environ;

#define PING_INTERVAL_MS 3000
/* A stream write that leaves this many bytes queued means the client's buffer is full (commands.c's bound). */
#define STREAM_HWM 16384
/* How long a run may take when it asks for no (positive) timeout: upstream's 24 h, in nanoseconds. */
#define SESSION_MAX_WAIT_NS (24ll * 3600ll * 1000000000ll)
/* The saved directory of a session is read up to this many bytes (a longer file is not a directory name). */
#define CWD_FILE_MAX 65536

static const char DECODE[] = "error parsing request, MAYBE invalid body format. ";

typedef struct module module;
typedef struct session session;
typedef struct run run;

struct session {
  module *m;
  session *prev, *next;
  char id[37];
  char *cwd;                         /* the session's directory (absolute) */
  char *env_file, *cwd_file, *script_file;
  run *run;                          /* the run in progress (the session is busy), or NULL */
  int deleted;                       /* out of the registry; freed (files removed) when its run ends */
};

struct run {
  module *m;
  session *s;
  run *prev, *next;                  /* the module's runs */
  xd_res *res;                       /* NULL once the client left or the response ended */
  char *command, *cwd;               /* cwd: the run's own directory, or NULL */
  uv_work_t prep;                    /* thread pool: reads the saved directory, writes the script */
  int preparing;
  int prep_err;                      /* errno of the script's open or write (0: written) */
  const char *prep_call;             /* "open" or "write" */
  uv_pipe_t out;
  int out_open;
  xd_lines split;
  uv_timer_t ping, timeout;
  pid_t pid;                         /* the process group; 0 when not started or reaped */
  int exited, wstatus, eof;
  int timed_out, bp_paused, ended;
  int64_t wait_ns;                   /* the run's deadline (Go's Duration) */
  uint64_t start_ms;
  int handles;                       /* libuv handles not yet closed (pipe, 2 timers) */
};

struct module {
  uv_loop_t *loop;
  char *workspace;
  char *tmpdir;
  session *sessions;
  run *runs;
  xd_fsjobs jobs;
  uv_signal_t sigchld;
  int pending;                       /* handles and thread pool jobs that still refer to the module */
  int closing;
  char readbuf[65536];
};

/* ------------------------------------------------------------------------------------------------- helpers */

static void module_maybe_free(module *m) {
  if (m->closing && m->pending == 0) {
    free(m->workspace);
    free(m->tmpdir);
    free(m);
  }
}

/* Node's os.tmpdir(): $TMPDIR, $TMP or $TEMP, else /tmp, without a trailing slash. */
static char *tmp_dir(void) {
  const char *t = getenv("TMPDIR");
  if (!t || !*t) t = getenv("TMP");
  if (!t || !*t) t = getenv("TEMP");
  if (!t || !*t) t = "/tmp";
  char *d = strdup(t);
  if (d) {
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/') d[--n] = 0;
  }
  return d;
}

/* A random (version 4) UUID, as upstream's uuid.New().String(). */
static void uuid_v4(char out[37]) {
  unsigned char b[16];
  xd_random16(b);
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
           b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* execd's time.Duration(timeout) * time.Millisecond: int64 nanoseconds, wrapping (xd_go_duration_ms's rule). */
static int64_t go_duration_ns(double timeout_ms) {
  uint64_t v;
  if (timeout_ms >= 0) v = timeout_ms >= 18446744073709551616.0 ? 0 : (uint64_t)timeout_ms;
  else v = (uint64_t)0 - (uint64_t)(-timeout_ms);
  return (int64_t)(v * 1000000u);
}

/* Appends s single-quoted for the shell ('\'' for each quote). */
static int shell_quote(osb_buf *b, const char *s) {
  int rc = osb_buf_append(b, "'", 1);
  for (const char *q; rc == 0 && (q = strchr(s, '\'')) != NULL; s = q + 1) {
    rc |= osb_buf_append(b, s, (size_t)(q - s));
    rc |= osb_buf_append_str(b, "'\\''");
  }
  if (rc == 0) rc = osb_buf_append_str(b, s);
  if (rc == 0) rc = osb_buf_append(b, "'", 1);
  return rc;
}

static void on_unlinked(uv_fs_t *req) {
  uv_fs_req_cleanup(req);
  free(req);
}

/* Removes a file on the thread pool; a missing one is fine (nothing waits for it). */
static void unlink_async(uv_loop_t *loop, const char *path) {
  uv_fs_t *req = malloc(sizeof *req);
  if (req && uv_fs_unlink(loop, req, path, on_unlinked) != 0) free(req);
}

/* A JSON value's kind as Go's decoder names it in "cannot unmarshal X into ...". */
static const char *json_kind(const cJSON *v) {
  if (cJSON_IsArray(v)) return "array";
  if (cJSON_IsBool(v)) return "bool";
  if (cJSON_IsNumber(v)) return "number";
  if (cJSON_IsString(v)) return "string";
  return "object";
}

/* The body's JSON object (NULL for an empty body when optional, or a null), or -1 with the 400 text in msg: Go's
 * decoder errors into model.<type>. A body with a NUL character escape is refused (cJSON's strings end at a NUL: a
 * command would run cut short). */
static int parse_body(const char *body, size_t len, int optional, const char *type, cJSON **out, osb_buf *msg) {
  *out = NULL;
  if (len == 0) {
    if (optional) return 0;
    osb_buf_appendf(msg, "%sEOF", DECODE);
    return -1;
  }
  for (size_t i = 0; i + 6 <= len; i++) {
    if (body[i] == '\\' && (body[i + 1] == 'u' || body[i + 1] == 'U') && memcmp(body + i + 2, "0000", 4) == 0) {
      osb_buf_appendf(msg, "%sNUL characters in strings are not supported", DECODE);
      return -1;
    }
    if (body[i] == '\\') i++;
  }
  osb_buf syntax = {0};
  cJSON *b = NULL;
  if (xd_json_parse(body, len, &b, &syntax) != 0) {
    osb_buf_appendf(msg, "%s%s", DECODE, syntax.data ? syntax.data : "out of memory");
    osb_buf_free(&syntax);
    return -1;
  }
  osb_buf_free(&syntax);
  if (cJSON_IsNull(b)) {
    cJSON_Delete(b);
    return 0;
  }
  if (!cJSON_IsObject(b)) {
    osb_buf_appendf(msg, "%sjson: cannot unmarshal %s into Go value of type model.%s", DECODE, json_kind(b), type);
    cJSON_Delete(b);
    return -1;
  }
  *out = b;
  return 0;
}

/* A string member of the request's object that is not a string: Go's decoder error. 1 (msg set) or 0. */
static int wrong_string(const cJSON *body, const char *key, const char *type, osb_buf *msg) {
  const cJSON *v = xd_json_get(body, key);
  if (!xd_json_present(v) || cJSON_IsString(v)) return 0;
  osb_buf_appendf(msg, "%sjson: cannot unmarshal %s into Go struct field %s.%s of type string", DECODE, json_kind(v), type, key);
  return 1;
}

/* ------------------------------------------------------------------------------------------------- sessions */

static session *find_session(module *m, const char *id) {
  for (session *s = m->sessions; s; s = s->next) {
    if (strcmp(s->id, id) == 0) return s;
  }
  return NULL;
}

static void session_free(session *s) {
  uv_loop_t *loop = s->m->loop;
  unlink_async(loop, s->env_file);
  unlink_async(loop, s->cwd_file);
  unlink_async(loop, s->script_file);
  free(s->cwd);
  free(s->env_file);
  free(s->cwd_file);
  free(s->script_file);
  free(s);
}

static void kill_run(run *r) {
  if (r && r->pid > 0 && !r->exited) kill(-r->pid, SIGKILL);
}

/* Takes the session out of the registry and kills its run (which ends as killed); freed now or when the run ends. */
static void session_remove(session *s) {
  module *m = s->m;
  if (s->prev) s->prev->next = s->next;
  else m->sessions = s->next;
  if (s->next) s->next->prev = s->prev;
  s->prev = s->next = NULL;
  s->deleted = 1;
  if (s->run) kill_run(s->run);
  else session_free(s);
}

/* The create job: the session's directory made (mkdir -p) or the workspace checked, on the thread pool. */
typedef struct {
  xd_fsjob job; /* first */
  module *m;
  char *cwd;      /* the expanded, resolved directory asked for, or NULL: the workspace */
  char *workspace; /* when cwd is NULL: the module's workspace (a copy: the module may close meanwhile) */
  char *made_cwd; /* the session's directory (the thread pool's result) */
} create_job;

static void create_run(xd_fsjob *job) {
  create_job *j = (create_job *)job;
  if (j->cwd) {
    char *first = NULL;
    xd_oserr e = {0};
    if (xd_mkdirp(j->cwd, &first, &e) != 0) {
      osb_buf msg = {0};
      osb_buf_append_str(&msg, "error creating session. ");
      xd_oserr_text(&msg, &e);
      xd_fsjob_fail(job, 500, "RUNTIME_ERROR", msg.data);
      osb_buf_free(&msg);
    }
    free(first);
    xd_oserr_free(&e);
    j->made_cwd = strdup(j->cwd);
    return;
  }
  /* sessions.js: the workspace when it exists, else execd's own directory */
  struct stat st;
  char here[4096];
  if (j->workspace && *j->workspace && stat(j->workspace, &st) == 0) j->made_cwd = strdup(j->workspace);
  else j->made_cwd = strdup(getcwd(here, sizeof here) ? here : "/");
}

static void create_answer(xd_fsjob *job, int status) {
  create_job *j = (create_job *)job;
  if (!job->res) return; /* the client left, or the module closed: no session */
  if (status != 0) {
    xd_send_error(job->res, 500, "RUNTIME_ERROR", "operation canceled");
    return;
  }
  if (job->status != 200) {
    xd_send_error(job->res, job->status, job->code, job->message ? job->message : "out of memory");
    return;
  }
  module *m = j->m;
  session *s = calloc(1, sizeof *s);
  if (!s || !j->made_cwd) {
    free(s);
    xd_send_error(job->res, 500, "RUNTIME_ERROR", "out of memory");
    return;
  }
  s->m = m;
  uuid_v4(s->id);
  s->cwd = j->made_cwd;
  j->made_cwd = NULL;
  osb_buf p = {0};
  osb_buf_appendf(&p, "%s/session-%s.env", m->tmpdir, s->id);
  s->env_file = p.data ? strdup(p.data) : NULL;
  osb_buf_reset(&p);
  osb_buf_appendf(&p, "%s/session-%s.cwd", m->tmpdir, s->id);
  s->cwd_file = p.data ? strdup(p.data) : NULL;
  osb_buf_reset(&p);
  osb_buf_appendf(&p, "%s/session-%s.sh", m->tmpdir, s->id);
  s->script_file = p.data ? strdup(p.data) : NULL;
  osb_buf_free(&p);
  if (!s->env_file || !s->cwd_file || !s->script_file) {
    free(s->cwd);
    free(s->env_file);
    free(s->cwd_file);
    free(s->script_file);
    free(s);
    xd_send_error(job->res, 500, "RUNTIME_ERROR", "out of memory");
    return;
  }
  s->next = m->sessions;
  if (m->sessions) m->sessions->prev = s;
  m->sessions = s;
  char body[64];
  int n = snprintf(body, sizeof body, "{\"session_id\":\"%s\"}", s->id);
  xd_send_json(job->res, 200, body, (size_t)n);
}

static void create_release(xd_fsjob *job) {
  create_job *j = (create_job *)job;
  module *m = j->m;
  free(j->cwd);
  free(j->workspace);
  free(j->made_cwd);
  free(j);
  m->pending--;
  module_maybe_free(m);
}

static void create(module *m, const xd_req *req, xd_res *res) {
  osb_buf msg = {0};
  cJSON *body = NULL;
  if (xd_sessions_parse(req->body, req->body_len, 0, &body, &msg) != 0) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", msg.data ? msg.data : "out of memory");
    goto done;
  }
  create_job *j = calloc(1, sizeof *j);
  if (!j) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto done;
  }
  j->m = m;
  j->job.run = create_run;
  j->job.release = create_release;
  j->job.answer = create_answer;
  const cJSON *cwd = xd_json_get(body, "cwd");
  if (cJSON_IsString(cwd) && cwd->valuestring[0]) {
    /* upstream: the cwd's $VAR/${VAR} and leading ~ expanded, then made with MkdirAll (relative to execd's own
     * directory) */
    osb_buf x = {0}, err = {0}, abs = {0};
    if (xd_expand_path(cwd->valuestring, environ, &x, &err) != 0) {
      osb_buf_appendf(&msg, "error creating session. resolve request cwd %s: %s", cwd->valuestring, err.data ? err.data : "out of memory");
      xd_send_error(res, 500, "RUNTIME_ERROR", msg.data ? msg.data : "out of memory");
    } else if (xd_path_resolve(x.data, &abs) != 0 || !(j->cwd = strdup(abs.data))) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    }
    osb_buf_free(&x);
    osb_buf_free(&err);
    osb_buf_free(&abs);
    if (!j->cwd) {
      free(j);
      goto done;
    }
  } else if (!(j->workspace = strdup(m->workspace))) {
    free(j);
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto done;
  }
  m->pending++;
  if (xd_fsjob_start(&m->jobs, m->loop, &j->job, res) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    j->job.answer = NULL;
    create_release(&j->job);
  }
done:
  cJSON_Delete(body);
  osb_buf_free(&msg);
}

/* ------------------------------------------------------------------------------------------------- runs */

static void nothing(void *arg) { (void)arg; }

/* Writes one event; 0 when the client's buffer is full. */
static int write_event(run *r, const xd_event *ev) {
  if (!r->res || xd_res_closed(r->res)) return 1;
  osb_buf b = {0};
  int ok = 1;
  if (xd_event_append(&b, ev) == 0 && xd_stream_write(r->res, b.data, b.len) == 0)
    ok = xd_stream_pending(r->res) < STREAM_HWM;
  osb_buf_free(&b);
  return ok;
}

/* A failure inside the stream: execd's bare {"code","message"} object, no `type`, no blank line after it. */
static void write_failure(run *r, const char *message) {
  if (!r->res || xd_res_closed(r->res)) return;
  osb_buf b = {0};
  osb_buf_append_str(&b, "{\"code\":\"RUNTIME_ERROR\",\"message\":");
  xd_json_str(&b, message, strlen(message));
  if (osb_buf_append(&b, "}", 1) == 0) xd_stream_write(r->res, b.data, b.len);
  osb_buf_free(&b);
}

static void run_maybe_free(run *r);

static void on_run_handle_closed(uv_handle_t *h) {
  run *r = h->data;
  r->handles--;
  run_maybe_free(r);
}

static void run_close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, on_run_handle_closed);
}

static void close_out(run *r) {
  if (!r->out_open) return;
  r->out_open = 0;
  uv_read_stop((uv_stream_t *)&r->out);
  run_close_handle((uv_handle_t *)&r->out);
}

/* Frees the run once it ended, its handles are closed and its thread pool job is done. */
static void run_maybe_free(run *r) {
  if (!r->ended || r->handles > 0 || r->preparing) return;
  module *m = r->m;
  if (r->prev) r->prev->next = r->next;
  else m->runs = r->next;
  if (r->next) r->next->prev = r->prev;
  xd_lines_free(&r->split);
  free(r->command);
  free(r->cwd);
  free(r);
  m->pending--;
  module_maybe_free(m);
}

/* The run is over (what it reports is written by the caller): the response ends, the session is free again. */
static void run_end(run *r) {
  if (r->ended) return;
  r->ended = 1;
  uv_timer_stop(&r->ping);
  uv_timer_stop(&r->timeout);
  if (r->res) {
    xd_res *res = r->res;
    r->res = NULL;
    xd_res_on_close(res, nothing, NULL);
    xd_stream_on_drain(res, nothing, NULL);
    if (!xd_res_closed(res)) xd_stream_end(res);
  }
  session *s = r->s;
  r->s = NULL;
  if (s) {
    s->run = NULL;
    if (s->deleted) session_free(s);
  }
  close_out(r);
  run_close_handle((uv_handle_t *)&r->ping);
  run_close_handle((uv_handle_t *)&r->timeout);
  run_maybe_free(r);
}

/* Exited and at EOF: the final event. */
static void run_finish(run *r) {
  xd_lines_flush(&r->split);
  if (r->timed_out) {
    char d[40], msg[96];
    xd_go_duration_text(r->wait_ns, d);
    snprintf(msg, sizeof msg, "error running in session. timeout after %s", d);
    write_failure(r, msg);
  } else if (WIFEXITED(r->wstatus) && WEXITSTATUS(r->wstatus) == 0) {
    xd_event ev = {.type = "execution_complete"};
    uint64_t now = xd_wall_ms();
    if (now > r->start_ms) ev.has_time = 1, ev.time = now - r->start_ms; /* Go's omitempty leaves out 0 */
    write_event(r, &ev);
  } else {
    char value[16], tb[64], sb[16];
    if (WIFSIGNALED(r->wstatus)) {
      snprintf(value, sizeof value, "-1");
      snprintf(tb, sizeof tb, "signal: %s", xd_signal_text(WTERMSIG(r->wstatus), sb, sizeof sb));
    } else {
      snprintf(value, sizeof value, "%d", WEXITSTATUS(r->wstatus));
      snprintf(tb, sizeof tb, "exit status %d", WEXITSTATUS(r->wstatus));
    }
    xd_event ev = {.type = "error", .ename = "CommandExecError", .evalue = value, .traceback = tb};
    write_event(r, &ev);
  }
  run_end(r);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  run *r = h->data;
  buf->base = r->m->readbuf;
  buf->len = sizeof r->m->readbuf;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf);

static void bp_release(void *arg) {
  run *r = arg;
  if (!r->bp_paused) return;
  r->bp_paused = 0;
  xd_lines_resume(&r->split);
  if (r->bp_paused) return; /* what the splitter held filled the client's buffer again */
  if (r->out_open) uv_read_start((uv_stream_t *)&r->out, on_alloc, on_read);
}

static int on_line(void *arg, const char *text, size_t len) {
  run *r = arg;
  if (!r->res) return 1;
  xd_event ev = {.type = "stdout", .text = text, .text_len = len};
  if (write_event(r, &ev) || r->bp_paused || !r->res) return !r->bp_paused;
  r->bp_paused = 1;
  if (r->out_open) uv_read_stop((uv_stream_t *)&r->out);
  xd_stream_on_drain(r->res, bp_release, r);
  return 0;
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf) {
  run *r = st->data;
  if (n > 0) {
    xd_lines_push(&r->split, buf->base, (size_t)n);
    return;
  }
  if (n == 0) return;
  close_out(r);
  r->eof = 1;
  if (r->exited) run_finish(r);
}

static void on_ping(uv_timer_t *t) {
  run *r = t->data;
  if (!r->res || r->bp_paused || xd_stream_pending(r->res) >= STREAM_HWM) return;
  xd_event ev = {.type = "ping", .text = "pong", .text_len = 4};
  write_event(r, &ev);
}

static void on_timeout(uv_timer_t *t) {
  run *r = t->data;
  r->timed_out = 1;
  kill_run(r);
}

/* The client went away: the run is cancelled (its output read and dropped until it ends). */
static void on_client_close(void *arg) {
  run *r = arg;
  if (r->res) xd_stream_on_drain(r->res, nothing, NULL);
  r->res = NULL;
  uv_timer_stop(&r->ping);
  xd_lines_discard(&r->split);
  bp_release(r);
  kill_run(r);
  if (r->exited && !r->ended) run_finish(r); /* bash is gone, something it left holds the pipe */
}

static void on_sigchld(uv_signal_t *h, int signum) {
  (void)signum;
  module *m = h->data;
  for (;;) {
    run *hit = NULL;
    int status = 0;
    for (run *r = m->runs; r; r = r->next) {
      if (r->pid > 0 && !r->exited && waitpid(r->pid, &status, WNOHANG) == r->pid) {
        hit = r;
        break;
      }
    }
    if (!hit) return;
    hit->exited = 1;
    hit->wstatus = status;
    /* at EOF; or nobody listens: a process that left the group (and holds the pipe) must not keep the session busy */
    if (hit->eof || !hit->res) run_finish(hit);
  }
}

/* The thread pool's part of a run: the saved directory read (bounded), the script written. */
static void prep_work(uv_work_t *w) {
  run *r = w->data;
  session *s = r->s;
  const char *cwd = r->cwd;
  char saved[CWD_FILE_MAX + 1];
  if (!cwd) {
    cwd = s->cwd;
    int fd = open(s->cwd_file, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      size_t n = 0;
      ssize_t got;
      while (n < CWD_FILE_MAX && ((got = read(fd, saved + n, CWD_FILE_MAX - n)) > 0 || (got < 0 && errno == EINTR)))
        if (got > 0) n += (size_t)got;
      close(fd);
      saved[n] = 0;
      /* sessions.js: the file's text trimmed, unless that is empty */
      char *a = saved, *e = saved + n;
      while (a < e && (*a == ' ' || *a == '\t' || *a == '\n' || *a == '\r' || *a == '\v' || *a == '\f')) a++;
      while (e > a && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r' || e[-1] == '\v' || e[-1] == '\f')) e--;
      *e = 0;
      if (*a && strlen(a) == (size_t)(e - a)) cwd = a;
    }
  }
  osb_buf b = {0};
  int rc = osb_buf_append_str(&b, "if [ -f ");
  rc |= shell_quote(&b, s->env_file);
  rc |= osb_buf_append_str(&b, " ]; then . ");
  rc |= shell_quote(&b, s->env_file);
  rc |= osb_buf_append_str(&b, "; fi\ncd ");
  rc |= shell_quote(&b, cwd);
  rc |= osb_buf_append_str(&b, " || exit 1\n");
  rc |= osb_buf_append_str(&b, r->command);
  rc |= osb_buf_append_str(&b, "\n__osb_rc=$?\nexport -p > ");
  rc |= shell_quote(&b, s->env_file);
  rc |= osb_buf_append_str(&b, "\npwd > ");
  rc |= shell_quote(&b, s->cwd_file);
  rc |= osb_buf_append_str(&b, "\nexit $__osb_rc\n");
  r->prep_call = "open";
  if (rc != 0 || !b.data) {
    r->prep_err = ENOMEM;
    osb_buf_free(&b);
    return;
  }
  int fd = open(s->script_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    r->prep_err = errno;
  } else {
    r->prep_call = "write";
    for (size_t off = 0; off < b.len;) {
      ssize_t n = write(fd, b.data + off, b.len - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        r->prep_err = n < 0 ? errno : EIO;
        break;
      }
      off += (size_t)n;
    }
    if (close(fd) != 0 && !r->prep_err) r->prep_err = errno;
  }
  osb_buf_free(&b);
}

/* Go's error text of a failed start of bash (exec.Cmd.Start), after "error running in session. start bash: ". */
static void start_error_text(int err, const char *path, osb_buf *out) {
  if (err == ENOENT && !*path) osb_buf_append_str(out, "exec: \"bash\": executable file not found in $PATH");
  else osb_buf_appendf(out, "fork/exec %s: %s", *path ? path : "bash", uv_strerror(uv_translate_sys_error(err)));
}

static void prep_done(uv_work_t *w, int status) {
  run *r = w->data;
  module *m = r->m;
  r->preparing = 0;
  if (status != 0 || r->prep_err || m->closing || !r->res || !r->s || r->s->deleted) {
    if (m->closing || !r->res) {
      run_end(r); /* nobody listens */
      return;
    }
    if (r->s && r->s->deleted) { /* deleted before it started: as if killed at once */
      r->wstatus = SIGKILL; /* WIFSIGNALED */
      run_finish(r);
      return;
    }
    osb_buf msg = {0};
    osb_buf_append_str(&msg, "error running in session. ");
    if (status != 0) osb_buf_append_str(&msg, "operation canceled");
    else {
      xd_oserr e = {0};
      xd_oserr_set(&e, r->prep_err, r->prep_call, r->s->script_file);
      osb_buf_appendf(&msg, "%s script file: ", strcmp(r->prep_call, "open") == 0 ? "create" : "write");
      xd_oserr_text(&msg, &e);
      xd_oserr_free(&e);
    }
    write_failure(r, msg.data ? msg.data : "error running in session");
    osb_buf_free(&msg);
    run_end(r);
    return;
  }
  /* bash --noprofile --norc SCRIPT, in a new session, stdin /dev/null, stdout and stderr one pipe */
  char path[4096] = "";
  int err = xd_find_exec("bash", environ, path, sizeof path);
  if (err) path[0] = 0;
  int p[2] = {-1, -1}, in = -1;
  if (!err) {
    in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in < 0 || pipe2(p, O_CLOEXEC) != 0) {
      err = errno ? errno : EMFILE;
      if (in >= 0) close(in);
      in = -1;
    } else {
      p[1] = xd_high_fd(p[1]);
      in = xd_high_fd(in);
      if (p[1] < 0 || in < 0) err = EMFILE;
    }
  }
  pid_t pid = -err;
  if (!err) {
    char *argv[] = {"bash", "--noprofile", "--norc", r->s->script_file, NULL};
    xd_spawn_spec spec = {.path = path, .argv = argv, .envp = environ, .in = in, .out = p[1], .err = p[1]};
    pid = xd_spawn(&spec);
  }
  if (in >= 0) close(in);
  if (p[1] >= 0) close(p[1]);
  if (pid < 0) {
    if (p[0] >= 0) close(p[0]);
    osb_buf msg = {0};
    osb_buf_append_str(&msg, "error running in session. start bash: ");
    start_error_text((int)-pid, path, &msg);
    write_failure(r, msg.data ? msg.data : "error running in session");
    osb_buf_free(&msg);
    run_end(r);
    return;
  }
  r->pid = pid;
  uv_pipe_init(m->loop, &r->out, 0);
  r->out.data = r;
  r->handles++;
  r->out_open = 1;
  if (uv_pipe_open(&r->out, p[0]) != 0) {
    close(p[0]);
    close_out(r);
    r->eof = 1;
  } else {
    uv_read_start((uv_stream_t *)&r->out, on_alloc, on_read);
  }
  uv_update_time(m->loop);
  double ms = (double)r->wait_ns / 1e6;
  uv_timer_start(&r->timeout, on_timeout, ms >= 1.8e19 ? UINT64_MAX : (uint64_t)ceil(ms), 0);
  on_sigchld(&m->sigchld, SIGCHLD); /* it may have exited already */
}

/* The run's body, as Go's decoder and validator see model.RunInSessionRequest: 0, or -1 with the 400 text. */
static int parse_run(const char *text, size_t len, cJSON **body, osb_buf *msg) {
  static const char T[] = "RunInSessionRequest";
  if (parse_body(text, len, 0, T, body, msg) != 0 || wrong_string(*body, "command", T, msg) || wrong_string(*body, "cwd", T, msg))
    return -1;
  const cJSON *timeout = xd_json_get(*body, "timeout");
  if (xd_json_present(timeout)) {
    if (!cJSON_IsNumber(timeout)) {
      osb_buf_appendf(msg, "%sjson: cannot unmarshal %s into Go struct field %s.timeout of type int64", DECODE, json_kind(timeout), T);
      return -1;
    }
    double v = timeout->valuedouble;
    if (!xd_is_integer(v) || fabs(v) > 9223372036854775808.0) {
      osb_buf_appendf(msg, "%sjson: cannot unmarshal number ", DECODE);
      if (xd_is_integer(v)) osb_buf_appendf(msg, "%s%.0f", v < 0 ? "-" : "", fabs(v));
      else xd_js_number(msg, v);
      osb_buf_appendf(msg, " into Go struct field %s.timeout of type int64", T);
      return -1;
    }
  }
  const cJSON *command = xd_json_get(*body, "command");
  int no_command = !cJSON_IsString(command) || command->valuestring[0] == 0;
  int negative = xd_json_present(timeout) && timeout->valuedouble < 0;
  if (no_command || negative) { /* the validator names every failing field, one per line */
    osb_buf_append_str(msg, "invalid request. ");
    if (no_command) osb_buf_appendf(msg, "Key: '%s.Command' Error:Field validation for 'Command' failed on the 'required' tag", T);
    if (no_command && negative) osb_buf_append(msg, "\n", 1);
    if (negative) osb_buf_appendf(msg, "Key: '%s.Timeout' Error:Field validation for 'Timeout' failed on the 'gte' tag", T);
    return -1;
  }
  return 0;
}

int xd_sessions_parse(const char *body, size_t len, int run, cJSON **out, osb_buf *msg) {
  int rc = run ? parse_run(body, len, out, msg)
               : parse_body(body, len, 1, "CreateSessionRequest", out, msg) != 0 || wrong_string(*out, "cwd", "CreateSessionRequest", msg) ? -1 : 0;
  if (rc != 0) {
    cJSON_Delete(*out);
    *out = NULL;
  }
  return rc;
}

static void run_route(module *m, const xd_req *req, xd_res *res, const char *id) {
  osb_buf msg = {0};
  cJSON *body = NULL;
  if (xd_sessions_parse(req->body, req->body_len, 1, &body, &msg) != 0) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", msg.data ? msg.data : "out of memory");
    goto done;
  }
  session *s = find_session(m, id);
  if (!s) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "error running in session. context not found");
    goto done;
  }
  /* upstream: the run's cwd expanded like the session's */
  char *cwd = NULL;
  const cJSON *jcwd = xd_json_get(body, "cwd");
  if (cJSON_IsString(jcwd) && jcwd->valuestring[0]) {
    osb_buf x = {0}, err = {0};
    if (xd_expand_path(jcwd->valuestring, environ, &x, &err) != 0) {
      osb_buf_appendf(&msg, "error running in session. resolve cwd: %s", err.data ? err.data : "out of memory");
      xd_send_error(res, 500, "RUNTIME_ERROR", msg.data ? msg.data : "out of memory");
    } else if (!(cwd = strdup(x.data))) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    }
    osb_buf_free(&x);
    osb_buf_free(&err);
    if (!cwd) goto done;
  }
  run *r = calloc(1, sizeof *r);
  char *command = strdup(xd_json_get(body, "command")->valuestring);
  if (!r || !command) {
    free(r);
    free(command);
    free(cwd);
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto done;
  }
  r->m = m;
  r->command = command;
  r->cwd = cwd;
  r->res = res;
  xd_lines_init(&r->split, XD_MAX_LINE_BYTES, on_line, r);
  uv_timer_init(m->loop, &r->ping);
  uv_timer_init(m->loop, &r->timeout);
  r->ping.data = r->timeout.data = r;
  r->handles = 2;
  r->next = m->runs;
  if (m->runs) m->runs->prev = r;
  m->runs = r;
  m->pending++;
  xd_stream_open(res);
  xd_res_on_close(res, on_client_close, r);
  xd_event init = {.type = "init", .text = s->id, .text_len = strlen(s->id)};
  write_event(r, &init);
  xd_event ping = {.type = "ping", .text = "pong", .text_len = 4};
  write_event(r, &ping);
  if (s->run) {
    write_failure(r, "error running in session: session is busy");
    run_end(r);
    goto done;
  }
  s->run = r;
  r->s = s;
  const cJSON *timeout = xd_json_get(body, "timeout");
  r->wait_ns = xd_json_present(timeout) ? go_duration_ns(timeout->valuedouble) : 0;
  if (r->wait_ns <= 0) r->wait_ns = SESSION_MAX_WAIT_NS;
  r->start_ms = xd_wall_ms();
  uv_timer_start(&r->ping, on_ping, PING_INTERVAL_MS, PING_INTERVAL_MS);
  r->prep.data = r;
  r->preparing = 1;
  if (uv_queue_work(m->loop, &r->prep, prep_work, prep_done) != 0) {
    r->preparing = 0;
    write_failure(r, "error running in session. out of memory");
    run_end(r);
  }
done:
  cJSON_Delete(body);
  osb_buf_free(&msg);
}

/* ------------------------------------------------------------------------------------------------- routes */

int xd_sessions_route(void *module_, const xd_req *req, xd_res *res) {
  module *m = module_;
  const char *p = req->path;
  if (strcmp(p, "/session") == 0) {
    if (strcmp(req->method, "POST") != 0) return 0;
    create(m, req, res);
    return 1;
  }
  if (strncmp(p, "/session/", 9) != 0 || !p[9]) return 0;
  const char *seg = p + 9, *slash = strchr(seg, '/');
  int is_run = slash && strcmp(slash, "/run") == 0 && slash > seg;
  if (is_run ? strcmp(req->method, "POST") != 0 : (slash || strcmp(req->method, "DELETE") != 0)) return 0;
  char *id = xd_decode_segment(seg, is_run ? (size_t)(slash - seg) : strlen(seg));
  if (!id) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  if (is_run) {
    run_route(m, req, res, id);
  } else {
    session *s = find_session(m, id);
    if (s) {
      session_remove(s);
      xd_send_empty(res);
    } else {
      osb_buf b = {0};
      osb_buf_appendf(&b, "session %s not found", id);
      xd_send_error(res, 404, "CONTEXT_NOT_FOUND", b.data ? b.data : "session not found");
      osb_buf_free(&b);
    }
  }
  free(id);
  return 1;
}

int xd_sessions_interrupt(void *module_, const char *id) {
  module *m = module_;
  session *s = m && !m->closing ? find_session(m, id) : NULL;
  if (!s) return 0;
  session_remove(s);
  return 1;
}

static void on_sigchld_closed(uv_handle_t *h) {
  module *m = h->data;
  m->pending--;
  module_maybe_free(m);
}

void *xd_sessions_new(const xd_ctx *ctx) {
  module *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->loop = ctx->loop;
  m->workspace = strdup(ctx->workspace ? ctx->workspace : "/");
  m->tmpdir = tmp_dir();
  if (!m->workspace || !m->tmpdir || uv_signal_init(m->loop, &m->sigchld) != 0) {
    free(m->workspace);
    free(m->tmpdir);
    free(m);
    return NULL;
  }
  m->sigchld.data = m;
  uv_signal_start(&m->sigchld, on_sigchld, SIGCHLD);
  uv_unref((uv_handle_t *)&m->sigchld);
  m->pending = 1;
  return m;
}

void xd_sessions_close(void *module_) {
  module *m = module_;
  if (!m || m->closing) return;
  m->closing = 1;
  xd_fsjobs_close(&m->jobs);
  while (m->sessions) session_remove(m->sessions); /* kills the runs; a session without one is freed */
  /* the runs end now: nobody is told, nothing is reaped (execd exits) */
  for (run *r = m->runs, *next; r; r = next) {
    next = r->next;
    if (r->res) {
      xd_res_on_close(r->res, nothing, NULL);
      xd_stream_on_drain(r->res, nothing, NULL);
      r->res = NULL;
    }
    if (!r->ended && !r->preparing) run_end(r);
  }
  uv_close((uv_handle_t *)&m->sigchld, on_sigchld_closed);
}
