/* Starting programs without copying the caller's page tables, and learning when they exit without a SIGCHLD
 * handler (used by the local server's execd, lib/dev-server/execd/spawn.js).
 *
 * osb_spawn: clone(CLONE_VM | CLONE_VFORK): the child runs on a small private stack in the caller's memory until it
 * execs (the calling thread waits), so the cost does not grow with the caller's size as fork's does. In the child:
 * signal dispositions reset to default, signal mask cleared, optionally a new session (setsid), optionally chdir,
 * stdio descriptors 0..nstdio-1 set up, every other descriptor closed, then execve (a file without '/' searched in
 * the PATH of envp, else /usr/bin:/bin, like libuv). Any failure (chdir, exec, ...) is reported synchronously as an
 * errno value; the failed child is reaped before osb_spawn returns.
 *
 * osb_reaper: one thread per reaper (named osb-reaper) waiting (epoll) on the pidfd of every child it watches; it reaps the child
 * (waitid) and calls the exit callback on that thread. Needs pidfd_open (Linux >= 5.3): osb_reaper_new fails with a
 * message naming the requirement otherwise. Thread-safety: osb_spawn and osb_reaper_spawn may be called from any
 * thread; osb_reaper_stop from any thread but the reaper's own (never from the exit callback). */
#ifndef OSB_SPAWN_H
#define OSB_SPAWN_H
#include <stddef.h>
#include <sys/types.h>

#define OSB_SPAWN_MAX_STDIO 8

typedef enum {
  OSB_STDIO_NULL = 0, /* /dev/null, read-write */
  OSB_STDIO_FD = 1,   /* the caller's descriptor `fd` (borrowed: the caller keeps and closes its own) */
  OSB_STDIO_PAIR = 2, /* a new AF_UNIX SOCK_STREAM socketpair; on success `fd` is the caller's end (close-on-exec,
                       * blocking, owned by the caller), the child's end is closed in the caller */
} osb_stdio_kind;

typedef struct {
  osb_stdio_kind kind;
  int fd;
} osb_stdio;

typedef struct {
  const char *file;         /* program: a path, or a name searched in PATH */
  const char *const *argv;  /* NULL-terminated; borrowed */
  const char *const *envp;  /* NULL-terminated; borrowed */
  const char *cwd;          /* NULL: the caller's working directory */
  int new_session;          /* setsid() in the child: own session and process group (pgid == pid) */
  int nstdio;               /* 0..OSB_SPAWN_MAX_STDIO: the child's descriptors 0..nstdio-1 */
  osb_stdio stdio[OSB_SPAWN_MAX_STDIO];
} osb_spawn_opts;

/* Starts the program. Returns 0 with *pid set (the caller must reap it, e.g. through an osb_reaper), or -1 with
 * *err_no set to the errno of what failed and *step naming it ("chdir", "execve", "setsid", "socketpair",
 * "clone", ...; static string): nothing is left behind (no child, no descriptor; PAIR entries' fd stay -1). */
int osb_spawn(osb_spawn_opts *o, pid_t *pid, int *err_no, const char **step);

/* Called on the reaper thread once per watched child, after it was reaped: code is its exit status (0..255) and
 * signo 0, or code -1 and signo the signal that killed it; code -1 and signo 0 when it could not be reaped
 * (someone else reaped it: SIGCHLD ignored). */
typedef void (*osb_exit_cb)(void *ud, pid_t pid, int code, int signo);

typedef struct osb_reaper osb_reaper;

/* Starts the reaper thread. Returns NULL with a message in err when the kernel has no pidfd_open (Linux >= 5.3
 * needed) or a resource is missing. cb_ud is handed to every cb call. The caller owns the reaper: osb_reaper_stop. */
osb_reaper *osb_reaper_new(osb_exit_cb cb, void *cb_ud, char *err, size_t errlen);

/* osb_spawn, then watches the child (its exit reaches cb exactly once). A watch failure (descriptor limit) kills
 * and reaps the child and fails with step "pidfd_open" / "epoll_ctl". */
int osb_reaper_spawn(osb_reaper *r, osb_spawn_opts *o, pid_t *pid, int *err_no, const char **step);

/* Children started and not yet reaped. Thread-safe. */
long osb_reaper_count(osb_reaper *r);

/* Stops and joins the thread, frees r. Children still running are no longer watched: they are never reaped by
 * this process (their exit callbacks never come). */
void osb_reaper_stop(osb_reaper *r);

#endif
