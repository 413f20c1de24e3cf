// Volumes of the local server's sandboxes (host paths and named `pvc` volumes): each is resolved ONCE into an open
// O_PATH descriptor by a walk from "/" that follows no symbolic link (a missing directory is made through its
// parent's descriptor), checked on that descriptor, and handed as that descriptor to the ACL change (setfacl on
// /proc/self/fd/N) and to bubblewrap (--bind-fd / --ro-bind-fd, which verifies that what it mounted is the
// descriptor's object), never as the path string again: a sandbox swapping a directory and a symlink inside a
// volume it can write cannot redirect another sandbox's mount or ACL (docs/dev-server-security.md "Host volumes").
import fs from 'node:fs';
import path from 'node:path';
import { ApiError } from './validate.js';
import { grantAccess, modeAllows, setfacl } from './security.js';

/** open(2)'s O_PATH (the same value on x64 and arm64; Node's fs.constants lacks it). */
const O_PATH = 0o10000000;
const OPEN_NOFOLLOW = O_PATH | fs.constants.O_NOFOLLOW;

/** Whether path `p` is `dir` or lies below it (both absolute and resolved). */
export const within = (p, dir) => p === dir || p.startsWith(dir.endsWith('/') ? dir : dir + '/');
const fdPath = (fd) => `/proc/self/fd/${fd}`;

function closeAll(fds) {
  for (const fd of fds) {
    try {
      fs.closeSync(fd);
    } catch { /* already closed */ }
  }
}

/**
 * Opens directory `abs` (absolute, normalized) with O_PATH one component at a time from "/", each looked up in the
 * descriptor of its parent (/proc/self/fd/P/name) with O_NOFOLLOW. Returns [{ fd, path, made }] from "/" to the
 * deepest directory opened (the caller closes every fd); without `create` it stops before the first missing one,
 * with `create` it makes it (mkdir through the parent's descriptor; `made`). Throws { walkRefusal: text } for a
 * symbolic link or a non-directory on the way.
 */
export function openDirChain(abs, { create = false } = {}) {
  const chain = [{ fd: fs.openSync('/', O_PATH | fs.constants.O_DIRECTORY), path: '/', made: false }];
  try {
    for (const name of abs.split('/').filter(Boolean)) {
      const parent = chain.at(-1);
      const at = `${fdPath(parent.fd)}/${name}`;
      const here = path.join(parent.path, name);
      let made = false;
      let fd;
      try {
        fd = fs.openSync(at, OPEN_NOFOLLOW);
      } catch (err) {
        if (err.code !== 'ENOENT' || !create) {
          if (err.code === 'ENOENT') return chain;
          throw err;
        }
        try {
          fs.mkdirSync(at);
          made = true;
        } catch (e) {
          if (e.code !== 'EEXIST') throw e;
        }
        fd = fs.openSync(at, OPEN_NOFOLLOW);
      }
      chain.push({ fd, path: here, made });
      const st = fs.fstatSync(fd);
      if (st.isSymbolicLink()) throw Object.assign(new Error(`${here} is a symbolic link`), { walkRefusal: `goes through the symbolic link ${here} (volumes are opened without following symbolic links: give the path it points to)` });
      if (!st.isDirectory()) throw Object.assign(new Error(`${here} is not a directory`), { walkRefusal: `goes through ${here}, which is not a directory` });
    }
    return chain;
  } catch (err) {
    closeAll(chain.map((c) => c.fd));
    throw err;
  }
}

/**
 * Which host paths the server reads or binds for a sandbox (host volumes, offline images): under an allowedHostPaths
 * entry and not overlapping the data directory, both resolved by realpath. refusal(p) of an absolute, resolved p is
 * null when allowed, else why not ("is not under an allowed host path", "overlaps the server's data directory").
 */
export function hostPathRule(allowedHostPaths, dataDir) {
  const real = (p) => {
    try {
      return fs.realpathSync(p);
    } catch {
      return path.resolve(p);
    }
  };
  const allowed = allowedHostPaths.map(real);
  const data = real(dataDir);
  const notAllowed = `is not under an allowed host path${allowed.length ? '' : ' (no host paths are allowed on this server)'}`;
  return {
    notAllowed,
    refusal: (p) => (!allowed.some((a) => within(p, a)) ? notAllowed
      : within(p, data) || within(data, p) ? "overlaps the server's data directory" : null),
  };
}

/**
 * Resolves a create's volumes into bind mounts [{ fd, dest, readOnly }] (the caller closes each fd once bubblewrap
 * started). Host paths must lie under an allowedHostPaths entry (resolved by realpath) and not overlap the data
 * directory; named volumes live in volumesDir/<claimName>. Every volume's existing part is walked before any
 * directory is created. With `identity` ({ uid, gid }: a root-started server) the sandbox gets, through the
 * descriptors, search permission on the ancestors bubblewrap resolves and access to the volume when its mode does
 * not give it (an ACL for the sandbox group); a named volume's directories made for it belong to the sandbox user,
 * and the group gets rwx on them.
 */
export function resolveVolumes(volumes, { allowedHostPaths, volumesDir, dataDir, identity, missingPvcStatus = 404 }) {
  const hostRule = hostPathRule(allowedHostPaths, dataDir);
  const claims = fs.realpathSync(volumesDir);
  const plans = volumes.map((v) => {
    if (v.host) {
      const requested = path.resolve(v.host.path, v.subPath ?? '');
      const denied = (why) => new ApiError(400, 'VOLUME::HOST_PATH_NOT_ALLOWED', `Host path ${requested} of volume '${v.name}' ${why}.`);
      const why = hostRule.refusal(requested);
      if (why) throw denied(why);
      return { v, requested, denied: (w) => denied(w ?? hostRule.notAllowed), check: (p) => !hostRule.refusal(p) };
    }
    if (v.pvc) {
      const base = path.join(claims, v.pvc.claimName);
      if (!fs.existsSync(base) && v.pvc.createIfNotExists === false) {
        throw new ApiError(missingPvcStatus, 'VOLUME::PVC_NOT_FOUND', `Volume '${v.pvc.claimName}' does not exist and createIfNotExists is false.`);
      }
      const denied = (why) => new ApiError(400, 'VOLUME::INVALID_SUB_PATH', `subPath of volume '${v.name}' ${why ?? 'leaves the volume'}.`);
      return { v, requested: path.join(base, v.subPath ?? ''), denied, check: (p) => within(p, base), claim: base };
    }
    throw new ApiError(400, 'VOLUME::UNSUPPORTED_BACKEND', `Volume '${v.name}': ossfs volumes are not supported by the local server.`);
  });
  const walk = (plan, create) => {
    try {
      return openDirChain(plan.requested, { create });
    } catch (err) {
      if (err.walkRefusal) throw plan.denied(err.walkRefusal);
      throw err;
    }
  };
  for (const plan of plans) closeAll(walk(plan, false).map((c) => c.fd)); // refusals before anything is made
  const binds = [];
  try {
    for (const plan of plans) {
      const chain = walk(plan, true);
      const { fd } = chain.at(-1);
      try {
        // what the descriptor holds, by the kernel's name for it: the walk followed no link, so this is a re-check
        const held = fs.readlinkSync(fdPath(fd));
        if (!plan.check(held)) throw plan.denied();
        if (identity) giveAccess(plan, chain, identity);
      } catch (err) {
        closeAll(chain.map((c) => c.fd));
        throw err;
      }
      closeAll(chain.slice(0, -1).map((c) => c.fd));
      binds.push({ fd, dest: path.posix.normalize(plan.v.mountPath), readOnly: plan.v.readOnly === true });
    }
  } catch (err) {
    closeAll(binds.map((b) => b.fd));
    throw err;
  }
  return binds;
}

/** The sandbox's access to one volume, every change through a descriptor of the walk (root-started server). */
function giveAccess(plan, chain, identity) {
  const target = chain.at(-1);
  // bubblewrap, as the sandbox user, resolves the descriptor's path: it needs search permission on each ancestor
  for (const c of chain.slice(0, -1)) {
    if (!modeAllows(fs.fstatSync(c.fd), identity, 0o1)) setfacl(['-m', `g:${identity.gid}:x`], identity, { fd: c.fd, path: c.path });
  }
  if (plan.claim) {
    // a named volume is shared by the sandboxes that mount it, each its own uid: what the server made for it (the
    // claim, subPath dirs) belongs to the sandbox, and the first made gets the sandbox group's rwx (default entries
    // too, inherited below), so what one sandbox writes there another can change
    const made = chain.filter((x) => x.made && within(x.path, plan.claim));
    for (const c of made) fs.chownSync(fdPath(c.fd), identity.uid, identity.gid);
    if (made.length) grantAccess({ fd: made[0].fd, path: made[0].path }, identity, true, identity.uid);
  }
  const write = plan.v.readOnly !== true;
  const st = fs.fstatSync(target.fd);
  if (!modeAllows(st, identity, write ? 0o7 : 0o5)) grantAccess({ fd: target.fd, path: target.path }, identity, write, st.uid);
}
