/* Program start without fork's page-table copy, and exit notification through pidfds (see spawn.h). */
#define _GNU_SOURCE
#include "spawn.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* Same number on every architecture (the unified syscall table since Linux 5.1); headers older than the kernel
 * feature may lack the names. Called through syscall(2): glibc's wrappers are newer than the prebuilt's floor. */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define CHILD_STACK (64 * 1024)
#define DEFAULT_PATH "/usr/bin:/bin"

enum { STEP_SETSID, STEP_CHDIR, STEP_DUP2, STEP_EXECVE };
static const char *const STEPS[] = {"setsid", "chdir", "dup2", "execve"};

typedef struct {
  int err;
  int step;
} child_report;

typedef struct {
  const osb_spawn_opts *o;
  char **paths;        /* execve candidates, NULL-terminated */
  int src[OSB_SPAWN_MAX_STDIO]; /* the descriptor that becomes i, every one >= nstdio, close-on-exec */
  int report_fd;       /* write end of the error pipe, >= nstdio, close-on-exec */
} child_ctx;

/* Closes every descriptor >= from except keep: close_range (Linux 5.9), else the entries of /proc/self/fd read
 * with getdents64 into a stack buffer (no allocation in the child), else every number up to the descriptor limit. */
static void close_from(int from, int keep) {
  if ((keep == from || syscall(SYS_close_range, (unsigned)from, (unsigned)keep - 1, 0) == 0) &&
      syscall(SYS_close_range, (unsigned)keep + 1, ~0U, 0) == 0)
    return;
  int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    char buf[4096] __attribute__((aligned(8)));
    for (;;) {
      long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        struct dirent64 *d = (struct dirent64 *)(buf + off);
        off += d->d_reclen;
        int fd = 0, ok = d->d_name[0] != 0;
        for (const char *p = d->d_name; *p; p++) {
          if (*p < '0' || *p > '9') ok = 0;
          else fd = fd * 10 + (*p - '0');
        }
        if (ok && fd >= from && fd != keep && fd != dir) close(fd);
      }
    }
    close(dir);
    return;
  }
  struct rlimit rl;
  long max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 65536;
  for (long fd = from; fd < max; fd++)
    if (fd != keep) close((int)fd);
}

static void child_fail(const child_ctx *c, int step) {
  child_report r = {errno, step};
  ssize_t w;
  do w = write(c->report_fd, &r, sizeof r);
  while (w < 0 && errno == EINTR);
  _exit(127);
}

/* Runs in the child, on its own stack, in the caller's memory: async-signal-safe calls only, nothing allocated. */
static int child_main(void *arg) {
  const child_ctx *c = arg;
  const osb_spawn_opts *o = c->o;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &sa, NULL); /* glibc's internal signals answer EINVAL: fine */
  if (o->new_session && setsid() < 0) child_fail(c, STEP_SETSID);
  if (o->cwd && chdir(o->cwd) < 0) child_fail(c, STEP_CHDIR);
  for (int i = 0; i < o->nstdio; i++)
    if (dup2(c->src[i], i) < 0) child_fail(c, STEP_DUP2); /* dup2 clears close-on-exec on i */
  close_from(o->nstdio, c->report_fd);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  int err = ENOENT;
  for (char **p = c->paths; *p; p++) {
    execve(*p, (char *const *)o->argv, (char *const *)o->envp);
    if (errno == EACCES) err = EACCES; /* execvp: remember a denied candidate, go on searching */
    else if (errno != ENOENT && errno != ENOTDIR) {
      err = errno;
      break;
    }
  }
  errno = err;
  child_fail(c, STEP_EXECVE);
  return 127;
}

/* The execve candidates of file: itself when it holds '/', else each PATH entry of envp joined with it. One
 * allocation (pointers, then the strings); NULL when out of memory. */
static char **exec_candidates(const char *file, const char *const *envp) {
  if (strchr(file, '/')) {
    char **v = malloc(2 * sizeof *v + strlen(file) + 1);
    if (!v) return NULL;
    v[0] = (char *)(v + 2);
    strcpy(v[0], file);
    v[1] = NULL;
    return v;
  }
  const char *path = DEFAULT_PATH;
  for (const char *const *e = envp; e && *e; e++)
    if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  size_t n = 1, flen = strlen(file);
  for (const char *p = path; *p; p++) n += *p == ':';
  char **v = malloc((n + 1) * sizeof *v + strlen(path) + n * (flen + 2));
  if (!v) return NULL;
  char *s = (char *)(v + n + 1);
  size_t k = 0;
  for (const char *p = path;; p++) {
    const char *end = strchr(p, ':');
    size_t dl = end ? (size_t)(end - p) : strlen(p);
    v[k++] = s;
    if (dl) { /* an empty entry is the working directory */
      memcpy(s, p, dl);
      s += dl;
      *s++ = '/';
    }
    memcpy(s, file, flen + 1);
    s += flen + 1;
    if (!end) break;
    p = end;
  }
  v[k] = NULL;
  return v;
}

/* fd moved (close-on-exec) to a number >= min, so that the child's dup2 onto 0..min-1 never overwrites a source. */
static int raise_fd(int fd, int min) {
  if (fd >= min) return fd;
  int r = fcntl(fd, F_DUPFD_CLOEXEC, min);
  int e = errno;
  close(fd);
  errno = e;
  return r;
}

int osb_spawn(osb_spawn_opts *o, pid_t *pid, int *err_no, const char **step) {
  child_ctx c;
  memset(&c, 0, sizeof c);
  c.o = o;
  c.report_fd = -1;
  int pipefd[2] = {-1, -1}, owned[OSB_SPAWN_MAX_STDIO];
  char *stack = NULL;
  const char *what = "spawn";
  int n = o->nstdio;
  *pid = -1;
  for (int i = 0; i < OSB_SPAWN_MAX_STDIO; i++) c.src[i] = owned[i] = -1;
  if (n < 0 || n > OSB_SPAWN_MAX_STDIO || !o->file || !o->argv || !o->envp) {
    errno = EINVAL;
    goto fail;
  }
  for (int i = 0; i < n; i++) {
    osb_stdio *s = &o->stdio[i];
    if (s->kind == OSB_STDIO_PAIR) s->fd = -1;
  }
  for (int i = 0; i < n; i++) {
    osb_stdio *s = &o->stdio[i];
    if (s->kind == OSB_STDIO_NULL) {
      what = "open /dev/null";
      int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
      if (fd < 0 || (c.src[i] = owned[i] = raise_fd(fd, n)) < 0) goto fail;
    } else if (s->kind == OSB_STDIO_FD) {
      what = "fcntl";
      if ((c.src[i] = owned[i] = fcntl(s->fd, F_DUPFD_CLOEXEC, n)) < 0) goto fail;
    } else if (s->kind == OSB_STDIO_PAIR) {
      what = "socketpair";
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) goto fail;
      s->fd = sv[0];
      if ((c.src[i] = owned[i] = raise_fd(sv[1], n)) < 0) goto fail;
    } else {
      errno = EINVAL;
      goto fail;
    }
  }
  what = "pipe2";
  if (pipe2(pipefd, O_CLOEXEC) < 0) goto fail;
  if ((pipefd[1] = raise_fd(pipefd[1], n)) < 0) goto fail;
  c.report_fd = pipefd[1];
  what = "malloc";
  if (!(c.paths = exec_candidates(o->file, o->envp)) || !(stack = malloc(CHILD_STACK))) {
    errno = ENOMEM;
    goto fail;
  }
  /* every signal blocked across the clone: no handler of the caller may run on the child's stack. sigprocmask, not
   * pthread_sigmask (GLIBC_2.32 in libc, above the prebuilt's floor): on Linux it sets the calling thread's mask. */
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t p = clone(child_main, stack + CHILD_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
  int clone_err = errno;
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (p < 0) {
    errno = clone_err;
    what = "clone";
    goto fail;
  }
  /* the child has exec'd or exited: its report (if any) is in the pipe once our copy of the write end is closed */
  close(pipefd[1]);
  pipefd[1] = -1;
  child_report r;
  ssize_t got;
  do got = read(pipefd[0], &r, sizeof r);
  while (got < 0 && errno == EINTR);
  if (got == (ssize_t)sizeof r) {
    while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {
    }
    errno = r.err;
    what = r.step >= 0 && r.step <= STEP_EXECVE ? STEPS[r.step] : "spawn";
    goto fail;
  }
  for (int i = 0; i < n; i++)
    if (owned[i] >= 0) close(owned[i]);
  close(pipefd[0]);
  free(c.paths);
  free(stack);
  *pid = p;
  return 0;

fail:;
  int e = errno;
  for (int i = 0; i < n && i < OSB_SPAWN_MAX_STDIO; i++) {
    if (owned[i] >= 0) close(owned[i]);
    if (o->stdio[i].kind == OSB_STDIO_PAIR && o->stdio[i].fd >= 0) {
      close(o->stdio[i].fd);
      o->stdio[i].fd = -1;
    }
  }
  if (pipefd[0] >= 0) close(pipefd[0]);
  if (pipefd[1] >= 0) close(pipefd[1]);
  free(c.paths);
  free(stack);
  *err_no = e;
  *step = what;
  return -1;
}

/* ---- the reaper ---- */

typedef struct watch {
  struct watch *prev, *next;
  pid_t pid;
  int pidfd;
} watch;

struct osb_reaper {
  osb_exit_cb cb;
  void *ud;
  int ep, wake;
  pthread_t thread;
  pthread_mutex_t mu; /* guards the list */
  watch *head;
  long count;
};

static void unlink_watch(osb_reaper *r, watch *w) {
  if (w->prev) w->prev->next = w->next;
  else r->head = w->next;
  if (w->next) w->next->prev = w->prev;
  r->count--;
}

static void reap(osb_reaper *r, watch *w) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  int rc;
  do rc = waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG);
  while (rc < 0 && errno == EINTR);
  if (rc == 0 && si.si_pid == 0) return; /* readable before the exit is waitable: the next wakeup has it */
  int code = -1, signo = 0;
  if (rc == 0 && si.si_code == CLD_EXITED) code = si.si_status;
  else if (rc == 0) signo = si.si_status;
  epoll_ctl(r->ep, EPOLL_CTL_DEL, w->pidfd, NULL);
  close(w->pidfd);
  pthread_mutex_lock(&r->mu);
  unlink_watch(r, w);
  pthread_mutex_unlock(&r->mu);
  pid_t pid = w->pid;
  free(w);
  r->cb(r->ud, pid, code, signo);
}

static void *reaper_main(void *arg) {
  osb_reaper *r = arg;
  prctl(PR_SET_NAME, "osb-reaper"); /* findable in /proc/<pid>/task/<tid>/comm */
  struct epoll_event ev[32];
  for (;;) {
    int n = epoll_wait(r->ep, ev, 32, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return NULL;
    }
    for (int i = 0; i < n; i++) {
      if (!ev[i].data.ptr) return NULL; /* osb_reaper_stop */
      reap(r, ev[i].data.ptr);
    }
  }
}

osb_reaper *osb_reaper_new(osb_exit_cb cb, void *cb_ud, char *err, size_t errlen) {
  int probe = (int)syscall(SYS_pidfd_open, getpid(), 0);
  if (probe < 0) {
    snprintf(err, errlen, "pidfd_open is not available (%s): spawning without fork needs Linux >= 5.3",
             strerror(errno));
    return NULL;
  }
  close(probe);
  osb_reaper *r = calloc(1, sizeof *r);
  if (!r) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  r->cb = cb;
  r->ud = cb_ud;
  r->wake = -1;
  r->ep = epoll_create1(EPOLL_CLOEXEC);
  if (r->ep < 0 || (r->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) goto fail;
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  if (epoll_ctl(r->ep, EPOLL_CTL_ADD, r->wake, &ev) < 0) goto fail;
  pthread_mutex_init(&r->mu, NULL);
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old); /* the thread inherits: the caller's signal handlers never run on it */
  int rc = pthread_create(&r->thread, NULL, reaper_main, r);
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_mutex_destroy(&r->mu);
    errno = rc;
    goto fail;
  }
  return r;
fail:
  snprintf(err, errlen, "cannot start the reaper thread: %s", strerror(errno));
  if (r->wake >= 0) close(r->wake);
  if (r->ep >= 0) close(r->ep);
  free(r);
  return NULL;
}

int osb_reaper_spawn(osb_reaper *r, osb_spawn_opts *o, pid_t *pid, int *err_no, const char **step) {
  watch *w = calloc(1, sizeof *w);
  if (!w) {
    *err_no = ENOMEM;
    *step = "malloc";
    return -1;
  }
  if (osb_spawn(o, pid, err_no, step) != 0) {
    free(w);
    return -1;
  }
  w->pid = *pid;
  w->pidfd = (int)syscall(SYS_pidfd_open, *pid, 0);
  *step = "pidfd_open";
  if (w->pidfd >= 0) {
    pthread_mutex_lock(&r->mu);
    w->next = r->head;
    if (r->head) r->head->prev = w;
    r->head = w;
    r->count++;
    pthread_mutex_unlock(&r->mu);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, w->pidfd, &ev) == 0) return 0;
    *step = "epoll_ctl";
    pthread_mutex_lock(&r->mu);
    unlink_watch(r, w);
    pthread_mutex_unlock(&r->mu);
  }
  *err_no = errno;
  if (w->pidfd >= 0) close(w->pidfd);
  free(w);
  kill(*pid, SIGKILL);
  while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR) {
  }
  for (int i = 0; i < o->nstdio; i++)
    if (o->stdio[i].kind == OSB_STDIO_PAIR && o->stdio[i].fd >= 0) {
      close(o->stdio[i].fd);
      o->stdio[i].fd = -1;
    }
  *pid = -1;
  return -1;
}

long osb_reaper_count(osb_reaper *r) {
  pthread_mutex_lock(&r->mu);
  long n = r->count;
  pthread_mutex_unlock(&r->mu);
  return n;
}

void osb_reaper_stop(osb_reaper *r) {
  if (!r) return;
  uint64_t one = 1;
  ssize_t w = write(r->wake, &one, sizeof one);
  (void)w;
  pthread_join(r->thread, NULL);
  for (watch *x = r->head, *next; x; x = next) {
    next = x->next;
    close(x->pidfd);
    free(x);
  }
  close(r->wake);
  close(r->ep);
  pthread_mutex_destroy(&r->mu);
  free(r);
}
