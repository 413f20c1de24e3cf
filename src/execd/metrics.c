/* execd's metrics API in C (xd.h: xd_metrics_*): GET /metrics and GET /metrics/watch, as upstream's metric
 * controller answers them (the Node execd's metrics.js rounded the figures to 2 decimals and counted iowait as idle;
 * the real execd does neither): {"cpu_count","cpu_used_pct","mem_total_mib","mem_used_mib","timestamp"} with Go's
 * float64 text.
 * - cpu_count: the CPUs execd may run on (libuv's available parallelism: the affinity mask, as Go's GOMAXPROCS and
 *   the Node execd's availableParallelism()).
 * - cpu_used_pct: gopsutil's cpu.Percent(1 s): the first line of /proc/stat read, 1 s later again; each field in
 *   seconds (ticks / CLK_TCK), busy = user+system+nice+iowait+irq+softirq+steal, all = busy + idle; 100 * the busy
 *   share of the interval, 0 when busy did not grow, 100 when all did not grow.
 * - mem_total_mib, mem_used_mib: gopsutil's VirtualMemory() from /proc/meminfo: Total = MemTotal, Used = Total -
 *   MemFree - Buffers - (Cached + SReclaimable) (uint64, wrapping as Go's), both bytes / 1024 / 1024.
 * A /proc file that cannot be read counts as empty, as gopsutil ignores the error (zero figures); only CPU samples
 * of which one is missing fail, with gopsutil's text.
 * GET /metrics answers after the 1 s sample. GET /metrics/watch: the event-stream headers at once, then forever:
 * 1 s of waiting, the 1 s sample, one JSON object followed by a single "\n" as one chunk (a failure is
 * {"error":"..."}); the stream ends only when the client leaves (its timer stops at once) or execd shuts down.
 * The /proc reads run on the loop thread: procfs files are generated in memory by the kernel, a read never waits for
 * a disk, and only the first 4 KiB (/proc/stat's first line) or 16 KiB (/proc/meminfo) are read.
 *
 * Ownership: the module owns its probes (one per request being answered); it frees itself once xd_metrics_close was
 * called and their timers are closed (the loop must run on). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "metrics.h"

#include "events.h"
#include "json.h"
#include "xd.h"

#define SAMPLE_MS 1000 /* upstream's cpu.Percent(time.Second, false) */
#define WATCH_WAIT_MS 1000 /* upstream's time.After(time.Second * 1) before each watch sample */

typedef struct module module;
typedef struct probe probe;

typedef struct {
  int ok; /* the "cpu" line was there and read */
  double busy, all;
} cpu_times;

struct probe {
  module *m;
  probe *prev, *next;
  xd_res *res;     /* NULL once the client left */
  int watch;
  int sampling;    /* the timer runs the sample's second (else the watch's wait) */
  cpu_times t1;
  uv_timer_t timer;
};

struct module {
  uv_loop_t *loop;
  probe *probes;
  int handles;
  int closing;
  const char *stat_path, *meminfo_path; /* /proc/stat and /proc/meminfo */
};

/* Reads at most cap-1 bytes of path (NUL-terminated) into buf; 0 bytes when it cannot be read. */
static size_t read_head(const char *path, char *buf, size_t cap) {
  size_t n = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t r;
    while (n < cap - 1 && ((r = read(fd, buf + n, cap - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
      if (r > 0) n += (size_t)r;
    close(fd);
  }
  buf[n] = 0;
  return n;
}

/* gopsutil's parseStatLine of /proc/stat's first line ("cpu  user nice system idle iowait irq softirq [steal ...]"). */
static cpu_times read_cpu(const module *m) {
  cpu_times t = {0};
  char buf[4096];
  read_head(m->stat_path, buf, sizeof buf);
  char *nl = strchr(buf, '\n');
  if (nl) *nl = 0;
  double f[8] = {0};
  int n = 0;
  char *save = NULL, *tok = strtok_r(buf, " \t", &save);
  if (!tok || strncmp(tok, "cpu", 3) != 0) return t;
  while (n < 8 && (tok = strtok_r(NULL, " \t", &save)) != NULL) {
    char *end;
    errno = 0;
    f[n] = strtod(tok, &end);
    if (*end || errno) return t; /* strconv.ParseFloat failed: no sample */
    n++;
  }
  if (n < 7) return t;
  static double clk;
  if (clk <= 0) {
    long c = sysconf(_SC_CLK_TCK);
    clk = c > 0 ? (double)c : 100.0;
  }
  double user = f[0] / clk, nice = f[1] / clk, system = f[2] / clk, idle = f[3] / clk, iowait = f[4] / clk;
  double irq = f[5] / clk, softirq = f[6] / clk, steal = n > 7 ? f[7] / clk : 0;
  t.ok = 1;
  t.busy = user + system + nice + iowait + irq + softirq + steal;
  t.all = t.busy + idle;
  return t;
}

/* gopsutil's calculateBusy */
static double busy_pct(cpu_times a, cpu_times b) {
  if (b.busy <= a.busy) return 0;
  if (b.all <= a.all) return 100;
  double p = (b.busy - a.busy) / (b.all - a.all) * 100;
  return p > 100 ? 100 : p < 0 ? 0 : p;
}

/* The kB value of a /proc/meminfo line "Key:   123 kB", if the key is `key`. */
static int mem_field(const char *line, const char *key, uint64_t *out) {
  size_t kl = strlen(key);
  if (strncmp(line, key, kl) != 0 || line[kl] != ':') return 0;
  *out = strtoull(line + kl + 1, NULL, 10) * 1024u;
  return 1;
}

/* Appends the metrics object (and "\n" for the watch) sampled from a to now; 0, or -1 with Go's error text in err. */
static int metrics_text(const module *m, cpu_times a, osb_buf *out, osb_buf *err) {
  cpu_times b = read_cpu(m);
  if (a.ok != b.ok) {
    osb_buf_appendf(err, "failed to get CPU percent: received two CPU counts: %d != %d", a.ok, b.ok);
    return -1;
  }
  double pct = a.ok ? busy_pct(a, b) : 0;
  char buf[16384];
  read_head(m->meminfo_path, buf, sizeof buf);
  uint64_t total = 0, free_ = 0, buffers = 0, cached = 0, sreclaimable = 0;
  for (char *line = buf; line && *line;) {
    char *nl = strchr(line, '\n');
    if (nl) *nl = 0;
    (void)(mem_field(line, "MemTotal", &total) || mem_field(line, "MemFree", &free_) ||
           mem_field(line, "Buffers", &buffers) || mem_field(line, "Cached", &cached) ||
           mem_field(line, "SReclaimable", &sreclaimable));
    line = nl ? nl + 1 : NULL;
  }
  uint64_t used = total - free_ - buffers - (cached + sreclaimable);
  int rc = osb_buf_append_str(out, "{\"cpu_count\":");
  rc |= xd_js_number(out, (double)uv_available_parallelism());
  rc |= osb_buf_append_str(out, ",\"cpu_used_pct\":");
  rc |= xd_js_number(out, pct);
  rc |= osb_buf_append_str(out, ",\"mem_total_mib\":");
  rc |= xd_js_number(out, (double)total / 1024 / 1024);
  rc |= osb_buf_append_str(out, ",\"mem_used_mib\":");
  rc |= xd_js_number(out, (double)used / 1024 / 1024);
  rc |= osb_buf_appendf(out, ",\"timestamp\":%llu}", (unsigned long long)xd_wall_ms());
  if (rc != 0) {
    osb_buf_reset(err);
    osb_buf_append_str(err, "out of memory");
    return -1;
  }
  return 0;
}

static void nothing(void *arg) { (void)arg; }

static void module_maybe_free(module *m) {
  if (m->closing && m->handles == 0) free(m);
}

static void on_probe_closed(uv_handle_t *h) {
  probe *p = h->data;
  module *m = p->m;
  free(p);
  m->handles--;
  module_maybe_free(m);
}

static void probe_free(probe *p) {
  module *m = p->m;
  if (p->prev) p->prev->next = p->next;
  else m->probes = p->next;
  if (p->next) p->next->prev = p->prev;
  if (p->res) {
    xd_res_on_close(p->res, nothing, NULL);
    p->res = NULL;
  }
  uv_close((uv_handle_t *)&p->timer, on_probe_closed);
}

/* The client left: the watch (or the sample) stops at once. */
static void on_client_close(void *arg) {
  probe *p = arg;
  p->res = NULL;
  probe_free(p);
}

/* The sample's second is over: the answer, or the watch's next line. */
static void sample_done(probe *p) {
  osb_buf text = {0}, err = {0};
  int rc = metrics_text(p->m, p->t1, &text, &err);
  if (!p->watch) {
    xd_res *res = p->res;
    xd_res_on_close(res, nothing, NULL);
    p->res = NULL;
    if (rc == 0) {
      xd_send_json(res, 200, text.data, text.len);
    } else {
      osb_buf msg = {0};
      osb_buf_appendf(&msg, "error reading runtime metrics. %s", err.data ? err.data : "out of memory");
      xd_send_error(res, 500, "RUNTIME_ERROR", msg.data ? msg.data : "out of memory");
      osb_buf_free(&msg);
    }
    probe_free(p);
  } else {
    if (rc != 0) { /* upstream: {"error": err.Error()} */
      osb_buf_reset(&text);
      osb_buf_append_str(&text, "{\"error\":");
      xd_json_str(&text, err.data ? err.data : "out of memory", err.data ? err.len : 13);
      osb_buf_append(&text, "}", 1);
    }
    if (osb_buf_append(&text, "\n", 1) == 0) xd_stream_write(p->res, text.data, text.len);
  }
  osb_buf_free(&text);
  osb_buf_free(&err);
}

static void on_timer(uv_timer_t *t) {
  probe *p = t->data;
  if (!p->sampling) { /* the watch's wait is over: the sample's second starts */
    p->sampling = 1;
    p->t1 = read_cpu(p->m);
    uv_timer_start(&p->timer, on_timer, SAMPLE_MS, 0);
    return;
  }
  p->sampling = 0;
  sample_done(p);
  if (p->watch && p->res) uv_timer_start(&p->timer, on_timer, WATCH_WAIT_MS, 0);
}

int xd_metrics_route(void *module_, const xd_req *req, xd_res *res) {
  module *m = module_;
  int watch = strcmp(req->path, "/metrics/watch") == 0;
  if (strcmp(req->method, "GET") != 0 || (!watch && strcmp(req->path, "/metrics") != 0)) return 0;
  probe *p = calloc(1, sizeof *p);
  if (!p) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  p->m = m;
  p->res = res;
  p->watch = watch;
  uv_timer_init(m->loop, &p->timer);
  p->timer.data = p;
  m->handles++;
  p->next = m->probes;
  if (m->probes) m->probes->prev = p;
  m->probes = p;
  xd_res_on_close(res, on_client_close, p);
  if (watch) {
    xd_stream_open(res);
    uv_timer_start(&p->timer, on_timer, WATCH_WAIT_MS, 0);
  } else {
    p->sampling = 1;
    p->t1 = read_cpu(m);
    uv_timer_start(&p->timer, on_timer, SAMPLE_MS, 0);
  }
  return 1;
}

void *xd_metrics_new(const xd_ctx *ctx) {
  module *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->loop = ctx->loop;
  m->stat_path = "/proc/stat";
  m->meminfo_path = "/proc/meminfo";
  return m;
}

void xd_metrics_use_files(void *module_, const char *stat, const char *meminfo) {
  module *m = module_;
  m->stat_path = stat;
  m->meminfo_path = meminfo;
}

void xd_metrics_close(void *module_) {
  module *m = module_;
  if (!m || m->closing) return;
  m->closing = 1;
  /* a pending sample is answered with what there is; a watch ends */
  while (m->probes) {
    probe *p = m->probes;
    uv_timer_stop(&p->timer);
    if (p->res && !p->watch && p->sampling) {
      sample_done(p); /* frees p */
      continue;
    }
    if (p->res) {
      xd_res *res = p->res;
      xd_res_on_close(res, nothing, NULL);
      p->res = NULL;
      xd_stream_end(res);
    }
    probe_free(p);
  }
  module_maybe_free(m);
}
