/* Unit tests of the pure C modules: byte buffers, tail retention, the execd event-stream parser (every case,
 * every chunk boundary) and the HTTP error mapping (bodies, 422 summaries, redaction). No network. */
#include <stdlib.h>
#include "harness.h"
#include "core/buf.h"
#include "core/events.h"
#include "opensandbox/error.h"

static void test_buf(void) {
  osb_buf b;
  osb_buf_init(&b);
  CHECK(osb_buf_append_str(&b, "hello") == 0);
  CHECK(osb_buf_appendf(&b, " %d-%s", 42, "x") == 0);
  CHECK_STR(b.data, "hello 42-x");
  CHECK(b.len == 10);
  osb_buf_consume(&b, 6);
  CHECK_STR(b.data, "42-x");
  osb_buf_consume(&b, 100);
  CHECK(b.len == 0);
  for (int i = 0; i < 10000; i++) osb_buf_append(&b, "abcdefgh", 8);
  CHECK(b.len == 80000);
  size_t n = 0;
  char *s = osb_buf_steal(&b, &n);
  CHECK(n == 80000 && s[79999] == 'h' && s[80000] == 0);
  CHECK(b.data == NULL && b.len == 0);
  free(s);
  s = osb_buf_steal(&b, &n); /* an empty buffer gives "" */
  CHECK(s && n == 0 && s[0] == 0);
  free(s);
  osb_buf_free(&b);
}

static void test_tail(void) {
  osb_tail t;
  size_t n;
  osb_tail_init(&t, 10);
  osb_tail_append(&t, "hello", 5);
  osb_tail_append(&t, "world!!", 7);
  const char *d = osb_tail_data(&t, &n);
  CHECK(n == 10 && memcmp(d, "lloworld!!", 10) == 0);
  CHECK(t.dropped == 2 && t.total == 12);
  osb_tail_append(&t, "0123456789abcdef", 16); /* a chunk larger than the window */
  d = osb_tail_data(&t, &n);
  CHECK(n == 10 && memcmp(d, "6789abcdef", 10) == 0);
  CHECK(t.dropped == 18 && t.total == 28);
  for (int i = 0; i < 1000; i++) osb_tail_append(&t, "xy", 2); /* compaction keeps memory bounded */
  d = osb_tail_data(&t, &n);
  CHECK(n == 10 && memcmp(d, "xyxyxyxyxy", 10) == 0);
  CHECK(t.b.cap <= 256); /* the first allocation's size */
  osb_tail_free(&t);

  osb_tail_init(&t, 0);
  osb_tail_append(&t, "abc", 3);
  osb_tail_data(&t, &n);
  CHECK(n == 0 && t.dropped == 3);
  osb_tail_free(&t);

  osb_tail_init(&t, -1);
  for (int i = 0; i < 1000; i++) osb_tail_append(&t, "abc", 3);
  osb_tail_data(&t, &n);
  CHECK(n == 3000 && t.dropped == 0);
  osb_tail_free(&t);

  osb_tail_init(&t, 4); /* "é" = C3 A9: a cut inside a character is realigned */
  osb_tail_append(&t, "a\xc3\xa9" "bcd", 6);
  osb_tail_align_utf8(&t);
  d = osb_tail_data(&t, &n);
  CHECK(n == 3 && memcmp(d, "bcd", 3) == 0 && t.dropped == 3);
  osb_tail_free(&t);
}

/* Records events as text lines "type|text|extra". */
typedef struct {
  osb_buf log;
  int stop_after;
  int seen;
} recorder;

static int rec_cb(void *ud, const osb_event *ev) {
  recorder *r = ud;
  static const char *names[] = {"init", "ping", "stdout", "stderr", "result", "execution_count", "status",
                                "error", "complete", "stream_error", "unknown"};
  osb_buf_appendf(&r->log, "%s|%s", names[ev->type], ev->text ? ev->text : "-");
  if (ev->type == OSB_EV_ERROR) {
    osb_buf_appendf(&r->log, "|%s|%s", ev->ename ? ev->ename : "-", ev->evalue ? ev->evalue : "-");
    const cJSON *l;
    cJSON_ArrayForEach(l, ev->traceback) osb_buf_appendf(&r->log, "|%s", l->valuestring);
  }
  if (ev->type == OSB_EV_STREAM_ERROR) osb_buf_appendf(&r->log, "|%s|%s", ev->code, ev->message);
  if (ev->type == OSB_EV_COMPLETE) osb_buf_appendf(&r->log, "|%g", ev->execution_time);
  if (ev->type == OSB_EV_EXECUTION_COUNT) osb_buf_appendf(&r->log, "|%g", ev->execution_count);
  if (ev->type == OSB_EV_RESULT)
    osb_buf_appendf(&r->log, "|%s", cJSON_GetObjectItem(ev->results, "text")->valuestring);
  osb_buf_append_str(&r->log, "\n");
  r->seen++;
  return r->stop_after && r->seen >= r->stop_after;
}

/* Parses `in` fed in chunks of `step` bytes (0 = all at once); returns the log (caller frees) and rc. */
static char *parse_all(const char *in, size_t len, size_t step, size_t max_line, int stop_after, int *rc,
                       char *err, size_t errlen) {
  recorder r;
  memset(&r, 0, sizeof r);
  r.stop_after = stop_after;
  osb_events *p = osb_events_new(max_line, rec_cb, &r);
  *rc = OSB_EVENTS_OK;
  if (!step) step = len ? len : 1;
  for (size_t off = 0; off < len && *rc == OSB_EVENTS_OK; off += step)
    *rc = osb_events_feed(p, in + off, len - off < step ? len - off : step);
  if (*rc == OSB_EVENTS_OK) *rc = osb_events_finish(p);
  if (err) snprintf(err, errlen, "%s", osb_events_error(p));
  osb_events_free(p);
  char *s = osb_buf_steal(&r.log, NULL);
  return s;
}

static const char TRANSCRIPT[] =
    "{\"type\":\"init\",\"text\":\"1fb8\",\"timestamp\":1}\n\n"
    "{\"type\":\"ping\",\"text\":\"pong\",\"timestamp\":1}\n\n"
    "{\"type\":\"stdout\",\"text\":\"hello\",\"timestamp\":2}\n\n"
    "{\"type\":\"stdout\",\"text\":\"\\n\"}\r\n\r\n"
    "data: {\"type\":\"stderr\",\"text\":\"\xc3\xa9rr\"}\n\n"
    "event: message\nid: 7\nretry: 100\n: a comment\n"
    "   \n"
    "{\"type\":\"result\",\"results\":{\"text\":\"42\"}}\n"
    "{\"type\":\"execution_count\",\"execution_count\":3}\n"
    "{\"type\":\"status\",\"text\":\"busy\"}\n"
    "{\"type\":\"brand_new\",\"text\":\"x\"}\n"
    "{\"no_type\":1}\n"
    "{\"type\":\"error\",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"3\",\"traceback\":[\"exit status 3\"]}}\n\n"
    "{\"code\":\"RUNTIME_ERROR\",\"message\":\"session is busy\"}\n\n"
    "{\"error\":\"metrics failed\"}\n"
    "{\"type\":\"execution_complete\",\"execution_time\":3}";

static const char EXPECTED[] =
    "init|1fb8\nping|pong\nstdout|hello\nstdout|\n\nstderr|\xc3\xa9rr\nresult|-|42\nexecution_count|-|3\n"
    "status|busy\nunknown|x\nunknown|-\nerror|-|CommandExecError|3|exit status 3\n"
    "stream_error|-|RUNTIME_ERROR|session is busy\nstream_error|-||metrics failed\ncomplete|-|3\n";

static void test_events_every_boundary(void) {
  int rc;
  size_t len = strlen(TRANSCRIPT);
  for (size_t step = 0; step <= len; step++) {
    char *log = parse_all(TRANSCRIPT, len, step, 0, 0, &rc, NULL, 0);
    if (rc != OSB_EVENTS_OK || strcmp(log, EXPECTED) != 0) {
      printf("  step %zu: rc %d\n%s", step, rc, log);
      CHECK(0);
      free(log);
      break;
    }
    free(log);
  }
}

static void test_events_errors(void) {
  int rc;
  char err[256];
  char *log = parse_all("{\"type\":\"init\"}\n{not json\n", 26, 0, 0, 0, &rc, err, sizeof err);
  CHECK(rc == OSB_EVENTS_ERROR);
  CHECK(strstr(err, "not JSON") != NULL);
  CHECK_STR(log, "init|-\n");
  free(log);
  log = parse_all("[1,2]\n", 6, 0, 0, 0, &rc, err, sizeof err);
  CHECK(rc == OSB_EVENTS_ERROR && strstr(err, "not an object"));
  free(log);
  log = parse_all("{\"type\":5}\n", 11, 0, 0, 0, &rc, err, sizeof err);
  CHECK(rc == OSB_EVENTS_ERROR && strstr(err, "type is not a string"));
  free(log);
  log = parse_all("{\"type\":\"error\"}\n", 17, 0, 0, 0, &rc, err, sizeof err);
  CHECK(rc == OSB_EVENTS_ERROR && strstr(err, "no error object"));
  free(log);
  log = parse_all("{\"a\":1} trailing\n", 17, 0, 0, 0, &rc, err, sizeof err);
  CHECK(rc == OSB_EVENTS_ERROR && strstr(err, "trailing"));
  free(log);
  /* a line over the bound is an error even before its newline arrives (never unbounded growth) */
  char big[200];
  memset(big, 'x', sizeof big);
  log = parse_all(big, sizeof big, 7, 64, 0, &rc, err, sizeof err);
  CHECK(rc == OSB_EVENTS_ERROR && strstr(err, "too long"));
  free(log);
  /* control characters in the offending line are not copied into the message */
  log = parse_all("\x01\x02zz\n", 5, 0, 0, 0, &rc, err, sizeof err);
  CHECK(rc == OSB_EVENTS_ERROR && strchr(err, '\x01') == NULL);
  free(log);
}

static void test_events_stop(void) {
  int rc;
  char *log = parse_all(TRANSCRIPT, strlen(TRANSCRIPT), 5, 0, 3, &rc, NULL, 0);
  CHECK(rc == OSB_EVENTS_STOPPED);
  CHECK_STR(log, "init|1fb8\nping|pong\nstdout|hello\n");
  free(log);
}

static void map(osb_error *e, long status, const char *body, const char *rid) {
  osb_http_result r;
  memset(&r, 0, sizeof r);
  r.status = status;
  r.body = body;
  r.body_len = strlen(body);
  r.request_id = rid;
  r.attempts = 1;
  const char *secrets[] = {"sekrit-key", "tok-123", NULL};
  osb_error_from_http(e, &r, secrets, "fallback-id");
}

static void test_error_mapping(void) {
  osb_error e;
  map(&e, 404, "{\"code\":\"DOCKER::SANDBOX_NOT_FOUND\",\"message\":\"Sandbox x not found.\"}", "rid");
  CHECK(e.kind == OSB_KIND_API && e.status == 404);
  CHECK_STR(e.code, "DOCKER::SANDBOX_NOT_FOUND");
  CHECK_STR(e.message, "Sandbox x not found.");
  CHECK_STR(e.request_id, "rid");
  map(&e, 401, "{\"error\":\"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN\"}", NULL);
  CHECK_STR(e.code, "HTTP_401");
  CHECK_STR(e.message, "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN");
  CHECK_STR(e.request_id, "fallback-id");
  map(&e, 422,
      "{\"detail\":[{\"loc\":[\"body\",\"timeout\"],\"msg\":\"Input should be greater than or equal to 60\"},"
      "{\"loc\":[\"query\",\"items\",3],\"msg\":\"bad\"}]}",
      NULL);
  CHECK_STR(e.message, "body.timeout: Input should be greater than or equal to 60; query.items.3: bad");
  map(&e, 404, "{\"detail\":\"Not Found\"}", NULL);
  CHECK_STR(e.message, "Not Found");
  map(&e, 502, "<html>\nBad gateway\n</html>", NULL);
  CHECK_STR(e.code, "HTTP_502");
  CHECK_STR(e.message, "HTTP 502: <html> Bad gateway </html>");
  map(&e, 500, "{\"code\":\"X\",\"message\":\"key sekrit-key leaked twice: sekrit-key, tok-123\"}", NULL);
  CHECK_STR(e.message, "key *** leaked twice: ***, ***");
  map(&e, 503, "", NULL);
  CHECK_STR(e.message, "HTTP 503");

  osb_http_result r;
  memset(&r, 0, sizeof r);
  r.error = OSB_HTTP_ETRANSPORT;
  r.message = "Failed to connect";
  r.attempts = 3;
  osb_error_from_http(&e, &r, NULL, NULL);
  CHECK(e.kind == OSB_KIND_TRANSPORT && e.attempts == 3 && e.status == 0);
  CHECK_STR(e.code, "TRANSPORT");
  r.error = OSB_HTTP_EIDLE;
  osb_error_from_http(&e, &r, NULL, NULL);
  CHECK(e.kind == OSB_KIND_TIMEOUT);
  CHECK_STR(e.code, "STREAM_IDLE");
  CHECK_STR(osb_kind_name(OSB_KIND_PROTOCOL), "protocol");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  RUN(test_buf);
  RUN(test_tail);
  RUN(test_events_every_boundary);
  RUN(test_events_errors);
  RUN(test_events_stop);
  RUN(test_error_mapping);
  return t_summary();
}
