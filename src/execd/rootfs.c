/* rootfs: the overlay root of an image sandbox (see rootfs.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "rootfs.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* the new mount API's constants (linux/mount.h; the static musl build has no kernel headers); the syscall numbers
 * are the same on every architecture for these */
#ifndef SYS_open_tree
#define SYS_open_tree 428
#define SYS_move_mount 429
#define SYS_fsopen 430
#define SYS_fsconfig 431
#define SYS_fsmount 432
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#define OSB_FSOPEN_CLOEXEC 0x1u
#define OSB_FSCONFIG_SET_FLAG 0u
#define OSB_FSCONFIG_SET_STRING 1u
#define OSB_FSCONFIG_CMD_CREATE 6u
#define OSB_FSMOUNT_CLOEXEC 0x1u
#define OSB_MOUNT_ATTR_RDONLY 0x1u
#define OSB_MOUNT_ATTR_NOSUID 0x2u
#define OSB_MOUNT_ATTR_NODEV 0x4u
#define OSB_MOUNT_ATTR_IDMAP 0x100000u
#define OSB_OPEN_TREE_CLONE 0x1u
#define OSB_MOVE_MOUNT_F_EMPTY_PATH 0x4u
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif
#ifndef AT_NO_AUTOMOUNT
#define AT_NO_AUTOMOUNT 0x800
#endif
struct osb_mount_attr {
  unsigned long long attr_set, attr_clr, propagation, userns_fd;
};

static int parse_ul(const char *s, unsigned long *out) {
  char *end;
  if (!s || !*s || *s < '0' || *s > '9') return -1;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || end == s) return -1;
  *out = v;
  return (int)(end - s);
}

/* "A:B:C:D" four decimal numbers */
static int parse_idmap(const char *s, unsigned long v[4]) {
  for (int i = 0; i < 4; i++) {
    int n = parse_ul(s, &v[i]);
    if (n < 0 || v[i] > 0xfffffffeUL) return -1;
    s += n;
    if (i < 3 && *s++ != ':') return -1;
  }
  return *s ? -1 : 0;
}

int rootfs_parse(int argc, char **argv, rootfs_args *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (argc < 2 || strcmp(argv[1], "--image-root") != 0) {
    snprintf(err, errlen, "not --image-root");
    return -1;
  }
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      if (i + 1 >= argc) {
        snprintf(err, errlen, "no bubblewrap command after --");
        return -1;
      }
      out->exec_argv = &argv[i + 1];
      break;
    }
    if (i + 1 >= argc) {
      snprintf(err, errlen, "%s needs a value", a);
      return -1;
    }
    const char *v = argv[++i];
    if (strcmp(a, "--rootfs") == 0) out->rootfs = v;
    else if (strcmp(a, "--upper") == 0) out->upper = v;
    else if (strcmp(a, "--work") == 0) out->work = v;
    else if (strcmp(a, "--layer") == 0) {
      if (out->nlayers == ROOTFS_MAX_LAYERS) {
        snprintf(err, errlen, "more than %d layers", ROOTFS_MAX_LAYERS);
        return -1;
      }
      out->layers[out->nlayers++] = v;
    } else if (strcmp(a, "--idmap") == 0) {
      unsigned long m[4];
      if (parse_idmap(v, m) != 0) {
        snprintf(err, errlen, "--idmap wants OWNERUID:OWNERGID:UID:GID, not %s", v);
        return -1;
      }
      out->idmap = 1;
      out->owner_uid = m[0], out->owner_gid = m[1], out->uid = m[2], out->gid = m[3];
    } else {
      snprintf(err, errlen, "unknown option %s", a);
      return -1;
    }
  }
  if (!out->rootfs || !out->upper || !out->work) {
    snprintf(err, errlen, "--rootfs, --upper and --work are required");
    return -1;
  }
  const char *dirs[3] = {out->rootfs, out->upper, out->work};
  for (int k = 0; k < 3; k++)
    if (dirs[k][0] != '/') {
      snprintf(err, errlen, "%s is not an absolute path", dirs[k]);
      return -1;
    }
  for (size_t k = 0; k < out->nlayers; k++)
    if (out->layers[k][0] != '/' || strchr(out->layers[k], ':') || strchr(out->layers[k], ',')) {
      snprintf(err, errlen, "layer %s: not an absolute path without ':' or ','", out->layers[k]);
      return -1;
    }
  if (out->nlayers == 0) {
    snprintf(err, errlen, "no --layer");
    return -1;
  }
  if (!out->exec_argv) {
    snprintf(err, errlen, "no -- BWRAP ARGS");
    return -1;
  }
  return 0;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  int e = errno;
  close(fd);
  errno = e;
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

#define FAIL(...)                                  \
  do {                                             \
    fprintf(stderr, "osb-execd --image-root: ");   \
    fprintf(stderr, __VA_ARGS__);                  \
    fprintf(stderr, ": %s\n", strerror(errno));    \
    return 125;                                    \
  } while (0)

/* A user namespace whose uid_map / gid_map map owner -> uid / gid (host), as an open descriptor; -1 on failure. */
static int idmap_userns(const rootfs_args *a) {
  int ready[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) || pipe2(hold, O_CLOEXEC)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(ready[0]);
    close(hold[1]);
    char c = unshare(CLONE_NEWUSER) == 0 ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    (void)!read(hold[0], &c, 1); /* until the parent has the namespace */
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  char c = 'n', path[64], map[96];
  int fd = -1;
  if (read(ready[0], &c, 1) == 1 && c == 'y') {
    snprintf(map, sizeof map, "%lu %lu 1\n", a->owner_uid, a->uid);
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    if (write_file(path, map) == 0) {
      snprintf(map, sizeof map, "%lu %lu 1\n", a->owner_gid, a->gid);
      snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
      if (write_file(path, map) == 0) {
        snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
      }
    }
  }
  int e = errno;
  close(ready[0]);
  close(hold[1]);
  waitpid(pid, NULL, 0);
  errno = e;
  return fd;
}

int rootfs_main(int argc, char **argv) {
  rootfs_args a;
  char err[256];
  if (rootfs_parse(argc, argv, &a, err, sizeof err) != 0) {
    fprintf(stderr, "osb-execd --image-root: %s\n", err);
    return 2;
  }
  if (a.idmap) {
    if (geteuid() != 0) {
      errno = EPERM;
      FAIL("--idmap needs root");
    }
    if (unshare(CLONE_NEWNS)) FAIL("unshare(CLONE_NEWNS)");
  } else {
    uid_t uid = geteuid();
    gid_t gid = getegid();
    char map[64];
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS)) FAIL("unshare(CLONE_NEWUSER|CLONE_NEWNS)");
    if (write_file("/proc/self/setgroups", "deny")) FAIL("setgroups deny");
    snprintf(map, sizeof map, "0 %lu 1\n", (unsigned long)uid);
    if (write_file("/proc/self/uid_map", map)) FAIL("uid_map");
    snprintf(map, sizeof map, "0 %lu 1\n", (unsigned long)gid);
    if (write_file("/proc/self/gid_map", map)) FAIL("gid_map");
  }
  /* nothing mounted here reaches the host's namespace */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) FAIL("making / private");
  int userns = -1;
  if (a.idmap && (userns = idmap_userns(&a)) < 0) FAIL("the idmap user namespace");
  /* host root: each layer an idmapped mount, moved to <rootfs>/<i> on a tmpfs (overlay clones each lower mount,
   * which a detached one cannot be); the overlay is then mounted over that tmpfs */
  char lpath[ROOTFS_MAX_LAYERS][32];
  if (a.idmap) {
    if (mount("tmpfs", a.rootfs, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=64k")) FAIL("tmpfs at %s", a.rootfs);
    if (chdir(a.rootfs)) FAIL("chdir %s", a.rootfs);
  }
  int fs = (int)syscall(SYS_fsopen, "overlay", OSB_FSOPEN_CLOEXEC);
  if (fs < 0) FAIL("fsopen(overlay)");
  for (size_t i = a.nlayers; i-- > 0;) { /* overlay wants the top layer first */
    const char *lower = a.layers[i];
    if (a.idmap) {
      snprintf(lpath[i], sizeof lpath[i], "%zu", i);
      if (mkdir(lpath[i], 0700)) FAIL("mkdir %s", lpath[i]);
      int t = (int)syscall(SYS_open_tree, AT_FDCWD, a.layers[i], OSB_OPEN_TREE_CLONE | O_CLOEXEC | AT_NO_AUTOMOUNT | AT_SYMLINK_NOFOLLOW);
      if (t < 0) FAIL("open_tree %s", a.layers[i]);
      struct osb_mount_attr attr = {.attr_set = OSB_MOUNT_ATTR_IDMAP | OSB_MOUNT_ATTR_RDONLY | OSB_MOUNT_ATTR_NOSUID | OSB_MOUNT_ATTR_NODEV, .userns_fd = (unsigned long long)userns};
      if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &attr, sizeof attr)) FAIL("idmapping %s", a.layers[i]);
      if (syscall(SYS_move_mount, t, "", AT_FDCWD, lpath[i], OSB_MOVE_MOUNT_F_EMPTY_PATH)) FAIL("mounting layer %s", a.layers[i]);
      close(t);
      lower = lpath[i];
    }
    if (syscall(SYS_fsconfig, fs, OSB_FSCONFIG_SET_STRING, "lowerdir+", lower, 0)) FAIL("overlay lowerdir+ %s", a.layers[i]);
  }
  if (userns >= 0) close(userns);
  if (syscall(SYS_fsconfig, fs, OSB_FSCONFIG_SET_STRING, "upperdir", a.upper, 0)) FAIL("overlay upperdir %s", a.upper);
  if (syscall(SYS_fsconfig, fs, OSB_FSCONFIG_SET_STRING, "workdir", a.work, 0)) FAIL("overlay workdir %s", a.work);
  if (syscall(SYS_fsconfig, fs, OSB_FSCONFIG_SET_FLAG, "userxattr", NULL, 0)) FAIL("overlay userxattr");
  if (syscall(SYS_fsconfig, fs, OSB_FSCONFIG_CMD_CREATE, NULL, NULL, 0)) FAIL("creating the overlay");
  int m = (int)syscall(SYS_fsmount, fs, OSB_FSMOUNT_CLOEXEC, OSB_MOUNT_ATTR_NOSUID | OSB_MOUNT_ATTR_NODEV);
  if (m < 0) FAIL("fsmount");
  if (syscall(SYS_move_mount, m, "", AT_FDCWD, a.rootfs, OSB_MOVE_MOUNT_F_EMPTY_PATH)) FAIL("mounting the overlay at %s", a.rootfs);
  close(m);
  close(fs);
  if (chdir("/")) FAIL("chdir /");
  if (a.idmap) {
    if (setgroups(0, NULL) || setgid((gid_t)a.gid) || setuid((uid_t)a.uid)) FAIL("dropping to %lu:%lu", a.uid, a.gid);
  }
  execv(a.exec_argv[0], a.exec_argv);
  FAIL("exec %s", a.exec_argv[0]);
}
