// Small HTTP helpers shared by the execd route modules (local OpenSandbox-compatible server).
// Error bodies follow execd: {"code":"…","message":"…"}; success with nothing to return is 200 with an empty body.

export class HttpError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function sendJson(res, status, body, headers = {}) {
  const text = JSON.stringify(body);
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
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive', 'X-Accel-Buffering': 'no' });
  res.flushHeaders();
  if (registry) {
    registry.add(res);
    res.on('close', () => registry.delete(res));
  }
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

/** Reads and parses a JSON body; malformed JSON is a 400 INVALID_REQUEST_BODY as in execd. */
export async function readJson(req, { optional = false } = {}) {
  const buf = await readBody(req);
  if (buf.length === 0) {
    if (optional) return undefined;
    throw new HttpError(400, 'INVALID_REQUEST_BODY', 'error parsing request, MAYBE invalid body format: EOF');
  }
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch (err) {
    throw new HttpError(400, 'INVALID_REQUEST_BODY', `error parsing request, MAYBE invalid body format: ${err.message}`);
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
