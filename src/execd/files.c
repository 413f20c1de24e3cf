/* files.c: the read-only files routes of the C execd (xd.h): GET /files/info, GET|HEAD /files/download, GET
 * /files/search and GET /directories/list, answering byte for byte what the Node execd answered
 * (lib/dev-server/execd/files.js info/search/listDir, files-info.js buildFileInfo/formatTime/idTable/fileError,
 * files-download.js handleDownload, files-glob.js, files-paths.js expandAbsPath, http.js goJson) except where that was
 * a JavaScript artefact; there it answers as the real (Go) execd does (docs/dev-server-execd.md, "Differences"): an
 * info object's keys sorted byte by byte with one member per key (a map in encoding/json; `__proto__` and array
 * indices are keys like any), a path with a NUL (the system call's EINVAL) or with bytes that are not UTF-8 (that very
 * file; JSON writes them as \ufffd), names not UTF-8 (\ufffd), a time outside years 0-9999 (json.Marshal fails: 200
 * and no body), a download's RFC 5987 Content-Disposition (url.PathEscape), a FIFO (500 "seeker can't seek" once a
 * writer opened it) or a device (its size where a seek to its end lands), no Last-Modified at the Unix epoch, walks
 * in byte order with Go's texts of a directory that cannot be read ("open P: ..."). The heads are the C server's
 * (Date, Content-Length, no Connection: keep-alive), as for every native route.
 *
 * The query is decoded and the paths expanded on the loop thread (execd's environment); lstat/open/read and the walks
 * run on libuv's thread pool, and the answers go out on the loop thread. A download of up to DOWNLOAD_LIMIT bytes is
 * read into one buffer; a larger one (or range) is streamed: the head with its Content-Length, then CHUNK bytes per
 * thread-pool read, the next read waiting for the client while more than PENDING_HIGH bytes are queued (bounded
 * memory). A file that shrinks while it is read ends its body short and the connection closes (Go's server). A FIFO is
 * opened without waiting (O_NONBLOCK) and its answer waits on the loop (uv_poll) for a writer, as Go's blocking open
 * would. The walks (search, list) are iterative (a heap stack of directories, each with its sorted names) and their
 * answer is at most WALK_ANSWER_LIMIT bytes. Glob patterns: glob.h (no backtracking).
 *
 * Owner and group names come from /etc/passwd and /etc/group, parsed again only when the file changed (inode, size,
 * mtime, ctime: files-info.js idTable); the tables are shared by the module and its jobs (counted references, a mutex:
 * the jobs read them on the thread pool). */
#include "xd.h"

#include <dirent.h>
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
#include "idfile.h"
#include "core/buf.h"
#include "json.h"
#include "glob.h"
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

typedef struct {
  id_table *t;
  size_t cap;
} table_fill;

static int table_add(const xd_idline *l, void *arg) {
  table_fill *f = arg;
  id_table *t = f->t;
  if (t->n == f->cap) {
    size_t nc = f->cap ? f->cap * 2 : 64;
    id_entry *ne = realloc(t->e, nc * sizeof *ne);
    if (!ne) return -1;
    t->e = ne;
    f->cap = nc;
  }
  char *name = malloc(l->name_len + 1);
  if (!name) return -1;
  memcpy(name, l->name, l->name_len);
  name[l->name_len] = '\0';
  t->e[t->n++] = (id_entry){l->id, l->line, name};
  return 0;
}

/* The lines of the file (idfile.c's reading), one entry per id (its first line). 0, or -1 on OOM (the table is then
 * empty). */
static int table_parse(id_table *t, const char *text, size_t len) {
  table_fill f = {t, 0};
  if (xd_idfile_scan(text, len, table_add, &f) != 0) {
    table_clear(t);
    return -1;
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
  osb_buf text = {0};
  int ok = xd_idfile_read(t->file, &text) == 0;
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
  n->users.file = XD_IDFILE_PASSWD;
  n->groups.file = XD_IDFILE_GROUP;
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
  files_job *waiting; /* download streams waiting for their client to drain, FIFOs for a writer (not on the pool) */
} files_mod;

typedef struct {
  char *key;      /* the path as given (any bytes, a NUL included) */
  size_t key_len;
  char *abs;      /* expandAbsPath of it (a NUL stays one), or NULL with error set */
  size_t abs_len;
  char *error;    /* the 400 text of its undefined variables */
  struct stat st;
} info_entry;

struct files_job {
  xd_fsjob job;   /* first: the thread-pool job and its response (fsops.h); job.jobs NULL once the module closed */
  files_mod *mod; /* valid while job.jobs is set */
  names *names;
  int download;
  int walk;       /* WALK_SEARCH or WALK_LIST (0: info or download) */
  int head;
  int relay;      /* --signal-forwarding: a download whose client went away relays SIGPIPE, as the Node execd */
  /* info */
  info_entry *e;
  size_t n;
  /* search (pattern) and list (depth) */
  xd_glob *glob;
  int bad_pattern; /* the pattern is malformed: its 500 text is in body */
  long long depth;
  /* download; search and list: the root */
  char *file;
  char *disposition; /* the Content-Disposition header line */
  char *range;       /* the Range header, or NULL */
  int lines;         /* line mode: offset and limit (1-based, >= 1) */
  uint64_t offset, limit;
  char last_modified[96]; /* the header line, "" when none (Go's ServeContent omits the Unix epoch) */
  char content_range[96]; /* the header line of a 206 or a 416 */
  int fd;            /* the open file while its answer is made (-1 none) */
  int fifo;          /* 1 a FIFO: answered once a writer came (or the client left); 2 a device that cannot seek */
  uv_poll_t *poll;   /* the FIFO's wait */
  uint64_t start, length, pos; /* the bytes answered: [start, start + length); pos: the next one to read */
  int stream;        /* the body goes out in chunks (over DOWNLOAD_LIMIT): job.run reads the next one */
  int opened;        /* the answer's head went out: the thread pool reads chunks from now on */
  int again;         /* queue the next chunk's read once this job is released */
  int waiting;       /* on the module's waiting list: for the client to take what is queued, or a FIFO's writer */
  files_job *wprev, *wnext;
  /* the result */
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
  free(job->range);
  if (job->fd >= 0) close(job->fd);
  xd_glob_free(job->glob);
  osb_buf_free(&job->body);
  names_unref(job->names);
  free(job);
}

static files_job *job_new(void) {
  files_job *job = calloc(1, sizeof *job);
  if (job) job->fd = -1;
  return job;
}

/* An error answer: its message is in job->body (empty when out of memory: then a 500 "out of memory"). */
static void job_error(files_job *job, int status, const char *code) {
  job->status = status;
  job->code = code;
}

/* fileError(err, prefix) of a failed system call: ENOENT a 404 FILE_NOT_FOUND, else a 500 RUNTIME_ERROR, the text
 * "<prefix><syscall> <path>: <libuv's text of the error, up to a comma>" (osMessage). The prefix of info names its
 * key (`file not found: <key>: ` / `error accessing file <key>: `); download's is empty. */
static void job_fail(files_job *job, int err, const char *key, size_t key_len, const char *syscall, const char *path,
                     size_t path_len) {
  const char *text = uv_strerror(uv_translate_sys_error(err));
  osb_buf *b = &job->body;
  int nf = err == ENOENT;
  osb_buf_reset(b);
  int rc = osb_buf_append_str(b, nf ? "file not found. " : "error accessing file: ");
  if (rc == 0 && key) rc = osb_buf_append_str(b, nf ? "file not found: " : "error accessing file ");
  if (rc == 0 && key) rc = osb_buf_append(b, key, key_len);
  if (rc == 0 && key) rc = osb_buf_append_str(b, ": ");
  if (rc == 0) rc = osb_buf_appendf(b, "%s ", syscall);
  if (rc == 0) rc = osb_buf_append(b, path, path_len);
  if (rc == 0) rc = osb_buf_appendf(b, ": %.*s", (int)strcspn(text, ","), text);
  if (rc != 0) osb_buf_free(b);
  job_error(job, nf ? 404 : 500, nf ? "FILE_NOT_FOUND" : "RUNTIME_ERROR");
}

/* A 500 RUNTIME_ERROR "<prefix><syscall> <path>: <text of err>" (the walks' errors). */
static void job_fail_walk(files_job *job, const char *prefix, int err, const char *syscall, const char *path) {
  const char *text = uv_strerror(uv_translate_sys_error(err));
  osb_buf_reset(&job->body);
  if (osb_buf_appendf(&job->body, "%s%s %s: %.*s", prefix, syscall, path, (int)strcspn(text, ","), text) < 0)
    osb_buf_free(&job->body);
  job_error(job, 500, "RUNTIME_ERROR");
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

/* `"owner":"root"` / `"group":"1234"`: the name of the id, else the number (a name that is not UTF-8 is written with
 * U+FFFD, as Go's encoding/json). 0, -1 OOM. */
static int append_name(osb_buf *b, const char *member, const id_table *t, unsigned long id) {
  const char *name = table_name(t, (long long)id);
  char num[24];
  if (!name) {
    snprintf(num, sizeof num, "%lu", id);
    name = num;
  }
  if (osb_buf_appendf(b, ",\"%s\":", member) < 0 || xd_json_str((struct osb_buf *)b, name, strlen(name)) < 0) return -1;
  return 0;
}

/* buildFileInfo of a path and its lstat, appended as `{...}`. 0, 1 a time outside years 0-9999 (Go's
 * Time.MarshalJSON refuses it: nothing appended), -1 OOM. Under the names lock. */
static int append_fileinfo(osb_buf *b, const char *abs, const struct stat *st, const names *nm) {
  struct tm tm;
  if (!gmtime_r(&st->st_mtim.tv_sec, &tm) || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900 ||
      !gmtime_r(&st->st_ctim.tv_sec, &tm) || tm.tm_year < -1900 || tm.tm_year > 9999 - 1900)
    return 1;
  int rc = osb_buf_append_str(b, "{\"path\":");
  if (rc == 0) rc = xd_json_str((struct osb_buf *)b, abs, strlen(abs));
  if (rc == 0) rc = osb_buf_appendf(b, ",\"type\":\"%s\",\"size\":%lld,\"modified_at\":", type_of(st->st_mode),
                                    (long long)st->st_size);
  if (rc == 0) rc = append_time(b, &st->st_mtim);
  if (rc == 0) rc = osb_buf_append_str(b, ",\"created_at\":");
  if (rc == 0) rc = append_time(b, &st->st_ctim);
  if (rc == 0) rc = append_name(b, "owner", &nm->users, (unsigned long)st->st_uid);
  if (rc == 0) rc = append_name(b, "group", &nm->groups, (unsigned long)st->st_gid);
  if (rc == 0) rc = osb_buf_appendf(b, ",\"mode\":%o}", (unsigned)(st->st_mode & 0777));
  return rc < 0 ? -1 : 0;
}

/* buildFileInfo of one info entry, appended as `"key":{...}`. 0, 1 a time out of range, -1 OOM. */
static int append_info(osb_buf *b, const char *key, size_t key_len, const info_entry *v, const names *nm) {
  size_t mark = b->len;
  int rc = xd_json_str((struct osb_buf *)b, key, key_len);
  if (rc == 0) rc = osb_buf_append_str(b, ":");
  if (rc == 0) rc = append_fileinfo(b, v->abs, &v->st, nm);
  if (rc > 0) b->len = mark;
  return rc;
}

/* by key (Go compares strings byte by byte), then by place */
static int cmp_key_place(const void *a, const void *b) {
  const info_entry *x = *(const info_entry *const *)a, *y = *(const info_entry *const *)b;
  size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
  int c = memcmp(x->key, y->key, n);
  if (!c && x->key_len != y->key_len) c = x->key_len < y->key_len ? -1 : 1;
  return c ? c : (x < y ? -1 : x > y);
}

/* info: every path lstat'ed in order (the first failure is the answer), then the object of FileInfos as Go's
 * encoding/json writes a map: keys sorted, one member per key (the last path of equal keys: `resp[p] = ...`). */
static void info_work(files_job *job) {
  for (size_t i = 0; i < job->n; i++) {
    info_entry *e = &job->e[i];
    if (e->error) {
      if (osb_buf_append_str(&job->body, e->error) != 0) osb_buf_free(&job->body);
      job_error(job, 400, "INVALID_REQUEST_BODY");
      return;
    }
    int err = strlen(e->abs) != e->abs_len ? EINVAL : lstat(e->abs, &e->st) != 0 ? errno : 0;
    if (err) {
      job_fail(job, err, e->key, e->key_len, "lstat", e->abs, e->abs_len);
      return;
    }
  }
  info_entry **by = malloc((job->n ? job->n : 1) * sizeof *by);
  if (!by) {
    job_error(job, 500, "RUNTIME_ERROR");
    return;
  }
  for (size_t i = 0; i < job->n; i++) by[i] = &job->e[i];
  qsort(by, job->n, sizeof *by, cmp_key_place);
  names *nm = job->names;
  uv_mutex_lock(&nm->lock);
  table_refresh(&nm->users);
  table_refresh(&nm->groups);
  int rc = osb_buf_append_str(&job->body, "{");
  for (size_t i = 0, k = 0; i < job->n && rc == 0;) {
    size_t j = i + 1;
    while (j < job->n && by[j]->key_len == by[i]->key_len && memcmp(by[j]->key, by[i]->key, by[i]->key_len) == 0) j++;
    if (k++ && (rc = osb_buf_append_str(&job->body, ",")) != 0) break;
    rc = append_info(&job->body, by[i]->key, by[i]->key_len, by[j - 1], nm);
    i = j;
  }
  uv_mutex_unlock(&nm->lock);
  free(by);
  if (rc == 0) rc = osb_buf_append_str(&job->body, "}");
  job->status = 200;
  if (rc > 0) osb_buf_reset(&job->body); /* Go's json.Marshal fails: gin has written the 200 head and no body */
  if (rc < 0) {
    osb_buf_free(&job->body);
    job_error(job, 500, "RUNTIME_ERROR");
  }
}

/* ---- search and list: the walks (iterative; each level holds its directory's sorted names) ---- */
enum { WALK_SEARCH = 1, WALK_LIST = 2 };

/* The largest answer of a walk: a larger one is a 500 (bounded memory; Go's execd would build it). */
#define WALK_ANSWER_LIMIT XD_BODY_LIMIT

typedef struct {
  char *path;
  char **names;
  size_t n, i;
  long long level;
} walk_frame;

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void frame_free(walk_frame *f) {
  for (size_t i = 0; i < f->n; i++) free(f->names[i]);
  free(f->names);
  free(f->path);
}

/* Go's os.ReadDir / readDirNames of dir: the names sorted byte by byte. 0, an errno (with *syscall: "open" or
 * "readdirent"), or -1 with *syscall NULL on OOM. */
static int read_names(const char *dir, walk_frame *f, const char **syscall) {
  *syscall = "open";
  DIR *d = opendir(dir);
  if (!d) return errno;
  size_t cap = 0;
  struct dirent *de;
  int err = 0;
  for (;;) {
    errno = 0;
    if (!(de = readdir(d))) {
      if (errno) {
        err = errno;
        *syscall = "readdirent";
      }
      break;
    }
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (f->n == cap) {
      size_t nc = cap ? cap * 2 : 16;
      char **nn = realloc(f->names, nc * sizeof *nn);
      if (!nn) goto oom;
      f->names = nn;
      cap = nc;
    }
    if (!(f->names[f->n] = strdup(de->d_name))) goto oom;
    f->n++;
  }
  closedir(d);
  if (err) return err;
  if (f->n > 1) qsort(f->names, f->n, sizeof *f->names, cmp_name);
  return 0;
oom:
  closedir(d);
  *syscall = NULL;
  return -1;
}

static char *join(const char *dir, const char *name) {
  size_t dl = strlen(dir), nl = strlen(name);
  int slash = dl == 0 || dir[dl - 1] != '/';
  char *p = malloc(dl + slash + nl + 1);
  if (!p) return NULL;
  memcpy(p, dir, dl);
  if (slash) p[dl] = '/';
  memcpy(p + dl + slash, name, nl + 1);
  return p;
}

/* One FileInfo appended to the array being built (a ',' before all but the first). 0, -1 OOM or too large (the
 * error set). */
static int walk_emit(files_job *job, const char *path, const struct stat *st, size_t *count, int *bad_time,
                     const char *prefix) {
  size_t mark = job->body.len;
  if (*count && osb_buf_append_str(&job->body, ",") != 0) goto oom;
  int rc = append_fileinfo(&job->body, path, st, job->names);
  if (rc < 0) goto oom;
  if (rc > 0) {
    job->body.len = mark;
    *bad_time = 1;
    return 0;
  }
  (*count)++;
  if (job->body.len > WALK_ANSWER_LIMIT) {
    osb_buf_reset(&job->body);
    if (osb_buf_appendf(&job->body, "%sthe answer would be larger than %u bytes", prefix, WALK_ANSWER_LIMIT) < 0)
      osb_buf_free(&job->body);
    job_error(job, 500, "RUNTIME_ERROR");
    return -1;
  }
  return 0;
oom:
  osb_buf_free(&job->body);
  job_error(job, 500, "RUNTIME_ERROR");
  return -1;
}

/* search (files.js search, Go's filepath.Walk): stat of the root (a missing one 404), then every non-directory under
 * it whose base name matches, in lexical order, symlinks not followed; a path that vanished is skipped.
 * list (files.js listDir, Go's listDirectoryEntries): lstat of the root (a symlink or a non-directory 400), then every
 * entry down to `depth` levels, children right after their directory. */
static void walk_work(files_job *job) {
  int search = job->walk == WALK_SEARCH;
  const char *root = job->file;
  struct stat st;
  osb_buf prefix = {0};
  walk_frame *fs = NULL;
  size_t nf = 0, fcap = 0, count = 0;
  int bad_time = 0;
  if (search ? stat(root, &st) != 0 : lstat(root, &st) != 0) {
    job_fail(job, errno, NULL, 0, search ? "stat" : "lstat", root, strlen(root));
    return;
  }
  if (search) {
    if (job->bad_pattern) {
      job_error(job, 500, "RUNTIME_ERROR");
      return;
    }
    if (osb_buf_append_str(&prefix, "error searching files. error accessing path ") != 0) goto oom;
  } else {
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
      if (osb_buf_appendf(&job->body, S_ISLNK(st.st_mode) ? "path is a symbolic link, refusing to traverse: %s"
                                                          : "path is not a directory: %s", root) < 0)
        osb_buf_free(&job->body);
      job_error(job, 400, "INVALID_REQUEST_BODY");
      return;
    }
    if (osb_buf_appendf(&prefix, "error listing directory %s. ", root) < 0) goto oom;
  }
  names *nm = job->names;
  uv_mutex_lock(&nm->lock);
  table_refresh(&nm->users);
  table_refresh(&nm->groups);
  if (osb_buf_append_str(&job->body, "[") != 0) goto oom_locked;
  /* the root: search lstat's it (a vanished root: nothing found), list enters it */
  if (search) {
    if (lstat(root, &st) != 0) {
      if (errno != ENOENT) {
        char *pre = NULL;
        int e = errno;
        osb_buf p2 = {0};
        if (osb_buf_appendf(&p2, "%s%s: ", prefix.data, root) == 0) pre = p2.data;
        job_fail_walk(job, pre ? pre : "", e, "lstat", root);
        osb_buf_free(&p2);
        goto done;
      }
      goto end;
    }
    if (!S_ISDIR(st.st_mode)) {
      const char *base = strrchr(root, '/');
      base = base && base[1] ? base + 1 : root;
      if (xd_glob_match(job->glob, base, strlen(base)) && walk_emit(job, root, &st, &count, &bad_time, "error searching files. ") != 0)
        goto done;
      goto end;
    }
  } else if (job->depth == 0) {
    goto end;
  }
  for (int first = 1;;) {
    /* enter the directory (first: the root) */
    if (first) {
      if (!(fs = calloc(1, sizeof *fs))) goto oom_locked;
      fcap = 1;
      nf = 1;
      if (!(fs[0].path = strdup(root))) goto oom_locked;
      fs[0].level = 0;
      const char *sc;
      int e = read_names(root, &fs[0], &sc);
      if (e < 0) goto oom_locked;
      if (e) {
        if (search && e == ENOENT) goto end;
        osb_buf p2 = {0};
        int r = search ? osb_buf_appendf(&p2, "%s%s: ", prefix.data, root) : osb_buf_append_str(&p2, prefix.data);
        job_fail_walk(job, r == 0 ? p2.data : "", e, sc, root);
        osb_buf_free(&p2);
        goto done;
      }
      first = 0;
    }
    if (nf == 0) break;
    walk_frame *f = &fs[nf - 1];
    if (f->i == f->n) {
      frame_free(f);
      nf--;
      continue;
    }
    const char *name = f->names[f->i++];
    char *path = join(f->path, name);
    if (!path) goto oom_locked;
    if (lstat(path, &st) != 0) {
      int e = errno;
      if (search && e == ENOENT) {
        free(path);
        continue;
      }
      osb_buf p2 = {0};
      int r = search ? osb_buf_appendf(&p2, "%s%s: ", prefix.data, path) : osb_buf_append_str(&p2, prefix.data);
      job_fail_walk(job, r == 0 ? p2.data : "", e, "lstat", path);
      osb_buf_free(&p2);
      free(path);
      goto done;
    }
    int dir = S_ISDIR(st.st_mode);
    int emit = search ? !dir && xd_glob_match(job->glob, name, strlen(name)) : 1;
    if (emit && walk_emit(job, path, &st, &count, &bad_time, search ? "error searching files. " : prefix.data) != 0) {
      free(path);
      goto done;
    }
    if (dir && (search || f->level + 1 < job->depth)) {
      if (nf == fcap) {
        size_t nc = fcap * 2;
        walk_frame *nfs = realloc(fs, nc * sizeof *nfs);
        if (!nfs) {
          free(path);
          goto oom_locked;
        }
        fs = nfs;
        fcap = nc;
        f = &fs[nf - 1];
      }
      walk_frame *c = &fs[nf];
      memset(c, 0, sizeof *c);
      c->path = path;
      c->level = f->level + 1;
      nf++;
      const char *sc;
      int e = read_names(path, c, &sc);
      if (e < 0) goto oom_locked;
      if (e) {
        if (search && e == ENOENT) {
          frame_free(c);
          nf--;
          continue;
        }
        osb_buf p2 = {0};
        int r = search ? osb_buf_appendf(&p2, "%s%s: ", prefix.data, path) : osb_buf_append_str(&p2, prefix.data);
        job_fail_walk(job, r == 0 ? p2.data : "", e, sc, path);
        osb_buf_free(&p2);
        goto done;
      }
    } else {
      free(path);
    }
  }
end:
  if (osb_buf_append_str(&job->body, "]") != 0) goto oom_locked;
  job->status = 200;
  if (bad_time) osb_buf_reset(&job->body); /* Go's json.Marshal fails: the 200 head and no body */
done:
  uv_mutex_unlock(&nm->lock);
  for (size_t i = 0; i < nf; i++) frame_free(&fs[i]);
  free(fs);
  osb_buf_free(&prefix);
  return;
oom_locked:
  uv_mutex_unlock(&nm->lock);
  for (size_t i = 0; i < nf; i++) frame_free(&fs[i]);
  free(fs);
oom:
  osb_buf_free(&prefix);
  osb_buf_free(&job->body);
  job_error(job, 500, "RUNTIME_ERROR");
}

/* ---- download ---- */
#define CHUNK (256u * 1024u)          /* one read of a streamed body */
#define PENDING_HIGH (1024u * 1024u)  /* queued bytes above which the next read waits for the client */

/* Go's http.TimeFormat of modtime.UTC() ("Mon, 02 Jan 2006 15:04:05 GMT", any year), as the header line; "" at the
 * Unix epoch (and Go's zero time), which ServeContent does not send. */
static void last_modified_line(const struct timespec *t, char *out, size_t cap) {
  static const char *const days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  struct tm tm;
  out[0] = '\0';
  if (t->tv_nsec == 0 && (t->tv_sec == 0 || t->tv_sec == -62135596800LL)) return;
  if (!gmtime_r(&t->tv_sec, &tm)) return;
  long long y = (long long)tm.tm_year + 1900;
  snprintf(out, cap, "Last-Modified: %s, %02d %s %s%04lld %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday,
           months[tm.tm_mon], y < 0 ? "-" : "", y < 0 ? -y : y, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* A decimal number of JavaScript's /^\d+$/ (saturating at 2^62). 1 with *out, else 0. */
static int digits_u64(const char *s, size_t n, uint64_t *out) {
  if (n == 0) return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    v = v >= (1ull << 58) ? (1ull << 62) : v * 10 + (uint64_t)(s[i] - '0');
  }
  *out = v;
  return 1;
}

/* what String.prototype.trim removes (of the bytes a header value may hold) */
static int js_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

/* files-download.js parseRange: the first satisfiable range of a `bytes=` header ([*a, *b] inclusive): 1; none: 0;
 * malformed: -1. */
static int parse_range(const char *h, uint64_t size, uint64_t *a, uint64_t *b) {
  if (strncmp(h, "bytes=", 6) != 0) return -1;
  for (const char *p = h + 6;;) {
    const char *comma = strchr(p, ',');
    const char *e = comma ? comma : p + strlen(p);
    while (p < e && js_space(*p)) p++;
    while (e > p && js_space(e[-1])) e--;
    if (p < e) {
      const char *dash = memchr(p, '-', (size_t)(e - p));
      if (!dash) return -1;
      const char *a0 = p, *a1 = dash, *b0 = dash + 1, *b1 = e;
      while (a1 > a0 && js_space(a1[-1])) a1--;
      while (b0 < b1 && js_space(*b0)) b0++;
      uint64_t x = 0, y = 0;
      int64_t start, end;
      if (a0 == a1) {
        if (!digits_u64(b0, (size_t)(b1 - b0), &y)) return -1;
        uint64_t n = y < size ? y : size;
        start = (int64_t)(size - n);
        end = (int64_t)size - 1;
      } else {
        if (!digits_u64(a0, (size_t)(a1 - a0), &x)) return -1;
        if (b0 != b1 && !digits_u64(b0, (size_t)(b1 - b0), &y)) return -1;
        start = (int64_t)x;
        end = b0 == b1 ? (int64_t)size - 1 : (int64_t)y;
        if (end < start) return -1;
      }
      if (start < (int64_t)size && end >= start) {
        *a = (uint64_t)start;
        *b = (uint64_t)end < size - 1 ? (uint64_t)end : size - 1;
        return 1;
      }
    }
    if (!comma) return 0;
    p = comma + 1;
  }
}

/* Line mode (files-download.js serveLines): the bytes of lines [offset, offset + limit) of the file's first `size`
 * bytes, their terminators kept but the last one's. 0, or an errno of the read. */
static int find_lines(files_job *job, uint64_t size) {
  char *buf = malloc(CHUNK);
  if (!buf) return ENOMEM;
  uint64_t line = 1, written = 0, pos = 0, a = job->offset == 1 ? 0 : UINT64_MAX, b = UINT64_MAX;
  int last_nl = 0, err = 0;
  while (pos < size && b == UINT64_MAX) {
    size_t want = size - pos < CHUNK ? (size_t)(size - pos) : CHUNK;
    ssize_t r = pread(job->fd, buf, want, (off_t)pos);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      err = errno;
      break;
    }
    if (r == 0) break;
    for (char *p = buf, *end = buf + r; p < end;) {
      char *nl = memchr(p, '\n', (size_t)(end - p));
      if (!nl) break;
      uint64_t after = pos + (uint64_t)(nl - buf) + 1;
      if (line >= job->offset && ++written >= job->limit) {
        b = after;
        break;
      }
      line++;
      if (line == job->offset) a = after;
      p = nl + 1;
    }
    last_nl = buf[r - 1] == '\n';
    pos += (uint64_t)r;
  }
  free(buf);
  if (err) return err;
  if (b == UINT64_MAX) b = pos;
  else last_nl = 1;
  if (a == UINT64_MAX || a > b) a = b;
  if (b > a && last_nl) b--; /* execd joins the lines with "\n": none after the last */
  job->start = a;
  job->length = b - a;
  return 0;
}

/* Reads the bytes from pos on (up to the end of what is answered, at most max) into the body. 0, or an errno; a short
 * read (the file shrank) leaves fewer bytes. */
static int read_into_body(files_job *job, size_t max) {
  uint64_t left = job->start + job->length - job->pos;
  size_t want = left < max ? (size_t)left : max;
  osb_buf_reset(&job->body);
  if (want == 0) return 0;
  if (osb_buf_reserve_exact(&job->body, want) != 0) return ENOMEM;
  while (job->body.len < want) {
    ssize_t r = pread(job->fd, job->body.data + job->body.len, want - job->body.len, (off_t)(job->pos + job->body.len));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) break;
    job->body.len += (size_t)r;
  }
  return 0;
}

/* download (files-download.js handleDownload; Go's ServeContent for what is not a regular file): on the thread pool,
 * the file opened, what to answer decided and, up to DOWNLOAD_LIMIT, its bytes read; then (stream) chunk by chunk. */
static void download_work(files_job *job) {
  if (job->opened) { /* the next chunk of a streamed body */
    if (read_into_body(job, CHUNK) != 0) osb_buf_reset(&job->body);
    return;
  }
  struct stat st;
  /* O_NONBLOCK: a FIFO's open does not wait for a writer on the thread pool (the loop waits for one) */
  int fd = open(job->file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    job_fail(job, errno, NULL, 0, "open", job->file, strlen(job->file));
    return;
  }
  job->fd = fd;
  if (fstat(fd, &st) != 0) {
    job_fail(job, errno, NULL, 0, "stat", job->file, strlen(job->file));
    return;
  }
  if (S_ISFIFO(st.st_mode)) {
    job->fifo = 1;
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    if (job->lines) { /* the read fails (Go's text of EISDIR) */
      if (osb_buf_appendf(&job->body, "error accessing file: read %s: is a directory", job->file) < 0)
        osb_buf_free(&job->body);
      job_error(job, 500, "RUNTIME_ERROR");
    } else {
      if (osb_buf_appendf(&job->body, "path is a directory: %s", job->file) < 0) osb_buf_free(&job->body);
      job_error(job, 400, "INVALID_FILE");
    }
    return;
  }
  uint64_t size;
  if (S_ISREG(st.st_mode)) {
    size = (uint64_t)st.st_size;
  } else { /* a device: its size is where a seek to its end lands (Go's ServeContent); one that cannot seek: a 500 */
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0) {
      job->fifo = 2;
      return;
    }
    size = (uint64_t)end;
  }
  last_modified_line(&st.st_mtim, job->last_modified, sizeof job->last_modified);
  job->status = 200;
  if (job->lines) {
    int e = find_lines(job, size);
    if (e) {
      job_fail(job, e, NULL, 0, "read", job->file, strlen(job->file));
      return;
    }
  } else if (job->range) {
    uint64_t a = 0, b = 0;
    int r = parse_range(job->range, size, &a, &b);
    if (r <= 0) {
      /* Go's http.ServeContent: a plain-text error; the headers set before it stay, Accept-Ranges does not */
      if (osb_buf_append_str(&job->body, r < 0 ? "invalid range\n" : "invalid range: failed to overlap\n") != 0)
        osb_buf_free(&job->body);
      snprintf(job->content_range, sizeof job->content_range, "Content-Range: bytes */%llu", (unsigned long long)size);
      job->status = 416;
      return;
    }
    job->status = 206;
    job->start = a;
    job->length = b - a + 1;
    snprintf(job->content_range, sizeof job->content_range, "Content-Range: bytes %llu-%llu/%llu", (unsigned long long)a,
             (unsigned long long)b, (unsigned long long)size);
  } else {
    job->start = 0;
    job->length = size;
  }
  job->pos = job->start;
  if (job->head || job->length == 0) return;
  if (job->length > DOWNLOAD_LIMIT) {
    job->stream = 1; /* the loop writes the head, then the chunks are read one by one */
    return;
  }
  if (read_into_body(job, DOWNLOAD_LIMIT) != 0) osb_buf_reset(&job->body);
}

static void job_run(xd_fsjob *fj) {
  files_job *job = (files_job *)fj;
  if (job->download) download_work(job);
  else if (job->walk) walk_work(job);
  else info_work(job);
}

static int job_queue(files_mod *m, files_job *job, xd_res *res);

static void waiting_unlink(files_job *job) {
  if (!job->waiting) return;
  if (job->wprev) job->wprev->wnext = job->wnext;
  else job->mod->waiting = job->wnext;
  if (job->wnext) job->wnext->wprev = job->wprev;
  job->wprev = job->wnext = NULL;
  job->waiting = 0;
}

static void poll_free(uv_handle_t *h) { free(h); }

static void poll_stop(files_job *job) {
  if (!job->poll) return;
  uv_close((uv_handle_t *)job->poll, poll_free);
  job->poll = NULL;
}

/* The client of a waiting stream (or FIFO) went away. */
static void download_gone(void *arg) {
  files_job *job = arg;
  /* the real execd's write to the closed connection raises SIGPIPE, which --signal-forwarding relays */
  if (job->stream && job->relay && job->mod->relay_signal) job->mod->relay_signal(SIGPIPE);
  waiting_unlink(job);
  poll_stop(job);
  job_free(job);
}

/* Waits on the module's waiting list (for the client's drain, or a FIFO's writer). */
static void wait_client(files_job *job, xd_res *res) {
  job->waiting = 1;
  job->wprev = NULL;
  job->wnext = job->mod->waiting;
  if (job->wnext) job->wnext->wprev = job;
  job->mod->waiting = job;
  job->job.res = res;
  xd_res_on_close(res, download_gone, job);
}

/* The client took what was queued: the next chunk's read. */
static void stream_resume(void *arg) {
  files_job *job = arg;
  xd_res *res = job->job.res;
  waiting_unlink(job);
  if (job_queue(job->mod, job, res) != 0) {
    xd_body_end(res);
    job_free(job);
  }
}

/* The FIFO's answer (Go: once its blocking open returned, ServeContent's seek fails; a device that cannot seek at
 * once): 500 "seeker can't seek", the headers set before it kept. */
static void fifo_answer(files_job *job, xd_res *res) {
  const char *h[] = {job->disposition, "Content-Type: text/plain; charset=utf-8", "X-Content-Type-Options: nosniff"};
  static const char msg[] = "seeker can't seek\n";
  if (job->head) xd_send_head(res, 500, h, 3, sizeof msg - 1);
  else xd_send(res, 500, h, 3, msg, sizeof msg - 1);
}

static void fifo_ready(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  files_job *job = p->data;
  xd_res *res = job->job.res;
  poll_stop(job);
  waiting_unlink(job);
  fifo_answer(job, res);
  job_free(job);
}

static void job_release(xd_fsjob *fj) {
  files_job *job = (files_job *)fj;
  if (job->waiting) return; /* the client's drain or close, a FIFO's writer or the module's close frees it */
  if (job->again && fj->res && fj->jobs) {
    job->again = 0;
    xd_res *res = fj->res;
    if (job_queue(job->mod, job, res) == 0) return;
    xd_body_end(res);
  }
  job_free(job);
}

static void download_answer(files_job *job, xd_res *res) {
  if (job->fifo) {
    if (job->fifo == 2) {
      fifo_answer(job, res);
      return;
    }
    /* Go's open blocks until a writer opens the FIFO: the answer waits for one (its first bytes or its close) */
    job->poll = malloc(sizeof *job->poll);
    if (!job->poll || uv_poll_init(job->mod->loop, job->poll, job->fd) != 0) {
      free(job->poll);
      job->poll = NULL;
      fifo_answer(job, res);
      return;
    }
    job->poll->data = job;
    uv_poll_start(job->poll, UV_READABLE | UV_DISCONNECT, fifo_ready);
    wait_client(job, res);
    return;
  }
  const char *h[6];
  size_t n = 0;
  if (job->status == 416) {
    h[n++] = job->disposition;
    h[n++] = job->content_range;
    h[n++] = "Content-Type: text/plain; charset=utf-8";
    if (job->last_modified[0]) h[n++] = job->last_modified;
    h[n++] = "X-Content-Type-Options: nosniff";
    if (job->head) xd_send_head(res, 416, h, n, job->body.len);
    else xd_send(res, 416, h, n, job->body.data, job->body.len);
    return;
  }
  if (job->lines) {
    h[n++] = "Content-Type: text/plain; charset=utf-8";
  } else {
    h[n++] = "Content-Type: application/octet-stream";
    h[n++] = job->disposition;
    if (job->status == 206) {
      h[n++] = job->content_range;
    } else {
      h[n++] = "Accept-Ranges: bytes";
      if (job->last_modified[0]) h[n++] = job->last_modified;
    }
  }
  if (job->head || job->length == 0) {
    xd_send_head(res, job->status, h, n, job->length);
    return;
  }
  if (!job->stream && job->body.len == job->length) {
    xd_send(res, job->status, h, n, job->body.data, job->body.len);
    return;
  }
  /* a body in chunks, or one cut short by the file's shrinking: the head, then what there is */
  xd_body_open(res, job->status, h, n, job->length);
  if (!job->stream) {
    xd_body_write(res, job->body.data, job->body.len);
    xd_body_end(res);
    return;
  }
  job->opened = 1;
  job->again = 1; /* the first chunk is read once this job is released */
}

/* A chunk of a streamed body was read. */
static void stream_answer(files_job *job, xd_res *res) {
  size_t got = job->body.len;
  if (got) xd_body_write(res, job->body.data, got);
  job->pos += got;
  osb_buf_reset(&job->body);
  if (got == 0 || job->pos >= job->start + job->length) {
    xd_body_end(res); /* done; or the file shrank or failed: the connection is closed after the short body */
    return;
  }
  if (xd_stream_pending(res) > PENDING_HIGH) {
    wait_client(job, res);
    xd_stream_on_drain(res, stream_resume, job);
  } else {
    job->again = 1;
  }
}

/* xd_send_error of a message of `len` bytes (a NUL included). */
static void send_error_len(xd_res *res, int status, const char *code, const char *msg, size_t len) {
  osb_buf b = {0};
  int rc = osb_buf_appendf(&b, "{\"code\":\"%s\",\"message\":", code);
  if (rc == 0) rc = xd_json_str((struct osb_buf *)&b, msg, len);
  if (rc == 0) rc = osb_buf_append_str(&b, "}");
  if (rc != 0) {
    osb_buf_free(&b);
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return;
  }
  xd_send_json(res, status, b.data, b.len);
  osb_buf_free(&b);
}

static void job_answer(xd_fsjob *fj, int status) {
  files_job *job = (files_job *)fj;
  xd_res *res = fj->res;
  /* the client went away (or ended its side: closed, or half-closed and still reading) before the file's bytes were
   * written to it: the real execd's write to the closed connection raises SIGPIPE, which --signal-forwarding relays
   * to the foreground command (once per download); a half-closed client still gets the answer below */
  if ((!res || xd_res_peer_ended(res)) && job->relay && fj->jobs && job->mod->relay_signal && status == 0 &&
      !job->code && !job->fifo && (job->status == 200 || job->status == 206) && job->length > 0) {
    job->relay = 0;
    job->mod->relay_signal(SIGPIPE);
  }
  if (!res) {
    job->again = 0;
    return;
  }
  if (status != 0) {
    job->again = 0;
    if (job->opened) xd_body_end(res);
    else xd_send_error(res, 500, "RUNTIME_ERROR", "operation canceled");
  } else if (job->code) {
    if (job->body.len) send_error_len(res, job->status, job->code, job->body.data, job->body.len);
    else xd_send_error(res, job->status, job->code, "out of memory");
  } else if (!job->download) {
    xd_send_json(res, 200, job->body.len ? job->body.data : "", job->body.len);
  } else if (job->opened) {
    stream_answer(job, res);
  } else {
    download_answer(job, res);
  }
}

/* Queues the job (the thread pool's from now on). 0, or -1 (the job is still the caller's). */
static int job_queue(files_mod *m, files_job *job, xd_res *res) {
  job->mod = m;
  if (!job->names) job->names = names_ref(m->names); /* once: a stream queues its job again per chunk */
  job->job.run = job_run;
  job->job.answer = job_answer;
  job->job.release = job_release;
  return xd_fsjob_start(&m->jobs, m->loop, &job->job, res);
}

/* The expanded, absolute path of a query value (any bytes: a NUL stays in the result, as in Go's strings; the system
 * call then fails with EINVAL, as Go's). 0 (*abs, *abs_len), 1 (*err: the 400 text), -1 OOM. */
static int expand_value(const files_mod *m, const char *v, size_t len, char **abs, size_t *abs_len, char **err) {
  *abs = *err = NULL;
  if (strlen(v) == len) {
    int rc = xd_expand_abs_path(v, environ, m->workspace, abs, err);
    if (rc == 0) *abs_len = strlen(*abs);
    return rc;
  }
  /* a NUL stands for a byte the value does not hold (and expansion gives no meaning to), then is put back */
  unsigned char sub = 1;
  while (sub < 0x20 && memchr(v, sub, len)) sub++;
  if (sub == 0x20) sub = 0x7f;
  char *copy = malloc(len + 1);
  if (!copy) return -1;
  for (size_t i = 0; i < len; i++) copy[i] = v[i] ? v[i] : (char)sub;
  copy[len] = '\0';
  int rc = xd_expand_abs_path(copy, environ, m->workspace, abs, err);
  free(copy);
  if (rc == 0) {
    *abs_len = strlen(*abs);
    for (char *q = *abs; *q; q++)
      if (*q == (char)sub) *q = '\0';
  }
  return rc;
}

static int route_info(files_mod *m, const xd_req *req, xd_res *res) {
  xd_query_list q;
  if (xd_query_all(req, "path", &q) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  files_job *job = job_new();
  if (!job || !(job->e = calloc(q.n ? q.n : 1, sizeof *job->e))) goto oom;
  for (size_t i = 0; i < q.n; i++) {
    info_entry *e = &job->e[job->n++];
    e->key = q.v[i];
    e->key_len = q.len[i];
    q.v[i] = NULL;
    if (expand_value(m, e->key, e->key_len, &e->abs, &e->abs_len, &e->error) < 0) goto oom;
  }
  xd_query_list_free(&q);
  if (job_queue(m, job, res) != 0) {
    job_free(job);
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
  }
  return 1;
oom:
  xd_query_list_free(&q);
  if (job) job_free(job);
  xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
  return 1;
}

/* Go's strconv.Atoi: an optional sign, decimal digits, within 64 bits. 1 with *out, else 0. */
static int go_atoi(const char *s, long long *out) {
  int neg = *s == '-';
  if (*s == '+' || *s == '-') s++;
  if (!*s) return 0;
  unsigned long long v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return 0;
    unsigned d = (unsigned)(*s - '0');
    if (v > (9223372036854775808ull - d) / 10) return 0;
    v = v * 10 + d;
  }
  if (!neg && v > 9223372036854775807ull) return 0;
  *out = neg ? (long long)(0 - v) : (long long)v;
  return 1;
}

/* GET /files/search?path=&pattern= and GET /directories/list?path=&depth= */
static int route_walk(files_mod *m, const xd_req *req, xd_res *res, int kind) {
  xd_query_list q;
  if (xd_query_all(req, "path", &q) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  files_job *job = NULL;
  char *abs = NULL, *err = NULL, *depth = NULL, *pattern = NULL;
  size_t abs_len = 0;
  long long d = 1;
  if (q.n == 0 || q.len[0] == 0) {
    xd_send_error(res, 400, "MISSING_QUERY", "missing query parameter 'path'");
    goto out;
  }
  if (kind == WALK_LIST && (depth = xd_query(req, "depth")) && *depth && (!go_atoi(depth, &d) || d < 0)) {
    osb_buf t = {0};
    if (osb_buf_appendf(&t, "invalid query parameter 'depth': %s", depth) == 0)
      xd_send_error(res, 400, "INVALID_REQUEST_BODY", t.data);
    else
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    osb_buf_free(&t);
    goto out;
  }
  int rc = expand_value(m, q.v[0], q.len[0], &abs, &abs_len, &err);
  if (rc < 0) goto oom;
  if (rc > 0) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", err);
    goto out;
  }
  if (!(job = job_new())) goto oom;
  job->walk = kind;
  job->depth = d;
  if (kind == WALK_SEARCH) {
    size_t plen = 0;
    xd_query_list pq;
    if (xd_query_all(req, "pattern", &pq) != 0) goto oom;
    if (pq.n && pq.len[0]) {
      pattern = pq.v[0];
      plen = pq.len[0];
      pq.v[0] = NULL;
    }
    xd_query_list_free(&pq);
    if (!pattern) {
      if (!(pattern = strdup("**"))) goto oom;
      plen = 2;
    }
    int g = xd_glob_compile(pattern, plen, &job->glob);
    if (g < 0) goto oom;
    if (g > 0) { /* answered after the root's stat (a missing root is still a 404) */
      if (osb_buf_append_str(&job->body, "error searching files. invalid pattern ") != 0 ||
          osb_buf_append(&job->body, pattern, plen) != 0 || osb_buf_append_str(&job->body, ": syntax error in pattern") != 0)
        goto oom;
      job->bad_pattern = 1;
    }
  }
  if (strlen(abs) != abs_len) { /* a NUL: the first system call fails as Go's (EINVAL) */
    files_job tmp = {0};
    job_fail(&tmp, EINVAL, NULL, 0, kind == WALK_SEARCH ? "stat" : "lstat", abs, abs_len);
    if (tmp.body.len) send_error_len(res, tmp.status, tmp.code, tmp.body.data, tmp.body.len);
    else xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    osb_buf_free(&tmp.body);
    goto out;
  }
  job->file = abs;
  abs = NULL;
  if (job_queue(m, job, res) != 0) goto oom;
  job = NULL;
  goto out;
oom:
  xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
out:
  if (job) job_free(job);
  free(abs);
  free(err);
  free(depth);
  free(pattern);
  xd_query_list_free(&q);
  return 1;
}

/* Go's formatContentDisposition of a base name: `attachment; filename="<name>"`, or when a byte is not ASCII (a
 * character above U+007F, or a byte that is not UTF-8: Go's U+FFFD) the RFC 5987 form with url.PathEscape of the
 * name in both places. As Go's server writes a header value, CR and LF become spaces. NULL on OOM. */
static char *content_disposition(const char *base, size_t len) {
  int ascii = 1;
  for (size_t i = 0; i < len && ascii; i++) ascii = (unsigned char)base[i] < 0x80;
  osb_buf b = {0};
  if (ascii) {
    if (osb_buf_append_str(&b, "Content-Disposition: attachment; filename=\"") != 0) goto oom;
    for (size_t i = 0; i < len; i++) {
      char c = base[i] == '\r' || base[i] == '\n' ? ' ' : base[i];
      if (osb_buf_append(&b, &c, 1) != 0) goto oom;
    }
    if (osb_buf_append_str(&b, "\"") != 0) goto oom;
    return osb_buf_steal(&b, NULL);
  }
  osb_buf enc = {0};
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)base[i];
    /* url.PathEscape (encodePathSegment): unreserved characters and $ & + : = @ stay */
    int keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("-_.~$&+:=@", c);
    int rc = keep && c ? osb_buf_append(&enc, (const char *)&c, 1) : osb_buf_appendf(&enc, "%%%02X", c);
    if (rc != 0) {
      osb_buf_free(&enc);
      goto oom;
    }
  }
  int rc = osb_buf_appendf(&b, "Content-Disposition: attachment; filename=\"%s\"; filename*=UTF-8''%s",
                           enc.data ? enc.data : "", enc.data ? enc.data : "");
  osb_buf_free(&enc);
  if (rc != 0) goto oom;
  return osb_buf_steal(&b, NULL);
oom:
  osb_buf_free(&b);
  return NULL;
}

static int route_download(files_mod *m, const xd_req *req, xd_res *res, int head) {
  xd_query_list q;
  if (xd_query_all(req, "path", &q) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  files_job *job = NULL;
  char *abs = NULL, *err = NULL, *offset = NULL, *limit = NULL;
  size_t abs_len = 0;
  if (q.n == 0 || q.len[0] == 0) {
    xd_send_error(res, 400, "MISSING_QUERY", "missing query parameter 'path'");
    goto out;
  }
  int rc = expand_value(m, q.v[0], q.len[0], &abs, &abs_len, &err);
  if (rc < 0) goto oom;
  if (rc > 0) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", err);
    goto out;
  }
  if (!(job = job_new())) goto oom;
  /* line mode: offset and limit, both given and each a positive integer */
  offset = xd_query(req, "offset");
  limit = xd_query(req, "limit");
  if ((offset && *offset) || (limit && *limit)) {
    const char *bad = NULL;
    if (!offset || !*offset || !limit || !*limit)
      bad = "both offset and limit must be provided together for line-based reading";
    else if (!digits_u64(offset, strlen(offset), &job->offset) || job->offset < 1)
      bad = "offset must be a positive integer (1-based)";
    else if (!digits_u64(limit, strlen(limit), &job->limit) || job->limit < 1)
      bad = "limit must be a positive integer";
    if (bad) {
      xd_send_error(res, 400, "INVALID_REQUEST_BODY", bad);
      goto out;
    }
    job->lines = 1;
  }
  if (strlen(abs) != abs_len) { /* a NUL: Go's open fails with EINVAL */
    job_fail(job, EINVAL, NULL, 0, "open", abs, abs_len);
    if (job->body.len) send_error_len(res, job->status, job->code, job->body.data, job->body.len);
    else xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto out;
  }
  const char *range = xd_header(req, "range");
  if (range && *range && !job->lines && !(job->range = strdup(range))) goto oom;
  const char *slash = strrchr(abs, '/');
  const char *base = slash && slash[1] ? slash + 1 : abs;
  if (!(job->disposition = content_disposition(base, strlen(base)))) goto oom;
  job->download = 1;
  job->head = head;
  job->relay = m->signal_forwarding && !head;
  job->file = abs;
  abs = NULL;
  if (job_queue(m, job, res) != 0) goto oom;
  job = NULL;
  goto out;
oom:
  xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
out:
  if (job) job_free(job);
  free(abs);
  free(err);
  free(offset);
  free(limit);
  xd_query_list_free(&q);
  return 1;
}

int xd_files_route(void *module, const xd_req *req, xd_res *res) {
  files_mod *m = module;
  int get = strcmp(req->method, "GET") == 0, head = strcmp(req->method, "HEAD") == 0;
  if (get && strcmp(req->path, "/files/info") == 0) return route_info(m, req, res);
  if ((get || head) && strcmp(req->path, "/files/download") == 0) return route_download(m, req, res, head);
  if (get && strcmp(req->path, "/files/search") == 0) return route_walk(m, req, res, WALK_SEARCH);
  if (get && strcmp(req->path, "/directories/list") == 0) return route_walk(m, req, res, WALK_LIST);
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

static void ignore_gone(void *arg) { (void)arg; }

void xd_files_close(void *module) {
  files_mod *m = module;
  if (!m) return;
  xd_fsjobs_close(&m->jobs); /* jobs still on the thread pool free themselves when they finish; they answer no one */
  while (m->waiting) { /* streams and FIFOs waiting for their client: dropped (the server closes the connections) */
    files_job *job = m->waiting;
    xd_res *res = job->job.res;
    waiting_unlink(job);
    xd_res_on_close(res, ignore_gone, NULL);
    xd_stream_on_drain(res, ignore_gone, NULL);
    poll_stop(job);
    job_free(job);
  }
  names_unref(m->names);
  free(m->workspace);
  free(m);
}
