// OpenSandboxFilesystem: a Mastra filesystem whose files live in an OpenSandbox sandbox. Every byte of I/O goes
// through the C core over execd's files API (src/opensandbox/fileops.c: info, download with one buffer, list,
// search, mkdir, mv, remove, replace; src/opensandbox/files.c: upload). The sandbox (and its start, reconnect and
// keep-alive) is shared with an OpenSandboxSandbox, given or made from the same options; a sandbox made from options
// that created its remote sandbox deletes it on destroy() (ownership follows creation). Paths resolve against
// `basePath` and are confined to it (`..` and symlinks included); see docs/filesystem.md for the semantics and the
// differences from Mastra's LocalFilesystem.
import path from 'node:path';
import {
  MastraFilesystem,
  FileNotFoundError,
  DirectoryNotFoundError,
  FileExistsError,
  IsDirectoryError,
  NotDirectoryError,
  DirectoryNotEmptyError,
  PermissionError,
  StaleFileError,
  WorkspaceReadOnlyError,
} from '@mastra/core/workspace';
import { binding } from './native.js';
import { OpenSandboxOptionError } from './errors.js';
import { assertExactPath, uploadFiles } from './files.js';
import { OpenSandboxSandbox } from './sandbox.js';

const P = path.posix;
const FILE_REQUEST = Symbol.for('mastra-opensandbox.fileRequest');
/** @internal Constructor option (lib/provider.js): the options of the sandbox to make, kept apart from the filesystem's. */
export const SANDBOX_OPTIONS = Symbol('sandboxOptions');
/** @internal lib/provider.js: the sandbox this filesystem made is now shared (a workspace's sandbox owns it). */
export const SHARE_SANDBOX = Symbol('shareSandbox');
/**
 * Recovery of writeFile, mkdir: an upload or mkdir into a sandbox the lifecycle API confirms gone reached nothing
 * that outlives it, so any transport failure (not only a refused connect) is retried once on the new sandbox.
 */
const WRITE = { anyTransport: true };
const DEFAULT_MAX_READ_BYTES = 1024 * 1024 * 1024;
const LIST_ALL_DEPTH = 1000; // execd's /directories/list depth for "everything below"
const FS_OPTIONS = ['sandbox', 'id', 'basePath', 'contained', 'readOnly', 'maxReadBytes', 'instructions', 'onInit', 'onDestroy', 'textExtensions'];
const GREP_CONCURRENCY = 16;
/**
 * The path checks of concurrent operations share one GET /files/info (execd answers many `path`s at once): at most
 * this many paths and this many bytes of them (URL-encoded) per request, well inside any server's request-line limit.
 */
const INFO_BATCH_PATHS = 64;
const INFO_BATCH_BYTES = 4096;

/** Is `p` (normalized, absolute) `root` or below it? */
const within = (p, root) => p === root || p.startsWith(root === '/' ? '/' : `${root}/`);
const mtimeOf = info => new Date(Date.parse(info.modified_at));
const execdMode = info => (Number.isInteger(info?.mode) && info.mode > 0 ? info.mode : 644);
const toBuffer = c => (Buffer.isBuffer(c) ? c : c instanceof Uint8Array ? Buffer.from(c.buffer, c.byteOffset, c.byteLength) : Buffer.from(String(c), 'utf8'));

/** Paths in the order of execd's recursive walk (lexical per directory): 'a/b' before 'a.txt'. */
function bySegments(a, b) {
  const x = a.split('/');
  const y = b.split('/');
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
  return x.length - y.length;
}

/**
 * The plain strings one of which every match of a JavaScript regular expression must contain, when the pattern is
 * only literal text (escaped punctuation allowed) or such texts joined by `|`; else null. Case-insensitive search
 * only with ASCII strings (grep -i in the C locale folds ASCII only).
 */
export function requiredLiterals(pattern, caseSensitive = true) {
  if (typeof pattern !== 'string' || pattern.includes('\n') || pattern.includes('\uFFFD')) return null;
  const alts = [];
  let cur = '';
  for (let i = 0; i < pattern.length; i++) {
    const ch = pattern[i];
    if (ch === '\\') {
      const next = pattern[i + 1];
      if (next === undefined || /[A-Za-z0-9]/.test(next)) return null; // \d, \w, \b, \1, \u…: not literal
      cur += next;
      i++;
    } else if (ch === '|') {
      alts.push(cur);
      cur = '';
    } else if ('.*+?()[]{}^$'.includes(ch)) {
      return null;
    } else {
      cur += ch;
    }
  }
  alts.push(cur);
  if (alts.some(a => a === '')) return null; // an empty alternative matches everywhere
  if (!caseSensitive && alts.some(a => /[^\x00-\x7f]/.test(a))) return null;
  return alts;
}

/** Mastra's FileEntry of an execd FileInfo: symlinks (from #symlinks) with their target's type and text. */
function fileEntry(info, base, links) {
  const link = links.get(info.path);
  const entry = { ...base, type: link ? link.type : info.type === 'directory' ? 'directory' : 'file' };
  if (link) {
    entry.isSymlink = true;
    entry.symlinkTarget = link.target;
  } else if (entry.type === 'file') entry.size = info.size;
  return entry;
}

export class OpenSandboxFilesystem extends MastraFilesystem {
  id;
  name = 'OpenSandboxFilesystem';
  provider = 'opensandbox';
  readOnly;
  status = 'pending';
  #sandbox;
  #madeSandbox; // the sandbox was made from the options (not given)
  #created = null; // remote ids the made sandbox created (Set), while not shared: what destroy() deletes
  #basePath;
  #contained;
  #maxReadBytes;
  #instructions;
  #client;
  #clientKey;
  #rootReal;

  /**
   * options: `sandbox` (an OpenSandboxSandbox to share) or the OpenSandboxSandbox options themselves (`id`,
   * `domain`, `apiKey`, …: a sandbox made from them attaches to the same remote sandbox that class would);
   * `basePath` (default the sandbox's working directory), `contained` (default true), `readOnly`, `maxReadBytes`
   * (default 1 GiB), `instructions`, and MastraFilesystem's `onInit`/`onDestroy`/`textExtensions`. A sandbox made
   * from the options that created its remote sandbox (rather than attaching to one) deletes it on destroy().
   */
  constructor(options = {}) {
    if (options === null || typeof options !== 'object') throw new OpenSandboxOptionError('options', 'expected an object');
    super({ name: 'OpenSandboxFilesystem', onInit: options.onInit, onDestroy: options.onDestroy, textExtensions: options.textExtensions });
    const { sandbox, basePath, contained = true, readOnly, maxReadBytes = DEFAULT_MAX_READ_BYTES, instructions } = options;
    if (sandbox !== undefined) {
      if (!(sandbox instanceof OpenSandboxSandbox)) throw new OpenSandboxOptionError('sandbox', 'expected an OpenSandboxSandbox');
      const extra = Object.keys(options).filter(k => !FS_OPTIONS.includes(k) && options[k] !== undefined);
      if (extra.length) throw new OpenSandboxOptionError(extra[0], 'sandbox options cannot be combined with `sandbox` (the given sandbox has its own)');
      this.#sandbox = sandbox;
      this.#madeSandbox = false;
    } else {
      let sandboxOptions = options[SANDBOX_OPTIONS];
      if (!sandboxOptions) {
        sandboxOptions = {};
        for (const [k, v] of Object.entries(options)) if (!FS_OPTIONS.includes(k) || k === 'id') sandboxOptions[k] = v;
      }
      this.#created = new Set();
      this.#sandbox = new OpenSandboxSandbox(this.#recordingCreations(sandboxOptions));
      this.#madeSandbox = true;
    }
    if (basePath !== undefined && (typeof basePath !== 'string' || !basePath.startsWith('/'))) {
      throw new OpenSandboxOptionError('basePath', 'must be an absolute path inside the sandbox');
    }
    assertExactPath(basePath, 'basePath');
    if (typeof contained !== 'boolean') throw new OpenSandboxOptionError('contained', 'must be a boolean');
    if (readOnly !== undefined && typeof readOnly !== 'boolean') throw new OpenSandboxOptionError('readOnly', 'must be a boolean');
    if (!Number.isSafeInteger(maxReadBytes) || maxReadBytes < 1) throw new OpenSandboxOptionError('maxReadBytes', 'must be a positive integer');
    this.#basePath = P.normalize(basePath ?? this.#sandbox.workingDirectory).replace(/(.)\/$/, '$1');
    this.#contained = contained;
    this.readOnly = readOnly;
    this.#maxReadBytes = maxReadBytes;
    this.#instructions = instructions;
    this.id = options.id !== undefined && this.#madeSandbox ? `opensandbox-fs-${options.id}` : `opensandbox-fs-${this.#sandbox.id}`;
  }

  /**
   * The made sandbox's options with an onStart hook (the caller's still runs) that records the remote id of every
   * start of that sandbox whose outcome is 'created' (not 'connected': reattached by sandboxId or by logical id).
   */
  #recordingCreations(sandboxOptions) {
    const hook = sandboxOptions.onStart;
    if (hook !== undefined && typeof hook !== 'function') return sandboxOptions; // refused by the sandbox, naming onStart
    return {
      ...sandboxOptions,
      onStart: async args => {
        if (args?.outcome === 'created' && args.sandbox === this.#sandbox) this.#created?.add(args.sandbox.opensandbox.sandboxId);
        return hook?.(args);
      },
    };
  }

  /** @internal The made sandbox is shared from now on: destroy() leaves it to its other holder. */
  [SHARE_SANDBOX]() {
    this.#created = null;
  }

  get basePath() {
    return this.#basePath;
  }

  get contained() {
    return this.#contained;
  }

  /** The OpenSandboxSandbox whose files these are (given, or made from the options). */
  get sandbox() {
    return this.#sandbox;
  }

  async init() {
    await this.#sandbox.ensureRunning();
    await this.#request('create base directory', c => this.#op(c, 'mkdir', [this.#basePath], { num: 755 }), WRITE);
  }

  /**
   * Ownership follows creation: when the sandbox made from the options created the remote sandbox it holds, that
   * sandbox is destroyed (the remote one deleted). A given or shared sandbox, or a remote sandbox the made one
   * attached to (sandboxId, or the logical id of a live sandbox), is left as it is.
   */
  async destroy() {
    this.#client = undefined;
    this.#clientKey = undefined;
    const remoteId = this.#sandbox.opensandbox.sandboxId;
    if (remoteId && this.#created?.has(remoteId)) await this.#sandbox._destroy();
  }

  /** metadata is the serializable config (openSandboxFilesystemProvider's schema; no secrets). */
  async getInfo() {
    const metadata = { sandbox: (await this.#sandbox.getInfo()).metadata, basePath: this.#basePath, contained: this.#contained };
    if (this.#maxReadBytes !== DEFAULT_MAX_READ_BYTES) metadata.maxReadBytes = this.#maxReadBytes;
    if (typeof this.#instructions === 'string') metadata.instructions = this.#instructions;
    return { id: this.id, name: this.name, provider: this.provider, readOnly: this.readOnly, status: this.status, error: this.error, metadata };
  }

  getInstructions(opts) {
    const ov = this.#instructions;
    const def = () => {
      const parts = [`OpenSandbox sandbox filesystem at "${this.#basePath}" (inside the sandbox). Relative paths resolve from this directory; commands run in the same sandbox see the same files.`];
      parts.push(this.#contained ? 'File access is restricted to this directory.' : 'Containment is disabled: any path in the sandbox is accessible.');
      if (this.readOnly) parts.push('The filesystem is read-only.');
      return parts.join(' ');
    };
    if (typeof ov === 'string') return ov;
    if (typeof ov === 'function') return ov({ defaultInstructions: def(), requestContext: opts?.requestContext });
    return def();
  }

  /** The absolute path inside the sandbox, or undefined when it is outside basePath (lexically). */
  resolveAbsolutePath(inputPath) {
    try {
      return this.#resolve(inputPath);
    } catch {
      return undefined;
    }
  }

  // ---------------------------------------------------------------- operations

  async readFile(inputPath, options) {
    await this.ensureReady();
    const abs = this.#resolve(inputPath);
    return this.#request(`read ${abs}`, async c => {
      // the download starts next to the path check (one round trip); its bytes are used only for a file reached
      // without symlinks, anything else (missing, a directory, a symlink, an error) is read again the careful way
      const early = this.#op(c, 'download', [abs], { maxBytes: this.#maxReadBytes }).then(bytes => bytes, () => undefined);
      const [info, speculated] = await Promise.all([this.#target(c, abs, inputPath), early]);
      if (!info) throw new FileNotFoundError(inputPath);
      if (info.type === 'directory') throw new IsDirectoryError(inputPath);
      const buf = !info.realPath && speculated ? speculated : await this.#download(c, info.realPath ?? abs, info.size, inputPath);
      return options?.encoding ? buf.toString(options.encoding) : buf;
    });
  }

  async writeFile(inputPath, content, options) {
    await this.ensureReady();
    this.#assertWritable('writeFile');
    const abs = this.#resolve(inputPath);
    const data = toBuffer(content);
    await this.#request(`write ${abs}`, async c => {
      const [parent, info] = await this.#parentAndTarget(c, abs, inputPath);
      if (options?.recursive === false) {
        if (!parent) throw new DirectoryNotFoundError(P.dirname(inputPath));
        if (parent.type !== 'directory') throw new NotDirectoryError(P.dirname(inputPath));
      }
      if (info?.type === 'directory') throw new IsDirectoryError(inputPath);
      if (info && options?.expectedMtime && mtimeOf(info).getTime() !== options.expectedMtime.getTime()) {
        throw new StaleFileError(inputPath, options.expectedMtime, mtimeOf(info));
      }
      if (info && options?.overwrite === false) throw new FileExistsError(inputPath);
      await this.#upload(c, [info?.realPath ?? abs], [execdMode(info)], [data], inputPath);
    }, WRITE);
  }

  async appendFile(inputPath, content) {
    await this.ensureReady();
    this.#assertWritable('appendFile');
    const abs = this.#resolve(inputPath);
    const data = toBuffer(content);
    await this.#request(`append to ${abs}`, async c => {
      const info = await this.#target(c, abs, inputPath);
      if (info?.type === 'directory') throw new IsDirectoryError(inputPath);
      const target = info?.realPath ?? abs;
      const old = info ? await this.#download(c, target, info.size, inputPath) : Buffer.alloc(0);
      await this.#upload(c, [target], [execdMode(info)], [old.length ? Buffer.concat([old, data]) : data], inputPath);
    });
  }

  async deleteFile(inputPath, options) {
    await this.ensureReady();
    this.#assertWritable('deleteFile');
    const abs = this.#resolve(inputPath);
    await this.#request(`delete ${abs}`, async c => {
      const info = await this.#target(c, abs, inputPath, { follow: false });
      if (!info) {
        if (options?.force) return;
        throw new FileNotFoundError(inputPath);
      }
      if (info.type === 'directory') throw new IsDirectoryError(inputPath);
      await this.#op(c, 'remove', [abs]);
    });
  }

  async copyFile(src, dest, options) {
    await this.ensureReady();
    this.#assertWritable('copyFile');
    const from = this.#resolve(src);
    const to = this.#resolve(dest);
    await this.#request(`copy ${from} to ${to}`, async c => {
      const info = await this.#target(c, from, src);
      if (!info) throw new FileNotFoundError(src);
      const destInfo = await this.#target(c, to, dest);
      if (info.type === 'directory') {
        if (!options?.recursive) throw new IsDirectoryError(src);
        if (destInfo && destInfo.type !== 'directory') throw new NotDirectoryError(dest);
        return this.#copyTree(c, info.realPath ?? from, destInfo?.realPath ?? to, options);
      }
      if (destInfo?.type === 'directory') throw new IsDirectoryError(dest);
      if (destInfo && options?.overwrite === false) throw new FileExistsError(dest);
      const bytes = await this.#download(c, info.realPath ?? from, info.size, src);
      await this.#upload(c, [destInfo?.realPath ?? to], [execdMode(info)], [bytes], dest);
    });
  }

  async moveFile(src, dest, options) {
    await this.ensureReady();
    this.#assertWritable('moveFile');
    const from = this.#resolve(src);
    const to = this.#resolve(dest);
    await this.#request(`move ${from} to ${to}`, async c => {
      const info = await this.#target(c, from, src, { follow: false });
      if (!info) throw new FileNotFoundError(src);
      const destInfo = await this.#target(c, to, dest, { follow: false });
      if (destInfo) {
        if (options?.overwrite === false) throw new FileExistsError(dest);
        if (destInfo.type === 'directory') throw new IsDirectoryError(dest);
        await this.#op(c, 'remove', [to]);
      }
      await this.#op(c, 'move', [from, to]);
    });
  }

  async mkdir(inputPath, options) {
    await this.ensureReady();
    this.#assertWritable('mkdir');
    const abs = this.#resolve(inputPath);
    await this.#request(`mkdir ${abs}`, async c => {
      const [parent, info] = await this.#parentAndTarget(c, abs, inputPath);
      if (info) {
        if (info.type !== 'directory') throw new FileExistsError(inputPath);
        return;
      }
      if (options?.recursive === false) {
        if (!parent) throw new DirectoryNotFoundError(P.dirname(inputPath));
        if (parent.type !== 'directory') throw new NotDirectoryError(P.dirname(inputPath));
      }
      await this.#op(c, 'mkdir', [abs], { num: 755 });
    }, WRITE);
  }

  async rmdir(inputPath, options) {
    await this.ensureReady();
    this.#assertWritable('rmdir');
    const abs = this.#resolve(inputPath);
    await this.#request(`rmdir ${abs}`, async c => {
      const info = await this.#target(c, abs, inputPath, { follow: false });
      if (!info) {
        if (options?.force) return;
        throw new DirectoryNotFoundError(inputPath);
      }
      if (info.type !== 'directory') throw new NotDirectoryError(inputPath);
      if (!options?.recursive) {
        const children = await this.#op(c, 'list', [abs], { num: 1 });
        if (children.length > 0) throw new DirectoryNotEmptyError(inputPath);
      }
      await this.#op(c, 'rmdir', [abs]);
    });
  }

  async readdir(inputPath, options) {
    await this.ensureReady();
    const abs = this.#resolve(inputPath);
    return this.#request(`list ${abs}`, async c => {
      const dir = await this.#directory(c, abs, inputPath);
      const maxDepth = options?.recursive ? (options.maxDepth ?? 100) : 0;
      const list = await this.#op(c, 'list', [dir], { num: Math.max(0, Math.min(maxDepth, LIST_ALL_DEPTH)) + 1 });
      const exts = options?.extension === undefined ? undefined : [].concat(options.extension);
      const links = await this.#symlinks(c, list);
      const out = [];
      for (const e of list) {
        const name = e.path.slice(dir === '/' ? 1 : dir.length + 1);
        if (exts && e.type === 'file' && !exts.some(x => x === P.extname(name) || x === P.extname(name).slice(1))) continue;
        out.push(fileEntry(e, { name }, links));
      }
      return out;
    });
  }

  /** Everything below `inputPath` (maxDepth levels, hidden names skipped unless includeHidden), one request. */
  async walk(inputPath, options) {
    await this.ensureReady();
    const abs = this.#resolve(inputPath);
    return this.#request(`walk ${abs}`, async c => {
      const dir = await this.#directory(c, abs, inputPath);
      const depth = options?.maxDepth === undefined ? LIST_ALL_DEPTH : Math.max(0, Math.min(options.maxDepth, LIST_ALL_DEPTH));
      if (depth === 0) return [];
      const list = await this.#op(c, 'list', [dir], { num: depth });
      const links = await this.#symlinks(c, list);
      const out = [];
      for (const e of list) {
        const rel = e.path.slice(dir === '/' ? 1 : dir.length + 1);
        if (!options?.includeHidden && rel.split('/').some(s => s.startsWith('.'))) continue;
        out.push(fileEntry(e, { name: P.basename(rel), path: rel }, links));
      }
      return out;
    });
  }

  /**
   * Content search with JavaScript regular expressions (the same semantics as Mastra's own search). Files that
   * may match are found by one `grep -rnF` in the sandbox when every match must contain one of a few plain strings
   * (see #grepLines), else by one execd search request; their lines come from that grep (no context lines asked)
   * or from concurrent downloads. The RegExp decides every match here.
   */
  async grep(options) {
    await this.ensureReady();
    const { pattern, caseSensitive = true, includeHidden = false, maxCountPerFile, maxTotalMatches, contextLines = 0 } = options ?? {};
    const regex = new RegExp(pattern, caseSensitive ? '' : 'i');
    const abs = this.#resolve(options?.path ?? '.');
    const ctx = Math.max(0, Math.floor(contextLines));
    return this.#request(`grep ${abs}`, async c => {
      // a literal pattern: the sandbox's grep starts at once, next to the path check (used only when the path is
      // a directory reached without symlinks; it never rejects)
      const literals = requiredLiterals(pattern, caseSensitive);
      const early = literals ? this.#grepLines(abs, literals, caseSensitive) : undefined;
      const info = await this.#target(c, abs, options?.path ?? '.');
      const speculated = await early;
      if (!info) throw new DirectoryNotFoundError(options?.path ?? '.');
      const root = info.realPath ?? abs;
      const isDir = info.type === 'directory';
      const hits = literals && isDir ? (root === abs ? speculated : await this.#grepLines(root, literals, caseSensitive)) : undefined;
      const files = hits ? [...hits.keys()].map(p => ({ path: p, type: 'file' })) : isDir ? await this.#op(c, 'search', [root]) : [{ ...info, path: root }];
      const candidates = [];
      for (const f of files) {
        if (f.type !== 'file') continue;
        const rel = isDir ? f.path.slice(root === '/' ? 1 : root.length + 1) : P.basename(root);
        const segs = rel.split('/');
        if (segs.includes('.git') || (!includeHidden && segs.some(s => s.startsWith('.')))) continue;
        if (!this.isTextFile(segs[segs.length - 1])) continue;
        candidates.push({ rel, abs: f.path, size: f.size });
      }
      const results = [];
      let total = 0;
      const full = () => maxTotalMatches !== undefined && total >= maxTotalMatches;
      /** Matches of one file from [lineNumber, text] pairs (lines: all of them, for context). */
      const scan = (rel, numbered, lines) => {
        const matches = [];
        for (const [n, text] of numbered) {
          if (full()) break;
          const m = regex.exec(text);
          if (!m) continue;
          const match = { line: n, column: m.index, text };
          if (ctx > 0) {
            match.before = lines.slice(Math.max(0, n - 1 - ctx), n - 1);
            match.after = lines.slice(n, n + ctx);
          }
          matches.push(match);
          total++;
          if (maxCountPerFile !== undefined && matches.length >= maxCountPerFile) break;
        }
        if (matches.length) results.push({ path: rel, matches });
      };
      if (hits && ctx === 0) {
        for (const f of candidates) if (!full()) scan(f.rel, hits.get(f.abs));
        return results;
      }
      for (let i = 0; i < candidates.length && !full(); i += GREP_CONCURRENCY) {
        const batch = candidates.slice(i, i + GREP_CONCURRENCY);
        const bodies = await Promise.all(batch.map(f => this.#download(c, f.abs, f.size, f.rel).catch(() => undefined)));
        batch.forEach((f, k) => {
          if (!bodies[k] || full()) return;
          const lines = bodies[k].toString('utf8').split('\n');
          scan(f.rel, lines.map((t, n) => [n + 1, t]), lines);
        });
      }
      return results;
    });
  }

  /**
   * execd has no content search. When every match of the pattern must contain one of a few plain strings (a
   * literal, or literals joined by |), one command in the sandbox, `LC_ALL=C grep -rnaFZ -e … -- <root>` (GNU grep;
   * NUL after the name, turned into \x01 because execd's output cannot carry NUL), lists every line that can
   * match: Map(absolute path -> [[line number, text]]) in execd's walk order. undefined when that cannot be
   * answered exactly (no GNU grep, an error, an odd name or a control byte in a line): then every file is read.
   */
  async #grepLines(root, literals, caseSensitive) {
    const script = 'r=$1; shift; { LC_ALL=C grep -rnaFZ "$@" -- "$r"; echo "grep-exit:$?" >&2; } | tr "\\000" "\\001"';
    const args = ['-c', script, 'sh', root, ...(caseSensitive ? [] : ['-i']), ...literals.flatMap(l => ['-e', l])];
    let r;
    try {
      r = await this.#sandbox.executeCommand('sh', args, { cwd: '/', maxRetainedBytes: 256 * 1024 * 1024 });
    } catch {
      return undefined;
    }
    const status = /grep-exit:(\d+)/.exec(r.stderr)?.[1];
    if (status === '1') return new Map();
    if (status !== '0' || r.exitCode !== 0 || r.stdoutTruncated) return undefined;
    const hits = new Map();
    for (const line of r.stdout.split('\n')) {
      if (!line) continue;
      const at = line.indexOf('\x01');
      const m = at > 0 ? /^(\d+):/.exec(line.slice(at + 1)) : null;
      const file = line.slice(0, at);
      if (!m || !within(file, root) || file === root) return undefined;
      const text = line.slice(at + 1 + m[0].length);
      if (text.includes('\x01')) return undefined;
      if (!hits.has(file)) hits.set(file, []);
      hits.get(file).push([Number(m[1]), text]);
    }
    return new Map([...hits.keys()].sort(bySegments).map(k => [k, hits.get(k)]));
  }

  async exists(inputPath) {
    await this.ensureReady();
    const abs = this.#resolve(inputPath);
    return this.#request(`exists ${abs}`, async c => !!(await this.#target(c, abs, inputPath)));
  }

  async stat(inputPath) {
    await this.ensureReady();
    const abs = this.#resolve(inputPath);
    return this.#request(`stat ${abs}`, async c => {
      const info = await this.#target(c, abs, inputPath);
      if (!info) throw new FileNotFoundError(inputPath);
      return {
        name: P.basename(abs),
        path: this.#relative(abs),
        type: info.type === 'directory' ? 'directory' : 'file',
        size: info.size,
        createdAt: new Date(Date.parse(info.created_at)),
        modifiedAt: mtimeOf(info),
      };
    });
  }

  async realpath(inputPath) {
    await this.ensureReady();
    const abs = this.#resolve(inputPath);
    return this.#request(`realpath ${abs}`, async c => {
      const info = await this.#target(c, abs, inputPath);
      if (!info) throw new FileNotFoundError(inputPath);
      return this.#relative(info.realPath ?? abs);
    });
  }

  // ---------------------------------------------------------------- internals

  #assertWritable(operation) {
    if (this.readOnly) throw new WorkspaceReadOnlyError(operation);
  }

  /** Absolute, normalized, `$`-free, lexically inside basePath (when contained). */
  #resolve(inputPath) {
    if (typeof inputPath !== 'string' || inputPath.includes('\0')) throw new OpenSandboxOptionError('path', 'must be a string without NUL');
    assertExactPath(inputPath);
    const abs = P.isAbsolute(inputPath) ? P.normalize(inputPath) : P.resolve(this.#basePath, inputPath);
    const clean = abs.length > 1 ? abs.replace(/\/+$/, '') : abs;
    if (this.#contained && !within(clean, this.#basePath)) throw new PermissionError(inputPath, 'access (path is outside the workspace; use a path relative to the workspace root)');
    return clean;
  }

  #relative(abs) {
    return P.relative(this.#basePath, abs);
  }

  /** Runs fn(client) as a request of the shared sandbox (started on demand; failures mapped there). */
  #request(operation, fn, options) {
    return this.#sandbox[FILE_REQUEST](operation, conn => fn(this.#clientFor(conn)), options);
  }

  #clientFor(conn) {
    const key = JSON.stringify([conn.baseUrl, conn.headers, conn.caFile ?? null]);
    if (this.#clientKey !== key) {
      const kv = Object.entries(conn.headers ?? {}).flatMap(([k, v]) => [k, String(v)]);
      this.#client = { fc: new binding.FilesClient(conn.baseUrl, kv, conn.requestTimeoutMs ?? 30000, 10000, conn.caFile ?? null), conn };
      this.#clientKey = key;
    }
    return this.#client;
  }

  /** One native file operation; JSON answers parsed. */
  async #op(c, kind, paths, { text = null, text2 = null, num = 0, rangeStart = -1, rangeEnd = -1, sizeHint = 0, maxBytes = 0 } = {}) {
    const r = await c.fc.op(kind, paths, text, text2, num, rangeStart, rangeEnd, sizeHint, maxBytes).result;
    return typeof r === 'string' ? JSON.parse(r) : r;
  }

  async #download(c, abs, size, inputPath) {
    try {
      return await this.#op(c, 'download', [abs], { sizeHint: Math.min(size ?? 0, this.#maxReadBytes), maxBytes: this.#maxReadBytes });
    } catch (e) {
      if (e?.code === 'FILE_NOT_FOUND') throw new FileNotFoundError(inputPath);
      throw e;
    }
  }

  async #upload(c, paths, modes, buffers, inputPath) {
    try {
      await uploadFiles(c.conn, { paths, modes, buffers });
    } catch (e) {
      if (/not a directory/i.test(e?.message ?? '')) throw new NotDirectoryError(P.dirname(inputPath));
      throw e;
    }
  }

  /**
   * #infos of paths that are expected to exist, in the request shared with the other operations that ask in the same
   * turn of the event loop (one GET /files/info for all of them, sent at the next setImmediate). execd answers such a
   * request 404 as a whole when any path is missing: then, as after any answer that is not a success, every operation
   * of the batch asks again alone (#infos), so each gets exactly the answer and error of its own paths. A transport
   * failure or deadline reaches every operation of the batch (each would have met it on its own request).
   */
  #sharedInfos(c, paths) {
    const bytes = paths.reduce((n, p) => n + encodeURIComponent(p).length + 6, 0);
    let q = c.infoBatch;
    if (q && (q.paths.size + paths.length > INFO_BATCH_PATHS || q.bytes + bytes > INFO_BATCH_BYTES)) q = null;
    if (!q) {
      q = c.infoBatch = { paths: new Set(), bytes: 0, waiters: [] };
      setImmediate(() => this.#flushInfos(c, q));
    }
    for (const p of paths) q.paths.add(p);
    q.bytes += bytes;
    return new Promise((resolve, reject) => q.waiters.push({ paths, resolve, reject }));
  }

  async #flushInfos(c, q) {
    if (c.infoBatch === q) c.infoBatch = null;
    const alone = w => this.#infos(c, w.paths).then(w.resolve, w.reject);
    if (q.waiters.length === 1) return alone(q.waiters[0]);
    let all;
    try {
      all = await this.#op(c, 'info', [...q.paths]);
    } catch (e) {
      if (e?.kind === 'api') q.waiters.forEach(alone);
      else q.waiters.forEach(w => w.reject(e));
      return;
    }
    for (const w of q.waiters) w.resolve(Object.fromEntries(w.paths.map(p => [p, all?.[p]])));
  }

  /** FileInfo map of the paths that exist (one request when all do; a missing one costs a second). */
  async #infos(c, paths) {
    try {
      return await this.#op(c, 'info', paths);
    } catch (e) {
      // missing, or a file where a directory should be (lstat's ENOTDIR): both "not there"
      if (e?.code !== 'FILE_NOT_FOUND' && !/not a directory/.test(e?.message ?? '')) throw e;
    }
    return null;
  }

  /**
   * The FileInfo of abs (null when missing), after checking that no path component below basePath is a symlink
   * leading outside it. Every component is asked for in the same request; only when one is a symlink does the
   * sandbox resolve it (one command), and then `realPath` is set (and, with follow, the info is the target's).
   * With `out`, out.parent is set to the parent directory's info (null when missing): the ancestors and the target
   * are then asked for in two concurrent requests, so a path that does not exist yet costs no extra round trip.
   */
  async #target(c, abs, inputPath, { follow = true, out } = {}) {
    const chain = this.#chain(abs);
    let infos;
    let known = chain.length;
    if (out && chain.length > 1) {
      const [up, self] = await Promise.all([this.#sharedInfos(c, chain.slice(0, -1)), this.#infos(c, [abs])]);
      known = self && up ? chain.length : chain.length - 1;
      infos = up ? { ...up, ...self } : null;
    } else {
      infos = await this.#sharedInfos(c, chain);
    }
    while (!infos && known > 1) {
      known--; // something missing: find the longest existing prefix (deepest first)
      infos = await this.#infos(c, chain.slice(0, known));
    }
    const present = infos ? chain.slice(0, known) : [];
    const info = known === chain.length && infos ? infos[abs] : null;
    const linked = present.filter(p => infos[p]?.type === 'symlink');
    if (out) {
      if (!this.#contained || linked.length) out.parent = abs === '/' ? null : await this.#target(c, P.dirname(abs), P.dirname(inputPath));
      else if (chain.length === 1) out.parent = { type: 'directory' }; // basePath itself
      else out.parent = infos && known >= chain.length - 1 ? infos[chain[chain.length - 2]] : null;
    }
    if (!linked.length) return info;
    // resolve the deepest existing component; what follows it (not there yet) is appended as is
    const deepest = present[present.length - 1];
    const [res] = await this.#resolveLinks(c, [deepest]);
    const real = res.real + abs.slice(deepest.length);
    if (this.#contained) {
      const root = await this.#baseReal(c);
      const lastIsLink = linked.length === 1 && linked[0] === abs;
      if (!within(real, root) && !(lastIsLink && !follow)) throw new PermissionError(inputPath, 'access (a symlink leads outside the workspace)');
    }
    if (!info) return null;
    if (!follow && info.type === 'symlink') return { ...info, type: 'file' };
    if (res.kind === 'm') return null; // dangling
    const realInfo = (await this.#infos(c, [real]))?.[real];
    return realInfo ? { ...realInfo, realPath: real } : null;
  }

  /** [parent info, target info] of abs (both resolved like #target). */
  async #parentAndTarget(c, abs, inputPath) {
    const out = {};
    const info = await this.#target(c, abs, inputPath, { out });
    return [out.parent, info];
  }

  async #directory(c, abs, inputPath) {
    const info = await this.#target(c, abs, inputPath);
    if (!info) throw new DirectoryNotFoundError(inputPath);
    if (info.type !== 'directory') throw new NotDirectoryError(inputPath);
    return info.realPath ?? abs;
  }

  /** abs and its ancestors below basePath (from the top), or just abs when not contained. */
  #chain(abs) {
    if (!this.#contained) return [abs];
    const out = [];
    for (let p = abs; within(p, this.#basePath) && p !== this.#basePath; p = P.dirname(p)) out.unshift(p);
    return out.length ? out : [abs];
  }

  async #baseReal(c) {
    if (!this.#rootReal) this.#rootReal = (await this.#resolveLinks(c, [this.#basePath]))[0].real || this.#basePath;
    return this.#rootReal;
  }

  /** Symlink entries of a listing -> Map(path -> { type, target }) (one command for all of them). */
  async #symlinks(c, list) {
    const links = list.filter(e => e.type === 'symlink').map(e => e.path);
    const map = new Map();
    if (!links.length) return map;
    const res = await this.#resolveLinks(c, links);
    links.forEach((p, i) => map.set(p, { type: res[i].kind === 'd' ? 'directory' : 'file', target: res[i].target }));
    return map;
  }

  /**
   * execd has no readlink/realpath: one POSIX sh command (coreutils or busybox) answers, per path, the link text,
   * the kind of what it leads to (d, f, m = missing) and the canonical path.
   */
  async #resolveLinks(c, paths) {
    // one line per field: execd's command output cannot carry NUL, so a path with a newline cannot be resolved
    if (paths.some(p => p.includes('\n'))) throw new PermissionError(paths.find(p => p.includes('\n')), 'resolve a symlink (path contains a newline)');
    const script = 'for p; do t=$(readlink -- "$p"); r=$(readlink -f -- "$p"); if [ -d "$p" ]; then k=d; elif [ -e "$p" ]; then k=f; else k=m; fi; printf "%s\\n%s\\n%s\\n" "$t" "$k" "$r"; done';
    const r = await this.#sandbox.executeCommand('sh', ['-c', script, 'sh', ...paths], { cwd: '/' });
    if (r.exitCode !== 0) throw new Error(`resolving symlinks failed: ${r.stderr}`);
    const parts = r.stdout.split('\n');
    return paths.map((p, i) => ({ target: parts[i * 3], kind: parts[i * 3 + 1], real: parts[i * 3 + 2] ?? '' })); // '' (unresolvable) is never inside basePath
  }

  async #copyTree(c, from, to, options) {
    const list = await this.#op(c, 'list', [from], { num: LIST_ALL_DEPTH });
    await this.#op(c, 'mkdir', [to], { num: 755 });
    const existing = new Set();
    if (options?.overwrite === false) {
      try {
        for (const e of await this.#op(c, 'list', [to], { num: LIST_ALL_DEPTH })) existing.add(e.path);
      } catch {
        /* a new destination */
      }
    }
    const files = [];
    for (const e of list) {
      const dest = to + e.path.slice(from.length);
      if (!this.#contained || within(dest, this.#basePath)) {
        if (e.type === 'directory') await this.#op(c, 'mkdir', [dest], { num: execdMode(e) });
        else if (e.type === 'file' && !existing.has(dest)) files.push({ src: e.path, dest, mode: execdMode(e), size: e.size });
      }
    }
    for (let i = 0; i < files.length; i += GREP_CONCURRENCY) {
      const batch = files.slice(i, i + GREP_CONCURRENCY);
      const bodies = await Promise.all(batch.map(f => this.#download(c, f.src, f.size, f.src)));
      await this.#upload(c, batch.map(f => f.dest), batch.map(f => f.mode), bodies, to);
    }
  }
}
