/* Unit tests of the pure C modules: byte buffers, tail retention, the execd event-stream parser (every case,
 * every chunk boundary), the HTTP error mapping (bodies, 422 summaries, redaction) and the PTY WebSocket frame and
 * marker parser (every split of a marker stream). No network. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "harness.h"
#include "core/buf.h"
#include "core/events.h"
#include "core/tls_ca.h"
#include "opensandbox/error.h"
#include "opensandbox/ptyframe.h"

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

typedef struct {
  char text[8][64];
  size_t len[8];
  int n;
} text_recorder;

static int text_cb(void *ud, const osb_event *ev) {
  text_recorder *r = ud;
  if (ev->text && r->n < 8 && ev->text_len < sizeof r->text[0]) {
    memcpy(r->text[r->n], ev->text, ev->text_len);
    r->len[r->n++] = ev->text_len;
  }
  return 0;
}

/* A NUL in an output line ("\u0000", what the real execd sends for a NUL byte) does not cut the text. */
static void test_events_text_with_nul(void) {
  static const char in[] =
      "{\"type\":\"stdout\",\"text\":\"nul:\\u0000:end\",\"timestamp\":1}\n\n"
      "{\"type\":\"stdout\",\"text\":\"\\u0000 \\u00e9 \\ud83c\\udf89 \\\\u0000 \\\"q\\\"\\n\\t/\\/\"}\n"
      "{\"type\":\"stdout\",\"x\":{\"text\":\"\\u0000\"},\"text\" : \"a\\u0000b\"}\n"
      "{\"type\":\"text\",\"text\":\"x\\u0000y\"}\n"
      "{\"type\":\"stdout\",\"text\":\"plain\"}\n";
  text_recorder r;
  memset(&r, 0, sizeof r);
  osb_events *p = osb_events_new(0, text_cb, &r);
  CHECK(osb_events_feed(p, in, sizeof in - 1) == OSB_EVENTS_OK);
  CHECK(osb_events_finish(p) == OSB_EVENTS_OK);
  osb_events_free(p);
  CHECK(r.n == 5);
  CHECK(r.len[0] == 9 && memcmp(r.text[0], "nul:\0:end", 9) == 0);
  static const char second[] = "\0 \xc3\xa9 \xf0\x9f\x8e\x89 \\u0000 \"q\"\n\t//";
  CHECK(r.len[1] == sizeof second - 1 && memcmp(r.text[1], second, sizeof second - 1) == 0);
  CHECK(r.len[2] == 3 && memcmp(r.text[2], "a\0b", 3) == 0);
  CHECK(r.len[3] == 3 && memcmp(r.text[3], "x\0y", 3) == 0);
  CHECK(r.len[4] == 5 && memcmp(r.text[4], "plain", 5) == 0);
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

/* Lenient mode (the code interpreter): a line over the bound keeps the decodable start of a stdout/stderr text and
 * counts the rest exactly (escapes, surrogate pairs, a character cut off at the bound); any other oversized line is
 * OSB_EV_OVERSIZED with its sniffed type; the lines around it are untouched. Every bound and several chunkings. */
typedef struct {
  osb_buf log;
  osb_buf out; /* the stdout text delivered */
  unsigned long long out_dropped;
} over_rec;

static int over_cb(void *ud, const osb_event *ev) {
  over_rec *r = ud;
  if (ev->type == OSB_EV_STDOUT) {
    osb_buf_append(&r->out, ev->text, ev->text_len);
    r->out_dropped += ev->text_dropped;
    osb_buf_appendf(&r->log, "stdout%s;", ev->line_bytes ? "(over)" : "");
  } else if (ev->type == OSB_EV_OVERSIZED) {
    osb_buf_appendf(&r->log, "oversized:%s:%llu;", ev->type_name ? ev->type_name : "-", ev->line_bytes);
  } else {
    osb_buf_appendf(&r->log, "%d:%.*s;", (int)ev->type, (int)ev->text_len, ev->text ? ev->text : "");
  }
  return 0;
}

static void test_events_oversized(void) {
  osb_buf in;
  osb_buf_init(&in);
  osb_buf_append_str(&in, "{\"type\":\"init\",\"text\":\"c\"}\n");
  osb_buf_append_str(&in, "data: {\"type\":\"stdout\",\"text\":\"");
  for (int i = 0; i < 300; i++) osb_buf_append_str(&in, "a");
  osb_buf_append_str(&in, "\\n\\u00e9\\ud83c\\udf89\xc3\xa9\\\"\",\"timestamp\":1}\r\n");
  size_t result_at = in.len;
  osb_buf_append_str(&in, "{\"type\":\"result\",\"results\":{\"text\":\"");
  for (int i = 0; i < 300; i++) osb_buf_append_str(&in, "z");
  osb_buf_append_str(&in, "\"}}\n");
  size_t result_len = in.len - result_at - 1;
  osb_buf_append_str(&in, "{\"type\":\"stderr\",\"text\":\"ok\"}\n");
  osb_buf_append_str(&in, "{\"text\":\"");
  for (int i = 0; i < 300; i++) osb_buf_append_str(&in, "q");
  osb_buf_append_str(&in, "\"}"); /* no newline: delivered by finish */
  osb_buf full; /* the whole decoded stdout text */
  osb_buf_init(&full);
  for (int i = 0; i < 300; i++) osb_buf_append_str(&full, "a");
  osb_buf_append_str(&full, "\n\xc3\xa9\xf0\x9f\x8e\x89\xc3\xa9\"");
  char expect_log[256];
  snprintf(expect_log, sizeof expect_log, "0:c;stdout(over);oversized:result:%zu;3:ok;oversized:-:311;", result_len);
  static const size_t steps[] = {1, 2, 3, 5, 7, 13, 64, 100000};
  int bad = 0;
  for (size_t max_line = 40; max_line <= 120 && !bad; max_line++) {
    for (size_t k = 0; k < sizeof steps / sizeof steps[0] && !bad; k++) {
      over_rec r;
      memset(&r, 0, sizeof r);
      osb_events *p = osb_events_new(max_line, over_cb, &r);
      osb_events_set_lenient(p, 1);
      int rc = OSB_EVENTS_OK;
      for (size_t off = 0; off < in.len && rc == OSB_EVENTS_OK; off += steps[k])
        rc = osb_events_feed(p, in.data + off, in.len - off < steps[k] ? in.len - off : steps[k]);
      if (rc == OSB_EVENTS_OK) rc = osb_events_finish(p);
      osb_events_free(p);
      const char *log = r.log.data ? r.log.data : "";
      int ok = rc == OSB_EVENTS_OK && strcmp(log, expect_log) == 0 && r.out.len + r.out_dropped == full.len &&
               (r.out.len == 0 || memcmp(r.out.data, full.data, r.out.len) == 0) &&
               (r.out.len == full.len || ((unsigned char)full.data[r.out.len] & 0xC0) != 0x80);
      if (!ok) {
        printf("  max_line %zu step %zu: rc %d log %s kept %zu dropped %llu\n", max_line, steps[k], rc, log, r.out.len,
               r.out_dropped);
        bad = 1;
      }
      osb_buf_free(&r.log);
      osb_buf_free(&r.out);
    }
  }
  CHECK(!bad);
  osb_buf_free(&in);
  osb_buf_free(&full);
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

/* ---- PTY frames and markers (ptyframe.c) ---- */

#define PTY_NONCE "0123456789abcdef0123456789abcdef"

static void test_pty_frames(void) {
  osb_pty_frame f;
  CHECK(osb_pty_frame_parse(1, "\x01hi", 3, &f) == OSB_PTY_STDOUT && f.len == 2 && !memcmp(f.data, "hi", 2));
  CHECK(osb_pty_frame_parse(1, "\x02" "err", 4, &f) == OSB_PTY_STDERR && f.len == 3);
  CHECK(osb_pty_frame_parse(1, "\x01", 1, &f) == OSB_PTY_STDOUT && f.len == 0);
  const char rep[] = "\x03\x00\x00\x00\x00\x00\x01\x02\x03" "abc";
  CHECK(osb_pty_frame_parse(1, rep, sizeof rep - 1, &f) == OSB_PTY_REPLAY);
  CHECK(f.offset == 0x010203 && f.len == 3 && !memcmp(f.data, "abc", 3));
  CHECK(osb_pty_frame_parse(1, rep, 8, &f) == OSB_PTY_IGNORED); /* offset cut short */
  CHECK(osb_pty_frame_parse(1, "", 0, &f) == OSB_PTY_IGNORED);
  CHECK(osb_pty_frame_parse(1, "\x07x", 2, &f) == OSB_PTY_IGNORED);
  const char *t = "{\"type\":\"connected\"}";
  CHECK(osb_pty_frame_parse(0, t, strlen(t), &f) == OSB_PTY_CONNECTED);
  t = "{\"type\":\"exit\",\"exit_code\":3}";
  CHECK(osb_pty_frame_parse(0, t, strlen(t), &f) == OSB_PTY_EXIT && f.exit_code == 3);
  t = "{\"type\":\"exit\"}";
  CHECK(osb_pty_frame_parse(0, t, strlen(t), &f) == OSB_PTY_EXIT && f.exit_code == -1);
  t = "{\"type\":\"error\",\"code\":\"GONE\",\"error\":\"no session\"}";
  CHECK(osb_pty_frame_parse(0, t, strlen(t), &f) == OSB_PTY_ERROR);
  CHECK_STR(f.error_code, "GONE");
  CHECK_STR(f.error_text, "no session");
  t = "{\"type\":\"error\"}";
  CHECK(osb_pty_frame_parse(0, t, strlen(t), &f) == OSB_PTY_ERROR);
  CHECK_STR(f.error_code, "error");
  CHECK_STR(f.error_text, "");
  t = "{\"type\":\"pong\"}";
  CHECK(osb_pty_frame_parse(0, t, strlen(t), &f) == OSB_PTY_PONG);
  CHECK(osb_pty_frame_parse(0, "{\"type\":", 8, &f) == OSB_PTY_IGNORED);
  CHECK(osb_pty_frame_parse(0, "[1]", 3, &f) == OSB_PTY_IGNORED);
}

static void test_pty_replay(void) {
  uint64_t received = 10, gap = 0;
  CHECK(osb_pty_replay_skip(&received, 4, 6, &gap) == 6 && received == 10 && gap == 0); /* all seen */
  CHECK(osb_pty_replay_skip(&received, 6, 8, &gap) == 4 && received == 14 && gap == 0); /* overlap */
  CHECK(osb_pty_replay_skip(&received, 20, 5, &gap) == 0 && received == 25 && gap == 6); /* ring overwrote 6 */
  CHECK(osb_pty_replay_skip(&received, 25, 0, &gap) == 0 && received == 25);
}

typedef struct {
  char out[2][512];
  size_t n[2];
} pty_sink;

static void pty_emit(void *ud, int which, const char *s, size_t n) {
  pty_sink *k = ud;
  if (k->n[which] + n < sizeof k->out[which]) memcpy(k->out[which] + k->n[which], s, n);
  k->n[which] += n;
}

/* Feeds stream in chunks of `step` bytes (stdout), flushes, and returns the output as a string in k. */
static size_t pty_feed(osb_pty_markers *m, pty_sink *k, const char *stream, size_t len, size_t step) {
  size_t stripped = 0;
  for (size_t off = 0; off < len; off += step)
    stripped += osb_pty_markers_scan(m, 0, stream + off, len - off < step ? len - off : step, pty_emit, k);
  osb_pty_markers_flush(m, 0, pty_emit, k);
  k->out[0][k->n[0]] = 0;
  return stripped;
}

static void test_pty_markers_every_split(void) {
  const char *run = "\x1fOSB-RUN:" PTY_NONCE "\x1f", *ex = "\x1fOSB-EXIT:" PTY_NONCE ":-7\x1f";
  char stream[256];
  int n = snprintf(stream, sizeof stream, "%sbefore\n%safter", run, ex);
  for (size_t step = 1; step <= (size_t)n; step++) {
    osb_pty_markers m;
    osb_pty_markers_init(&m, PTY_NONCE);
    pty_sink k;
    memset(&k, 0, sizeof k);
    size_t stripped = pty_feed(&m, &k, stream, (size_t)n, step);
    CHECK_STR(k.out[0], "before\nafter");
    CHECK(stripped == strlen(run) + strlen(ex));
    CHECK(m.got_run && m.got_exit && !m.got_err && m.exit_code == -7);
  }
}

static void test_pty_markers_not_markers(void) {
  osb_pty_markers m;
  osb_pty_markers_init(&m, PTY_NONCE);
  pty_sink k;
  memset(&k, 0, sizeof k);
  /* another nonce, a bare 0x1f, a 12-digit status, a status without digits: all output as they are */
  const char *s = "\x1fOSB-ERR:ffffffffffffffffffffffffffffffff\x1f|\x1f|\x1fOSB-EXIT:" PTY_NONCE
                  ":123456789012\x1f|\x1fOSB-EXIT:" PTY_NONCE ":-\x1f";
  CHECK(pty_feed(&m, &k, s, strlen(s), 5) == 0);
  CHECK_STR(k.out[0], s);
  CHECK(!m.got_err && !m.got_exit && !m.got_run);
  /* a marker prefix at the end of the stream is held back, then output by the flush */
  osb_pty_markers_init(&m, PTY_NONCE);
  memset(&k, 0, sizeof k);
  CHECK(osb_pty_markers_scan(&m, 1, "x\x1fOSB-ERR:0123", 14, pty_emit, &k) == 0);
  CHECK(k.n[1] == 1 && m.hold_len[1] == 13);
  osb_pty_markers_flush(&m, 1, pty_emit, &k);
  CHECK(k.n[1] == 14 && m.hold_len[1] == 0 && !memcmp(k.out[1], "x\x1fOSB-ERR:0123", 14));
  /* a held prefix that turns out not to be one: its bytes come out in order, the marker after it is stripped */
  osb_pty_markers_init(&m, PTY_NONCE);
  memset(&k, 0, sizeof k);
  CHECK(osb_pty_markers_scan(&m, 1, "a\x1fOSB-", 6, pty_emit, &k) == 0);
  size_t stripped = osb_pty_markers_scan(&m, 1, "\x1fOSB-ERR:" PTY_NONCE "\x1fz", 43, pty_emit, &k);
  CHECK(stripped == 42 && m.got_err && k.n[1] == 7 && !memcmp(k.out[1], "a\x1fOSB-z", 7));
}

/* The PTY frame parser on the real execd's frames: every server frame of the recorded WebSocket sessions
 * (test/fixtures/opensandbox-transcripts/09-pty-websocket.json, execd v1.0.19) decodes to what was recorded. */
static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  osb_buf b;
  osb_buf_init(&b);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) osb_buf_append(&b, chunk, n);
  fclose(f);
  return osb_buf_steal(&b, NULL);
}

static size_t unhex(const char *hex, char *out, size_t cap) {
  size_t n = 0;
  for (; hex[0] && hex[1] && n < cap; hex += 2) {
    unsigned v;
    if (sscanf(hex, "%2x", &v) != 1) break;
    out[n++] = (char)v;
  }
  return n;
}

static void test_pty_frames_real_execd(void) {
  char *text = read_file("../fixtures/opensandbox-transcripts/09-pty-websocket.json");
  CHECK(text != NULL);
  if (!text) return;
  cJSON *root = cJSON_Parse(text);
  free(text);
  CHECK(root != NULL);
  static char payload[1 << 16];
  int checked = 0;
  const cJSON *ex;
  cJSON_ArrayForEach(ex, cJSON_GetObjectItem(root, "exchanges")) {
    const cJSON *frames = cJSON_GetObjectItem(ex, "frames");
    const cJSON *fr;
    cJSON_ArrayForEach(fr, frames) {
      const char *dir = cJSON_GetObjectItem(fr, "dir")->valuestring;
      int opcode = cJSON_GetObjectItem(fr, "opcode")->valueint;
      if (strcmp(dir, "in") != 0 || (opcode != 1 && opcode != 2)) continue;
      osb_pty_frame f;
      if (opcode == 1) {
        const char *t = cJSON_GetObjectItem(fr, "text")->valuestring;
        cJSON *j = cJSON_Parse(t);
        const char *type = cJSON_GetObjectItem(j, "type")->valuestring;
        int kind = osb_pty_frame_parse(0, t, strlen(t), &f);
        if (strcmp(type, "connected") == 0) CHECK(kind == OSB_PTY_CONNECTED);
        else if (strcmp(type, "pong") == 0) CHECK(kind == OSB_PTY_PONG);
        else if (strcmp(type, "exit") == 0) {
          CHECK(kind == OSB_PTY_EXIT);
          CHECK(f.exit_code == cJSON_GetObjectItem(j, "exit_code")->valueint);
        } else if (strcmp(type, "error") == 0) {
          CHECK(kind == OSB_PTY_ERROR);
          CHECK(strcmp(f.error_code, cJSON_GetObjectItem(j, "code")->valuestring) == 0);
          CHECK(strcmp(f.error_text, cJSON_GetObjectItem(j, "error")->valuestring) == 0);
        } else {
          CHECK(0);
        }
        cJSON_Delete(j);
      } else {
        size_t n = unhex(cJSON_GetObjectItem(fr, "hex")->valuestring, payload, sizeof payload);
        const cJSON *dec = cJSON_GetObjectItem(fr, "decoded");
        int channel = cJSON_GetObjectItem(dec, "channel")->valueint;
        int kind = osb_pty_frame_parse(1, payload, n, &f);
        size_t head = channel == 3 ? 9 : 1;
        CHECK(kind == (channel == 1 ? OSB_PTY_STDOUT : channel == 2 ? OSB_PTY_STDERR : OSB_PTY_REPLAY));
        CHECK(f.len == n - head && memcmp(f.data, payload + head, f.len) == 0);
        if (channel == 3) CHECK(f.offset == (uint64_t)cJSON_GetObjectItem(dec, "offset")->valuedouble);
      }
      checked++;
    }
  }
  cJSON_Delete(root);
  CHECK(checked >= 60);
}

static void test_tls_ca(void) {
  char dir[] = "/tmp/osb-ca-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char present[64];
  snprintf(present, sizeof present, "%s/bundle.pem", dir);
  FILE *f = fopen(present, "w");
  CHECK(f != NULL);
  fclose(f);
  char missing[64];
  snprintf(missing, sizeof missing, "%s/none.pem", dir);
  const char *const cands[] = {missing, present, NULL};
  /* the first readable candidate */
  osb_tls_ca ca = osb_tls_pick_ca(NULL, NULL, cands);
  CHECK(ca.file == present && ca.dir == NULL);
  /* the variables win, each on its own; an empty one counts as unset */
  ca = osb_tls_pick_ca("/x/ca.pem", NULL, cands);
  CHECK(ca.file && strcmp(ca.file, "/x/ca.pem") == 0 && ca.dir == NULL);
  ca = osb_tls_pick_ca(NULL, "/x/certs", cands);
  CHECK(ca.file == NULL && ca.dir && strcmp(ca.dir, "/x/certs") == 0);
  ca = osb_tls_pick_ca("", "", cands);
  CHECK(ca.file == present && ca.dir == NULL);
  const char *const none[] = {missing, NULL};
  ca = osb_tls_pick_ca(NULL, NULL, none);
  CHECK(ca.file == NULL && ca.dir == NULL);
  remove(present);
  rmdir(dir);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  RUN(test_buf);
  RUN(test_tail);
  RUN(test_events_every_boundary);
  RUN(test_events_errors);
  RUN(test_events_text_with_nul);
  RUN(test_events_stop);
  RUN(test_events_oversized);
  RUN(test_error_mapping);
  RUN(test_pty_frames);
  RUN(test_pty_frames_real_execd);
  RUN(test_pty_replay);
  RUN(test_pty_markers_every_split);
  RUN(test_pty_markers_not_markers);
  RUN(test_tls_ca);
  return t_summary();
}
