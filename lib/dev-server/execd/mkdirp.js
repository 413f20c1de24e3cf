// mkdir -p for execd. Node's own `mkdir(dir, { recursive: true })` never returns when a parent refuses new entries
// with ENOENT (e.g. under /proc): it retries forever. This walks the path one component at a time instead, so
// every failure is an error. An existing directory costs one stat. Both variants return the first directory they created, or undefined (like Node's).
import fs from 'node:fs';
import path from 'node:path';

function prefixes(dir) {
  const abs = path.resolve(dir);
  const parts = abs.split(path.sep).filter(Boolean);
  return parts.map((_, i) => path.sep + parts.slice(0, i + 1).join(path.sep));
}

function notDirectory(p) {
  const err = new Error(`ENOTDIR: not a directory, mkdir '${p}'`);
  err.code = 'ENOTDIR';
  err.syscall = 'mkdir';
  err.path = p;
  return err;
}

export async function mkdirp(dir, mode = 0o777) {
  // the common case, a directory that exists: one stat instead of a mkdir and a stat per component
  if ((await fs.promises.stat(dir).catch(() => null))?.isDirectory()) return undefined;
  let first;
  for (const p of prefixes(dir)) {
    try {
      await fs.promises.mkdir(p, { mode });
      first ??= p;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
      if (!(await fs.promises.stat(p)).isDirectory()) throw notDirectory(p);
    }
  }
  return first;
}

export function mkdirpSync(dir, mode = 0o777) {
  let first;
  for (const p of prefixes(dir)) {
    try {
      fs.mkdirSync(p, { mode });
      first ??= p;
    } catch (err) {
      if (err.code !== 'EEXIST') throw err;
      if (!fs.statSync(p).isDirectory()) throw notDirectory(p);
    }
  }
  return first;
}
