/* POST /directories of the C execd (src/execd/dirs.c) through its real HTTP server (server.c) on loopback: a client
 * thread sends each request over TCP while the main thread runs the loop. The expected answers are the Node
 * execd's (lib/dev-server/execd/files.js), byte for byte; a body dirs.c must not answer (trailing data after the
 * JSON, a duplicate key) is not taken: the server answers it 404, as the real execd's router answers what no route takes. */
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

static void test_declined(void) {
  int before = xd_declined;
  expect("{\"x\":{}} trailing", 404, XD_NOT_FOUND);
  expect("{\"y\":{\"mode\":755},\"y\":{\"mode\":700}}", 404, XD_NOT_FOUND);
  expect("{\"z\":{\"mode\":[7]}}", 404, XD_NOT_FOUND);
  CHECK(xd_declined == before + 3);
  CHECK(mode_of("x") == -1 && mode_of("y") == -1 && mode_of("z") == -1);
}

static void client(void) {
  RUN(test_creates);
  RUN(test_errors);
  RUN(test_declined);
}

int main(void) {
  return xd_module_test("xd-dirs", ws, sizeof ws, &port, xd_dirs_new, xd_dirs_route, xd_dirs_close, client);
}
