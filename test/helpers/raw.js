// Test helper: raw HTTP over node:http for what clients hide (status, exact headers as sent, body bytes, arrival
// times of stream chunks). Every call has a deadline; nothing here parses execd streams beyond splitting on "\n\n".
import http from 'node:http';

// Endpoint headers answered by `GET …/endpoints/{port}` through request(), by endpoint origin: like a client, later
// requests to that origin send them back (the sandbox's OpenSandbox-Secure-Access token above all). Explicit headers
// win; `endpointHeaders: false` sends none of them (to test refusals).
const remembered = new Map();

function originOf(url) {
  try {
    return new URL(String(url)).origin;
  } catch {
    return null;
  }
}

/** The endpoint headers remembered for url's origin ({} when none). */
export function endpointHeadersFor(url) {
  return remembered.get(originOf(url)) ?? {};
}

/**
 * request(url, { method, headers, body, timeoutMs, endpointHeaders }) -> { status, headers, rawHeaders, text, json, chunks }
 * chunks: [{ at: ms since the request was sent, data: string }] in arrival order; `endAt` = ms at EOF.
 */
export function request(url, { method = 'GET', headers = {}, body, timeoutMs = 15000, endpointHeaders = true } = {}) {
  if (endpointHeaders) headers = { ...endpointHeadersFor(url), ...headers };
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    const payload = body === undefined ? undefined : typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
    // Node frames no body of a DELETE (or GET) by default: without a length the bytes would follow the request unframed
    if (payload !== undefined && !Object.keys(headers).some((h) => /^(content-length|transfer-encoding)$/i.test(h))) {
      headers = { ...headers, 'Content-Length': Buffer.byteLength(payload) };
    }
    const req = http.request(url, { method, headers, agent: false }, (res) => {
      const chunks = [];
      const bufs = [];
      res.on('data', (d) => {
        bufs.push(d);
        chunks.push({ at: Date.now() - t0, data: d.toString('utf8') });
      });
      res.on('end', () => {
        clearTimeout(timer);
        const text = Buffer.concat(bufs).toString('utf8');
        let json;
        try {
          json = JSON.parse(text);
        } catch { /* not JSON */ }
        if (/\/endpoints\/\d+/.test(String(url)) && typeof json?.endpoint === 'string' && json.headers) {
          remembered.set(originOf(`http://${json.endpoint}`), json.headers);
        }
        resolve({ status: res.statusCode, headers: res.headers, rawHeaders: res.rawHeaders, text, json, chunks, endAt: Date.now() - t0 });
      });
      res.on('error', reject);
    });
    const timer = setTimeout(() => {
      req.destroy(new Error(`request ${method} ${url} did not finish within ${timeoutMs} ms`));
    }, timeoutMs);
    req.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    if (payload !== undefined) req.end(payload);
    else req.end();
  });
}

/** Splits an execd event stream body into parsed events (each `{…}\n\n`). Throws on any other framing. */
export function parseEvents(text) {
  if (!text.endsWith('\n\n')) throw new Error(`stream does not end with a blank line: ${JSON.stringify(text.slice(-40))}`);
  return text.slice(0, -2).split('\n\n').map((line) => JSON.parse(line));
}

/** Sleeps without asserting anything; only for observing that something does NOT change during an interval. */
export function quietPeriod(ms) {
  return new Promise((r) => setTimeout(r, ms));
}
