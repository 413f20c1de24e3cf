/* upload.c: POST /files/upload of the C execd (xd.h), as the real execd answers it (upstream
 * controller/filesystem_upload.go; the Node execd's files-upload.js where they agree): multipart pairs of a `metadata`
 * part (JSON FileMetadata {path, mode?, owner?, group?}) and a `file` part, both with a filename, the i-th metadata
 * with the i-th file.
 *
 * Like Go's execd (gin's MultipartForm, then the pairs) the whole form is received before anything is written: a
 * form that fails to parse, or whose counts do not match, writes nothing; then each pair in order is parsed,
 * resolved, written and given its mode and owner, and a pair that fails stops there with the files of the pairs before
 * it written. The body is read as it arrives (server.c xd_body_read, any size, Content-Length or chunked) by the
 * incremental reader of multipart.c: the first UPLOAD_MEMORY bytes of kept parts stay in memory (Go keeps 32 MiB),
 * the rest go to one unlinked spool file in $TMPDIR or /tmp (Go: temp files there) as they arrive, written on libuv's
 * thread pool; while UPLOAD_QUEUE bytes wait for the disk the socket is not read (xd_body_pause). The pairs are then
 * written on the thread pool: the metadata read as Go reads it (upmeta.c), parents made (mkdir -p, new directories given the owner/group), the file created or
 * truncated 0777 before the umask, its bytes copied from memory or the spool (copy_file_range), fsynced with its
 * directory, then the mode (Go: the decimal digits read as octal, chmod of its permission bits; a mode that does not
 * read is a 500 after the file was written, as Go's ChmodFile) and owner/group. Every answer goes out once the whole
 * body was read. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_TMPFILE, copy_file_range */
#endif
#include "xd.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmdreq.h"
#include "core/buf.h"
#include "fsops.h"
#include "json.h"
#include "multipart.h"
#include "upmeta.h"

extern char **environ;

/* kept part bytes held in memory per upload; the rest is spooled */
#define UPLOAD_MEMORY (4u * 1024u * 1024u)
/* spool bytes waiting for the disk before the socket is paused */
#define UPLOAD_QUEUE (1024u * 1024u)
/* a metadata part larger than this is refused (files-upload.js METADATA_LIMIT) */
#define METADATA_LIMIT (1024u * 1024u)

typedef struct {
  int is_meta;
  int too_big;      /* a metadata part over METADATA_LIMIT (its bytes dropped) */
  osb_buf mem;      /* in memory, unless spooled */
  int spooled;
  unsigned long long off, len; /* in the spool */
} blob;

typedef struct upload upload;

typedef struct {
  uv_work_t w;
  upload *u;
  char *data;
  size_t len;
  unsigned long long off;
  int err;
} spool_write;

struct upload {
  xd_fsjob job;     /* first: the pairs' work once the form is in (fsops.h) */
  xd_fsmod *m;
  uv_loop_t *loop;
  xd_res *res;
  char *workspace;
  xd_mp *mp;
  int form;         /* XD_MP_OK, or how the form failed */
  blob *parts;
  size_t nparts, cap;
  size_t mem_used;
  int spool_fd;     /* -1: none yet (opened by the first spool write) */
  unsigned long long spool_len; /* bytes given to the spool (written or queued) */
  osb_buf queue;    /* spool bytes not yet handed to a write */
  spool_write *writing; /* the write in flight */
  int spool_err;    /* errno of a failed spool write */
  int paused;
  int body_done;
  int gone;         /* the client went away: freed once no write is in flight */
  int started;      /* the pairs' job was queued */
};

/* ---------------------------------------------------------------- freeing */

static void upload_free(upload *u) {
  for (size_t i = 0; i < u->nparts; i++) osb_buf_free(&u->parts[i].mem);
  free(u->parts);
  osb_buf_free(&u->queue);
  xd_mp_free(u->mp);
  if (u->spool_fd >= 0) close(u->spool_fd);
  free(u->workspace);
  free(u);
}

static void job_release(xd_fsjob *fj) { upload_free((upload *)fj); }

/* ---------------------------------------------------------------- the spool (thread pool) */

static int spool_open(void) {
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != ENOENT)) return fd;
  /* no O_TMPFILE there: a named file, unlinked at once */
  char path[4096];
  if (snprintf(path, sizeof path, "%s/execd-upload-XXXXXX", dir) >= (int)sizeof path) return -1;
  fd = mkostemp(path, O_CLOEXEC);
  if (fd >= 0) unlink(path);
  return fd;
}

static void spool_work(uv_work_t *w) {
  spool_write *sw = w->data;
  upload *u = sw->u;
  if (u->spool_fd < 0 && (u->spool_fd = spool_open()) < 0) {
    sw->err = errno ? errno : EIO;
    return;
  }
  for (size_t off = 0; off < sw->len;) {
    ssize_t n = pwrite(u->spool_fd, sw->data + off, sw->len - off, (off_t)(sw->off + off));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      sw->err = n < 0 ? errno : EIO;
      return;
    }
    off += (size_t)n;
  }
}

static void maybe_finish(upload *u);
static void spool_kick(upload *u);

static void spool_done(uv_work_t *w, int status) {
  spool_write *sw = w->data;
  upload *u = sw->u;
  if (status != 0 && !sw->err) sw->err = ECANCELED;
  if (sw->err && !u->spool_err) u->spool_err = sw->err;
  free(sw->data);
  free(sw);
  u->writing = NULL;
  if (u->gone) {
    upload_free(u);
    return;
  }
  spool_kick(u);
  if (u->paused && u->queue.len < UPLOAD_QUEUE) {
    u->paused = 0;
    xd_body_pause(u->res, 0);
  }
  maybe_finish(u);
}

/* hands the queued bytes to a write when none is in flight */
static void spool_kick(upload *u) {
  if (u->writing || u->queue.len == 0 || u->spool_err) {
    if (u->spool_err) osb_buf_free(&u->queue); /* the form fails anyway: nothing more is written */
    return;
  }
  spool_write *sw = calloc(1, sizeof *sw);
  if (!sw) {
    u->spool_err = ENOMEM;
    return;
  }
  sw->u = u;
  sw->off = u->spool_len - u->queue.len;
  sw->data = osb_buf_steal(&u->queue, &sw->len);
  sw->w.data = sw;
  if (uv_queue_work(u->loop, &sw->w, spool_work, spool_done) != 0) {
    free(sw->data);
    free(sw);
    u->spool_err = EIO;
    return;
  }
  u->writing = sw;
}

static int spool_add(upload *u, const char *d, size_t n) {
  if (u->spool_err) return 0;
  if (osb_buf_append(&u->queue, d, n) != 0) return -1;
  u->spool_len += n;
  spool_kick(u);
  if (u->queue.len >= UPLOAD_QUEUE && !u->paused) {
    u->paused = 1;
    xd_body_pause(u->res, 1);
  }
  return 0;
}

/* ---------------------------------------------------------------- the form's parts (multipart.c callbacks) */

static int mp_part(void *arg, int kind) {
  upload *u = arg;
  if (u->nparts == u->cap) {
    size_t nc = u->cap ? u->cap * 2 : 8;
    blob *np = realloc(u->parts, nc * sizeof *np);
    if (!np) return -1;
    u->parts = np;
    u->cap = nc;
  }
  memset(&u->parts[u->nparts], 0, sizeof *u->parts);
  u->parts[u->nparts++].is_meta = kind == 1;
  return 0;
}

static int mp_data(void *arg, const char *d, size_t n) {
  upload *u = arg;
  blob *b = &u->parts[u->nparts - 1];
  if (b->too_big) return 0;
  if (b->is_meta && b->len + n > METADATA_LIMIT) {
    b->too_big = 1;
    if (!b->spooled) u->mem_used -= b->mem.len;
    osb_buf_free(&b->mem);
    return 0;
  }
  if (!b->spooled && u->mem_used + n <= UPLOAD_MEMORY) {
    if (osb_buf_append(&b->mem, d, n) != 0) return -1;
    u->mem_used += n;
    b->len += n;
    return 0;
  }
  if (!b->spooled) { /* from now on in the spool, with what it had in memory */
    b->spooled = 1;
    b->off = u->spool_len;
    u->mem_used -= b->mem.len;
    int rc = b->mem.len ? spool_add(u, b->mem.data, b->mem.len) : 0;
    osb_buf_free(&b->mem);
    if (rc) return -1;
  }
  b->len += n;
  return spool_add(u, d, n);
}

static int mp_part_end(void *arg) {
  (void)arg;
  return 0;
}

static const xd_mp_callbacks MP_CB = {mp_part, mp_data, mp_part_end};

/* ---------------------------------------------------------------- the pairs (thread pool) */

static void fail_text(xd_fsjob *job, int status, const char *code, osb_buf *m) {
  xd_fsjob_fail(job, status, code, m->data);
  osb_buf_free(m);
}

static void job_fail(xd_fsjob *job, const char *what, const char *path, const xd_oserr *err) {
  osb_buf m = {0};
  int ok = osb_buf_appendf(&m, "%s %s. ", what, path) >= 0 && xd_oserr_text(&m, err) >= 0;
  if (!ok) osb_buf_free(&m);
  fail_text(job, 500, "RUNTIME_ERROR", &m);
}

/* the bytes of a blob, read back when spooled (a metadata part: at most METADATA_LIMIT) */
static char *blob_bytes(const upload *u, const blob *b) {
  char *d = malloc(b->len + 1);
  if (!d) return NULL;
  if (!b->spooled) {
    if (b->len) memcpy(d, b->mem.data, b->len);
  } else {
    for (size_t got = 0; got < b->len;) {
      ssize_t n = pread(u->spool_fd, d + got, b->len - got, (off_t)(b->off + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        free(d);
        return NULL;
      }
      got += (size_t)n;
    }
  }
  d[b->len] = 0;
  return d;
}

/* the file's bytes into fd: from memory, or copied from the spool in the kernel */
static int copy_blob(const upload *u, const blob *b, int fd, const char *target, xd_oserr *err) {
  if (!b->spooled) {
    for (size_t off = 0; off < b->len;) {
      ssize_t w = write(fd, b->mem.data + off, b->len - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        xd_oserr_set(err, errno, "write", target);
        return -1;
      }
      off += (size_t)w;
    }
    return 0;
  }
  loff_t in = (loff_t)b->off;
  unsigned long long left = b->len;
  int plain = 0;
  while (left > 0 && !plain) {
    ssize_t n = copy_file_range(u->spool_fd, &in, fd, NULL, left > (1u << 30) ? (1u << 30) : (size_t)left, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) plain = 1;
    else if (n <= 0) {
      xd_oserr_set(err, n < 0 ? errno : EIO, "write", target);
      return -1;
    } else left -= (unsigned long long)n;
  }
  if (!left) return 0;
  char *tmp = malloc(256u * 1024u);
  if (!tmp) {
    xd_oserr_set(err, ENOMEM, "write", target);
    return -1;
  }
  while (left > 0) {
    ssize_t n = pread(u->spool_fd, tmp, left > 256u * 1024u ? 256u * 1024u : (size_t)left, (off_t)in);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      free(tmp);
      xd_oserr_set(err, n < 0 ? errno : EIO, "read", NULL);
      return -1;
    }
    for (ssize_t o = 0; o < n;) {
      ssize_t w = write(fd, tmp + o, (size_t)(n - o));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        free(tmp);
        xd_oserr_set(err, errno, "write", target);
        return -1;
      }
      o += w;
    }
    in += n;
    left -= (unsigned long long)n;
  }
  free(tmp);
  return 0;
}

/* writeUploadFile: created or truncated 0777 before the umask, written, fsynced, then its directory (best effort).
 * 0, -1 the open failed, -2 the copy failed (err set); as Go, a failing fsync or close is no error (execd logs it). */
static int write_file(const upload *u, const blob *b, const char *target, const char *dir, xd_oserr *err) {
  int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0777);
  if (fd < 0) {
    xd_oserr_set(err, errno, "open", target);
    return -1;
  }
  if (copy_blob(u, b, fd, target, err) != 0) {
    close(fd);
    return -2;
  }
  (void)fsync(fd);
  (void)close(fd);
  int d = open(dir, O_RDONLY | O_CLOEXEC);
  if (d >= 0) {
    (void)fsync(d);
    close(d);
  }
  return 0;
}

/* ChmodFile: the mode's decimal digits read as octal, then chmod of its permission bits (and Go's setuid, setgid and
 * sticky FileMode bits), then chown to the names that resolve. 0, or 1 with the error's text in msg. */
static int apply_permission(const char *target, const xd_upmeta *md, const xd_owner *o, osb_buf *msg) {
  if (md->has_mode) {
    char dec[32];
    snprintf(dec, sizeof dec, "%lld", md->mode);
    unsigned long v;
    int r = xd_upmeta_octal(dec, &v, msg);
    if (r != 0) return 1;
    mode_t mode = (mode_t)(v & 0777);
    if (v & (1ul << 23)) mode |= S_ISUID;
    if (v & (1ul << 22)) mode |= S_ISGID;
    if (v & (1ul << 20)) mode |= S_ISVTX;
    if (chmod(target, mode) != 0) {
      xd_oserr e = {0};
      xd_oserr_set(&e, errno, "chmod", target);
      xd_oserr_text(msg, &e);
      xd_oserr_free(&e);
      return 1;
    }
  }
  xd_oserr e = {0};
  if (xd_own(target, o, &e) != 0) {
    xd_oserr_text(msg, &e);
    xd_oserr_free(&e);
    return 1;
  }
  return 0;
}

/* processUploadPair of the i-th metadata blob and the i-th file blob: 0 written, -1 the job's answer is set */
static int write_pair(upload *u, const blob *mb, const blob *fb) {
  xd_fsjob *job = &u->job;
  osb_buf msg = {0};
  if (mb->too_big) {
    xd_fsjob_fail(job, 400, "INVALID_FILE_METADATA", "metadata part larger than 1 MiB");
    return -1;
  }
  char *text = blob_bytes(u, mb);
  if (!text) {
    xd_fsjob_fail(job, 400, "INVALID_FILE_METADATA", "error reading metadata content. read error");
    return -1;
  }
  xd_upmeta md;
  int r = xd_upmeta_read(text, mb->len, &md, &msg);
  free(text);
  if (r != 0) {
    if (r < 0) osb_buf_free(&msg);
    fail_text(job, 400, "INVALID_FILE_METADATA", &msg);
    xd_upmeta_free(&md);
    return -1;
  }
  char *target = NULL, *experr = NULL;
  r = xd_expand_abs_path(md.path, environ, u->workspace, &target, &experr);
  if (r != 0) {
    if (r == 1 && osb_buf_appendf(&msg, "error resolving target path %s. %s", md.path, experr) != 0) osb_buf_free(&msg);
    free(experr);
    fail_text(job, 500, "RUNTIME_ERROR", &msg);
    xd_upmeta_free(&md);
    return -1;
  }
  /* filepath.Dir of the resolved target */
  const char *slash = strrchr(target, '/');
  size_t dl = slash == target ? 1 : (size_t)(slash - target);
  char *dir = malloc(dl + 1), *first = NULL;
  int rc = -1;
  xd_oserr err = {0};
  xd_owner o;
  if (!dir) {
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    goto out;
  }
  memcpy(dir, target, dl);
  dir[dl] = '\0';
  xd_owner_resolve(md.owner, md.group, &o); /* the names read once, for the directories made and the file */
  if (xd_mkdirp(dir, &first, &err) != 0 || xd_own_created(dir, first, &o, &err) != 0) {
    job_fail(job, "error creating target directory", dir, &err);
    goto out;
  }
  int w = write_file(u, fb, target, dir, &err);
  if (w != 0) {
    job_fail(job, w == -1 ? "error opening destination file" : "error copying file", target, &err);
    goto out;
  }
  if (apply_permission(target, &md, &o, &msg) != 0) {
    /* Go tries once more after 20 ms (a freshly written entry on a weakly coherent file system) */
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    osb_buf_free(&msg);
    if (apply_permission(target, &md, &o, &msg) != 0) {
      osb_buf full = {0};
      if (osb_buf_appendf(&full, "error chmoding file %s. %s", target, msg.data ? msg.data : "") != 0) osb_buf_free(&full);
      fail_text(job, 500, "RUNTIME_ERROR", &full);
      goto out;
    }
  }
  rc = 0;
out:
  osb_buf_free(&msg);
  xd_oserr_free(&err);
  free(first);
  free(dir);
  free(target);
  xd_upmeta_free(&md);
  return rc;
}

static void job_run(xd_fsjob *fj) {
  upload *u = (upload *)fj;
  size_t mi = 0, fi = 0;
  for (;;) {
    while (mi < u->nparts && !u->parts[mi].is_meta) mi++;
    while (fi < u->nparts && u->parts[fi].is_meta) fi++;
    if (mi >= u->nparts || fi >= u->nparts) break;
    if (write_pair(u, &u->parts[mi++], &u->parts[fi++]) != 0) break;
  }
}

/* ---------------------------------------------------------------- the request */

static void answer(upload *u, int status, const char *code, const char *message) {
  xd_res *res = u->res;
  u->res = NULL;
  xd_res_on_close(res, NULL, NULL);
  xd_send_error(res, status, code, message);
  upload_free(u);
}

/* the body is whole and every spool write done: the answer, or the pairs' job */
static void maybe_finish(upload *u) {
  if (!u->body_done || u->writing || u->started) return;
  if (u->form == XD_MP_OK && u->mp) u->form = xd_mp_finish(u->mp);
  if (u->form == XD_MP_NOMEM) {
    answer(u, 500, "RUNTIME_ERROR", "out of memory");
    return;
  }
  /* Go: a form that does not parse, or whose temp files fail, is "multipart form is empty" */
  if (u->form != XD_MP_OK || u->spool_err) {
    answer(u, 400, "INVALID_FILE", "multipart form is empty");
    return;
  }
  size_t nmeta = 0, nfile = 0;
  for (size_t i = 0; i < u->nparts; i++) u->parts[i].is_meta ? nmeta++ : nfile++;
  if (nmeta == 0) {
    answer(u, 400, "INVALID_FILE_METADATA", "metadata file is missing");
    return;
  }
  if (nfile == 0) {
    answer(u, 400, "INVALID_FILE_CONTENT", "file is missing");
    return;
  }
  if (nmeta != nfile) {
    char msg[96];
    snprintf(msg, sizeof msg, "metadata and file count mismatch: %zu vs %zu", nmeta, nfile);
    answer(u, 400, "INVALID_FILE", msg);
    return;
  }
  u->started = 1;
  u->job.run = job_run;
  u->job.release = job_release;
  xd_res *res = u->res;
  u->res = NULL;
  if (xd_fsjob_start(&u->m->jobs, u->m->loop, &u->job, res) != 0) {
    u->res = res;
    answer(u, 500, "RUNTIME_ERROR", "cannot queue the upload");
  }
}

static void body_data(void *arg, const char *data, size_t len) {
  upload *u = arg;
  if (u->form != XD_MP_OK) return; /* read to its end and dropped: the answer waits for it */
  u->form = xd_mp_feed(u->mp, data, len);
}

static void body_end(void *arg) {
  upload *u = arg;
  u->body_done = 1;
  spool_kick(u);
  maybe_finish(u);
}

static const xd_body_callbacks BODY_CB = {body_data, body_end};

static void client_gone(void *arg) {
  upload *u = arg;
  u->res = NULL;
  u->gone = 1;
  if (!u->writing) upload_free(u);
}

void *xd_upload_new(const xd_ctx *ctx) { return xd_fsmod_new(ctx); }

void xd_upload_close(void *module) { xd_fsmod_close(module); }

int xd_upload_route(void *module, const xd_req *req, xd_res *res) {
  xd_fsmod *m = module;
  if (strcmp(req->method, "POST") != 0 || strcmp(req->path, "/files/upload") != 0) return 0;
  upload *u = calloc(1, sizeof *u);
  if (!u || !(u->workspace = strdup(m->workspace))) {
    free(u);
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  u->m = m;
  u->loop = m->loop;
  u->res = res;
  u->spool_fd = -1;
  const char *ct = xd_header(req, "content-type");
  u->form = xd_mp_new(ct ? ct : "", &MP_CB, u, &u->mp);
  xd_res_on_close(res, client_gone, u);
  if (req->body_streamed) {
    xd_body_read(res, &BODY_CB, u);
  } else { /* a body the server read whole (not a streamed route's: kept for completeness) */
    body_data(u, req->body, req->body_len);
    body_end(u);
  }
  return 1;
}
