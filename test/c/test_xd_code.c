/* The code interpreter of the C execd (src/execd/code.c, codeproto.c): the kernel-protocol parsers on their own, then
 * the routes through the real HTTP server (server.c) on loopback with the real kernels (python3, bash; the ones in
 * lib/dev-server/execd) and, for hostile input, a fake python kernel written here. A client thread sends each request
 * over TCP while the main thread runs the loop. Checks the exact bytes of the answers and the event order of cells
 * (output, results, errors, a 3 MB print delivered whole in bounded events), busy contexts, interrupts (DELETE /code
 * and DELETE /command through commands.c's hook), clients that go away, kernels that die, deleted contexts, shell
 * runs, and that closing the module kills what still runs and frees everything (valgrind and ASan). */
#include "harness.h"
#include "xd_loopback.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "execd/codeproto.h"
#include "execd/server.h"
#include "execd/xd.h"

static char ws[256];
static char kernels[PATH_MAX];
static char fake[300]; /* a kernel directory whose python kernel is the fake below */
static int port, fake_port;

/* ------------------------------------------------------------------------------------------ the parsers alone */

typedef struct {
  char text[256];
  size_t n;
  int calls;
} sink;

static void on_piece(void *arg, const char *t, size_t n) {
  sink *s = arg;
  if (s->n + n < sizeof s->text) memcpy(s->text + s->n, t, n), s->n += n;
  s->text[s->n] = 0;
  s->calls++;
}

static void on_kline(void *arg, const char *t, size_t n) {
  sink *s = arg;
  if (s->n + n + 1 < sizeof s->text) memcpy(s->text + s->n, t, n), s->n += n, s->text[s->n++] = '|';
  s->text[s->n] = 0;
  s->calls++;
}

static void test_kline(void) {
  xd_kline k;
  sink s = {0};
  xd_kline_init(&k, 8);
  CHECK(xd_kline_push(&k, "ab\ncd", 5, on_kline, &s) == 0);
  CHECK(xd_kline_push(&k, "e\n\n0123456789xyz\nok\n", 21, on_kline, &s) == 0); /* the 13-byte line is dropped */
  CHECK_STR(s.text, "ab|cde||ok|");
  CHECK(k.dropped == 1);
  CHECK(xd_kline_push(&k, "0123", 4, on_kline, &s) == 0);
  CHECK(xd_kline_push(&k, "45678", 5, on_kline, &s) == 0); /* over the bound across two pushes */
  CHECK(xd_kline_push(&k, "9\nz\n", 4, on_kline, &s) == 0);
  CHECK_STR(s.text, "ab|cde||ok|z|");
  CHECK(k.dropped == 2);
  xd_kline_free(&k);
}

static void test_kmsg(void) {
  cJSON *t;
  int exit, has;
  CHECK(xd_kmsg_parse("{\"type\":\"ready\"}", 16, &t, &exit, &has) == XD_KMSG_READY && !t);
  const char *done = "{\"type\":\"done\",\"exit\":130}";
  CHECK(xd_kmsg_parse(done, strlen(done), &t, &exit, &has) == XD_KMSG_DONE && has && exit == 130);
  const char *big = "{\"type\":\"done\",\"exit\":1e300}";
  CHECK(xd_kmsg_parse(big, strlen(big), &t, &exit, &has) == XD_KMSG_DONE && has && exit == INT_MAX);
  CHECK(xd_kmsg_parse("{\"type\":\"done\"}", 15, &t, &exit, &has) == XD_KMSG_DONE && !has);
  CHECK(xd_kmsg_parse("[1]", 3, &t, &exit, &has) == XD_KMSG_OTHER && !t);
  CHECK(xd_kmsg_parse("{\"type\":7}", 10, &t, &exit, &has) == XD_KMSG_OTHER);
  CHECK(xd_kmsg_parse("nonsense", 8, &t, &exit, &has) == XD_KMSG_OTHER);
  const char *res = "{\"type\":\"result\",\"data\":{\"text/plain\":\"1\"}}";
  CHECK(xd_kmsg_parse(res, strlen(res), &t, &exit, &has) == XD_KMSG_RESULT && t);
  cJSON_Delete(t);
}

static void test_kjson(void) {
  const char *in = "{\"text/plain\":\"<a&b>\",\"image/png\":\"iVBO\",\"application/json\":{\"z\":[1.5,1e21,2e-7,true,null],"
                   "\"a\":{}},\"text/html\":\"\\u2028\",\"dup\":1,\"dup\":2}";
  cJSON *v = cJSON_Parse(in);
  osb_buf b = {0};
  CHECK(v && xd_kjson_write(&b, v, 1) == 0);
  CHECK_STR(b.data, "{\"application/json\":{\"a\":{},\"z\":[1.5,1e+21,2e-7,true,null]},\"dup\":2,\"image/png\":\"iVBO\","
                    "\"text\":\"\\u003ca\\u0026b\\u003e\",\"text/html\":\"\\u2028\"}");
  cJSON_Delete(v);
  osb_buf_reset(&b);
  v = cJSON_Parse("{\"text\":\"own\",\"text/plain\":\"renamed\"}"); /* both: the renamed one wins, once */
  CHECK(v && xd_kjson_write(&b, v, 1) == 0);
  CHECK_STR(b.data, "{\"text\":\"renamed\"}");
  cJSON_Delete(v);
  osb_buf_free(&b);
}

static void test_kdemux(void) {
  static const char m[] = "\x1eMARK\x1e";
  xd_kdemux d;
  sink s = {0};
  xd_kdemux_reset(&d, NULL, 0);
  xd_kdemux_feed(&d, "dropped", 7, on_piece, &s);
  CHECK(s.calls == 0);
  xd_kdemux_reset(&d, m, 6);
  xd_kdemux_feed(&d, "ab\x1eMA", 5, on_piece, &s); /* a marker's beginning is held back */
  CHECK_STR(s.text, "ab");
  xd_kdemux_feed(&d, "RK\x1etail", 7, on_piece, &s);
  CHECK_STR(s.text, "ab");
  CHECK(d.done);
  xd_kdemux_feed(&d, "more", 4, on_piece, &s);
  CHECK_STR(s.text, "ab");
  /* a held-back beginning that is not the marker after all, and a UTF-8 character cut by a push */
  memset(&s, 0, sizeof s);
  xd_kdemux_reset(&d, m, 6);
  xd_kdemux_feed(&d, "a\x1eM", 3, on_piece, &s);
  xd_kdemux_feed(&d, "X\xc3", 2, on_piece, &s);
  CHECK_STR(s.text, "a\x1eMX");
  xd_kdemux_feed(&d, "\xa9!", 2, on_piece, &s);
  CHECK_STR(s.text, "a\x1eMX\xc3\xa9!");
  /* the stream ends without the marker: what was held goes out */
  xd_kdemux_feed(&d, "\xe2\x82", 2, on_piece, &s);
  xd_kdemux_feed(&d, "\x1e", 1, on_piece, &s);
  xd_kdemux_flush(&d, on_piece, &s);
  CHECK_STR(s.text, "a\x1eMX\xc3\xa9!\xe2\x82\x1e");
  CHECK(d.done);
}

/* ------------------------------------------------------------------------------------------ HTTP helpers */

static int send_request_to(int p, const char *method, const char *target, const char *body) {
  return xd_send_request(p, 30, method, target, body);
}
static int send_request(const char *method, const char *target, const char *body) {
  return send_request_to(port, method, target, body);
}

/* The whole answer; a chunked body is de-chunked (so events are contiguous). */
static char *read_all(int fd) {
  char *buf = xd_read_all(fd, 0);
  size_t n = strlen(buf);
  char *body = strstr(buf, "\r\n\r\n");
  if (!body || !strstr(buf, "Transfer-Encoding: chunked")) return buf;
  char *o = body + 4, *p = body + 4, *end = buf + n;
  while (p < end) {
    char *e;
    unsigned long len = strtoul(p, &e, 16);
    if (e == p || e + 2 > end) break;
    p = e + 2;
    if (len == 0 || p + len > end) break;
    memmove(o, p, len);
    o += len;
    p += len + 2;
  }
  *o = 0;
  return buf;
}

static char *call_to(int p, const char *method, const char *target, const char *body) {
  int fd = send_request_to(p, method, target, body);
  char *a = fd < 0 ? strdup("") : read_all(fd);
  if (!strstr(a, "\r\n\r\n")) printf("  %s %s: no answer (%d, %s)\n", method, target, fd, strerror(errno));
  return a;
}
static char *call(const char *method, const char *target, const char *body) { return call_to(port, method, target, body); }

static const char *body_of(const char *a) {
  const char *b = strstr(a, "\r\n\r\n");
  return b ? b + 4 : "";
}

/* reads until `until` arrived */
static void read_until(int fd, const char *until) {
  char buf[8192];
  size_t n = 0;
  while (n < sizeof buf - 1) {
    ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
    buf[n] = 0;
    if (strstr(buf, until)) break;
  }
}

/* POST /code/context: the new id (37 bytes) */
static void new_context(const char *body, char id[37]) {
  char *a = call("POST", "/code/context", body);
  const char *p = strstr(a, "{\"id\":\"");
  id[0] = 0;
  if (p && strlen(p) > 43) memcpy(id, p + 7, 36), id[36] = 0;
  if (!id[0]) printf("  create: %s\n", a);
  free(a);
}

static char *run_cell(const char *id, const char *lang, const char *code_json) {
  char body[4096];
  snprintf(body, sizeof body, "{\"context\":{\"id\":\"%s\",\"language\":\"%s\"},\"code\":%s}", id, lang, code_json);
  return call("POST", "/code", body);
}

/* the events in order: "type:text" or "type" joined by '|' (timestamps left out; output events without their text,
 * consecutive ones of a stream counted once: how the kernel's writes fall into batches varies), into out */
static void shape(const char *a, char *out, size_t cap) {
  size_t n = 0;
  out[0] = 0;
  char last[16] = "";
  for (const char *p = body_of(a); (p = strstr(p, "{\"type\":\"")) != NULL;) {
    p += 9;
    const char *q = strchr(p, '"');
    if (!q) break;
    int output = strncmp(p, "stdout\"", 7) == 0 || strncmp(p, "stderr\"", 7) == 0;
    if (output && strncmp(last, p, 6) == 0) {
      p = q;
      continue;
    }
    snprintf(last, sizeof last, "%.*s", (int)(q - p < 15 ? q - p : 15), p);
    n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s%.*s", n ? "|" : "", (int)(q - p), p);
    if (!output && strncmp(q, "\",\"text\":\"", 10) == 0) {
      const char *t = q + 10, *te = strstr(t, "\",");
      if (te && te - t < 60) n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, ":%.*s", (int)(te - t), t);
    }
    p = q;
    if (n >= cap) break;
  }
}

/* the (JSON-escaped) text of every event of that type, joined: malloc'd */
static char *joined(const char *a, const char *type) {
  osb_buf b = {0};
  char pre[64];
  snprintf(pre, sizeof pre, "{\"type\":\"%s\",\"text\":\"", type);
  for (const char *p = body_of(a); (p = strstr(p, pre)) != NULL;) {
    p += strlen(pre);
    const char *e = strstr(p, "\",\"timestamp\":");
    if (!e) break;
    osb_buf_append(&b, p, (size_t)(e - p));
    p = e;
  }
  osb_buf_append(&b, "", 0);
  return b.data ? b.data : strdup("");
}

static size_t count(const char *s, const char *what) {
  size_t n = 0;
  for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what)) n++;
  return n;
}

/* ------------------------------------------------------------------------------------------ the routes */

static void test_context_errors(void) {
  char *a = call("POST", "/code/context", "");
  CHECK_STR(body_of(a), "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. EOF\"}");
  free(a);
  a = call("POST", "/code/context", "[1]");
  CHECK_STR(body_of(a), "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. expected a JSON object\"}");
  free(a);
  a = call("POST", "/code/context", "{\"language\":1}");
  CHECK(strstr(a, "HTTP/1.1 400 ") && strstr(a, "language and cwd must be strings"));
  free(a);
  a = call("POST", "/code/context", "{\"language\":\"cobol\"}");
  CHECK(strstr(a, "HTTP/1.1 500 Internal Server Error\r\n") == a);
  CHECK_STR(body_of(a), "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error creating code context. no kernel found for language "
                        "\\\"cobol\\\" (supported: python, javascript, bash)\"}");
  free(a);
  a = call("POST", "/code/context", "{\"language\":\"python\",\"cwd\":\"$NOPE_NOT_SET/x\"}");
  CHECK_STR(body_of(a), "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error creating code context. path references undefined "
                        "environment variables: NOPE_NOT_SET\"}");
  free(a);
  a = call("POST", "/code", "{\"code\":\"\"}");
  CHECK(strstr(a, "HTTP/1.1 400 ") && strstr(a, "'RunCodeRequest.Code' Error:Field validation for 'Code' failed on the 'required' tag\"}"));
  free(a);
  a = call("POST", "/code", "{\"code\":\"1\",\"context\":{\"id\":\"nope\",\"language\":\"python\"}}");
  CHECK_STR(body_of(a), "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running codes context not found\"}");
  free(a);
  a = call("POST", "/code", "{\"code\":\"1\",\"context\":{\"language\":\"cobol\"}}");
  CHECK(strstr(body_of(a), "error running codes no kernel found for language \\\"cobol\\\""));
  free(a);
  a = call("GET", "/code/contexts/nope", NULL);
  CHECK(strstr(a, "HTTP/1.1 404 ") == a);
  CHECK_STR(body_of(a), "{\"code\":\"CONTEXT_NOT_FOUND\",\"message\":\"context nope not found\"}");
  free(a);
  a = call("DELETE", "/code/contexts/nope", NULL);
  CHECK(strstr(a, "HTTP/1.1 404 ") == a);
  free(a);
  a = call("DELETE", "/code/contexts", NULL);
  CHECK_STR(body_of(a), "{\"code\":\"MISSING_QUERY\",\"message\":\"missing query parameter 'language'\"}");
  free(a);
  a = call("DELETE", "/code", NULL);
  CHECK_STR(body_of(a), "{\"code\":\"MISSING_QUERY\",\"message\":\"missing query parameter 'id'\"}");
  free(a);
  a = call("DELETE", "/code?id=nope", NULL);
  CHECK_STR(body_of(a), "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error interruptting code context. no such session\"}");
  free(a);
  a = call("DELETE", "/command?id=nope", NULL); /* neither commands.c's nor code.c's */
  CHECK(strstr(a, "no such session"));
  free(a);
}

static void test_python_cells(void) {
  char id[37], dir[400], body[600];
  snprintf(dir, sizeof dir, "%s/made/here", ws);
  snprintf(body, sizeof body, "{\"language\":\"python\",\"cwd\":\"%s\"}", dir);
  char *a = call("POST", "/code/context", body);
  CHECK(strstr(a, "HTTP/1.1 200 OK\r\n") == a);
  const char *b = body_of(a);
  CHECK(strlen(b) > 45 && strncmp(b + 43, "\",\"language\":\"python\",\"cwd\":\"", 29) == 0);
  memcpy(id, b + 7, 36);
  id[36] = 0;
  free(a);
  struct stat st;
  CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));

  char sh[1024], want[600];
  a = run_cell(id, "python", "\"import os\\nx = 41\\nprint('a', os.getcwd())\\nx + 1\"");
  CHECK(strstr(a, "HTTP/1.1 200 OK\r\n") == a && strstr(a, "\r\nContent-Type: text/event-stream\r\n"));
  shape(a, sh, sizeof sh);
  snprintf(want, sizeof want, "init:%s|ping:pong|execution_count|stdout|result|execution_complete", id);
  CHECK_STR(sh, want);
  snprintf(want, sizeof want, "a %s\\n", dir);
  char *out = joined(a, "stdout");
  CHECK_STR(out, want);
  free(out);
  CHECK(strstr(a, "{\"type\":\"execution_count\",\"execution_count\":1,\"timestamp\":"));
  CHECK(strstr(a, "\"results\":{\"text\":\"42\"}}\n\n"));
  CHECK(strstr(a, "{\"type\":\"execution_complete\",\"execution_time\":"));
  free(a);

  a = run_cell(id, "python", "\"import sys\\nprint('e', file=sys.stderr)\\n1/0\"");
  shape(a, sh, sizeof sh);
  snprintf(want, sizeof want, "init:%s|ping:pong|execution_count|stderr|status:error|error", id);
  CHECK_STR(sh, want);
  out = joined(a, "stderr");
  CHECK_STR(out, "e\\n");
  free(out);
  CHECK(strstr(a, "\"execution_count\":2,"));
  CHECK(strstr(a, "\"error\":{\"ename\":\"ZeroDivisionError\",\"evalue\":\"division by zero\",\"traceback\":[\"Traceback (most recent call last):\""));
  free(a);

  /* 3 MB in one print: every byte, in events of at most 64 KiB of text plus a read */
  a = run_cell(id, "python", "\"print('x' * 3_000_000)\"");
  size_t xs = 0, events = 0, biggest = 0;
  for (const char *p = body_of(a); (p = strstr(p, "{\"type\":\"stdout\",\"text\":\"")) != NULL;) {
    p += 25;
    size_t n = strspn(p, "x");
    xs += n;
    events++;
    if (n > biggest) biggest = n;
    p += n;
  }
  CHECK(xs == 3000000);
  CHECK(events >= 23 && biggest <= 2 * 65536 + 64); /* a batch: under 64 KiB, then one read (+ a held marker start) */
  CHECK(strstr(a, "{\"type\":\"stdout\",\"text\":\"\\n\"") || strstr(a, "x\\n\",\"timestamp\""));
  CHECK(strstr(a, "\"type\":\"execution_complete\""));
  if (xs != 3000000) printf("  got %zu x in %zu events\n", xs, events);
  free(a);

  /* a kernel that dies: the cell ends with DeadKernelError, the next one gets a fresh kernel (state gone) */
  a = run_cell(id, "python", "\"print('bye', flush=True)\\nimport os\\nos._exit(3)\"");
  out = joined(a, "stdout");
  CHECK_STR(out, "bye\\n");
  free(out);
  CHECK(strstr(a, "\"error\":{\"ename\":\"DeadKernelError\",\"evalue\":\"the python kernel exited (code 3); its state is lost\","
                  "\"traceback\":[\"the python kernel exited (code 3); its state is lost\"]}}"));
  free(a);
  a = run_cell(id, "python", "\"'x' in dir()\"");
  CHECK(strstr(a, "\"results\":{\"text\":\"False\"}"));
  free(a);

  /* listed, got, deleted */
  a = call("GET", "/code/contexts?language=python", NULL);
  snprintf(want, sizeof want, "[{\"id\":\"%s\",\"language\":\"python\"}]", id);
  CHECK_STR(body_of(a), want);
  free(a);
  char target[128];
  snprintf(target, sizeof target, "/code/contexts/%s", id);
  a = call("GET", target, NULL);
  snprintf(want, sizeof want, "{\"id\":\"%s\",\"language\":\"python\"}", id);
  CHECK_STR(body_of(a), want);
  free(a);
  a = call("DELETE", target, NULL);
  CHECK(strstr(a, "HTTP/1.1 200 OK\r\n") == a && strstr(a, "Content-Length: 0\r\n"));
  free(a);
  a = call("GET", "/code/contexts", NULL);
  CHECK_STR(body_of(a), "[]");
  free(a);
}

static void test_busy_interrupt(void) {
  char id[37], body[300], target[128];
  new_context("{\"language\":\"python\"}", id);
  char *a = run_cell(id, "python", "\"y = 7\"");
  free(a);
  snprintf(body, sizeof body, "{\"context\":{\"id\":\"%s\",\"language\":\"python\"},\"code\":\"print('spin', flush=True)\\nwhile True: pass\"}", id);
  int fd = send_request("POST", "/code", body);
  read_until(fd, "spin");
  /* a second cell on the busy context */
  a = run_cell(id, "python", "\"1\"");
  char want[300];
  snprintf(want, sizeof want, "{\"type\":\"init\",\"text\":\"%s\",\"timestamp\":", id);
  CHECK(strstr(body_of(a), want) == body_of(a));
  CHECK(strstr(a, "\n\n{\"code\":\"RUNTIME_ERROR\",\"message\":\"error running codes session is busy\"}") &&
        a[strlen(a) - 1] == '}');
  free(a);
  snprintf(target, sizeof target, "/code?id=%s", id);
  a = call("DELETE", target, NULL);
  CHECK(strstr(a, "HTTP/1.1 200 OK\r\n") == a);
  free(a);
  a = read_all(fd);
  CHECK(strstr(a, "{\"type\":\"status\",\"text\":\"error\""));
  CHECK(strstr(a, "\"error\":{\"ename\":\"KeyboardInterrupt\""));
  free(a);
  /* the same through DELETE /command?id= (commands.c asks code.c) */
  fd = send_request("POST", "/code", body);
  read_until(fd, "spin");
  snprintf(target, sizeof target, "/command?id=%s", id);
  a = call("DELETE", target, NULL);
  CHECK(strstr(a, "HTTP/1.1 200 OK\r\n") == a);
  free(a);
  a = read_all(fd);
  CHECK(strstr(a, "\"ename\":\"KeyboardInterrupt\""));
  free(a);
  /* a client that goes away interrupts its cell; the context is free again and kept its state */
  fd = send_request("POST", "/code", body);
  read_until(fd, "spin");
  close(fd);
  for (int i = 0; i < 100; i++) { /* deadline 5 s */
    a = run_cell(id, "python", "\"y\"");
    int ok = strstr(a, "\"results\":{\"text\":\"7\"}") != NULL;
    free(a);
    if (ok) break;
    CHECK(i < 99);
    usleep(50000);
  }
  /* a context deleted while its cell runs */
  fd = send_request("POST", "/code", body);
  read_until(fd, "spin");
  snprintf(target, sizeof target, "/code/contexts/%s", id);
  a = call("DELETE", target, NULL);
  free(a);
  a = read_all(fd);
  CHECK(strstr(a, "\"error\":{\"ename\":\"DeadKernelError\",\"evalue\":\"the context was deleted\""));
  free(a);
}

static void test_bash_default_and_shell(void) {
  /* no id: the language's default context, created once and reused */
  char *a = call("POST", "/code", "{\"context\":{\"language\":\"bash\"},\"code\":\"v=5; cd /; echo $v\"}");
  char *out = joined(a, "stdout");
  CHECK_STR(out, "5\\n");
  free(out);
  CHECK(strstr(a, "\"execution_count\":1,"));
  free(a);
  a = call("POST", "/code", "{\"context\":{\"language\":\"bash\"},\"code\":\"echo $v $PWD; false\"}");
  out = joined(a, "stdout");
  CHECK_STR(out, "5 /\\n");
  free(out);
  CHECK(strstr(a, "\"execution_count\":2,"));
  CHECK(strstr(a, "{\"type\":\"status\",\"text\":\"error\""));
  CHECK(strstr(a, "\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"1\",\"traceback\":[\"exit status 1\"]}}"));
  free(a);
  a = call("GET", "/code/contexts?language=bash", NULL);
  CHECK(count(a, "\"language\":\"bash\"") == 1);
  free(a);
  a = call("DELETE", "/code/contexts?language=bash", NULL);
  CHECK(strstr(a, "HTTP/1.1 200 OK\r\n") == a);
  free(a);
  a = call("GET", "/code/contexts", NULL);
  CHECK_STR(body_of(a), "[]");
  free(a);

  /* without a language: bash -c with /command's events */
  a = call("POST", "/code", "{\"code\":\"echo hi; echo err >&2; exit 3\"}");
  char sh[512];
  shape(a, sh, sizeof sh);
  CHECK(strncmp(sh, "init:", 5) == 0 && strlen(sh) > 37 && strcmp(sh + 37, "|ping:pong|stdout|stderr|error") == 0);
  CHECK(strstr(a, "{\"type\":\"stdout\",\"text\":\"hi\","));
  CHECK(strstr(a, "\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"3\",\"traceback\":[\"exit status 3\"]}}"));
  free(a);
  a = call("POST", "/code", "{\"code\":\"true\",\"context\":{}}");
  CHECK(strstr(a, "{\"type\":\"execution_complete\",\"execution_time\":"));
  free(a);
  /* interrupted by DELETE /code?id=<run id>: SIGTERM */
  int fd = send_request("POST", "/code", "{\"code\":\"echo start; sleep 30\"}");
  char buf[4096] = "";
  size_t n = 0;
  while (n < sizeof buf - 1 && !strstr(buf, "start")) {
    ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
    buf[n] = 0;
  }
  const char *p = strstr(buf, "{\"type\":\"init\",\"text\":\"");
  char target[80] = "";
  if (p) snprintf(target, sizeof target, "/code?id=%.32s", p + 23);
  a = call("DELETE", target, NULL);
  CHECK(strstr(a, "HTTP/1.1 200 OK\r\n") == a);
  free(a);
  a = read_all(fd);
  CHECK(strstr(a, "\"traceback\":[\"signal: terminated\"]"));
  free(a);
}

/* A fake python kernel (hostile input): a result line over the 32 MiB bound (dropped), garbage, a result, an error,
 * its done, and the markers; output with a UTF-8 character cut across writes. */
static const char FAKE[] =
    "import json, os, sys\n"
    "os.write(3, b'{\"type\":\"ready\"}\\n')\n"
    "f = os.fdopen(3, 'rb', buffering=0)\n"
    "buf = b''\n"
    "while True:\n"
    "    c = f.read(65536)\n"
    "    if not c: break\n"
    "    buf += c\n"
    "    while b'\\n' in buf:\n"
    "        line, buf = buf.split(b'\\n', 1)\n"
    "        req = json.loads(line)\n"
    "        os.write(1, b'caf\\xc3')\n"
    "        os.write(1, b'\\xa9\\n')\n"
    "        big = b'{\"type\":\"result\",\"data\":{\"text/plain\":\"' + b'y' * (33 * 1024 * 1024) + b'\"}}\\n'\n"
    "        mv = memoryview(big)\n"
    "        while mv: mv = mv[os.write(3, mv):]\n"
    "        os.write(3, b'not json\\n{\"type\":\"result\",\"data\":{\"b\":1,\"text/plain\":\"ok\",\"a\":[true]}}\\n')\n"
    "        os.write(3, b'{\"type\":\"error\",\"ename\":\"E\",\"evalue\":\"v\"}\\n')\n"
    "        m = req['marker'].encode()\n"
    "        os.write(1, m); os.write(2, m)\n"
    "        os.write(3, b'{\"type\":\"done\"}\\n')\n";

static void test_hostile_kernel(void) {
  char *a = call_to(fake_port, "POST", "/code", "{\"context\":{\"language\":\"python\"},\"code\":\"anything\"}");
  char *out = joined(a, "stdout"); /* "caf\xc3" then "\xa9\n": never a piece ending inside the character */
  CHECK_STR(out, "caf\xc3\xa9\\n");
  CHECK(!strstr(a, "\\ufffd"));
  free(out);
  CHECK(!strstr(a, "yyyy"));
  CHECK(strstr(a, "{\"type\":\"result\",\"timestamp\":") && strstr(a, ",\"results\":{\"a\":[true],\"b\":1,\"text\":\"ok\"}}\n\n"));
  CHECK(strstr(a, "{\"type\":\"status\",\"text\":\"error\""));
  CHECK(strstr(a, "\"error\":{\"ename\":\"E\",\"evalue\":\"v\",\"traceback\":[]}}"));
  free(a);
}

static void client(void) {
  sigset_t all; /* SIGCHLD is the loop thread's */
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  RUN(test_kline);
  RUN(test_kmsg);
  RUN(test_kjson);
  RUN(test_kdemux);
  RUN(test_context_errors);
  RUN(test_python_cells);
  RUN(test_busy_interrupt);
  RUN(test_bash_default_and_shell);
  RUN(test_hostile_kernel);
  /* left running at the end: closing the module kills it */
  char id[37];
  new_context("{\"language\":\"bash\"}", id);
  char body[200];
  snprintf(body, sizeof body, "{\"context\":{\"id\":\"%s\",\"language\":\"bash\"},\"code\":\"sleep 30\"}", id);
  int fd = send_request("POST", "/code", body);
  read_until(fd, "execution_count");
  close(fd);
}

typedef struct {
  xd_server *s1, *s2;
  void *commands, *code, *code2;
} all;

static void close_all(void *arg) {
  all *x = arg;
  xd_server_close(x->s1);
  xd_server_close(x->s2);
  xd_commands_close(x->commands);
  xd_code_close(x->code);
  xd_code_close(x->code2);
}

static void *the_code;
static int hook(const char *id, xd_res *res) { return xd_code_interrupt(the_code, id, res); }

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  if (!realpath("../../lib/dev-server/execd", kernels) && !realpath("lib/dev-server/execd", kernels)) {
    printf("the kernels (lib/dev-server/execd) are not found from here\n0 passed, 1 failed\n");
    return 1;
  }
  if (!t_tempdir(ws, sizeof ws, "xd-code")) return 1;
  snprintf(fake, sizeof fake, "%s/fake", ws);
  mkdir(fake, 0755);
  char fk[400];
  snprintf(fk, sizeof fk, "%s/code-python-kernel.py", fake);
  FILE *f = fopen(fk, "w");
  if (f) fputs(FAKE, f), fclose(f);

  uv_loop_t loop;
  uv_loop_init(&loop);
  xd_ctx ctx = {0};
  ctx.loop = &loop;
  ctx.workspace = ws;
  ctx.code_kernels = kernels;
  ctx.code_interrupt = hook;
  all x = {0};
  x.commands = xd_commands_new(&ctx);
  x.code = the_code = xd_code_new(&ctx);
  ctx.code_kernels = fake;
  x.code2 = xd_code_new(&ctx);
  xd_route routes[] = {{x.commands, xd_commands_route}, {x.code, xd_code_route}};
  xd_route route2 = {x.code2, xd_code_route};
  xd_server_opts o = {.loop = &loop, .routes = routes, .nroutes = 2};
  x.s1 = xd_server_new(&o);
  x.s2 = xd_listen_one(&loop, &route2, 1, &fake_port);
  if (!x.s1 || !x.s2 || xd_server_listen_tcp(x.s1, "127.0.0.1", 0, &port) != 0) {
    printf("server did not start\n0 passed, 1 failed\n");
    return 1;
  }
  xd_run_client(&loop, client, close_all, &x);
  CHECK(uv_loop_close(&loop) == 0);
  t_rmtree(ws);
  return t_summary();
}
