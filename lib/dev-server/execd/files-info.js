// FileInfo objects, owner/group name lookup and OS-error mapping for execd's files API (local
// OpenSandbox-compatible server). FileInfo is exactly the real execd's shape:
//   {"path","type","size","modified_at","created_at","owner","group","mode"}
// with RFC 3339 UTC timestamps carrying nanoseconds (trailing zeros trimmed, as Go's RFC3339Nano), `created_at`
// = ctime (what execd reports on Linux), `mode` = the permission bits written as octal digits in a decimal
// integer (0755 -> 755), owner/group = names from the sandbox's /etc/passwd and /etc/group (numeric if unknown).
import fs from 'node:fs';
import { HttpError } from './http.js';

/**
 * name -> id and id -> name maps of a passwd/group file (`name:x:id:...` lines). Parsed again whenever the file is not
 * the one parsed last (inode, size, mtime or ctime differ: one stat per call instead of a read and a parse; a change
 * that keeps all four, i.e. the same size within one tick of the file system's clock, is seen at the next change).
 * A missing or unreadable file gives empty maps.
 */
const parsed = new Map(); // file -> { key, value }
const EMPTY = Object.freeze({ byName: new Map(), byId: new Map() });

export function idTable(file) {
  try {
    const st = fs.statSync(file, { bigint: true });
    const key = `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
    const hit = parsed.get(file);
    if (hit?.key === key) return hit.value;
    const text = fs.readFileSync(file, 'utf8');
    const byName = new Map();
    const byId = new Map();
    for (const l of text.split('\n')) {
      if (!l || l.startsWith('#')) continue;
      const r = l.split(':');
      const id = Number(r[2]);
      if (!r[0] || !Number.isInteger(id)) continue;
      if (!byName.has(r[0])) byName.set(r[0], id);
      if (!byId.has(id)) byId.set(id, r[0]);
    }
    const value = { byName, byId };
    parsed.set(file, { key, value });
    return value;
  } catch {
    parsed.delete(file);
    return EMPTY;
  }
}

const table = (kind) => idTable(kind === 'user' ? '/etc/passwd' : '/etc/group');

/** Numeric uid/gid of a user/group name, or undefined when the name does not resolve. */
export function lookupId(kind, name) {
  return table(kind).byName.get(name);
}

export function formatTime(ns) {
  const secs = ns / 1_000_000_000n;
  let frac = ns % 1_000_000_000n;
  let s = secs;
  if (frac < 0n) {
    frac += 1_000_000_000n;
    s -= 1n;
  }
  const base = new Date(Number(s) * 1000).toISOString().slice(0, 19);
  const digits = frac === 0n ? '' : `.${frac.toString().padStart(9, '0').replace(/0+$/, '')}`;
  return `${base}${digits}Z`;
}

function entryType(st) {
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isDirectory()) return 'directory';
  if (st.isFile()) return 'file';
  return 'other';
}

/** FileInfo for an absolute path and its bigint (l)stat result. */
export function buildFileInfo(absPath, st, names = { users: table('user'), groups: table('group') }) {
  const uid = Number(st.uid);
  const gid = Number(st.gid);
  return {
    path: absPath,
    type: entryType(st),
    size: Number(st.size),
    modified_at: formatTime(st.mtimeNs),
    created_at: formatTime(st.ctimeNs),
    owner: names.users.byId.get(uid) ?? String(uid),
    group: names.groups.byId.get(gid) ?? String(gid),
    mode: Number((Number(st.mode) & 0o777).toString(8)),
  };
}

/** Name tables for building many FileInfos in one request. */
export function nameTables() {
  return { users: table('user'), groups: table('group') };
}

/** Go-style text of a Node fs error: "lstat /a: no such file or directory". */
export function osMessage(err) {
  if (!err?.code || !err.syscall) return String(err?.message ?? err);
  const m = /^[A-Z0-9_]+: ([^,]+)/.exec(err.message);
  const what = m ? m[1] : err.code;
  return err.path ? `${err.syscall} ${err.path}: ${what}` : `${err.syscall}: ${what}`;
}

/** execd's handleFileError: missing -> 404 FILE_NOT_FOUND, anything else -> 500 RUNTIME_ERROR. */
export function fileError(err, prefix = '') {
  if (err instanceof HttpError) return err;
  const text = prefix + osMessage(err);
  if (err?.code === 'ENOENT') return new HttpError(404, 'FILE_NOT_FOUND', `file not found. ${text}`);
  return new HttpError(500, 'RUNTIME_ERROR', `error accessing file: ${text}`);
}

/**
 * Parses a mode given as octal digits in a decimal integer (644 -> 0o644). 0/absent -> undefined (leave as is).
 * Digits 8/9, negatives and non-integers are a 400.
 */
export function parseMode(mode, where) {
  if (mode === undefined || mode === null || mode === 0) return undefined;
  if (!Number.isInteger(mode) || mode < 0 || !/^[0-7]+$/.test(String(mode)) || parseInt(String(mode), 8) > 0o7777) {
    throw new HttpError(400, 'INVALID_REQUEST_BODY',
      `invalid mode ${JSON.stringify(mode)} for ${where}: give the octal digits as a decimal integer, e.g. 644`);
  }
  return parseInt(String(mode), 8);
}

/**
 * chown to the named owner/group. Names that do not resolve are ignored (the file keeps execd's uid/gid);
 * nothing to do when neither resolves.
 */
export async function applyOwnership(absPath, owner, group) {
  const uid = owner ? lookupId('user', owner) : undefined;
  const gid = group ? lookupId('group', group) : undefined;
  if (uid === undefined && gid === undefined) return;
  await fs.promises.chown(absPath, uid ?? -1, gid ?? -1);
}

/** chmod (when a mode is given) then chown (when names resolve): the real execd's ChmodFile. */
export async function applyPermission(absPath, perm, where) {
  const mode = parseMode(perm?.mode, where);
  if (mode !== undefined) await fs.promises.chmod(absPath, mode);
  await applyOwnership(absPath, perm?.owner, perm?.group);
}
