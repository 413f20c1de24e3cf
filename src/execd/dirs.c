/* dirs.c: POST /directories of the C execd (xd.h), answering byte for byte what the Node execd answers
 * (lib/dev-server/execd/files.js makeDirs, files-upload.js mkdirWithOwnership, files-info.js parseMode/applyOwnership,
 * mkdirp.js, files-paths.js expandAbsPath): a JSON object {path: {mode, owner, group}} -> mkdir -p of every path in
 * order, owner/group given to the directories it created, the mode to the last one when it did not exist.
 *
 * The body is checked against the JSON grammar here, then parsed with cJSON on the loop thread; the file system work
 * runs on libuv's thread pool (a stalled file system never blocks the loop that answers /ping and the commands), and
 * the answer goes out on the loop thread. Where the Node execd's answer was JavaScript's, the real execd's (Go, a
 * map[string]model.Permission read by encoding/json): a body that is not JSON is the decoder's text (`invalid
 * character 'x' …`), body strings are read as Go reads them (bytes that are not UTF-8 and lone surrogates U+FFFD:
 * xd_go_json_strings), a duplicate key keeps its last value (at the first one's place; Go's map has no order, keys are
 * made in the order given), as does a duplicate member of a value, and a mode that is an array or object is the
 * decoder's type error. Only a body with a \u0000 in a string is not taken (the route returns 0: the server's 404). */
#include "xd.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmdreq.h"
#include "fsedit.h"
#include "fsops.h"
#include "core/buf.h"
#include "json.h"

extern char **environ;

#define BAD_BODY "error parsing request, MAYBE invalid body format. "

/* ---- the request's entries ---- */
typedef struct {
  char *key;     /* the path as given */
  char *dir;     /* expanded and resolved against the workspace, or NULL when error is set */
  char *error;   /* the 400 text of an undefined variable in key */
  int has_mode;  /* parseMode gave a mode */
  unsigned mode; /* permission bits */
  char *owner;   /* a non-empty owner/group name, or NULL (only such names can resolve) */
  char *group;
} dir_entry;

typedef struct {
  xd_fsjob job; /* first: the answer (fsops.h) */
  dir_entry *e;
  size_t n;
} dirs_job;

static void entries_free(dir_entry *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(e[i].key);
    free(e[i].dir);
    free(e[i].error);
    free(e[i].owner);
    free(e[i].group);
  }
  free(e);
}

static void job_free(xd_fsjob *fj) {
  dirs_job *job = (dirs_job *)fj;
  entries_free(job->e, job->n);
  free(job);
}

typedef struct {
  const cJSON *node;
  size_t at; /* its place in the object */
} member;

static int cmp_members(const void *a, const void *b) {
  const member *x = a, *y = b;
  int c = strcmp(x->node->string, y->node->string);
  return c ? c : (x->at < y->at ? -1 : x->at > y->at);
}

static int cmp_at(const void *a, const void *b) {
  const member *x = a, *y = b;
  return x->at < y->at ? -1 : x->at > y->at;
}

/* The object's members as Go's map reads them: one per key, the last value at the first one's place (sorted, so
 * O(n log n) whatever the count). *out (malloc'd) and *n; -1 on OOM. */
static int unique_members(const cJSON *obj, member **out, size_t *n) {
  size_t count = 0;
  for (const cJSON *c = obj->child; c; c = c->next) count++;
  member *m = malloc((count ? count : 1) * sizeof *m);
  if (!m) return -1;
  size_t k = 0;
  for (const cJSON *c = obj->child; c; c = c->next, k++) m[k] = (member){c, k};
  qsort(m, count, sizeof *m, cmp_members);
  size_t w = 0;
  for (size_t i = 0; i < count;) {
    size_t j = i;
    while (j + 1 < count && strcmp(m[j + 1].node->string, m[i].node->string) == 0) j++;
    m[w++] = (member){m[j].node, m[i].at}; /* the last value, the first place */
    i = j + 1;
  }
  qsort(m, w, sizeof *m, cmp_at);
  *out = m;
  *n = w;
  return 0;
}

/* expandAbsPath of one key, on the loop thread (execd's environment): the path in e->dir, or the 400 text of its
 * undefined variables in e->error (the worker answers it when it gets to that entry). 0, or -1 on OOM. */
static int expand_entry(dir_entry *e, const char *workspace) {
  return xd_expand_abs_path(e->key, environ, workspace, &e->dir, &e->error) < 0 ? -1 : 0;
}

/* ---- the file system work (thread pool) ---- */

/* A failed system call as the Node execd words it (fileError of osMessage): ENOENT is a 404 FILE_NOT_FOUND, anything
 * else a 500 RUNTIME_ERROR. */
static void job_fail(xd_fsjob *job, const xd_oserr *err) {
  osb_buf m = {0};
  int missing = err->err == ENOENT;
  if (osb_buf_append_str(&m, missing ? "file not found. " : "error accessing file: ") < 0 || xd_oserr_text(&m, err) < 0)
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
  else
    xd_fsjob_fail(job, missing ? 404 : 500, missing ? "FILE_NOT_FOUND" : "RUNTIME_ERROR", m.data);
  osb_buf_free(&m);
}

/* mkdirWithOwnership + the mode of makeDirs, for one entry. */
static void make_one(xd_fsjob *job, const dir_entry *e) {
  if (e->error) {
    xd_fsjob_fail(job, 400, "INVALID_REQUEST_BODY", e->error);
    return;
  }
  struct stat st;
  int existed = stat(e->dir, &st) == 0;
  char *first = NULL;
  xd_oserr err = {0};
  int rc = xd_mkdirp(e->dir, &first, &err);
  if (rc == 0 && first && (e->owner || e->group)) { /* the names are read only when a directory was made */
    xd_owner o;
    xd_owner_resolve(e->owner, e->group, &o);
    rc = xd_own_created(e->dir, first, &o, &err);
  }
  if (rc == 0 && !existed && e->has_mode && chmod(e->dir, e->mode) != 0) xd_oserr_set(&err, errno, "chmod", e->dir);
  if (err.err) job_fail(job, &err);
  free(first);
  xd_oserr_free(&err);
}

static void job_run(xd_fsjob *fj) {
  dirs_job *job = (dirs_job *)fj;
  for (size_t i = 0; i < job->n && fj->status == 200; i++) make_one(fj, &job->e[i]);
}

/* ---- the module ---- */
void *xd_dirs_new(const xd_ctx *ctx) {
  return xd_fsmod_new(ctx);
}

void xd_dirs_close(void *module) {
  xd_fsmod_close(module);
}

static void send_400(xd_res *res, const char *msg) {
  xd_send_error(res, 400, "INVALID_REQUEST_BODY", msg);
}

int xd_dirs_route(void *module, const xd_req *req, xd_res *res) {
  xd_fsmod *m = module;
  if (strcmp(req->method, "POST") != 0 || strcmp(req->path, "/directories") != 0) return 0;
  if (req->body_len == 0) {
    send_400(res, BAD_BODY "EOF");
    return 1;
  }
  int check = xd_json_check(req->body, req->body_len);
  if (check == XD_JSON_EOF) {
    send_400(res, BAD_BODY "unexpected EOF");
    return 1;
  }
  osb_buf go = {0}, msg = {0};
  const char *body = req->body;
  size_t body_len = req->body_len;
  if (check == XD_JSON_OTHER) {
    /* strings with bytes that are not UTF-8 or surrogate escapes, read as Go's decoder reads them */
    int nul = 0;
    int g = xd_go_json_strings(req->body, req->body_len, &go, &nul);
    if (g < 0) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      return 1;
    }
    if (g == 0 && !nul && xd_json_check(go.data, go.len) == XD_JSON_OK) {
      body = go.data;
      body_len = go.len;
    } else {
      /* not JSON: the decoder's text (of the body as sent); a \u0000 in a string: refused (a path with a NUL byte is
       * one no system call takes; the real execd's mkdir fails on it with EINVAL) */
      cJSON *b = NULL;
      int bad = xd_json_parse(req->body, req->body_len, &b, &msg) != 0;
      cJSON_Delete(b);
      osb_buf text = {0};
      int answered = bad && g == 0 && !nul;
      if (!bad && g == 0 && nul) {
        send_400(res, BAD_BODY "NUL characters in strings are not supported");
        answered = 1;
      } else if (answered) {
        if (osb_buf_append_str(&text, BAD_BODY) < 0 || osb_buf_append(&text, msg.data ? msg.data : "", msg.len) < 0)
          xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
        else
          send_400(res, text.data);
      }
      osb_buf_free(&text);
      osb_buf_free(&msg);
      osb_buf_free(&go);
      return answered;
    }
  }
  cJSON *root = cJSON_ParseWithLength(body, body_len);
  osb_buf_free(&go);
  if (!root) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory"); /* the grammar was checked (512 levels at most) */
    return 1;
  }
  int taken = 1;
  member *mem = NULL;
  dirs_job *job = NULL;
  if (!cJSON_IsObject(root)) {
    send_400(res, BAD_BODY "expected a JSON object keyed by path");
    goto out;
  }
  size_t n = 0;
  if (unique_members(root, &mem, &n) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto out;
  }
  /* readPathMap: every value an object, checked in order before anything else */
  for (size_t i = 0; i < n; i++) {
    const cJSON *c = mem[i].node;
    if (cJSON_IsObject(c)) continue;
    if (osb_buf_append_str(&msg, BAD_BODY "the value for ") < 0 || xd_js_json_str(&msg, c->string, strlen(c->string)) < 0 ||
        osb_buf_append_str(&msg, " must be an object") < 0) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    } else {
      send_400(res, msg.data);
    }
    goto out;
  }
  job = calloc(1, sizeof *job);
  if (!job || !(job->e = calloc(n ? n : 1, sizeof *job->e))) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto out;
  }
  /* parseMode of every entry before any directory is made */
  for (size_t i = 0; i < n; i++) {
    const cJSON *c = mem[i].node;
    dir_entry *e = &job->e[job->n++];
    int dup = 0; /* a duplicate member: its last value, as Go's decoder keeps */
    const cJSON *mode = xd_json_member(c, "mode", &dup), *o = xd_json_member(c, "owner", &dup), *g = xd_json_member(c, "group", &dup);
    int r = xd_parse_mode(mode, c->string, &e->has_mode, &e->mode, &msg);
    if (r == 2) { /* an array or object: Go's decoder refuses it (the Node execd wrote JavaScript's text of it) */
      send_400(res, cJSON_IsArray(mode) ? BAD_BODY "json: cannot unmarshal array into Go struct field Permission.mode of type int"
                                        : BAD_BODY "json: cannot unmarshal object into Go struct field Permission.mode of type int");
      goto out;
    }
    if (r != 0) {
      if (r == 1) send_400(res, msg.data);
      else xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      goto out;
    }
    e->key = strdup(c->string);
    if (e->key && expand_entry(e, m->workspace) < 0) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      goto out;
    }
    e->owner = cJSON_IsString(o) && o->valuestring[0] ? strdup(o->valuestring) : NULL;
    e->group = cJSON_IsString(g) && g->valuestring[0] ? strdup(g->valuestring) : NULL;
    if (!e->key || (cJSON_IsString(o) && o->valuestring[0] && !e->owner) ||
        (cJSON_IsString(g) && g->valuestring[0] && !e->group)) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      goto out;
    }
  }
  job->job.run = job_run;
  job->job.release = job_free;
  if (xd_fsjob_start(&m->jobs, m->loop, &job->job, res) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "cannot queue the directory work");
    goto out;
  }
  job = NULL; /* the thread pool's now */
out:
  if (job) job_free(&job->job);
  free(mem);
  osb_buf_free(&msg);
  cJSON_Delete(root);
  return taken;
}
