/* Unit tests of the C execd's commands rules (src/execd: json.c, lines.c, logring.c, cmdreq.c): Go's JSON string
 * escaping and JavaScript's number text, the line splitter (terminators, long lines cut at UTF-8 boundaries, stop
 * and resume), the bounded log ring, Go's int64 Duration arithmetic, the request validation wording and the path
 * expansion. The expected texts are what the Node execd (lib/dev-server/execd, now deleted) answered. The sources are compiled
 * into this test (one translation unit), so the Makefile needs only the test's name. */
#define _GNU_SOURCE /* the sources below use memmem and pipe2 */
#include "harness.h"

#include <pwd.h>

#include "../../src/execd/json.c"
#include "../../src/execd/lines.c"
#include "../../src/execd/utf8.c"
#include "../../src/execd/logring.c"
#include "../../src/execd/idfile.c"
#include "../../src/execd/cmdreq.c"

static char *go_json(const char *s, size_t len) {
  osb_buf b = {0};
  xd_json_str(&b, s, len);
  return osb_buf_steal(&b, NULL);
}

static void test_go_json_escaping(void) {
  static const char in[] = "a\"\\\n\r\t\b\f\x01\x1f<>&\x7f \xe2\x80\xa8\xe2\x80\xa9 \xc3\xa9\xe6\x97\xa5\xf0\x9f\x8e\x89";
  char *s = go_json(in, sizeof in - 1);
  CHECK_STR(s, "\"a\\\"\\\\\\n\\r\\t\\b\\f\\u0001\\u001f\\u003c\\u003e\\u0026\x7f \\u2028\\u2029 \xc3\xa9\xe6\x97\xa5\xf0\x9f\x8e\x89\"");
  free(s);
  /* invalid UTF-8: each byte that does not start a valid sequence is one \ufffd (Go's encoder) */
  static const char bad[] = "x\xff\xe2\x82y\xc0\x80\xed\xa0\x80\xf4\x90\x80\x80z";
  s = go_json(bad, sizeof bad - 1);
  CHECK_STR(s, "\"x\\ufffd\\ufffd\\ufffdy\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffdz\"");
  free(s);
  /* a NUL byte in the middle is data */
  s = go_json("nul:\0:end", 9);
  CHECK_STR(s, "\"nul:\\u0000:end\"");
  free(s);
  osb_buf b = {0};
  xd_js_json_str(&b, "/$X <a> \"q\"\xff", 12);
  CHECK_STR(b.data, "\"/$X <a> \\\"q\\\"\xef\xbf\xbd\"");
  osb_buf_free(&b);
}

static void test_js_number(void) {
  static const struct {
    double v;
    const char *text;
  } cases[] = {
      {0, "0"}, {-0.0, "0"}, {3, "3"}, {-3, "-3"}, {1.5, "1.5"}, {0.1, "0.1"}, {100, "100"}, {1e20, "100000000000000000000"},
      {1e21, "1e+21"}, {1e-7, "1e-7"}, {0.000001, "0.000001"}, {123456789012345678901.0, "123456789012345680000"},
      {-2.5e-10, "-2.5e-10"}, {4294967296.0, "4294967296"}, {1.7976931348623157e308, "1.7976931348623157e+308"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    osb_buf b = {0};
    xd_js_number(&b, cases[i].v);
    CHECK_STR(b.data, cases[i].text);
    osb_buf_free(&b);
  }
}

typedef struct {
  char lines[16][64];
  size_t n;
  int stop_after; /* return 0 for the line with this index (-1: never) */
} got_lines;

static int collect(void *arg, const char *t, size_t len) {
  got_lines *g = arg;
  if (g->n < 16 && len < 64) {
    memcpy(g->lines[g->n], t, len);
    g->lines[g->n][len] = 0;
  }
  return (int)g->n++ != g->stop_after;
}

static void split(const char *const *chunks, size_t nchunks, size_t max, got_lines *g) {
  xd_lines l;
  memset(g, 0, sizeof *g);
  g->stop_after = -1;
  xd_lines_init(&l, max, collect, g);
  for (size_t i = 0; i < nchunks; i++) xd_lines_push(&l, chunks[i], strlen(chunks[i]));
  xd_lines_flush(&l);
  xd_lines_free(&l);
}

static void test_lines_terminators(void) {
  got_lines g;
  const char *one[] = {"a\r\nb\rc\n\rd\r\r\ne\r"};
  split(one, 1, 0, &g);
  CHECK(g.n == 7);
  const char *want[] = {"a", "b", "c", "\n", "d", "\n", "e"};
  for (size_t i = 0; i < 7 && i < g.n; i++) CHECK_STR(g.lines[i], want[i]);
  /* \r\n across two pushes counts once; a partial line only by flush */
  const char *three[] = {"a\r", "\nb\r", "c"};
  split(three, 3, 0, &g);
  CHECK(g.n == 3);
  CHECK_STR(g.lines[0], "a");
  CHECK_STR(g.lines[1], "b");
  CHECK_STR(g.lines[2], "c");
  const char *empty[] = {"a\n\n\nb\n"};
  split(empty, 1, 0, &g);
  CHECK(g.n == 4);
  CHECK_STR(g.lines[1], "\n");
  CHECK_STR(g.lines[2], "\n");
  CHECK_STR(g.lines[3], "b");
}

static void test_lines_long_line_utf8(void) {
  got_lines g;
  const char *ten[] = {"abcdefghij\n"};
  split(ten, 1, 4, &g);
  CHECK(g.n == 3);
  CHECK_STR(g.lines[0], "abcd");
  CHECK_STR(g.lines[1], "efgh");
  CHECK_STR(g.lines[2], "ij");
  /* the piece is cut back before a character that straddles the limit */
  const char *utf[] = {"ab\xc3\xa9" "cd\n"};
  split(utf, 1, 3, &g);
  CHECK(g.n == 3);
  CHECK_STR(g.lines[0], "ab");
  CHECK_STR(g.lines[1], "\xc3\xa9" "c");
  CHECK_STR(g.lines[2], "d");
  /* not UTF-8 at the limit: cut there */
  const char *raw[] = {"\x80\x80\x80\x80\x80\n"};
  split(raw, 1, 2, &g);
  CHECK(g.n == 3);
  CHECK(strlen(g.lines[0]) == 2 && strlen(g.lines[1]) == 2 && strlen(g.lines[2]) == 1);
}

static void test_lines_stop_resume(void) {
  got_lines g;
  memset(&g, 0, sizeof g);
  g.stop_after = 0;
  xd_lines l;
  xd_lines_init(&l, 0, collect, &g);
  xd_lines_push(&l, "one\ntwo\nthr", 11);
  CHECK(g.n == 1 && xd_lines_blocked(&l));
  xd_lines_push(&l, "ee\nfour", 7); /* arrives while stopped: kept behind, in order */
  CHECK(g.n == 1);
  g.stop_after = 2;
  xd_lines_resume(&l);
  CHECK(g.n == 3 && xd_lines_blocked(&l));
  CHECK_STR(g.lines[1], "two");
  CHECK_STR(g.lines[2], "three");
  xd_lines_flush(&l); /* the output ended: everything, whatever the consumer says */
  CHECK(g.n == 4);
  CHECK_STR(g.lines[3], "four");
  xd_lines_free(&l);
  /* discard: nothing more is delivered or kept */
  memset(&g, 0, sizeof g);
  g.stop_after = -1;
  xd_lines_init(&l, 0, collect, &g);
  xd_lines_push(&l, "a\npartial", 9);
  xd_lines_discard(&l);
  xd_lines_push(&l, "more\n", 5);
  xd_lines_flush(&l);
  CHECK(g.n == 1);
  xd_lines_free(&l);
}

static void test_logring(void) {
  xd_logring r;
  xd_logring_init(&r, 8);
  osb_buf b = {0};
  xd_logring_push(&r, "abcdef", 6);
  xd_logring_push(&r, "ghij", 4);
  CHECK(r.end == 10 && xd_logring_start(&r) == 2);
  xd_logring_read(&r, 0, &b);
  CHECK_STR(b.data, "cdefghij");
  osb_buf_reset(&b);
  xd_logring_read(&r, 5, &b);
  CHECK_STR(b.data, "fghij");
  osb_buf_reset(&b);
  xd_logring_read(&r, 100, &b);
  CHECK(b.len == 0);
  xd_logring_push(&r, "kl", 2); /* wraps around inside the buffer */
  osb_buf_reset(&b);
  xd_logring_read(&r, 0, &b);
  CHECK_STR(b.data, "efghijkl");
  xd_logring_push(&r, "0123456789ABCDEFGHIJ", 20); /* larger than the ring: its newest 8 bytes */
  CHECK(r.end == 32 && xd_logring_start(&r) == 24);
  osb_buf_reset(&b);
  xd_logring_read(&r, 30, &b);
  CHECK_STR(b.data, "IJ");
  osb_buf_free(&b);
  xd_logring_free(&r);
  /* growth by doubling keeps the order */
  xd_logring_init(&r, 1 << 20);
  char chunk[3000];
  for (int i = 0; i < 10; i++) {
    memset(chunk, 'a' + i, sizeof chunk);
    xd_logring_push(&r, chunk, sizeof chunk);
  }
  osb_buf_reset(&b);
  xd_logring_read(&r, 2999, &b);
  CHECK(b.len == 27001 && b.data[0] == 'a' && b.data[1] == 'b' && b.data[27000] == 'j');
  osb_buf_free(&b);
  xd_logring_free(&r);
}

static void test_go_duration(void) {
  CHECK(xd_go_duration_ms(1000) == 1000);
  CHECK(xd_go_duration_ms(9223372036854.0) == 9223372036854.0);
  CHECK(xd_go_duration_ms(9223372036855.0) == 0); /* past int64 nanoseconds: negative, no deadline */
  CHECK(xd_go_duration_ms(1e13) == 0);
  CHECK(xd_go_duration_ms(9223372036854775808.0) == 0);
  CHECK(xd_go_duration_ms(18446744073710.0) == 0.448384); /* wraps around to a positive 448384 ns */
  CHECK(xd_go_duration_ms(0) == 0);
}

static void expect_parse(const char *body, const char *message) {
  osb_buf msg = {0};
  cJSON *out = NULL;
  char nul[5];
  int rc = xd_cmd_parse(body, strlen(body), &out, nul, &msg);
  if (message) {
    CHECK(rc == -1 && out == NULL);
    CHECK_STR(msg.data, message);
  } else {
    CHECK(rc == 0 && out != NULL);
  }
  cJSON_Delete(out);
  osb_buf_free(&msg);
}

#define DEC "error parsing request, MAYBE invalid body format. "
#define VAL "invalid request, validation error "

static void test_parse_wording(void) {
  expect_parse("", DEC "EOF");
  expect_parse("{\"command\": \"echo hi\", ", DEC "unexpected EOF");
  /* regression: cJSON reports an error at the end of its input on the last byte (here the ':'): still a cut body */
  expect_parse("{\"command\":", DEC "unexpected EOF");
  expect_parse("{\"command\":\"x\"}x", DEC "invalid character 'x' in JSON at offset 15");
  {
    cJSON *v = NULL;
    osb_buf m = {0};
    CHECK(xd_json_parse("{\"a\":", 5, &v, &m) == -1 && v == NULL);
    CHECK_STR(m.data, "unexpected EOF");
    osb_buf_free(&m);
    CHECK(xd_json_parse(" {\"a\":[1]} ", 11, &v, &m) == 0 && v != NULL);
    cJSON_Delete(v);
  }
  expect_parse("[1,2]", DEC "json: cannot unmarshal array into Go value of type model.RunCommandRequest");
  expect_parse("null", DEC "json: cannot unmarshal null into Go value of type model.RunCommandRequest");
  expect_parse("{\"command\":123}", DEC "json: cannot unmarshal number into Go struct field RunCommandRequest.command of type string");
  expect_parse("{\"command\":\"x\",\"timeout\":\"1000\"}", DEC "json: cannot unmarshal string into Go struct field RunCommandRequest.timeout of type int64");
  expect_parse("{\"command\":\"x\",\"timeout\":1.5}", DEC "json: cannot unmarshal number into Go struct field RunCommandRequest.timeout of type int64");
  expect_parse("{\"command\":\"x\",\"background\":\"yes\"}", DEC "json: cannot unmarshal string into Go struct field RunCommandRequest.background of type bool");
  expect_parse("{\"command\":\"x\",\"timeout\":100000000000000000000}", DEC "json: cannot unmarshal number 100000000000000000000 into Go struct field RunCommandRequest.timeout of type int64");
  expect_parse("{\"command\":\"x\",\"uid\":-1}", DEC "uid must be a non-negative integer");
  expect_parse("{\"command\":\"x\",\"gid\":\"0\"}", DEC "gid must be a non-negative integer");
  expect_parse("{\"command\":\"x\",\"envs\":[]}", DEC "envs must be an object of strings");
  expect_parse("{\"command\":\"\"}", VAL "Key: 'RunCommandRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag");
  expect_parse("{\"cwd\":\"/\"}", VAL "Key: 'RunCommandRequest.Command' Error:Field validation for 'Command' failed on the 'required' tag");
  expect_parse("{\"command\":\"x\",\"timeout\":-5}", VAL "Key: 'RunCommandRequest.TimeoutMs' Error:Field validation for 'TimeoutMs' failed on the 'gte' tag");
  expect_parse("{\"command\":\"id\",\"gid\":1000}", VAL "uid is required when gid is provided");
  expect_parse("{\"command\":\"echo ok\",\"bogus\":{\"a\":1},\"timeout\":null,\"uid\":0,\"gid\":0}", NULL);
  expect_parse("  {\"command\":\"   \"}  \n", NULL);
}

static void test_expand_path(void) {
  char *envp[] = {"A=x", "B=y", "EMPTY=", NULL};
  osb_buf out = {0}, err = {0};
  setenv("HOME", "/home/t", 1);
  CHECK(xd_expand_path("/$A/${B}/$$/$EMPTY", envp, &out, &err) == 0);
  CHECK_STR(out.data, "/x/y//");
  CHECK(xd_expand_path("$NOPE/${ALSO}/$NOPE/${A", envp, &out, &err) == -1);
  CHECK_STR(err.data, "path references undefined environment variables: ALSO,NOPE");
  CHECK(xd_expand_path("~", envp, &out, &err) == 0);
  CHECK_STR(out.data, "/home/t");
  CHECK(xd_expand_path("~/a/../b/", envp, &out, &err) == 0);
  CHECK_STR(out.data, "/home/t/b/");
  CHECK(xd_expand_path("~x/$A", envp, &out, &err) == 0);
  CHECK_STR(out.data, "~x/x");
  CHECK(xd_path_normalize("/a/./b/../c/", 1, &out) == 0);
  CHECK_STR(out.data, "/a/c/");
  CHECK(xd_path_resolve("/a//b/", &out) == 0);
  CHECK_STR(out.data, "/a/b");
  CHECK(xd_path_resolve("/../..", &out) == 0);
  CHECK_STR(out.data, "/");
  CHECK(xd_path_normalize("a/../../b", 0, &out) == 0);
  CHECK_STR(out.data, "../b");
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK(xd_path_resolve("sub/..", &out) == 0);
  CHECK_STR(out.data, cwd);
  osb_buf_free(&out);
  osb_buf_free(&err);
}

typedef struct {
  osb_buf seen;
} idlines;

static int collect_idline(const xd_idline *l, void *arg) {
  idlines *c = arg;
  const char *home;
  size_t hn;
  int has_home = xd_idline_field(l, 5, &home, &hn);
  osb_buf_appendf(&c->seen, "%.*s=%lld@%zu[%.*s];", (int)l->name_len, l->name, l->id, l->line, has_home ? (int)hn : 1,
                  has_home ? home : "-");
  return l->name_len == 4 && memcmp(l->name, "stop", 4) == 0 ? 7 : 0;
}

/* idfile.c: the one reader of /etc/passwd and /etc/group (files-info.js idTable's rules), and `~` without $HOME */
static void test_idfile(void) {
  static const char text[] = "# comment\nroot:x:0:0:root:/root:/bin/sh\n\n:x:5:5::/e:\nnoid:x\nfrac:x:1.5:1::/f:\n"
                             "hex:x:0x10:1::/h\nsp:x: 7 :1\nlast:x:9";
  idlines c = {{0}};
  CHECK(xd_idfile_scan(text, sizeof text - 1, collect_idline, &c) == 0);
  CHECK_STR(c.seen.data, "root=0@1[/root];hex=16@6[/h];sp=7@7[-];last=9@8[-];");
  osb_buf_reset(&c.seen);
  static const char stop[] = "a:x:1\nstop:x:2\nb:x:3\n";
  CHECK(xd_idfile_scan(stop, sizeof stop - 1, collect_idline, &c) == 7);
  CHECK_STR(c.seen.data, "a=1@0[-];stop=2@1[-];");
  osb_buf_free(&c.seen);
  long long id = -1;
  CHECK(xd_idfile_id_of(XD_IDFILE_PASSWD, "root", &id) == 1 && id == 0);
  CHECK(xd_idfile_id_of(XD_IDFILE_PASSWD, "no such user here", &id) == 0);
  CHECK(xd_idfile_id_of("/nonexistent/passwd", "root", &id) == 0);
  osb_buf b = {0};
  CHECK(xd_idfile_read("/", &b) == -1 && b.len == 0); /* a directory is not read */
  /* `~` with no $HOME: the home of this uid in /etc/passwd, as getpwuid answers on this (glibc, files) host */
  struct passwd *pw = getpwuid(getuid());
  char *saved = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  unsetenv("HOME");
  char *envp[] = {NULL};
  osb_buf out = {0}, err = {0};
  CHECK(xd_expand_path("~", envp, &out, &err) == 0);
  CHECK_STR(out.data, pw && pw->pw_dir ? pw->pw_dir : "/");
  if (saved) setenv("HOME", saved, 1);
  free(saved);
  osb_buf_free(&out);
  osb_buf_free(&err);
  osb_buf_free(&b);
}

static void test_nul_characters(void) {
  /* \u0000 inside a string is kept as a marker character the body does not contain; an escaped backslash is not one */
  const char *body = "{\"command\":\"echo a\\u0000b\",\"cwd\":\"\\\\u0000\"}";
  osb_buf msg = {0}, raw = {0};
  cJSON *out = NULL;
  char nul[5];
  CHECK(xd_cmd_parse(body, strlen(body), &out, nul, &msg) == 0);
  CHECK(strcmp(nul, "\xf4\x8f\xbf\xbf") == 0);
  CHECK(xd_unmark_nul(xd_json_get(out, "command")->valuestring, nul, &raw) == 1);
  CHECK(raw.len == 8 && memcmp(raw.data, "echo a\0b", 8) == 0);
  osb_buf_reset(&raw);
  CHECK(xd_unmark_nul(xd_json_get(out, "cwd")->valuestring, nul, &raw) == 0);
  CHECK_STR(raw.data, "\\u0000");
  cJSON_Delete(out);
  /* a body holding U+10FFFF already gets the next marker */
  const char *taken = "{\"command\":\"\xf4\x8f\xbf\xbf\\u0000\"}";
  CHECK(xd_cmd_parse(taken, strlen(taken), &out, nul, &msg) == 0);
  CHECK(strcmp(nul, "\xf3\xbf\xbf\xbf") == 0);
  cJSON_Delete(out);
  const char *none = "{\"command\":\"x\"}";
  CHECK(xd_cmd_parse(none, strlen(none), &out, nul, &msg) == 0 && nul[0] == 0);
  cJSON_Delete(out);
  osb_buf_free(&msg);
  osb_buf_free(&raw);
}

static void test_js_inspect(void) {
  static const struct {
    const char *in;
    size_t len;
    const char *out;
  } cases[] = {
      {"echo a\0; b", 10, "'echo a\\x00; b'"},
      {"it's", 4, "\"it's\""},
      {"it's \"q\"", 8, "`it's \"q\"`"},
      {"'\"`", 3, "'\\'\"`'"},
      {"t\tn\nv\vb\\ \x7f \xc2\x85 \xc3\xa9", 16, "'t\\tn\\nv\\x0Bb\\\\ \\x7F \\x85 \xc3\xa9'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    osb_buf b = {0};
    CHECK(xd_js_inspect_str(cases[i].in, cases[i].len, &b) == 0);
    CHECK_STR(b.data, cases[i].out);
    osb_buf_free(&b);
  }
  /* longer than 124 characters with a newline: split after it; then the first 128 characters and "..." */
  char longs[200];
  memset(longs, 'a', sizeof longs);
  longs[60] = '\n';
  osb_buf b = {0};
  CHECK(xd_js_inspect_str(longs, sizeof longs, &b) == 0);
  CHECK(b.len == 131 && memcmp(b.data + 61, "\\n' +\n  'aa", 11) == 0 && memcmp(b.data + 128, "...", 3) == 0);
  osb_buf_free(&b);
}

int main(void) {
  RUN(test_go_json_escaping);
  RUN(test_js_number);
  RUN(test_lines_terminators);
  RUN(test_lines_long_line_utf8);
  RUN(test_lines_stop_resume);
  RUN(test_logring);
  RUN(test_go_duration);
  RUN(test_parse_wording);
  RUN(test_expand_path);
  RUN(test_idfile);
  RUN(test_nul_characters);
  RUN(test_js_inspect);
  return t_summary();
}
