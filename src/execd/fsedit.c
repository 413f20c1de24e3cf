/* fsedit.c: DELETE /files, POST /files/permissions, POST /files/mv, POST /files/replace, DELETE /directories of the C
 * execd (fsedit.h). Texts are the Node execd's (files.js, files-info.js fileError/osMessage/parseMode, mkdirp.js,
 * files-paths.js); where those are JavaScript artefacts, the real execd's (controller/filesystem.go, utils.go):
 * a body that does not parse gets the Go decoder's text (cmdreq.c xd_json_parse), duplicate keys keep the last value
 * (Go's map) at the first one's place, the verbose replace answer has its keys sorted (Go's encoding/json), a rename
 * error is Go's LinkError ("rename A B: ..."), a failed unlink is "remove P: ...", a failed chown "failed to set
 * owner/group for P: chown P: ...", a query path that is not UTF-8 is used as its bytes, one with a NUL byte is
 * refused as Go's system calls refuse it (EINVAL), a mode that is an array or object gets Go's decoder error, and body
 * strings are Go's (bytes that are not UTF-8 and lone surrogates U+FFFD, \u0000 a NUL byte: xd_go_json_strings). What
 * this module cannot answer alike it does not take (the route returns 0: the server's 404): a body with both \u0000 and
 * U+10FFFE (the NUL's stand-in), or one that JavaScript and cJSON read differently otherwise. */
#include "fsedit.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmdreq.h"
#include "core/buf.h"
#include "json.h"
#include "utf8.h"

extern char **environ;

#define BAD_BODY "error parsing request, MAYBE invalid body format. "
/* Largest file POST /files/replace reads, and largest content it writes (both are held in memory). */
#define REPLACE_MAX (64u * 1024u * 1024u)

/* ================================================================ rm -rf (Go's os.RemoveAll) */

/* A directory's entry names, read at once, NUL-separated in one buffer (no allocation per name). */
typedef struct {
  char *buf;
  size_t len;  /* bytes used */
  size_t pos;  /* the next name's offset */
  size_t last; /* the offset of the name next_name returned last */
} name_list;

typedef struct {
  char *name;      /* the directory's name in its parent (level 0: the parent given, NULL) */
  int fd;          /* -1 while closed (the window of open levels) */
  dev_t dev;
  ino_t ino;
  name_list names; /* its entries */
  xd_oserr err;    /* the first failure below it */
} rm_level;

typedef struct {
  const char *parent; /* the path of level 0 */
  rm_level *lv;
  size_t depth, cap;
  size_t closed_upto; /* levels 1..closed_upto have their descriptors closed */
  size_t nopen;       /* descriptors open above level 0 */
} rm_walk;

static void names_free(name_list *l) {
  free(l->buf);
  memset(l, 0, sizeof *l);
}

static const char *next_name(name_list *l) {
  if (l->pos >= l->len) return NULL;
  l->last = l->pos;
  const char *n = l->buf + l->pos;
  l->pos += strlen(n) + 1;
  return n;
}

/* The entries of a directory (not . and ..): 0, or an errno. */
static int read_names(int fd, name_list *out) {
  memset(out, 0, sizeof *out);
  int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dfd < 0) return errno;
  DIR *d = fdopendir(dfd);
  if (!d) {
    int e = errno;
    close(dfd);
    return e;
  }
  rewinddir(d);
  osb_buf b = {0};
  int err = 0;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      err = errno;
      break;
    }
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    if (osb_buf_append(&b, de->d_name, strlen(de->d_name) + 1) < 0) {
      err = ENOMEM;
      break;
    }
  }
  closedir(d);
  if (err) {
    osb_buf_free(&b);
    return err;
  }
  out->len = b.len;
  out->buf = b.data; /* NULL when empty */
  return 0;
}

/* parent + "/" + the names of levels 1..k-1 + "/" + name (Go prefixes each level's name to the error's path) */
static char *walk_path(const rm_walk *w, size_t k, const char *name) {
  osb_buf b = {0};
  int rc = osb_buf_append_str(&b, w->parent);
  for (size_t i = 1; i < k && rc == 0; i++) rc = osb_buf_appendf(&b, "/%s", w->lv[i].name);
  if (rc == 0 && name) rc = osb_buf_appendf(&b, "/%s", name);
  if (rc < 0) {
    osb_buf_free(&b);
    return NULL;
  }
  return osb_buf_steal(&b, NULL);
}

/* Records a failure at level k (the first one counts). */
static void walk_fail(rm_walk *w, size_t k, const char *op, const char *name, int err) {
  rm_level *l = &w->lv[k];
  if (l->err.err) return;
  char *p = walk_path(w, k + 1, name);
  xd_oserr_set(&l->err, err, op, p ? p : name);
  free(p);
}

static void level_drop(rm_walk *w, size_t k) {
  rm_level *l = &w->lv[k];
  if (l->fd >= 0 && k > 0) {
    close(l->fd);
    w->nopen--;
  }
  names_free(&l->names);
  free(l->name);
  xd_oserr_free(&l->err);
  memset(l, 0, sizeof *l);
  l->fd = -1;
}

/* Closes the shallowest open level while more than the window is open. */
static void walk_window(rm_walk *w) {
  while (w->nopen > XD_RM_OPEN_LEVELS && w->closed_upto + 1 < w->depth) {
    rm_level *l = &w->lv[++w->closed_upto];
    if (l->fd >= 0) {
      close(l->fd);
      l->fd = -1;
      w->nopen--;
    }
  }
}

/* Opens level k again when its child's ".." is another directory now (its ancestors 1..k-1 are closed too: it is the
 * deepest level left), by name from level 0
 * down, each the same directory as before; the last XD_RM_OPEN_LEVELS stay open. 0, or the level that is no longer
 * there (*err: ENOENT when another directory took its place) */
static size_t walk_reopen(rm_walk *w, size_t k, int *err) {
  for (size_t i = 1; i <= k; i++) {
    rm_level *l = &w->lv[i];
    if (l->fd >= 0) continue;
    int fd = openat(w->lv[i - 1].fd, l->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_dev != l->dev || st.st_ino != l->ino) {
      *err = fd < 0 ? errno : ENOENT;
      if (fd >= 0) close(fd);
      return i;
    }
    l->fd = fd;
    w->nopen++;
    if (i > 1 && i - 1 + XD_RM_OPEN_LEVELS <= k && w->lv[i - 1].fd >= 0) {
      close(w->lv[i - 1].fd);
      w->lv[i - 1].fd = -1;
      w->nopen--;
    }
  }
  w->closed_upto = k > XD_RM_OPEN_LEVELS ? k - XD_RM_OPEN_LEVELS : 0;
  return 0;
}

/* Go's removeAllFrom(parent, base), without recursion. */
static int remove_from(const char *parent, int parent_fd, const char *base, xd_oserr *out) {
  rm_walk w = {.parent = parent};
  w.cap = 16;
  w.lv = calloc(w.cap, sizeof *w.lv);
  char *b0 = strdup(base);
  if (!w.lv || !b0) {
    free(w.lv);
    free(b0);
    xd_oserr_set(out, ENOMEM, "unlinkat", base);
    return -1;
  }
  w.lv[0] = (rm_level){.fd = parent_fd, .names = {.buf = b0, .len = strlen(b0) + 1}};
  w.depth = 1;
  while (w.depth > 0) {
    size_t k = w.depth - 1;
    rm_level *l = &w.lv[k];
    const char *name = next_name(&l->names);
    if (name) {
      if (unlinkat(l->fd, name, 0) == 0 || errno == ENOENT) continue;
      int ue = errno;
      if (ue != EISDIR && ue != EPERM && ue != EACCES) {
        walk_fail(&w, k, "unlinkat", name, ue);
        continue;
      }
      int cfd = openat(l->fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cfd < 0) {
        int e = errno;
        if (e == ENOENT) continue;
        if (e == ENOTDIR || e == ELOOP) walk_fail(&w, k, "unlinkat", name, ue);
        else if (unlinkat(l->fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) walk_fail(&w, k, "openfdat", name, e);
        continue;
      }
      if (w.depth >= XD_RM_MAX_DEPTH) { /* e.g. a bind mount of an ancestor: no end below */
        close(cfd);
        walk_fail(&w, k, "openfdat", name, ENAMETOOLONG);
        continue;
      }
      struct stat st;
      name_list cn = {0};
      int e = fstat(cfd, &st) != 0 ? errno : read_names(cfd, &cn);
      if (e == 0 && w.depth == w.cap) {
        rm_level *g = realloc(w.lv, w.cap * 2 * sizeof *g);
        if (g) {
          w.lv = g;
          w.cap *= 2;
          l = &w.lv[k];
        } else {
          e = ENOMEM;
        }
      }
      char *cname = e == 0 ? strdup(name) : NULL;
      if (e == 0 && !cname) e = ENOMEM;
      if (e != 0) {
        close(cfd);
        names_free(&cn);
        walk_fail(&w, k, "readdirnames", name, e);
        continue;
      }
      w.lv[w.depth++] = (rm_level){.name = cname, .fd = cfd, .dev = st.st_dev, .ino = st.st_ino, .names = cn};
      w.nopen++;
      walk_window(&w);
      continue;
    }
    if (k == 0) break;
    /* level k is empty now: remove it from its parent */
    rm_level child = *l;
    w.depth--;
    rm_level *p = &w.lv[k - 1];
    if (p->fd < 0 && child.fd >= 0) { /* closed by the window: its ".." if that is still the same directory */
      int pfd = openat(child.fd, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      struct stat st;
      if (pfd >= 0 && fstat(pfd, &st) == 0 && st.st_dev == p->dev && st.st_ino == p->ino) {
        p->fd = pfd;
        w.nopen++;
        w.closed_upto = k - 2; /* levels 1..k-2 stay closed */
      } else if (pfd >= 0) {
        close(pfd);
      }
    }
    if (child.fd >= 0) {
      close(child.fd);
      w.nopen--;
    }
    int gone_err = 0;
    size_t gone = p->fd < 0 ? walk_reopen(&w, k - 1, &gone_err) : 0;
    if (gone) { /* a directory on the way moved or went away: what is below it is no longer ours to remove */
      while (w.depth > gone) level_drop(&w, --w.depth);
      w.closed_upto = 0;
      while (w.closed_upto + 1 < w.depth && w.lv[w.closed_upto + 1].fd < 0) w.closed_upto++;
      if (gone_err != ENOENT) walk_fail(&w, gone - 1, "openfdat", w.lv[gone - 1].names.buf + w.lv[gone - 1].names.last, gone_err);
    } else if (unlinkat(p->fd, child.name, AT_REMOVEDIR) != 0 && errno != ENOENT) {
      if (child.err.err && !p->err.err) {
        p->err = child.err;
        child.err.path = NULL;
      } else {
        walk_fail(&w, k - 1, "unlinkat", child.name, errno);
      }
    }
    names_free(&child.names);
    free(child.name);
    xd_oserr_free(&child.err);
    if (w.closed_upto >= w.depth) w.closed_upto = w.depth ? w.depth - 1 : 0;
  }
  rm_level *root = &w.lv[0];
  int rc = root->err.err ? -1 : 0;
  if (rc) {
    *out = root->err;
    root->err.path = NULL;
  }
  for (size_t i = 1; i < w.depth; i++) level_drop(&w, i);
  names_free(&root->names);
  xd_oserr_free(&root->err);
  free(w.lv);
  return rc;
}

int xd_remove_all(const char *path, xd_oserr *e) {
  e->err = 0;
  if (!*path) return 0;
  /* Go: Remove (unlink, then rmdir) first */
  if (unlink(path) == 0) return 0;
  int err = errno;
  if (rmdir(path) == 0) return 0;
  if (errno != ENOTDIR) err = errno;
  if (err == ENOENT) return 0;
  /* splitPath: the parent and the base name */
  size_t n = strlen(path);
  char *p = strdup(path);
  if (!p) {
    xd_oserr_set(e, ENOMEM, "open", path);
    return -1;
  }
  char *s = p;
  while (n > 1 && s[0] == '/' && s[1] == '/') s++, n--;
  while (n > 1 && s[n - 1] == '/') s[--n] = '\0';
  const char *dir = ".", *base = s;
  for (size_t i = n; i-- > 0;) {
    if (s[i] != '/') continue;
    base = s + i + 1;
    if (i == 0) {
      dir = "/";
    } else {
      s[i] = '\0';
      dir = s;
    }
    break;
  }
  int rc = 0;
  int pfd = open(dir, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC); /* Go's Open, but a FIFO never blocks */
  if (pfd < 0) {
    if (errno != ENOENT) {
      xd_oserr_set(e, errno, "open", dir);
      rc = -1;
    }
  } else {
    rc = remove_from(dir, pfd, base, e);
    close(pfd);
  }
  free(p);
  return rc;
}

/* ================================================================ copy for a move across file systems */

typedef struct {
  char *src, *dst;
  name_list names;
  mode_t mode;
} cp_level;

static char *join(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *p = malloc(la + lb + 2);
  if (!p) return NULL;
  memcpy(p, a, la);
  p[la] = '/';
  memcpy(p + la + 1, b, lb + 1);
  return p;
}

/* A regular file with its content, mode and times (fs.cp with preserveTimestamps). 0 or -1. */
static int copy_file(const char *src, const char *dst, const struct stat *st) {
  int in = open(src, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC); /* a FIFO put there meanwhile never blocks */
  struct stat now;
  if (in >= 0 && (fstat(in, &now) != 0 || !S_ISREG(now.st_mode))) {
    close(in);
    return -1;
  }
  if (in < 0) return -1;
  int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (out < 0) {
    close(in);
    return -1;
  }
  char buf[65536];
  int rc = 0;
  for (;;) {
    ssize_t r = read(in, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      rc = r < 0 ? -1 : 0;
      break;
    }
    for (ssize_t off = 0; off < r && rc == 0;) {
      ssize_t wr = write(out, buf + off, (size_t)(r - off));
      if (wr < 0 && errno == EINTR) continue;
      if (wr <= 0) rc = -1;
      else off += wr;
    }
    if (rc) break;
  }
  struct timespec ts[2] = {st->st_atim, st->st_mtim};
  if (rc == 0 && (futimens(out, ts) != 0 || fchmod(out, st->st_mode & 07777) != 0)) rc = -1;
  if (close(out) != 0) rc = -1;
  close(in);
  return rc;
}

/* One entry: a symlink as it is, a regular file, or a directory made and pushed (its entries follow). 0 or -1. */
static int copy_entry(const char *src, const char *dst, cp_level **lv, size_t *depth, size_t *cap) {
  struct stat st;
  if (lstat(src, &st) != 0) return -1;
  if (S_ISLNK(st.st_mode)) {
    if (st.st_size < 0 || st.st_size >= PATH_MAX) return -1;
    char target[PATH_MAX];
    ssize_t r = readlink(src, target, sizeof target - 1);
    if (r < 0) return -1;
    target[r] = '\0';
    return symlink(target, dst);
  }
  if (S_ISREG(st.st_mode)) return copy_file(src, dst, &st);
  if (!S_ISDIR(st.st_mode)) return -1; /* a FIFO, socket or device: not copied (Go answers EXDEV for everything) */
  if (mkdir(dst, 0700) != 0) return -1;
  int fd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  name_list names;
  int e = read_names(fd, &names);
  close(fd);
  if (e) return -1;
  if (*depth == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    cp_level *g = realloc(*lv, nc * sizeof *g);
    if (!g) {
      names_free(&names);
      return -1;
    }
    *lv = g;
    *cap = nc;
  }
  char *s = strdup(src), *d = strdup(dst);
  if (!s || !d) {
    free(s);
    free(d);
    names_free(&names);
    return -1;
  }
  (*lv)[(*depth)++] = (cp_level){.src = s, .dst = d, .names = names, .mode = st.st_mode & 07777};
  return 0;
}

/* fs.cp(src, dst, {recursive, preserveTimestamps, verbatimSymlinks}) without recursion. 0 or -1 (dst may be left
 * partly made: the caller removes it). */
static int copy_tree(const char *src, const char *dst) {
  cp_level *lv = NULL;
  size_t depth = 0, cap = 0;
  int rc = copy_entry(src, dst, &lv, &depth, &cap);
  while (rc == 0 && depth > 0) {
    cp_level *l = &lv[depth - 1];
    const char *name = next_name(&l->names);
    if (name) {
      char *s = join(l->src, name), *d = join(l->dst, name);
      rc = s && d ? copy_entry(s, d, &lv, &depth, &cap) : -1;
      free(s);
      free(d);
      continue;
    }
    if (chmod(l->dst, l->mode) != 0) rc = -1;
    names_free(&l->names);
    free(l->src);
    free(l->dst);
    depth--;
  }
  while (depth > 0) {
    cp_level *l = &lv[--depth];
    names_free(&l->names);
    free(l->src);
    free(l->dst);
  }
  free(lv);
  return rc;
}

/* ================================================================ the requests */

typedef enum { OP_RM_FILES, OP_RM_DIRS, OP_CHMOD, OP_MOVE, OP_REPLACE } fe_op;

typedef struct {
  char *key;        /* the path as given (query value, body key, src) */
  char *abs;        /* expanded and resolved, or NULL when error is set */
  size_t key_len, abs_len; /* query paths: their lengths, larger than strlen when has_nul */
  int has_nul;      /* a query path with a NUL byte: no system call takes it (Go: EINVAL) */
  char *error;      /* the 400 text of an undefined variable in key */
  char *dest_key;   /* mv */
  char *dest;
  char *dest_error;
  size_t dest_key_len, dest_len;
  int dest_nul;
  int has_mode;     /* permissions */
  unsigned mode;
  char *owner, *group;
  char *old_s, *new_s; /* replace: old NULL = not a non-empty string; new_bad: "new" given and not a string */
  size_t old_len, new_len;
  int new_bad;
  unsigned long long count;
} fe_entry;

typedef struct {
  xd_fsjob job; /* first (fsops.h) */
  fe_op op;
  int verbose;
  fe_entry *e;
  size_t n;
  char *json; /* replace?verbose=true: the answer */
  size_t json_len;
  char *raw;  /* an error answer whose message has NUL bytes (a query path's), its whole JSON body */
  size_t raw_len;
} fe_job;

static void job_free(xd_fsjob *fj) {
  fe_job *job = (fe_job *)fj;
  for (size_t i = 0; i < job->n; i++) {
    fe_entry *e = &job->e[i];
    free(e->key);
    free(e->abs);
    free(e->error);
    free(e->dest_key);
    free(e->dest);
    free(e->dest_error);
    free(e->owner);
    free(e->group);
    free(e->old_s);
    free(e->new_s);
  }
  free(job->e);
  free(job->json);
  free(job->raw);
  free(job);
}

/* prefix + osMessage, as the given status/code (fileError when status is 0: ENOENT 404, else 500). */
static void fail_os(xd_fsjob *job, int status, const char *prefix, const xd_oserr *err) {
  osb_buf m = {0};
  int missing = status == 0 && err->err == ENOENT;
  if (status == 0 && osb_buf_append_str(&m, missing ? "file not found. " : "error accessing file: ") < 0) goto oom;
  if (osb_buf_append_str(&m, prefix) < 0 || xd_oserr_text(&m, err) < 0) goto oom;
  if (status == 0) xd_fsjob_fail(job, missing ? 404 : 500, missing ? "FILE_NOT_FOUND" : "RUNTIME_ERROR", m.data);
  else xd_fsjob_fail(job, status, "RUNTIME_ERROR", m.data);
  osb_buf_free(&m);
  return;
oom:
  osb_buf_free(&m);
  xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
}

static void fail_text(xd_fsjob *job, int status, const char *code, const char *fmt, const char *a, const char *b) {
  osb_buf m = {0};
  if (osb_buf_appendf(&m, fmt, a, b) < 0) xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
  else xd_fsjob_fail(job, status, code, m.data);
  osb_buf_free(&m);
}

/* "<op> <path>: <text>" of errno err, with a prefix, as fileError (status 0) or 500 */
static void fail_errno(xd_fsjob *job, int status, const char *prefix, int err, const char *op, const char *path) {
  xd_oserr e = {0};
  xd_oserr_set(&e, err, op, path);
  fail_os(job, status, prefix, &e);
  xd_oserr_free(&e);
}

/* Go's LinkError: "rename <from> <to>: <text>" (EXDEV in Go's words: the real execd's whole answer to a move across
 * file systems, which this one gives when it cannot copy) */
static void fail_rename(xd_fsjob *job, int err, const char *from, const char *to) {
  if (err == EXDEV) {
    osb_buf m = {0};
    if (osb_buf_appendf(&m, "error accessing file: failed to rename file: rename %s %s: invalid cross-device link", from, to) < 0)
      xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    else
      xd_fsjob_fail(job, 500, "RUNTIME_ERROR", m.data);
    osb_buf_free(&m);
    return;
  }
  osb_buf p = {0};
  if (osb_buf_appendf(&p, "%s %s", from, to) < 0) {
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    return;
  }
  fail_errno(job, 0, "failed to rename file: ", err, "rename", p.data);
  osb_buf_free(&p);
}

/* {"code","message"} whose message is the len bytes at msg (NUL bytes included, written \u0000 as Go does): the
 * JSON text in *out. 0, or -1 on OOM. */
static int error_json(const char *code, const char *msg, size_t len, osb_buf *out) {
  if (osb_buf_append_str(out, "{\"code\":") < 0 || xd_json_str(out, code, strlen(code)) < 0 ||
      osb_buf_append_str(out, ",\"message\":") < 0 || xd_json_str(out, msg, len) < 0 || osb_buf_append_str(out, "}") < 0) {
    osb_buf_free(out);
    return -1;
  }
  return 0;
}

/* The job's error answer with a message of bytes (status/code as given; 500 RUNTIME_ERROR when 0/NULL). */
static void fail_bytes(xd_fsjob *fj, int status, const char *code, const char *msg, size_t len) {
  fe_job *job = (fe_job *)fj;
  osb_buf b = {0};
  if (!status) status = 500;
  if (!code) code = "RUNTIME_ERROR";
  if (error_json(code, msg, len, &b) < 0) {
    xd_fsjob_fail(fj, 500, "RUNTIME_ERROR", NULL);
    return;
  }
  free(job->raw);
  job->raw = osb_buf_steal(&b, &job->raw_len);
  xd_fsjob_fail(fj, status, code, "");
}

static void fail_raw(xd_fsjob *fj, const char *msg, size_t len) {
  fail_bytes(fj, 500, "RUNTIME_ERROR", msg, len);
}

/* "<a><b bytes><c><d bytes>: invalid argument" as a 500: a path with a NUL byte refused like Go's system calls */
static void fail_inval(xd_fsjob *job, const char *a, const char *b, size_t bl, const char *c, const char *d, size_t dl) {
  osb_buf m = {0};
  if (osb_buf_append_str(&m, a) < 0 || osb_buf_append(&m, b, bl) < 0 || osb_buf_append_str(&m, c) < 0 ||
      osb_buf_append(&m, d, dl) < 0 || osb_buf_append_str(&m, ": invalid argument") < 0)
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
  else
    fail_raw(job, m.data, m.len);
  osb_buf_free(&m);
}

/* "<prefix><key>. <op> <path>: invalid argument" for a path with a NUL byte (bytes, not C strings) */
static void fail_nul(xd_fsjob *job, const char *prefix, const fe_entry *e, const char *op, const char *path, size_t plen) {
  osb_buf m = {0};
  if (osb_buf_append_str(&m, prefix) < 0 || osb_buf_append(&m, e->key, e->key_len) < 0 ||
      osb_buf_appendf(&m, ". %s ", op) < 0 || osb_buf_append(&m, path, plen) < 0 ||
      osb_buf_append_str(&m, ": invalid argument") < 0)
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
  else
    fail_raw(job, m.data, m.len);
  osb_buf_free(&m);
}

/* DELETE /directories of a path with a NUL byte, as Go's os.RemoveAll goes: its Remove fails (EINVAL); a parent path
 * with the NUL cannot be opened; else a missing parent is fine and an existing one's unlinkat of the base fails. */
static void rm_dir_nul(xd_fsjob *job, const fe_entry *e) {
  const char *abs = e->abs;
  size_t n = e->abs_len, cut = n;
  while (cut > 0 && abs[cut - 1] != '/') cut--;
  size_t plen = cut > 1 ? cut - 1 : cut; /* the parent: "/" itself, or without its trailing '/' */
  if (memchr(abs, '\0', plen)) {
    fail_nul(job, "error removing directory ", e, "open", abs, plen);
    return;
  }
  char *parent = strndup(abs, plen);
  if (!parent) {
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    return;
  }
  int fd = open(parent, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) {
      xd_oserr err = {0};
      xd_oserr_set(&err, errno, "open", parent);
      osb_buf m = {0};
      if (osb_buf_append_str(&m, "error removing directory ") < 0 || osb_buf_append(&m, e->key, e->key_len) < 0 ||
          osb_buf_append_str(&m, ". ") < 0 || xd_oserr_text(&m, &err) < 0)
        xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
      else
        fail_raw(job, m.data, m.len);
      osb_buf_free(&m);
      xd_oserr_free(&err);
    }
  } else {
    close(fd);
    osb_buf p = {0}; /* Go: parent + "/" + base, "//base" under the root */
    if (osb_buf_append(&p, parent, plen) < 0 || osb_buf_append_str(&p, "/") < 0 || osb_buf_append(&p, abs + cut, n - cut) < 0)
      xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    else
      fail_nul(job, "error removing directory ", e, "unlinkat", p.data, p.len);
    osb_buf_free(&p);
  }
  free(parent);
}

static void rm_file(xd_fsjob *job, const fe_entry *e) {
  struct stat st;
  if (e->has_nul) {
    fail_nul(job, "error removing file ", e, "stat", e->abs, e->abs_len);
    return;
  }
  osb_buf pre = {0};
  if (osb_buf_appendf(&pre, "error removing file %s. ", e->key) < 0) {
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    return;
  }
  if (stat(e->abs, &st) != 0) {
    if (errno != ENOENT) fail_errno(job, 500, pre.data, errno, "stat", e->abs);
  } else if (S_ISDIR(st.st_mode)) {
    fail_text(job, 500, "RUNTIME_ERROR", "%spath is a directory: %s", pre.data, e->key);
  } else if (unlink(e->abs) != 0) {
    if (osb_buf_append_str(&pre, "failed to remove file: ") < 0) xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    else fail_errno(job, 500, pre.data, errno, "remove", e->abs);
  }
  osb_buf_free(&pre);
}

static void rm_dir(xd_fsjob *job, const fe_entry *e) {
  if (e->has_nul) {
    rm_dir_nul(job, e);
    return;
  }
  xd_oserr err = {0};
  if (xd_remove_all(e->abs, &err) != 0) {
    osb_buf pre = {0};
    if (osb_buf_appendf(&pre, "error removing directory %s. ", e->key) < 0) xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    else fail_os(job, 500, pre.data, &err);
    osb_buf_free(&pre);
  }
  xd_oserr_free(&err);
}

static void chmod_one(xd_fsjob *job, const fe_entry *e) {
  if (e->has_nul) { /* chmod, or chown when a name resolves, refused (EINVAL) */
    if (e->has_mode) {
      fail_inval(job, "error changing permissions for ", e->key, e->key_len, ". chmod ", e->abs, e->abs_len);
    } else if (e->owner || e->group) {
      xd_owner o;
      xd_owner_resolve(e->owner, e->group, &o);
      if (o.has_uid || o.has_gid) {
        osb_buf m = {0};
        if (osb_buf_append_str(&m, "error changing permissions for ") < 0 || osb_buf_append(&m, e->key, e->key_len) < 0 ||
            osb_buf_append_str(&m, ". failed to set owner/group for ") < 0 || osb_buf_append(&m, e->abs, e->abs_len) < 0 ||
            osb_buf_append_str(&m, ": chown ") < 0 || osb_buf_append(&m, e->abs, e->abs_len) < 0 ||
            osb_buf_append_str(&m, ": invalid argument") < 0)
          xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
        else
          fail_raw(job, m.data, m.len);
        osb_buf_free(&m);
      }
    }
    return;
  }
  osb_buf pre = {0};
  if (osb_buf_appendf(&pre, "error changing permissions for %s. ", e->key) < 0) {
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    return;
  }
  if (e->has_mode && chmod(e->abs, e->mode) != 0) {
    fail_errno(job, 500, pre.data, errno, "chmod", e->abs);
  } else if (e->owner || e->group) {
    xd_owner o;
    xd_owner_resolve(e->owner, e->group, &o);
    if ((o.has_uid || o.has_gid) && chown(e->abs, o.uid, o.gid) != 0) {
      int err = errno;
      if (osb_buf_appendf(&pre, "failed to set owner/group for %s: ", e->abs) < 0) xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
      else fail_errno(job, 500, pre.data, err, "chown", e->abs);
    }
  }
  osb_buf_free(&pre);
}

/* mv to a destination with a NUL byte (Go's MkdirAll and Rename): the parents before the first component with the NUL
 * are made, that component's mkdir refused; a NUL in the base name only: the rename refused. */
static void move_to_nul(xd_fsjob *job, const fe_entry *e) {
  const char *d = e->dest;
  size_t n = e->dest_len, base = n;
  while (base > 0 && d[base - 1] != '/') base--;
  size_t dir_len = base > 1 ? base - 1 : base; /* the dirname: "/" itself, else without its trailing '/' */
  size_t z = (size_t)((const char *)memchr(d, '\0', n) - d);
  int in_dir = z < dir_len;
  size_t make = dir_len, comp_end = z;
  if (in_dir) { /* make the parents above the component with the NUL */
    size_t comp_start = z;
    while (comp_start > 0 && d[comp_start - 1] != '/') comp_start--;
    make = comp_start > 1 ? comp_start - 1 : comp_start;
    while (comp_end < n && d[comp_end] != '/') comp_end++;
  }
  char *dir = strndup(d, make);
  char *first = NULL;
  xd_oserr err = {0};
  if (!dir) {
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    return;
  }
  int rc = xd_mkdirp_mode(dir, 0755, &first, &err);
  free(first);
  free(dir);
  if (rc != 0) {
    fail_os(job, 0, "failed to create destination directory: ", &err);
  } else if (in_dir) {
    fail_inval(job, "error accessing file: failed to create destination directory: mkdir ", d, comp_end, "", "", 0);
  } else {
    osb_buf m = {0};
    if (osb_buf_append_str(&m, e->abs) < 0 || osb_buf_append_str(&m, " ") < 0)
      xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    else
      fail_inval(job, "error accessing file: failed to rename file: rename ", m.data, m.len, "", d, n);
    osb_buf_free(&m);
  }
  xd_oserr_free(&err);
}

static void move_one(xd_fsjob *job, const fe_entry *e) {
  struct stat st;
  if (e->has_nul) { /* the source's stat refused (EINVAL): not a missing file */
    osb_buf m = {0};
    if (osb_buf_append(&m, e->key, e->key_len) < 0 || osb_buf_append_str(&m, ": stat ") < 0)
      xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    else
      fail_inval(job, "error accessing file: source path not found: ", m.data, m.len, "", e->abs, e->abs_len);
    osb_buf_free(&m);
    return;
  }
  if (stat(e->abs, &st) != 0) {
    int err = errno;
    osb_buf pre = {0};
    if (osb_buf_appendf(&pre, "source path not found: %s: ", e->key) < 0) xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    else fail_errno(job, 0, pre.data, err, "stat", e->abs);
    osb_buf_free(&pre);
    return;
  }
  if (e->dest_nul) {
    move_to_nul(job, e);
    return;
  }
  char *dir = strdup(e->dest);
  if (!dir) {
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    return;
  }
  char *slash = strrchr(dir, '/');
  if (slash == dir) slash[1] = '\0';
  else if (slash) *slash = '\0';
  char *first = NULL;
  xd_oserr err = {0};
  int rc = xd_mkdirp_mode(dir, 0755, &first, &err);
  free(first);
  free(dir);
  if (rc != 0) {
    fail_os(job, 0, "failed to create destination directory: ", &err);
    xd_oserr_free(&err);
    return;
  }
  if (stat(e->dest, &st) == 0) {
    fail_text(job, 500, "RUNTIME_ERROR", "error accessing file: destination path already exists: %s%s", e->dest_key, "");
    return;
  }
  if (rename(e->abs, e->dest) == 0) return;
  int re = errno;
  if (re != EXDEV) {
    fail_rename(job, re, e->abs, e->dest);
    return;
  }
  /* different mounts inside the sandbox (e.g. /workspace and /tmp): copy, then remove the source */
  if (copy_tree(e->abs, e->dest) != 0) {
    xd_oserr_set(&err, 0, NULL, NULL);
    xd_remove_all(e->dest, &err);
    xd_oserr_free(&err);
    fail_rename(job, EXDEV, e->abs, e->dest);
    return;
  }
  if (xd_remove_all(e->abs, &err) != 0) fail_os(job, 0, "failed to rename file: ", &err);
  xd_oserr_free(&err);
}

/* The whole file (at most REPLACE_MAX bytes): 0, or -1 with err set. Opened without blocking, and only a regular file
 * (or a directory, whose read is EISDIR) is read: a FIFO or device would hold a thread-pool thread for as long as
 * nobody writes to it (Go's and Node's readFile wait there). */
static int read_all(const char *path, osb_buf *out, xd_oserr *err) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    xd_oserr_set(err, errno, "open", path);
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
    xd_oserr_set(err, EINVAL, "read", path);
    close(fd);
    return -1;
  }
  char buf[65536];
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) break;
    if (r < 0 || out->len + (size_t)r > REPLACE_MAX || osb_buf_append(out, buf, (size_t)r) < 0) {
      xd_oserr_set(err, r < 0 ? errno : out->len + (size_t)r > REPLACE_MAX ? EFBIG : ENOMEM, "read", path);
      close(fd);
      return -1;
    }
  }
  close(fd);
  return 0;
}

static int write_all(const char *path, const char *data, size_t len, xd_oserr *err) {
  int fd = open(path, O_WRONLY | O_TRUNC | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0666);
  if (fd < 0) {
    xd_oserr_set(err, errno, "open", path);
    return -1;
  }
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      xd_oserr_set(err, w < 0 ? errno : EIO, "write", path);
      close(fd);
      return -1;
    }
    off += (size_t)w;
  }
  if (close(fd) != 0) {
    xd_oserr_set(err, errno, "close", path);
    return -1;
  }
  return 0;
}

static void replace_one(xd_fsjob *job, fe_entry *e) {
  struct stat st;
  xd_oserr err = {0};
  osb_buf in = {0}, out = {0};
  if (e->has_nul) {
    fail_inval(job, "error accessing file: stat ", e->abs, e->abs_len, "", "", 0);
    return;
  }
  if (stat(e->abs, &st) != 0) {
    xd_oserr_set(&err, errno, "stat", e->abs);
    fail_os(job, 0, "", &err);
    goto out;
  }
  if (read_all(e->abs, &in, &err) != 0) {
    fail_os(job, 0, "", &err);
    goto out;
  }
  if (!e->old_s) {
    xd_fsjob_fail(job, 400, "INVALID_REQUEST_BODY", "old content must not be empty");
    goto out;
  }
  if (e->new_bad) {
    xd_fsjob_fail(job, 400, "INVALID_REQUEST_BODY", BAD_BODY "\"new\" must be a string");
    goto out;
  }
  const char *nw = e->new_s ? e->new_s : "";
  /* count first: the new content's size is known (and bounded) before it is made */
  unsigned long long count = 0;
  const char *d = in.data ? in.data : "";
  size_t len = in.len;
  for (size_t at = 0; at + e->old_len <= len;) {
    const char *hit = memmem(d + at, len - at, e->old_s, e->old_len);
    if (!hit) break;
    count++;
    at = (size_t)(hit - d) + e->old_len;
  }
  long double size = (long double)len + (long double)count * ((long double)e->new_len - (long double)e->old_len);
  if (size > REPLACE_MAX) {
    xd_oserr_set(&err, EFBIG, "write", e->abs);
    fail_os(job, 0, "", &err);
    goto out;
  }
  if (osb_buf_reserve_exact(&out, (size_t)size) < 0) {
    xd_fsjob_fail(job, 500, "RUNTIME_ERROR", NULL);
    goto out;
  }
  size_t from = 0;
  for (unsigned long long i = 0; i < count; i++) {
    const char *hit = memmem(d + from, len - from, e->old_s, e->old_len);
    size_t at = (size_t)(hit - d);
    osb_buf_append(&out, d + from, at - from);
    osb_buf_append(&out, nw, e->new_len);
    from = at + e->old_len;
  }
  osb_buf_append(&out, d + from, len - from);
  if (write_all(e->abs, out.data ? out.data : "", out.len, &err) != 0) {
    fail_os(job, 0, "", &err);
    goto out;
  }
  e->count = count;
out:
  xd_oserr_free(&err);
  osb_buf_free(&in);
  osb_buf_free(&out);
}

static int cmp_entry_key(const void *a, const void *b) {
  return strcmp((*(fe_entry *const *)a)->key, (*(fe_entry *const *)b)->key);
}

/* {"<key>":{"replacedCount":N},...} with the keys sorted, as Go's encoding/json writes a map */
static void replace_answer_text(fe_job *job) {
  fe_entry **s = malloc((job->n ? job->n : 1) * sizeof *s);
  if (!s) return;
  for (size_t i = 0; i < job->n; i++) s[i] = &job->e[i];
  qsort(s, job->n, sizeof *s, cmp_entry_key);
  osb_buf b = {0};
  int rc = osb_buf_append_str(&b, "{");
  for (size_t i = 0; i < job->n && rc == 0; i++) {
    if (i) rc = osb_buf_append_str(&b, ",");
    if (rc == 0) rc = xd_json_str(&b, s[i]->key, strlen(s[i]->key));
    if (rc == 0) rc = osb_buf_appendf(&b, ":{\"replacedCount\":%llu}", s[i]->count);
  }
  if (rc == 0) rc = osb_buf_append_str(&b, "}");
  free(s);
  if (rc < 0) {
    osb_buf_free(&b);
    return;
  }
  job->json = osb_buf_steal(&b, &job->json_len);
}

static void job_run(xd_fsjob *fj) {
  fe_job *job = (fe_job *)fj;
  for (size_t i = 0; i < job->n && fj->status == 200; i++) {
    fe_entry *e = &job->e[i];
    if (e->error || (job->op == OP_MOVE && e->dest_error)) {
      xd_fsjob_fail(fj, 400, "INVALID_REQUEST_BODY", e->error ? e->error : e->dest_error);
      break;
    }
    switch (job->op) {
    case OP_RM_FILES: rm_file(fj, e); break;
    case OP_RM_DIRS: rm_dir(fj, e); break;
    case OP_CHMOD: chmod_one(fj, e); break;
    case OP_MOVE: move_one(fj, e); break;
    case OP_REPLACE: replace_one(fj, e); break;
    }
  }
  if (fj->status == 200 && job->op == OP_REPLACE && job->verbose) {
    replace_answer_text(job);
    if (!job->json) xd_fsjob_fail(fj, 500, "RUNTIME_ERROR", NULL);
  }
}

/* replace?verbose=true answers its JSON; everything else as fsops.c does */
static void job_answer(xd_fsjob *fj, int status) {
  fe_job *job = (fe_job *)fj;
  if (!fj->res) return;
  if (status != 0) xd_send_error(fj->res, 500, "RUNTIME_ERROR", "operation canceled");
  else if (fj->status != 200 && job->raw) xd_send_json(fj->res, fj->status, job->raw, job->raw_len);
  else if (fj->status == 200 && job->json) xd_send_json(fj->res, 200, job->json, job->json_len);
  else if (fj->status == 200) xd_send_empty(fj->res);
  else if (fj->message) xd_send_error(fj->res, fj->status, fj->code, fj->message);
  else xd_send_error(fj->res, 500, "RUNTIME_ERROR", "out of memory");
}

/* ---------------------------------------------------------------- parsing (loop thread) */

/* U+10FFFE (a noncharacter): what a \u0000 escape becomes for cJSON, whose strings end at a NUL; unmark() turns it
 * back into the NUL byte Go's decoder reads. */
#define NUL_MARK "\xf4\x8f\xbf\xbe"

static int hex4(const char *p, unsigned *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return 0;
    *v = *v * 16 + (unsigned)d;
  }
  return 1;
}

/* fsedit.h */
int xd_go_json_strings(const char *b, size_t n, osb_buf *out, int *nul) {
  int in_str = 0, rc = 0;
  *nul = 0;
  for (size_t i = 0; i < n && rc == 0;) {
    unsigned char c = (unsigned char)b[i];
    if (!in_str || c == '"') {
      in_str = in_str ? 0 : c == '"';
      rc = osb_buf_append(out, b + i++, 1);
    } else if (c == '\\') {
      unsigned v, v2;
      if (i + 6 <= n && b[i + 1] == 'u' && hex4(b + i + 2, &v)) {
        if (v == 0) {
          rc = osb_buf_append_str(out, NUL_MARK);
          *nul = 1;
          i += 6;
        } else if (v >= 0xd800 && v <= 0xdbff && i + 12 <= n && b[i + 6] == '\\' && b[i + 7] == 'u' &&
                   hex4(b + i + 8, &v2) && v2 >= 0xdc00 && v2 <= 0xdfff) {
          if (v == 0xdbff && v2 == 0xdffe) return 1;
          rc = osb_buf_append(out, b + i, 12);
          i += 12;
        } else if (v >= 0xd800 && v <= 0xdfff) {
          rc = osb_buf_append_str(out, "\\ufffd");
          i += 6;
        } else {
          rc = osb_buf_append(out, b + i, 6);
          i += 6;
        }
      } else {
        size_t k = i + 1 < n && (unsigned char)b[i + 1] < 0x80 ? 2 : 1; /* a byte after it that is not ASCII: its own */
        rc = osb_buf_append(out, b + i, k);
        i += k;
      }
    } else if (c < 0x80) {
      rc = osb_buf_append(out, b + i++, 1);
    } else {
      size_t k = xd_utf8_seq((const unsigned char *)b + i, n - i);
      if (k == 4 && memcmp(b + i, NUL_MARK, 4) == 0) return 1;
      rc = k ? osb_buf_append(out, b + i, k) : osb_buf_append_str(out, "\xef\xbf\xbd");
      i += k ? k : 1;
    }
  }
  return rc < 0 ? -1 : 0;
}

/* s (a parsed string) with every NUL_MARK as a NUL byte when the body had \u0000 escapes (nul), else as it is:
 * malloc'd, *len its length (NULL on OOM). */
static char *unmark(int nul, const char *s, size_t *len) {
  size_t n = strlen(s), o = 0;
  char *r = malloc(n + 1);
  if (!r) return NULL;
  for (size_t i = 0; i < n;) {
    if (nul && n - i >= 4 && memcmp(s + i, NUL_MARK, 4) == 0) {
      r[o++] = '\0';
      i += 4;
    } else {
      r[o++] = s[i++];
    }
  }
  r[o] = '\0';
  *len = o;
  return r;
}


static int expand(const char *p, const char *ws, char **abs, char **error) {
  return xd_expand_abs_path(p, environ, ws, abs, error) < 0 ? -1 : 0;
}

static int byte_in_env(unsigned char c, const char *ws) {
  if (strchr(ws, c)) return 1;
  for (char **v = environ; *v; v++)
    if (strchr(*v, c)) return 1;
  return 0;
}

/* A path of len bytes expanded and resolved (*abs, *abs_len; or the 400 text in *error). One with NUL bytes is
 * expanded like any other (Go expands and resolves it, then no system call takes it): each NUL stands in as a control
 * byte found nowhere in the path, execd's environment or the workspace, and is put back in *abs (*has_nul set).
 * 0, 1 when every such byte is taken (the Node execd's then), -1 on OOM. */
static int expand_bytes(const char *path, size_t len, const char *ws, char **abs, size_t *abs_len, char **error,
                        int *has_nul) {
  *has_nul = 0;
  *abs_len = 0;
  if (len == strlen(path)) {
    if (expand(path, ws, abs, error) < 0) return -1;
    if (*abs) *abs_len = strlen(*abs);
    return 0;
  }
  unsigned char stand = 0;
  for (unsigned c = 1; c < 0x20 && !stand; c++)
    if (!memchr(path, (int)c, len) && !byte_in_env((unsigned char)c, ws)) stand = (unsigned char)c;
  if (!stand) return 1;
  char *p = malloc(len + 1);
  if (!p) return -1;
  for (size_t i = 0; i < len; i++) p[i] = path[i] ? path[i] : (char)stand;
  p[len] = '\0';
  int rc = expand(p, ws, abs, error);
  free(p);
  if (rc < 0) return -1;
  if (*abs) {
    *abs_len = strlen(*abs);
    for (size_t i = 0; i < *abs_len; i++)
      if ((unsigned char)(*abs)[i] == stand) (*abs)[i] = '\0';
    *has_nul = 1;
  }
  return 0;
}

static int expand_key(fe_entry *e, const char *ws) {
  return expand_bytes(e->key, e->key_len, ws, &e->abs, &e->abs_len, &e->error, &e->has_nul);
}

static void send_error_bytes(xd_res *res, int status, const char *code, const char *msg, size_t len) {
  osb_buf b = {0};
  if (error_json(code, msg, len, &b) < 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return;
  }
  xd_send_json(res, status, b.data, b.len);
  osb_buf_free(&b);
}

/* A 400 whose text may hold NUL_MARK (a key's): sent with the NUL bytes Go's decoder read. */
static int send_400_unmarked(xd_res *res, int nul, const char *text) {
  size_t len;
  char *u = unmark(nul, text, &len);
  if (!u) return -1;
  send_error_bytes(res, 400, "INVALID_REQUEST_BODY", u, len);
  free(u);
  return 0;
}

typedef struct {
  const cJSON *node; /* the last value of a key */
  size_t first;      /* the position of its first occurrence */
} member;

static int cmp_member_key(const void *a, const void *b) {
  const member *x = a, *y = b;
  int c = strcmp(x->node->string, y->node->string);
  if (c) return c;
  return x->first < y->first ? -1 : x->first > y->first;
}

static int cmp_member_first(const void *a, const void *b) {
  const member *x = a, *y = b;
  return x->first < y->first ? -1 : x->first > y->first;
}

/* The members of an object once per key: the last value at the first one's place (JSON.parse's merge, which Go's
 * map decoding agrees with on the value). *out malloc'd (NULL when n is 0). 0, or -1 on OOM. */
static int object_members(const cJSON *obj, member **out, size_t *count) {
  size_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) n++;
  *out = NULL;
  *count = 0;
  if (n == 0) return 0;
  member *m = malloc(n * sizeof *m);
  if (!m) return -1;
  size_t i = 0;
  for (const cJSON *c = obj->child; c; c = c->next, i++) m[i] = (member){c, i};
  qsort(m, n, sizeof *m, cmp_member_key);
  size_t k = 0;
  for (i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && strcmp(m[j + 1].node->string, m[i].node->string) == 0) j++;
    m[k++] = (member){m[j].node, m[i].first};
    i = j + 1;
  }
  qsort(m, k, sizeof *m, cmp_member_first);
  *out = m;
  *count = k;
  return 0;
}

typedef enum { PARSED, ANSWERED, NOT_MINE } parse_rc;

/* The body as JSON: PARSED with *root, ANSWERED (a 400 or 500 went out), NOT_MINE (not taken). Strings are
 * Go's (xd_go_json_strings): *nul set when one has a NUL byte (NUL_MARK in the tree). */
static parse_rc parse_body(const xd_req *req, xd_res *res, cJSON **root, int *nul) {
  *root = NULL;
  *nul = 0;
  if (req->body_len == 0) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", BAD_BODY "EOF");
    return ANSWERED;
  }
  int check = xd_json_check(req->body, req->body_len);
  if (check == XD_JSON_EOF) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", BAD_BODY "unexpected EOF");
    return ANSWERED;
  }
  if (check == XD_JSON_OTHER) {
    /* strings with bytes that are not UTF-8, \u0000 or surrogate escapes, read as Go's decoder reads them */
    osb_buf go = {0};
    int g = xd_go_json_strings(req->body, req->body_len, &go, nul);
    if (g == 0 && xd_json_check(go.data, go.len) == XD_JSON_OK) {
      *root = cJSON_ParseWithLength(go.data, go.len);
      osb_buf_free(&go);
      if (!*root) {
        xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
        return ANSWERED;
      }
      return PARSED;
    }
    osb_buf_free(&go);
    if (g < 0) {
      xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      return ANSWERED;
    }
    /* not JSON: the decoder's text (of the body as sent) */
    osb_buf msg = {0};
    cJSON *b = NULL;
    int bad = xd_json_parse(req->body, req->body_len, &b, &msg) != 0;
    cJSON_Delete(b);
    if (bad && g == 0) {
      osb_buf text = {0};
      if (osb_buf_append_str(&text, BAD_BODY) < 0 || osb_buf_append(&text, msg.data ? msg.data : "", msg.len) < 0)
        xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
      else
        xd_send_error(res, 400, "INVALID_REQUEST_BODY", text.data);
      osb_buf_free(&text);
    }
    osb_buf_free(&msg);
    return bad && g == 0 ? ANSWERED : NOT_MINE; /* else something JavaScript and cJSON read differently */
  }
  if (!(*root = cJSON_ParseWithLength(req->body, req->body_len))) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
    return ANSWERED;
  }
  return PARSED;
}

static fe_job *job_new(fe_op op, size_t n) {
  fe_job *job = calloc(1, sizeof *job);
  if (!job) return NULL;
  if (!(job->e = calloc(n ? n : 1, sizeof *job->e))) {
    free(job);
    return NULL;
  }
  job->op = op;
  return job;
}

/* A non-empty string member, copied (NULL otherwise); -1 on OOM. */
static int name_member(int nul, const cJSON *obj, const char *key, char **out) {
  int dup = 0;
  const cJSON *v = xd_json_member(obj, key, &dup);
  *out = NULL;
  if (!cJSON_IsString(v) || !v->valuestring[0] || (nul && strstr(v->valuestring, NUL_MARK))) return 0; /* a NUL: no such name */
  return (*out = strdup(v->valuestring)) ? 0 : -1;
}

static int send_oom(xd_res *res) {
  xd_send_error(res, 500, "RUNTIME_ERROR", "out of memory");
  return 1;
}

/* POST /files/permissions and /files/replace: {path: {...}} */
static int route_path_map(xd_fsmod *m, const xd_req *req, xd_res *res, fe_op op) {
  cJSON *root = NULL;
  int nul = 0;
  parse_rc pr = parse_body(req, res, &root, &nul);
  if (pr != PARSED) return pr == ANSWERED;
  int taken = 1;
  member *mem = NULL;
  size_t n = 0;
  fe_job *job = NULL;
  osb_buf msg = {0};
  if (!cJSON_IsObject(root)) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", BAD_BODY "expected a JSON object keyed by path");
    goto out;
  }
  if (object_members(root, &mem, &n) != 0) goto oom;
  for (size_t i = 0; i < n; i++) { /* readPathMap: every value an object */
    if (cJSON_IsObject(mem[i].node)) continue;
    size_t kl;
    char *k = unmark(nul, mem[i].node->string, &kl);
    if (!k || osb_buf_append_str(&msg, BAD_BODY "the value for ") < 0 || xd_js_json_str(&msg, k, kl) < 0 ||
        osb_buf_append_str(&msg, " must be an object") < 0) {
      free(k);
      goto oom;
    }
    free(k);
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", msg.data);
    goto out;
  }
  if (!(job = job_new(op, n))) goto oom;
  for (size_t i = 0; i < n; i++) {
    const cJSON *v = mem[i].node;
    fe_entry *e = &job->e[job->n++];
    if (op == OP_CHMOD) { /* parseMode of every entry before anything is changed */
      int dup = 0;
      const cJSON *mode = xd_json_member(v, "mode", &dup);
      int r = xd_parse_mode(mode, v->string, &e->has_mode, &e->mode, &msg);
      if (r == 2) { /* an array or object: Go's decoder refuses it (the Node execd wrote JavaScript's text of it) */
        xd_send_error(res, 400, "INVALID_REQUEST_BODY",
                      cJSON_IsArray(mode) ? BAD_BODY "json: cannot unmarshal array into Go struct field Permission.mode of type int"
                                          : BAD_BODY "json: cannot unmarshal object into Go struct field Permission.mode of type int");
        goto out;
      }
      if (r != 0) {
        if (r < 0 || send_400_unmarked(res, nul, msg.data) < 0) goto oom;
        goto out;
      }
      if (name_member(nul, v, "owner", &e->owner) < 0 || name_member(nul, v, "group", &e->group) < 0) goto oom;
    } else {
      int dup = 0;
      const cJSON *old = xd_json_member(v, "old", &dup), *nw = xd_json_member(v, "new", &dup);
      if (cJSON_IsString(old) && old->valuestring[0] && !(e->old_s = unmark(nul, old->valuestring, &e->old_len))) goto oom;
      if (cJSON_IsString(nw)) {
        if (!(e->new_s = unmark(nul, nw->valuestring, &e->new_len))) goto oom;
      } else {
        e->new_bad = nw != NULL;
      }
    }
    if (!(e->key = unmark(nul, v->string, &e->key_len))) goto oom;
    int r = expand_key(e, m->workspace);
    if (r < 0) goto oom;
    if (r > 0) {
      taken = 0;
      goto out;
    }
  }
  if (op == OP_REPLACE) {
    char *verbose = xd_query(req, "verbose");
    job->verbose = verbose && strcmp(verbose, "true") == 0;
    free(verbose);
  }
  job->job.run = job_run;
  job->job.release = job_free;
  job->job.answer = job_answer;
  if (xd_fsjob_start(&m->jobs, m->loop, &job->job, res) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "cannot queue the file system work");
    goto out;
  }
  job = NULL;
  goto out;
oom:
  send_oom(res);
out:
  if (job) job_free(&job->job);
  free(mem);
  osb_buf_free(&msg);
  cJSON_Delete(root);
  return taken;
}

/* POST /files/mv: [{src, dest}] */
static int route_move(xd_fsmod *m, const xd_req *req, xd_res *res) {
  cJSON *root = NULL;
  int nul = 0;
  parse_rc pr = parse_body(req, res, &root, &nul);
  if (pr != PARSED) return pr == ANSWERED;
  fe_job *job = NULL;
  if (cJSON_IsObject(root)) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY",
                  BAD_BODY "json: cannot unmarshal object into Go value of type []model.RenameFileItem");
    goto out;
  }
  int ok = cJSON_IsArray(root);
  size_t n = 0;
  for (const cJSON *c = ok ? root->child : NULL; c && ok; c = c->next, n++) {
    int dup = 0;
    ok = cJSON_IsObject(c) && cJSON_IsString(xd_json_member(c, "src", &dup)) && cJSON_IsString(xd_json_member(c, "dest", &dup));
  }
  if (!ok) {
    xd_send_error(res, 400, "INVALID_REQUEST_BODY", BAD_BODY "expected [{\"src\":\"\u2026\",\"dest\":\"\u2026\"}]");
    goto out;
  }
  if (!(job = job_new(OP_MOVE, n))) goto oom;
  for (const cJSON *c = root->child; c; c = c->next) {
    int dup = 0;
    fe_entry *e = &job->e[job->n++];
    if (!(e->key = unmark(nul, xd_json_member(c, "src", &dup)->valuestring, &e->key_len)) ||
        !(e->dest_key = unmark(nul, xd_json_member(c, "dest", &dup)->valuestring, &e->dest_key_len)))
      goto oom;
    int r = expand_key(e, m->workspace);
    if (r == 0 && !e->error)
      r = expand_bytes(e->dest_key, e->dest_key_len, m->workspace, &e->dest, &e->dest_len, &e->dest_error, &e->dest_nul);
    if (r < 0) goto oom;
    if (r > 0) {
      cJSON_Delete(root);
      job_free(&job->job);
      return 0;
    }
  }
  job->job.run = job_run;
  job->job.release = job_free;
  job->job.answer = job_answer;
  if (xd_fsjob_start(&m->jobs, m->loop, &job->job, res) != 0) {
    xd_send_error(res, 500, "RUNTIME_ERROR", "cannot queue the file system work");
    goto out;
  }
  job = NULL;
  goto out;
oom:
  send_oom(res);
out:
  if (job) job_free(&job->job);
  cJSON_Delete(root);
  return 1;
}

/* DELETE /files and DELETE /directories: ?path=… repeated */
static int route_query_paths(xd_fsmod *m, const xd_req *req, xd_res *res, fe_op op) {
  xd_query_list q;
  if (xd_query_all(req, "path", &q) != 0) return send_oom(res);
  fe_job *job = job_new(op, q.n);
  if (!job) goto oom;
  for (size_t i = 0; i < q.n; i++) {
    fe_entry *e = &job->e[job->n++];
    e->key = q.v[i];
    e->key_len = q.len[i];
    q.v[i] = NULL;
    int r = expand_key(e, m->workspace);
    if (r == 1) { /* a NUL byte, and every stand-in byte taken: the Node execd's */
      xd_query_list_free(&q);
      job_free(&job->job);
      return 0;
    }
    if (r < 0) goto oom;
  }
  xd_query_list_free(&q);
  job->job.run = job_run;
  job->job.release = job_free;
  job->job.answer = job_answer;
  if (xd_fsjob_start(&m->jobs, m->loop, &job->job, res) != 0) {
    job_free(&job->job);
    xd_send_error(res, 500, "RUNTIME_ERROR", "cannot queue the file system work");
  }
  return 1;
oom:
  xd_query_list_free(&q);
  if (job) job_free(&job->job);
  return send_oom(res);
}

/* ---------------------------------------------------------------- the module */

void *xd_fsedit_new(const xd_ctx *ctx) {
  return xd_fsmod_new(ctx);
}

void xd_fsedit_close(void *module) {
  xd_fsmod_close(module);
}

int xd_fsedit_route(void *module, const xd_req *req, xd_res *res) {
  xd_fsmod *m = module;
  if (strcmp(req->method, "DELETE") == 0) {
    if (strcmp(req->path, "/files") == 0) return route_query_paths(m, req, res, OP_RM_FILES);
    if (strcmp(req->path, "/directories") == 0) return route_query_paths(m, req, res, OP_RM_DIRS);
    return 0;
  }
  if (strcmp(req->method, "POST") != 0) return 0;
  if (strcmp(req->path, "/files/permissions") == 0) return route_path_map(m, req, res, OP_CHMOD);
  if (strcmp(req->path, "/files/replace") == 0) return route_path_map(m, req, res, OP_REPLACE);
  if (strcmp(req->path, "/files/mv") == 0) return route_move(m, req, res);
  return 0;
}
