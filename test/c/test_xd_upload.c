/* POST /files/upload of the C execd (src/execd/upload.c, multipart.c) through its real HTTP server (server.c) on
 * loopback: a client thread sends each request over TCP while the main thread runs the loop. The expected answers
 * are the Node execd's (lib/dev-server/execd/files-upload.js), byte for byte; a form upload.c must not answer is
 * not taken: the server answers it 404, as the real execd's router answers what no route takes. */
#include "harness.h"
#include "xd_loopback.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "execd/server.h"
#include "execd/xd.h"

static char ws[256];
static int port;
#define B "xdB0undary"
/* a metadata part and a file part as the official client sends them */
static void meta_part(osb_buf *f, const char *json) {
  osb_buf_appendf(f, "--" B "\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
                     "Content-Type: application/json\r\n\r\n%s\r\n", json);
}
static void file_part(osb_buf *f, const char *data) {
  osb_buf_appendf(f, "--" B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n"
                     "Content-Type: application/octet-stream\r\n\r\n%s\r\n", data);
}
static void end_form(osb_buf *f) { osb_buf_append_str(f, "--" B "--\r\n"); }

/* POSTs the form with the given Content-Type (NULL: the multipart one) and checks the answer */
static void expect_ct(const char *ct, osb_buf *form, int status, const char *answer) {
  osb_buf r = {0};
  osb_buf_appendf(&r, "POST /files/upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
  if (ct) osb_buf_appendf(&r, "Content-Type: %s\r\n", ct);
  osb_buf_appendf(&r, "Content-Length: %zu\r\n\r\n", form->len);
  osb_buf_append(&r, form->data ? form->data : "", form->len);
  char *got = NULL;
  int s = xd_roundtrip(port, r.data, r.len, &got);
  if (s != status || !got || strcmp(got, answer) != 0)
    printf("    expected %d %s\n    got      %d %s\n", status, answer, s, got ? got : "(none)");
  CHECK(s == status);
  CHECK_STR(got, answer);
  free(got);
  osb_buf_free(&r);
  osb_buf_free(form);
}
static void expect(osb_buf *form, int status, const char *answer) {
  expect_ct("multipart/form-data; boundary=" B, form, status, answer);
}

static char *content_of(const char *rel) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", ws, rel);
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  static char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static int mode_of(const char *rel) { return xd_mode_in(ws, rel); }
static long owner_of(const char *rel) { return xd_owner_in(ws, rel); }

static void test_writes(void) {
  osb_buf f = {0};
  meta_part(&f, "{\"path\":\"up/a.txt\",\"mode\":600}");
  file_part(&f, "hello");
  end_form(&f);
  expect(&f, 200, "");
  CHECK_STR(content_of("up/a.txt"), "hello");
  CHECK(mode_of("up/a.txt") == 0600);
  CHECK(mode_of("up") == 0755);
  /* two pairs, a field and a part of another name between them (ignored), bytes that look like a delimiter inside a
   * file (not followed by CRLF or "--": see test_handed_over), an empty file; an existing file is truncated and keeps its mode when none is given */
  meta_part(&f, "{\"path\":\"up/a.txt\"}");
  osb_buf_append_str(&f, "--" B "\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nfield\r\n");
  osb_buf_append_str(&f, "--" B "\r\nContent-Disposition: form-data; name=\"other\"; filename=\"x\"\r\n\r\nx\r\n");
  file_part(&f, "x\r\n--xdB0und!\r\n--\r\n");
  meta_part(&f, "{\"path\":\"" "%s" "/up/deep/b\",\"mode\":0}");
  file_part(&f, "");
  end_form(&f);
  /* the second path is absolute: the workspace spliced in */
  osb_buf g = {0};
  osb_buf_appendf(&g, f.data, ws);
  osb_buf_free(&f);
  expect(&g, 200, "");
  CHECK_STR(content_of("up/a.txt"), "x\r\n--xdB0und!\r\n--\r\n");
  CHECK(mode_of("up/a.txt") == 0600);
  CHECK_STR(content_of("up/deep/b"), "");
  CHECK(mode_of("up/deep/b") == 0755); /* 0777 before the umask (022 here) */
  /* owner and group: given to the directories made and the file (an unknown group is ignored) */
  struct passwd *nobody = getpwnam("nobody");
  if (getuid() == 0 && nobody) {
    meta_part(&f, "{\"path\":\"own/x/f\",\"owner\":\"nobody\",\"group\":\"no-such-group-xd\"}");
    file_part(&f, "o");
    end_form(&f);
    expect(&f, 200, "");
    CHECK(owner_of("own") == (long)nobody->pw_uid);
    CHECK(owner_of("own/x") == (long)nobody->pw_uid);
    CHECK(owner_of("own/x/f") == (long)nobody->pw_uid);
  }
}

static void test_errors(void) {
  osb_buf f = {0};
  file_part(&f, "x");
  end_form(&f);
  expect_ct(NULL, &f, 400, "{\"code\":\"INVALID_FILE\",\"message\":\"multipart form is empty\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_METADATA\",\"message\":\"metadata file is missing\"}");
  meta_part(&f, "{\"path\":\"m\"}");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_CONTENT\",\"message\":\"file is missing\"}");
  meta_part(&f, "{\"path\":\"m\"}");
  meta_part(&f, "{\"path\":\"n\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE\",\"message\":\"metadata and file count mismatch: 2 vs 1\"}");
  CHECK(mode_of("m") == -1);
  /* a pair's metadata is checked when the pairs before it are written */
  meta_part(&f, "{\"path\":\"e1\"}");
  meta_part(&f, "{\"path\":\"e2\",\"mode\":8}");
  file_part(&f, "1");
  file_part(&f, "2");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid mode 8 for e2: give the octal digits as a "
                  "decimal integer, e.g. 644\"}");
  CHECK_STR(content_of("e1"), "1");
  CHECK(content_of("e2") == NULL);
  meta_part(&f, "[1]");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_METADATA\",\"message\":\"invalid metadata format. expected a JSON object\"}");
  meta_part(&f, "{\"path\":\"\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_METADATA\",\"message\":\"metadata path is empty\"}");
  meta_part(&f, "{\"path\":\"$NOPE_XD_UP/a\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path references undefined environment variables: "
                  "NOPE_XD_UP\"}");
  char answer[1024], json[512];
  /* a parent that is a file; a target that is a directory */
  meta_part(&f, "{\"path\":\"e1/x\"}");
  file_part(&f, "x");
  end_form(&f);
  snprintf(answer, sizeof answer, "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error creating target directory %s/e1. "
           "mkdir %s/e1: not a directory\"}", ws, ws);
  expect(&f, 500, answer);
  snprintf(json, sizeof json, "{\"path\":\"up\"}");
  meta_part(&f, json);
  file_part(&f, "x");
  end_form(&f);
  snprintf(answer, sizeof answer, "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error opening destination file %s/up. "
           "open %s/up: illegal operation on a directory\"}", ws, ws);
  expect(&f, 500, answer);
}

static void test_handed_over(void) {
  int before = xd_declined;
  osb_buf f = {0};
  osb_buf_append_str(&f, "preamble\r\n"); /* busboy skips a preamble; this reader hands it over */
  meta_part(&f, "{\"path\":\"h1\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 404, XD_NOT_FOUND);
  meta_part(&f, "{\"path\":\"h2\",}"); /* JSON.parse's error text is V8's */
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 404, XD_NOT_FOUND);
  meta_part(&f, "{\"path\":\"h3\",\"path\":\"h4\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 404, XD_NOT_FOUND);
  osb_buf_append_str(&f, "--" B "\r\nContent-Disposition: form-data; name=\"metadata\"; filename*=UTF-8''m\r\n\r\n{}\r\n");
  end_form(&f);
  expect(&f, 404, XD_NOT_FOUND);
  meta_part(&f, "{\"path\":\"h5\"}");
  file_part(&f, "no end");
  expect(&f, 404, XD_NOT_FOUND); /* cut short: busboy's "Unexpected end of form" */
  meta_part(&f, "{\"path\":\"h6\"}");
  file_part(&f, "x\r\n--" B "x"); /* the delimiter ends the part; busboy reads what follows oddly */
  end_form(&f);
  expect(&f, 404, XD_NOT_FOUND);
  CHECK(xd_declined == before + 6);
  CHECK(content_of("h1") == NULL && content_of("h2") == NULL && content_of("h3") == NULL && content_of("h5") == NULL &&
        content_of("h6") == NULL);
}

static void client(void) {
  RUN(test_writes);
  RUN(test_errors);
  RUN(test_handed_over);
}

int main(void) {
  umask(022);
  return xd_module_test("xd-upload", ws, sizeof ws, &port, xd_upload_new, xd_upload_route, xd_upload_close, client);
}
