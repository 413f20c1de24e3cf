/* Starting processes in the C execd (see spawn.h). */
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmdreq.h"

int xd_find_exec(const char *file, char *const *envp, char *out, size_t cap) {
  const char *path = xd_env_get(envp, "PATH", 4);
  if (!path) path = "/usr/bin:/bin";
  int err = ENOENT;
  for (const char *p = path;;) {
    const char *e = strchr(p, ':');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    int n = len ? snprintf(out, cap, "%.*s/%s", (int)len, p, file) : snprintf(out, cap, "%s", file);
    struct stat st;
    if (n > 0 && (size_t)n < cap && stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
      if (access(out, X_OK) == 0) return 0;
      err = EACCES;
    }
    if (!e) break;
    p = e + 1;
  }
  return err;
}

int xd_high_fd(int fd) {
  if (fd > 2) return fd;
  int h = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return h;
}

/* a failure in the child (before exec) is reported through the memory it shares with us until then */
pid_t xd_spawn(const xd_spawn_spec *s) {
  volatile int child_err = 0;
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t pid = vfork();
  if (pid == 0) {
    setsid();
    if (dup2(s->in, 0) < 0 || dup2(s->out, 1) < 0 || dup2(s->err, 2) < 0) goto fail;
    if (s->fd3 > 2) {
      if (s->fd3 == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(s->fd3, 3) < 0) goto fail;
    }
    if (s->ctty && ioctl(0, TIOCSCTTY, 0) != 0) goto fail;
    if (s->cwd && chdir(s->cwd) != 0) goto fail;
    if (s->set_uid || s->set_gid) (void)setgroups(0, NULL);
    if (s->set_gid && setgid(s->gid) != 0) goto fail;
    if (s->set_uid && setuid(s->uid) != 0) goto fail;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < _NSIG; sig++) {
      if (sig != SIGKILL && sig != SIGSTOP) (void)sigaction(sig, &dfl, NULL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(s->path, s->argv, s->envp);
  fail:
    child_err = errno ? errno : EINVAL;
    _exit(127);
  }
  int err = pid < 0 ? errno : child_err;
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (pid > 0 && err) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  return err ? -err : pid;
}

