// Per-sandbox loopback relay: a random 127.0.0.1 TCP port whose connections go to the sandbox's execd Unix socket.
// Any local user can connect to it, so it demands the sandbox's own token (`OpenSandbox-Secure-Access`, an endpoint
// header); browser-originated requests are refused. (A server-wide X-EXECD-ACCESS-TOKEN is execd's own check.)
// Every decision is made on the request target parsed once (http.js parseTarget, the parse execd routes by);
// a target that parse refuses (dot segments, encoded separators, …) is a 400. Plain mode checks the head of a
// connection's first request: to execd with the token, the connection is relayed byte for byte (HTTP, event streams
// and WebSocket alike); to a service of the sandbox (`/proxy/<port>`), every request of the connection is parsed,
// decided and forwarded in its canonical form without the sandbox token. Header mode (endpointHeaders) emulates a
// header-routed gateway: every request must carry `OpenSandbox-Ingress-To: <sandbox id>-<port>` (else 404) and is
// routed by it: port 44772 to execd, any other port to execd's `/proxy/<port>` (the sandbox's 127.0.0.1:<port>); the
// sandbox token is checked on every request and not forwarded into the sandbox.
import net from 'node:net';
import http from 'node:http';
import { proxyRequest, proxyUpgrade, EXECD_PORT, isAppRoute } from './proxy.js';
import { answerBadRequest, parseTarget, sendBadRequest } from './http.js';
import { SECURE_ACCESS_HEADER, checkExecdAccess, httpAnswer, parseRequestHead } from './security.js';

const HEAD_LIMIT = 64 * 1024;

function answer(res, req, { status, body }) {
  if (res.headersSent) return void res.destroy();
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
  req.resume();
}
const HEAD_TIMEOUT_MS = 30_000;
/**
 * The token header the relay and the server proxy check and never pass into the sandbox (execd's proxy drops every
 * token header toward the sandbox's services: proxy.js APP_DROP_HEADERS).
 */
export const TOKEN_HEADERS = new Set([SECURE_ACCESS_HEADER.toLowerCase()]);

export const INGRESS_HEADER = 'OpenSandbox-Ingress-To';

/**
 * The relay's decision on a request target, made on the one parse execd routes by (http.js parseTarget):
 * { error } (refused, 400), else { url, target, app }: `target` is what is forwarded, `app` true when it goes to a
 * service of the sandbox (execd's proxy to a port other than 44772: no token needed), false for execd (token needed).
 */
export function decide(rawTarget) {
  const t = parseTarget(rawTarget);
  return t.error ? t : { ...t, app: isAppRoute(t.url) };
}

const badTarget = (d) => ({ status: 400, body: { code: 'GENERAL::BAD_REQUEST', message: d.error } });
/**
 * Answers a refused target, on a raw socket or (pipelining keeps its order) through an HTTP response: a malformed escape
 * gets execd's own (Go's) 400 and the connection closes, the rest a 400 naming why.
 */
function refuseTarget(socket, d) {
  if (d.malformed) return answerBadRequest(socket);
  const a = badTarget(d);
  socket.end(httpAnswer(a.status, a.body));
}
function refuseTargetRes(res, req, d) {
  return d.malformed ? sendBadRequest(res) : answer(res, req, badTarget(d));
}
const internal = (err) => ({ status: 500, body: { code: 'GENERAL::UNKNOWN_ERROR', message: String(err?.message ?? err) } });

function listen(server, host) {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => {
      server.off('error', reject);
      resolve(server.address().port);
    });
  });
}

/**
 * Starts a relay to socketPath. ingressId: the sandbox id that header mode demands, or null for plain mode; token:
 * the sandbox's access token. Returns { port, close }.
 */
export async function startRelay(socketPath, { ingressId = null, host = '127.0.0.1', token } = {}) {
  const sockets = new Set();
  let server;
  // every handler answers a failure of its own (500) instead of throwing out of the server
  const guarded = (fn) => (req, res) => {
    try {
      fn(req, res);
    } catch (err) {
      answer(res, req, internal(err));
    }
  };
  const guardedUpgrade = (fn) => (req, socket, head) => {
    try {
      fn(req, socket, head);
    } catch (err) {
      const a = internal(err);
      socket.end(httpAnswer(a.status, a.body));
    }
  };
  if (!ingressId) {
    // connections whose first request goes to a service of the sandbox (/proxy/{port}, not execd's) are parsed request
    // by request: each is decided on its own (a later request to execd needs the token) and forwarded without tokens
    const apps = http.createServer(guarded((req, res) => {
      const d = decide(req.url);
      if (d.error) return void refuseTargetRes(res, req, d);
      const refusal = d.app ? null : checkExecdAccess(req.headers, token);
      if (refusal) return void answer(res, req, refusal);
      proxyRequest(req, res, { socketPath }, d.target, { drop: TOKEN_HEADERS });
    }));
    apps.on('upgrade', guardedUpgrade((req, socket, head) => {
      const d = decide(req.url);
      if (d.error) return void refuseTarget(socket, d);
      const refusal = d.app ? null : checkExecdAccess(req.headers, token);
      if (refusal) return void socket.end(httpAnswer(refusal.status, refusal.body));
      proxyUpgrade(req, socket, head, { socketPath }, d.target, { drop: TOKEN_HEADERS });
    }));
    apps.keepAliveTimeout = 30_000;
    // allowHalfOpen: a client that sends its request and half-closes its side (shutdown SHUT_WR) still gets execd's
    // answer, as from Go's server (Node's default ended the client's side at its FIN, before execd answered)
    server = net.createServer({ noDelay: true, allowHalfOpen: true }, (client) => {
      sockets.add(client);
      let up = null;
      let routed = false;
      client.on('end', () => routed || client.end()); // no request yet: nothing to answer
      const drop = () => {
        client.destroy();
        up?.destroy();
        sockets.delete(client);
        sockets.delete(up);
      };
      client.on('error', drop);
      client.on('close', drop);
      client.setTimeout(HEAD_TIMEOUT_MS, drop);
      let head = Buffer.alloc(0);
      const onData = (chunk) => {
        head = Buffer.concat([head, chunk]);
        const parsed = parseRequestHead(head);
        if (!parsed) {
          if (head.length > HEAD_LIMIT) client.end(httpAnswer(431, { code: 'GENERAL::BAD_REQUEST', message: 'request head too large' }));
          return;
        }
        client.removeAllListeners('data');
        client.pause();
        client.setTimeout(0);
        routed = true;
        const d = parsed.error ? parsed : decide(parsed.target);
        if (d.error) return void refuseTarget(client, d);
        if (d.app) {
          client.unshift(head);
          apps.emit('connection', client);
          client.resume();
          return;
        }
        // execd itself: with the token, the connection is relayed byte for byte (execd parses the same way)
        const refusal = checkExecdAccess(parsed.headers, token);
        if (refusal) return void client.end(httpAnswer(refusal.status, refusal.body));
        up = net.connect({ path: socketPath, allowHalfOpen: true }); // the client's FIN passed on (pipe), the answer back
        sockets.add(up);
        up.on('error', drop);
        up.on('close', drop);
        up.write(head);
        client.pipe(up);
        up.pipe(client);
        client.resume();
      };
      client.on('data', (chunk) => {
        try {
          onData(chunk);
        } catch (err) {
          const a = internal(err);
          client.end(httpAnswer(a.status, a.body));
        }
      });
    });
  } else {
    /**
     * Where a request goes: { app, path } by the ingress header (port 44772: execd at the target itself; any other
     * port: execd's /proxy/{port} + the target), or null when the header does not name this sandbox and a port.
     */
    const route = (req, d) => {
      const value = req.headers[INGRESS_HEADER.toLowerCase()];
      if (typeof value !== 'string' || !value.startsWith(`${ingressId}-`)) return null;
      const port = value.slice(ingressId.length + 1);
      if (!/^\d+$/.test(port) || Number(port) < 1 || Number(port) > 65535) return null;
      return Number(port) === EXECD_PORT ? { app: false, path: d.target } : { app: true, path: `/proxy/${Number(port)}${d.target}` };
    };
    const notFound = { status: 404, body: { code: 'NOT_FOUND', message: `no route: header ${INGRESS_HEADER} missing or not naming this sandbox and a port` } };
    /** { bad } (a refused target), { refusal } to answer, or { path, app } to forward to. The sandbox's own services need no token. */
    const decideRequest = (req) => {
      const d = parseTarget(req.url);
      if (d.error) return { bad: d };
      const r = route(req, d);
      const refusal = r?.app ? null : checkExecdAccess(req.headers, token);
      return refusal ? { refusal } : r ?? { refusal: notFound };
    };
    server = http.createServer(guarded((req, res) => {
      const r = decideRequest(req);
      if (r.bad) return void refuseTargetRes(res, req, r.bad);
      if (r.refusal) return void answer(res, req, r.refusal);
      proxyRequest(req, res, { socketPath }, r.path, { drop: TOKEN_HEADERS });
    }));
    server.on('upgrade', guardedUpgrade((req, socket, head) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      const r = decideRequest(req);
      if (r.bad) return void refuseTarget(socket, r.bad);
      if (r.refusal) return void socket.end(httpAnswer(r.refusal.status, r.refusal.body));
      proxyUpgrade(req, socket, head, { socketPath }, r.path, { drop: TOKEN_HEADERS });
    }));
    server.keepAliveTimeout = 30_000;
  }
  const port = await listen(server, host);
  return {
    port,
    close() {
      return new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections?.();
        for (const s of sockets) s.destroy();
      });
    },
  };
}
