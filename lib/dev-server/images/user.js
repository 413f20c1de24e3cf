// The image config's `User` resolved as Docker resolves it (upstream's Docker runtime passes no user, so Docker's
// default applies: the image's User): `uid`, `name`, `uid:gid`, `name:group` (any mix), names looked up in the
// image's /etc/passwd and /etc/group. A numeric uid missing from /etc/passwd runs with gid 0 and HOME /; a name that
// is missing fails the start (Docker: "unable to find user ...: no matching entries in passwd file").
// The files are read from the unpacked layers (top first: the first layer holding the file, or a whiteout of it,
// decides; an opaque /etc in a layer above one with the file is not detected). Layers are the store's (immutable, owned
// by it), but their content is a registry's: nothing is followed (an `etc` that is not a directory, a passwd that is
// not a regular file: none) and at most MAX_BYTES are read.
import fs from 'node:fs';
import path from 'node:path';

const MAX_BYTES = 1 << 20;
const MAX_ID = 2 ** 31 - 1; // Docker refuses ids above it

/** Thrown for a User the image cannot resolve; the create answers it as a start failure. */
export class ImageUserError extends Error {}

/** The content of `rel` (etc/passwd, etc/group) in the merged layers (bottom first), or null. */
function readFromLayers(layers, rel) {
  for (let i = layers.length - 1; i >= 0; i--) {
    const dir = path.join(layers[i], path.dirname(rel));
    const st = fs.lstatSync(dir, { throwIfNoEntry: false });
    if (!st) continue; // this layer has no etc/
    if (!st.isDirectory()) return null; // a whiteout of etc/ (or a file or symlink in its place): no such file above
    const file = path.join(layers[i], rel);
    const fst0 = fs.lstatSync(file, { throwIfNoEntry: false });
    if (!fst0) continue;
    if (!fst0.isFile()) return null; // a whiteout (character device 0/0), a symlink, anything else: never opened
    let fd;
    try {
      fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
    } catch {
      return null;
    }
    try {
      const fst = fs.fstatSync(fd);
      if (!fst.isFile()) return null;
      const buf = Buffer.alloc(Math.min(fst.size, MAX_BYTES));
      const n = fs.readSync(fd, buf, 0, buf.length, 0);
      return buf.subarray(0, n).toString('utf8');
    } finally {
      fs.closeSync(fd);
    }
  }
  return null;
}

/** Lines of a passwd/group file split into fields (comments and malformed lines skipped). */
function entries(text, minFields) {
  return (text ?? '').split('\n').filter((l) => l && !l.startsWith('#')).map((l) => l.split(':')).filter((f) => f.length >= minFields);
}

const numeric = (s) => /^\d+$/.test(s);
function id(s, what, spec) {
  const n = Number(s);
  if (!Number.isSafeInteger(n) || n > MAX_ID) throw new ImageUserError(`${what} ${s} of user "${spec}" is out of range (0..${MAX_ID})`);
  return n;
}

/**
 * `user` (the config's User) resolved against the image's layers: { uid, gid, home }, or null for an empty User (the
 * sandbox's root, as before). Throws ImageUserError with Docker's wording when a name is not found.
 */
export function resolveImageUser(layers, user) {
  if (!user) return null;
  if (typeof user !== 'string') throw new ImageUserError(`the image's User ${JSON.stringify(user)} is not a string`);
  const colon = user.indexOf(':');
  const u = colon < 0 ? user : user.slice(0, colon);
  const g = colon < 0 ? null : user.slice(colon + 1);
  if (!u) throw new ImageUserError(`the image's User "${user}" names no user`);
  const passwd = entries(readFromLayers(layers, 'etc/passwd'), 7);
  let uid;
  let gid = 0;
  let home = '/';
  const byName = numeric(u) ? null : passwd.find((f) => f[0] === u);
  const byId = numeric(u) ? passwd.find((f) => f[2] === u) : null;
  const found = byName ?? byId;
  if (!numeric(u) && !found) throw new ImageUserError(`unable to find user ${u}: no matching entries in passwd file`);
  if (found) {
    uid = id(found[2], 'uid', user);
    gid = numeric(found[3]) ? id(found[3], 'gid', user) : 0;
    home = found[5] || '/';
  } else {
    uid = id(u, 'uid', user);
  }
  if (g !== null && g !== '') {
    if (numeric(g)) {
      gid = id(g, 'gid', user);
    } else {
      const group = entries(readFromLayers(layers, 'etc/group'), 3).find((f) => f[0] === g);
      if (!group || !numeric(group[2])) throw new ImageUserError(`unable to find group ${g}: no matching entries in group file`);
      gid = id(group[2], 'gid', user);
    }
  }
  return { uid, gid, home };
}
