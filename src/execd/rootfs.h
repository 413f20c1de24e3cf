/* rootfs: `osb-execd --image-root ...`, the step before bubblewrap of a sandbox that runs on a container image
 * (lib/dev-server/runner.js). In a private mount namespace it mounts the image's unpacked layers (read-only, shared by
 * every sandbox of the image) under the sandbox's own writable layer with overlayfs (userxattr, nosuid, nodev), then
 * execs bubblewrap, which binds that overlay as the sandbox's "/".
 *
 * Two modes:
 *  - host root (--idmap OWNERUID:OWNERGID:UID:GID): the layers' files are owned by OWNER (a uid outside every sandbox's
 *    range); each layer is an idmapped mount (mount_setattr MOUNT_ATTR_IDMAP) showing them as owned by UID:GID (the
 *    sandbox's host uid, root inside); then privileges drop to UID:GID before bubblewrap.
 *  - not root (no --idmap): the layers are owned by the server's own uid; a user namespace mapping that uid to root is
 *    made first (bubblewrap then makes the sandbox's own inside it).
 *
 * Command line (everything after "--" is bubblewrap's argv, argv[0] its path):
 *   osb-execd --image-root --rootfs DIR --upper DIR --work DIR [--idmap O:O:U:G] --layer DIR... -- BWRAP ARGS...
 * Layers are given bottom first. Ownership: rootfs_parse keeps pointers into argv (nothing allocated). */
#ifndef OSB_ROOTFS_H
#define OSB_ROOTFS_H

#include <stddef.h>
#include <sys/types.h>

#define ROOTFS_MAX_LAYERS 128

typedef struct {
  const char *rootfs, *upper, *work;
  const char *layers[ROOTFS_MAX_LAYERS]; /* bottom first */
  size_t nlayers;
  int idmap; /* 1: host root mode */
  unsigned long owner_uid, owner_gid, uid, gid;
  char **exec_argv; /* bubblewrap's argv (NULL-terminated, inside the caller's argv) */
} rootfs_args;

/* Parses argv (argv[0] the program, argv[1] "--image-root"). 0, or -1 with a message in err (size errlen). */
int rootfs_parse(int argc, char **argv, rootfs_args *out, char *err, size_t errlen);

/* Runs the step: mounts, drops, execs bubblewrap. Returns only on failure (exit status, message on stderr). */
int rootfs_main(int argc, char **argv);

#endif
