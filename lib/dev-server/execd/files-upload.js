// `POST /files/upload` of execd (local OpenSandbox-compatible server): multipart pairs of a `metadata` part (JSON
// FileMetadata {path, mode?, owner?, group?}, which must be a FILE part, i.e. carry a filename) and a `file` part;
// the i-th metadata pairs with the i-th file. Like the real execd the whole form is received before anything is
// written (file parts are held in memory up to 4 MiB per form, the rest spooled to a private temp directory inside the
// sandbox, made only when needed), then each pair is written:
// parents created (mkdir -p, new dirs get the owner/group), file truncated/created 0777&~umask, data copied,
// fsynced (file and parent directory), then mode/owner/group applied.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { HttpError } from './http.js';
import { expandAbsPath } from './files-paths.js';
import { applyOwnership, applyPermission, osMessage, parseMode } from './files-info.js';
import { mkdirp } from './mkdirp.js';
const require = createRequire(import.meta.url); // busboy (CommonJS) loaded at the first upload, not at start

const METADATA_LIMIT = 1024 * 1024;
/** Go's multipart reader (ReadForm) refuses a form of more than 1,000 parts; execd then answers "multipart form is empty". */
const MAX_PARTS = 1000;
/** File bytes of one form held in memory; a part that would pass it goes to a temp file. */
const MEMORY_LIMIT = 4 * 1024 * 1024;

/**
 * Receives the multipart body: { metadata: Buffer[], files: { chunks: Buffer[] | null, path: string | null }[], dir }
 * (a file part is in `chunks` or, spooled, at `path` in `dir`; dir is null when nothing was spooled).
 */
function receiveForm(req) {
  return new Promise((resolve, reject) => {
    const type = req.headers['content-type'] ?? '';
    if (!/^multipart\/form-data/i.test(type)) {
      reject(new HttpError(400, 'INVALID_FILE', 'multipart form is empty'));
      req.resume();
      return;
    }
    let bb;
    try {
      bb = require('busboy')({ headers: req.headers, limits: { fieldSize: METADATA_LIMIT, parts: MAX_PARTS + 1 } }); // partsLimit: at the 1,001st
    } catch (err) {
      reject(new HttpError(400, 'INVALID_FILE', `multipart form is empty: ${err.message}`));
      req.resume();
      return;
    }
    let dir = null;
    let memory = 0;
    const metadata = [];
    const files = [];
    const pending = [];
    const outs = [];
    let failed = false;
    const fail = (err) => {
      if (failed) return;
      failed = true;
      req.unpipe(bb);
      req.resume();
      for (const o of outs) o.destroy();
      // once no spool file is being created any more (rmSync racing a stream's open threw ENOTEMPTY out of execd)
      Promise.allSettled(pending).then(() => dir && fs.promises.rm(dir, { recursive: true, force: true })).catch(() => {});
      reject(err);
    };
    bb.on('file', (name, stream, info) => {
      if (failed) {
        stream.resume(); // parts busboy still had buffered when the form failed
        return;
      }
      stream.on('error', (err) => fail(new HttpError(400, 'INVALID_FILE', `error parsing multipart form: ${err.message}`)));
      if (info.filename === undefined) {
        // busboy calls an octet-stream part without filename a file; execd (Go) calls it a plain field.
        stream.resume();
      } else if (name === 'metadata') {
        const chunks = [];
        let size = 0;
        stream.on('data', (c) => {
          size += c.length;
          if (size > METADATA_LIMIT) fail(new HttpError(400, 'INVALID_FILE_METADATA', 'metadata part larger than 1 MiB'));
          else chunks.push(c);
        });
        stream.on('end', () => metadata.push(Buffer.concat(chunks)));
      } else if (name === 'file') {
        const entry = { chunks: [], path: null };
        const index = files.length;
        files.push(entry);
        let out = null;
        let size = 0;
        let spoolFailed = false;
        const written = new Promise((res, rej) => {
          const spool = () => {
            dir ??= fs.mkdtempSync(path.join(os.tmpdir(), 'execd-upload-'));
            entry.path = path.join(dir, String(index));
            out = fs.createWriteStream(entry.path);
            outs.push(out);
            out.on('finish', res);
            out.on('error', rej);
            out.on('close', res); // destroyed by a failure: settles for the spool directory's removal
            for (const c of entry.chunks) out.write(c);
            entry.chunks = null;
            memory -= size;
          };
          stream.on('data', (c) => {
            if (failed || spoolFailed) return;
            if (out === null) {
              if (memory + c.length <= MEMORY_LIMIT) {
                entry.chunks.push(c);
                size += c.length;
                memory += c.length;
                return;
              }
              try {
                spool();
              } catch (err) {
                spoolFailed = true; // the rest of the part is read and dropped; the form fails once it is received
                rej(err);
                return;
              }
            }
            if (!out.write(c)) {
              stream.pause();
              out.once('drain', () => stream.resume());
            }
          });
          stream.on('end', () => (out ? out.end() : res()));
          // a part cut short ends with an error, not 'end': one held in memory settles here (a spooled one when
          // fail() destroys its file), or the spool directory of the parts before it was never removed
          stream.on('error', () => out || res());
        });
        written.catch(() => {}); // after a failure nobody waits for it
        pending.push(written);
      } else {
        stream.resume();
      }
    });
    bb.on('error', (err) => fail(new HttpError(400, 'INVALID_FILE', `error parsing multipart form: ${err.message}`)));
    // nothing written; answered once the rest of the body is read (an answer while the client still writes resets it)
    bb.on('partsLimit', () => {
      const err = new HttpError(400, 'INVALID_FILE', 'multipart form is empty');
      if (req.complete) fail(err);
      else {
        req.once('end', () => fail(err));
        req.unpipe(bb);
        req.resume();
      }
    });
    bb.on('close', () => {
      if (failed) return;
      Promise.all(pending).then(
        () => resolve({ metadata, files, dir }),
        (err) => fail(new HttpError(500, 'RUNTIME_ERROR', `error receiving file: ${osMessage(err)}`)),
      );
    });
    req.on('aborted', () => fail(new HttpError(400, 'INVALID_FILE', 'request aborted')));
    req.on('error', (err) => fail(new HttpError(400, 'INVALID_FILE', `error reading request: ${err.message}`)));
    req.pipe(bb);
  });
}

function parseMetadata(buf) {
  let meta;
  try {
    meta = JSON.parse(buf.toString('utf8'));
  } catch (err) {
    throw new HttpError(400, 'INVALID_FILE_METADATA', `invalid metadata format. ${err.message}`);
  }
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta)) {
    throw new HttpError(400, 'INVALID_FILE_METADATA', 'invalid metadata format. expected a JSON object');
  }
  if (typeof meta.path !== 'string' || meta.path === '') {
    throw new HttpError(400, 'INVALID_FILE_METADATA', 'metadata path is empty');
  }
  parseMode(meta.mode, meta.path);
  return meta;
}

/** mkdir -p that gives owner/group to the directories it created (not to existing ones). */
export async function mkdirWithOwnership(dir, owner, group) {
  const first = await mkdirp(dir);
  if (first === undefined || (!owner && !group)) return first;
  const rel = path.relative(first, dir);
  let cur = first;
  await applyOwnership(cur, owner, group);
  for (const part of rel ? rel.split(path.sep) : []) {
    cur = path.join(cur, part);
    await applyOwnership(cur, owner, group);
  }
  return first;
}

/** Writes a received file part (in memory or spooled) to dest, then fsyncs it and its directory. */
async function writeAndSync(part, dest) {
  const fd = await fs.promises.open(dest, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC, 0o777);
  try {
    if (part.path === null) {
      const data = part.chunks.length === 1 ? part.chunks[0] : Buffer.concat(part.chunks);
      let off = 0;
      while (off < data.length) off += (await fd.write(data, off, data.length - off)).bytesWritten;
    } else {
      await copyFrom(part.path, fd);
    }
    await fd.sync();
  } finally {
    await fd.close();
  }
  try {
    const d = await fs.promises.open(path.dirname(dest), 'r');
    await d.sync().catch(() => {});
    await d.close();
  } catch {
    // best effort, as execd
  }
}

/** Copies a spooled part into the open destination. */
async function copyFrom(src, fd) {
  const input = await fs.promises.open(src, 'r');
  try {
    const buf = Buffer.allocUnsafe(1024 * 1024);
    for (;;) {
      const { bytesRead } = await input.read(buf, 0, buf.length, null);
      if (bytesRead === 0) break;
      let off = 0;
      while (off < bytesRead) off += (await fd.write(buf, off, bytesRead - off)).bytesWritten;
    }
  } finally {
    await input.close();
  }
}

export async function handleUpload(req, res, workspace) {
  const form = await receiveForm(req);
  try {
    if (form.metadata.length === 0) throw new HttpError(400, 'INVALID_FILE_METADATA', 'metadata file is missing');
    if (form.files.length === 0) throw new HttpError(400, 'INVALID_FILE_CONTENT', 'file is missing');
    if (form.metadata.length !== form.files.length) {
      throw new HttpError(400, 'INVALID_FILE',
        `metadata and file count mismatch: ${form.metadata.length} vs ${form.files.length}`);
    }
    for (let i = 0; i < form.files.length; i++) {
      const meta = parseMetadata(form.metadata[i]);
      const target = expandAbsPath(meta.path, workspace);
      const dir = path.dirname(target);
      try {
        await mkdirWithOwnership(dir, meta.owner, meta.group);
      } catch (err) {
        throw new HttpError(500, 'RUNTIME_ERROR', `error creating target directory ${dir}. ${osMessage(err)}`);
      }
      try {
        await writeAndSync(form.files[i], target);
      } catch (err) {
        throw new HttpError(500, 'RUNTIME_ERROR', `error opening destination file ${target}. ${osMessage(err)}`);
      }
      try {
        await applyPermission(target, meta, meta.path);
      } catch (err) {
        if (err instanceof HttpError) throw err;
        throw new HttpError(500, 'RUNTIME_ERROR', `error chmoding file ${target}. ${osMessage(err)}`);
      }
    }
  } finally {
    if (form.dir) await fs.promises.rm(form.dir, { recursive: true, force: true });
  }
  res.writeHead(200, { 'Content-Length': 0 });
  res.end();
}
