/* DELETE /files, POST /files/permissions, POST /files/mv, POST /files/replace and DELETE /directories of the C execd
 * (src/execd/fsedit.c) through its real HTTP server (server.c) on loopback: a client thread sends each request over
 * TCP while the main thread runs the loop, and every answer is compared byte for byte (status and body). The texts
 * are the Node execd's (lib/dev-server/execd/files.js) or, where those are JavaScript's, the real execd's. Symlinks:
 * removal and moves never follow them (a link is removed or moved itself, the tree it points to stays), permissions
 * and replace act on the target, as both execds. A request the module must not answer (a NUL in a query path, a body
 * with \u0000) is not taken: the server answers it 404, as the real execd's router answers what no route takes. */
#include "harness.h"
#include "xd_loopback.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "execd/fsedit.h"
#include "execd/server.h"
#include "execd/xd.h"

static char ws[256];
static int port;

static int request(const char *method, const char *target, const char *body, char **out) {
  osb_buf r = {0};
  int status = -1;
  *out = NULL;
  if (osb_buf_appendf(&r, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", method, target) >= 0 &&
      (!body || osb_buf_appendf(&r, "Content-Type: application/json\r\nContent-Length: %zu\r\n", strlen(body)) >= 0) &&
      osb_buf_appendf(&r, "\r\n%s", body ? body : "") >= 0)
    status = xd_roundtrip(port, r.data, r.len, out);
  osb_buf_free(&r);
  return status;
}

/* `answer` may hold %1$s for the workspace (printf positional arguments) */
static void expect(const char *method, const char *target, const char *body, int status, const char *answer) {
  char want[4096];
  snprintf(want, sizeof want, answer, ws);
  char *got = NULL;
  int s = request(method, target, body, &got);
  if (s != status || !got || strcmp(got, want) != 0)
    printf("  %s %s %s\n    expected %d %s\n    got      %d %s\n", method, target, body ? body : "", status, want, s,
           got ? got : "(none)");
  CHECK(s == status);
  CHECK_STR(got, want);
  free(got);
}

static char *wpath(const char *rel) {
  static char p[8][512];
  static int i;
  i = (i + 1) % 8;
  snprintf(p[i], sizeof p[i], "%s/%s", ws, rel);
  return p[i];
}

static void put(const char *rel, const char *content) {
  FILE *f = fopen(wpath(rel), "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(content, f);
  fclose(f);
}

static char *get(const char *rel) {
  static char buf[4096];
  FILE *f = fopen(wpath(rel), "r");
  if (!f) return NULL;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

static void dir(const char *rel) { CHECK(mkdir(wpath(rel), 0755) == 0); }
static void link_to(const char *target, const char *rel) { CHECK(symlink(target, wpath(rel)) == 0); }
static int exists(const char *rel) {
  struct stat st;
  return lstat(wpath(rel), &st) == 0;
}
static int is_link(const char *rel) {
  struct stat st;
  return lstat(wpath(rel), &st) == 0 && S_ISLNK(st.st_mode);
}

/* ---------------------------------------------------------------- DELETE /files */
static void test_delete_files(void) {
  put("a.txt", "a");
  dir("d");
  put("d/in.txt", "x");
  expect("DELETE", "/files?path=a.txt&path=missing.txt", NULL, 200, "");
  CHECK(!exists("a.txt"));
  expect("DELETE", "/files", NULL, 200, "");
  expect("DELETE", "/files?path=d", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing file d. path is a directory: d\"}");
  CHECK(exists("d/in.txt"));
  /* symlinks: the link goes, never what it points to; a link to a directory is a directory (stat); a dangling one is
   * missing (ignored, as both execds) */
  put("target.txt", "t");
  link_to("target.txt", "l-file");
  link_to("d", "l-dir");
  link_to("nowhere", "l-dangling");
  expect("DELETE", "/files?path=l-file", NULL, 200, "");
  CHECK(!exists("l-file") && exists("target.txt"));
  expect("DELETE", "/files?path=l-dir", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing file l-dir. path is a directory: l-dir\"}");
  expect("DELETE", "/files?path=l-dangling", NULL, 200, "");
  CHECK(is_link("l-dangling"));
  /* expansion: an undefined variable (the paths before it are removed) */
  put("b.txt", "b");
  expect("DELETE", "/files?path=b.txt&path=%24NOPE_FE_1%2Fx", NULL, 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path references undefined environment variables: NOPE_FE_1\"}");
  CHECK(!exists("b.txt"));
  /* a file below a file: stat's ENOTDIR */
  put("f", "f");
  expect("DELETE", "/files?path=f%2Fx", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing file f/x. stat %1$s/f/x: not a directory\"}");
  /* escaping of the path as given: < > & and a byte that is not UTF-8 */
  dir("<&>\xff");
  expect("DELETE", "/files?path=%3C%26%3E%ff", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing file \\u003c\\u0026\\u003e\\ufffd. path is a "
         "directory: \\u003c\\u0026\\u003e\\ufffd\"}");
  CHECK(exists("<&>\xff"));
  /* a NUL byte: expanded and resolved, then refused by every system call (Go's EINVAL), nothing touched */
  expect("DELETE", "/files?path=f%00x&path=%24HOME%00", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing file f\\u0000x. stat %1$s/f\\u0000x: invalid "
         "argument\"}");
  CHECK(exists("f"));
}

/* ---------------------------------------------------------------- DELETE /directories */
static void test_delete_dirs(void) {
  /* a tree with files, an empty directory, a FIFO and symlinks to a directory and a file outside it */
  dir("out");
  put("out/keep.txt", "k");
  dir("tree");
  dir("tree/a");
  dir("tree/a/b");
  dir("tree/empty");
  put("tree/a/b/c.txt", "c");
  put("tree/top.txt", "t");
  CHECK(mkfifo(wpath("tree/a/fifo"), 0600) == 0);
  link_to("../../out", "tree/a/to-out");
  link_to("../out/keep.txt", "tree/to-keep");
  CHECK(chmod(wpath("tree/a/b"), 0500) == 0); /* read-only: root removes it anyway, as Go's unlinkat */
  expect("DELETE", "/directories?path=tree&path=never-there", NULL, 200, "");
  CHECK(!exists("tree"));
  CHECK(exists("out/keep.txt"));
  /* a file and a missing path are fine; a symlink to a directory: the link alone */
  put("plain.txt", "p");
  link_to("out", "l-out");
  expect("DELETE", "/directories?path=plain.txt&path=l-out", NULL, 200, "");
  CHECK(!exists("plain.txt") && !exists("l-out") && exists("out/keep.txt"));
  /* deeper than the window of open levels (XD_RM_OPEN_LEVELS): the ancestors are opened again on the way back */
  char rel[4096] = "deep";
  dir(rel);
  for (int i = 0; i < 3 * XD_RM_OPEN_LEVELS + 5; i++) {
    char f[4200];
    snprintf(f, sizeof f, "%s/f", rel);
    put(f, "x");
    snprintf(f, sizeof f, "%s/l", rel);
    link_to("/", f); /* never followed */
    size_t n = strlen(rel);
    snprintf(rel + n, sizeof rel - n, "/d");
    dir(rel);
  }
  expect("DELETE", "/directories?path=deep", NULL, 200, "");
  CHECK(!exists("deep"));
  /* a failure: Go's text (the entry's path below the parent it opened) */
  expect("DELETE", "/directories?path=%2Fproc%2Fself%2Fcomm", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing directory /proc/self/comm. unlinkat /proc/self/comm: "
         "operation not permitted\"}");
  /* the first failure below, after the rest was tried: a directory whose entries cannot go (procfs) */
  expect("DELETE", "/directories?path=%2Fproc%2Fself%2Ffdinfo", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing directory /proc/self/fdinfo. unlinkat "
         "/proc/self/fdinfo/0: operation not permitted\"}");
  put("g", "g");
  expect("DELETE", "/directories?path=g%2Fx", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing directory g/x. unlinkat %1$s/g/x: not a directory\"}");
  CHECK(mkfifo(wpath("dfifo"), 0600) == 0); /* a FIFO as the parent: never waited for */
  expect("DELETE", "/directories?path=dfifo%2Fx", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing directory dfifo/x. unlinkat %1$s/dfifo/x: not a "
         "directory\"}");
  /* a NUL byte (Go's os.RemoveAll): in the base name, the parent is opened and the base's unlinkat refused; in the
   * parent, its open refused; a missing parent is nothing to remove */
  expect("DELETE", "/directories?path=f%00x", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing directory f\\u0000x. unlinkat %1$s/f\\u0000x: "
         "invalid argument\"}");
  expect("DELETE", "/directories?path=a%00b%2Fc", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing directory a\\u0000b/c. open %1$s/a\\u0000b: "
         "invalid argument\"}");
  expect("DELETE", "/directories?path=nodir%2Fa%00b", NULL, 200, "");
  expect("DELETE", "/directories?path=%2F%00", NULL, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error removing directory /\\u0000. unlinkat //\\u0000: invalid "
         "argument\"}");
  CHECK(exists("f"));
  expect("DELETE", "/directories?path=%24%7BNOPE_FE_2%7D", NULL, 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path references undefined environment variables: NOPE_FE_2\"}");
}

/* A chain of 1000 directories, made level by level with mkdirat, with a file in each: far deeper than the window */
static void test_remove_all_deep(void) {
  int fd = open(ws, O_RDONLY | O_DIRECTORY);
  CHECK(fd >= 0);
  for (int i = 0; i < 1000 && fd >= 0; i++) {
    CHECK(mkdirat(fd, "n", 0755) == 0);
    int f = openat(fd, "f", O_WRONLY | O_CREAT, 0644);
    CHECK(f >= 0);
    close(f);
    int next = openat(fd, "n", O_RDONLY | O_DIRECTORY);
    CHECK(next >= 0);
    close(fd);
    fd = next;
  }
  if (fd >= 0) close(fd);
  expect("DELETE", "/directories?path=n", NULL, 200, "");
  CHECK(!exists("n"));
}

/* xd_remove_all directly: a tree of many small directories, removed with bounded descriptors */
static void test_remove_all_wide(void) {
  dir("wide");
  for (int i = 0; i < 50; i++) {
    char p[64];
    snprintf(p, sizeof p, "wide/%d", i);
    dir(p);
    snprintf(p, sizeof p, "wide/%d/x", i);
    put(p, "x");
  }
  xd_oserr e = {0};
  CHECK(xd_remove_all(wpath("wide"), &e) == 0);
  CHECK(e.err == 0);
  xd_oserr_free(&e);
  CHECK(!exists("wide"));
  CHECK(xd_remove_all(wpath("wide"), &e) == 0);
  xd_oserr_free(&e);
}

/* ---------------------------------------------------------------- POST /files/permissions */
static void test_permissions(void) {
  put("p.txt", "p");
  put("q.txt", "q");
  expect("POST", "/files/permissions", "{\"p.txt\":{\"mode\":600},\"q.txt\":{\"mode\":640,\"owner\":\"no-such-user-fe\"}}",
         200, "");
  CHECK(xd_mode_in(ws, "p.txt") == 0600 && xd_mode_in(ws, "q.txt") == 0640);
  /* symlinks are followed (chmod) */
  link_to("p.txt", "lp");
  expect("POST", "/files/permissions", "{\"lp\":{\"mode\":604}}", 200, "");
  CHECK(xd_mode_in(ws, "p.txt") == 0604 && is_link("lp"));
  link_to("nowhere", "lp-dangling");
  expect("POST", "/files/permissions", "{\"lp-dangling\":{\"mode\":604}}", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error changing permissions for lp-dangling. chmod %1$s/lp-dangling: "
         "no such file or directory\"}");
  expect("POST", "/files/permissions", "{\"missing.txt\":{\"mode\":644}}", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error changing permissions for missing.txt. chmod %1$s/missing.txt: "
         "no such file or directory\"}");
  /* no mode and no name that resolves: nothing to do, even for a missing file */
  expect("POST", "/files/permissions", "{\"missing.txt\":{\"mode\":0,\"owner\":\"\"}}", 200, "");
  /* every mode is checked before anything changes */
  expect("POST", "/files/permissions", "{\"p.txt\":{\"mode\":700},\"q.txt\":{\"mode\":999}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid mode 999 for q.txt: give the octal digits as a decimal "
         "integer, e.g. 644\"}");
  CHECK(xd_mode_in(ws, "p.txt") == 0604);
  /* duplicate keys: the last value (JSON.parse and Go's map agree) */
  expect("POST", "/files/permissions", "{\"p.txt\":{\"mode\":777},\"p.txt\":{\"mode\":611}}", 200, "");
  CHECK(xd_mode_in(ws, "p.txt") == 0611);
  /* root may chown: to a numeric group of /etc/group (root, 0) */
  expect("POST", "/files/permissions", "{\"p.txt\":{\"owner\":\"root\",\"group\":\"root\"}}", 200, "");
  /* bodies */
  expect("POST", "/files/permissions", "", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. EOF\"}");
  expect("POST", "/files/permissions", "{\"p.txt\":{", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. unexpected "
         "EOF\"}");
  expect("POST", "/files/permissions", "{\"p.txt\" {}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. invalid "
         "character '{' in JSON at offset 9\"}");
  expect("POST", "/files/permissions", "[]", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. expected a "
         "JSON object keyed by path\"}");
  expect("POST", "/files/permissions", "{\"a<b\":3}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. the value "
         "for \\\"a\\u003cb\\\" must be an object\"}");
  expect("POST", "/files/permissions", "{\"$NOPE_FE_3\":{\"mode\":644}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path references undefined environment variables: NOPE_FE_3\"}");
  /* an array or object mode: Go's decoder refuses it */
  expect("POST", "/files/permissions", "{\"p.txt\":{\"mode\":[644]}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: "
         "cannot unmarshal array into Go struct field Permission.mode of type int\"}");
  expect("POST", "/files/permissions", "{\"p.txt\":{\"mode\":{}}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: "
         "cannot unmarshal object into Go struct field Permission.mode of type int\"}");
  /* strings as Go's decoder reads them: \u0000 a NUL byte (refused by chmod and chown: EINVAL), a byte that is not
   * UTF-8 and a lone surrogate escape U+FFFD each */
  expect("POST", "/files/permissions", "{\"p\\u0000.txt\":{\"mode\":644}}", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error changing permissions for p\\u0000.txt. chmod "
         "%1$s/p\\u0000.txt: invalid argument\"}");
  expect("POST", "/files/permissions", "{\"p\\u0000.txt\":{\"owner\":\"root\"}}", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error changing permissions for p\\u0000.txt. failed to set "
         "owner/group for %1$s/p\\u0000.txt: chown %1$s/p\\u0000.txt: invalid argument\"}");
  expect("POST", "/files/permissions", "{\"p\\u0000.txt\":{\"group\":\"nogroup-fe\"}}", 200, "");
  expect("POST", "/files/permissions", "{\"p.txt\":{\"mode\":640,\"owner\":\"ro\\u0000ot\"}}", 200, "");
  CHECK(xd_mode_in(ws, "p.txt") == 0640);
  expect("POST", "/files/permissions", "{\"a\\u0000\":{\"mode\":9}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid mode 9 for a\\u0000: give the octal digits as a "
         "decimal integer, e.g. 644\"}");
  expect("POST", "/files/permissions", "{\"a\\u0000\":1}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. the value "
         "for \\\"a\\\\u0000\\\" must be an object\"}");
  put("q\xef\xbf\xbd.txt", "q");
  put("r\xef\xbf\xbd.txt", "r");
  expect("POST", "/files/permissions", "{\"q\xff.txt\":{\"mode\":601},\"r\\ud800.txt\":{\"mode\":602}}", 200, "");
  CHECK(xd_mode_in(ws, "q\xef\xbf\xbd.txt") == 0601 && xd_mode_in(ws, "r\xef\xbf\xbd.txt") == 0602);
  /* U+10FFFE as it is (the module's own stand-in for \u0000 when there is one) */
  put("m\xf4\x8f\xbf\xbe", "m");
  expect("POST", "/files/permissions", "{\"m\xf4\x8f\xbf\xbe\":{\"mode\":603}}", 200, "");
  CHECK(xd_mode_in(ws, "m\xf4\x8f\xbf\xbe") == 0603);
  int before = xd_declined;
  expect("POST", "/files/permissions", "{\"m\xf4\x8f\xbf\xbe\":{\"mode\":603},\"\\u0000\":{}}", 404, XD_NOT_FOUND);
  CHECK(xd_declined == before + 1);
}

/* ---------------------------------------------------------------- POST /files/mv */
static void test_move(void) {
  put("m.txt", "m");
  expect("POST", "/files/mv", "[{\"src\":\"m.txt\",\"dest\":\"moved/deeper/m2.txt\"}]", 200, "");
  CHECK(!exists("m.txt") && strcmp(get("moved/deeper/m2.txt"), "m") == 0);
  CHECK(xd_mode_in(ws, "moved") == 0755 && xd_mode_in(ws, "moved/deeper") == 0755);
  put("n.txt", "n");
  expect("POST", "/files/mv", "[{\"src\":\"n.txt\",\"dest\":\"moved/deeper/m2.txt\"}]", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: destination path already exists: "
         "moved/deeper/m2.txt\"}");
  expect("POST", "/files/mv", "[{\"src\":\"nope.txt\",\"dest\":\"x.txt\"}]", 404,
         "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found. source path not found: nope.txt: stat "
         "%1$s/nope.txt: no such file or directory\"}");
  expect("POST", "/files/mv", "[{\"src\":\"n.txt\",\"dest\":\"n.txt/sub/x\"}]", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: failed to create destination directory: mkdir "
         "%1$s/n.txt: not a directory\"}");
  expect("POST", "/files/mv", "[{\"src\":\"moved\",\"dest\":\"moved/deeper/inside\"}]", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: failed to rename file: rename %1$s/moved "
         "%1$s/moved/deeper/inside: invalid argument\"}");
  /* a directory; entries in order, an error stops the rest */
  dir("md");
  put("md/x", "x");
  expect("POST", "/files/mv", "[{\"src\":\"md\",\"dest\":\"md2\"},{\"src\":\"gone\",\"dest\":\"g2\"},{\"src\":\"n.txt\",\"dest\":\"n2\"}]",
         404, "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found. source path not found: gone: stat %1$s/gone: "
              "no such file or directory\"}");
  CHECK(exists("md2/x") && exists("n.txt"));
  /* symlinks: the link moves (its text unchanged); a dangling one is a missing source; a dangling destination is
   * replaced */
  link_to("n.txt", "ln");
  expect("POST", "/files/mv", "[{\"src\":\"ln\",\"dest\":\"md2/ln\"}]", 200, "");
  CHECK(is_link("md2/ln") && exists("n.txt"));
  link_to("nowhere", "ldang");
  expect("POST", "/files/mv", "[{\"src\":\"ldang\",\"dest\":\"x\"}]", 404,
         "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found. source path not found: ldang: stat %1$s/ldang: no "
         "such file or directory\"}");
  expect("POST", "/files/mv", "[{\"src\":\"n.txt\",\"dest\":\"ldang\"}]", 200, "");
  CHECK(!is_link("ldang") && strcmp(get("ldang"), "n") == 0);
  /* \u0000 (Go's system calls refuse it): in the source, in a parent of the destination (the parents above it are
   * made), in the destination's base name */
  expect("POST", "/files/mv", "[{\"src\":\"a\\u0000\",\"dest\":\"b\"}]", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: source path not found: a\\u0000: stat "
         "%1$s/a\\u0000: invalid argument\"}");
  expect("POST", "/files/mv", "[{\"src\":\"ldang\",\"dest\":\"nd/x\\u0000y/z\"}]", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: failed to create destination directory: "
         "mkdir %1$s/nd/x\\u0000y: invalid argument\"}");
  CHECK(xd_mode_in(ws, "nd") == 0755);
  expect("POST", "/files/mv", "[{\"src\":\"ldang\",\"dest\":\"nd2/z\\u0000\"}]", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: failed to rename file: rename %1$s/ldang "
         "%1$s/nd2/z\\u0000: invalid argument\"}");
  CHECK(xd_mode_in(ws, "nd2") == 0755 && exists("ldang"));
  /* bodies */
  expect("POST", "/files/mv", "{\"src\":\"a\",\"dest\":\"b\"}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. json: cannot "
         "unmarshal object into Go value of type []model.RenameFileItem\"}");
  expect("POST", "/files/mv", "[{\"src\":\"a\"}]", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. expected "
         "[{\\\"src\\\":\\\"\u2026\\\",\\\"dest\\\":\\\"\u2026\\\"}]\"}");
  expect("POST", "/files/mv", "[]", 200, "");
  expect("POST", "/files/mv", "[{\"src\":\"ldang\",\"dest\":\"$NOPE_FE_4\"}]", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path references undefined environment variables: NOPE_FE_4\"}");
  CHECK(exists("ldang"));
}

/* Across file systems (EXDEV): copied (content, mode, times, symlinks as they are), then the source removed */
static void test_move_across(void) {
  struct stat a, b;
  if (stat(ws, &a) != 0 || stat("/dev/shm", &b) != 0 || a.st_dev == b.st_dev) {
    printf("  (skipped: /dev/shm is on the workspace's file system)\n");
    return;
  }
  char other[64];
  snprintf(other, sizeof other, "/dev/shm/osb-fe-%d", (int)getpid());
  dir("x");
  dir("x/sub");
  put("x/sub/f.txt", "hello");
  CHECK(chmod(wpath("x/sub/f.txt"), 0640) == 0);
  struct timespec ts[2] = {{1000000000, 5}, {1200000000, 123456789}};
  CHECK(utimensat(AT_FDCWD, wpath("x/sub/f.txt"), ts, 0) == 0);
  link_to("../../out", "x/sub/l");
  CHECK(chmod(wpath("x/sub"), 0710) == 0);
  char body[512];
  snprintf(body, sizeof body, "[{\"src\":\"x\",\"dest\":\"%s/y\"}]", other);
  expect("POST", "/files/mv", body, 200, "");
  CHECK(!exists("x"));
  char p[256], t[64];
  struct stat st;
  snprintf(p, sizeof p, "%s/y/sub/f.txt", other);
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0640 && st.st_mtim.tv_sec == 1200000000 &&
        st.st_mtim.tv_nsec == 123456789 && st.st_size == 5);
  snprintf(p, sizeof p, "%s/y/sub", other);
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0710);
  snprintf(p, sizeof p, "%s/y/sub/l", other);
  ssize_t n = readlink(p, t, sizeof t - 1);
  CHECK(n == 9 && memcmp(t, "../../out", 9) == 0);
  /* and back */
  snprintf(body, sizeof body, "[{\"src\":\"%s/y\",\"dest\":\"x\"}]", other);
  expect("POST", "/files/mv", body, 200, "");
  CHECK(strcmp(get("x/sub/f.txt"), "hello") == 0 && is_link("x/sub/l"));
  snprintf(p, sizeof p, "%s/y", other);
  CHECK(lstat(p, &st) != 0);
  /* what cannot be copied (a FIFO): nothing moved, Go's EXDEV answer */
  CHECK(mkfifo(wpath("x/fifo"), 0600) == 0);
  snprintf(body, sizeof body, "[{\"src\":\"x\",\"dest\":\"%s/z\"}]", other);
  char want[1024];
  snprintf(want, sizeof want,
           "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: failed to rename file: rename %%1$s/x %s/z: "
           "invalid cross-device link\"}",
           other);
  expect("POST", "/files/mv", body, 500, want);
  snprintf(p, sizeof p, "%s/z", other);
  CHECK(lstat(p, &st) != 0 && exists("x/sub/f.txt") && exists("x/fifo"));
  xd_oserr e = {0};
  xd_remove_all(other, &e);
  xd_oserr_free(&e);
}

/* ---------------------------------------------------------------- POST /files/replace */
static void test_replace(void) {
  put("r.txt", "line1\nline2\nline3\n");
  CHECK(chmod(wpath("r.txt"), 0640) == 0);
  expect("POST", "/files/replace", "{\"r.txt\":{\"old\":\"line\",\"new\":\"LINE\"}}", 200, "");
  CHECK(strcmp(get("r.txt"), "LINE1\nLINE2\nLINE3\n") == 0 && xd_mode_in(ws, "r.txt") == 0640);
  put("s.txt", "aaaa");
  /* verbose: keys sorted as Go writes a map; non-overlapping matches; "new" absent is "" */
  expect("POST", "/files/replace?verbose=true", "{\"s.txt\":{\"old\":\"aa\"},\"r.txt\":{\"old\":\"zzz\",\"new\":\"y\"}}",
         200, "{\"r.txt\":{\"replacedCount\":0},\"s.txt\":{\"replacedCount\":2}}");
  CHECK(strcmp(get("s.txt"), "") == 0);
  expect("POST", "/files/replace?verbose=true", "{}", 200, "{}");
  expect("POST", "/files/replace?verbose=false", "{\"s.txt\":{\"old\":\"q\"}}", 200, "");
  /* symlinks: the target's content changes, the link stays */
  link_to("r.txt", "lr");
  expect("POST", "/files/replace", "{\"lr\":{\"old\":\"LINE2\",\"new\":\"<&>\"}}", 200, "");
  CHECK(is_link("lr") && strcmp(get("r.txt"), "LINE1\n<&>\nLINE3\n") == 0);
  /* errors: the file is read before old is checked */
  expect("POST", "/files/replace", "{\"r.txt\":{\"old\":\"\",\"new\":\"x\"}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"old content must not be empty\"}");
  expect("POST", "/files/replace", "{\"missing.txt\":{\"old\":\"\",\"new\":\"x\"}}", 404,
         "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found. stat %1$s/missing.txt: no such file or directory\"}");
  expect("POST", "/files/replace", "{\"r.txt\":{\"old\":\"a\",\"new\":null}}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. \\\"new\\\" "
         "must be a string\"}");
  expect("POST", "/files/replace", "{\"r.txt\":[]}", 400,
         "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"error parsing request, MAYBE invalid body format. the value "
         "for \\\"r.txt\\\" must be an object\"}");
  dir("rd");
  expect("POST", "/files/replace", "{\"rd\":{\"old\":\"a\"}}", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: read %1$s/rd: illegal operation on a "
         "directory\"}");
  /* \u0000: a NUL byte in a path (stat refused), in old and new (bytes) */
  expect("POST", "/files/replace", "{\"x\\u0000\":{\"old\":\"a\"}}", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: stat %1$s/x\\u0000: invalid argument\"}");
  FILE *nf = fopen(wpath("nz.txt"), "w");
  CHECK(nf != NULL);
  if (nf) {
    fwrite("a\0b\0", 1, 4, nf);
    fclose(nf);
  }
  expect("POST", "/files/replace?verbose=true", "{\"nz.txt\":{\"old\":\"\\u0000\",\"new\":\"<\\u0000>\"}}", 200,
         "{\"nz.txt\":{\"replacedCount\":2}}");
  struct stat nst;
  CHECK(stat(wpath("nz.txt"), &nst) == 0 && nst.st_size == 8);
  /* a FIFO nobody writes to is refused, not waited for */
  CHECK(mkfifo(wpath("rfifo"), 0600) == 0);
  expect("POST", "/files/replace", "{\"rfifo\":{\"old\":\"a\"}}", 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: read %1$s/rfifo: invalid argument\"}");
  /* the new content is bounded before it is made */
  put("big.txt", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
  char body[200];
  static char huge[3 * 1024 * 1024 + 1];
  memset(huge, 'b', sizeof huge - 1);
  osb_buf b = {0};
  CHECK(osb_buf_appendf(&b, "{\"big.txt\":{\"old\":\"a\",\"new\":\"%s\"}}", huge) >= 0);
  expect("POST", "/files/replace", b.data, 500,
         "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: write %1$s/big.txt: file too large\"}");
  osb_buf_free(&b);
  CHECK(strlen(get("big.txt")) == 32);
  snprintf(body, sizeof body, "{\"big.txt\":{\"old\":\"a\",\"new\":\"\"}}");
  expect("POST", "/files/replace?verbose=true", body, 200, "{\"big.txt\":{\"replacedCount\":32}}");
}

static void client(void) {
  RUN(test_delete_files);
  RUN(test_delete_dirs);
  RUN(test_remove_all_wide);
  RUN(test_remove_all_deep);
  RUN(test_permissions);
  RUN(test_move);
  RUN(test_move_across);
  RUN(test_replace);
}

int main(void) {
  return xd_module_test("xd-fsedit", ws, sizeof ws, &port, xd_fsedit_new, xd_fsedit_route, xd_fsedit_close, client);
}
