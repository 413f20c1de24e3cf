/* Starting processes in the C execd (spawn.c), for the commands API (commands.c) and the PTY API (pty.c): a new
 * session (setsid), started with vfork (the child shares execd's memory until it execs: no page tables are copied),
 * signal dispositions and mask reset, optionally a controlling terminal and another uid/gid. Reaping is the caller's
 * (waitpid on its own pids). Main thread only (signals are blocked around the vfork). Nothing allocated. */
#ifndef XD_SPAWN_H
#define XD_SPAWN_H
#include <sys/types.h>

typedef struct {
  const char *path;      /* the executable (xd_find_exec) */
  char *const *argv;
  char *const *envp;
  const char *cwd;       /* NULL: execd's own */
  int in, out, err;      /* the child's 0, 1, 2 (each >= 3: xd_high_fd; the caller closes them after) */
  int fd3;               /* > 2: also the child's fd 3 (a code kernel's control socket, code.c); 0: none */
  int ctty;              /* make fd 0 (a terminal's slave side) the new session's controlling terminal */
  int set_uid, set_gid;
  uid_t uid;
  gid_t gid;
} xd_spawn_spec;

/* Starts the process. Returns its pid, or -errno (a failure in the child before exec is reported too: the child is
 * then reaped here). The order of libuv's child: setsid, stdio, controlling terminal, chdir, setgroups/setgid/setuid,
 * default signal handling, exec. */
pid_t xd_spawn(const xd_spawn_spec *s);

/* The executable execvp would run for `file` with the PATH of envp (/usr/bin:/bin without one): 0 with its path in
 * out, or an errno (ENOENT, EACCES). */
int xd_find_exec(const char *file, char *const *envp, char *out, size_t cap);

/* An fd at 3 or above (so that the child's dup2 onto 0-2 never clobbers another source), close-on-exec; fd is
 * consumed (closed when moved). -1 on failure. */
int xd_high_fd(int fd);

#endif
