// HTTP helpers of the host-side lifecycle server (index.js) and its relays (relay.js): the request target parsed
// once (parseTarget, the same rules as the C execd's xd_parse_target, src/execd/server.c), Go's raw 400, a bounded
// body reader, JSON answers written like Go's encoding/json.

/** An HTTP error a reader rejects with: status, code and message. */
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

/** Largest request body execd reads (64 MiB). */
export const BODY_LIMIT = 64 * 1024 * 1024;
/** A too-large body is still read (and discarded) up to this many bytes past the limit before the 413 goes out. */
export const DISCARD_LIMIT = 256 * 1024 * 1024;

/**
 * Reads the whole request body, at most `limit` bytes, as a Buffer. A larger body rejects with `tooLarge(limit)`
 * and keeps nothing. The rejection waits until the rest of the body has been read and discarded, so that the client,
 * which is still writing it, then reads the 413 rather than a connection reset (Node closes a connection whose
 * request was answered before it was read). Beyond DISCARD_LIMIT more bytes (declared up front or arrived), the
 * answer goes out at once and the connection is closed after it.
 */
export function readBody(req, limit = BODY_LIMIT, tooLarge = (n) => new HttpError(413, 'INVALID_REQUEST_BODY', `request body larger than ${n} bytes`)) {
  return new Promise((resolve, reject) => {
    let chunks = [];
    let size = 0;
    let failed = false;
    const fail = () => {
      chunks = null;
      if (!failed) reject(tooLarge(limit));
      failed = true;
    };
    const declared = Number(req.headers['content-length']);
    if (declared > limit + DISCARD_LIMIT) fail();
    else if (declared > limit) chunks = null;
    req.on('data', (c) => {
      size += c.length;
      if (size > limit) chunks = null;
      if (size > limit + DISCARD_LIMIT) fail();
      chunks?.push(c);
    });
    req.on('end', () => {
      if (chunks) resolve(Buffer.concat(chunks));
      else fail();
    });
    req.on('error', reject);
  });
}

/** A `%` not followed by two hex digits: the real execd (Go's net/http) refuses such a path before routing. */
const BAD_ESCAPE = /%(?![0-9a-fA-F]{2})/;
/** Bytes a canonical path segment keeps as they are (RFC 3986 unreserved, sub-delims, ':' and '@'); all others are %XX. */
const PATH_KEEP = /^[A-Za-z0-9\-._~!$&'()*+,;=:@]$/;

/**
 * Parses an HTTP request target ONCE into its canonical form, for every hop that decides on a path or routes it: the
 * host's relays and server proxy route (the token decision) and execd's router (docs/dev-server-security.md, "One
 * parse"). Returns { url, target } — `url` a URL whose `pathname` is the canonical path (each segment percent-decoded,
 * then re-encoded the one way: unreserved characters, sub-delims, ':' and '@' as they are, every other byte %XX in
 * capitals; what Go's execd routes on after its one decode) and `target` = url.pathname + url.search, the exact text
 * to forward — or { error, malformed } for a target that is refused (400): not origin-form (absolute-form
 * `http://host/p` is reduced to `/p`, as Go's server does), a byte outside visible ASCII, a fragment, a malformed
 * escape (`malformed`: Go's own 400), a dot segment (`.`/`..`, encoded or not), an encoded separator (`%2F`, `%5C`),
 * a backslash, or an empty segment (`//`; a trailing `/` is kept). Nothing is ever resolved: a refused target is
 * never turned into another path that a check did not see.
 */
export function parseTarget(raw) {
  if (typeof raw !== 'string' || raw === '') return { error: 'empty request target' };
  if (/[^\x21-\x7e]/.test(raw)) return { error: 'request target with a space, control or non-ASCII byte' };
  let t = raw;
  const absolute = /^https?:\/\/[^/?#]*/i.exec(t);
  if (absolute) {
    t = t.slice(absolute[0].length);
    if (t === '' || t[0] === '?') t = `/${t}`;
  }
  if (t[0] !== '/') return { error: 'request target must be a path or an absolute http URL' };
  if (t.includes('#')) return { error: 'fragment (#) in request target' };
  const q = t.indexOf('?');
  const rawPath = q < 0 ? t : t.slice(0, q);
  const segments = rawPath.slice(1).split('/');
  const canonical = [];
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i];
    if (BAD_ESCAPE.test(seg)) return { error: `invalid URL escape in ${JSON.stringify(seg)}`, malformed: true };
    if (seg === '' && i < segments.length - 1) return { error: 'empty path segment (//) in request target' };
    if (seg.includes('\\') || /%(2f|5c)/i.test(seg)) return { error: 'encoded or backslash path separator in request target' };
    let out = '';
    let decoded = '';
    for (let j = 0; j < seg.length; j++) {
      let c = seg[j];
      if (c === '%') {
        c = String.fromCharCode(parseInt(seg.slice(j + 1, j + 3), 16));
        j += 2;
      }
      decoded += c;
      out += PATH_KEEP.test(c) ? c : `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`;
    }
    if (decoded === '.' || decoded === '..') return { error: 'dot segment (. or ..) in request path' };
    canonical.push(out);
  }
  const path = `/${canonical.join('/')}`;
  const url = new URL(path + (q < 0 ? '' : t.slice(q)), 'http://target');
  // never reached by the rules above; kept so that no future rule can make the URL parser resolve what was checked
  if (url.pathname !== path) return { error: 'request path is not canonical' };
  return { url, target: url.pathname + url.search };
}

/** Go's answer to a request line it cannot parse (net/http server), written raw; the connection is closed. */
export function answerBadRequest(socket) {
  socket.end('HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request');
}

/** The same answer through an HTTP response (in order after earlier pipelined requests); the connection is closed. */
export function sendBadRequest(res) {
  res.writeHead(400, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close', 'Content-Length': 15 });
  res.end('400 Bad Request');
  res.req?.resume();
}

/**
 * Decodes one percent-encoded path segment like Go's url.PathUnescape: escapes are bytes, bytes that are not UTF-8
 * become U+FFFD. Never throws on a segment of a parseTarget() path (a malformed escape is a 400 here).
 */
export function decodeSegment(s) {
  if (!s.includes('%')) return s;
  if (BAD_ESCAPE.test(s)) throw new HttpError(400, 'INVALID_REQUEST_BODY', `invalid URL escape in ${JSON.stringify(s)}`);
  const bytes = [];
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '%') {
      bytes.push(Buffer.from([parseInt(s.slice(i + 1, i + 3), 16)]));
      i += 2;
    } else {
      let j = i;
      while (j < s.length && s[j] !== '%') j++;
      bytes.push(Buffer.from(s.slice(i, j), 'utf8'));
      i = j - 1;
    }
  }
  return Buffer.concat(bytes).toString('utf8');
}
