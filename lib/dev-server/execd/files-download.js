// `GET /files/download` of execd (local OpenSandbox-compatible server).
// Byte mode: 200 application/octet-stream with Content-Disposition (attachment; filename="<base name>", RFC 5987
// form for non-ASCII names), Accept-Ranges: bytes, Last-Modified, Content-Length; `Range: bytes=a-b` (also `a-`
// and `-n`; of several ranges only the first satisfiable one is served, as execd) -> 206 with Content-Range (no
// Accept-Ranges / Last-Modified); no satisfiable range / malformed Range -> 416 with Go's plain-text error. Line mode:
// `offset` (1-based line) and `limit` (lines), both required together -> 200 text/plain with those lines (terminators
// kept except after the last).
import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { HttpError } from './http.js';
import { expandAbsPath } from './files-paths.js';
import { fileError } from './files-info.js';

function contentDisposition(name) {
  if (/^[\x00-\x7f]*$/.test(name)) return `attachment; filename="${name}"`;
  const enc = encodeURIComponent(name);
  return `attachment; filename="${enc}"; filename*=UTF-8''${enc}`;
}

/** First satisfiable range of a `bytes=` header: {start, end} (inclusive), null if none, throws if malformed. */
export function parseRange(header, size) {
  if (!header.startsWith('bytes=')) throw new Error('invalid range');
  for (let spec of header.slice(6).split(',')) {
    spec = spec.trim();
    if (spec === '') continue;
    const dash = spec.indexOf('-');
    if (dash < 0) throw new Error('invalid range');
    const a = spec.slice(0, dash).trim();
    const b = spec.slice(dash + 1).trim();
    let start;
    let end;
    if (a === '') {
      if (!/^\d+$/.test(b)) throw new Error('invalid range');
      const n = Math.min(Number(b), size);
      start = size - n;
      end = size - 1;
    } else {
      if (!/^\d+$/.test(a) || (b !== '' && !/^\d+$/.test(b))) throw new Error('invalid range');
      start = Number(a);
      end = b === '' ? size - 1 : Number(b);
      if (end < start) throw new Error('invalid range');
    }
    if (start >= size || end < start) continue;
    return { start, end: Math.min(end, size - 1) };
  }
  return null;
}

/** Opens file for reading; failures become execd's file errors. */
async function openFile(file) {
  try {
    return await fs.promises.open(file, 'r');
  } catch (err) {
    throw fileError(err);
  }
}

/** Lines [offset, offset+limit) of a file, 1-based, terminators kept, read in chunks (bytes, not decoded). */
async function serveLines(res, file, offset, limit) {
  const handle = await openFile(file);
  try {
    const out = [];
    const buf = Buffer.allocUnsafe(256 * 1024);
    let line = 1;
    let written = 0;
    let pos = 0;
    scan: for (;;) {
      const { bytesRead } = await handle.read(buf, 0, buf.length, pos);
      if (bytesRead === 0) break;
      pos += bytesRead;
      let from = 0;
      while (from < bytesRead) {
        const nl = buf.indexOf(0x0a, from);
        const stop = nl < 0 || nl >= bytesRead ? bytesRead : nl + 1;
        if (line >= offset) out.push(Buffer.from(buf.subarray(from, stop)));
        from = stop;
        if (nl >= 0 && nl < bytesRead) {
          if (line >= offset && ++written >= limit) break scan;
          line++;
        }
      }
    }
    let body = Buffer.concat(out);
    // execd joins the lines with "\n": no terminator after the last one
    if (body.at(-1) === 0x0a) body = body.subarray(0, -1);
    res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': body.length });
    res.end(body);
  } finally {
    await handle.close();
  }
}

/**
 * onWriteToClosed (execd --signal-forwarding): called when the client closed the connection before the body's end,
 * as the real execd's next write then raises SIGPIPE, which it relays to its foreground command.
 */
export async function handleDownload(req, res, url, workspace, onWriteToClosed = null) {
  const p = url.searchParams.get('path');
  if (!p) throw new HttpError(400, 'MISSING_QUERY', "missing query parameter 'path'");
  const file = expandAbsPath(p, workspace);
  const offsetStr = url.searchParams.get('offset') ?? '';
  const limitStr = url.searchParams.get('limit') ?? '';
  if (offsetStr !== '' || limitStr !== '') {
    if (offsetStr === '' || limitStr === '') {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', 'both offset and limit must be provided together for line-based reading');
    }
    if (!/^\d+$/.test(offsetStr) || Number(offsetStr) < 1) {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', 'offset must be a positive integer (1-based)');
    }
    if (!/^\d+$/.test(limitStr) || Number(limitStr) < 1) {
      throw new HttpError(400, 'INVALID_REQUEST_BODY', 'limit must be a positive integer');
    }
    return serveLines(res, file, Number(offsetStr), Number(limitStr));
  }

  const handle = await openFile(file);
  try {
    const st = await handle.stat();
    if (st.isDirectory()) throw new HttpError(400, 'INVALID_FILE', `path is a directory: ${file}`);
    const size = st.size;
    const headers = {
      'Content-Type': 'application/octet-stream',
      'Content-Disposition': contentDisposition(path.basename(file)),
      'Accept-Ranges': 'bytes',
      'Last-Modified': st.mtime.toUTCString(),
    };
    let start = 0;
    let end = size - 1;
    let status = 200;
    const rangeHeader = req.headers.range;
    if (rangeHeader) {
      let r;
      let why = 'invalid range: failed to overlap';
      try {
        r = parseRange(rangeHeader, size);
      } catch {
        r = null;
        why = 'invalid range';
      }
      if (!r) {
        // Go's http.ServeContent: plain-text error, the headers set before it stay, Accept-Ranges does not
        const body = `${why}\n`;
        res.writeHead(416, {
          'Content-Disposition': headers['Content-Disposition'], 'Content-Range': `bytes */${size}`, 'Content-Type': 'text/plain; charset=utf-8',
          'Last-Modified': headers['Last-Modified'], 'X-Content-Type-Options': 'nosniff', 'Content-Length': Buffer.byteLength(body),
        });
        res.end(body);
        return;
      }
      ({ start, end } = r);
      status = 206;
      headers['Content-Range'] = `bytes ${start}-${end}/${size}`;
      // execd answers a range without Accept-Ranges and Last-Modified
      delete headers['Accept-Ranges'];
      delete headers['Last-Modified'];
    }
    const length = size === 0 ? 0 : end - start + 1;
    headers['Content-Length'] = length;
    res.writeHead(status, headers);
    if (req.method === 'HEAD' || length === 0) {
      res.end();
      return;
    }
    try {
      await pipeline(handle.createReadStream({ start, end, autoClose: false }), res);
    } catch (err) {
      if (res.destroyed && !res.writableFinished) onWriteToClosed?.(); // the client closed before the end
      throw err;
    }
  } finally {
    await handle.close();
  }
}
