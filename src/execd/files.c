/* files.c: GET /files/info and GET|HEAD /files/download of the C execd (xd.h), answering byte for byte what the Node
 * execd answers (lib/dev-server/execd/files.js info, files-info.js buildFileInfo/formatTime/idTable/fileError,
 * files-download.js handleDownload, files-paths.js expandAbsPath, http.js goJson); the heads are the C server's (Date,
 * Content-Length, no Connection: keep-alive), as for every native route.
 *
 * The query is decoded and the paths expanded on the loop thread (execd's environment); lstat/open/read run on libuv's
 * thread pool, and the answer goes out on the loop thread. What this module cannot answer exactly like the Node
 * execd, it hands to the Node execd (before the work, or from the work's result): a path value with a NUL byte or
 * bytes that are not UTF-8 (Node's fs refusal, its U+FFFD decoding), an info key that JavaScript orders or drops in an
 * object (an array index, "__proto__"), an owner or group name that is not UTF-8, a time outside years 0-9999; for a
 * download a Range header, offset/limit (line mode), a base name that is not printable ASCII (the RFC 5987 form, a
 * header Node refuses), a file that is neither regular nor a directory (a FIFO would block a worker), one larger than
 * 8 MiB (Node streams it; this module answers from one buffer) and a file that shrank while it was read.
 *
 * Owner and group names come from /etc/passwd and /etc/group, parsed again only when the file changed (inode, size,
 * mtime, ctime: files-info.js idTable); the tables are shared by the module and its jobs (counted references, a mutex:
 * the jobs read them on the thread pool). */
#include "xd.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmdreq.h"
#include "fsops.h"
#include "core/buf.h"
#include "json.h"
#include "utf8.h"

extern char **environ;

/* Largest file answered here; a larger one is the Node execd's (it streams the body instead of buffering it). */
#define DOWNLOAD_LIMIT (8u * 1024u * 1024u)

/* ---- owner/group names (files-info.js idTable) ---- */
typedef struct {
  long long id;
  size_t line; /* the first line of an id counts */
  char *name;
} id_entry;

typedef struct {
  const char *file;
  int parsed; /* the key below is the file's as it was parsed */
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtim, ctim;
  id_entry *e; /* sorted by id, one per id */
  size_t n;
} id_table;

typedef struct {
  uv_mutex_t lock;
  int refs; /* under lock */
  id_table users, groups;
} names;

static void table_clear(id_table *t) {
  for (size_t i = 0; i < t->n; i++) free(t->e[i].name);
  free(t->e);
  t->e = NULL;
  t->n = 0;
  t->parsed = 0;
}

static int cmp_entry(const void *a, const void *b) {
  const id_entry *x = a, *y = b;
  if (x->id != y->id) return x->id < y->id ? -1 : 1;
  return x->line < y->line ? -1 : x->line > y->line;
}

/* The lines `name:x:id:...`: a name and an id that Number() reads as an integer, '#' lines and empty names skipped.
 * 0, or -1 on OOM (the table is then empty). */
static int table_parse(id_table *t, const char *text, size_t len) {
  size_t cap = 0, line = 0;
  for (size_t at = 0; at < len; line++) {
    const char *l = text + at;
    const char *nl = memchr(l, '\n', len - at);
    size_t ll = nl ? (size_t)(nl - l) : len - at;
    at += ll + 1;
    if (ll == 0 || l[0] == '#') continue;
    const char *c1 = memchr(l, ':', ll);
    if (!c1 || c1 == l) continue;
    const char *c2 = memchr(c1 + 1, ':', (size_t)(l + ll - c1 - 1));
    if (!c2) continue; /* no third field: Number(undefined) is NaN */
    const char *c3 = memchr(c2 + 1, ':', (size_t)(l + ll - c2 - 1));
    long long id;
    if (!xd_js_number_int(c2 + 1, c3 ? (size_t)(c3 - c2 - 1) : (size_t)(l + ll - c2 - 1), &id)) continue;
    if (t->n == cap) {
      size_t nc = cap ? cap * 2 : 64;
      id_entry *ne = realloc(t->e, nc * sizeof *ne);
      if (!ne) goto oom;
      t->e = ne;
      cap = nc;
    }
    size_t nlen = (size_t)(c1 - l);
    char *name = malloc(nlen + 1);
    if (!name) goto oom;
    memcpy(name, l, nlen);
    name[nlen] = '\0';
    t->e[t->n++] = (id_entry){id, line, name};
  }
  if (t->n > 1) {
    qsort(t->e, t->n, sizeof *t->e, cmp_entry);
    size_t k = 1;
    for (size_t i = 1; i < t->n; i++) {
      if (t->e[i].id == t->e[k - 1].id) free(t->e[i].name);
      else t->e[k++] = t->e[i];
    }
    t->n = k;
  }
  return 0;
oom:
  table_clear(t);
  return -1;
}

/* The table as the file is now (a missing or unreadable file: empty). Under the names lock. */
static void table_refresh(id_table *t) {
  struct stat st;
  if (stat(t->file, &st) != 0) {
    table_clear(t);
    return;
  }
  if (t->parsed && t->dev == st.st_dev && t->ino == st.st_ino && t->size == st.st_size &&
      t->mtim.tv_sec == st.st_mtim.tv_sec && t->mtim.tv_nsec == st.st_mtim.tv_nsec &&
      t->ctim.tv_sec == st.st_ctim.tv_sec && t->ctim.tv_nsec == st.st_ctim.tv_nsec)
    return;
  table_clear(t);
  int fd = open(t->file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  osb_buf text = {0};
  char buf[16384];
  ssize_t r;
  int ok = 1;
  while (ok && (r = read(fd, buf, sizeof buf)) != 0) {
    if (r < 0 && errno == EINTR) continue;
    ok = r > 0 && osb_buf_append(&text, buf, (size_t)r) == 0;
  }
  close(fd);
  if (ok && table_parse(t, text.data ? text.data : "", text.len) == 0) {
    t->parsed = 1;
    t->dev = st.st_dev;
    t->ino = st.st_ino;
    t->size = st.st_size;
    t->mtim = st.st_mtim;
    t->ctim = st.st_ctim;
  }
  osb_buf_free(&text);
}

static const char *table_name(const id_table *t, long long id) {
  size_t lo = 0, hi = t->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->e[mid].id == id) return t->e[mid].name;
    if (t->e[mid].id < id) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

static names *names_new(void) {
  names *n = calloc(1, sizeof *n);
  if (!n) return NULL;
  if (uv_mutex_init(&n->lock) != 0) {
    free(n);
    return NULL;
  }
  n->refs = 1;
  n->users.file = "/etc/passwd";
  n->groups.file = "/etc/group";
  return n;
}

static names *names_ref(names *n) {
  uv_mutex_lock(&n->lock);
  n->refs++;
  uv_mutex_unlock(&n->lock);
  return n;
}

static void names_unref(names *n) {
  if (!n) return;
  uv_mutex_lock(&n->lock);
  int last = --n->refs == 0;
  uv_mutex_unlock(&n->lock);
  if (!last) return;
  table_clear(&n->users);
  table_clear(&n->groups);
  uv_mutex_destroy(&n->lock);
  free(n);
}

/* ---- the module and its jobs ---- */
typedef struct files_job files_job;

typedef struct {
  uv_loop_t *loop;
  char *workspace;
  names *names;
  int signal_forwarding;
  void (*relay_signal)(int sig);
  xd_fsjobs jobs; /* queued on the thread pool */
} files_mod;

typedef struct {
  char *key;     /* the path as given (UTF-8, no NUL) */
  char *abs;     /* expandAbsPath of it, or NULL with error set */
  char *error;   /* the 400 text of its undefined variables */
  size_t value;  /* the entry whose FileInfo this key's member gets (the last of equal keys) */
  int first;     /* the first of equal keys: where JSON.stringify writes the member */
  struct stat st;
} info_entry;

enum { ANSWER, HANDOFF };

struct files_job {
  xd_fsjob job;   /* first: the thread-pool job and its response (fsops.h); job.jobs NULL once the module closed */
  files_mod *mod; /* valid while job.jobs is set */
  names *names;
  int download;
  int head;
  int relay;      /* --signal-forwarding: a download whose client went away relays SIGPIPE, as the Node execd */
  /* info */
  info_entry *e;
  size_t n;
  /* download */
  char *file;
  char *disposition; /* the Content-Disposition header line */
  char last_modified[64];
  size_t length;
  /* the result */
  int outcome;       /* ANSWER or HANDOFF */
  int status;
  const char *code;  /* an error answer's code (static), else NULL */
  osb_buf body;      /* the JSON, the error's message, or the file's bytes */
};

static void job_free(files_job *job) {
  for (size_t i = 0; i < job->n; i++) {
    free(job->e[i].key);
    free(job->e[i].abs);
    free(job->e[i].error);
  }
  free(job->e);
  free(job->file);
  free(job->disposition);
  osb_buf_free(&job->body);
  names_unref(job->names);
  free(job);
}

/* An error answer: its message is in job->body (empty when out of memory: then a 500 "out of memory"). */
static void job_error(files_job *job, int status, const char *code) {
  job->outcome = ANSWER;
  job->status = status;
  job->code = code;
}

/* fileError(err, prefix) of a failed system call: ENOENT a 404 FILE_NOT_FOUND, else a 500 RUNTIME_ERROR, the text
 * "<prefix><syscall> <path>: <libuv's text of the error, up to a comma>" (osMessage). The prefix of info names its
 * key (`file not found: <key>: ` / `error accessing file <key>: `); download's is empty. */
static void job_fail(files_job *job, int err, const char *key, const char *syscall, const char *path) {
  const char *text = uv_strerror(uv_translate_sys_error(err));
  osb_buf *b = &job->body;
  int nf = err == ENOENT;
  osb_buf_reset(b);
  int rc = osb_buf_append_str(b, nf ? "file not found. " : "error accessing file: ");
  if (rc == 0 && key) rc = osb_buf_appendf(b, nf ? "file not found: %s: " : "error accessing file %s: ", key);
  if (rc == 0) rc = osb_buf_appendf(b, "%s %s: %.*s", syscall, path, (int)strcspn(text, ","), text);
  if (rc != 0) osb_buf_free(b);
  job_error(job, nf ? 404 : 500, nf ? "FILE_NOT_FOUND" : "RUNTIME_ERROR");
}

/* JavaScript's Date of whole seconds `s` (years 0-9999 only): toISOString's first 19 characters (iso) or
 * toUTCString (utc). 0, or -1 outside those years. */
static int js_date(time_t s, int utc, char *out, size_t cap) {
  static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  struct tm tm;
  if (!gmtime_r(&s, &tm) || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900) return -1;
  if (utc)
    snprintf(out, cap, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday, months[tm.tm_mon],
             tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  else
    snprintf(out, cap, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec);
  return 0;
}

/* formatTime: RFC 3339 UTC with the nanoseconds, trailing zeros trimmed ("2026-12-01T05:18:12.92994467Z"). */
static int append_time(osb_buf *b, const struct timespec *ts) {
  char base[32];
  if (js_date(ts->tv_sec, 0, base, sizeof base) != 0) return 1;
  char frac[16] = "";
  if (ts->tv_nsec) {
    snprintf(frac, sizeof frac, ".%09ld", (long)ts->tv_nsec);
    size_t l = strlen(frac);
    while (frac[l - 1] == '0') frac[--l] = '\0';
  }
  return osb_buf_appendf(b, "\"%s%sZ\"", base, frac) < 0 ? -1 : 0;
}

static const char *type_of(mode_t m) {
  if (S_ISLNK(m)) return "symlink";
  if (S_ISDIR(m)) return "directory";
  if (S_ISREG(m)) return "file";
  return "other";
}

/* `"owner":"root"` / `"group":"1234"`: the name of the id, else the number. 0, 1 a name that is not UTF-8 (hand
 * off: Node would write its U+FFFD decoding), -1 OOM. */
static int append_name(osb_buf *b, const char *member, const id_table *t, unsigned long id) {
  const char *name = table_name(t, (long long)id);
  char num[24];
  if (!name) {
    snprintf(num, sizeof num, "%lu", id);
    name = num;
  } else if (!xd_utf8_valid((const unsigned char *)name, strlen(name))) {
    return 1;
  }
  if (osb_buf_appendf(b, ",\"%s\":", member) < 0 || xd_json_str((struct osb_buf *)b, name, strlen(name)) < 0) return -1;
  return 0;
}

/* buildFileInfo of one entry, appended as `"key":{...}`. 0, 1 hand off, -1 OOM. */
static int append_info(osb_buf *b, const char *key, const info_entry *v, const names *nm) {
  const struct stat *st = &v->st;
  int rc = xd_json_str((struct osb_buf *)b, key, strlen(key));
  if (rc == 0) rc = osb_buf_append_str(b, ":{\"path\":");
  if (rc == 0) rc = xd_json_str((struct osb_buf *)b, v->abs, strlen(v->abs));
  if (rc == 0) rc = osb_buf_appendf(b, ",\"type\":\"%s\",\"size\":%lld,\"modified_at\":", type_of(st->st_mode),
                                    (long long)st->st_size);
  if (rc == 0) rc = append_time(b, &st->st_mtim);
  if (rc == 0) rc = osb_buf_append_str(b, ",\"created_at\":");
  if (rc == 0) rc = append_time(b, &st->st_ctim);
  if (rc == 0) rc = append_name(b, "owner", &nm->users, (unsigned long)st->st_uid);
  if (rc == 0) rc = append_name(b, "group", &nm->groups, (unsigned long)st->st_gid);
  if (rc == 0) rc = osb_buf_appendf(b, ",\"mode\":%o}", (unsigned)(st->st_mode & 0777));
  return rc;
}

/* info: every path lstat'ed in order (the first failure is the answer), then the object of FileInfos. */
static void info_work(files_job *job) {
  for (size_t i = 0; i < job->n; i++) {
    info_entry *e = &job->e[i];
    if (e->error) {
      if (osb_buf_append_str(&job->body, e->error) != 0) osb_buf_free(&job->body);
      job_error(job, 400, "INVALID_REQUEST_BODY");
      return;
    }
    if (lstat(e->abs, &e->st) != 0) {
      job_fail(job, errno, e->key, "lstat", e->abs);
      return;
    }
  }
  names *nm = job->names;
  uv_mutex_lock(&nm->lock);
  table_refresh(&nm->users);
  table_refresh(&nm->groups);
  int rc = osb_buf_append_str(&job->body, "{");
  for (size_t i = 0, k = 0; i < job->n && rc == 0; i++) {
    if (!job->e[i].first) continue;
    if (k++ && (rc = osb_buf_append_str(&job->body, ",")) != 0) break;
    rc = append_info(&job->body, job->e[i].key, &job->e[job->e[i].value], nm);
  }
  uv_mutex_unlock(&nm->lock);
  if (rc == 0) rc = osb_buf_append_str(&job->body, "}");
  job->outcome = rc > 0 ? HANDOFF : ANSWER;
  job->status = 200;
  if (rc < 0) {
    osb_buf_free(&job->body);
    job_error(job, 500, "RUNTIME_ERROR");
  }
}

/* download (byte mode, no Range): the whole file into the body. */
static void download_work(files_job *job) {
  struct stat st;
  job->outcome = HANDOFF;
  /* what is neither a file nor a directory is the Node execd's, unopened here: opening a FIFO waits for a writer, and
   * even a non-blocking open would release a writer waiting for a reader, whose writes then break on our close (the
   * fstat below still decides for what was opened) */
  if (stat(job->file, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return;
  int fd = open(job->file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    job_fail(job, errno, NULL, "open", job->file);
    return;
  }
  if (fstat(fd, &st) != 0) goto out;
  if (S_ISDIR(st.st_mode)) {
    if (osb_buf_appendf(&job->body, "path is a directory: %s", job->file) < 0) osb_buf_free(&job->body);
    job_error(job, 400, "INVALID_FILE");
    goto out;
  }
  /* a larger file is streamed by the Node execd */
  if (!S_ISREG(st.st_mode) || st.st_size > (off_t)DOWNLOAD_LIMIT) goto out;
  if (js_date(st.st_mtim.tv_sec, 1, job->last_modified, sizeof job->last_modified) != 0) goto out;
  job->length = (size_t)st.st_size;
  if (!job->head && job->length) {
    if (osb_buf_reserve_exact(&job->body, job->length) != 0) goto out;
    while (job->body.len < job->length) {
      ssize_t r = pread(fd, job->body.data + job->body.len, job->length - job->body.len, (off_t)job->body.len);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) goto out; /* an error or a file that shrank: the Node execd's (it answers such a file itself) */
      job->body.len += (size_t)r;
    }
  }
  job->outcome = ANSWER;
  job->status = 200;
out:
  close(fd);
}

static void job_run(xd_fsjob *fj) {
  files_job *job = (files_job *)fj;
  if (job->download) download_work(job);
  else info_work(job);
}

static void job_release(xd_fsjob *fj) { job_free((files_job *)fj); }

static void job_answer(xd_fsjob *fj, int status) {
  files_job *job = (files_job *)fj;
  xd_res *res = fj->res;
  /* the client went away (or ended its side: closed, or half-closed and still reading) before the file's bytes were
   * written to it: the real execd's write to the closed connection raises SIGPIPE, which --signal-forwarding relays
   * to the foreground command; a half-closed client still gets the answer below */
  if ((!res || xd_res_peer_ended(res)) && job->relay && fj->jobs && job->mod->relay_signal && status == 0 &&
      job->outcome == ANSWER && job->status == 200 && job->length > 0)
    job->mod->relay_signal(SIGPIPE);
  if (!res) return;
  if (status != 0 || job->outcome == HANDOFF) {
    xd_handoff(res);
  } else if (job->code) {
    xd_send_error(res, job->status, job->code, job->body.len ? job->body.data : "out of memory");
  } else if (!job->download) {
    xd_send_json(res, 200, job->body.data, job->body.len);
  } else {
    char lm[96];
    snprintf(lm, sizeof lm, "Last-Modified: %s", job->last_modified);
    const char *h[] = {"Content-Type: application/octet-stream", job->disposition, "Accept-Ranges: bytes", lm};
    if (job->head) xd_send_head(res, 200, h, 4, job->length);
    else xd_send(res, 200, h, 4, job->body.data, job->body.len);
  }
}

/* Queues the job (the thread pool's from now on). 0, or -1 (the job is still the caller's). */
static int job_queue(files_mod *m, files_job *job, xd_res *res) {
  job->mod = m;
  job->names = names_ref(m->names);
  job->job.run = job_run;
  job->job.answer = job_answer;
  job->job.release = job_release;
  return xd_fsjob_start(&m->jobs, m->loop, &job->job, res);
}

/* A query value this module takes as a path: no NUL (Node's fs refuses it with its own text) and UTF-8 (Node reads
 * other bytes as U+FFFD). */
static int plain_path(const char *v, size_t len) {
  return strlen(v) == len && xd_utf8_valid((const unsigned char *)v, len);
}

/* by key, then by place */
static int cmp_key_place(const void *a, const void *b) {
  const info_entry *x = *(const info_entry *const *)a, *y = *(const info_entry *const *)b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x < y ? -1 : x > y);
}

/* equal keys: the first one's place, the last one's FileInfo (`out[p] = ...` again). 0, or -1 on OOM. */
static int mark_duplicates(files_job *job) {
  size_t n = job->n;
  for (size_t i = 0; i < n; i++) job->e[i].value = i, job->e[i].first = 1;
  if (n < 2) return 0;
  info_entry **by = malloc(n * sizeof *by);
  if (!by) return -1;
  for (size_t i = 0; i < n; i++) by[i] = &job->e[i];
  qsort(by, n, sizeof *by, cmp_key_place);
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && strcmp(by[i]->key, by[j]->key) == 0) j++;
    by[i]->value = (size_t)(by[j - 1] - job->e);
    for (size_t k = i + 1; k < j; k++) by[k]->first = 0;
    i = j;
  }
  free(by);
  return 0;
}

static int route_info(files_mod *m, const xd_req *req, xd_res *res) {
  xd_query_list q;
  if (xd_query_all(req, "path", &q) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  for (size_t i = 0; i < q.n; i++) {
    if (!plain_path(q.v[i], q.len[i]) || xd_js_array_index(q.v[i]) || strcmp(q.v[i], "__proto__") == 0) {
      xd_query_list_free(&q);
      return 0;
    }
  }
  files_job *job = calloc(1, sizeof *job);
  if (!job || !(job->e = calloc(q.n ? q.n : 1, sizeof *job->e))) goto oom;
  for (size_t i = 0; i < q.n; i++) {
    info_entry *e = &job->e[job->n++];
    e->key = q.v[i];
    q.v[i] = NULL;
    if (xd_expand_abs_path(e->key, environ, m->workspace, &e->abs, &e->error) < 0) goto oom;
  }
  if (mark_duplicates(job) != 0) goto oom;
  xd_query_list_free(&q);
  if (job_queue(m, job, res) != 0) {
    job_free(job);
    return 0;
  }
  return 1;
oom:
  xd_query_list_free(&q);
  if (job) job_free(job);
  xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
  return 1;
}

static int route_download(files_mod *m, const xd_req *req, xd_res *res, int head) {
  xd_query_list q;
  if (xd_query_all(req, "path", &q) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  int taken = 1;
  files_job *job = NULL;
  char *abs = NULL, *err = NULL;
  if (q.n == 0 || q.len[0] == 0) {
    xd_send_error(res, 400, "MISSING_QUERY", "missing query parameter 'path'");
    goto out;
  }
  if (!plain_path(q.v[0], q.len[0])) {
    taken = 0;
    goto out;
  }
  int rc = xd_expand_abs_path(q.v[0], environ, m->workspace, &abs, &err);
  if (rc < 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto out;
  }
  if (rc > 0) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", err);
    goto out;
  }
  /* line mode (offset/limit, even empty ones) and ranges are the Node execd's */
  const char *range = xd_header(req, "range");
  char *offset = xd_query(req, "offset"), *limit = xd_query(req, "limit");
  int other = offset || limit || (range && *range);
  free(offset);
  free(limit);
  const char *base = strrchr(abs, '/') + 1;
  for (const unsigned char *p = (const unsigned char *)base; *p && !other; p++) other = *p < 0x20 || *p > 0x7e;
  if (other) {
    taken = 0;
    goto out;
  }
  osb_buf cd = {0};
  job = calloc(1, sizeof *job);
  if (!job || osb_buf_appendf(&cd, "Content-Disposition: attachment; filename=\"%s\"", base) < 0) {
    osb_buf_free(&cd);
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto out;
  }
  job->disposition = osb_buf_steal(&cd, NULL);
  job->download = 1;
  job->head = head;
  job->relay = m->signal_forwarding && !head;
  job->file = abs;
  abs = NULL;
  if (!job->disposition || job_queue(m, job, res) != 0) {
    taken = 0;
    goto out;
  }
  job = NULL;
out:
  if (job) job_free(job);
  free(abs);
  free(err);
  xd_query_list_free(&q);
  return taken;
}

int xd_files_route(void *module, const xd_req *req, xd_res *res) {
  files_mod *m = module;
  int get = strcmp(req->method, "GET") == 0, head = strcmp(req->method, "HEAD") == 0;
  if (get && strcmp(req->path, "/files/info") == 0) return route_info(m, req, res);
  if ((get || head) && strcmp(req->path, "/files/download") == 0) return route_download(m, req, res, head);
  return 0;
}

void *xd_files_new(const xd_ctx *ctx) {
  files_mod *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->loop = ctx->loop;
  m->signal_forwarding = ctx->signal_forwarding;
  m->relay_signal = ctx->relay_signal;
  const char *ws = ctx->workspace ? ctx->workspace : "/";
  m->workspace = malloc(strlen(ws) + 1);
  m->names = names_new();
  if (!m->workspace || !m->names) {
    free(m->workspace);
    names_unref(m->names);
    free(m);
    return NULL;
  }
  strcpy(m->workspace, ws);
  return m;
}

void xd_files_close(void *module) {
  files_mod *m = module;
  if (!m) return;
  xd_fsjobs_close(&m->jobs); /* jobs still on the thread pool free themselves when they finish; they answer no one */
  names_unref(m->names);
  free(m->workspace);
  free(m);
}
