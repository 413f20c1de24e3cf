// Smoke test of the packed package, run by scripts/test-packed.sh inside a bubblewrap environment without a
// compiler and without the curl, libwebsockets, cJSON and OpenSSL libraries, in a fresh project where the tarball
// was installed. Uses only the package's public entry points: the local server (isolation 'none': no nested
// bubblewrap) behind an https front with a private CA, and OpenSandboxSandbox with caFile over https and wss —
// a command, a background process fed through stdin, a file upload. argv: <CA cert> <CA key>. Prints "smoke ok".
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { createRequire } from 'node:module';
import { OpenSandboxSandbox } from 'mastra-opensandbox';
import { startServer } from 'mastra-opensandbox/dev-server';

const [caFile, keyFile] = process.argv.slice(2);
const cred = { cert: fs.readFileSync(caFile), key: fs.readFileSync(keyFile) };
const deadline = setTimeout(() => {
  console.error('smoke: no result within 120 s');
  process.exit(1);
}, 120000);

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

// the addon that got loaded is the prebuilt one inside the installed package
const pkgDir = fs.realpathSync(path.dirname(createRequire(import.meta.url).resolve('mastra-opensandbox/package.json')));
const sandbox = new OpenSandboxSandbox({ domain: `https://127.0.0.1:${apiPort}`, caFile });
try {
  const r = await sandbox.executeCommand('echo', ['hello', 'from the prebuilt addon']);
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'hello from the prebuilt addon\n');
  const maps = fs.readFileSync('/proc/self/maps', 'utf8');
  const loaded = [...new Set(maps.split('\n').map((l) => l.split(/\s+/)[5]).filter((f) => f && f.startsWith('/')))];
  assert.deepEqual(loaded.filter((f) => f.endsWith('.node')), [path.join(pkgDir, 'prebuilds', `linux-${process.arch}`, 'mastra_opensandbox.node')]);
  assert.deepEqual(loaded.filter((f) => /lib(curl|websockets|cjson|ssl|crypto|z)\.so/.test(f)), [], 'no system curl/lws/cjson/OpenSSL library is loaded');

  await sandbox.writeFiles([{ path: 'up/data.txt', content: 'uploaded over https\n' }]);
  const h = await sandbox.processes.spawn('read line; echo "stdin: $line"; cat up/data.txt');
  await h.sendStdin('over wss\n');
  const w = await h.wait();
  assert.equal(w.exitCode, 0);
  assert.equal(w.stdout, 'stdin: over wss\nuploaded over https\n');
  console.log('smoke ok');
} finally {
  await sandbox._destroy().catch(() => {});
  for (const s of closers) s.close();
  for (const s of closers) s.closeAllConnections?.();
  await server.close();
  clearTimeout(deadline);
}
