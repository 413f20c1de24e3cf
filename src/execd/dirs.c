/* dirs.c: POST /directories of the C execd (xd.h), answering byte for byte what the Node execd answers
 * (lib/dev-server/execd/files.js makeDirs, files-upload.js mkdirWithOwnership, files-info.js parseMode/applyOwnership,
 * mkdirp.js, files-paths.js expandAbsPath): a JSON object {path: {mode, owner, group}} -> mkdir -p of every path in
 * order, owner/group given to the directories it created, the mode to the last one when it did not exist.
 *
 * The body is checked against the JSON grammar here, then parsed with cJSON on the loop thread; the file system work
 * runs on libuv's thread pool (a stalled file system never blocks the loop that answers /ping and the commands), and
 * the answer goes out on the loop thread. What this module cannot answer exactly like the Node execd, it does not
 * take (the route returns 0 and the request goes to the Node execd): a body that is not valid UTF-8 or JSON (other than
 * one cut short), \u0000 and surrogate escapes, duplicate or array-index keys (JavaScript orders and merges those),
 * and a mode that is an array or an object (JSON.stringify's text of it). */
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
#include "core/buf.h"
#include "json.h"

extern char **environ;

#define BAD_BODY "error parsing request, MAYBE invalid body format. "

/* ---- strict JSON check: 0 valid, 1 the input ended early, 2 anything else (handed to the Node execd) ---- */
typedef struct {
  const unsigned char *s;
  size_t n, i;
  int depth;
} jcheck;

enum { J_OK = 0, J_EOF = 1, J_OTHER = 2 };
#define J_MAX_DEPTH 512 /* cJSON parses up to 1000 */

static void j_ws(jcheck *j) {
  while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}

static int j_hex(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes available), 0 when it is not one, -1 when cut short. */
static int utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  int len;
  unsigned lo = 0x80, hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else return 0;
  for (int k = 1; k < len; k++) {
    if ((size_t)k >= n) return -1;
    unsigned b = s[k];
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
  }
  return len;
}

static int j_string(jcheck *j) {
  j->i++; /* the opening quote */
  while (j->i < j->n) {
    unsigned c = j->s[j->i];
    if (c == '"') {
      j->i++;
      return J_OK;
    }
    if (c < 0x20) return J_OTHER;
    if (c == '\\') {
      if (j->i + 1 >= j->n) return J_EOF;
      c = j->s[j->i + 1];
      if (c == 'u') {
        unsigned v = 0;
        for (int k = 0; k < 4; k++) {
          if (j->i + 2 + k >= j->n) return J_EOF;
          int h = j_hex(j->s[j->i + 2 + k]);
          if (h < 0) return J_OTHER;
          v = v * 16 + (unsigned)h;
        }
        if (v == 0 || (v >= 0xD800 && v <= 0xDFFF)) return J_OTHER; /* NUL cuts a C string; JS keeps lone surrogates */
        j->i += 6;
        continue;
      }
      if (!strchr("\"\\/bfnrt", (int)c) || c == 0) return J_OTHER;
      j->i += 2;
      continue;
    }
    int len = utf8_len(j->s + j->i, j->n - j->i);
    if (len <= 0) return J_OTHER; /* invalid or cut-short UTF-8: the Node execd decodes it to U+FFFD first */
    j->i += (size_t)len;
  }
  return J_EOF;
}

static int j_digits(jcheck *j) {
  if (j->i >= j->n) return J_EOF;
  if (j->s[j->i] < '0' || j->s[j->i] > '9') return J_OTHER;
  while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') j->i++;
  return J_OK;
}

static int j_number(jcheck *j) {
  int r;
  if (j->s[j->i] == '-') j->i++;
  if (j->i >= j->n) return J_EOF;
  if (j->s[j->i] == '0') j->i++;
  else if ((r = j_digits(j)) != J_OK) return r;
  if (j->i < j->n && j->s[j->i] == '.') {
    j->i++;
    if ((r = j_digits(j)) != J_OK) return r;
  }
  if (j->i < j->n && (j->s[j->i] == 'e' || j->s[j->i] == 'E')) {
    j->i++;
    if (j->i < j->n && (j->s[j->i] == '+' || j->s[j->i] == '-')) j->i++;
    if ((r = j_digits(j)) != J_OK) return r;
  }
  /* the end of the body after a number at the top level is fine; inside a container the caller sees the EOF */
  return J_OK;
}

static int j_value(jcheck *j);

static int j_container(jcheck *j, int object) {
  if (++j->depth > J_MAX_DEPTH) return J_OTHER;
  j->i++;
  j_ws(j);
  if (j->i >= j->n) return J_EOF;
  if (j->s[j->i] == (object ? '}' : ']')) {
    j->i++;
    j->depth--;
    return J_OK;
  }
  for (;;) {
    int r;
    if (object) {
      if (j->i >= j->n) return J_EOF;
      if (j->s[j->i] != '"') return J_OTHER;
      if ((r = j_string(j)) != J_OK) return r;
      j_ws(j);
      if (j->i >= j->n) return J_EOF;
      if (j->s[j->i] != ':') return J_OTHER;
      j->i++;
    }
    if ((r = j_value(j)) != J_OK) return r;
    j_ws(j);
    if (j->i >= j->n) return J_EOF;
    if (j->s[j->i] == ',') {
      j->i++;
      j_ws(j);
      continue;
    }
    if (j->s[j->i] == (object ? '}' : ']')) {
      j->i++;
      j->depth--;
      return J_OK;
    }
    return J_OTHER;
  }
}

static int j_literal(jcheck *j, const char *word) {
  for (size_t k = 0; word[k]; k++) {
    if (j->i + k >= j->n) return J_EOF;
    if (j->s[j->i + k] != (unsigned char)word[k]) return J_OTHER;
  }
  j->i += strlen(word);
  return J_OK;
}

static int j_value(jcheck *j) {
  j_ws(j);
  if (j->i >= j->n) return J_EOF;
  switch (j->s[j->i]) {
  case '{': return j_container(j, 1);
  case '[': return j_container(j, 0);
  case '"': return j_string(j);
  case 't': return j_literal(j, "true");
  case 'f': return j_literal(j, "false");
  case 'n': return j_literal(j, "null");
  default:
    if (j->s[j->i] == '-' || (j->s[j->i] >= '0' && j->s[j->i] <= '9')) return j_number(j);
    return J_OTHER;
  }
}

static int json_check(const char *s, size_t n) {
  jcheck j = {(const unsigned char *)s, n, 0, 0};
  int r = j_value(&j);
  if (r != J_OK) return r;
  j_ws(&j);
  return j.i == n ? J_OK : J_OTHER;
}

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

typedef struct dirs_mod dirs_mod;
typedef struct dirs_job {
  uv_work_t work;
  dirs_mod *mod;   /* NULL once the module was closed */
  xd_res *res;     /* NULL once the client went away or the module was closed */
  dir_entry *e;
  size_t n;
  int status;      /* the answer: 200, or an error with code and message */
  const char *code;
  char *message;
  struct dirs_job *prev, *next;
} dirs_job;

struct dirs_mod {
  uv_loop_t *loop;
  char *workspace;
  dirs_job *jobs; /* in flight */
};

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

static void job_free(dirs_job *job) {
  entries_free(job->e, job->n);
  free(job->message);
  free(job);
}

static int cmp_keys(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The member `name` of a value object; *dup set when it appears more than once (JavaScript takes the last one). */
static const cJSON *member(const cJSON *obj, const char *name, int *dup) {
  const cJSON *found = NULL;
  for (const cJSON *c = obj->child; c; c = c->next) {
    if (strcmp(c->string, name) != 0) continue;
    if (found) *dup = 1;
    found = c;
  }
  return found;
}

/* Duplicate keys (JavaScript keeps the last value at the first one's place). 1 = some, -1 = OOM. */
static int has_duplicate_keys(const cJSON *obj, size_t n) {
  if (n < 2) return 0;
  const char **keys = malloc(n * sizeof *keys);
  if (!keys) return -1;
  size_t k = 0;
  for (const cJSON *c = obj->child; c; c = c->next) keys[k++] = c->string;
  qsort(keys, n, sizeof *keys, cmp_keys);
  int dup = 0;
  for (size_t i = 1; i < n && !dup; i++) dup = strcmp(keys[i - 1], keys[i]) == 0;
  free(keys);
  return dup;
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* parseMode of one entry's "mode": 0 = fine (e->has_mode/e->mode set), 1 = a 400 whose message is in msg,
 * 2 = a value whose JavaScript text this module does not write (an array or object: hand off), -1 = OOM. */
static int parse_mode(const cJSON *mode, const char *where, dir_entry *e, osb_buf *msg) {
  e->has_mode = 0;
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
        e->has_mode = 1;
        e->mode = (unsigned)m;
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

/* expandAbsPath of one key, on the loop thread (execd's environment): the path in e->dir, or the 400 text of its
 * undefined variables in e->error (the worker answers it when it gets to that entry). 0, or -1 on OOM. */
static int expand_entry(dir_entry *e, const char *workspace) {
  return xd_expand_abs_path(e->key, environ, workspace, &e->dir, &e->error) < 0 ? -1 : 0;
}

/* ---- the file system work (thread pool) ---- */

/* name -> id of /etc/passwd or /etc/group (files-info.js idTable): the first line of a name counts; the id field is
 * read like JavaScript's Number() and must be an integer. Returns 1 and *id when found, 0 otherwise. */
static int lookup_id(const char *file, const char *name, long long *id) {
  FILE *f = fopen(file, "re");
  if (!f) return 0;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int found = 0;
  size_t nl = strlen(name);
  while (!found && (len = getline(&line, &cap, f)) >= 0) {
    if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
    if (len == 0 || line[0] == '#') continue;
    char *c1 = memchr(line, ':', (size_t)len);
    if (!c1 || c1 == line) continue;
    char *c2 = memchr(c1 + 1, ':', (size_t)(line + len - c1 - 1));
    if (!c2) continue; /* r[2] undefined: Number(undefined) is NaN */
    char *c3 = memchr(c2 + 1, ':', (size_t)(line + len - c2 - 1));
    size_t flen = c3 ? (size_t)(c3 - c2 - 1) : (size_t)(line + len - c2 - 1);
    long long v;
    if (!xd_js_number_int(c2 + 1, flen, &v)) continue;
    if ((size_t)(c1 - line) == nl && memcmp(line, name, nl) == 0) {
      *id = v;
      found = 1;
    }
  }
  free(line);
  fclose(f);
  return found;
}

/* A failed system call as the Node execd words it (fileError of osMessage): ENOENT is a 404 FILE_NOT_FOUND, anything
 * else a 500 RUNTIME_ERROR, "<syscall> <path>: <libuv's text of the error>". */
static void job_fail(dirs_job *job, int err, const char *syscall, const char *path) {
  const char *text = uv_strerror(uv_translate_sys_error(err));
  size_t tl = strcspn(text, ",");
  osb_buf m = {0};
  job->status = err == ENOENT ? 404 : 500;
  job->code = err == ENOENT ? "FILE_NOT_FOUND" : "RUNTIME_ERROR";
  if (osb_buf_appendf(&m, "%s%s %s: %.*s", err == ENOENT ? "file not found. " : "error accessing file: ", syscall, path,
                      (int)tl, text) < 0) {
    job->status = 500;
    job->code = "RUNTIME_ERROR";
    job->message = NULL;
    return;
  }
  job->message = osb_buf_steal(&m, NULL);
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* mkdirp.js: one component at a time (an existing directory costs one stat); *first = the first directory it created
 * (malloc'd) or NULL. 0, or -1 with job_fail done. */
static int mkdirp(dirs_job *job, const char *dir, char **first) {
  *first = NULL;
  if (is_dir(dir)) return 0;
  size_t n = strlen(dir);
  char *p = malloc(n + 1);
  if (!p) {
    job_fail(job, ENOMEM, "mkdir", dir);
    return -1;
  }
  for (size_t i = 1; i <= n; i++) {
    if (i < n && dir[i] != '/') continue;
    memcpy(p, dir, i);
    p[i] = '\0';
    if (mkdir(p, 0777) == 0) {
      if (!*first && !(*first = dup_str(p))) {
        job_fail(job, ENOMEM, "mkdir", p);
        free(p);
        return -1;
      }
      continue;
    }
    int err = errno;
    if (err != EEXIST) {
      job_fail(job, err, "mkdir", p);
      break;
    }
    struct stat st;
    if (stat(p, &st) != 0) {
      job_fail(job, errno, "stat", p);
      break;
    }
    if (!S_ISDIR(st.st_mode)) {
      job_fail(job, ENOTDIR, "mkdir", p);
      break;
    }
  }
  free(p);
  if (job->status != 200) {
    free(*first);
    *first = NULL;
    return -1;
  }
  return 0;
}

/* mkdirWithOwnership + the mode of makeDirs, for one entry. */
static void make_one(dirs_job *job, const dir_entry *e) {
  if (e->error) {
    job->status = 400;
    job->code = "INVALID_REQUEST_BODY";
    if (!(job->message = dup_str(e->error))) job->status = 500;
    return;
  }
  char *dir = dup_str(e->dir);
  if (!dir) {
    job->status = 500;
    job->code = "RUNTIME_ERROR";
    return;
  }
  struct stat st;
  int existed = stat(dir, &st) == 0;
  char *first;
  if (mkdirp(job, dir, &first) < 0) goto out;
  if (first && (e->owner || e->group)) {
    long long uid = -1, gid = -1;
    int has_uid = e->owner && lookup_id("/etc/passwd", e->owner, &uid);
    int has_gid = e->group && lookup_id("/etc/group", e->group, &gid);
    if (has_uid || has_gid) {
      /* first, then each component below it down to dir */
      size_t fl = strlen(first);
      for (size_t i = fl; job->status == 200; i++) {
        if (dir[i] != '/' && dir[i] != '\0') continue;
        char c = dir[i];
        dir[i] = '\0';
        if (chown(dir, has_uid ? (uid_t)uid : (uid_t)-1, has_gid ? (gid_t)gid : (gid_t)-1) != 0)
          job_fail(job, errno, "chown", dir);
        dir[i] = c;
        if (c == '\0') break;
      }
    }
  }
  free(first);
  if (job->status == 200 && !existed && e->has_mode && chmod(dir, e->mode) != 0) job_fail(job, errno, "chmod", dir);
out:
  free(dir);
}

static void job_work(uv_work_t *w) {
  dirs_job *job = w->data;
  for (size_t i = 0; i < job->n && job->status == 200; i++) make_one(job, &job->e[i]);
}

static void job_unlink(dirs_job *job) {
  if (!job->mod) return;
  if (job->prev) job->prev->next = job->next;
  else job->mod->jobs = job->next;
  if (job->next) job->next->prev = job->prev;
}

static void job_done(uv_work_t *w, int status) {
  dirs_job *job = w->data;
  if (job->res) {
    if (status != 0) xd_send_error(job->res, 500, "RUNTIME_ERROR", "operation canceled");
    else if (job->status == 200) xd_send_empty(job->res);
    else if (job->message) xd_send_error(job->res, job->status, job->code, job->message);
    else xd_send_error(job->res, 500, "RUNTIME_ERROR", "out of memory");
  }
  job_unlink(job);
  job_free(job);
}

static void job_gone(void *arg) {
  ((dirs_job *)arg)->res = NULL;
}

static void ignore_close(void *arg) {
  (void)arg;
}

/* ---- the module ---- */
void *xd_dirs_new(const xd_ctx *ctx) {
  dirs_mod *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->loop = ctx->loop;
  m->workspace = dup_str(ctx->workspace ? ctx->workspace : "/");
  if (!m->workspace) {
    free(m);
    return NULL;
  }
  return m;
}

void xd_dirs_close(void *module) {
  dirs_mod *m = module;
  if (!m) return;
  /* jobs still on the thread pool free themselves when they finish; they answer no one */
  for (dirs_job *j = m->jobs, *next; j; j = next) {
    next = j->next;
    if (j->res) xd_res_on_close(j->res, ignore_close, NULL); /* the job no longer answers */
    j->res = NULL;
    j->mod = NULL;
    uv_cancel((uv_req_t *)&j->work);
  }
  free(m->workspace);
  free(m);
}

static void send_400(xd_res *res, const char *msg) {
  xd_send_error(res, 400, "INVALID_REQUEST_BODY", msg);
}

int xd_dirs_route(void *module, const xd_req *req, xd_res *res) {
  dirs_mod *m = module;
  if (strcmp(req->method, "POST") != 0 || strcmp(req->path, "/directories") != 0) return 0;
  if (req->body_len == 0) {
    send_400(res, BAD_BODY "EOF");
    return 1;
  }
  int check = json_check(req->body, req->body_len);
  if (check == J_OTHER) return 0;
  if (check == J_EOF) {
    send_400(res, BAD_BODY "unexpected EOF");
    return 1;
  }
  cJSON *root = cJSON_ParseWithLength(req->body, req->body_len);
  if (!root) return 0; /* deeper than cJSON goes, or out of memory: the Node execd answers */
  int taken = 1;
  osb_buf msg = {0};
  dirs_job *job = NULL;
  if (!cJSON_IsObject(root)) {
    send_400(res, BAD_BODY "expected a JSON object keyed by path");
    goto out;
  }
  size_t n = 0;
  for (const cJSON *c = root->child; c; c = c->next) {
    if (xd_js_array_index(c->string)) {
      taken = 0;
      goto out;
    }
    n++;
  }
  int dup = has_duplicate_keys(root, n);
  if (dup != 0) {
    taken = dup > 0 ? 0 : 1;
    if (dup < 0) xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    goto out;
  }
  /* readPathMap: every value an object, checked in order before anything else */
  for (const cJSON *c = root->child; c; c = c->next) {
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
  for (const cJSON *c = root->child; c; c = c->next) {
    dir_entry *e = &job->e[job->n++];
    int dup = 0;
    const cJSON *mode = member(c, "mode", &dup), *o = member(c, "owner", &dup), *g = member(c, "group", &dup);
    int r = dup ? 2 : parse_mode(mode, c->string, e, &msg);
    if (r == 2) {
      taken = 0;
      goto out;
    }
    if (r != 0) {
      if (r == 1) send_400(res, msg.data);
      else xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      goto out;
    }
    e->key = dup_str(c->string);
    if (e->key && expand_entry(e, m->workspace) < 0) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      goto out;
    }
    e->owner = cJSON_IsString(o) && o->valuestring[0] ? dup_str(o->valuestring) : NULL;
    e->group = cJSON_IsString(g) && g->valuestring[0] ? dup_str(g->valuestring) : NULL;
    if (!e->key || (cJSON_IsString(o) && o->valuestring[0] && !e->owner) ||
        (cJSON_IsString(g) && g->valuestring[0] && !e->group)) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      goto out;
    }
  }
  job->status = 200;
  job->mod = m;
  job->res = res;
  job->work.data = job;
  if (uv_queue_work(m->loop, &job->work, job_work, job_done) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "cannot queue the directory work");
    goto out;
  }
  job->next = m->jobs;
  if (m->jobs) m->jobs->prev = job;
  m->jobs = job;
  xd_res_on_close(res, job_gone, job);
  job = NULL; /* the thread pool's now */
out:
  if (job) job_free(job);
  osb_buf_free(&msg);
  cJSON_Delete(root);
  return taken;
}
