/* POST /files/upload of the C execd (src/execd/upload.c, multipart.c) through its real HTTP server (server.c) on
 * loopback: a client thread sends each request over TCP while the main thread runs the loop. The expected answers
 * are the real execd's (upstream filesystem_upload.go, Go's mime/multipart; the Node execd's files-upload.js where they
 * agree), byte for byte; nothing is declined (the test server counts what no route takes in xd_declined). */
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
  char answer[1024], json[512];
  /* a mode that does not read as octal (issue 32): as Go's ChmodFile, after the file is written (a 500, the file left),
   * the pairs before it written, none after it */
  meta_part(&f, "{\"path\":\"e1\"}");
  meta_part(&f, "{\"path\":\"e2\",\"mode\":8}");
  meta_part(&f, "{\"path\":\"e3\"}");
  file_part(&f, "1");
  file_part(&f, "2");
  file_part(&f, "3");
  end_form(&f);
  snprintf(answer, sizeof answer, "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error chmoding file %s/e2. strconv.ParseUint: "
           "parsing \\\"8\\\": invalid syntax\"}", ws);
  expect(&f, 500, answer);
  CHECK_STR(content_of("e1"), "1");
  CHECK_STR(content_of("e2"), "2");
  CHECK(mode_of("e2") == 0755);
  CHECK(content_of("e3") == NULL);
  /* a mode of another JSON type: json.Unmarshal's error, before anything of the pair is written */
  meta_part(&f, "{\"path\":\"e4\",\"mode\":\"644\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_METADATA\",\"message\":\"invalid metadata format. json: cannot unmarshal "
                  "string into Go struct field FileMetadata.mode of type int\"}");
  CHECK(content_of("e4") == NULL);
  /* Go's FileMode: 4755 is chmod 0755 (its setuid is another bit) */
  meta_part(&f, "{\"path\":\"e5\",\"mode\":4755}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 200, "");
  CHECK(mode_of("e5") == 0755);
  /* a write that fails (a link to /dev/full): Go's "error copying file" with the write's error */
  char full[512];
  snprintf(full, sizeof full, "%s/full", ws);
  if (symlink("/dev/full", full) == 0) {
    meta_part(&f, "{\"path\":\"full\"}");
    file_part(&f, "bytes");
    end_form(&f);
    snprintf(answer, sizeof answer, "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error copying file %s/full. write %s/full: no "
             "space left on device\"}", ws, ws);
    expect(&f, 500, answer);
    unlink(full);
  }
  /* not JSON: Go's decoder texts (encoding/json's scanner) */
  static const char *const bad[][2] = {
      {"{not json", "invalid character 'n' looking for beginning of object key string"},
      {"{\"path\":\"h2\",}", "invalid character '}' looking for beginning of object key string"},
      {"", "unexpected end of JSON input"},
      {"{\"path\":\"a\"} x", "invalid character 'x' after top-level value"},
      {"{\"path\":tru}", "invalid character '}' in literal true (expecting 'e')"},
      {"{\"path\":\"a\\q\"}", "invalid character 'q' in string escape code"},
      {"[1,\t\x01]", "invalid character '\\\\x01' looking for beginning of value"},
      {"{\"mode\":1.e5}", "invalid character 'e' after decimal point in numeric literal"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    meta_part(&f, bad[i][0]);
    file_part(&f, "x");
    end_form(&f);
    snprintf(answer, sizeof answer, "{\"code\":\"INVALID_FILE_METADATA\",\"message\":\"invalid metadata format. %s\"}", bad[i][1]);
    expect(&f, 400, answer);
  }
  meta_part(&f, "[1]");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_METADATA\",\"message\":\"invalid metadata format. json: cannot unmarshal "
                  "array into Go value of type model.FileMetadata\"}");
  meta_part(&f, "{\"path\":\"\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_METADATA\",\"message\":\"metadata path is empty\"}");
  meta_part(&f, "null"); /* Go: nothing set, so no path */
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_METADATA\",\"message\":\"metadata path is empty\"}");
  meta_part(&f, "{\"path\":null,\"owner\":\"\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_METADATA\",\"message\":\"metadata path is empty\"}");
  meta_part(&f, "{\"path\":\"$NOPE_XD_UP/a\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 500, "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error resolving target path $NOPE_XD_UP/a. path references "
                  "undefined environment variables: NOPE_XD_UP\"}");
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

/* what the Node execd declined and Go's reader (mime/multipart) reads: answered here now, none declined */
static void test_go_reader(void) {
  int before = xd_declined;
  osb_buf f = {0};
  osb_buf_append_str(&f, "preamble\r\n"); /* skipped */
  meta_part(&f, "{\"path\":\"h1\"}");
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 200, "");
  CHECK_STR(content_of("h1"), "x");
  meta_part(&f, "{\"path\":\"h3\",\"PATH\":\"h4\"}"); /* Go: fields matched case-insensitively, the last one wins */
  file_part(&f, "x");
  end_form(&f);
  expect(&f, 200, "");
  CHECK(content_of("h3") == NULL);
  CHECK_STR(content_of("h4"), "x");
  /* RFC 2231 filename*: a file part for Go */
  osb_buf_append_str(&f, "--" B "\r\nContent-Disposition: form-data; name=\"metadata\"; filename*=UTF-8''m\r\n\r\n{}\r\n");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE_CONTENT\",\"message\":\"file is missing\"}");
  /* cut short: Go's unexpected EOF; nothing written */
  meta_part(&f, "{\"path\":\"h5\"}");
  file_part(&f, "no end");
  expect(&f, 400, "{\"code\":\"INVALID_FILE\",\"message\":\"multipart form is empty\"}");
  CHECK(content_of("h5") == NULL);
  /* issue 32: CRLF--boundary followed by other bytes is content (it was cut there and answered 200) */
  meta_part(&f, "{\"path\":\"h6\"}");
  file_part(&f, "x\r\n--" B "x\r\n--" B "-y");
  end_form(&f);
  expect(&f, 200, "");
  CHECK_STR(content_of("h6"), "x\r\n--" B "x\r\n--" B "-y");
  /* ... but followed by a space, a delimiter that is not one: the form fails */
  meta_part(&f, "{\"path\":\"h7\"}");
  file_part(&f, "x\r\n--" B " junk");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE\",\"message\":\"multipart form is empty\"}");
  CHECK(content_of("h7") == NULL);
  /* LF-only lines (decided at the first delimiter), transport padding, a folded header, an epilogue */
  osb_buf_append_str(&f, "--" B " \t\nContent-Disposition: form-data;\n name=\"metadata\"; filename=m\n\n{\"path\":\"h8\"}\n"
                         "--" B "\nContent-Disposition: form-data; name=file; filename=\"a\\\"b\"\n\nlf\r\n\n--" B "--\n"
                         "epilogue");
  expect(&f, 200, "");
  CHECK_STR(content_of("h8"), "lf\r\n");
  /* quoted-printable: decoded as Go's NextPart does (soft breaks, =XX, a literal '=', trailing blanks dropped) */
  meta_part(&f, "{\"path\":\"qp\"}");
  osb_buf_append_str(&f, "--" B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"q\"\r\n"
                         "Content-Transfer-Encoding: Quoted-Printable\r\n\r\nh=C3=A9llo=\r\n w=rld  \r\nend=\r\n");
  end_form(&f);
  expect(&f, 200, "");
  CHECK_STR(content_of("qp"), "h\xc3\xa9llo w=rld\r\nend");
  meta_part(&f, "{\"path\":\"qp2\"}");
  osb_buf_append_str(&f, "--" B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"q\"\r\n"
                         "Content-Transfer-Encoding: quoted-printable\r\n\r\nbad \x01 byte\r\n");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE\",\"message\":\"multipart form is empty\"}");
  CHECK(content_of("qp2") == NULL);
  /* no boundary; a header line that is not one; a part over the 1,000 */
  meta_part(&f, "{\"path\":\"h9\"}");
  file_part(&f, "x");
  end_form(&f);
  expect_ct("multipart/form-data", &f, 400, "{\"code\":\"INVALID_FILE\",\"message\":\"multipart form is empty\"}");
  osb_buf_append_str(&f, "--" B "\r\nno colon here\r\n\r\nx\r\n");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE\",\"message\":\"multipart form is empty\"}");
  for (int i = 0; i < 1001; i++) osb_buf_append_str(&f, "--" B "\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\nv\r\n");
  end_form(&f);
  expect(&f, 400, "{\"code\":\"INVALID_FILE\",\"message\":\"multipart form is empty\"}");
  CHECK(xd_declined == before);
}

/* a form larger than what is held in memory, chunked, in pieces of varied size: spooled and copied, byte-exact */
static void test_large_chunked(void) {
  size_t size = 12u * 1024u * 1024u + 12345u;
  char *data = malloc(size);
  CHECK(data != NULL);
  if (!data) return;
  uint32_t x = 12345;
  for (size_t i = 0; i < size; i++) {
    x = x * 1103515245u + 12345u;
    data[i] = (char)(x >> 16);
  }
  osb_buf form = {0};
  meta_part(&form, "{\"path\":\"big/one\",\"mode\":640}");
  osb_buf_append_str(&form, "--" B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b\"\r\n\r\n");
  osb_buf_append(&form, data, size);
  osb_buf_append_str(&form, "\r\n");
  meta_part(&form, "{\"path\":\"big/two\"}");
  file_part(&form, "second");
  end_form(&form);
  osb_buf r = {0};
  osb_buf_append_str(&r, "POST /files/upload HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n"
                         "Content-Type: multipart/form-data; boundary=" B "\r\n\r\n");
  for (size_t off = 0, step = 1; off < form.len; step = step * 7 % 300007 + 1) {
    size_t n = form.len - off < step ? form.len - off : step;
    osb_buf_appendf(&r, "%zx\r\n", n);
    osb_buf_append(&r, form.data + off, n);
    osb_buf_append_str(&r, "\r\n");
    off += n;
  }
  osb_buf_append_str(&r, "0\r\n\r\n");
  char *got = NULL;
  int s = xd_roundtrip(port, r.data, r.len, &got);
  CHECK(s == 200);
  free(got);
  char p[512];
  snprintf(p, sizeof p, "%s/big/one", ws);
  FILE *fp = fopen(p, "rb");
  CHECK(fp != NULL);
  if (fp) {
    char *back = malloc(size + 1);
    size_t n = back ? fread(back, 1, size + 1, fp) : 0;
    CHECK(n == size);
    CHECK(back && memcmp(back, data, size) == 0);
    free(back);
    fclose(fp);
  }
  CHECK(mode_of("big/one") == 0640);
  CHECK_STR(content_of("big/two"), "second");
  osb_buf_free(&r);
  osb_buf_free(&form);
  free(data);
}

/* a chunked upload whose framing breaks mid-form: Go's raw 400, the connection closed, nothing written; a client that
 * goes away mid-form (spool writes in flight): nothing written, nothing left (ASan/valgrind) */
static void test_cut_off(void) {
  osb_buf r = {0};
  osb_buf_append_str(&r, "POST /files/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                         "Content-Type: multipart/form-data; boundary=" B "\r\n\r\n");
  osb_buf form = {0};
  meta_part(&form, "{\"path\":\"cut1\"}");
  osb_buf_appendf(&r, "%zx\r\n", form.len);
  osb_buf_append(&r, form.data, form.len);
  osb_buf_append_str(&r, "\r\nzz\r\n");
  char *got = NULL;
  int s = xd_roundtrip(port, r.data, r.len, &got);
  CHECK(s == 400);
  CHECK_STR(got, "400 Bad Request");
  free(got);
  CHECK(content_of("cut1") == NULL);
  osb_buf_free(&r);
  osb_buf_free(&form);
  /* 6 MiB of a declared 64 MiB form, then the client closes */
  int fd = xd_dial(port, 10);
  CHECK(fd >= 0);
  if (fd < 0) return;
  char head[256];
  int hl = snprintf(head, sizeof head, "POST /files/upload HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
                    "boundary=" B "\r\nContent-Length: %u\r\n\r\n", 64u << 20);
  CHECK(write(fd, head, (size_t)hl) == hl);
  meta_part(&form, "{\"path\":\"cut2\"}");
  osb_buf_append_str(&form, "--" B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b\"\r\n\r\n");
  CHECK(write(fd, form.data, form.len) == (ssize_t)form.len);
  osb_buf_free(&form);
  static char chunk[64 * 1024];
  memset(chunk, 'z', sizeof chunk);
  for (int i = 0; i < 96; i++) CHECK(write(fd, chunk, sizeof chunk) == (ssize_t)sizeof chunk);
  close(fd); /* the server hears of it now or at the test's end (server and module closed): all of it freed */
  CHECK(content_of("cut2") == NULL);
}

static void client(void) {
  RUN(test_writes);
  RUN(test_errors);
  RUN(test_go_reader);
  RUN(test_large_chunked);
  RUN(test_cut_off);
}

int main(void) {
  umask(022);
  return xd_module_test("xd-upload", ws, sizeof ws, &port, xd_upload_new, xd_upload_route, xd_upload_close, client);
}
