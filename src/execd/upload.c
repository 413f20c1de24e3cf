/* upload.c: POST /files/upload of the C execd (xd.h), answering byte for byte what the Node execd answers
 * (lib/dev-server/execd/files-upload.js handleUpload): multipart pairs of a `metadata` part (JSON FileMetadata
 * {path, mode?, owner?, group?}) and a `file` part, the i-th metadata with the i-th file. The whole form is in
 * memory (the server reads it whole, up to XD_BODY_LIMIT), the metadata is checked on the loop thread, then each pair is written in order on libuv's thread pool:
 * parents made (mkdir -p, new directories given the owner/group), the file created or truncated 0777 before the
 * umask, written, fsynced with its directory (as the real execd), then mode and owner/group applied. A pair whose
 * metadata is wrong is answered when the pairs before it are written, as in the Node execd.
 * What this module cannot answer exactly like the Node execd it does not take (the route returns 0 and the request
 * gets the server's 404, as no route takes it): a form multipart.h does not read, metadata that is not strict JSON (JSON.parse's texts are
 * V8's), duplicate members, a mode that is an array or object. */
#include "xd.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmdreq.h"
#include "core/buf.h"
#include "fsops.h"
#include "json.h"
#include "multipart.h"

extern char **environ;

typedef struct {
  char *path;      /* metadata.path as given (the mode's error names it) */
  char *target;    /* expanded and resolved against the workspace; NULL when status is set */
  int status;      /* 0, or the 400 this pair is answered with when the worker gets to it */
  const char *code;
  char *message;
  int has_mode;
  unsigned mode;
  char *owner;     /* non-empty owner/group names, or NULL */
  char *group;
  const char *data; /* the file part's bytes, inside the job's body copy */
  size_t len;
} pair;

typedef struct {
  xd_fsjob job;      /* first: the answer (fsops.h) */
  char *body;        /* a copy of the request body: the request is the server's, freed when its client goes */
  pair *p;
  size_t n;
} upload_job;

static void job_free(xd_fsjob *fj) {
  upload_job *job = (upload_job *)fj;
  for (size_t i = 0; i < job->n; i++) {
    pair *p = &job->p[i];
    free(p->path);
    free(p->target);
    free(p->message);
    free(p->owner);
    free(p->group);
  }
  free(job->p);
  free(job->body);
  free(job);
}

/* ---- the metadata of each pair, on the loop thread: 0 read (maybe with a 400 for that pair), 1 hand off, -1 OOM ---- */

static int pair_error(pair *p, const char *code, const char *message) {
  p->status = 400;
  p->code = code;
  return (p->message = strdup(message)) ? 0 : -1;
}

/* expandAbsPath of metadata.path: target, or the 400 of its undefined variables */
static int expand_target(pair *p, const char *workspace) {
  char *err;
  int rc = xd_expand_abs_path(p->path, environ, workspace, &p->target, &err);
  if (rc == 1) {
    rc = pair_error(p, "INVALID_REQUEST_BODY", err);
    free(err);
  }
  return rc;
}

/* parseMetadata (files-upload.js) of one metadata part */
static int read_metadata(pair *p, const char *meta, size_t len, const char *workspace) {
  if (xd_json_check(meta, len) != XD_JSON_OK) return 1; /* JSON.parse's error texts are V8's */
  cJSON *root = cJSON_ParseWithLength(meta, len);
  if (!root) return 1; /* deeper than cJSON goes, or out of memory: not taken */
  int rc = 0, dup = 0;
  osb_buf msg = {0};
  if (!cJSON_IsObject(root)) {
    rc = pair_error(p, "INVALID_FILE_METADATA", "invalid metadata format. expected a JSON object");
    goto out;
  }
  const cJSON *path = xd_json_member(root, "path", &dup), *mode = xd_json_member(root, "mode", &dup),
              *owner = xd_json_member(root, "owner", &dup), *group = xd_json_member(root, "group", &dup);
  if (dup) {
    rc = 1;
    goto out;
  }
  if (!cJSON_IsString(path) || !path->valuestring[0]) {
    rc = pair_error(p, "INVALID_FILE_METADATA", "metadata path is empty");
    goto out;
  }
  if (!(p->path = strdup(path->valuestring))) {
    rc = -1;
    goto out;
  }
  int m = xd_parse_mode(mode, p->path, &p->has_mode, &p->mode, &msg);
  if (m != 0) {
    rc = m == 1 ? pair_error(p, "INVALID_REQUEST_BODY", msg.data) : m == 2 ? 1 : -1;
    goto out;
  }
  if ((cJSON_IsString(owner) && owner->valuestring[0] && !(p->owner = strdup(owner->valuestring))) ||
      (cJSON_IsString(group) && group->valuestring[0] && !(p->group = strdup(group->valuestring)))) {
    rc = -1;
    goto out;
  }
  rc = expand_target(p, workspace);
out:
  osb_buf_free(&msg);
  cJSON_Delete(root);
  return rc;
}

/* ---- the file system work (thread pool) ---- */

static void job_fail(xd_fsjob *job, const char *what, const char *path, const xd_oserr *err) {
  osb_buf m = {0};
  int ok = osb_buf_appendf(&m, "%s %s. ", what, path) >= 0 && xd_oserr_text(&m, err) >= 0;
  xd_fsjob_fail(job, 500, "RUNTIME_ERROR", ok ? m.data : NULL);
  osb_buf_free(&m);
}

/* writeAndSync: the file's data, fsynced, then its directory's entry (best effort, as execd) */
static int write_file(const char *target, const char *dir, const char *data, size_t len, xd_oserr *err) {
  int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0777);
  if (fd < 0) {
    xd_oserr_set(err, errno, "open", target);
    return -1;
  }
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      xd_oserr_set(err, errno, "write", NULL);
      close(fd);
      return -1;
    }
    off += (size_t)w;
  }
  if (fsync(fd) != 0) {
    xd_oserr_set(err, errno, "fsync", NULL);
    close(fd);
    return -1;
  }
  if (close(fd) != 0) {
    xd_oserr_set(err, errno, "close", NULL);
    return -1;
  }
  int d = open(dir, O_RDONLY | O_CLOEXEC);
  if (d >= 0) {
    (void)fsync(d);
    close(d);
  }
  return 0;
}

static void write_pair(xd_fsjob *job, const pair *p) {
  if (p->status) {
    xd_fsjob_fail(job, p->status, p->code, p->message);
    return;
  }
  /* path.dirname of the resolved target */
  const char *slash = strrchr(p->target, '/');
  size_t dl = slash == p->target ? 1 : (size_t)(slash - p->target);
  char *dir = malloc(dl + 1);
  if (!dir) {
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    return;
  }
  memcpy(dir, p->target, dl);
  dir[dl] = '\0';
  char *first = NULL;
  xd_oserr err = {0};
  xd_owner o; /* the names read once, for the directories made and the file */
  xd_owner_resolve(p->owner, p->group, &o);
  if (xd_mkdirp(dir, &first, &err) != 0 || xd_own_created(dir, first, &o, &err) != 0)
    job_fail(job, "error creating target directory", dir, &err);
  else if (write_file(p->target, dir, p->data, p->len, &err) != 0)
    job_fail(job, "error opening destination file", p->target, &err);
  else if (p->has_mode && chmod(p->target, p->mode) != 0) {
    xd_oserr_set(&err, errno, "chmod", p->target);
    job_fail(job, "error chmoding file", p->target, &err);
  } else if (xd_own(p->target, &o, &err) != 0)
    job_fail(job, "error chmoding file", p->target, &err);
  xd_oserr_free(&err);
  free(first);
  free(dir);
}

static void job_run(xd_fsjob *fj) {
  upload_job *job = (upload_job *)fj;
  for (size_t i = 0; i < job->n && fj->status == 200; i++) write_pair(fj, &job->p[i]);
}

/* ---- the module ---- */
void *xd_upload_new(const xd_ctx *ctx) {
  return xd_fsmod_new(ctx);
}

void xd_upload_close(void *module) {
  xd_fsmod_close(module);
}

int xd_upload_route(void *module, const xd_req *req, xd_res *res) {
  xd_fsmod *m = module;
  if (strcmp(req->method, "POST") != 0 || strcmp(req->path, "/files/upload") != 0) return 0;
  const char *ct = xd_header(req, "content-type");
  upload_job *job = calloc(1, sizeof *job);
  if (!job || !(job->body = malloc(req->body_len + 1))) {
    free(job);
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return 1;
  }
  memcpy(job->body, req->body, req->body_len);
  job->body[req->body_len] = '\0';
  xd_mp_part *parts = NULL;
  size_t np = 0, nmeta = 0, nfile = 0;
  int taken = 1;
  int rc = xd_multipart_parse(ct ? ct : "", job->body, req->body_len, &parts, &np);
  if (rc == XD_MP_OTHER) {
    taken = 0;
    goto out;
  }
  if (rc == XD_MP_NOT_MULTIPART) {
    xd_send_error(res, 400, "INVALID_FILE", "multipart form is empty");
    goto out;
  }
  if (rc != XD_MP_OK) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto out;
  }
  for (size_t i = 0; i < np; i++) parts[i].is_metadata ? nmeta++ : nfile++;
  if (nmeta == 0) {
    xd_send_error(res, 400, "INVALID_FILE_METADATA", "metadata file is missing");
    goto out;
  }
  if (nfile == 0) {
    xd_send_error(res, 400, "INVALID_FILE_CONTENT", "file is missing");
    goto out;
  }
  if (nmeta != nfile) {
    char msg[96];
    snprintf(msg, sizeof msg, "metadata and file count mismatch: %zu vs %zu", nmeta, nfile);
    xd_send_error(res, 400, "INVALID_FILE", msg);
    goto out;
  }
  if (!(job->p = calloc(nmeta, sizeof *job->p))) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto out;
  }
  /* the i-th metadata part with the i-th file part */
  size_t mi = 0, fi = 0;
  for (size_t i = 0; i < np; i++) {
    if (!parts[i].is_metadata) {
      job->p[fi].data = parts[i].data;
      job->p[fi++].len = parts[i].len;
      continue;
    }
    pair *p = &job->p[mi++];
    job->n = mi;
    int r = read_metadata(p, parts[i].data, parts[i].len, m->workspace);
    if (r == 1) {
      taken = 0;
      goto out;
    }
    if (r < 0) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      goto out;
    }
  }
  job->job.run = job_run;
  job->job.release = job_free;
  if (xd_fsjob_start(&m->jobs, m->loop, &job->job, res) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "cannot queue the upload");
    goto out;
  }
  job = NULL; /* the thread pool's now */
out:
  free(parts);
  if (job) job_free(&job->job);
  return taken;
}
