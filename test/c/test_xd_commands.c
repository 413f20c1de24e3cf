/* The commands API of the C execd (src/execd/commands.c) through its real HTTP server (server.c) on loopback, with
 * real processes: a client thread sends each request over TCP while the main thread runs the loop. Checks the event
 * streams (lines, exit codes, signals), background status and logs, DELETE, timeout, a client that reads slowly
 * (backpressure: every line arrives, in order) and one that goes away, and that closing the module kills what still
 * runs and frees everything (valgrind and ASan see the whole lifecycle). */
#include "harness.h"
#include "xd_loopback.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "execd/server.h"
#include "execd/xd.h"

static char ws[256];
static int port;


static int send_request(const char *method, const char *target, const char *body) {
  return xd_send_request(port, 20, method, target, body);
}

static char *call(const char *method, const char *target, const char *body) {
  int fd = send_request(method, target, body);
  char *a = fd < 0 ? strdup("") : xd_read_all(fd, 0);
  if (!strstr(a, "\r\n\r\n")) printf("  %s %s: no answer (%d, %s): [%s]\n", method, target, fd, strerror(errno), a);
  return a;
}

/* The 32-hex id of the init event of a stream answer, copied to id[33]. */
static void init_id(const char *answer, char id[33]) {
  const char *p = strstr(answer, "{\"type\":\"init\",\"text\":\"");
  id[0] = 0;
  if (p && strlen(p) > 55) {
    memcpy(id, p + 23, 32);
    id[32] = 0;
  }
}

/* Reads until `until` arrived (the headers may come in a read of their own); the init event's id to id[33]. */
static void read_init(int fd, char id[33], const char *until) {
  char head[8192];
  size_t n = 0;
  id[0] = 0;
  while (n < sizeof head - 1) {
    ssize_t r = read(fd, head + n, sizeof head - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
    head[n] = 0;
    init_id(head, id);
    if (strstr(head, until)) break;
  }
}

static size_t count(const char *s, const char *what) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
  return n;
}

static void test_foreground(void) {
  char *a = call("POST", "/command", "{\"command\":\"echo hi; echo err >&2; printf 'a\\\\r\\\\nb'; exit 3\"}");
  CHECK(strstr(a, "HTTP/1.1 200 OK\r\n") == a);
  CHECK(strstr(a, "{\"type\":\"ping\",\"text\":\"pong\""));
  CHECK(strstr(a, "{\"type\":\"stdout\",\"text\":\"hi\""));
  CHECK(strstr(a, "{\"type\":\"stderr\",\"text\":\"err\""));
  CHECK(strstr(a, "{\"type\":\"stdout\",\"text\":\"a\""));
  CHECK(strstr(a, "{\"type\":\"stdout\",\"text\":\"b\""));
  CHECK(strstr(a, "\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"3\",\"traceback\":[\"exit status 3\"]}}"));
  CHECK(strstr(a, "\r\n0\r\n\r\n")); /* the terminating chunk */
  free(a);
  a = call("POST", "/command", "{\"command\":\"pwd; echo $FOO\",\"envs\":{\"FOO\":1.5}}");
  char want[400];
  snprintf(want, sizeof want, "{\"type\":\"stdout\",\"text\":\"%s\"", ws);
  CHECK(strstr(a, want));
  CHECK(strstr(a, "{\"type\":\"stdout\",\"text\":\"1.5\""));
  CHECK(strstr(a, "{\"type\":\"execution_complete\""));
  free(a);
  a = call("POST", "/command", "{\"command\":\"\"}");
  CHECK(strstr(a, "HTTP/1.1 400 "));
  CHECK(strstr(a, "failed on the 'required' tag\"}"));
  free(a);
}

static void test_background_status_logs(void) {
  char *a = call("POST", "/command", "{\"command\":\"echo one; echo two >&2; exit 4\",\"background\":true}");
  char id[33], target[128];
  init_id(a, id);
  CHECK(strlen(id) == 32);
  CHECK(strstr(a, "{\"type\":\"execution_complete\""));
  if (strlen(id) != 32) printf("  answer: %s\n", a);
  free(a);
  snprintf(target, sizeof target, "/command/status/%s", id);
  for (int i = 0; i < 100; i++) { /* until it finished (deadline 5 s) */
    a = call("GET", target, NULL);
    int done = strstr(a, "\"running\":false") != NULL;
    if (done) {
      CHECK(strstr(a, "\"exit_code\":4,\"error\":\"exit status 4\""));
      free(a);
      break;
    }
    free(a);
    CHECK(i < 99);
    usleep(50000);
  }
  snprintf(target, sizeof target, "/command/%s/logs?cursor=2", id);
  a = call("GET", target, NULL);
  CHECK(strstr(a, "Execd-Commands-Tail-Cursor: 8\r\n"));
  CHECK(strstr(a, "\r\n\r\ne\ntwo\n"));
  free(a);
  a = call("GET", "/command/status/nope", NULL);
  CHECK(strstr(a, "HTTP/1.1 404 ") && strstr(a, "command not found: nope"));
  free(a);
}

static void test_delete_and_timeout(void) {
  int fd = send_request("POST", "/command", "{\"command\":\"echo start; sleep 30\"}");
  char id[33], target[128];
  read_init(fd, id, "\"text\":\"start\""); /* the shell runs */
  CHECK(strlen(id) == 32);
  snprintf(target, sizeof target, "/command?id=%s", id);
  char *d = call("DELETE", target, NULL);
  CHECK(strstr(d, "HTTP/1.1 200 OK\r\n") == d);
  free(d);
  char *rest = xd_read_all(fd, 0);
  CHECK(strstr(rest, "\"traceback\":[\"signal: terminated\"]"));
  if (!strstr(rest, "signal: terminated")) printf("  stream: %s\n", rest);
  free(rest);
  d = call("DELETE", target, NULL);
  CHECK(strstr(d, "HTTP/1.1 500 ") && strstr(d, "is not running"));
  free(d);
  char *a = call("POST", "/command", "{\"command\":\"echo start; sleep 5\",\"timeout\":300}");
  CHECK(strstr(a, "\"traceback\":[\"signal: killed\"]"));
  free(a);
}

static void test_slow_reader_gets_every_line(void) {
  int fd = send_request("POST", "/command", "{\"command\":\"seq 1 60000\"}");
  char *a = xd_read_all(fd, 256 * 1024);
  CHECK(count(a, "{\"type\":\"stdout\"") == 60000);
  CHECK(strstr(a, "{\"type\":\"stdout\",\"text\":\"60000\""));
  CHECK(strstr(a, "{\"type\":\"execution_complete\""));
  const char *p59 = strstr(a, "\"text\":\"59999\""), *p60 = strstr(a, "\"text\":\"60000\"");
  CHECK(p59 && p60 && p59 < p60);
  free(a);
}

static void test_client_leaves(void) {
  /* the command goes on without its client; its output is read and dropped */
  int fd = send_request("POST", "/command", "{\"command\":\"yes | head -c 20000000; sleep 30\"}");
  char id[33], target[128];
  read_init(fd, id, "\"type\":\"ping\"");
  CHECK(strlen(id) == 32);
  close(fd);
  snprintf(target, sizeof target, "/command/status/%s", id);
  usleep(300000);
  char *a = call("GET", target, NULL);
  CHECK(strstr(a, "\"running\":true"));
  free(a);
  /* left running: closing the module at the end must kill it */
}

static void client(void) {
  sigset_t all; /* signals (SIGCHLD of the commands) are the loop thread's: no EINTR in this thread's reads */
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  RUN(test_foreground);
  RUN(test_background_status_logs);
  RUN(test_delete_and_timeout);
  RUN(test_slow_reader_gets_every_line);
  RUN(test_client_leaves);
  char *a = call("POST", "/command", "{\"command\":\"sleep 30\",\"background\":true}");
  free(a);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  xd_ctx base = {0};
  base.command_tail_ms = 50;
  return xd_module_test_with("xd-commands", ws, sizeof ws, &port, &base, xd_commands_new, xd_commands_route,
                             xd_commands_close, client);
}
