// Lets another local uid (the tests' `nobody`) run this checkout's Node and server code: search permission on the
// ancestors of the checkout and of the Node binary that do not grant it to others (a checkout in a 0700 temp
// directory, as fresh clones often are), through the same ACL helper the server uses for its sandbox uid.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureTraversable } from '../../lib/dev-server/security.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Makes the checkout and process.execPath reachable by `uid` (root only: setfacl on directories it does not own). */
export function letUserRunCheckout(uid) {
  ensureTraversable(path.join(ROOT, 'package.json'), { uid });
  ensureTraversable(process.execPath, { uid });
}

/**
 * The argv running `argv` as nobody (uid/gid 65534, no groups) with a usable /dev/net/tun, which slirp4netns opens: it
 * is 0666 on a usual system; where it is not, the command gets a 0666 node of its own in a private mount namespace
 * (gone with it, made in the empty directory `dir`) instead of a change to the host's /dev.
 */
export function asNobodyWithTun(argv, dir) {
  const asNobody = ['setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups', ...argv];
  if ((fs.statSync('/dev/net/tun').mode & 0o006) === 0o006) return asNobody;
  const quote = (a) => `'${a.replace(/'/g, `'\\''`)}'`;
  return ['unshare', '-m', '--propagation', 'private', 'sh', '-c',
    `mount -t tmpfs none ${dir} && mknod -m 666 ${dir}/tun c 10 200 && mount --bind ${dir}/tun /dev/net/tun && umount -l ${dir} && exec ${asNobody.map(quote).join(' ')}`];
}
