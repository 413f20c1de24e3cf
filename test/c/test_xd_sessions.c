/* The bash sessions API of the C execd (src/execd/sessions.c) through its real HTTP server (server.c) on loopback,
 * with real bash runs, next to the commands module (commands.c) for DELETE /command?id= of a session: a client
 * thread sends each request over TCP while the main thread runs the loop. Checks the answers byte for byte (timestamps,
 * execution times, the session id and the workspace normalised; each chunk shown between |): the runs of the real
 * execd's transcript 08 (state kept, stderr merged, exit code, cwd override, timeout), busy, the request errors,
 * DELETE (session files removed), DELETE /command?id=, a client that leaves (its run cancelled), a slow reader
 * (backpressure: every line arrives) and that closing the module kills what still runs and frees everything. */
#include "harness.h"
#include "xd_loopback.h"

#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "execd/events.h"
#include "execd/server.h"
#include "execd/xd.h"

static char ws[256];
static int port;
static void *sessions_mod;

static int send_request(const char *method, const char *target, const char *body) {
  return xd_send_request(port, 20, method, target, body);
}

/* Replaces every `from` in s (malloc'd) by `to`; returns the new string, s freed. */
static char *replace(char *s, const char *from, const char *to) {
  if (!*from) return s;
  size_t fl = strlen(from), tl = strlen(to), n = 0;
  for (const char *p = s; (p = strstr(p, from)) != NULL; p += fl) n++;
  char *out = malloc(strlen(s) + n * (tl > fl ? tl - fl : 0) + 1), *o = out;
  const char *p = s, *hit;
  while ((hit = strstr(p, from)) != NULL) {
    memcpy(o, p, (size_t)(hit - p));
    o += hit - p;
    memcpy(o, to, tl);
    o += tl;
    p = hit + fl;
  }
  strcpy(o, p);
  free(s);
  return out;
}

/* The digits after each `key` replaced by `as`. */
static char *mask_number(char *s, const char *key, const char *as) {
  size_t kl = strlen(key), al = strlen(as);
  char *out = malloc(strlen(s) + 64 * al + 1), *o = out; /* numbers are shorter than what replaces them at most 64 times */
  size_t budget = 64;
  const char *p = s, *hit;
  while ((hit = strstr(p, key)) != NULL && budget-- > 0) {
    memcpy(o, p, (size_t)(hit - p) + kl);
    o += hit - p + kl;
    p = hit + kl;
    while (*p >= '0' && *p <= '9') p++;
    memcpy(o, as, al);
    o += al;
  }
  strcpy(o, p);
  free(s);
  return out;
}

/* An answer normalised: the head without its Date line, then (chunked) each chunk's data followed by "|" (the
 * terminating chunk as "END"); timestamps T, execution times N, sid as <sid>, the workspace as <ws>. */
static char *norm(const char *answer, const char *sid) {
  const char *body = strstr(answer, "\r\n\r\n");
  if (!body) return strdup(answer);
  body += 4;
  size_t hl = (size_t)(body - answer);
  char *out = malloc(hl + strlen(body) * 2 + 16), *o = out;
  for (const char *p = answer; p < body;) {
    const char *e = strstr(p, "\r\n") + 2;
    if (strncmp(p, "Content-Length: ", 16) == 0 && strncmp(p, "Content-Length: 0\r", 18) != 0) {
      /* a length that is the body's is "ok" (the expectations do not depend on the workspace's and ids' lengths) */
      unsigned long cl = strtoul(p + 16, NULL, 10);
      o += sprintf(o, "Content-Length: %s\r\n", cl == strlen(body) ? "ok" : "WRONG");
    } else if (strncmp(p, "Date: ", 6) != 0) {
      memcpy(o, p, (size_t)(e - p));
      o += e - p;
    }
    p = e;
  }
  if (strstr(answer, "Transfer-Encoding: chunked")) {
    const char *p = body;
    for (;;) {
      char *end;
      unsigned long n = strtoul(p, &end, 16);
      if (end == p || strncmp(end, "\r\n", 2) != 0) {
        strcpy(o, "<bad chunk>");
        o += strlen(o);
        break;
      }
      p = end + 2;
      if (n == 0) {
        strcpy(o, "END");
        o += 3;
        break;
      }
      memcpy(o, p, n);
      o += n;
      *o++ = '|';
      p += n + 2;
    }
    *o = 0;
  } else {
    strcpy(o, body);
  }
  out = mask_number(out, "\"timestamp\":", "T");
  out = mask_number(out, "\"execution_time\":", "N");
  if (sid && *sid) out = replace(out, sid, "<sid>");
  return replace(out, ws, "<ws>");
}

static char *call(const char *method, const char *target, const char *body, const char *sid) {
  int fd = send_request(method, target, body);
  char *a = fd < 0 ? strdup("") : xd_read_all(fd, 0);
  char *n = norm(a, sid);
  free(a);
  return n;
}

#define EV_HEAD "HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nConnection: close\r\nContent-Type: text/event-stream\r\nX-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n"
#define INIT_PING "{\"type\":\"init\",\"text\":\"<sid>\",\"timestamp\":T}\n\n|{\"type\":\"ping\",\"text\":\"pong\",\"timestamp\":T}\n\n|"
/* (norm checks the Content-Length against the body and writes "ok") */
#define JSON_HEAD(status) "HTTP/1.1 " status "\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\nContent-Length: ok\r\n\r\n"

/* POST /session with body; the new session's id into sid[37] ("" when none). */
static void create(const char *body, char sid[37]) {
  int fd = send_request("POST", "/session", body);
  char *a = fd < 0 ? strdup("") : xd_read_all(fd, 0);
  const char *p = strstr(a, "{\"session_id\":\"");
  sid[0] = 0;
  if (p && strlen(p) >= 15 + 36) {
    memcpy(sid, p + 15, 36);
    sid[36] = 0;
  }
  char *n = norm(a, sid);
  CHECK_STR(n, JSON_HEAD("200 OK") "{\"session_id\":\"<sid>\"}");
  free(n);
  free(a);
}

static char *run_in(const char *sid, const char *body) {
  char target[128];
  snprintf(target, sizeof target, "/session/%s/run", sid);
  return call("POST", target, body, sid);
}

static void test_duration_texts(void) {
  static const struct {
    int64_t ns;
    const char *text;
  } cases[] = {{0, "0s"}, {1, "1ns"}, {1500, "1.5\xc2\xb5s"}, {300000000, "300ms"}, {1000000000, "1s"},
               {1500000000, "1.5s"}, {90000000000, "1m30s"}, {86400000000000, "24h0m0s"}, {-2000000000, "-2s"},
               {2147483648000000, "596h31m23.648s"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char out[40];
    xd_go_duration_text(cases[i].ns, out);
    CHECK_STR(out, cases[i].text);
  }
}

/* The runs of the real execd's transcript 08, in its order */
static void test_transcript_runs(void) {
  char sid[37];
  create("{\"cwd\":\"$OSB_TEST_WS/sess\"}", sid); /* made (mkdir -p), its $VAR expanded */
  CHECK(strlen(sid) == 36 && sid[14] == '4');
  char *a = run_in(sid, "{\"command\":\"export REC_X=42; cd sub2 2>/dev/null || mkdir sub2 && cd sub2; greet() { echo hi; }; echo \\\"pwd=$(pwd)\\\"\"}");
  CHECK_STR(a, EV_HEAD INIT_PING "{\"type\":\"stdout\",\"text\":\"pwd=<ws>/sess/sub2\",\"timestamp\":T}\n\n|"
               "{\"type\":\"execution_complete\",\"execution_time\":N,\"timestamp\":T}\n\n|END");
  free(a);
  a = run_in(sid, "{\"command\":\"echo \\\"REC_X=$REC_X pwd=$(pwd)\\\"; type greet 2>&1; echo err-line >&2\"}");
  char want[1024];
  snprintf(want, sizeof want,
           EV_HEAD INIT_PING "{\"type\":\"stdout\",\"text\":\"REC_X=42 pwd=<ws>/sess/sub2\",\"timestamp\":T}\n\n|"
           "{\"type\":\"stdout\",\"text\":\"<ws>/session-<sid>.sh: line 3: type: greet: not found\",\"timestamp\":T}\n\n|"
           "{\"type\":\"stdout\",\"text\":\"err-line\",\"timestamp\":T}\n\n|"
           "{\"type\":\"execution_complete\",\"execution_time\":N,\"timestamp\":T}\n\n|END");
  CHECK_STR(a, want);
  free(a);
  a = run_in(sid, "{\"command\":\"echo before; exit 5\"}");
  CHECK_STR(a, EV_HEAD INIT_PING "{\"type\":\"stdout\",\"text\":\"before\",\"timestamp\":T}\n\n|"
               "{\"type\":\"error\",\"timestamp\":T,\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"5\",\"traceback\":[\"exit status 5\"]}}\n\n|END");
  free(a);
  a = run_in(sid, "{\"command\":\"pwd\",\"cwd\":\"$OSB_TEST_WS\"}");
  CHECK_STR(a, EV_HEAD INIT_PING "{\"type\":\"stdout\",\"text\":\"<ws>\",\"timestamp\":T}\n\n|"
               "{\"type\":\"execution_complete\",\"execution_time\":N,\"timestamp\":T}\n\n|END");
  free(a);
  /* the timeout kills the run's process group at once; the failure is the bare object, no blank line after it */
  a = run_in(sid, "{\"command\":\"echo start; sleep 3; echo end\",\"timeout\":1000}");
  CHECK_STR(a, EV_HEAD INIT_PING "{\"type\":\"stdout\",\"text\":\"start\",\"timestamp\":T}\n\n|"
               "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running in session. timeout after 1s\"}|END");
  free(a);
  /* the session's directory is now the one of the last run that ended (run 4's cwd, as upstream saves `pwd`), its
   * variables still there */
  a = run_in(sid, "{\"command\":\"pwd; echo $REC_X\"}");
  CHECK_STR(a, EV_HEAD INIT_PING "{\"type\":\"stdout\",\"text\":\"<ws>\",\"timestamp\":T}\n\n|"
               "{\"type\":\"stdout\",\"text\":\"42\",\"timestamp\":T}\n\n|"
               "{\"type\":\"execution_complete\",\"execution_time\":N,\"timestamp\":T}\n\n|END");
  free(a);
  /* a session without a cwd runs in the workspace */
  char sid2[37];
  create(NULL, sid2);
  a = run_in(sid2, "{\"command\":\"pwd\"}");
  CHECK_STR(a, EV_HEAD INIT_PING "{\"type\":\"stdout\",\"text\":\"<ws>\",\"timestamp\":T}\n\n|"
               "{\"type\":\"execution_complete\",\"execution_time\":N,\"timestamp\":T}\n\n|END");
  free(a);
  char target[128];
  snprintf(target, sizeof target, "/session/%s", sid);
  a = call("DELETE", target, NULL, sid);
  CHECK_STR(a, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
  free(a);
  a = call("DELETE", target, NULL, sid);
  CHECK_STR(a, JSON_HEAD("404 Not Found") "{\"code\":\"CONTEXT_NOT_FOUND\",\"message\":\"session <sid> not found\"}");
  free(a);
  a = run_in(sid, "{\"command\":\"echo hi\"}");
  CHECK_STR(a, JSON_HEAD("500 Internal Server Error") "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running in session. context not found\"}");
  free(a);
  /* its files are removed (on the thread pool: within 5 s) */
  char f[3][400];
  snprintf(f[0], sizeof f[0], "%s/session-%s.sh", ws, sid);
  snprintf(f[1], sizeof f[1], "%s/session-%s.env", ws, sid);
  snprintf(f[2], sizeof f[2], "%s/session-%s.cwd", ws, sid);
  int gone = 0;
  for (int i = 0; i < 100 && !gone; i++) {
    gone = access(f[0], F_OK) != 0 && access(f[1], F_OK) != 0 && access(f[2], F_OK) != 0;
    if (!gone) usleep(50000);
  }
  CHECK(gone);
  snprintf(target, sizeof target, "/session/%s", sid2);
  free(call("DELETE", target, NULL, sid2));
}

static void test_request_errors(void) {
  char sid[37];
  create("{}", sid);
  static const struct {
    const char *body, *answer;
  } runs[] = {
      {"{\"command\":\"\"}", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid request. Key: 'RunInSessionRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag\"}"},
      {"null", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid request. Key: 'RunInSessionRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag\"}"},
      {"{\"command\":\"\",\"timeout\":-1}", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid request. Key: 'RunInSessionRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag\\nKey: 'RunInSessionRequest.Timeout' Error:Field validation for 'Timeout' failed on the 'gte' tag\"}"},
      {"", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. EOF\"}"},
      {"{\"command\":", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. unexpected EOF\"}"},
      {"[1]", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot unmarshal array into Go value of type model.RunInSessionRequest\"}"},
      {"{\"command\":5}", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot unmarshal number into Go struct field RunInSessionRequest.command of type string\"}"},
      {"{\"command\":\"true\",\"cwd\":true}", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot unmarshal bool into Go struct field RunInSessionRequest.cwd of type string\"}"},
      {"{\"command\":\"true\",\"timeout\":1.5}", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot unmarshal number 1.5 into Go struct field RunInSessionRequest.timeout of type int64\"}"},
      {"{\"command\":\"true\",\"timeout\":\"1\"}", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot unmarshal string into Go struct field RunInSessionRequest.timeout of type int64\"}"},
      {"{\"command\":\"echo a\\u0000b\"}", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. NUL characters in strings are not supported\"}"},
      {"{\"command\":\"true\",\"cwd\":\"$OSB_UNDEFINED_X/a\"}", JSON_HEAD("500 Internal Server Error") "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running in session. resolve cwd: path references undefined environment variables: OSB_UNDEFINED_X\"}"},
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    char *a = run_in(sid, runs[i].body);
    CHECK_STR(a, runs[i].answer);
    free(a);
  }
  char *a = run_in("not-a-session", "{\"command\":\"echo hi\"}");
  CHECK_STR(a, JSON_HEAD("500 Internal Server Error") "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running in session. context not found\"}");
  free(a);
  static const struct {
    const char *body, *answer;
  } creates[] = {
      {"[]", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot unmarshal array into Go value of type model.CreateSessionRequest\"}"},
      {"{\"cwd\":5}", JSON_HEAD("400 Bad Request") "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot unmarshal number into Go struct field CreateSessionRequest.cwd of type string\"}"},
      {"{\"cwd\":\"$OSB_UNDEFINED_X\"}", JSON_HEAD("500 Internal Server Error") "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error creating session. resolve request cwd $OSB_UNDEFINED_X: path references undefined environment variables: OSB_UNDEFINED_X\"}"},
      {"{\"cwd\":\"$OSB_TEST_WS/afile/sub\"}", NULL},
  };
  char path[400];
  snprintf(path, sizeof path, "%s/afile", ws);
  FILE *fp = fopen(path, "w");
  if (fp) fclose(fp);
  for (size_t i = 0; i < sizeof creates / sizeof creates[0]; i++) {
    a = call("POST", "/session", creates[i].body, NULL);
    if (creates[i].answer) CHECK_STR(a, creates[i].answer);
    else CHECK(strstr(a, "HTTP/1.1 500 ") == a && strstr(a, "\r\n\r\n{\"code\":\"RUNTIME_ERROR\",\"message\":\"error creating session. mkdir <ws>/afile: not a directory\"}"));
    free(a);
  }
  /* GET /session and PUT /session/x/run are not the module's (no route takes them: the server's 404) */
  a = call("GET", "/session", NULL, NULL);
  CHECK(strstr(a, "HTTP/1.1 404 ") == a && strstr(a, "\r\n\r\n404 page not found"));
  free(a);
  a = call("PUT", "/session/x/run", "{}", NULL);
  CHECK(strstr(a, "HTTP/1.1 404 ") == a && strstr(a, "\r\n\r\n404 page not found"));
  free(a);
  char target[128];
  snprintf(target, sizeof target, "/session/%s", sid);
  free(call("DELETE", target, NULL, sid));
}

/* Reads from fd until `until` arrived (or the server closed); returns what came (malloc'd). */
static char *read_until(int fd, const char *until) {
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  buf[0] = 0;
  while (n < cap - 1 && !strstr(buf, until)) {
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
    buf[n] = 0;
  }
  return buf;
}

static void test_busy_and_timeout(void) {
  char sid[37], target[128];
  create(NULL, sid);
  snprintf(target, sizeof target, "/session/%s/run", sid);
  int fd = send_request("POST", target, "{\"command\":\"echo first; sleep 1; echo slow-done\"}");
  free(read_until(fd, "\"text\":\"first\""));
  char *a = run_in(sid, "{\"command\":\"true\"}");
  CHECK_STR(a, EV_HEAD INIT_PING "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running in session: session is busy\"}|END");
  free(a);
  char *rest = xd_read_all(fd, 0);
  CHECK(strstr(rest, "{\"type\":\"stdout\",\"text\":\"slow-done\""));
  CHECK(strstr(rest, "{\"type\":\"execution_complete\""));
  free(rest);
  a = run_in(sid, "{\"command\":\"sleep 5\",\"timeout\":300}");
  CHECK_STR(a, EV_HEAD INIT_PING "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running in session. timeout after 300ms\"}|END");
  free(a);
  /* a timeout of 2^31 ms is a long deadline (Go's int64 Duration), not an instant one */
  a = run_in(sid, "{\"command\":\"echo done\",\"timeout\":2147483648}");
  CHECK_STR(a, EV_HEAD INIT_PING "{\"type\":\"stdout\",\"text\":\"done\",\"timestamp\":T}\n\n|"
               "{\"type\":\"execution_complete\",\"execution_time\":N,\"timestamp\":T}\n\n|END");
  free(a);
  snprintf(target, sizeof target, "/session/%s", sid);
  free(call("DELETE", target, NULL, sid));
}

/* DELETE /command?id= of a session closes it (upstream's Interrupt); its run ends as killed */
static void test_interrupt_by_command_route(void) {
  char sid[37], target[128];
  create(NULL, sid);
  snprintf(target, sizeof target, "/session/%s/run", sid);
  int fd = send_request("POST", target, "{\"command\":\"echo start; sleep 30\"}");
  free(read_until(fd, "\"text\":\"start\""));
  snprintf(target, sizeof target, "/command?id=%s", sid);
  char *d = call("DELETE", target, NULL, sid);
  CHECK_STR(d, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
  free(d);
  char *rest = xd_read_all(fd, 0);
  CHECK(strstr(rest, "{\"type\":\"error\",\"timestamp\":"));
  CHECK(strstr(rest, ",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"-1\",\"traceback\":[\"signal: killed\"]}}\n\n\r\n0\r\n\r\n"));
  free(rest);
  snprintf(target, sizeof target, "/session/%s", sid);
  d = call("DELETE", target, NULL, sid);
  CHECK(strstr(d, "HTTP/1.1 404 ") == d);
  free(d);
  d = call("DELETE", "/command?id=nope", NULL, NULL);
  CHECK_STR(d, JSON_HEAD("500 Internal Server Error") "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error interruptting code context. no such session\"}");
  free(d);
}

/* a client that leaves cancels its run: the session is soon free again */
static void test_client_leaves(void) {
  char sid[37], target[128];
  create(NULL, sid);
  snprintf(target, sizeof target, "/session/%s/run", sid);
  int fd = send_request("POST", target, "{\"command\":\"echo start; yes | head -c 50000000; sleep 30\"}");
  free(read_until(fd, "\"text\":\"start\""));
  close(fd);
  int free_again = 0;
  for (int i = 0; i < 100 && !free_again; i++) { /* within 5 s */
    char *a = run_in(sid, "{\"command\":\"echo again\"}");
    free_again = strstr(a, "\"text\":\"again\"") != NULL;
    if (!free_again && i == 99) printf("  last answer: %s\n", a);
    free(a);
    if (!free_again) usleep(50000);
  }
  CHECK(free_again);
  /* bash exited, but a process that left its group holds the pipe: the run waits for it (as upstream) until the
   * client leaves, then ends */
  snprintf(target, sizeof target, "/session/%s/run", sid);
  fd = send_request("POST", target, "{\"command\":\"setsid sleep 3 & echo start\"}");
  free(read_until(fd, "\"text\":\"start\""));
  usleep(300000);
  char *busy = run_in(sid, "{\"command\":\"echo again\"}");
  CHECK(strstr(busy, "session is busy"));
  free(busy);
  close(fd);
  free_again = 0;
  for (int i = 0; i < 40 && !free_again; i++) { /* within 2 s: before the sleep ends */
    char *a = run_in(sid, "{\"command\":\"echo again\"}");
    free_again = strstr(a, "\"text\":\"again\"") != NULL;
    free(a);
    if (!free_again) usleep(50000);
  }
  CHECK(free_again);
  snprintf(target, sizeof target, "/session/%s", sid);
  free(call("DELETE", target, NULL, sid));
}

static size_t count(const char *s, const char *what) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
  return n;
}

static void test_slow_reader_gets_every_line(void) {
  char sid[37], target[128];
  create(NULL, sid);
  snprintf(target, sizeof target, "/session/%s/run", sid);
  int fd = send_request("POST", target, "{\"command\":\"seq 1 60000\"}");
  char *a = xd_read_all(fd, 256 * 1024);
  CHECK(count(a, "{\"type\":\"stdout\"") == 60000);
  const char *p59 = strstr(a, "\"text\":\"59999\""), *p60 = strstr(a, "\"text\":\"60000\"");
  CHECK(p59 && p60 && p59 < p60);
  CHECK(strstr(a, "{\"type\":\"execution_complete\""));
  free(a);
  /* left with a run going: closing the module must kill it and free everything */
  fd = send_request("POST", target, "{\"command\":\"echo start; sleep 30\"}");
  free(read_until(fd, "\"text\":\"start\""));
  close(fd);
  char sid2[37];
  create(NULL, sid2); /* and a session that never ran */
}

static void client(void) {
  sigset_t all; /* signals (SIGCHLD of the runs) are the loop thread's: no EINTR in this thread's reads */
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  RUN(test_duration_texts);
  RUN(test_transcript_runs);
  RUN(test_request_errors);
  RUN(test_busy_and_timeout);
  RUN(test_interrupt_by_command_route);
  RUN(test_client_leaves);
  RUN(test_slow_reader_gets_every_line);
}

static int interrupt_other(const char *id) { return xd_sessions_interrupt(sessions_mod, id); }

typedef struct {
  xd_server *server;
  void *commands;
} closing;

static void close_all(void *arg) {
  closing *c = arg;
  xd_server_close(c->server);
  xd_commands_close(c->commands);
  xd_sessions_close(sessions_mod);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!t_tempdir(ws, sizeof ws, "xd-sessions")) return printf("cannot make a temporary directory\n0 passed, 1 failed\n"), 1;
  setenv("TMPDIR", ws, 1); /* the sessions' files go there */
  setenv("OSB_TEST_WS", ws, 1);
  uv_loop_t loop;
  uv_loop_init(&loop);
  xd_ctx ctx = {.loop = &loop, .workspace = ws, .interrupt_other = interrupt_other};
  void *commands = xd_commands_new(&ctx);
  sessions_mod = xd_sessions_new(&ctx);
  xd_route routes[] = {{commands, xd_commands_route}, {sessions_mod, xd_sessions_route}};
  xd_server_opts o = {.loop = &loop, .routes = routes, .nroutes = 2};
  xd_server *server = commands && sessions_mod ? xd_server_new(&o) : NULL;
  if (!server || xd_server_listen_tcp(server, "127.0.0.1", 0, &port) != 0) return printf("server did not start\n0 passed, 1 failed\n"), 1;
  closing c = {server, commands};
  xd_run_client(&loop, client, close_all, &c);
  CHECK(uv_loop_close(&loop) == 0);
  t_rmtree(ws);
  return t_summary();
}
