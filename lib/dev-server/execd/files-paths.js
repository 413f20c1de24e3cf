// Path handling of execd's files API (local OpenSandbox-compatible server): every path parameter undergoes
// `$VAR` / `${VAR}` expansion from execd's own environment and a leading `~` expansion, like the real execd.
// An undefined variable is a 400 error here (the real execd mostly answers 500 RUNTIME_ERROR, see
// docs/dev-server-execd.md). Relative paths resolve against the sandbox workspace.
import os from 'node:os';
import path from 'node:path';
import { HttpError } from './http.js';

const VAR = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)/g;
/** `$$` (the shell's pid variable, never set in execd's environment) expands to nothing, as in execd. */
const PID_VAR = /\$\$/g;

/** Expands variables and `~`; throws HttpError 400 naming every undefined variable. */
export function expandPath(p, env = process.env) {
  if (typeof p !== 'string') throw new HttpError(400, 'INVALID_REQUEST_BODY', `path must be a string, got ${typeof p}`);
  if (p === '') return '';
  p = p.replace(PID_VAR, '');
  const missing = new Set();
  for (const m of p.matchAll(VAR)) {
    const name = m[1] ?? m[2];
    if (!Object.hasOwn(env, name)) missing.add(name);
  }
  if (missing.size > 0) {
    throw new HttpError(400, 'INVALID_REQUEST_BODY',
      `path references undefined environment variables: ${[...missing].sort().join(',')}`);
  }
  const expanded = p.replace(VAR, (_, braced, bare) => env[braced ?? bare]);
  if (expanded === '~') return os.homedir();
  if (expanded.startsWith('~/')) return path.join(os.homedir(), expanded.slice(2));
  return expanded;
}

/** Expands and makes absolute (relative to `base`, the workspace). */
export function expandAbsPath(p, base) {
  return path.resolve(base, expandPath(p));
}
