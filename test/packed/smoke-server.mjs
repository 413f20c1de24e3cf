// The server side of the packed smoke test (test/packed/smoke.mjs): the package's local server (isolation 'none':
// no nested bubblewrap) behind an https front with a private CA; endpoint answers point at TLS fronts of the execd
// relays, so the client speaks https and wss only. smoke.mjs starts it in its own process; scripts/test-packed.sh
// runs it on its own (`node smoke-server.mjs <CA cert> <CA key>`: prints the https URL, stops when stdin closes)
// when the client is another architecture's Node under qemu-user, which cannot run the server's execd.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';
import { fileURLToPath } from 'node:url';
import { startServer } from 'mastra-opensandbox/dev-server';

/** Starts the server and its https front; returns { domain, close() }. */
export async function startSmokeServer(caFile, keyFile) {
  const cred = { cert: fs.readFileSync(caFile), key: fs.readFileSync(keyFile) };
  const server = await startServer({ isolation: 'none', log: () => {} });
  const closers = [];
  const listen = async (srv) => {
    await new Promise((r) => srv.listen(0, '127.0.0.1', r));
    closers.push(srv);
    return srv.address().port;
  };
  // Each execd relay port gets a TLS front (bytes piped: HTTP, event streams and WebSocket pass unchanged).
  const fronts = new Map();
  async function tlsFront(port) {
    if (!fronts.has(port)) {
      const srv = tls.createServer(cred, (s) => {
        const up = net.connect(port, '127.0.0.1');
        s.on('error', () => up.destroy());
        up.on('error', () => s.destroy());
        s.pipe(up).pipe(s);
      });
      fronts.set(port, await listen(srv));
    }
    return fronts.get(port);
  }
  // The lifecycle API over https; endpoint answers point at the TLS fronts of the relays.
  const upstream = new URL(server.baseUrl);
  const api = https.createServer(cred, (req, res) => {
    const up = http.request({ host: upstream.hostname, port: upstream.port, path: req.url, method: req.method, headers: req.headers }, async (ur) => {
      const chunks = [];
      for await (const c of ur) chunks.push(c);
      let body = Buffer.concat(chunks);
      if (/\/endpoints\/\d+/.test(req.url) && ur.statusCode === 200) {
        const ep = JSON.parse(body);
        const [host, port] = ep.endpoint.split(':');
        ep.endpoint = `${host}:${await tlsFront(Number(port))}`;
        body = Buffer.from(JSON.stringify(ep));
      }
      res.writeHead(ur.statusCode, { ...ur.headers, 'content-length': body.length });
      res.end(body);
    });
    up.on('error', (e) => res.destroy(e));
    req.pipe(up);
  });
  const apiPort = await listen(api);
  return {
    domain: `https://127.0.0.1:${apiPort}`,
    async close() {
      for (const s of closers) s.close();
      for (const s of closers) s.closeAllConnections?.();
      await server.close();
    },
  };
}

if (process.argv[1] && fs.realpathSync(process.argv[1]) === fs.realpathSync(fileURLToPath(import.meta.url))) {
  const s = await startSmokeServer(process.argv[2], process.argv[3]);
  console.log(s.domain);
  process.stdin.resume();
  process.stdin.on('end', () => s.close().then(() => process.exit(0)));
}
