// Per-sandbox loopback relay: a random 127.0.0.1 TCP port whose connections go to the sandbox's execd Unix socket.
// Plain mode relays bytes unchanged (HTTP, event streams and WebSocket alike). Header mode (endpointHeaders) emulates
// a header-routed gateway: every request must carry `OpenSandbox-Ingress-To: <sandbox id>-<port>` (else 404) and is
// routed by it: port 44772 to execd, any other port to execd's `/proxy/<port>` (the sandbox's 127.0.0.1:<port>).
import net from 'node:net';
import http from 'node:http';
import { proxyRequest, proxyUpgrade, EXECD_PORT } from './execd/proxy.js';

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

/** Starts a relay to socketPath. ingressId: the sandbox id that header mode demands, or null for plain mode.
 * Returns { port, close }. */
export async function startRelay(socketPath, { ingressId = null, host = '127.0.0.1' } = {}) {
  const sockets = new Set();
  let server;
  if (!ingressId) {
    server = net.createServer((client) => {
      const up = net.connect(socketPath);
      sockets.add(client);
      sockets.add(up);
      client.pipe(up);
      up.pipe(client);
      const drop = () => {
        client.destroy();
        up.destroy();
        sockets.delete(client);
        sockets.delete(up);
      };
      client.on('error', drop);
      up.on('error', drop);
      client.on('close', drop);
      up.on('close', drop);
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
    server = http.createServer((req, res) => {
      const path = route(req);
      if (!path) {
        const body = JSON.stringify(notFound);
        res.writeHead(404, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
        res.end(body);
        req.resume();
        return;
      }
      proxyRequest(req, res, { socketPath }, path);
    });
    server.on('upgrade', (req, socket, head) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      const path = route(req);
      if (!path) {
        const body = JSON.stringify(notFound);
        socket.end(`HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
        return;
      }
      proxyUpgrade(req, socket, head, { socketPath }, path);
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
