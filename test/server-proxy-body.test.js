// The HTTP forwarding helper behind the server proxy route, the relays and execd's /proxy (lib/dev-server/proxy.js
// proxyRequest) against a real target process on a Unix socket: request bodies arrive byte-exact (Content-Length,
// chunked, large enough for backpressure, empty), and the answer of a target that reads the whole body, answers and
// closes the connection at once (execd does: the proxy's request says `Connection: close`) is passed on, never a 502.
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { spawn } from 'node:child_process';
import { proxyRequest } from '../lib/dev-server/proxy.js';

// the target: answers every request, once its body is read, with 201 and the body's length and sha256 (and, as the
// proxy's request says `Connection: close`, closes the connection)
const TARGET = `
const http = require('node:http'), crypto = require('node:crypto');
const [sock] = process.argv.slice(1);
const server = http.createServer((req, res) => {
  const h = crypto.createHash('sha256'); let n = 0;
  req.on('data', (c) => { h.update(c); n += c.length; });
  req.on('end', () => { const b = JSON.stringify({ method: req.method, length: n, sha256: h.digest('hex') }); res.writeHead(201, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(b) }); res.end(b); });
});
server.listen(sock, () => process.stdout.write('ready\\n'));
`;

const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');

describe('proxyRequest: request bodies to a target that closes after its answer', function () {
  this.timeout(30000);
  let dir, target, front, frontPort;

  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-proxy-body-'));
    const sock = path.join(dir, 's.sock');
    target = spawn(process.execPath, ['-e', TARGET, sock], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the target did not listen within 10 s')), 10000);
      target.stdout.once('data', () => {
        clearTimeout(timer);
        resolve();
      });
    });
    front = http.createServer((req, res) => {
      if (req.url !== '/burst') return proxyRequest(req, res, { socketPath: sock }, req.url);
      // the shape of the server proxy route's POST /pty that failed: the whole body and its end reach the proxy
      // while its connection to the target is still being made (they came with the request head)
      const body = new PassThrough();
      Object.assign(body, { method: req.method, url: req.url, headers: req.headers, rawHeaders: req.rawHeaders });
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        proxyRequest(body, res, { socketPath: sock }, '/burst');
        body.end(Buffer.concat(chunks));
      });
    });
    await new Promise((resolve) => front.listen(0, '127.0.0.1', resolve));
    frontPort = front.address().port;
  });

  after(async () => {
    await new Promise((resolve) => (front ? front.close(resolve) : resolve()));
    if (target && target.exitCode === null) {
      const gone = new Promise((resolve) => target.once('exit', resolve));
      target.kill('SIGKILL');
      await gone;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const send = async (p, body, { method = 'POST', chunked = false } = {}) => {
    const init = { method, headers: { 'Content-Type': 'application/octet-stream' } };
    if (body !== undefined) {
      init.body = chunked ? new Blob([body]).stream() : body;
      if (chunked) init.duplex = 'half';
    }
    const res = await fetch(`http://127.0.0.1:${frontPort}${p}`, init);
    return { status: res.status, body: await res.json() };
  };

  it('a body and its end that reach the proxy before its connection: the answer of a target that closes at once, never a 502 EPIPE (300 requests)', async () => {
    // the proxy used to end its request with a separate empty write after the body: a target that had read the body,
    // answered and closed in between (this process descheduled between the two writes, as under load) made it fail
    // with EPIPE and the answer was lost; the window is two system calls wide, hence the count
    for (let i = 0; i < 300; i++) {
      const body = crypto.randomBytes(1128);
      assert.deepEqual(await send('/burst', body), { status: 201, body: { method: 'POST', length: body.length, sha256: sha(body) } }, `request ${i}`);
    }
  });

  it('bodies arrive byte-exact: Content-Length (8 MiB, with backpressure), chunked, empty; a GET without one', async () => {
    const big = crypto.randomBytes(8 << 20);
    assert.deepEqual(await send('/a', big), { status: 201, body: { method: 'POST', length: big.length, sha256: sha(big) } });
    const small = crypto.randomBytes(3000);
    assert.deepEqual(await send('/b', small, { chunked: true }), { status: 201, body: { method: 'POST', length: small.length, sha256: sha(small) } });
    assert.deepEqual(await send('/c', Buffer.alloc(0)), { status: 201, body: { method: 'POST', length: 0, sha256: sha(Buffer.alloc(0)) } });
    assert.deepEqual(await send('/d', undefined, { method: 'GET' }), { status: 201, body: { method: 'GET', length: 0, sha256: sha(Buffer.alloc(0)) } });
  });
});
