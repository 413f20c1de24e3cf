// File upload for OpenSandboxSandbox.writeFiles: validates Mastra's SandboxFileInput list and sends all files in
// one execd multipart request through the native upload (src/opensandbox/files.c), with a deadline and abort.
import path from 'node:path';
import { validateSandboxFileMode } from '@mastra/core/workspace';
import { binding } from './native.js';
import { OpenSandboxOptionError } from './errors.js';


/**
 * execd expands environment variables in every file path it is given (Go's os.ExpandEnv, no escape: `$HOME`,
 * `${HOME}`, `$$`; an undefined variable is a 500): a path with `$` cannot be addressed exactly, so every file
 * operation of this package refuses it up front (the one place that decides; writeFiles and OpenSandboxFilesystem
 * call it). `option` names the argument in the error.
 */
export function assertExactPath(p, option = 'path') {
  if (typeof p === 'string' && p.includes('$')) {
    const what = option === 'cwd' ? 'a command cwd' : 'file paths';
    throw new OpenSandboxOptionError(option, `path ${JSON.stringify(p)} contains "$": execd expands environment variables in ${what}, so it cannot be addressed exactly (rename it, or write it with executeCommand)`);
  }
}

/** A cwd that means the sandbox user's home: `~` or `~/…` (the forms execd expands; `~user` is a plain name). */
export const isHomeCwd = cwd => cwd === '~' || (typeof cwd === 'string' && cwd.startsWith('~/'));

/**
 * A cwd as the sandbox should see it: a relative one resolves against base (the working directory); none -> base.
 * `~` and `~/…` are sent as they are: execd expands them to its user's home (for commands, code contexts; the
 * process wrapper's shell does the same for processes.spawn), as a shell would.
 */
export function resolveCwd(cwd, base) {
  if (!cwd) return base ?? null;
  return path.posix.isAbsolute(cwd) || isHomeCwd(cwd) || !base ? cwd : path.posix.join(base, cwd);
}

/** Mastra's numeric mode (0o644) as execd's decimal-digit integer (644). */
export const execdMode = mode => Number(mode.toString(8));

/**
 * Normalizes `files` into { paths, modes, buffers }: relative paths resolve against `cwd`, content is a string
 * (UTF-8) or a Buffer/Uint8Array, mode (optional) is 0o001..0o777.
 */
export function normalizeFiles(files, cwd) {
  if (!Array.isArray(files)) throw new OpenSandboxOptionError('files', 'expected an array of { path, content, mode? }');
  const paths = [];
  const modes = [];
  const buffers = [];
  files.forEach((f, i) => {
    if (f === null || typeof f !== 'object') throw new OpenSandboxOptionError('files', `item ${i} must be an object`);
    if (typeof f.path !== 'string' || f.path === '' || f.path.includes('\0')) {
      throw new OpenSandboxOptionError('files', `item ${i}: path must be a non-empty string`);
    }
    assertExactPath(f.path, 'files');
    let content = f.content;
    if (typeof content === 'string') content = Buffer.from(content, 'utf8');
    else if (content instanceof Uint8Array) content = Buffer.isBuffer(content) ? content : Buffer.from(content.buffer, content.byteOffset, content.byteLength);
    else throw new OpenSandboxOptionError('files', `item ${i} (${f.path}): content must be a string or a Buffer`);
    if (f.mode !== undefined) validateSandboxFileMode(f.mode);
    paths.push(path.posix.resolve(cwd, f.path));
    modes.push(f.mode === undefined ? 644 : execdMode(f.mode));
    buffers.push(content);
  });
  return { paths, modes, buffers };
}

/** Files per upload request: execd's multipart reader (Go) refuses a form of more than 1,000 parts (two per file). */
export const UPLOAD_MAX_FILES = 500;
/** Content bytes per upload request (a single larger file goes alone): execd parses up to 32 MiB in memory. */
export const UPLOAD_MAX_BYTES = 32 * 1024 * 1024;

/** Consecutive index ranges [start, end) of at most UPLOAD_MAX_FILES files and UPLOAD_MAX_BYTES bytes (>= 1 file). */
export function uploadBatches(buffers, maxFiles = UPLOAD_MAX_FILES, maxBytes = UPLOAD_MAX_BYTES) {
  const out = [];
  let start = 0;
  let bytes = 0;
  buffers.forEach((b, i) => {
    if (i > start && (i - start >= maxFiles || bytes + b.length > maxBytes)) {
      out.push([start, i]);
      start = i;
      bytes = 0;
    }
    bytes += b.length;
  });
  if (buffers.length > start) out.push([start, buffers.length]);
  return out;
}

/**
 * Uploads in requests of at most UPLOAD_MAX_FILES files and UPLOAD_MAX_BYTES bytes, one after another (see
 * uploadBatches). conn = { baseUrl, headers, requestTimeoutMs, caFile }; the deadline is per request. Resolves when
 * execd has stored every file; rejects with the native error shape (kind/status/code/…), `cancelled` when
 * abortSignal fires, with `filesWritten`: the files of the requests execd had confirmed (their order is the
 * caller's; later requests were not sent).
 */
export async function uploadFiles(conn, { paths, modes, buffers }, { abortSignal, timeoutMs } = {}) {
  const kv = [];
  for (const [k, v] of Object.entries(conn.headers ?? {})) kv.push(k, String(v));
  let written = 0;
  for (const [start, end] of uploadBatches(buffers)) {
    if (abortSignal?.aborted) throw Object.assign(new Error('upload cancelled'), { kind: 'cancelled', code: 'CANCELLED', filesWritten: written });
    const h = binding.filesUpload(conn.baseUrl, kv, paths.slice(start, end), modes.slice(start, end), buffers.slice(start, end),
      timeoutMs ?? conn.requestTimeoutMs ?? 30000, conn.caFile ?? null);
    const onAbort = () => binding.filesCancel(h.handle);
    abortSignal?.addEventListener('abort', onAbort, { once: true });
    try {
      await h.result;
    } catch (e) {
      if (e && typeof e === 'object') e.filesWritten = written;
      throw e;
    } finally {
      abortSignal?.removeEventListener('abort', onAbort);
    }
    written = end;
  }
}
