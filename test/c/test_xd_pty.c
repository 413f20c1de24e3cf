/* The PTY API of the C execd (src/execd/pty.c) through its real HTTP server (server.c) on loopback: a client thread
 * speaks HTTP and WebSocket over TCP (masked frames, as a browser or the `ws` library) while the main thread runs the
 * loop; the sessions run real bash processes. The expected frames are the Node execd's (lib/dev-server/execd/pty*.js)
 * and the real execd's (docs/opensandbox-protocol.md §6.5). */
#include "harness.h"
#include "xd_loopback.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "execd/server.h"
#include "execd/wsproto.h"
#include "execd/xd.h"

static char ws_dir[256];
static int port;
static uv_async_t done_async;

/* ---------------------------------------------------------------- HTTP */

/* One request on a fresh connection: the status, the body (malloc'd) in *out. */
static int request(const char *method, const char *path, const char *body, char **out) {
  *out = NULL;
  int fd = xd_dial(port, 10);
  if (fd < 0) return -1;
  char head[512];
  size_t bl = body ? strlen(body) : 0;
  int hl = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n",
                    method, path, bl);
  if (write(fd, head, (size_t)hl) != hl || (bl && write(fd, body, bl) != (ssize_t)bl)) {
    close(fd);
    return -1;
  }
  char buf[8192];
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
    if (n == sizeof buf - 1) break;
  }
  close(fd);
  buf[n] = '\0';
  int status = 0;
  if (sscanf(buf, "HTTP/1.1 %d", &status) != 1) return -1;
  const char *b = strstr(buf, "\r\n\r\n");
  *out = strdup(b ? b + 4 : "");
  return status;
}

/* POST /pty with body: the new session's id into id (37 bytes), or "" */
static void new_session(const char *body, char id[37]) {
  char *out;
  id[0] = 0;
  int s = request("POST", "/pty", body, &out);
  CHECK(s == 201);
  if (s == 201 && out && sscanf(out, "{\"session_id\":\"%36[0-9a-f-]\"}", id) != 1) id[0] = 0;
  CHECK(strlen(id) == 36 && id[14] == '4');
  free(out);
}

/* ---------------------------------------------------------------- WebSocket client */

typedef struct {
  int fd;
  int status;      /* of the handshake */
  char head[2048]; /* the answer's head */
  char body[512];  /* a refusal's body */
} wsc;

static const char KEY[] = "dGhlIHNhbXBsZSBub25jZQ==";

static int ws_open(wsc *c, const char *path) {
  memset(c, 0, sizeof *c);
  c->fd = xd_dial(port, 10);
  if (c->fd < 0) return -1;
  char req[512];
  int n = snprintf(req, sizeof req,
                   "GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n", path, KEY);
  if (write(c->fd, req, (size_t)n) != n) return -1;
  size_t len = 0;
  while (len < sizeof c->head - 1) { /* byte by byte: nothing past the head is consumed */
    if (read(c->fd, c->head + len, 1) != 1) return -1;
    len++;
    c->head[len] = 0;
    if (len >= 4 && memcmp(c->head + len - 4, "\r\n\r\n", 4) == 0) break;
  }
  if (sscanf(c->head, "HTTP/1.1 %d", &c->status) != 1) return -1;
  if (c->status != 101) {
    const char *cl = strstr(c->head, "Content-Length: ");
    size_t bl = cl ? strtoul(cl + 16, NULL, 10) : 0, got = 0;
    while (got < bl && got < sizeof c->body - 1) {
      ssize_t r = read(c->fd, c->body + got, bl - got);
      if (r <= 0) break;
      got += (size_t)r;
    }
  }
  return c->status;
}

static int read_full(int fd, unsigned char *b, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, b + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

/* The next server frame: opcode (-1 on EOF or timeout), payload (malloc'd, NUL-terminated) and its length. */
static int ws_frame(wsc *c, char **payload, size_t *len) {
  unsigned char h[2];
  *payload = NULL;
  *len = 0;
  if (read_full(c->fd, h, 2) != 0) return -1;
  if (h[1] & 0x80) return -2; /* a server frame must not be masked */
  uint64_t n = h[1] & 0x7f;
  if (n == 126 || n == 127) {
    unsigned char e[8];
    size_t el = n == 126 ? 2 : 8;
    if (read_full(c->fd, e, el) != 0) return -1;
    n = 0;
    for (size_t i = 0; i < el; i++) n = n << 8 | e[i];
  }
  *payload = malloc(n + 1);
  if (!*payload || read_full(c->fd, (unsigned char *)*payload, n) != 0) return -1;
  (*payload)[n] = 0;
  *len = n;
  return h[0] & 0x0f;
}

/* A masked client frame; mask 0: sent unmasked (a protocol error) */
static void ws_send(wsc *c, int opcode, const void *data, size_t n, int masked) {
  unsigned char h[14] = {(unsigned char)(0x80 | opcode)};
  size_t hl = 2;
  if (n < 126) h[1] = (unsigned char)n;
  else {
    h[1] = 126;
    h[2] = (unsigned char)(n >> 8);
    h[3] = (unsigned char)n;
    hl = 4;
  }
  unsigned char key[4] = {0x12, 0x34, 0x56, 0x78};
  unsigned char *p = malloc(n + 1);
  memcpy(p, data, n);
  if (masked) {
    h[1] |= 0x80;
    memcpy(h + hl, key, 4);
    hl += 4;
    for (size_t i = 0; i < n; i++) p[i] ^= key[i % 4];
  }
  ssize_t w = write(c->fd, h, hl);
  w = write(c->fd, p, n);
  (void)w;
  free(p);
}

/* Reads frames to the server's close: stdout (0x01) into out, the text frames joined by '|' into texts, the close
 * frame's code and reason; returns 1 when the server then closed TCP. */
typedef struct {
  char out[4096], texts[2048], replay[512];
  uint64_t replay_offset;
  int close_code;
  char reason[128];
} seen;

static int ws_until_close(wsc *c, seen *s) {
  memset(s, 0, sizeof *s);
  s->close_code = -1;
  for (;;) {
    char *p;
    size_t n;
    int op = ws_frame(c, &p, &n);
    if (op < 0) {
      printf("  (frames ended: %d, errno %d, out %s, texts %s)\n", op, errno, s->out, s->texts);
      free(p);
      return 0;
    }
    if (op == 2 && n > 0 && p[0] == 0x01) strncat(s->out, p + 1, sizeof s->out - strlen(s->out) - 1);
    else if (op == 2 && n >= 9 && (unsigned char)p[0] == 0x03) {
      for (int i = 0; i < 8; i++) s->replay_offset = s->replay_offset << 8 | (unsigned char)p[1 + i];
      strncat(s->replay, p + 9, sizeof s->replay - strlen(s->replay) - 1);
    } else if (op == 1) {
      if (s->texts[0]) strncat(s->texts, "|", sizeof s->texts - strlen(s->texts) - 1);
      strncat(s->texts, p, sizeof s->texts - strlen(s->texts) - 1);
    } else if (op == 8) {
      s->close_code = n >= 2 ? ((unsigned char)p[0] << 8 | (unsigned char)p[1]) : 1005;
      if (n > 2) snprintf(s->reason, sizeof s->reason, "%.*s", (int)(n - 2), p + 2);
      free(p);
      unsigned char ans[2] = {0x03, 0xe8};
      ws_send(c, 8, ans, 2, 1);
      char b;
      return read(c->fd, &b, 1) == 0;
    }
    free(p);
  }
}

/* ---------------------------------------------------------------- tests */

/* A new session of `body` attached in pipe mode by c, its connected frame read. */
static void attach_pipe(const char *body, char id[37], wsc *c) {
  char path[128], *p;
  size_t n;
  new_session(body, id);
  snprintf(path, sizeof path, "/pty/%s/ws?pty=0", id);
  CHECK(ws_open(c, path) == 101);
  CHECK(ws_frame(c, &p, &n) == 1 && p && strstr(p, "\"type\":\"connected\"") != NULL);
  free(p);
}


static void test_handshake_and_pipe_run(void) {
  char id[37], path[128], *out;
  new_session("{\"command\":\"echo hi; echo err >&2; exit 3\"}", id);
  snprintf(path, sizeof path, "/pty/%s", id);
  CHECK(request("GET", path, NULL, &out) == 200);
  char want[160];
  snprintf(want, sizeof want, "{\"session_id\":\"%s\",\"running\":false,\"output_offset\":0}", id);
  CHECK_STR(out, want);
  free(out);

  wsc c;
  snprintf(path, sizeof path, "/pty/%s/ws?pty=0", id);
  CHECK(ws_open(&c, path) == 101);
  CHECK(strstr(c.head, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n") != NULL); /* RFC 6455's sample */
  seen s;
  CHECK(ws_until_close(&c, &s) == 1);
  if (strcmp(s.out, "hi\n") != 0) printf("  texts: %s; close %d %s\n", s.texts, s.close_code, s.reason);
  CHECK_STR(s.out, "hi\n");
  snprintf(want, sizeof want, "{\"type\":\"connected\",\"session_id\":\"%s\",\"mode\":\"pipe\"}\n|{\"type\":\"exit\",\"exit_code\":3}\n", id);
  CHECK_STR(s.texts, want);
  CHECK(s.close_code == 1000);
  CHECK_STR(s.reason, "process exited");
  close(c.fd);

  /* connecting again runs the command again, after the replay of everything so far (stdout and stderr merged) */
  snprintf(path, sizeof path, "/pty/%s/ws?pty=0", id);
  CHECK(ws_open(&c, path) == 101);
  CHECK(ws_until_close(&c, &s) == 1);
  CHECK(s.replay_offset == 0);
  CHECK_STR(s.replay, "hi\nerr\n");
  CHECK_STR(s.out, "hi\n");
  close(c.fd);
  snprintf(path, sizeof path, "/pty/%s", id);
  CHECK(request("GET", path, NULL, &out) == 200);
  snprintf(want, sizeof want, "{\"session_id\":\"%s\",\"running\":false,\"output_offset\":14}", id);
  CHECK_STR(out, want);
  free(out);
  CHECK(request("DELETE", path, NULL, &out) == 200);
  CHECK_STR(out, "");
  free(out);
  CHECK(request("GET", path, NULL, &out) == 404);
  snprintf(want, sizeof want, "{\"code\":\"CONTEXT_NOT_FOUND\",\"message\":\"pty session %s not found\"}", id);
  CHECK_STR(out, want);
  free(out);
}

static void test_pty_mode_stdin_and_frames(void) {
  char id[37], path[128];
  new_session("{\"command\":\"tty; read l; echo got-$l; exit 4\"}", id);
  wsc c;
  snprintf(path, sizeof path, "/pty/%s/ws", id);
  CHECK(ws_open(&c, path) == 101);
  ws_send(&c, 1, "{\"type\":\"ping\"}", 15, 1);
  ws_send(&c, 1, "{\"type\":\"bogus\"}", 16, 1);
  ws_send(&c, 1, "{\"type\":\"resize\",\"cols\":0,\"rows\":5}", 35, 1);
  ws_send(&c, 2, "\x07x", 2, 1);
  ws_send(&c, 2, "\x00line\n", 6, 1);
  seen s;
  CHECK(ws_until_close(&c, &s) == 1);
  CHECK(strstr(s.out, "/dev/pts/") != NULL);
  CHECK(strstr(s.out, "got-line\r\n") != NULL);
  if (!strstr(s.out, "got-line\r\n")) /* seen once in a fresh-clone run under load, not reproduced since: what came */
    printf("    out [%s]\n    replay [%s]\n    texts [%s]\n", s.out, s.replay, s.texts);
  CHECK(strstr(s.texts, "\"mode\":\"pty\"") != NULL);
  CHECK(strstr(s.texts, "|{\"type\":\"pong\"}\n|") != NULL);
  CHECK(strstr(s.texts, "|{\"type\":\"error\",\"error\":\"unknown frame type \\\"bogus\\\"\",\"code\":\"INVALID_FRAME\"}\n|") != NULL);
  CHECK(strstr(s.texts, "resize frame needs positive integer \\\"cols\\\" and \\\"rows\\\"") != NULL);
  CHECK(strstr(s.texts, "unknown binary frame type 0x07") != NULL);
  CHECK(strstr(s.texts, "|{\"type\":\"exit\",\"exit_code\":4}\n") != NULL);
  CHECK(s.close_code == 1000);
  close(c.fd);
  char *out;
  snprintf(path, sizeof path, "/pty/%s", id);
  CHECK(request("DELETE", path, NULL, &out) == 200);
  free(out);
}

static void test_one_client_takeover_and_delete(void) {
  char id[37], path[128], *out;
  wsc a, b, d;
  attach_pipe("{\"command\":\"sleep 30\"}", id, &a);
  char *p;
  size_t n;
  snprintf(path, sizeof path, "/pty/%s/ws?pty=0", id);
  CHECK(ws_open(&b, path) == 409);
  char want[200];
  snprintf(want, sizeof want, "{\"code\":\"ALREADY_CONNECTED\",\"message\":\"another client is already connected to pty session %s\"}", id);
  CHECK_STR(b.body, want);
  CHECK(strstr(b.head, "Connection: close\r\n") != NULL);
  close(b.fd);
  snprintf(path, sizeof path, "/pty/%s/ws?pty=0&takeover=1", id);
  CHECK(ws_open(&d, path) == 101);
  seen s;
  ws_until_close(&a, &s);
  CHECK(s.close_code == 4001);
  CHECK_STR(s.reason, "TAKEN_OVER");
  close(a.fd);
  CHECK(ws_frame(&d, &p, &n) == 1);
  CHECK(p && strstr(p, "\"type\":\"connected\"") != NULL);
  free(p);
  snprintf(path, sizeof path, "/pty/%s", id);
  CHECK(request("DELETE", path, NULL, &out) == 200); /* SIGKILL to the group: the exit frame follows */
  free(out);
  CHECK(ws_until_close(&d, &s) == 1);
  CHECK_STR(s.texts, "{\"type\":\"exit\",\"exit_code\":-1}\n");
  close(d.fd);
  /* unknown session: 404 before the upgrade */
  CHECK(ws_open(&b, "/pty/00000000-0000-4000-8000-000000000000/ws") == 404);
  CHECK_STR(b.body, "{\"code\":\"CONTEXT_NOT_FOUND\",\"message\":\"pty session 00000000-0000-4000-8000-000000000000 not found\"}");
  close(b.fd);
}

static void test_protocol_error_and_client_close(void) {
  char id[37], path[128], *out;
  wsc c;
  attach_pipe("{}", id, &c);
  char *p;
  size_t n;
  snprintf(path, sizeof path, "/pty/%s/ws?pty=0", id);
  ws_send(&c, 2, "\x00x", 2, 0); /* unmasked: 1002 */
  CHECK(ws_frame(&c, &p, &n) == 8);
  CHECK(n == 2 && (unsigned char)p[0] == 0x03 && (unsigned char)p[1] == 0xea);
  free(p);
  close(c.fd);
  /* the client's close while bash runs: answered with its code and no reason, then FIN; bash keeps running */
  CHECK(ws_open(&c, path) == 101);
  CHECK(ws_frame(&c, &p, &n) == 1); /* connected (bash wrote nothing: no replay frame) */
  free(p);
  ws_send(&c, 8, "\x03\xe8" "bye", 5, 1);
  int op;
  while ((op = ws_frame(&c, &p, &n)) == 1 || op == 2) free(p);
  CHECK(op == 8 && n == 2);
  free(p);
  char b;
  CHECK(read(c.fd, &b, 1) == 0);
  close(c.fd);
  snprintf(path, sizeof path, "/pty/%s", id);
  CHECK(request("GET", path, NULL, &out) == 200);
  CHECK(out && strstr(out, "\"running\":true") != NULL);
  free(out);
  CHECK(request("DELETE", path, NULL, &out) == 200);
  free(out);
}

static void test_create_errors_and_start_failure(void) {
  char *out;
  CHECK(request("POST", "/pty", "{\"command\":", &out) == 400);
  CHECK_STR(out, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request: unexpected EOF\"}");
  free(out);
  CHECK(request("POST", "/pty", "{\"cwd\":5}", &out) == 400);
  CHECK_STR(out, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request: \\\"cwd\\\" must be a string\"}");
  free(out);
  CHECK(request("POST", "/pty", "[1]", &out) == 400);
  CHECK_STR(out, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request: expected a JSON object\"}");
  free(out);
  /* a cwd is made at once; one removed before the first connection: START_FAILED, close 1011 */
  char body[512], dir[300], id[37], path[128];
  snprintf(dir, sizeof dir, "%s/made/here", ws_dir);
  snprintf(body, sizeof body, "{\"cwd\":\"%s\"}", dir);
  new_session(body, id);
  struct stat st;
  CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
  CHECK(rmdir(dir) == 0);
  wsc c;
  snprintf(path, sizeof path, "/pty/%s/ws?pty=0", id);
  CHECK(ws_open(&c, path) == 101);
  seen s;
  ws_until_close(&c, &s);
  char want[400];
  snprintf(want, sizeof want, "{\"type\":\"error\",\"error\":\"working directory %s does not exist\",\"code\":\"START_FAILED\"}\n", dir);
  CHECK_STR(s.texts, want);
  CHECK(s.close_code == 1011);
  close(c.fd);
}

/* A process that does not read its stdin: once 8 MiB wait for it, execd stops reading the client (its memory stays
 * bounded; the client's writes block); DELETE ends it and the client still gets the exit frame. */
static void test_stdin_backpressure(void) {
  char id[37], path[128], *out;
  wsc c;
  attach_pipe("{\"command\":\"sleep 30\"}", id, &c);
  struct timeval tv = {1, 0};
  int sndbuf = 65536;
  setsockopt(c.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(c.fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  static unsigned char frame[14 + 65536];
  size_t len = 65535; /* 0x00 + 65,534 bytes */
  frame[0] = 0x82;
  frame[1] = 0x80 | 126;
  frame[2] = (unsigned char)(len >> 8);
  frame[3] = (unsigned char)len;
  memset(frame + 4, 0, 4); /* mask 0: the payload as it is */
  memset(frame + 8, 'x', len);
  frame[8] = 0x00;
  size_t sent = 0, total = 8 + len;
  int blocked = 0;
  for (int i = 0; i < 1000 && !blocked; i++) { /* up to 64 MiB */
    for (size_t off = 0; off < total;) {
      ssize_t w = write(c.fd, frame + off, total - off);
      if (w < 0) {
        blocked = errno == EAGAIN || errno == EWOULDBLOCK;
        break;
      }
      off += (size_t)w;
      sent += (size_t)w;
    }
  }
  CHECK(blocked);
  CHECK(sent < 32u * 1024u * 1024u);
  snprintf(path, sizeof path, "/pty/%s", id);
  CHECK(request("DELETE", path, NULL, &out) == 200);
  free(out);
  close(c.fd);
}

/* Forty sessions attached at once (their starts run on the thread pool, overlapping): each client gets its own
 * process's output live, then its exit frame; stdin sent before the process runs reaches it. */
static void test_concurrent_starts(void) {
  enum { N = 40 };
  wsc c[N];
  char id[N][37], path[128], body[128];
  for (int i = 0; i < N; i++) {
    snprintf(body, sizeof body, "{\"command\":\"read l; echo n-%d-$l\"}", i);
    new_session(body, id[i]);
  }
  for (int i = 0; i < N; i++) {
    snprintf(path, sizeof path, "/pty/%.36s/ws?pty=0", id[i]);
    CHECK(ws_open(&c[i], path) == 101);
    ws_send(&c[i], 2, "\x00in\n", 4, 1);
  }
  for (int i = 0; i < N; i++) {
    seen s;
    char want[64];
    CHECK(ws_until_close(&c[i], &s) == 1);
    snprintf(want, sizeof want, "n-%d-in\n", i);
    CHECK_STR(s.out, want);
    CHECK(strstr(s.texts, "{\"type\":\"exit\",\"exit_code\":0}\n") != NULL);
    CHECK(s.replay[0] == 0);
    close(c[i].fd);
  }
}

static void *client(void *arg) {
  (void)arg;
  sigset_t all; /* the loop thread takes SIGCHLD: no read here is interrupted by it (valgrind delivers it anywhere) */
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  RUN(test_handshake_and_pipe_run);
  RUN(test_pty_mode_stdin_and_frames);
  RUN(test_one_client_takeover_and_delete);
  RUN(test_protocol_error_and_client_close);
  RUN(test_create_errors_and_start_failure);
  RUN(test_stdin_backpressure);
  RUN(test_concurrent_starts);
  uv_async_send(&done_async);
  return NULL;
}

static xd_server *server;
static void *pty;

static void on_done(uv_async_t *a) {
  xd_server_close(server);
  xd_pty_close(pty);
  uv_close((uv_handle_t *)a, NULL);
}

int main(void) {
  if (!t_tempdir(ws_dir, sizeof ws_dir, "pty")) return printf("0 passed, 1 failed\n"), 1;
  uv_loop_t loop;
  uv_loop_init(&loop);
  xd_ctx ctx = {.loop = &loop, .workspace = ws_dir};
  pty = xd_pty_new(&ctx);
  xd_route route = {pty, xd_pty_route};
  server = pty ? xd_listen_one(&loop, &route, 1, &port) : NULL;
  if (!server) return printf("cannot start\n0 passed, 1 failed\n"), 1;
  uv_async_init(&loop, &done_async, on_done);
  pthread_t t;
  pthread_create(&t, NULL, client, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  pthread_join(t, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&loop) == 0);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", ws_dir);
  if (system(cmd) != 0) printf("could not remove %s\n", ws_dir);
  return t_summary();
}
