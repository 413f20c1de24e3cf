/* What the C execd's files modules (dirs.c, upload.c) share: the file system work of the Node execd's files API
 * as it words its failures (lib/dev-server/execd/mkdirp.js, files-upload.js mkdirWithOwnership, files-info.js
 * lookupId/parseMode/osMessage), for the thread pool, and parseMode of a request's JSON on the loop thread.
 * No state; the functions touching the file system block (run them on libuv's thread pool). */
#ifndef XD_FSOPS_H
#define XD_FSOPS_H
#include <stddef.h>
#include <sys/types.h>
#include <uv.h>
#include "core/buf.h"
#include "xd.h"

/* A failed system call: err (an errno value, 0 = none), the syscall's name (static) and the path it was given
 * (malloc'd, owned by the struct; NULL when none or out of memory). */
typedef struct {
  int err;
  const char *syscall;
  char *path;
} xd_oserr;

/* Records a failure (path copied; a previous one is replaced). */
void xd_oserr_set(xd_oserr *e, int err, const char *syscall, const char *path);
void xd_oserr_free(xd_oserr *e);
/* osMessage of the Node execd: "<syscall> <path>: <libuv's text of err up to its first comma>" ("<syscall>: ..."
 * without a path). 0, or -1 when out of memory. */
int xd_oserr_text(osb_buf *out, const xd_oserr *e);

/* A Node fs error's message: "<CODE>: <libuv's text>, <syscall> '<path>'" (e.g. "ENOTDIR: not a directory, mkdir
 * '/a'"). 0, or -1 when out of memory. */
int xd_oserr_node_text(osb_buf *out, const xd_oserr *e);

/* The ids an owner and a group name resolve to in /etc/passwd and /etc/group, read as files-info.js idTable reads
 * them (the first line of a name counts, the id read like JavaScript's Number() and an integer). */
typedef struct {
  int has_uid, has_gid; /* the name was given and resolves */
  uid_t uid;
  gid_t gid;
} xd_owner;
/* Resolves the names (NULL = not given; each given one costs a read of its file). */
void xd_owner_resolve(const char *owner, const char *group, xd_owner *o);

/* mkdirp.js: mkdir -p of dir (absolute), one component at a time, 0777 before the umask (an existing directory costs
 * one stat). 0 with *first = the first directory it created (malloc'd, the caller frees) or NULL; -1 with e set. */
int xd_mkdirp(const char *dir, char **first, xd_oserr *e);
/* The same with the mode given to mkdir (before the umask), e.g. 0755 for files.js move's parent directories. */
int xd_mkdirp_mode(const char *dir, mode_t mode, char **first, xd_oserr *e);

/* The rest of mkdirWithOwnership: chown of `first` and every directory below it down to dir, to the ids that resolved
 * (nothing when neither did). 0, or -1 with e set. */
int xd_own_created(const char *dir, const char *first, const xd_owner *o, xd_oserr *e);

/* chown of path to the ids that resolved (applyOwnership; nothing when neither did): 0, or -1 with e set. */
int xd_own(const char *path, const xd_owner *o, xd_oserr *e);

/* parseMode of a request's "mode" value (cJSON, may be NULL): 0 = fine (*has_mode, *mode set), 1 = a 400 whose
 * message ("invalid mode ... for <where>: ...") is appended to msg, 2 = a value whose JavaScript text this module
 * does not write (an array or object: hand the request off), -1 = out of memory. */
struct cJSON;
int xd_parse_mode(const struct cJSON *mode, const char *where, int *has_mode, unsigned *mode_bits, osb_buf *msg);

/* ---- a files request's work on the thread pool, answered on the loop thread (dirs.c, upload.c) ----
 * The module embeds an xd_fsjob first in its job struct, sets run (the thread pool's part: it leaves status 200 or
 * sets status, code and message), release (frees the module's struct, the job included) and optionally answer, and
 * starts it. The
 * answer is 200 with no body, or {code, message} (500 "out of memory" when the message is NULL). A client that went
 * away gets nothing; the job is released when its work is done, also after the module closed. */
typedef struct xd_fsjob xd_fsjob;
typedef struct xd_fsjobs {
  xd_fsjob *head; /* jobs in flight (the module's) */
} xd_fsjobs;
struct xd_fsjob {
  uv_work_t work;
  void (*run)(xd_fsjob *job);
  void (*release)(xd_fsjob *job);
  /* optional: answers res itself instead of the 200/error above, when the work is done (status: the thread pool's,
   * non-zero when it was cancelled); called also when res is NULL (the client went away or the module closed) */
  void (*answer)(xd_fsjob *job, int status);
  xd_fsjobs *jobs;   /* NULL once the module closed */
  xd_res *res;       /* NULL once the client went away or the module closed */
  int status;        /* 200, or the error's status */
  const char *code;  /* static */
  char *message;     /* malloc'd, freed with the job's answer */
  xd_fsjob *prev, *next;
};
/* What a files module holds: the loop, the workspace (relative paths resolve against it, malloc'd) and its jobs. */
typedef struct {
  uv_loop_t *loop;
  char *workspace;
  xd_fsjobs jobs;
} xd_fsmod;
/* NULL on OOM. Closing answers no job (xd_fsjobs_close) and frees the module. */
xd_fsmod *xd_fsmod_new(const xd_ctx *ctx);
void xd_fsmod_close(xd_fsmod *m);

/* Queues the job and ties it to res. 0, or -1 (nothing queued; the caller answers and releases). */
int xd_fsjob_start(xd_fsjobs *jobs, uv_loop_t *loop, xd_fsjob *job, xd_res *res);
/* Module shutdown: jobs in flight answer no one and release themselves when their work is done. */
void xd_fsjobs_close(xd_fsjobs *jobs);
/* Sets the job's answer to an error (message copied; NULL message text on OOM). */
void xd_fsjob_fail(xd_fsjob *job, int status, const char *code, const char *message);

#endif
