/* GET /files/info, GET|HEAD /files/download, GET /files/search and GET /directories/list of the C execd
 * (src/execd/files.c) through its real HTTP server (server.c) on loopback: a client thread sends each request over TCP
 * while the main thread runs the loop. The expected answers are the Node execd's (lib/dev-server/execd/files.js,
 * files-download.js) byte for byte but the Date header, and the real (Go) execd's where the Node execd's were a
 * JavaScript artefact (sorted info keys, NUL and non-UTF-8 paths, the RFC 5987 form, a FIFO, a time past year 9999).
 * Nothing is declined (the test server counts what no route takes in xd_declined): Range,
 * offset/limit, files over 8 MiB (streamed, also to a slow client and one that leaves), FIFOs, devices, requests with
 * a body. With --signal-forwarding, a download whose client left before its answer relays SIGPIPE. */
#include "harness.h"
#include "xd_loopback.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "execd/glob.h"
#include "execd/server.h"
#include "execd/xd.h"

static char ws[256];
static int port;
static size_t got_len;      /* bytes of the last exchange's answer */


/* `method target` (and extra header lines) on a fresh connection (Connection: close): the whole answer, its Date
 * header's value replaced by <date> (malloc'd; "" when nothing came). */
static char *exchange_raw(const char *req) {
  int fd = xd_dial(port, 10);
  if (fd < 0) return strdup("");
  int n = (int)strlen(req);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return strdup("");
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  for (;;) {
    if (len + 1 >= cap) buf = realloc(buf, cap *= 2);
    ssize_t r = read(fd, buf + len, cap - len - 1);
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(fd);
  buf[len] = '\0';
  got_len = len;
  char *d = strstr(buf, "\r\nDate: ");
  if (d) {
    char *e = strstr(d + 2, "\r\n");
    if (e) {
      d += 8;
      memcpy(d, "<date>", 6);
      memmove(d + 6, e, len - (size_t)(e - buf) + 1);
      got_len -= (size_t)(e - d) - 6;
    }
  }
  return buf;
}

static char *exchange(const char *method, const char *target, const char *extra) {
  char req[2048];
  snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", method, target, extra);
  return exchange_raw(req);
}

static void expect(const char *method, const char *target, const char *extra, const char *answer) {
  char *got = exchange(method, target, extra);
  if (strcmp(got, answer) != 0) printf("  %s %s\n    expected %s\n    got      %s\n", method, target, answer, got);
  CHECK_STR(got, answer);
  free(got);
}

/* A JSON answer as the server writes it */
static void expect_json(const char *target, const char *status, const char *body) {
  char answer[8192];
  snprintf(answer, sizeof answer,
           "HTTP/1.1 %s\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\nDate: <date>\r\n"
           "Content-Length: %zu\r\n\r\n%s", status, strlen(body), body);
  expect("GET", target, "", answer);
}

static void put(const char *rel, const char *content) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", ws, rel);
  FILE *f = fopen(p, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(content, f);
  fclose(f);
}

/* RFC 3339 of a timestamp, nanoseconds with trailing zeros trimmed (written here independently of files.c) */
static void rfc3339(const struct timespec *ts, char *out, size_t cap) {
  struct tm tm;
  gmtime_r(&ts->tv_sec, &tm);
  char base[32], frac[16] = "";
  strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
  if (ts->tv_nsec) {
    snprintf(frac, sizeof frac, ".%09ld", (long)ts->tv_nsec);
    for (size_t l = strlen(frac); frac[l - 1] == '0'; l--) frac[l - 1] = '\0';
  }
  snprintf(out, cap, "%s%sZ", base, frac);
}

/* The name of the first /etc/passwd (/etc/group) entry of an id, read with fgetpwent (not NSS, which dlopens and
 * keeps memory valgrind reports). 1 and the name in out, 0 when there is none. */
static int user_name(uid_t id, char *out, size_t cap) {
  FILE *f = fopen("/etc/passwd", "re");
  struct passwd *p;
  int found = 0;
  while (f && !found && (p = fgetpwent(f)) != NULL)
    if (p->pw_uid == id) found = snprintf(out, cap, "%s", p->pw_name) > 0;
  if (f) fclose(f);
  return found;
}

static int group_name(gid_t id, char *out, size_t cap) {
  FILE *f = fopen("/etc/group", "re");
  struct group *g;
  int found = 0;
  while (f && !found && (g = fgetgrent(f)) != NULL)
    if (g->gr_gid == id) found = snprintf(out, cap, "%s", g->gr_name) > 0;
  if (f) fclose(f);
  return found;
}

/* The FileInfo member of `key` for ws/rel as the Node execd writes it */
static void info_of(const char *key, const char *rel, char *out, size_t cap) {
  char p[512], m[64], c[64], owner[64], group[64];
  snprintf(p, sizeof p, "%s/%s", ws, rel);
  struct stat st;
  CHECK(lstat(p, &st) == 0);
  rfc3339(&st.st_mtim, m, sizeof m);
  rfc3339(&st.st_ctim, c, sizeof c);
  if (!user_name(st.st_uid, owner, sizeof owner)) snprintf(owner, sizeof owner, "%u", (unsigned)st.st_uid);
  if (!group_name(st.st_gid, group, sizeof group)) snprintf(group, sizeof group, "%u", (unsigned)st.st_gid);
  const char *type = S_ISLNK(st.st_mode) ? "symlink" : S_ISDIR(st.st_mode) ? "directory" : "file";
  snprintf(out, cap,
           "\"%s\":{\"path\":\"%s\",\"type\":\"%s\",\"size\":%lld,\"modified_at\":\"%s\",\"created_at\":\"%s\","
           "\"owner\":\"%s\",\"group\":\"%s\",\"mode\":%o}",
           key, p, type, (long long)st.st_size, m, c, owner, group, (unsigned)(st.st_mode & 0777));
}

static void test_info(void) {
  put("a.txt", "line1\nline2\n");
  char p[512];
  snprintf(p, sizeof p, "%s/a.txt", ws);
  struct timespec times[2] = {{1764500000, 5}, {1764500000, 123456700}};
  CHECK(utimensat(AT_FDCWD, p, times, 0) == 0);
  CHECK(chmod(p, 0640) == 0);
  snprintf(p, sizeof p, "%s/sub", ws);
  CHECK(mkdir(p, 0750) == 0);
  snprintf(p, sizeof p, "%s/link", ws);
  CHECK(symlink("a.txt", p) == 0);
  char a[1024], sub[1024], link[1024], body[4096], target[512];
  info_of("a.txt", "a.txt", a, sizeof a);
  CHECK(strstr(a, "\"modified_at\":\"2025-11-30T10:53:20.1234567Z\"") != NULL);
  CHECK(strstr(a, "\"mode\":640}") != NULL);
  info_of("sub", "sub", sub, sizeof sub);
  info_of("link", "link", link, sizeof link);
  CHECK(strstr(link, "\"type\":\"symlink\",\"size\":5,") != NULL); /* lstat: the link itself */
  /* Go's encoding/json of a map: the keys sorted byte by byte, one member per key */
  snprintf(body, sizeof body, "{%s,%s,%s}", a, link, sub);
  expect_json("/files/info?path=a.txt&path=sub&path=link&path=a.txt", "200 OK", body);
  /* an absolute path and its key as given */
  info_of("/x", "a.txt", a, sizeof a);
  char key[300];
  snprintf(key, sizeof key, "\"%s/a.txt\"", ws);
  char *k = strstr(a, "\"/x\"");
  CHECK(k != NULL);
  snprintf(body, sizeof body, "{%s%s}", key, a + 4);
  snprintf(target, sizeof target, "/files/info?path=%s/a.txt", ws);
  expect_json(target, "200 OK", body);
  expect_json("/files/info", "200 OK", "{}");
  /* JSON escaping of the key and path as goJson: <>& as \u003c \u003e \u0026 */
  put("<&>", "x");
  info_of("\\u003c\\u0026\\u003e", "<&>", a, sizeof a);
  char *at = strstr(a, "\"path\":\"");
  char esc[1024];
  snprintf(esc, sizeof esc, "{%.*s\"path\":\"%s/\\u003c\\u0026\\u003e\"%s}", (int)(at - a), a, ws, strstr(at + 8, "\",") + 1);
  expect_json("/files/info?path=%3C%26%3E", "200 OK", esc);
}

static void test_info_errors(void) {
  char body[1024];
  snprintf(body, sizeof body,
           "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found. file not found: nope: lstat %s/nope: no such file "
           "or directory\"}", ws);
  expect_json("/files/info?path=a.txt&path=nope&path=a.txt%2Fx", "404 Not Found", body);
  snprintf(body, sizeof body,
           "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: error accessing file a.txt/x: lstat "
           "%s/a.txt/x: not a directory\"}", ws);
  expect_json("/files/info?path=a.txt%2Fx&path=nope", "500 Internal Server Error", body);
  expect_json("/files/info?path=a.txt&path=%24NOPE_XD_F%2Fx", "400 Bad Request",
              "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path references undefined environment variables: NOPE_XD_F\"}");
}

/* a file whose owner and group have no name: the numbers */
static void test_info_numeric_owner(void) {
  char name[64];
  if (getuid() != 0 || user_name(54321, name, sizeof name) || group_name(54322, name, sizeof name)) {
    printf("  (skipped: needs root and no user 54321 / group 54322)\n");
    return;
  }
  put("num", "n");
  char p[512], a[1024], body[1200];
  snprintf(p, sizeof p, "%s/num", ws);
  CHECK(chown(p, 54321, 54322) == 0);
  info_of("num", "num", a, sizeof a);
  CHECK(strstr(a, "\"owner\":\"54321\",\"group\":\"54322\"") != NULL);
  snprintf(body, sizeof body, "{%s}", a);
  expect_json("/files/info?path=num", "200 OK", body);
}

static void test_download(void) {
  /* a.txt: mtime 2025-11-30 10:53:20 UTC (test_info) */
  expect("GET", "/files/download?path=a.txt", "",
         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; "
         "filename=\"a.txt\"\r\nAccept-Ranges: bytes\r\nLast-Modified: Sun, 30 Nov 2025 10:53:20 GMT\r\nConnection: "
         "close\r\nDate: <date>\r\nContent-Length: 12\r\n\r\nline1\nline2\n");
  expect("HEAD", "/files/download?path=a.txt", "",
         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; "
         "filename=\"a.txt\"\r\nAccept-Ranges: bytes\r\nLast-Modified: Sun, 30 Nov 2025 10:53:20 GMT\r\nConnection: "
         "close\r\nDate: <date>\r\nContent-Length: 12\r\n\r\n");
  /* through the symlink; an empty file */
  expect("GET", "/files/download?path=link", "",
         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; "
         "filename=\"link\"\r\nAccept-Ranges: bytes\r\nLast-Modified: Sun, 30 Nov 2025 10:53:20 GMT\r\nConnection: "
         "close\r\nDate: <date>\r\nContent-Length: 12\r\n\r\nline1\nline2\n");
  put("empty", "");
  char p[512];
  snprintf(p, sizeof p, "%s/empty", ws);
  struct timespec times[2] = {{0, 0}, {-1, 500000000}}; /* 1969-12-31 23:59:59.5 */
  CHECK(utimensat(AT_FDCWD, p, times, 0) == 0);
  expect("GET", "/files/download?path=empty", "",
         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; "
         "filename=\"empty\"\r\nAccept-Ranges: bytes\r\nLast-Modified: Wed, 31 Dec 1969 23:59:59 GMT\r\nConnection: "
         "close\r\nDate: <date>\r\nContent-Length: 0\r\n\r\n");
}

static void test_download_errors(void) {
  char body[1024], answer[1400];
  snprintf(body, sizeof body, "{\"code\":\"INVALID_FILE\",\"message\":\"path is a directory: %s/sub\"}", ws);
  expect_json("/files/download?path=sub", "400 Bad Request", body);
  snprintf(body, sizeof body,
           "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found. open %s/nope: no such file or directory\"}", ws);
  expect_json("/files/download?path=nope", "404 Not Found", body);
  /* HEAD of an error: the JSON answer's head, no body */
  snprintf(answer, sizeof answer,
           "HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\nDate: "
           "<date>\r\nContent-Length: %zu\r\n\r\n", strlen(body));
  expect("HEAD", "/files/download?path=nope", "", answer);
  const char *missing = "{\"code\":\"MISSING_QUERY\",\"message\":\"missing query parameter 'path'\"}";
  expect_json("/files/download", "400 Bad Request", missing);
  expect_json("/files/download?path=&path=a.txt", "400 Bad Request", missing);
  expect_json("/files/download?path=%24NOPE_XD_F", "400 Bad Request",
              "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path references undefined environment variables: NOPE_XD_F\"}");
}

static _Atomic int relayed;
static void count_relay(int sig) {
  if (sig == SIGPIPE) relayed++;
}

/* A FileInfo of ws/rel as `{...}` (info_of without its key) */
static void fileinfo(const char *rel, char *out, size_t cap) {
  char m[1200];
  info_of("", rel, m, sizeof m);
  snprintf(out, cap, "%s", m + 3);
}

/* `[` + the FileInfos of the relative paths, `,`-separated + `]` */
static void fileinfos(char *out, size_t cap, const char *const *rels, size_t n) {
  size_t at = (size_t)snprintf(out, cap, "[");
  for (size_t i = 0; i < n; i++) {
    char one[1200];
    fileinfo(rels[i], one, sizeof one);
    at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? "," : "", one);
  }
  snprintf(out + at, cap - at, "]");
}

static void set_mtime(const char *rel, time_t s) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", ws, rel);
  struct timespec t[2] = {{s, 0}, {s, 0}};
  CHECK(utimensat(AT_FDCWD, p, t, AT_SYMLINK_NOFOLLOW) == 0);
}

#define A_TXT_HEAD                                                                                                    \
  "Content-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"a.txt\"\r\n"
#define LM "Last-Modified: Sun, 30 Nov 2025 10:53:20 GMT\r\n"

/* Everything is answered here now (nothing goes to the Node execd), as the real execd answers it. */
static void test_nothing_handed(void) {
  int before = xd_declined;
  char body[4096], answer[4096], a[1200], b[1200];
  /* a base name that is not ASCII: the RFC 5987 form with Go's url.PathEscape ( ( ) escaped, $ & + : = @ kept) */
  put("\xc3\xa9t\xc3\xa9 (1)&=", "e");
  set_mtime("\xc3\xa9t\xc3\xa9 (1)&=", 1764500000);
  expect("GET", "/files/download?path=%C3%A9t%C3%A9%20(1)%26%3D", "",
         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; "
         "filename=\"%C3%A9t%C3%A9%20%281%29&=\"; filename*=UTF-8''%C3%A9t%C3%A9%20%281%29&=\r\nAccept-Ranges: bytes\r\n"
         LM "Connection: close\r\nDate: <date>\r\nContent-Length: 1\r\n\r\ne");
  /* a byte that is not UTF-8: the file of that very name (Go's strings are bytes), %FF in the header */
  put("\xff", "ff");
  set_mtime("\xff", 1764500000);
  expect("GET", "/files/download?path=%FF", "",
         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; "
         "filename=\"%FF\"; filename*=UTF-8''%FF\r\nAccept-Ranges: bytes\r\n" LM
         "Connection: close\r\nDate: <date>\r\nContent-Length: 2\r\n\r\nff");
  char *got = exchange("GET", "/files/info?path=%FF", "");
  snprintf(body, sizeof body, "{\"\\ufffd\":{\"path\":\"%s/\\ufffd\",\"type\":\"file\",\"size\":2,", ws);
  CHECK(strstr(got, body) != NULL);
  free(got);
  /* an ASCII name with a CR: written as a space, as Go's server writes a header value */
  put("c\rd", "cd");
  set_mtime("c\rd", 1764500000);
  expect("HEAD", "/files/download?path=c%0Dd", "",
         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; "
         "filename=\"c d\"\r\nAccept-Ranges: bytes\r\n" LM "Connection: close\r\nDate: <date>\r\nContent-Length: 2\r\n\r\n");
  /* a NUL: the system call's EINVAL, as Go's */
  snprintf(body, sizeof body,
           "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: open %s/a\\u0000b: invalid argument\"}", ws);
  expect_json("/files/download?path=a%00b", "500 Internal Server Error", body);
  snprintf(body, sizeof body,
           "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: error accessing file a\\u0000b: lstat "
           "%s/a\\u0000b: invalid argument\"}", ws);
  expect_json("/files/info?path=a%00b", "500 Internal Server Error", body);
  /* info: keys sorted (an array index is not first because it is one), __proto__ a member like any */
  put("7", "seven");
  put("__proto__", "p");
  info_of("7", "7", a, sizeof a);
  info_of("a.txt", "a.txt", b, sizeof b);
  snprintf(body, sizeof body, "{%s,%s}", a, b);
  expect_json("/files/info?path=a.txt&path=7", "200 OK", body);
  info_of("__proto__", "__proto__", a, sizeof a);
  snprintf(body, sizeof body, "{%s}", a);
  expect_json("/files/info?path=__proto__", "200 OK", body);
  /* a request with a body: read, then answered */
  got = exchange_raw("GET /files/download?path=a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello");
  snprintf(answer, sizeof answer,
           "HTTP/1.1 200 OK\r\n" A_TXT_HEAD "Accept-Ranges: bytes\r\n" LM
           "Connection: close\r\nDate: <date>\r\nContent-Length: 12\r\n\r\nline1\nline2\n");
  CHECK_STR(got, answer);
  free(got);
  got = exchange_raw("GET /files/info HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     "3\r\nabc\r\n0\r\n\r\n");
  CHECK_STR(got, "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\nDate: "
                 "<date>\r\nContent-Length: 2\r\n\r\n{}");
  free(got);
  CHECK(xd_declined == before);
}

static void test_ranges(void) {
  expect("GET", "/files/download?path=a.txt", "Range: bytes=0-1\r\n",
         "HTTP/1.1 206 Partial Content\r\n" A_TXT_HEAD
         "Content-Range: bytes 0-1/12\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 2\r\n\r\nli");
  expect("GET", "/files/download?path=a.txt", "Range: bytes=-3\r\n",
         "HTTP/1.1 206 Partial Content\r\n" A_TXT_HEAD
         "Content-Range: bytes 9-11/12\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 3\r\n\r\ne2\n");
  expect("GET", "/files/download?path=a.txt", "Range: bytes=50-60, 10-\r\n",
         "HTTP/1.1 206 Partial Content\r\n" A_TXT_HEAD
         "Content-Range: bytes 10-11/12\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 2\r\n\r\n2\n");
  expect("HEAD", "/files/download?path=a.txt", "Range: bytes=0-1\r\n",
         "HTTP/1.1 206 Partial Content\r\n" A_TXT_HEAD
         "Content-Range: bytes 0-1/12\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 2\r\n\r\n");
  expect("GET", "/files/download?path=a.txt", "Range: bytes=100-200\r\n",
         "HTTP/1.1 416 Requested Range Not Satisfiable\r\nContent-Disposition: attachment; filename=\"a.txt\"\r\n"
         "Content-Range: bytes */12\r\nContent-Type: text/plain; charset=utf-8\r\n" LM
         "X-Content-Type-Options: nosniff\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 33\r\n\r\n"
         "invalid range: failed to overlap\n");
  expect("GET", "/files/download?path=a.txt", "Range: bytes=3-1\r\n",
         "HTTP/1.1 416 Requested Range Not Satisfiable\r\nContent-Disposition: attachment; filename=\"a.txt\"\r\n"
         "Content-Range: bytes */12\r\nContent-Type: text/plain; charset=utf-8\r\n" LM
         "X-Content-Type-Options: nosniff\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 14\r\n\r\n"
         "invalid range\n");
}

static void test_lines(void) {
  expect("GET", "/files/download?path=a.txt&offset=2&limit=1", "",
         "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nDate: <date>\r\n"
         "Content-Length: 5\r\n\r\nline2");
  expect("GET", "/files/download?path=a.txt&offset=1&limit=9", "",
         "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nDate: <date>\r\n"
         "Content-Length: 11\r\n\r\nline1\nline2");
  expect("GET", "/files/download?path=a.txt&offset=3&limit=1", "",
         "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nDate: <date>\r\n"
         "Content-Length: 0\r\n\r\n");
  expect_json("/files/download?path=a.txt&offset=1", "400 Bad Request",
              "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"both offset and limit must be provided together for "
              "line-based reading\"}");
  expect_json("/files/download?path=a.txt&offset=0&limit=1", "400 Bad Request",
              "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"offset must be a positive integer (1-based)\"}");
  expect_json("/files/download?path=a.txt&offset=1&limit=-1", "400 Bad Request",
              "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"limit must be a positive integer\"}");
  char body[1024];
  snprintf(body, sizeof body,
           "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error accessing file: read %s/sub: is a directory\"}", ws);
  expect_json("/files/download?path=sub&offset=1&limit=1", "500 Internal Server Error", body);
  /* lines across the reader's 256 KiB chunks */
  size_t n = 300000;
  char *big = malloc(n + 16);
  memset(big, 'x', n);
  memcpy(big + n, "\ny\nzz", 6);
  put("lines", big);
  free(big);
  expect("GET", "/files/download?path=lines&offset=2&limit=1", "",
         "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nDate: <date>\r\n"
         "Content-Length: 1\r\n\r\ny");
  expect("GET", "/files/download?path=lines&offset=2&limit=5", "",
         "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nDate: <date>\r\n"
         "Content-Length: 4\r\n\r\ny\nzz");
}

/* A file over 8 MiB goes out in chunks, with the client's pace (a client that waits before it reads), and a client
 * that leaves in the middle stops it (and relays SIGPIPE: this module runs with --signal-forwarding). */
static void test_stream(void) {
  size_t n = 8 * 1024 * 1024 + 1000;
  char p[512];
  snprintf(p, sizeof p, "%s/big", ws);
  unsigned char *data = malloc(n);
  for (size_t i = 0; i < n; i++) data[i] = (unsigned char)(i % 251);
  FILE *f = fopen(p, "w");
  CHECK(f && fwrite(data, 1, n, f) == n);
  if (f) fclose(f);
  set_mtime("big", 1764500000);
  for (int slow = 0; slow < 2; slow++) {
    int fd = xd_dial(port, 10);
    const char req[] = "GET /files/download?path=big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    CHECK(write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
    if (slow) usleep(300000); /* the server's queue passes its high mark and waits for the drain */
    size_t cap = n + 4096, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while (len < cap && (r = read(fd, buf + len, cap - len)) > 0) len += (size_t)r;
    close(fd);
    char *e = memmem(buf, len, "\r\n\r\n", 4);
    CHECK(e != NULL);
    if (e) {
      CHECK(memmem(buf, (size_t)(e + 2 - buf), "\r\nContent-Length: 8389608\r\n", 27) != NULL);
      CHECK(len - (size_t)(e + 4 - buf) == n);
      CHECK(memcmp(e + 4, data, n) == 0);
    }
    free(buf);
  }
  /* a range of over 8 MiB is streamed too */
  char *got = exchange("GET", "/files/download?path=big", "Range: bytes=1000-\r\n");
  char *e = strstr(got, "\r\n\r\n");
  CHECK(strstr(got, "Content-Range: bytes 1000-8389607/8389608\r\n") != NULL);
  CHECK(e && got_len - (size_t)(e + 4 - got) == n - 1000 && memcmp(e + 4, data + 1000, n - 1000) == 0);
  free(got);
  /* a client that leaves after the first bytes */
  int before = relayed;
  int fd = xd_dial(port, 10);
  const char req[] = "GET /files/download?path=big HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
  char small[65536];
  CHECK(read(fd, small, sizeof small) > 0);
  close(fd);
  for (int i = 0; i < 1000 && relayed == before; i++) usleep(10000); /* polled, with a 10 s deadline */
  CHECK(relayed == before + 1);
  free(data);
  expect_json("/files/download", "400 Bad Request", "{\"code\":\"MISSING_QUERY\",\"message\":\"missing query parameter 'path'\"}");
}

static void *fifo_writer(void *arg) {
  usleep(200000);
  int fd = open(arg, O_WRONLY);
  if (fd >= 0) close(fd);
  return NULL;
}

/* A FIFO: Go's open waits for a writer, then ServeContent cannot seek it: 500 "seeker can't seek". A client that leaves
 * before any writer frees its wait. */
static void test_fifo(void) {
  char p[512];
  snprintf(p, sizeof p, "%s/fifo", ws);
  CHECK(mkfifo(p, 0644) == 0);
  int fd = xd_dial(port, 10);
  const char req[] = "GET /files/download?path=fifo HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
  usleep(100000);
  close(fd);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fifo_writer, p) == 0);
  expect("GET", "/files/download?path=fifo", "",
         "HTTP/1.1 500 Internal Server Error\r\nContent-Disposition: attachment; filename=\"fifo\"\r\nContent-Type: "
         "text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\nDate: <date>\r\n"
         "Content-Length: 18\r\n\r\nseeker can't seek\n");
  pthread_join(t, NULL);
  /* a device: its size where a seek to its end lands (0 for /dev/null) */
  got_len = 0;
  char *got = exchange("GET", "/files/download?path=%2Fdev%2Fnull", "");
  const char *null_head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: "
                          "attachment; filename=\"null\"\r\nAccept-Ranges: bytes\r\n";
  CHECK(strncmp(got, null_head, strlen(null_head)) == 0);
  CHECK(strstr(got, "\r\nContent-Length: 0\r\n\r\n") != NULL);
  free(got);
}

static void mk(const char *rel) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", ws, rel);
  CHECK(mkdir(p, 0755) == 0);
}

static void test_search(void) {
  mk("s");
  mk("s/d");
  mk("s/d/e");
  mk("s/emptydir");
  put("s/b.txt", "b");
  put("s/a.md", "a");
  put("s/d/c.txt", "c");
  put("s/d/e/f.txt", "f");
  char p[512], body[16384];
  snprintf(p, sizeof p, "%s/s/link", ws);
  CHECK(symlink("b.txt", p) == 0);
  const char *txt[] = {"s/b.txt", "s/d/c.txt", "s/d/e/f.txt"};
  fileinfos(body, sizeof body, txt, 3);
  expect_json("/files/search?path=s&pattern=*.txt", "200 OK", body);
  const char *all[] = {"s/a.md", "s/b.txt", "s/d/c.txt", "s/d/e/f.txt", "s/link"};
  fileinfos(body, sizeof body, all, 5);
  expect_json("/files/search?path=s", "200 OK", body);
  expect_json("/files/search?path=s&pattern=", "200 OK", body);
  const char *al[] = {"s/a.md", "s/link"};
  fileinfos(body, sizeof body, al, 2);
  expect_json("/files/search?path=s&pattern=%7Ba%2Cl%7D*", "200 OK", body);
  fileinfos(body, sizeof body, txt, 1);
  expect_json("/files/search?path=s%2Fb.txt&pattern=*.txt", "200 OK", body);
  expect_json("/files/search?path=s&pattern=%5B!a-z%5D*", "200 OK", "[]");
  expect_json("/files/search?path=s&pattern=%5B", "500 Internal Server Error",
              "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error searching files. invalid pattern [: syntax error in "
              "pattern\"}");
  snprintf(body, sizeof body,
           "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found. stat %s/missing: no such file or directory\"}", ws);
  expect_json("/files/search?path=missing&pattern=%5B", "404 Not Found", body);
  expect_json("/files/search", "400 Bad Request", "{\"code\":\"MISSING_QUERY\",\"message\":\"missing query parameter 'path'\"}");
  /* a pattern that makes a backtracking matcher explode: one pass here */
  char name[256];
  memset(name, 'a', 200);
  strcpy(name + 200, "c");
  put(name, "x");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  expect_json("/files/search?path=.&pattern=*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", "200 OK", "[]");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK(t1.tv_sec - t0.tv_sec < 5);
  snprintf(p, sizeof p, "%s/%s", ws, name);
  CHECK(unlink(p) == 0);
}

/* glob.c against what files-glob.js's RegExp answers (and Go's doublestar where V8 refused: an out-of-order range) */
static void test_glob(void) {
  static const struct {
    const char *pattern, *name;
    int want; /* 1 match, 0 no match, -1 malformed */
  } cases[] = {
      {"*.txt", "a.txt", 1}, {"*.txt", "a.md", 0}, {"**", "anything", 1}, {"?", "\xc3\xa9", 1}, {"??", "\xc3\xa9", 0},
      {"[a-c]x", "bx", 1}, {"[!a-c]x", "bx", 0}, {"[^a-c]x", "dx", 1}, {"[z-a]", "m", 0}, {"[a\\-c]", "b", 1},
      {"[a-]", "-", 1}, {"{a,b{c,d}}*.[ch]", "bd.c", 1}, {"{a,b{c,d}}*.[ch]", "b.c", 0}, {"{}x", "x", 1},
      {"\\*", "*", 1}, {"\\*", "a", 0}, {"a**", "abc", 1}, {"**/x", "x", 1}, {"x/**", "x", 0}, {"\xff", "\xfe", 1},
      {"[", "a", -1}, {"[]", "a", -1}, {"[!]", "a", -1}, {"a\\", "a", -1}, {"{a", "a", -1}, {"{[}]", "x", -1},
      {"*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    xd_glob *g = NULL;
    int rc = xd_glob_compile(cases[i].pattern, strlen(cases[i].pattern), &g);
    int got = rc == 1 ? -1 : rc == 0 ? xd_glob_match(g, cases[i].name, strlen(cases[i].name)) : -2;
    if (got != cases[i].want) printf("  glob %s on %s: %d, expected %d\n", cases[i].pattern, cases[i].name, got, cases[i].want);
    CHECK(got == cases[i].want);
    xd_glob_free(g);
  }
}

static void test_list(void) {
  char body[16384];
  const char *one[] = {"s/a.md", "s/b.txt", "s/d", "s/emptydir", "s/link"};
  fileinfos(body, sizeof body, one, 5);
  expect_json("/directories/list?path=s", "200 OK", body);
  expect_json("/directories/list?path=s&depth=", "200 OK", body);
  const char *two[] = {"s/a.md", "s/b.txt", "s/d", "s/d/c.txt", "s/d/e", "s/emptydir", "s/link"};
  fileinfos(body, sizeof body, two, 7);
  expect_json("/directories/list?path=s&depth=2", "200 OK", body);
  expect_json("/directories/list?path=s&depth=%2B2", "200 OK", body); /* Go's strconv.Atoi takes a sign */
  expect_json("/directories/list?path=s&depth=0", "200 OK", "[]");
  expect_json("/directories/list?path=s&depth=x", "400 Bad Request",
              "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid query parameter 'depth': x\"}");
  expect_json("/directories/list?path=s&depth=-1", "400 Bad Request",
              "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"invalid query parameter 'depth': -1\"}");
  snprintf(body, sizeof body,
           "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path is a symbolic link, refusing to traverse: %s/s/link\"}", ws);
  expect_json("/directories/list?path=s%2Flink", "400 Bad Request", body);
  snprintf(body, sizeof body, "{\"code\":\"INVALID_REQUEST_BODY\",\"message\":\"path is not a directory: %s/s/b.txt\"}", ws);
  expect_json("/directories/list?path=s%2Fb.txt", "400 Bad Request", body);
  snprintf(body, sizeof body,
           "{\"code\":\"FILE_NOT_FOUND\",\"message\":\"file not found. lstat %s/missing: no such file or directory\"}", ws);
  expect_json("/directories/list?path=missing", "404 Not Found", body);
  expect_json("/directories/list", "400 Bad Request", "{\"code\":\"MISSING_QUERY\",\"message\":\"missing query parameter 'path'\"}");
  /* a time past year 9999: Go's json.Marshal fails, gin has written the 200 head and no body (in the workspace, or
   * in a tmpfs when the workspace's file system does not store such a time) */
  char dir[512], file[600], q[1400];
  snprintf(dir, sizeof dir, "%s/t", ws);
  int made = 0;
  for (int i = 0; i < 2 && !made; i++) {
    if (i == 1) {
      snprintf(dir, sizeof dir, "/dev/shm/osb-xd-files-XXXXXX");
      if (!mkdtemp(dir)) break;
    } else if (mkdir(dir, 0755) != 0) {
      continue;
    }
    snprintf(file, sizeof file, "%s/x", dir);
    FILE *f = fopen(file, "w");
    if (!f) continue;
    fputs("x", f);
    fclose(f);
    struct timespec t[2] = {{253402300800, 0}, {253402300800, 0}}; /* 10000-01-01 */
    struct stat st;
    made = utimensat(AT_FDCWD, file, t, 0) == 0 && lstat(file, &st) == 0 && st.st_mtim.tv_sec == 253402300800;
    if (!made) {
      unlink(file);
      rmdir(dir);
    }
  }
  if (!made) {
    printf("  (no file system here stores year 10000: skipped)\n");
    return;
  }
  const char *empty = "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\nDate: "
                      "<date>\r\nContent-Length: 0\r\n\r\n";
  snprintf(q, sizeof q, "/directories/list?path=%s", dir);
  expect("GET", q, "", empty);
  snprintf(q, sizeof q, "/files/search?path=%s", dir);
  expect("GET", q, "", empty);
  snprintf(q, sizeof q, "/files/info?path=%s", file);
  expect("GET", q, "", empty);
  snprintf(q, sizeof q, "/files/download?path=%s", file);
  expect("HEAD", q, "",
         "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; "
         "filename=\"x\"\r\nAccept-Ranges: bytes\r\nLast-Modified: Sat, 01 Jan 10000 00:00:00 GMT\r\nConnection: "
         "close\r\nDate: <date>\r\nContent-Length: 1\r\n\r\n");
  CHECK(unlink(file) == 0);
  CHECK(rmdir(dir) == 0);
}

/* --signal-forwarding: a download whose client went away before its answer relays SIGPIPE (files.c job_done). The
 * module runs with forwarding on and this counter as its relay; libuv's pool has one thread (main), which a blocker
 * holds while the client sends a download and leaves, so the job runs only after the server saw the close. */

static uv_async_t queue_blocker;
static uv_work_t blocker;
static latch blocker_started, blocker_release;

static void blocker_work(uv_work_t *w) {
  (void)w;
  latch_hit(&blocker_started);
  latch_wait(&blocker_release, 1, 20000);
}
static void blocker_done(uv_work_t *w, int status) { (void)w, (void)status; }
static void on_queue_blocker(uv_async_t *a) {
  (void)a;
  CHECK(uv_queue_work(queue_blocker.loop, &blocker, blocker_work, blocker_done) == 0);
}

static void *files_new(const xd_ctx *ctx) {
  xd_ctx c = *ctx;
  c.signal_forwarding = 1;
  c.relay_signal = count_relay;
  uv_async_init(ctx->loop, &queue_blocker, on_queue_blocker);
  uv_unref((uv_handle_t *)&queue_blocker); /* the loop ends with the server; files_close closes it */
  return xd_files_new(&c);
}
static void files_close(void *module) {
  uv_close((uv_handle_t *)&queue_blocker, NULL);
  xd_files_close(module);
}

static void test_relay_sigpipe(void) {
  latch_init(&blocker_started);
  latch_init(&blocker_release);
  uv_async_send(&queue_blocker);
  CHECK(latch_wait(&blocker_started, 1, 10000));
  int before = relayed;
  /* a download queued behind the blocker, its client gone */
  int fd = xd_dial(port, 10);
  const char req[] = "GET /files/download?path=a.txt HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(write(fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1));
  close(fd);
  /* an answer on another connection that needs no pool thread: the loop has seen the first one's close by then (its
   * FIN came before this connection was accepted) */
  expect_json("/files/download", "400 Bad Request", "{\"code\":\"MISSING_QUERY\",\"message\":\"missing query parameter 'path'\"}");
  CHECK(relayed == before);
  latch_hit(&blocker_release);
  for (int i = 0; i < 1000 && relayed == before; i++) usleep(10000); /* polled, with a 10 s deadline */
  CHECK(relayed == before + 1);
  latch_destroy(&blocker_started);
  latch_destroy(&blocker_release);
}

static void client(void) {
  RUN(test_info);
  RUN(test_info_errors);
  RUN(test_info_numeric_owner);
  RUN(test_download);
  RUN(test_download_errors);
  RUN(test_nothing_handed);
  RUN(test_ranges);
  RUN(test_lines);
  RUN(test_stream);
  RUN(test_fifo);
  RUN(test_glob);
  RUN(test_search);
  RUN(test_list);
  RUN(test_relay_sigpipe);
}

int main(void) {
  setenv("UV_THREADPOOL_SIZE", "1", 1); /* before the pool starts: test_relay_sigpipe holds its one thread */
  return xd_module_test("xd-files", ws, sizeof ws, &port, files_new, xd_files_route, files_close, client);
}
