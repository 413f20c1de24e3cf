/* The metrics API of the C execd (src/execd/metrics.c) through its real HTTP server (server.c) on loopback, reading
 * fixed files instead of /proc/stat and /proc/meminfo (xd_metrics_use_files): a client thread sends each request over
 * TCP while the main thread runs the loop. Checks the answers byte for byte (the timestamp masked): the 1 s sample,
 * gopsutil's arithmetic and Go's float text (19.99999999995041, 24105.22265625), missing files (zeros), CPU samples of
 * which one is missing (gopsutil's error), the watch stream (headers at once, one object and a single "\n" per chunk
 * about every 2 s, the stream stopped when the client leaves) and that closing the module ends what is left. */
#include "harness.h"
#include "xd_loopback.h"

#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include "execd/metrics.h"
#include "execd/server.h"
#include "execd/xd.h"

static char ws[256];
static int port;
static char stat_path[400], mem_path[400];
static char expect_count[32]; /* "cpu_count":N as the module writes it */

static uint64_t now_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (uint64_t)tv.tv_sec * 1000u + (uint64_t)tv.tv_usec / 1000u;
}

/* Replaces the file's content atomically (a read sees the old or the new text). */
static void put_file(const char *path, const char *text) {
  char tmp[420];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
  rename(tmp, path);
}

static int send_request(const char *method, const char *target, const char *extra) {
  int fd = xd_dial(port, 20);
  if (fd < 0) return -1;
  char head[512];
  int hl = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\n%s\r\n", method, target, extra);
  if (write(fd, head, (size_t)hl) != hl) {
    close(fd);
    return -1;
  }
  return fd;
}

static char *read_all(int fd) {
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  for (;;) {
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r <= 0 || n + r >= cap - 1) break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = 0;
  return buf;
}

/* The answer without its Date line, the Content-Length "ok" when it is the body's, the timestamp as T. */
static char *norm(const char *a) {
  const char *body = strstr(a, "\r\n\r\n");
  char *out = malloc(strlen(a) + 64), *o = out;
  body = body ? body + 4 : a; /* no head: a chunk's data */
  for (const char *p = a; p < body;) {
    const char *e = strstr(p, "\r\n") + 2;
    if (strncmp(p, "Content-Length: ", 16) == 0)
      o += sprintf(o, "Content-Length: %s\r\n", strtoul(p + 16, NULL, 10) == strlen(body) ? "ok" : "WRONG");
    else if (strncmp(p, "Date: ", 6) != 0) {
      memcpy(o, p, (size_t)(e - p));
      o += e - p;
    }
    p = e;
  }
  for (const char *p = body; *p;) {
    if (strncmp(p, "\"timestamp\":", 12) == 0) {
      memcpy(o, p, 12);
      o += 12;
      p += 12;
      while (*p >= '0' && *p <= '9') p++;
      *o++ = 'T';
    } else {
      *o++ = *p++;
    }
  }
  *o = 0;
  return out;
}

#define JSON_200 "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\nContent-Length: ok\r\n\r\n"
#define MEMINFO "MemTotal:       24683748 kB\nMemFree:        20000000 kB\nMemAvailable:   23000000 kB\n" \
                "Buffers:          100000 kB\nCached:          2000000 kB\nSwapCached:            0 kB\n" \
                "SReclaimable:     100000 kB\nSUnreclaim:        50000 kB\n"

/* GET /metrics with the stat file replaced by `then` 500 ms after the request (NULL: unchanged); the answer
 * normalised, *elapsed its time in ms. */
static char *get_metrics(const char *then, uint64_t *elapsed) {
  uint64_t t0 = now_ms();
  int fd = send_request("GET", "/metrics", "Connection: close\r\n");
  if (then) {
    usleep(500000); /* the module read the first sample when the request came (the loop is idle here) */
    put_file(stat_path, then);
  }
  char *a = read_all(fd);
  *elapsed = now_ms() - t0;
  char *n = norm(a);
  free(a);
  return n;
}

static void test_snapshot_unchanged(void) {
  put_file(stat_path, "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\nintr 1 2 3\n");
  put_file(mem_path, MEMINFO);
  uint64_t ms;
  char *a = get_metrics(NULL, &ms);
  char want[512];
  snprintf(want, sizeof want, JSON_200 "{%s,\"cpu_used_pct\":0,\"mem_total_mib\":24105.22265625,\"mem_used_mib\":2425.53515625,\"timestamp\":T}", expect_count);
  CHECK_STR(a, want);
  CHECK(ms >= 950 && ms < 5000); /* sampled over 1 s */
  free(a);
}

static void test_busy_share(void) {
  put_file(stat_path, "cpu  100 0 100 800 0 0 0 0 0 0\n");
  uint64_t ms;
  char *a = get_metrics("cpu  150 0 150 900 0 0 0 0 0 0\n", &ms);
  char want[512];
  snprintf(want, sizeof want, JSON_200 "{%s,\"cpu_used_pct\":50,\"mem_total_mib\":24105.22265625,\"mem_used_mib\":2425.53515625,\"timestamp\":T}", expect_count);
  CHECK_STR(a, want);
  free(a);
  /* gopsutil's seconds (ticks / 100) leave their float residue in the text, as the real execd's */
  put_file(stat_path, "cpu  2255 34 2290 22625563 6290 127 456 0 0 0\n");
  a = get_metrics("cpu  2286 34 2302 22625751 6291 127 459 0 0 0\n", &ms);
  snprintf(want, sizeof want, JSON_200 "{%s,\"cpu_used_pct\":19.99999999995041,\"mem_total_mib\":24105.22265625,\"mem_used_mib\":2425.53515625,\"timestamp\":T}", expect_count);
  CHECK_STR(a, want);
  free(a);
  /* idle did not grow but busy did: 100 */
  put_file(stat_path, "cpu  100 0 100 800 0 0 0 0 0 0\n");
  a = get_metrics("cpu  100 0 90 700 0 0 0 0 0 0\n", &ms);
  CHECK(strstr(a, "\"cpu_used_pct\":0,")); /* busy fell: 0 */
  free(a);
  put_file(stat_path, "cpu  100 0 100 800 0 0 0 0 0 0\n");
  a = get_metrics("cpu  200 0 100 600 0 0 0 0 0 0\n", &ms);
  CHECK(strstr(a, "\"cpu_used_pct\":100,")); /* all fell, busy grew: 100 */
  free(a);
}

static void test_missing_files(void) {
  unlink(stat_path);
  unlink(mem_path);
  uint64_t ms;
  char *a = get_metrics(NULL, &ms);
  char want[512];
  snprintf(want, sizeof want, JSON_200 "{%s,\"cpu_used_pct\":0,\"mem_total_mib\":0,\"mem_used_mib\":0,\"timestamp\":T}", expect_count);
  CHECK_STR(a, want);
  free(a);
  /* a first sample without the cpu line and a second with it: gopsutil's error */
  a = get_metrics("cpu  100 0 100 800 0 0 0 0 0 0\n", &ms);
  CHECK_STR(a, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\nContent-Length: ok\r\n\r\n"
               "{\"code\":\"RUNTIME_ERROR\",\"message\":\"error reading runtime metrics. failed to get CPU percent: received two CPU counts: 0 != 1\"}");
  free(a);
  put_file(mem_path, MEMINFO);
}

/* Reads one HTTP/1.1 chunk's data (after the head was read); NULL at the end or after timeout. */
static char *read_chunk(int fd) {
  char line[32];
  size_t n = 0;
  while (n < sizeof line - 1) {
    if (read(fd, line + n, 1) != 1) return NULL;
    if (n > 0 && line[n - 1] == '\r' && line[n] == '\n') break;
    n++;
  }
  line[n + 1] = 0;
  size_t len = strtoul(line, NULL, 16);
  char *data = malloc(len + 3);
  size_t got = 0;
  while (got < len + 2) {
    ssize_t r = read(fd, data + got, len + 2 - got);
    if (r <= 0) {
      free(data);
      return NULL;
    }
    got += (size_t)r;
  }
  data[len] = 0;
  return data;
}

/* Reads the head (up to the blank line) byte by byte. */
static char *read_head(int fd) {
  char *h = calloc(1, 4096);
  size_t n = 0;
  while (n < 4095 && !strstr(h, "\r\n\r\n") && read(fd, h + n, 1) == 1) n++;
  return h;
}

static void test_watch(void) {
  put_file(stat_path, "cpu  100 0 100 800 0 0 0 0 0 0\n");
  uint64_t t0 = now_ms();
  int fd = send_request("GET", "/metrics/watch", "");
  char *h = read_head(fd);
  char *hn = norm(h);
  CHECK_STR(hn, "HTTP/1.1 200 OK\r\nCache-Control: no-cache\r\nConnection: keep-alive\r\nContent-Type: text/event-stream\r\nX-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n");
  CHECK(now_ms() - t0 < 900); /* the headers at once */
  free(h);
  free(hn);
  char want[512];
  snprintf(want, sizeof want, "{%s,\"cpu_used_pct\":0,\"mem_total_mib\":24105.22265625,\"mem_used_mib\":2425.53515625,\"timestamp\":T}\n", expect_count);
  for (int i = 1; i <= 2; i++) {
    char *c = read_chunk(fd);
    uint64_t at = now_ms() - t0;
    char *cn = c ? norm(c) : NULL; /* (no head: copied as it is, the timestamp masked) */
    CHECK_STR(cn, want);
    CHECK(at >= (uint64_t)i * 1950 && at < (uint64_t)i * 2000 + 3000); /* 1 s wait, then the 1 s sample */
    free(c);
    free(cn);
  }
  close(fd); /* the watch stops: the module's probe is freed (valgrind and ASan see it) */
  /* with Connection: close the header says so */
  fd = send_request("GET", "/metrics/watch", "Connection: close\r\n");
  h = read_head(fd);
  CHECK(strstr(h, "\r\nConnection: close\r\n"));
  free(h);
  close(fd);
  usleep(100000);
  /* other methods and paths are not the module's (no route takes them: the server's 404) */
  static const char *const others[][2] = {{"HEAD", "/metrics"}, {"POST", "/metrics"}, {"GET", "/metrics/other"}, {"GET", "/metricsx"}};
  for (size_t i = 0; i < 4; i++) {
    fd = send_request(others[i][0], others[i][1], "Connection: close\r\nContent-Length: 0\r\n");
    char *a = read_all(fd);
    CHECK(strncmp(a, "HTTP/1.1 404 ", 13) == 0);
    free(a);
  }
  /* left open: closing the module ends it */
  fd = send_request("GET", "/metrics/watch", "");
  free(read_head(fd));
}

static void client(void) {
  RUN(test_snapshot_unchanged);
  RUN(test_busy_share);
  RUN(test_missing_files);
  RUN(test_watch);
}

static void *new_metrics(const xd_ctx *ctx) {
  void *m = xd_metrics_new(ctx);
  if (m) xd_metrics_use_files(m, stat_path, mem_path);
  return m;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* the module's files are in the workspace xd_module_test makes: named here, written by the tests */
  char dir[] = "/tmp/osb-test-xd-metrics-files-XXXXXX";
  if (!mkdtemp(dir)) return printf("cannot make a temporary directory\n0 passed, 1 failed\n"), 1;
  snprintf(stat_path, sizeof stat_path, "%s/stat", dir);
  snprintf(mem_path, sizeof mem_path, "%s/meminfo", dir);
  snprintf(expect_count, sizeof expect_count, "\"cpu_count\":%u", uv_available_parallelism());
  int rc = xd_module_test("xd-metrics", ws, sizeof ws, &port, new_metrics, xd_metrics_route, xd_metrics_close, client);
  t_rmtree(dir);
  return rc;
}
