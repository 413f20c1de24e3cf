// The reaper of one server instance: a small detached shell that waits for the server to be gone (its stdin, a pipe
// from the server, reaches EOF however the server ends, SIGKILL included) and then removes what the kernel would
// otherwise keep: the sandboxes' disk mounts (loop devices backed by the instance's images), the instance's image
// directory and its cgroups (their processes died with the server: bwrap --die-with-parent). After a clean close()
// there is nothing left for it and it exits at once. The next server start still sweeps what a reaper could not
// remove (disk.js, cgroups.js).
import { spawn } from 'node:child_process';

// $1: the sandboxes' directory (mount points below it), $2: the instance's image directory, then cgroup instance dirs
const SCRIPT = `cat > /dev/null
sb=$1 disks=$2
shift 2
[ -n "$disks" ] && while read -r src mp rest; do
  case $mp in "$sb"/*) ;; *) continue ;; esac
  case $src in /dev/loop*) ;; *) continue ;; esac
  case $(cat "/sys/block/\${src#/dev/}/loop/backing_file" 2>/dev/null) in "$disks"/*) umount -l "$mp" ;; esac
done < /proc/self/mounts
[ -z "$disks" ] || rm -rf "$disks"
for d in "$@"; do
  for i in $(seq 100); do
    for c in "$d"/*/; do [ -d "$c" ] && rmdir "$c" 2>/dev/null; done
    rmdir "$d" 2>/dev/null || [ ! -d "$d" ] && break
    sleep 0.05
  done
done
`;

/**
 * Starts the reaper for `sandboxDir` (mounts below it whose loop image is in `disksDir`), `disksDir` (or null) and
 * `cgroupDirs`. Returns { close() }: called by the server's close() once it removed everything itself.
 */
export function startReaper({ sandboxDir, disksDir, cgroupDirs }) {
  const child = spawn('sh', ['-c', SCRIPT, 'mastra-opensandbox-reaper', sandboxDir, disksDir ?? '', ...cgroupDirs], {
    detached: true, // its own process group and session: a signal to the server's group does not reach it
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  child.on('error', () => {});
  child.stdin.on('error', () => {});
  child.unref();
  child.stdin.unref?.();
  return {
    close() {
      child.stdin.end();
    },
  };
}
