// Per-sandbox loopback relay: a random 127.0.0.1 TCP port whose connections go to the sandbox's execd Unix socket.
// Any local user can connect to it, so it demands the sandbox's own token (`OpenSandbox-Secure-Access`, an endpoint
// header); browser-originated requests are refused. (A server-wide X-EXECD-ACCESS-TOKEN is execd's own check.)
// Plain mode checks the head of a connection's first request, then relays bytes unchanged (HTTP, event streams and
// WebSocket alike). Header mode (endpointHeaders) emulates a header-routed gateway: every request must carry
// `OpenSandbox-Ingress-To: <sandbox id>-<port>` (else 404) and is routed by it: port 44772 to execd, any other port
// to execd's `/proxy/<port>` (the sandbox's 127.0.0.1:<port>); the sandbox token is checked on every request and not
// forwarded into the sandbox.
import net from 'node:net';
import http from 'node:http';
import { proxyRequest, proxyUpgrade, EXECD_PORT } from './execd/proxy.js';
import { SECURE_ACCESS_HEADER, checkExecdAccess, httpAnswer, isAppProxyPath, parseRequestHead } from './security.js';

const HEAD_LIMIT = 64 * 1024;

function answer(res, req, { status, body }) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
  req.resume();
}
const HEAD_TIMEOUT_MS = 30_000;
/** The token header the relay and the server proxy check and never pass into the sandbox. */
export const TOKEN_HEADERS = new Set([SECURE_ACCESS_HEADER.toLowerCase()]);

export const INGRESS_HEADER = 'OpenSandbox-Ingress-To';

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
  if (!ingressId) {
    // connections that start without the token may only reach the sandbox's own services (/proxy/{port}), checked
    // request by request
    const apps = http.createServer((req, res) => {
      const refusal = isAppProxyPath(req.url, EXECD_PORT) ? null : checkExecdAccess(req.headers, token);
      if (refusal) return void answer(res, req, refusal);
      proxyRequest(req, res, { socketPath }, req.url, { drop: TOKEN_HEADERS });
    });
    apps.on('upgrade', (req, socket, head) => {
      const refusal = isAppProxyPath(req.url, EXECD_PORT) ? null : checkExecdAccess(req.headers, token);
      if (refusal) return void socket.end(httpAnswer(refusal.status, refusal.body));
      proxyUpgrade(req, socket, head, { socketPath }, req.url, { drop: TOKEN_HEADERS });
    });
    apps.keepAliveTimeout = 30_000;
    server = net.createServer({ noDelay: true }, (client) => {
      sockets.add(client);
      let up = null;
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
        client.off('data', onData);
        client.pause();
        const refusal = parsed.error ? { status: 400, body: { code: 'GENERAL::BAD_REQUEST', message: parsed.error } }
          : checkExecdAccess(parsed.headers, token);
        client.setTimeout(0);
        if (refusal && !parsed.error && isAppProxyPath(parsed.target, EXECD_PORT)) {
          client.unshift(head);
          apps.emit('connection', client);
          client.resume();
          return;
        }
        if (refusal) return void client.end(httpAnswer(refusal.status, refusal.body));
        up = net.connect(socketPath);
        sockets.add(up);
        up.on('error', drop);
        up.on('close', drop);
        up.write(head);
        client.pipe(up);
        up.pipe(client);
        client.resume();
      };
      client.on('data', onData);
    });
  } else {
    /** The path to ask execd for, or null when the ingress header does not name this sandbox and a port. */
    const route = (req) => {
      const value = req.headers[INGRESS_HEADER.toLowerCase()];
      if (typeof value !== 'string' || !value.startsWith(`${ingressId}-`)) return null;
      const port = value.slice(ingressId.length + 1);
      if (!/^\d+$/.test(port) || Number(port) < 1 || Number(port) > 65535) return null;
      return Number(port) === EXECD_PORT ? req.url : `/proxy/${Number(port)}${req.url}`;
    };
    const notFound = { code: 'NOT_FOUND', message: `no route: header ${INGRESS_HEADER} missing or not naming this sandbox and a port` };
    // the sandbox's own services (ingress header naming a port other than execd's) need no token
    const refuse = (req) => {
      const p = route(req);
      return p && isAppProxyPath(p, EXECD_PORT) ? null : checkExecdAccess(req.headers, token);
    };
    server = http.createServer((req, res) => {
      const refusal = refuse(req);
      if (refusal) return void answer(res, req, refusal);
      const path = route(req);
      if (!path) {
        const body = JSON.stringify(notFound);
        res.writeHead(404, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
        res.end(body);
        req.resume();
        return;
      }
      proxyRequest(req, res, { socketPath }, path, { drop: TOKEN_HEADERS });
    });
    server.on('upgrade', (req, socket, head) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      const refusal = refuse(req);
      if (refusal) return void socket.end(httpAnswer(refusal.status, refusal.body));
      const path = route(req);
      if (!path) {
        const body = JSON.stringify(notFound);
        socket.end(`HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
        return;
      }
      proxyUpgrade(req, socket, head, { socketPath }, path, { drop: TOKEN_HEADERS });
    });
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
