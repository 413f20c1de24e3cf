// Small HTTP helpers shared by the execd route modules (local OpenSandbox-compatible server).
// Error bodies follow execd: {"code":"…","message":"…"}; success with nothing to return is 200 with an empty body.

export class HttpError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * JSON text as Go's encoding/json writes it (the real execd): compact, with `<` `>` `&` and U+2028/U+2029 escaped as
 * \u003c \u003e \u0026 \u2028 \u2029 (HTML-safe); other characters as JSON.stringify writes them.
 */
export function goJson(value) {
  return JSON.stringify(value).replace(/[<>&\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function sendJson(res, status, body, headers = {}) {
  const text = goJson(body);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

export function sendError(res, status, code, message) {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, status, { code, message });
}

/**
 * Starts a `text/event-stream` answer as execd sends it (no buffering by proxies), headers flushed at once. With a
 * registry (a Set), res is in it until the connection closes.
 */
export function openEventStream(res, registry) {
  // execd sets `Connection: keep-alive`, but a request that asked for `Connection: close` gets `close` and the
  // connection is closed after the response (an explicit keep-alive header would make Node keep it open)
  const connection = wantsClose(res.req) ? 'close' : 'keep-alive';
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: connection, 'X-Accel-Buffering': 'no' });
  res.flushHeaders();
  if (registry) {
    registry.add(res);
    res.on('close', () => registry.delete(res));
  }
}

/** True when the request asked to close the connection after the response (HTTP/1.1 `Connection: close`). */
export function wantsClose(req) {
  return /(^|,)\s*close\s*(,|$)/i.test(req?.headers?.connection ?? '');
}

/** An unknown route or method, as Go's net/http mux answers it: text/plain `404 page not found` (no newline). */
export function sendNotFound(res) {
  res.writeHead(404, { 'Content-Type': 'text/plain', 'Content-Length': 18 });
  res.end(res.req?.method === 'HEAD' ? undefined : '404 page not found');
}

/** 200 with Content-Length: 0, as execd answers when there is nothing to return. */
export function sendEmpty(res, status = 200) {
  res.writeHead(status, { 'Content-Length': 0 });
  res.end();
}

/** Reads the whole request body (bounded) as a Buffer. */
export function readBody(req, limit = 64 * 1024 * 1024) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      size += c.length;
      if (size > limit) {
        reject(new HttpError(413, 'INVALID_REQUEST_BODY', `request body larger than ${limit} bytes`));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** The text of Go's JSON decoder for what JSON.parse rejected: input that ends too early is "unexpected EOF". */
function jsonSyntaxText(text, err) {
  const m = /at position (\d+)/.exec(err.message);
  if (/end of JSON input|Unterminated/.test(err.message) || (m && text.slice(Number(m[1])).trim() === '')) return 'unexpected EOF';
  return err.message;
}

/**
 * Reads and parses a JSON body; malformed JSON is a 400 INVALID_REQUEST_BODY as in execd, worded like Go's decoder
 * after `prefix` (execd's "error parsing request, MAYBE invalid body format. ", or its PTY route's "error parsing request: ").
 */
export async function readJson(req, { optional = false, prefix = 'error parsing request, MAYBE invalid body format. ' } = {}) {
  const buf = await readBody(req);
  if (buf.length === 0) {
    if (optional) return undefined;
    throw new HttpError(400, 'INVALID_REQUEST_BODY', `${prefix}EOF`);
  }
  const text = buf.toString('utf8');
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, 'INVALID_REQUEST_BODY', `${prefix}${jsonSyntaxText(text, err)}`);
  }
}

/** Runs an async route body and turns a thrown HttpError (or anything else) into an execd error response. */
export async function guard(res, fn) {
  try {
    await fn();
  } catch (err) {
    if (err instanceof HttpError) sendError(res, err.status, err.code, err.message);
    else sendError(res, 500, 'RUNTIME_ERROR', String(err?.message ?? err));
  }
}
