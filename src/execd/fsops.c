/* The files modules' shared file system work and parseMode (fsops.h). */
#include "fsops.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "idfile.h"
#include "json.h"

void xd_oserr_set(xd_oserr *e, int err, const char *syscall, const char *path) {
  free(e->path);
  e->err = err;
  e->syscall = syscall;
  e->path = path ? strdup(path) : NULL;
}

void xd_oserr_free(xd_oserr *e) {
  free(e->path);
  e->path = NULL;
}

int xd_oserr_node_text(osb_buf *out, const xd_oserr *e) {
  int u = uv_translate_sys_error(e->err);
  if (e->path) return osb_buf_appendf(out, "%s: %s, %s '%s'", uv_err_name(u), uv_strerror(u), e->syscall, e->path) < 0 ? -1 : 0;
  return osb_buf_appendf(out, "%s: %s, %s", uv_err_name(u), uv_strerror(u), e->syscall) < 0 ? -1 : 0;
}

int xd_oserr_text(osb_buf *out, const xd_oserr *e) {
  const char *text = uv_strerror(uv_translate_sys_error(e->err));
  int tl = (int)strcspn(text, ",");
  if (e->path) return osb_buf_appendf(out, "%s %s: %.*s", e->syscall, e->path, tl, text) < 0 ? -1 : 0;
  return osb_buf_appendf(out, "%s: %.*s", e->syscall, tl, text) < 0 ? -1 : 0;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int xd_mkdirp(const char *dir, char **first, xd_oserr *e) {
  return xd_mkdirp_mode(dir, 0777, first, e);
}

int xd_mkdirp_mode(const char *dir, mode_t mode, char **first, xd_oserr *e) {
  *first = NULL;
  e->err = 0;
  if (is_dir(dir)) return 0;
  size_t n = strlen(dir);
  char *p = malloc(n + 1);
  if (!p) {
    xd_oserr_set(e, ENOMEM, "mkdir", dir);
    return -1;
  }
  for (size_t i = 1; i <= n; i++) {
    if (i < n && dir[i] != '/') continue;
    memcpy(p, dir, i);
    p[i] = '\0';
    if (mkdir(p, mode) == 0) {
      if (!*first && !(*first = strdup(p))) {
        xd_oserr_set(e, ENOMEM, "mkdir", p);
        free(p);
        return -1;
      }
      continue;
    }
    int err = errno;
    if (err != EEXIST) {
      xd_oserr_set(e, err, "mkdir", p);
      break;
    }
    struct stat st;
    if (stat(p, &st) != 0) {
      xd_oserr_set(e, errno, "stat", p);
      break;
    }
    if (!S_ISDIR(st.st_mode)) {
      xd_oserr_set(e, ENOTDIR, "mkdir", p);
      break;
    }
  }
  free(p);
  if (e->err) {
    free(*first);
    *first = NULL;
    return -1;
  }
  return 0;
}

void xd_owner_resolve(const char *owner, const char *group, xd_owner *o) {
  long long id;
  o->has_uid = owner && xd_idfile_id_of(XD_IDFILE_PASSWD, owner, &id);
  o->uid = o->has_uid ? (uid_t)id : (uid_t)-1;
  o->has_gid = group && xd_idfile_id_of(XD_IDFILE_GROUP, group, &id);
  o->gid = o->has_gid ? (gid_t)id : (gid_t)-1;
}

int xd_own(const char *path, const xd_owner *o, xd_oserr *e) {
  if (!o->has_uid && !o->has_gid) return 0;
  if (chown(path, o->uid, o->gid) == 0) return 0;
  xd_oserr_set(e, errno, "chown", path);
  return -1;
}

int xd_own_created(const char *dir, const char *first, const xd_owner *o, xd_oserr *e) {
  if (!first || (!o->has_uid && !o->has_gid)) return 0;
  char *p = strdup(dir);
  if (!p) {
    xd_oserr_set(e, ENOMEM, "chown", first);
    return -1;
  }
  /* first, then each component below it down to dir */
  int rc = 0;
  for (size_t i = strlen(first); rc == 0; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char c = p[i];
    p[i] = '\0';
    rc = xd_own(p, o, e);
    p[i] = c;
    if (c == '\0') break;
  }
  free(p);
  return rc;
}

int xd_parse_mode(const cJSON *mode, const char *where, int *has_mode, unsigned *mode_bits, osb_buf *msg) {
  *has_mode = 0;
  if (!mode || cJSON_IsNull(mode)) return 0;
  if (cJSON_IsNumber(mode) && mode->valuedouble == 0) return 0;
  osb_buf text = {0};
  int rc;
  if (cJSON_IsNumber(mode)) {
    double v = mode->valuedouble;
    /* Number.isInteger, then String(mode) must be octal digits worth at most 07777; JSON.stringify(Infinity) is null */
    rc = isfinite(v) ? xd_js_number(&text, v) : osb_buf_append_str(&text, "null");
    if (rc == 0 && xd_is_integer(v) && v > 0) {
      unsigned long long m = 0;
      int octal = 1;
      for (const char *p = text.data; *p && octal; p++) {
        if (*p < '0' || *p > '7') octal = 0;
        else m = m * 8 + (unsigned)(*p - '0');
        if (m > 07777) octal = 0;
      }
      if (octal) {
        osb_buf_free(&text);
        *has_mode = 1;
        *mode_bits = (unsigned)m;
        return 0;
      }
    }
  } else if (cJSON_IsString(mode)) {
    rc = xd_js_json_str(&text, mode->valuestring, strlen(mode->valuestring));
  } else if (cJSON_IsBool(mode)) {
    rc = osb_buf_append_str(&text, cJSON_IsTrue(mode) ? "true" : "false");
  } else {
    return 2;
  }
  if (rc == 0)
    rc = osb_buf_appendf(msg, "invalid mode %s for %s: give the octal digits as a decimal integer, e.g. 644", text.data, where);
  osb_buf_free(&text);
  return rc < 0 ? -1 : 1;
}

/* ---- files jobs ---- */

static void fsjob_work(uv_work_t *w) {
  xd_fsjob *job = w->data;
  job->run(job);
}

static void fsjob_done(uv_work_t *w, int status) {
  xd_fsjob *job = w->data;
  if (job->answer) {
    job->answer(job, status);
  } else if (job->res) {
    if (status != 0) xd_send_error(job->res, 500, "RUNTIME_ERROR", "operation canceled");
    else if (job->status == 200) xd_send_empty(job->res);
    else if (job->message) xd_send_error(job->res, job->status, job->code, job->message);
    else xd_send_error(job->res, 500, "RUNTIME_ERROR", "out of memory");
  }
  if (job->jobs) {
    if (job->prev) job->prev->next = job->next;
    else job->jobs->head = job->next;
    if (job->next) job->next->prev = job->prev;
  }
  free(job->message);
  job->message = NULL;
  job->release(job);
}

static void fsjob_gone(void *arg) {
  ((xd_fsjob *)arg)->res = NULL;
}

static void ignore_close(void *arg) {
  (void)arg;
}

int xd_fsjob_start(xd_fsjobs *jobs, uv_loop_t *loop, xd_fsjob *job, xd_res *res) {
  job->status = 200;
  job->jobs = jobs;
  job->res = res;
  job->work.data = job;
  if (uv_queue_work(loop, &job->work, fsjob_work, fsjob_done) != 0) return -1;
  job->prev = NULL;
  job->next = jobs->head;
  if (jobs->head) jobs->head->prev = job;
  jobs->head = job;
  xd_res_on_close(res, fsjob_gone, job);
  return 0;
}

void xd_fsjobs_close(xd_fsjobs *jobs) {
  for (xd_fsjob *j = jobs->head, *next; j; j = next) {
    next = j->next;
    if (j->res) xd_res_on_close(j->res, ignore_close, NULL); /* the job no longer answers */
    j->res = NULL;
    j->jobs = NULL;
    uv_cancel((uv_req_t *)&j->work);
  }
  jobs->head = NULL;
}

void xd_fsjob_fail(xd_fsjob *job, int status, const char *code, const char *message) {
  job->status = status;
  job->code = code;
  free(job->message);
  job->message = message ? strdup(message) : NULL;
}

xd_fsmod *xd_fsmod_new(const xd_ctx *ctx) {
  xd_fsmod *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->loop = ctx->loop;
  if (!(m->workspace = strdup(ctx->workspace ? ctx->workspace : "/"))) {
    free(m);
    return NULL;
  }
  return m;
}

void xd_fsmod_close(xd_fsmod *m) {
  if (!m) return;
  xd_fsjobs_close(&m->jobs);
  free(m->workspace);
  free(m);
}
