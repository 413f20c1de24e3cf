/* The lazy Node execd and the handoff of connections to it (see handoff.h). */
#include "handoff.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/buf.h"

extern char **environ;

#define MAX_TOKEN 65536u /* fits a pipe's buffer: written whole before Node starts */
#define MAX_RESEND 3

typedef struct item {
  struct item *next;
  int fd;      /* until `h` owns it */
  int is_unix;
  int tries;
  char *msg;
  size_t len;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  } h;
  uv_write_t w;
  int h_open;
  int acked; /* NODE_HANDLE_ACK came before the write callback */
} item;

typedef struct run run;

struct xd_node {
  xd_node_opts o;
  run *cur;
  item *qhead, *qtail;
};

/* one start of Node: its process, IPC channel and ready deadline */
struct run {
  xd_node *n; /* NULL once the xd_node is closed */
  uv_process_t proc;
  uv_pipe_t ipc;
  uv_timer_t timer;
  int handles;  /* open handles of this run */
  int ended;
  int ready;
  int pid;
  item *inflight;
  int writing;
  osb_buf rd;
};

static void send_next(run *r);

/* ------------------------------------------------------------ connections that cannot reach Node */

static void answer_unavailable(int fd, const char *why) {
  char body[300], msg[600];
  int bl = snprintf(body, sizeof body, "{\"code\":\"RUNTIME_ERROR\",\"message\":\"the Node execd is not available: %s\"}", why);
  int ml = snprintf(msg, sizeof msg,
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\n"
                    "Content-Length: %d\r\n\r\n%s",
                    bl, body);
  if (ml > 0) (void)!send(fd, msg, (size_t)ml, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void item_freed(uv_handle_t *h) {
  item *it = h->data;
  free(it->msg);
  free(it);
}

/* drops an item: its connection closes (after `why`, when given, as a 503) */
static void item_drop(item *it, const char *why) {
  if (it->h_open) {
    uv_os_fd_t fd;
    if (why && uv_fileno(&it->h.handle, &fd) == 0) answer_unavailable(fd, why);
    uv_close(&it->h.handle, item_freed);
    return;
  }
  if (why) answer_unavailable(it->fd, why);
  close(it->fd);
  free(it->msg);
  free(it);
}

static void queue_fail(xd_node *n, const char *why) {
  while (n->qhead) {
    item *it = n->qhead;
    n->qhead = it->next;
    item_drop(it, why);
  }
  n->qtail = NULL;
}

/* ------------------------------------------------------------ a run of Node */

static void run_handle_closed(uv_handle_t *h) {
  run *r = h->data;
  if (--r->handles > 0) return;
  osb_buf_free(&r->rd);
  free(r);
}

/* a connection whose handoff did not complete goes back to the front of the queue (at most MAX_RESEND times) */
static void give_back(xd_node *n, item *it) {
  if (!n || ++it->tries > MAX_RESEND) {
    item_drop(it, n ? "it did not take the connection" : "execd is shutting down");
    return;
  }
  it->acked = 0;
  it->next = n->qhead;
  n->qhead = it;
  if (!n->qtail) n->qtail = it;
}

static int spawn_run(xd_node *n);

/* This run can take no more connections (its channel broke, or Node exited): the connection it had not yet
 * acknowledged goes back to the queue, and a waiting queue gets a new Node, unless this one never became ready. */
static void run_broken(run *r) {
  xd_node *n = r->n;
  if (!n || n->cur != r) return;
  n->cur = NULL;
  item *it = r->inflight;
  r->inflight = NULL;
  if (it && !r->writing) give_back(n, it);
  else if (it) it->acked = 0; /* its write callback gives it back */
  if (!r->ready) queue_fail(n, "it exited before it was ready");
  else if (n->qhead && spawn_run(n) != 0) queue_fail(n, "it could not be started again");
}

/* closes the run's handles (it is freed after them) */
static void run_end(run *r) {
  if (r->ended) return;
  r->ended = 1;
  run_broken(r);
  if (r->inflight && !r->writing) item_drop(r->inflight, NULL);
  r->inflight = NULL;
  uv_timer_stop(&r->timer);
  uv_close((uv_handle_t *)&r->timer, run_handle_closed);
  uv_close((uv_handle_t *)&r->ipc, run_handle_closed);
  uv_close((uv_handle_t *)&r->proc, run_handle_closed);
}

static void node_exited(uv_process_t *p, int64_t status, int sig) {
  run *r = p->data;
  static const char again[] = "the next request that needs it starts it again";
  if (sig) fprintf(stderr, "execd: the Node execd (pid %d) was killed by signal %d; %s\n", r->pid, sig, again);
  else fprintf(stderr, "execd: the Node execd (pid %d) exited with status %lld; %s\n", r->pid, (long long)status, again);
  run_end(r);
}

static void on_ready_timeout(uv_timer_t *t) {
  run *r = t->data;
  fprintf(stderr, "execd: the Node execd (pid %d) was not ready within %u ms; killed\n", r->pid, XD_NODE_READY_MS);
  uv_process_kill(&r->proc, SIGKILL);
}

static void after_send(uv_write_t *w, int status) {
  item *it = w->data;
  run *owner = (run *)w->handle->data;
  owner->writing = 0;
  int mine = owner->inflight == it;
  if (it->acked) { /* Node has its own copy of the fd */
    if (mine) owner->inflight = NULL;
    item_drop(it, NULL);
    send_next(owner);
    return;
  }
  if (status < 0 || !mine) { /* the write failed or this run broke meanwhile */
    if (mine) owner->inflight = NULL;
    xd_node *n = owner->n;
    if (status < 0) run_broken(owner);
    give_back(n, it);
    if (n && n->cur) send_next(n->cur);
    else if (n && n->qhead && spawn_run(n) != 0) queue_fail(n, "it could not be started again");
    return;
  }
  /* now NODE_HANDLE_ACK (or NACK) */
}

static void send_item(run *r, item *it) {
  uv_buf_t buf = uv_buf_init(it->msg, (unsigned)it->len);
  it->w.data = it;
  r->inflight = it;
  r->writing = 1;
  if (uv_write2(&it->w, (uv_stream_t *)&r->ipc, &buf, 1, &it->h.stream, after_send) != 0) {
    r->writing = 0;
    r->inflight = NULL;
    item_drop(it, "the handoff to it failed");
    send_next(r);
  }
}

static void send_next(run *r) {
  xd_node *n = r->n;
  while (n && n->cur == r && !r->ended && r->ready && !r->inflight && n->qhead) {
    item *it = n->qhead;
    n->qhead = it->next;
    if (!n->qhead) n->qtail = NULL;
    it->next = NULL;
    if (it->h_open) { /* given back after a broken run: already a stream */
      send_item(r, it);
      continue;
    }
    /* the fd as a libuv stream, for uv_write2 to pass */
    int rc = it->is_unix ? uv_pipe_init(n->o.loop, &it->h.pipe, 0) : uv_tcp_init(n->o.loop, &it->h.tcp);
    if (rc != 0) {
      item_drop(it, "out of handles");
      continue;
    }
    it->h.handle.data = it;
    it->h_open = 1;
    rc = it->is_unix ? uv_pipe_open(&it->h.pipe, it->fd) : uv_tcp_open(&it->h.tcp, it->fd);
    if (rc != 0) {
      close(it->fd);
      item_drop(it, NULL);
      continue;
    }
    send_item(r, it);
  }
}

static void on_message(run *r, const char *line, size_t len) {
  cJSON *m = cJSON_ParseWithLength(line, len);
  if (!m) return;
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(m, "cmd");
  const cJSON *ready = cJSON_GetObjectItemCaseSensitive(m, "ready");
  if (cJSON_IsString(cmd) && strcmp(cmd->valuestring, "NODE_HANDLE_ACK") == 0) {
    item *it = r->inflight;
    if (it && r->writing) it->acked = 1; /* dropped by the write callback */
    else if (it) {
      r->inflight = NULL;
      item_drop(it, NULL); /* Node has its own copy of the fd now */
      send_next(r);
    }
  } else if (cJSON_IsString(cmd) && strcmp(cmd->valuestring, "NODE_HANDLE_NACK") == 0) {
    item *it = r->inflight;
    if (it && !r->writing) {
      if (++it->tries > MAX_RESEND) {
        r->inflight = NULL;
        item_drop(it, "it did not take the connection");
        send_next(r);
      } else send_item(r, it);
    }
  } else if (cJSON_IsTrue(ready) && !r->ready) {
    r->ready = 1;
    uv_timer_stop(&r->timer);
    send_next(r);
  }
  cJSON_Delete(m);
}

static void ipc_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  run *r = h->data;
  if (osb_buf_reserve_exact(&r->rd, 4096) != 0) {
    *buf = uv_buf_init(NULL, 0);
    return;
  }
  *buf = uv_buf_init(r->rd.data + r->rd.len, (unsigned)(r->rd.cap - r->rd.len - 1));
}

static void ipc_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  run *r = s->data;
  if (nread < 0) {
    uv_read_stop(s); /* Node closed its end: its exit follows; nothing more goes to it */
    run_broken(r);
    return;
  }
  r->rd.len += (size_t)nread;
  r->rd.data[r->rd.len] = 0;
  char *nl;
  while (!r->ended && (nl = memchr(r->rd.data, '\n', r->rd.len)) != NULL) {
    size_t ll = (size_t)(nl - r->rd.data);
    on_message(r, r->rd.data, ll);
    osb_buf_consume(&r->rd, ll + 1);
  }
  if (r->rd.len > 1024u * 1024u) osb_buf_reset(&r->rd); /* nothing Node sends us is that long */
}

static int spawn_run(xd_node *n) {
  run *r = calloc(1, sizeof *r);
  if (!r) return -1;
  r->n = n;
  int sv[2], tp[2] = {-1, -1};
  size_t tl = n->o.token ? strlen(n->o.token) : 0;
  if (tl > MAX_TOKEN || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    free(r);
    return -1;
  }
  if (tl && (pipe2(tp, O_CLOEXEC) != 0 || write(tp[1], n->o.token, tl) != (ssize_t)tl)) {
    if (tp[0] >= 0) close(tp[0]), close(tp[1]);
    close(sv[0]), close(sv[1]);
    free(r);
    return -1;
  }
  if (tl) close(tp[1]);
  /* argv: node, main.js and its arguments, --handoff [--access-token-fd 4] */
  size_t na = 0;
  while (n->o.args[na]) na++;
  char **argv = calloc(na + 6, sizeof *argv);
  size_t ne = 0;
  while (environ[ne]) ne++;
  char **env = calloc(ne + 3, sizeof *env);
  if (!argv || !env) {
    free(argv), free(env);
    if (tl) close(tp[0]);
    close(sv[0]), close(sv[1]);
    free(r);
    return -1;
  }
  size_t ai = 0;
  argv[ai++] = (char *)n->o.node;
  for (size_t i = 0; i < na; i++) argv[ai++] = (char *)n->o.args[i];
  argv[ai++] = "--handoff";
  if (tl) argv[ai++] = "--access-token-fd", argv[ai++] = "4";
  size_t ei = 0;
  for (size_t i = 0; i < ne; i++) {
    if (strncmp(environ[i], "NODE_CHANNEL_", 13) == 0 || strncmp(environ[i], "EXECD_ACCESS_TOKEN=", 19) == 0) continue;
    env[ei++] = environ[i];
  }
  env[ei++] = "NODE_CHANNEL_FD=3";
  env[ei++] = "NODE_CHANNEL_SERIALIZATION_MODE=json";
  uv_stdio_container_t stdio[5];
  stdio[0].flags = UV_IGNORE;
  stdio[1].flags = UV_INHERIT_FD;
  stdio[1].data.fd = 1;
  stdio[2].flags = UV_INHERIT_FD;
  stdio[2].data.fd = 2;
  stdio[3].flags = UV_INHERIT_FD;
  stdio[3].data.fd = sv[1];
  stdio[4].flags = UV_INHERIT_FD;
  stdio[4].data.fd = tp[0];
  uv_process_options_t po;
  memset(&po, 0, sizeof po);
  po.file = n->o.node;
  po.args = argv;
  po.env = env;
  po.exit_cb = node_exited;
  po.stdio = stdio;
  po.stdio_count = tl ? 5 : 4;
  r->proc.data = r;
  int rc = uv_spawn(n->o.loop, &r->proc, &po);
  free(argv);
  free(env);
  close(sv[1]);
  if (tl) close(tp[0]);
  if (rc != 0) {
    fprintf(stderr, "execd: the Node execd (%s) could not be started: %s\n", n->o.node, uv_strerror(rc));
    close(sv[0]);
    r->handles = 1;
    uv_close((uv_handle_t *)&r->proc, run_handle_closed);
    return -1;
  }
  r->pid = r->proc.pid;
  r->handles = 3;
  uv_pipe_init(n->o.loop, &r->ipc, 1);
  r->ipc.data = r;
  uv_timer_init(n->o.loop, &r->timer);
  r->timer.data = r;
  n->cur = r;
  if (uv_pipe_open(&r->ipc, sv[0]) != 0 || uv_read_start((uv_stream_t *)&r->ipc, ipc_alloc, ipc_read) != 0) {
    uv_process_kill(&r->proc, SIGKILL);
    return 0; /* its exit fails the queue */
  }
  uv_timer_start(&r->timer, on_ready_timeout, XD_NODE_READY_MS, 0);
  return 0;
}

/* ------------------------------------------------------------ the interface */

xd_node *xd_node_new(const xd_node_opts *o) {
  xd_node *n = calloc(1, sizeof *n);
  if (n) n->o = *o;
  return n;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int append_b64(osb_buf *b, const unsigned char *p, size_t n) {
  if (osb_buf_reserve_exact(b, (n + 2) / 3 * 4) != 0) return -1;
  char *o = b->data + b->len;
  size_t i = 0;
  for (; i + 2 < n; i += 3) {
    *o++ = B64[p[i] >> 2];
    *o++ = B64[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
    *o++ = B64[((p[i + 1] & 15) << 2) | (p[i + 2] >> 6)];
    *o++ = B64[p[i + 2] & 63];
  }
  if (i < n) {
    *o++ = B64[p[i] >> 2];
    if (i + 1 < n) {
      *o++ = B64[((p[i] & 3) << 4) | (p[i + 1] >> 4)];
      *o++ = B64[(p[i + 1] & 15) << 2];
    } else {
      *o++ = B64[(p[i] & 3) << 4];
      *o++ = '=';
    }
    *o++ = '=';
  }
  b->len = (size_t)(o - b->data);
  b->data[b->len] = 0;
  return 0;
}

void xd_node_give(void *node, int fd, int is_unix, const char *head, size_t len) {
  xd_node *n = node;
  item *it = calloc(1, sizeof *it);
  osb_buf m = {0};
  if (!it || osb_buf_append_str(&m, "{\"cmd\":\"NODE_HANDLE\",\"type\":\"net.Native\",\"msg\":{\"head\":\"") != 0 ||
      append_b64(&m, (const unsigned char *)head, len) != 0 || osb_buf_append_str(&m, "\"},\"key\":null}\n") != 0) {
    osb_buf_free(&m);
    free(it);
    answer_unavailable(fd, "out of memory");
    close(fd);
    return;
  }
  it->fd = fd;
  it->is_unix = is_unix;
  it->msg = osb_buf_steal(&m, &it->len);
  if (n->qtail) n->qtail->next = it;
  else n->qhead = it;
  n->qtail = it;
  if (!n->cur) {
    if (spawn_run(n) != 0) queue_fail(n, "it could not be started");
    return;
  }
  send_next(n->cur);
}

int xd_node_running(const xd_node *n) { return n->cur && n->cur->ready; }

int xd_node_pid(const xd_node *n) { return n->cur ? n->cur->pid : 0; }

void xd_node_close(xd_node *n) {
  queue_fail(n, "execd is shutting down");
  run *r = n->cur;
  if (r) {
    uv_process_kill(&r->proc, SIGTERM);
    r->n = NULL;
    run_end(r);
  }
  free(n);
}
