// Route module of execd (see main.js for the contract): the files and directories API of the local
// OpenSandbox-compatible server, behaving like the real execd (docs/opensandbox-protocol.md §6.7; the differences
// are listed in docs/dev-server-execd.md). It runs inside the sandbox, so plain node:fs acts on the sandbox's
// own view of the filesystem.
//   GET  /files/info?path=…        DELETE /files?path=…       POST /files/upload      GET /files/download?path=…
//   POST /files/mv                 POST /files/permissions    GET /files/search       POST /files/replace
//   GET  /directories/list         POST /directories          DELETE /directories?path=…
import fs from 'node:fs';
import path from 'node:path';
import { HttpError, guard, readJson, sendEmpty, sendJson } from './http.js';
import { expandAbsPath } from './files-paths.js';
import { applyPermission, buildFileInfo, fileError, nameTables, osMessage, parseMode } from './files-info.js';
import { globToRegExp } from './files-glob.js';
import { handleUpload, mkdirWithOwnership } from './files-upload.js';
import { handleDownload } from './files-download.js';
import { mkdirp } from './mkdirp.js';

const BAD_BODY = 'error parsing request, MAYBE invalid body format.';

/** Body must be a JSON object mapping path -> object. */
async function readPathMap(req) {
  const body = await readJson(req);
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new HttpError(400, 'INVALID_REQUEST_BODY', `${BAD_BODY} expected a JSON object keyed by path`);
  }
  for (const [p, v] of Object.entries(body)) {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', `${BAD_BODY} the value for ${JSON.stringify(p)} must be an object`);
    }
  }
  return body;
}

function requirePath(url) {
  const p = url.searchParams.get('path');
  if (!p) throw new HttpError(400, 'MISSING_QUERY', "missing query parameter 'path'");
  return p;
}

export function createRoutes(ctx) {
  const ws = ctx.workspace;
  const abs = (p) => expandAbsPath(p, ws);
  const onWriteToClosed = ctx.signalForwarding ? () => ctx.relaySignal('SIGPIPE') : null;

  async function info(res, url) {
    const out = {};
    const names = nameTables();
    for (const p of url.searchParams.getAll('path')) {
      const file = abs(p);
      let st;
      try {
        st = await fs.promises.lstat(file, { bigint: true });
      } catch (err) {
        throw fileError(err, err.code === 'ENOENT' ? `file not found: ${p}: ` : `error accessing file ${p}: `);
      }
      out[p] = buildFileInfo(file, st, names);
    }
    sendJson(res, 200, out);
  }

  async function removeFiles(res, url) {
    for (const p of url.searchParams.getAll('path')) {
      const file = abs(p);
      let st;
      try {
        st = await fs.promises.stat(file);
      } catch (err) {
        if (err.code === 'ENOENT') continue;
        throw new HttpError(500, 'RUNTIME_ERROR', `error removing file ${p}. ${osMessage(err)}`);
      }
      if (st.isDirectory()) throw new HttpError(500, 'RUNTIME_ERROR', `error removing file ${p}. path is a directory: ${p}`);
      try {
        await fs.promises.unlink(file);
      } catch (err) {
        throw new HttpError(500, 'RUNTIME_ERROR', `error removing file ${p}. failed to remove file: ${osMessage(err)}`);
      }
    }
    sendEmpty(res);
  }

  async function move(req, res) {
    const body = await readJson(req);
    if (body !== null && typeof body === 'object' && !Array.isArray(body)) {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', `${BAD_BODY} json: cannot unmarshal object into Go value of type []model.RenameFileItem`);
    }
    if (!Array.isArray(body) || body.some((e) => e === null || typeof e !== 'object' || typeof e.src !== 'string' || typeof e.dest !== 'string')) {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', `${BAD_BODY} expected [{"src":"…","dest":"…"}]`);
    }
    for (const { src, dest } of body) {
      const from = abs(src);
      const to = abs(dest);
      try {
        await fs.promises.stat(from);
      } catch (err) {
        throw fileError(err, `source path not found: ${src}: `);
      }
      try {
        await mkdirp(path.dirname(to), 0o755);
      } catch (err) {
        throw fileError(err, 'failed to create destination directory: ');
      }
      if (fs.existsSync(to)) throw new HttpError(500, 'RUNTIME_ERROR', `error accessing file: destination path already exists: ${dest}`);
      try {
        await fs.promises.rename(from, to);
      } catch (err) {
        if (err.code !== 'EXDEV') throw fileError(err, 'failed to rename file: ');
        // Different mounts inside the sandbox (e.g. /workspace and /tmp): copy then remove.
        await fs.promises.cp(from, to, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true });
        await fs.promises.rm(from, { recursive: true, force: true });
      }
    }
    sendEmpty(res);
  }

  async function permissions(req, res) {
    const body = await readPathMap(req);
    for (const [p, perm] of Object.entries(body)) parseMode(perm.mode, p);
    for (const [p, perm] of Object.entries(body)) {
      try {
        await applyPermission(abs(p), perm, p);
      } catch (err) {
        if (err instanceof HttpError) throw err;
        throw new HttpError(500, 'RUNTIME_ERROR', `error changing permissions for ${p}. ${osMessage(err)}`);
      }
    }
    sendEmpty(res);
  }

  async function search(res, url) {
    const root = abs(requirePath(url));
    try {
      await fs.promises.stat(root);
    } catch (err) {
      throw fileError(err);
    }
    const pattern = url.searchParams.get('pattern') || '**';
    let re;
    try {
      re = globToRegExp(pattern);
    } catch (err) {
      throw new HttpError(500, 'RUNTIME_ERROR', `error searching files. invalid pattern ${pattern}: ${err.message}`);
    }
    const names = nameTables();
    const found = [];
    // Walk in lexical order without following symlinks; every non-directory whose base name matches is reported.
    async function walk(p) {
      let st;
      try {
        st = await fs.promises.lstat(p, { bigint: true });
      } catch (err) {
        if (err.code === 'ENOENT') return;
        throw new HttpError(500, 'RUNTIME_ERROR', `error searching files. error accessing path ${p}: ${osMessage(err)}`);
      }
      if (st.isDirectory()) {
        let entries;
        try {
          entries = (await fs.promises.readdir(p)).sort();
        } catch (err) {
          throw new HttpError(500, 'RUNTIME_ERROR', `error searching files. error accessing path ${p}: ${osMessage(err)}`);
        }
        for (const e of entries) await walk(path.join(p, e));
      } else if (re.test(path.basename(p))) {
        found.push(buildFileInfo(p, st, names));
      }
    }
    await walk(root);
    sendJson(res, 200, found);
  }

  async function replace(req, res, url) {
    const verbose = url.searchParams.get('verbose') === 'true';
    const body = await readPathMap(req);
    const results = {};
    for (const [p, item] of Object.entries(body)) {
      const file = abs(p);
      let content;
      try {
        await fs.promises.stat(file); // execd stats first: a missing file is "stat P: no such file or directory"
        content = await fs.promises.readFile(file);
      } catch (err) {
        throw fileError(err);
      }
      if (typeof item.old !== 'string' || item.old === '') throw new HttpError(400, 'INVALID_REQUEST_BODY', 'old content must not be empty');
      if (item.new !== undefined && typeof item.new !== 'string') throw new HttpError(400, 'INVALID_REQUEST_BODY', `${BAD_BODY} "new" must be a string`);
      const oldBuf = Buffer.from(item.old, 'utf8');
      const newBuf = Buffer.from(item.new ?? '', 'utf8');
      const parts = [];
      let count = 0;
      let from = 0;
      for (let at = content.indexOf(oldBuf, from); at >= 0; at = content.indexOf(oldBuf, from)) {
        parts.push(content.subarray(from, at), newBuf);
        from = at + oldBuf.length;
        count++;
      }
      parts.push(content.subarray(from));
      try {
        await fs.promises.writeFile(file, Buffer.concat(parts));
      } catch (err) {
        throw fileError(err);
      }
      results[p] = { replacedCount: count };
    }
    if (verbose) sendJson(res, 200, results);
    else sendEmpty(res);
  }

  async function listDir(res, url) {
    const given = requirePath(url);
    let depth = 1;
    const rawDepth = url.searchParams.get('depth');
    if (rawDepth !== null && rawDepth !== '') {
      if (!/^\d+$/.test(rawDepth)) throw new HttpError(400, 'INVALID_REQUEST_BODY', `invalid query parameter 'depth': ${rawDepth}`);
      depth = Number(rawDepth);
    }
    const root = abs(given);
    let st;
    try {
      st = await fs.promises.lstat(root);
    } catch (err) {
      throw fileError(err);
    }
    if (st.isSymbolicLink()) throw new HttpError(400, 'INVALID_REQUEST_BODY', `path is a symbolic link, refusing to traverse: ${root}`);
    if (!st.isDirectory()) throw new HttpError(400, 'INVALID_REQUEST_BODY', `path is not a directory: ${root}`);
    const names = nameTables();
    const out = [];
    async function walk(dir, level) {
      const entries = (await fs.promises.readdir(dir)).sort();
      for (const name of entries) {
        const p = path.join(dir, name);
        const est = await fs.promises.lstat(p, { bigint: true });
        out.push(buildFileInfo(p, est, names));
        if (est.isDirectory() && level + 1 < depth) await walk(p, level + 1);
      }
    }
    if (depth > 0) {
      try {
        await walk(root, 0);
      } catch (err) {
        throw new HttpError(500, 'RUNTIME_ERROR', `error listing directory ${root}. ${osMessage(err)}`);
      }
    }
    sendJson(res, 200, out);
  }

  async function makeDirs(req, res) {
    const body = await readPathMap(req);
    for (const [p, perm] of Object.entries(body)) parseMode(perm.mode, p);
    for (const [p, perm] of Object.entries(body)) {
      const dir = abs(p);
      const existed = fs.existsSync(dir);
      try {
        await mkdirWithOwnership(dir, perm.owner, perm.group);
        const mode = parseMode(perm.mode, p);
        if (!existed && mode !== undefined) await fs.promises.chmod(dir, mode);
      } catch (err) {
        throw fileError(err);
      }
    }
    sendEmpty(res);
  }

  async function removeDirs(res, url) {
    for (const p of url.searchParams.getAll('path')) {
      const dir = abs(p);
      try {
        await fs.promises.rm(dir, { recursive: true, force: true });
      } catch (err) {
        throw new HttpError(500, 'RUNTIME_ERROR', `error removing directory ${p}. ${osMessage(err)}`);
      }
    }
    sendEmpty(res);
  }

  const routes = {
    'GET /files/info': (req, res, url) => info(res, url),
    'DELETE /files': (req, res, url) => removeFiles(res, url),
    'POST /files/upload': (req, res) => handleUpload(req, res, ws),
    'GET /files/download': (req, res, url) => handleDownload(req, res, url, ws, onWriteToClosed),
    'HEAD /files/download': (req, res, url) => handleDownload(req, res, url, ws, onWriteToClosed),
    'POST /files/mv': (req, res) => move(req, res),
    'POST /files/permissions': (req, res) => permissions(req, res),
    'GET /files/search': (req, res, url) => search(res, url),
    'POST /files/replace': (req, res, url) => replace(req, res, url),
    'GET /directories/list': (req, res, url) => listDir(res, url),
    'POST /directories': (req, res) => makeDirs(req, res),
    'DELETE /directories': (req, res, url) => removeDirs(res, url),
  };

  return {
    async handle(req, res, url) {
      const route = routes[`${req.method} ${url.pathname}`];
      if (!route) return false;
      await guard(res, async () => {
        await route(req, res, url);
      });
      return true;
    },
  };
}
