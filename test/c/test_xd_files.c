/* GET /files/info and GET|HEAD /files/download of the C execd (src/execd/files.c) through its real HTTP server
 * (server.c) on loopback: a client thread sends each request over TCP while the main thread runs the loop. The
 * expected answers are the Node execd's (lib/dev-server/execd/files.js info, files-download.js handleDownload), byte
 * for byte but the Date header; what files.c must not answer (a Range, offset/limit, a FIFO, a non-ASCII base name, a
 * file over 8 MiB, an array-index key, a NUL in a path, a request with a body) is handed over, which the test's
 * handoff function (xd_handoff_502) records and answers with 502 itself. With --signal-forwarding, a download whose
 * client left before its answer relays SIGPIPE (test_relay_sigpipe). */
#include "harness.h"
#include "xd_loopback.h"

#include <fcntl.h>
#include <signal.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "execd/server.h"
#include "execd/xd.h"

static char ws[256];
static int port;
static size_t got_len;      /* bytes of the last exchange's answer */


/* `method target` (and extra header lines) on a fresh connection (Connection: close): the whole answer, its Date
 * header's value replaced by <date> (malloc'd; "" when nothing came). */
static char *exchange(const char *method, const char *target, const char *extra) {
  int fd = xd_dial(port, 10);
  if (fd < 0) return strdup("");
  char req[2048];
  int n = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", method, target, extra);
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
  /* two paths, in order; the file's member once, where it first appears */
  snprintf(body, sizeof body, "{%s,%s,%s}", a, sub, link);
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

static const char HANDED[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

static void test_handed_over(void) {
  int before = xd_handed;
  expect("GET", "/files/download?path=a.txt", "Range: bytes=0-1\r\n", HANDED);
  expect("GET", "/files/download?path=a.txt&offset=1&limit=1", "", HANDED);
  expect("GET", "/files/download?path=a.txt&limit=", "", HANDED);
  char p[512];
  snprintf(p, sizeof p, "%s/fifo", ws);
  CHECK(mkfifo(p, 0644) == 0);
  expect("GET", "/files/download?path=fifo", "", HANDED); /* not opened here: that would wait for a writer */
  put("\xc3\xa9t\xc3\xa9", "e");
  expect("GET", "/files/download?path=%C3%A9t%C3%A9", "", HANDED);
  snprintf(p, sizeof p, "%s/big", ws);
  FILE *f = fopen(p, "w");
  CHECK(f != NULL);
  if (f) {
    CHECK(ftruncate(fileno(f), 8 * 1024 * 1024 + 1) == 0);
    fclose(f);
  }
  expect("GET", "/files/download?path=big", "", HANDED);
  expect("GET", "/files/download?path=a%00b", "", HANDED);
  expect("GET", "/files/download?path=%FF", "", HANDED);
  expect("GET", "/files/info?path=a.txt&path=7", "", HANDED); /* JavaScript puts "7" first */
  expect("GET", "/files/info?path=__proto__", "", HANDED);
  expect("GET", "/files/info?path=a%00b", "", HANDED);
  /* a request with a body (which these routes do not read): handed over at its head, the body unread */
  expect("GET", "/files/download?path=a.txt", "Content-Length: 100000000\r\n", HANDED);
  expect("GET", "/files/info?path=a.txt", "Transfer-Encoding: chunked\r\n", HANDED);
  CHECK(xd_handed == before + 13);
  /* a file of exactly 8 MiB is answered here */
  snprintf(p, sizeof p, "%s/big", ws);
  CHECK(truncate(p, 8 * 1024 * 1024) == 0);
  char *got = exchange("GET", "/files/download?path=big", "");
  const char *b = strstr(got, "\r\n\r\n");
  CHECK(strstr(got, "\r\nContent-Length: 8388608\r\n\r\n") != NULL);
  CHECK(b && got_len == (size_t)(b + 4 - got) + 8 * 1024 * 1024);
  free(got);
  CHECK(xd_handed == before + 13);
}

/* --signal-forwarding: a download whose client went away before its answer relays SIGPIPE (files.c job_done). The
 * module runs with forwarding on and this counter as its relay; libuv's pool has one thread (main), which a blocker
 * holds while the client sends a download and leaves, so the job runs only after the server saw the close. */
static _Atomic int relayed;
static void count_relay(int sig) {
  if (sig == SIGPIPE) relayed++;
}

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
  RUN(test_handed_over);
  RUN(test_relay_sigpipe);
}

int main(void) {
  setenv("UV_THREADPOOL_SIZE", "1", 1); /* before the pool starts: test_relay_sigpipe holds its one thread */
  return xd_module_test("xd-files", ws, sizeof ws, &port, files_new, xd_files_route, files_close, client);
}
