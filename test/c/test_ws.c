/* Tests of src/core/ws.c (the lws-thread WebSocket client) against a real libwebsockets server running in the
 * test on 127.0.0.1 (its own context and thread): handshake headers, text/binary round trips, a 1 MiB message
 * reassembled from fragments, the peer's close code and reason, a refused upgrade, a refused connection,
 * osb_ws_close() silencing callbacks, many concurrent connections, threads sending at once, and stop with
 * connections still open.
 * Run under ASan/UBSan and valgrind by the Makefile: any leak fails the run. */
#include "core/ws.h"

#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static int failures, passes;
#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (cond) {                                                  \
      passes++;                                                  \
    } else {                                                     \
      failures++;                                                \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);       \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
    }                                                            \
  } while (0)

/* ---------------------------------------------------------------- the peer: an lws echo server */

#define BIG (1024 * 1024)
typedef struct {
  unsigned char *buf; /* LWS_PRE + payload */
  size_t n;
  int binary;
  int close_code;     /* != 0: close with this code after sending nothing */
  int notes;          /* "n" messages received (counted, not echoed) */
  char token[64];
} srv_conn;

static struct lws_context *sctx;
static int sport;
static volatile int sstop;
static uv_thread_t sthread;

static int srv_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
  srv_conn *sc = user;
  switch (reason) {
  case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
    char uri[64] = "";
    lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
    return strcmp(uri, "/reject") == 0 ? 1 : 0;
  }
  case LWS_CALLBACK_ESTABLISHED:
    memset(sc, 0, sizeof *sc);
    lws_hdr_custom_copy(wsi, sc->token, sizeof sc->token, "x-test-token:", 13);
    return 0;
  case LWS_CALLBACK_RECEIVE:
    if (!lws_is_final_fragment(wsi)) return 0; /* the client's messages are small */
    if (len == 1 && *(const char *)in == 'n') {
      sc->notes++;
      return 0;
    }
    free(sc->buf);
    sc->buf = NULL;
    if (len == 5 && !memcmp(in, "close", 5)) {
      sc->close_code = 4001;
    } else if (len == 3 && !memcmp(in, "big", 3)) {
      sc->buf = malloc(LWS_PRE + BIG);
      for (size_t i = 0; i < BIG; i++) sc->buf[LWS_PRE + i] = (unsigned char)(i * 7);
      sc->n = BIG;
      sc->binary = 1;
    } else if (len == 5 && !memcmp(in, "notes", 5)) {
      sc->buf = malloc(LWS_PRE + 16);
      sc->n = (size_t)snprintf((char *)sc->buf + LWS_PRE, 16, "%d", sc->notes);
      sc->binary = 0;
    } else if (len == 5 && !memcmp(in, "token", 5)) {
      size_t n = strlen(sc->token);
      sc->buf = malloc(LWS_PRE + n + 1);
      memcpy(sc->buf + LWS_PRE, sc->token, n);
      sc->n = n;
      sc->binary = 0;
    } else {
      sc->buf = malloc(LWS_PRE + len + 1);
      memcpy(sc->buf + LWS_PRE, in, len);
      sc->n = len;
      sc->binary = lws_frame_is_binary(wsi);
    }
    lws_callback_on_writable(wsi);
    return 0;
  case LWS_CALLBACK_SERVER_WRITEABLE:
    if (sc->close_code) {
      lws_close_reason(wsi, (enum lws_close_status)sc->close_code, (unsigned char *)"TAKEN_OVER", 10);
      return -1;
    }
    if (sc->buf) {
      int rc = lws_write(wsi, sc->buf + LWS_PRE, sc->n, sc->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT);
      free(sc->buf);
      sc->buf = NULL;
      if (rc < 0) return -1;
    }
    return 0;
  case LWS_CALLBACK_CLOSED:
    free(sc->buf);
    sc->buf = NULL;
    return 0;
  default:
    return 0;
  }
}

static const struct lws_protocols srv_protocols[] = {
  {"echo", srv_cb, sizeof(srv_conn), 4096, 0, NULL, 0},
  {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void srv_loop(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&sstop, __ATOMIC_ACQUIRE)) lws_service(sctx, 0);
}

static void srv_start(void) {
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.port = 0;
  info.iface = "127.0.0.1";
  info.protocols = srv_protocols;
  info.gid = -1;
  info.uid = -1;
  sctx = lws_create_context(&info);
  if (!sctx) {
    fprintf(stderr, "cannot start the test server\n");
    exit(2);
  }
  sport = lws_get_vhost_listen_port(lws_get_vhost_by_name(sctx, "default"));
  uv_thread_create(&sthread, srv_loop, NULL);
}

static void srv_stop(void) {
  __atomic_store_n(&sstop, 1, __ATOMIC_RELEASE);
  lws_cancel_service(sctx);
  uv_thread_join(&sthread);
  lws_context_destroy(sctx);
}

/* A raw TCP peer that refuses one upgrade with a 409 (lws' server cannot answer an upgrade with an HTTP error). */
static int raw_fd, raw_port;
static void raw_serve(void *arg) {
  (void)arg;
  int fd = accept(raw_fd, NULL, NULL);
  if (fd < 0) return;
  char buf[2048];
  ssize_t got = 0, n;
  while (got < (ssize_t)sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - (size_t)got)) > 0) {
    got += n;
    buf[got] = 0;
    if (strstr(buf, "\r\n\r\n")) break;
  }
  const char *resp = "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 28\r\n"
                     "Connection: close\r\n\r\n{\"code\":\"ALREADY_CONNECTED\"}";
  ssize_t w = write(fd, resp, strlen(resp));
  (void)w;
  close(fd);
}
static void raw_start(uv_thread_t *t) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  raw_fd = socket(AF_INET, SOCK_STREAM, 0);
  socklen_t al = sizeof a;
  if (raw_fd < 0 || bind(raw_fd, (struct sockaddr *)&a, sizeof a) || listen(raw_fd, 1) ||
      getsockname(raw_fd, (struct sockaddr *)&a, &al)) {
    perror("raw peer");
    exit(2);
  }
  raw_port = ntohs(a.sin_port);
  uv_thread_create(t, raw_serve, NULL);
}

/* ---------------------------------------------------------------- a recording client */

typedef struct {
  uv_mutex_t mu;
  uv_cond_t cv;
  int opened, closed, code, http_status, messages;
  char reason[160];
  char last[256];
  size_t last_len;
  int last_binary;
  int big_ok;
} rec;

static void rec_init(rec *r) {
  memset(r, 0, sizeof *r);
  uv_mutex_init(&r->mu);
  uv_cond_init(&r->cv);
}
static void rec_free(rec *r) {
  uv_mutex_destroy(&r->mu);
  uv_cond_destroy(&r->cv);
}

static void on_open(void *ud) {
  rec *r = ud;
  uv_mutex_lock(&r->mu);
  r->opened = 1;
  uv_cond_broadcast(&r->cv);
  uv_mutex_unlock(&r->mu);
}
static void on_message(void *ud, int binary, const char *p, size_t n) {
  rec *r = ud;
  uv_mutex_lock(&r->mu);
  r->messages++;
  r->last_binary = binary;
  r->last_len = n;
  memcpy(r->last, p, n < sizeof r->last ? n : sizeof r->last);
  if (n == BIG) {
    int ok = 1;
    for (size_t i = 0; i < BIG && ok; i++) ok = (unsigned char)p[i] == (unsigned char)(i * 7);
    r->big_ok = ok;
  }
  uv_cond_broadcast(&r->cv);
  uv_mutex_unlock(&r->mu);
}
static void on_close(void *ud, int code, const char *reason, int http_status) {
  rec *r = ud;
  uv_mutex_lock(&r->mu);
  r->closed++;
  r->code = code;
  r->http_status = http_status;
  snprintf(r->reason, sizeof r->reason, "%s", reason);
  uv_cond_broadcast(&r->cv);
  uv_mutex_unlock(&r->mu);
}
static const osb_ws_callbacks CB = {on_open, on_message, on_close};

/* Waits (deadline 5 s) until *field >= want. */
static int wait_for(rec *r, int *field, int want) {
  uint64_t deadline = uv_hrtime() + 20000000000ull; /* generous: valgrind on a loaded 2-core machine is slow */
  uv_mutex_lock(&r->mu);
  while (*field < want) {
    uint64_t now = uv_hrtime();
    if (now >= deadline) break;
    uv_cond_timedwait(&r->cv, &r->mu, deadline - now);
  }
  int ok = *field >= want;
  uv_mutex_unlock(&r->mu);
  return ok;
}

static char url[128];

static void test_round_trip(osb_ws *w) {
  rec r;
  rec_init(&r);
  const char *hdrs[] = {"X-Test-Token", "s3cret value"};
  char err[128] = "";
  osb_ws_conn *c = osb_ws_connect(w, url, NULL, hdrs, 1, &CB, &r, err, sizeof err);
  CHECK(c != NULL, "connect: %s", err);
  CHECK(wait_for(&r, &r.opened, 1), "opened");
  CHECK(osb_ws_send(c, 0, "token", 5) == 0, "send");
  CHECK(wait_for(&r, &r.messages, 1), "token answer");
  CHECK(r.last_len == 12 && !memcmp(r.last, "s3cret value", 12) && !r.last_binary, "header arrived: %.*s",
        (int)r.last_len, r.last);
  const char bin[] = {0, 1, 2, (char)0xff, 0};
  CHECK(osb_ws_send(c, 1, bin, sizeof bin) == 0, "send binary");
  CHECK(wait_for(&r, &r.messages, 2), "binary echo");
  CHECK(r.last_len == sizeof bin && !memcmp(r.last, bin, sizeof bin) && r.last_binary, "binary echo exact");
  CHECK(osb_ws_send(c, 0, "big", 3) == 0, "send big");
  CHECK(wait_for(&r, &r.messages, 3), "big message");
  CHECK(r.last_len == BIG && r.big_ok && r.last_binary, "1 MiB message reassembled (len %zu)", r.last_len);
  CHECK(osb_ws_send(c, 0, "close", 5) == 0, "send close");
  CHECK(wait_for(&r, &r.closed, 1), "closed by peer");
  CHECK(r.code == 4001 && !strcmp(r.reason, "TAKEN_OVER"), "peer close code %d reason %s", r.code, r.reason);
  CHECK(osb_ws_send(c, 0, "x", 1) == -1, "send after close fails");
  osb_ws_conn_release(c);
  CHECK(r.closed == 1, "on_close exactly once (%d)", r.closed);
  rec_free(&r);
}

static void test_refused(osb_ws *w) {
  rec r;
  rec_init(&r);
  char err[128] = "", bad[160];
  uv_thread_t t;
  raw_start(&t);
  snprintf(bad, sizeof bad, "ws://127.0.0.1:%d/pty/x/ws", raw_port);
  osb_ws_conn *c = osb_ws_connect(w, bad, NULL, NULL, 0, &CB, &r, err, sizeof err);
  CHECK(c != NULL, "connect: %s", err);
  CHECK(wait_for(&r, &r.closed, 1), "refused upgrade reported");
  CHECK(r.opened == 0 && r.http_status == 409, "refused upgrade: status %d reason %s", r.http_status, r.reason);
  osb_ws_conn_release(c);
  rec_free(&r);
  uv_thread_join(&t);
  close(raw_fd);

  rec_init(&r);
  /* a port nobody listens on: the server's port + 1 is not guaranteed free, so use port 1 (privileged, unused) */
  c = osb_ws_connect(w, "ws://127.0.0.1:1/x", NULL, NULL, 0, &CB, &r, err, sizeof err);
  CHECK(c != NULL, "connect: %s", err);
  CHECK(wait_for(&r, &r.closed, 1), "connection refused reported");
  CHECK(r.opened == 0 && r.http_status == 0 && r.code == 0 && strstr(r.reason, "failed"), "refused: %s", r.reason);
  osb_ws_conn_release(c);
  rec_free(&r);

  CHECK(osb_ws_connect(w, "ftp://x/", NULL, NULL, 0, &CB, &r, err, sizeof err) == NULL && strstr(err, "ws://"), "bad scheme");
  CHECK(osb_ws_connect(w, "ws://host:99999/", NULL, NULL, 0, &CB, &r, err, sizeof err) == NULL && strstr(err, "port"), "bad port");
  CHECK(osb_ws_connect(w, "ws:///x", NULL, NULL, 0, &CB, &r, err, sizeof err) == NULL && strstr(err, "host"), "no host");
}

static void test_close_silences(osb_ws *w) {
  rec r;
  rec_init(&r);
  char err[128] = "";
  osb_ws_conn *c = osb_ws_connect(w, url, NULL, NULL, 0, &CB, &r, err, sizeof err);
  CHECK(wait_for(&r, &r.opened, 1), "opened");
  osb_ws_close(c);
  osb_ws_close(c); /* idempotent */
  osb_ws_stats st;
  /* poll with a sleep: a busy loop starves the WebSocket thread under valgrind, which runs one thread at a time */
  uint64_t deadline = uv_hrtime() + 20000000000ull;
  for (;;) {
    osb_ws_get_stats(w, &st);
    if (st.connections == 0 || uv_hrtime() >= deadline) break;
    uv_sleep(5);
  }
  CHECK(st.connections == 0, "connection gone after close (%ld)", st.connections);
  CHECK(r.closed == 0, "no callback after osb_ws_close");
  osb_ws_conn_release(c);
  rec_free(&r);
}

static void test_many(osb_ws *w) {
  enum { N = 100 };
  static rec rs[N];
  osb_ws_conn *cs[N];
  char err[128] = "";
  for (int i = 0; i < N; i++) {
    rec_init(&rs[i]);
    cs[i] = osb_ws_connect(w, url, NULL, NULL, 0, &CB, &rs[i], err, sizeof err);
  }
  for (int i = 0; i < N; i++) {
    char msg[16];
    int n = snprintf(msg, sizeof msg, "m%d", i);
    osb_ws_send(cs[i], 0, msg, (size_t)n); /* queued before open: sent once connected */
  }
  int ok = 0;
  for (int i = 0; i < N; i++) {
    char want[16];
    int n = snprintf(want, sizeof want, "m%d", i);
    if (wait_for(&rs[i], &rs[i].messages, 1) && rs[i].last_len == (size_t)n && !memcmp(rs[i].last, want, (size_t)n)) ok++;
  }
  CHECK(ok == N, "%d of %d concurrent connections echoed", ok, N);
  osb_ws_stats st;
  osb_ws_get_stats(w, &st);
  CHECK(st.connections == N && st.threads == 1, "stats %ld connections %ld threads", st.connections, st.threads);
  for (int i = 0; i < N; i++) osb_ws_conn_release(cs[i]);
  for (int i = 0; i < N; i++) rec_free(&rs[i]);
}

/* Threads sending and pausing on open connections while the WebSocket thread drains its work list: every
 * message is sent exactly once (regression: the drain walked the list outside the lock, so a connection scheduled
 * again meanwhile rewrote its link and the walk skipped or repeated connections; TSan reported the race). */
enum { SENDERS = 8, NOTES = 300 };
static osb_ws_conn *sender_conns[SENDERS];
static void sender(void *arg) {
  osb_ws_conn *c = sender_conns[(size_t)arg];
  for (int i = 0; i < NOTES; i++) {
    osb_ws_send(c, 0, "n", 1);
    if (i % 7 == 0) osb_ws_pause(c, (i / 7) % 2);
  }
  osb_ws_pause(c, 0);
  osb_ws_send(c, 0, "notes", 5);
}

static void test_concurrent_senders(osb_ws *w) {
  static rec rs[SENDERS];
  uv_thread_t ts[SENDERS];
  char err[128] = "";
  int opened = 0;
  for (int i = 0; i < SENDERS; i++) {
    rec_init(&rs[i]);
    sender_conns[i] = osb_ws_connect(w, url, NULL, NULL, 0, &CB, &rs[i], err, sizeof err);
    if (sender_conns[i] && wait_for(&rs[i], &rs[i].opened, 1)) opened++;
  }
  CHECK(opened == SENDERS, "%d of %d opened", opened, SENDERS);
  for (size_t i = 0; i < SENDERS; i++) uv_thread_create(&ts[i], sender, (void *)i);
  for (int i = 0; i < SENDERS; i++) uv_thread_join(&ts[i]);
  char want[16];
  int wn = snprintf(want, sizeof want, "%d", NOTES), ok = 0;
  for (int i = 0; i < SENDERS; i++) {
    if (wait_for(&rs[i], &rs[i].messages, 1) && rs[i].messages == 1 && rs[i].last_len == (size_t)wn &&
        !memcmp(rs[i].last, want, (size_t)wn))
      ok++;
    else
      fprintf(stderr, "connection %d: %d answers, last %.*s\n", i, rs[i].messages, (int)rs[i].last_len, rs[i].last);
  }
  CHECK(ok == SENDERS, "%d of %d connections: the peer got exactly %d messages", ok, SENDERS, NOTES);
  for (int i = 0; i < SENDERS; i++) osb_ws_conn_release(sender_conns[i]);
  for (int i = 0; i < SENDERS; i++) rec_free(&rs[i]);
}

int main(void) {
  lws_set_log_level(LLL_ERR, NULL);
  srv_start();
  snprintf(url, sizeof url, "ws://127.0.0.1:%d/ws?x=1", sport);
  char err[128] = "";
  osb_ws *w = osb_ws_start(err, sizeof err);
  if (!w) {
    fprintf(stderr, "osb_ws_start: %s\n", err);
    return 2;
  }
  test_round_trip(w);
  test_refused(w);
  test_close_silences(w);
  test_many(w);
  test_concurrent_senders(w);

  /* stop with a connection still open (its handle released after stop) */
  rec r;
  rec_init(&r);
  osb_ws_conn *c = osb_ws_connect(w, url, NULL, NULL, 0, &CB, &r, err, sizeof err);
  CHECK(wait_for(&r, &r.opened, 1), "opened before stop");
  osb_ws_stop(w);
  CHECK(r.closed == 0, "stop does not call back");
  CHECK(osb_ws_send(c, 0, "x", 1) == -1, "send after stop fails");
  osb_ws_conn_release(c);
  rec_free(&r);

  srv_stop();
  printf("%d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
