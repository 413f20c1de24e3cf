// Per-sandbox loopback relay: a random 127.0.0.1 TCP port whose connections go to the sandbox's execd Unix socket.
// Plain mode relays bytes unchanged (HTTP, event streams and WebSocket alike). Header mode (endpointHeaders) emulates
// a header-routed gateway: every request must carry `OpenSandbox-Ingress-To: <value>` or it gets a 404.
import net from 'node:net';
import http from 'node:http';
import { proxyRequest, proxyUpgrade } from './execd/proxy.js';

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

/** Starts a relay to socketPath. requiredIngress: the exact header value to demand, or null. Returns { port, close }. */
export async function startRelay(socketPath, { requiredIngress = null, host = '127.0.0.1' } = {}) {
  const sockets = new Set();
  let server;
  if (!requiredIngress) {
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
    const ok = (req) => req.headers[INGRESS_HEADER.toLowerCase()] === requiredIngress;
    const notFound = { code: 'NOT_FOUND', message: `no route: header ${INGRESS_HEADER} missing or not matching this sandbox` };
    server = http.createServer((req, res) => {
      if (!ok(req)) {
        const body = JSON.stringify(notFound);
        res.writeHead(404, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
        res.end(body);
        req.resume();
        return;
      }
      proxyRequest(req, res, { socketPath }, req.url);
    });
    server.on('upgrade', (req, socket, head) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      if (!ok(req)) {
        const body = JSON.stringify(notFound);
        socket.end(`HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
        return;
      }
      proxyUpgrade(req, socket, head, { socketPath }, req.url);
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
