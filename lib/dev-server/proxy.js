// Reverse proxying of the host-side lifecycle server: the server proxy route (index.js) and the header-checking relays
// (relay.js) forward HTTP requests and upgrades to a sandbox's execd (its Unix socket) or to a port. Inside the sandbox
// the C execd's /proxy/{port} route does the last hop (src/execd/proxy.c).
import http from 'node:http';
import net from 'node:net';
import { sendJson } from './http.js';

export const EXECD_PORT = 44772;
/**
 * Request headers that carry an access token (lowercase): the sandbox's own `OpenSandbox-Secure-Access` and execd's
 * `X-EXECD-ACCESS-TOKEN`. execd's proxy drops them toward a sandbox's own service (the last hop of every path to it:
 * the relays and the server proxy route drop the sandbox token before execd, which checks its own); execd itself
 * (/proxy/44772) keeps them.
 */
export const APP_DROP_HEADERS = new Set(['opensandbox-secure-access', 'x-execd-access-token']);

const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'trailers',
  'transfer-encoding', 'upgrade', 'proxy-connection', 'host',
]);

/** Request headers to forward, as a flat raw list (case kept), without hop-by-hop and `drop` (lowercase names). */
function forwardHeaders(rawHeaders, drop, keepUpgrade) {
  const out = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase();
    if (drop.has(name)) continue;
    if (HOP_BY_HOP.has(name) && !(keepUpgrade && (name === 'connection' || name === 'upgrade'))) continue;
    out.push(rawHeaders[i], rawHeaders[i + 1]);
  }
  return out;
}

function connectOptions(target) {
  return target.socketPath ? { path: target.socketPath } : { host: target.host ?? '127.0.0.1', port: target.port };
}

/**
 * Forwards one HTTP request to target ({ socketPath } or { host, port }) at `path` (path + query) and streams the
 * answer back unchanged. Options: drop (Set of lowercase header names to strip), hostHeader.
 */
export function proxyRequest(req, res, target, path, { drop = new Set(), hostHeader } = {}) {
  const headers = forwardHeaders(req.rawHeaders, drop, false);
  headers.push('Host', hostHeader ?? (target.socketPath ? 'localhost' : `127.0.0.1:${target.port}`));
  const where = target.socketPath ? { socketPath: target.socketPath } : { host: target.host ?? '127.0.0.1', port: target.port };
  const up = http.request({ ...where, method: req.method, path, headers, agent: false });
  up.on('response', (ur) => {
    const out = [];
    for (let i = 0; i < ur.rawHeaders.length; i += 2) {
      const name = ur.rawHeaders[i].toLowerCase();
      if (name !== 'host' && HOP_BY_HOP.has(name)) continue;
      out.push(ur.rawHeaders[i], ur.rawHeaders[i + 1]);
    }
    try {
      res.writeHead(ur.statusCode, ur.statusMessage, out);
    } catch (err) {
      // an answer Node's parser took but cannot pass on (e.g. status 099 from whatever listens on the sandbox's
      // socket: the sandbox's code can replace execd): a 502, never an exception that ends this process
      ur.destroy();
      if (res.headersSent) return void res.destroy();
      res.statusMessage = http.STATUS_CODES[502]; // writeHead kept the refused reason phrase
      sendJson(res, 502, { code: 'PROXY_ERROR', message: `invalid answer from ${describe(target)}: ${err.message}` });
      return;
    }
    res.flushHeaders();
    ur.pipe(res);
    ur.on('error', () => res.destroy());
  });
  up.on('error', (err) => {
    if (res.headersSent) res.destroy();
    else sendJson(res, 502, { code: 'PROXY_ERROR', message: `cannot reach ${describe(target)}: ${err.code ?? err.message}` });
  });
  res.on('close', () => {
    if (!up.destroyed && !res.writableFinished) up.destroy();
  });
  forwardBody(req, up);
}

/**
 * Streams req's body into up (with backpressure, like pipe) but ends up WITH the last byte of a Content-Length body.
 * Ending it on req's 'end' (what pipe does) queues an empty write of its own behind the body (e.g. when body and end
 * came before the connection was made), issued after the body's write: by then the target may have read the whole
 * body, answered and closed the connection (execd does, as the request says `Connection: close`), the empty write
 * fails with EPIPE and the answer waiting in the socket is lost for a 502. A chunked body ends with its terminator,
 * which the target waits for before it answers.
 */
function forwardBody(req, up) {
  const length = req.headers['transfer-encoding'] === undefined ? Number(req.headers['content-length']) : NaN;
  let left = Number.isSafeInteger(length) && length > 0 ? length : null;
  req.on('data', (chunk) => {
    if (up.destroyed || up.writableEnded) return;
    if (left !== null && (left -= chunk.length) <= 0) return void up.end(chunk);
    if (!up.write(chunk)) {
      req.pause();
      up.once('drain', () => req.resume());
    }
  });
  req.on('end', () => {
    if (!up.destroyed && !up.writableEnded) up.end();
  });
}

function describe(target) {
  return target.socketPath ? 'the sandbox' : `port ${target.port}`;
}

/** Forwards a WebSocket (or any) upgrade: replays the request head to target, then relays bytes both ways. */
export function proxyUpgrade(req, socket, head, target, path, { drop = new Set(), hostHeader } = {}) {
  const headers = forwardHeaders(req.rawHeaders, drop, true);
  headers.push('Host', hostHeader ?? (target.socketPath ? 'localhost' : `127.0.0.1:${target.port}`));
  let text = `${req.method} ${path} HTTP/1.1\r\n`;
  for (let i = 0; i < headers.length; i += 2) text += `${headers[i]}: ${headers[i + 1]}\r\n`;
  text += '\r\n';
  const up = net.connect(connectOptions(target));
  up.on('connect', () => {
    up.write(text);
    if (head?.length) up.write(head);
    up.pipe(socket);
    socket.pipe(up);
  });
  up.on('error', () => {
    if (!up.connecting && socket.bytesWritten > 0) return socket.destroy();
    const body = JSON.stringify({ code: 'PROXY_ERROR', message: `cannot reach ${describe(target)}` });
    socket.end(`HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
  });
  socket.on('error', () => up.destroy());
  socket.on('close', () => up.destroy());
  up.on('close', () => socket.destroy());
}

/**
 * The proxy route of a canonical URL (http.js parseTarget): `/proxy/{port}[/rest]` → { port, path } (path = rest +
 * query, what is forwarded), { bad } for a port that is not 1..65535, or null (not a proxy path: execd's own API).
 * The one place that says which requests go to a sandbox's own service: execd routes by it and the host's relays and
 * server proxy route decide on the token by it.
 */
export function proxyRoute(url) {
  const m = /^\/proxy\/([^/]*)(\/.*)?$/.exec(url.pathname);
  if (!m) return null;
  const port = Number(m[1]);
  if (!/^\d+$/.test(m[1]) || port < 1 || port > 65535) return { bad: m[1] };
  return { port, path: (m[2] ?? '/') + url.search };
}

/** True when a canonical URL goes to a service of the sandbox (a port other than execd's) through execd's proxy. */
export function isAppRoute(url) {
  const p = proxyRoute(url);
  return !!p && p.bad === undefined && p.port !== EXECD_PORT;
}
