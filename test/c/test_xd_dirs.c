/* POST /directories of the C execd (src/execd/dirs.c) through its real HTTP server (server.c) on loopback: a client
 * thread sends each request over TCP while the main thread runs the loop. The expected answers are the Node
 * execd's (lib/dev-server/execd/files.js, deleted), byte for byte; where those were JavaScript's (a body that is not
 * JSON, a duplicate key, a mode that is an array) the real execd's; a \u0000 in a string is a 400. */
#include "harness.h"
#include "xd_loopback.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "execd/server.h"
#include "execd/xd.h"

static char ws[256];
static int port;


/* One request on a fresh connection; the status and the body (malloc'd) of the answer. */
static int request(const char *body, char **out) {
  osb_buf r = {0};
  int status = -1;
  *out = NULL;
  if (osb_buf_appendf(&r, "POST /directories HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
                      "Content-Length: %zu\r\n\r\n%s", strlen(body), body) >= 0)
    status = xd_roundtrip(port, r.data, r.len, out);
  osb_buf_free(&r);
  return status;
}

static int mode_of(const char *rel) { return xd_mode_in(ws, rel); }
static long owner_of(const char *rel) { return xd_owner_in(ws, rel); }

static void expect(const char *body, int status, const char *answer) {
  char *got = NULL;
  int s = request(body, &got);
  if (s != status || !got || strcmp(got, answer) != 0)
    printf("  request %s\n    expected %d %s\n    got      %d %s\n", body, status, answer, s, got ? got : "(none)");
  CHECK(s == status);
  CHECK_STR(got, answer);
  free(got);
}

static void test_creates(void) {
  expect("{\"a/b/c\":{\"mode\":700},\"d\":{}}", 200, "");
  CHECK(mode_of("a") == 0755);
  CHECK(mode_of("a/b") == 0755);
  CHECK(mode_of("a/b/c") == 0700);
  CHECK(mode_of("d") == 0755);
  /* an existing directory keeps its mode */
  expect("{\"a/b/c\":{\"mode\":755}}", 200, "");
  CHECK(mode_of("a/b/c") == 0700);
  /* owner and group go to the directories made (not to existing ones); an unknown name is ignored */
  struct passwd *nobody = getpwnam("nobody");
  if (getuid() == 0 && nobody) {
    uid_t uid = nobody->pw_uid;
    expect("{\"a/o/p\":{\"owner\":\"nobody\",\"group\":\"no-such-group-xd\",\"mode\":711}}", 200, "");
    CHECK(owner_of("a") == 0);
    CHECK(owner_of("a/o") == (long)uid);
    CHECK(owner_of("a/o/p") == (long)uid);
    CHECK(mode_of("a/o/p") == 0711);
  }
}

static void test_errors(void) {
  expect("", 400, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. EOF\"}");
  expect("{\"a\":1", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. unexpected EOF\"}");
  expect("[1]", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. expected a "
         "JSON object keyed by path\"}");
  expect("{\"ok\":{},\"a\\tb\":3}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. the value "
         "for \\\"a\\\\tb\\\" must be an object\"}");
  CHECK(mode_of("ok") == -1); /* nothing made before the body is checked */
  expect("{\"m\":{\"mode\":\"x<\"}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid mode \\\"x\\u003c\\\" for m: give the octal digits "
         "as a decimal integer, e.g. 644\"}");
  expect("{\"m\":{\"mode\":7.5}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid mode 7.5 for m: give the octal digits as a decimal "
         "integer, e.g. 644\"}");
  expect("{\"m\":{\"mode\":8}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid mode 8 for m: give the octal digits as a decimal "
         "integer, e.g. 644\"}");
  expect("{\"first\":{},\"$NOPE_XD_1/${NOPE_XD_0}$$x\":{}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path references undefined environment variables: "
         "NOPE_XD_0,NOPE_XD_1\"}");
  CHECK(mode_of("first") == 0755); /* the entries before it were made, as in the Node execd */
  expect("{\"/proc/nope/a\":{\"mode\":755}}", 404,
         "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found. mkdir /proc/nope: no such file or directory\"}");
  char p[512], answer[1024];
  snprintf(p, sizeof p, "%s/file", ws);
  FILE *f = fopen(p, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  snprintf(answer, sizeof answer,
           "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: mkdir %s/file: not a directory\"}", ws);
  expect("{\"file/x\":{\"mode\":755}}", 500, answer);
}

/* what the Node execd answered with JavaScript's texts: the real execd's answers (Go's decoder, a map) */
static void test_go_answers(void) {
  int before = xd_declined;
  expect("{\"x\":{}} trailing", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. invalid "
         "character 't' in JSON at offset 9\"}"); /* as fsedit.c's routes (Go's Decoder would take the first value) */
  expect("{\"x\":{}", 400, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. unexpected EOF\"}");
  /* a duplicate key: its last value (y new: mode 700); a duplicate member: its last value */
  expect("{\"y\":{\"mode\":755},\"w\":{},\"y\":{\"mode\":700}}", 200, "");
  CHECK(mode_of("y") == 0700 && mode_of("w") == 0755);
  expect("{\"v\":{\"mode\":755,\"mode\":711}}", 200, "");
  CHECK(mode_of("v") == 0711);
  /* array-index keys: made in the order given */
  expect("{\"1\":{},\"0\":{}}", 200, "");
  CHECK(mode_of("0") == 0755 && mode_of("1") == 0755);
  expect("{\"z\":{\"mode\":[7]}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot "
         "unmarshal array into Go struct field Permission.mode of type int\"}");
  expect("{\"z\":{\"mode\":{}}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot "
         "unmarshal object into Go struct field Permission.mode of type int\"}");
  /* a name whose bytes are not UTF-8: U+FFFD, as Go reads it */
  expect("{\"u\xff\":{}}", 200, "");
  CHECK(mode_of("u\xef\xbf\xbd") == 0755);
  /* a \u0000 in a string: refused, nothing made */
  expect("{\"n\\u0000\":{}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. NUL "
         "characters in strings are not supported\"}");
  CHECK(xd_declined == before);
  CHECK(mode_of("x") == -1 && mode_of("z") == -1);
}

static void client(void) {
  RUN(test_creates);
  RUN(test_errors);
  RUN(test_go_answers);
}

int main(void) {
  return xd_module_test("xd-dirs", ws, sizeof ws, &port, xd_dirs_new, xd_dirs_route, xd_dirs_close, client);
}
