// Lets another local uid (the tests' `nobody`) run this checkout's Node and server code: search permission on the
// ancestors of the checkout and of the Node binary that do not grant it to others (a checkout in a 0700 temp
// directory, as fresh clones often are), through the same ACL helper the server uses for its sandbox uid.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureTraversable } from '../../lib/dev-server/security.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Makes the checkout and process.execPath reachable by `uid` (root only: setfacl on directories it does not own). */
export function letUserRunCheckout(uid) {
  ensureTraversable(path.join(ROOT, 'package.json'), { uid });
  ensureTraversable(process.execPath, { uid });
}
