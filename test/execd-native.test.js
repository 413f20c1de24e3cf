// The C execd (src/execd/, osb-execd), the one execd of every sandbox: a real server and sandbox, raw sockets to the
// sandbox's execd endpoint. Every route is answered by it with nothing of ours started below it (no Node, no Python, no
// shell script); what no route takes gets the real execd's router answers (404, the 301 of a trailing slash) in order
// on a kept-alive connection; pipelined requests in order; its own 401/400 answers byte for byte.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { startServer } from '../lib/dev-server/index.js';
import { execdBinary } from '../lib/dev-server/execd-binary.js';
import { descendants } from '../lib/dev-server/proctree.js';
import { waitFor } from './helpers/poll.js';
import { request, parseEvents } from './helpers/raw.js';

const TOKEN = 'native-token';

function cmdline(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return [];
  }
}

/** Writes `bytes` on a new connection to 127.0.0.1:port (a string: that Unix socket) and reads until `done(text)` or EOF; resolves the text (latin1). */
function exchange(port, bytes, { done = () => false, timeoutMs = 15000, keep = false } = {}) {
  return new Promise((resolve, reject) => {
    const socket = typeof port === 'string' ? net.connect(port) : net.connect(port, '127.0.0.1');
    let got = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete answer within ${timeoutMs} ms: ${JSON.stringify(got)}`));
    }, timeoutMs);
    const finish = () => {
      clearTimeout(timer);
      if (!keep) socket.destroy();
      resolve(keep ? { text: got, socket } : got);
    };
    socket.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    socket.on('data', (d) => {
      got += d.toString('latin1');
      if (done(got)) finish();
    });
    socket.on('end', finish);
    socket.write(bytes);
  });
}

/** The answers in `text`, each { head, body } with Content-Length framing (Date values replaced by <date>). */
function answers(text) {
  const out = [];
  let rest = text;
  while (rest.length) {
    const end = rest.indexOf('\r\n\r\n');
    if (end < 0) break;
    const head = rest.slice(0, end + 4).replace(/^Date: .*$/m, 'Date: <date>');
    const len = /^Content-Length: (\d+)$/mi.exec(head);
    if (!len) {
      out.push({ head, body: rest.slice(end + 4) });
      break;
    }
    const n = Number(len[1]);
    if (rest.length < end + 4 + n) break;
    out.push({ head, body: rest.slice(end + 4, end + 4 + n) });
    rest = rest.slice(end + 4 + n);
  }
  return out;
}

let secure = ''; // the endpoint's headers, as header lines
let secureHeaders = {};
const get = (p, extra = '') => `GET ${p} HTTP/1.1\r\nHost: execd\r\n${secure}X-EXECD-ACCESS-TOKEN: ${TOKEN}\r\n${extra}\r\n`;
const PING_OK = 'HTTP/1.1 200 OK\r\nDate: <date>\r\nContent-Length: 0\r\n\r\n';
const NOT_FOUND = { head: 'HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nDate: <date>\r\nContent-Length: 18\r\n\r\n', body: '404 page not found' };

describe('the C execd: every answer its own', function () {
  this.timeout(60000);
  let server;
  let work;
  let sb; // { id, port }
  let execdPid;

  /** The sandbox's processes (host pids) below the C execd, with their argv. */
  const procs = () => descendants(execdPid).map((pid) => ({ pid, argv: cmdline(pid) })).filter((p) => p.argv.length);
  /** Programs of ours below execd (the package's scripts: a Node execd, pty-helper.py, a kernel): none here. */
  const nodeExecd = () => procs().filter((p) => p.argv.some((a) => a.includes('lib/dev-server')));

  before(async function () {
    if (!execdBinary()) {
      // the C execd is part of the build (npm run build); the server does not start without it
      throw new Error('no osb-execd binary: build it first (node scripts/build.js)');
    }
    work = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-native-'));
    server = await startServer({ dataDir: path.join(work, 'data'), execdAccessToken: TOKEN, commandTailMs: 20 });
    const api = (p, opts = {}) => request(`${server.baseUrl}${p}`, { ...opts, headers: { 'Content-Type': 'application/json' } });
    const r = await api('/v1/sandboxes', { method: 'POST', body: { image: { uri: 'x' }, entrypoint: ['tail', '-f', '/dev/null'], resourceLimits: {} } });
    assert.equal(r.status, 202, r.text);
    const ep = (await api(`/v1/sandboxes/${r.json.id}/endpoints/44772`)).json;
    sb = { id: r.json.id, port: Number(ep.endpoint.split(':').at(-1)) };
    // the sandbox's endpoint headers (its secure-access token) go with every request, as a client sends them
    secure = Object.entries(ep.headers ?? {}).map(([k, v]) => `${k}: ${v}\r\n`).join('');
    secureHeaders = ep.headers ?? {};
    const name = path.basename(execdBinary());
    const found = descendants(process.pid).filter((pid) => path.basename(cmdline(pid)[0] ?? '') === name);
    assert.equal(found.length, 1, 'exactly one C execd in this process tree');
    execdPid = found[0];
  });
  after(async () => {
    await server?.close();
    if (work) fs.rmSync(work, { recursive: true, force: true });
  });

  it('ping, POST /directories and a command are answered without Node: the idle sandbox is the C execd alone', async () => {
    const text = await exchange(sb.port, get('/ping'), { done: (t) => t.endsWith('\r\n\r\n') });
    assert.deepEqual(answers(text), [{ head: PING_OK, body: '' }]);
    const headers = { ...secureHeaders, 'X-EXECD-ACCESS-TOKEN': TOKEN, 'Content-Type': 'application/json' };
    const dirs = await request(`http://127.0.0.1:${sb.port}/directories`, { method: 'POST', headers, body: { '/workspace/native/a': { mode: 755 } } });
    assert.deepEqual([dirs.status, dirs.text], [200, '']);
    const cmd = await request(`http://127.0.0.1:${sb.port}/command`, { method: 'POST', headers, body: { command: 'ls -d /workspace/native/a && echo hi' } });
    assert.equal(cmd.status, 200);
    assert.deepEqual(cmd.text.split('\n\n').filter(Boolean).map((e) => JSON.parse(e)).filter((e) => e.type === 'stdout').map((e) => e.text), ['/workspace/native/a', 'hi']);
    // a PTY session and its WebSocket (how the client runs processes) are the C execd's too
    const pty = await request(`http://127.0.0.1:${sb.port}/pty`, { method: 'POST', headers, body: { command: 'tty' } });
    assert.equal(pty.status, 201, pty.text);
    const ws = await exchange(sb.port, `GET /pty/${pty.json.session_id}/ws HTTP/1.1\r\nHost: execd\r\n${secure}X-EXECD-ACCESS-TOKEN: ${TOKEN}\r\n` +
      'Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n', { done: (t) => t.includes('process exited') });
    assert.match(ws, /\x01\/dev\/pts\/\d+\r\n[^]*\{"type":"exit","exit_code":0\}\n/);
    // nothing below the C execd once the command is done (the default entrypoint, tail -f /dev/null, is not run): no Node
    await waitFor(() => procs().length === 0, { timeoutMs: 5000, message: 'the command is gone' });
    assert.deepEqual(nodeExecd(), []);
    assert.equal(path.basename(cmdline(execdPid)[0]), path.basename(execdBinary()));
  });

  it('an upload is written without Node', async () => {
    const boundary = 'native-b0undary';
    const body = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="metadata"; filename="metadata"\r\n` +
      `Content-Type: application/json\r\n\r\n{"path":"/workspace/native/up/f.txt","mode":640}\r\n--${boundary}\r\n` +
      `Content-Disposition: form-data; name="file"; filename="f.txt"\r\n\r\nnative bytes\r\n--${boundary}--\r\n`);
    const headers = { ...secureHeaders, 'X-EXECD-ACCESS-TOKEN': TOKEN, 'Content-Type': `multipart/form-data; boundary=${boundary}` };
    const up = await request(`http://127.0.0.1:${sb.port}/files/upload`, { method: 'POST', headers, body });
    assert.deepEqual([up.status, up.text], [200, '']);
    const cmd = await request(`http://127.0.0.1:${sb.port}/command`, { method: 'POST', headers: { ...headers, 'Content-Type': 'application/json' },
      body: { command: 'stat -c %a /workspace/native/up/f.txt && cat /workspace/native/up/f.txt' } });
    assert.deepEqual(cmd.text.split('\n\n').filter(Boolean).map((e) => JSON.parse(e)).filter((e) => e.type === 'stdout').map((e) => e.text), ['640', 'native bytes']);
    await waitFor(() => procs().length === 0, { timeoutMs: 5000, message: 'the command is gone' });
    assert.deepEqual(nodeExecd(), []);
  });

  it('/proxy/{port} to a service in the sandbox and /proxy/44772 to execd itself are answered without Node', async () => {
    const headers = { ...secureHeaders, 'X-EXECD-ACCESS-TOKEN': TOKEN, 'Content-Type': 'application/json' };
    // the sandbox's own service: what it got, as JSON (its request head and the body's length)
    const svc = "require('http').createServer((q,s)=>{let n=0;q.on('data',(c)=>{n+=c.length});q.on('end',()=>s.end(JSON.stringify({m:q.method,u:q.url,n,h:q.rawHeaders})))}).listen(8125,'127.0.0.1')";
    const started = await request(`http://127.0.0.1:${sb.port}/command`, { method: 'POST', headers,
      body: { background: true, command: `cat > /tmp/svc.js <<'EOF'\n${svc}\nEOF\nexec node /tmp/svc.js` } });
    const id = /"type":"init","text":"([0-9a-f]{32})"/.exec(started.text)?.[1];
    assert.ok(id, started.text);
    const body = Buffer.alloc(3 << 20, 7); // more than the server reads at once: streamed
    const app = await waitFor(async () => {
      const r = await request(`http://127.0.0.1:${sb.port}/proxy/8125/a/b?x=1`, { method: 'POST', headers: { ...headers, 'X-Probe': 'p' }, body });
      return r.status === 200 && r;
    }, { timeoutMs: 15000, message: 'the service answers through the proxy' });
    const got = JSON.parse(app.text);
    assert.deepEqual([got.m, got.u, got.n], ['POST', '/a/b?x=1', body.length]);
    const names = got.h.filter((_, i) => i % 2 === 0);
    assert.ok(names.includes('X-Probe'), app.text);
    assert.deepEqual(names.filter((n) => /access-token|secure-access/i.test(n)), [], app.text); // tokens dropped toward it
    // execd itself (the token kept: it checks its own) and a port nothing listens on
    const self = await exchange(sb.port, get('/proxy/44772/ping', 'Connection: close\r\n'));
    assert.deepEqual(answers(self), [{ head: PING_OK.replace('\r\nContent-Length: 0\r\n', '\r\nContent-Length: 0\r\nConnection: close\r\n'), body: '' }]);
    const refused = await request(`http://127.0.0.1:${sb.port}/proxy/8126/`, { headers });
    assert.deepEqual([refused.status, refused.json], [502, { code: 'PROXY_ERROR', message: 'cannot reach port 8126: ECONNREFUSED' }]);
    await request(`http://127.0.0.1:${sb.port}/command?id=${id}`, { method: 'DELETE', headers });
    await waitFor(() => procs().length === 0, { timeoutMs: 5000, message: 'the service is gone' });
    assert.deepEqual(nodeExecd(), []);
  });

  it('DELETE /files, POST /files/permissions|mv|replace and DELETE /directories are answered without Node', async () => {
    const headers = { ...secureHeaders, 'X-EXECD-ACCESS-TOKEN': TOKEN, 'Content-Type': 'application/json' };
    const run = async (command) => (await request(`http://127.0.0.1:${sb.port}/command`, { method: 'POST', headers, body: { command } }))
      .text.split('\n\n').filter(Boolean).map((e) => JSON.parse(e)).filter((e) => e.type === 'stdout').map((e) => e.text);
    await run('mkdir -p /workspace/native/ed/d/e && printf "a-a-a" > /workspace/native/ed/f.txt && ln -s /etc /workspace/native/ed/d/etc-link');
    const call = (method, p, body) => request(`http://127.0.0.1:${sb.port}${p}`, { method, headers, ...(body === undefined ? {} : { body }) });
    const r1 = await call('POST', '/files/replace?verbose=true', { '/workspace/native/ed/f.txt': { old: 'a', new: 'bb' } });
    assert.deepEqual([r1.status, r1.text], [200, '{"/workspace/native/ed/f.txt":{"replacedCount":3}}']);
    const r2 = await call('POST', '/files/permissions', { '/workspace/native/ed/f.txt': { mode: 600 } });
    assert.deepEqual([r2.status, r2.text], [200, '']);
    const r3 = await call('POST', '/files/mv', [{ src: '/workspace/native/ed/f.txt', dest: '/workspace/native/ed/new/g.txt' }]);
    assert.deepEqual([r3.status, r3.text], [200, '']);
    const r4 = await call('DELETE', '/files?path=/workspace/native/ed/d');
    assert.deepEqual([r4.status, r4.json], [500, { code: 'RUNTIME_ERROR', message: 'error removing file /workspace/native/ed/d. path is a directory: /workspace/native/ed/d' }]);
    assert.deepEqual(await run('stat -c "%a %s" /workspace/native/ed/new/g.txt'), ['600 8']);
    const r5 = await call('DELETE', '/files?path=/workspace/native/ed/new/g.txt&path=/workspace/native/ed/none');
    assert.deepEqual([r5.status, r5.text], [200, '']);
    const r6 = await call('DELETE', '/directories?path=/workspace/native/ed');
    assert.deepEqual([r6.status, r6.text], [200, '']);
    assert.deepEqual(await run('test -e /workspace/native/ed || echo gone; test -d /etc && echo etc'), ['gone', 'etc']);
    await waitFor(() => procs().length === 0, { timeoutMs: 5000, message: 'the command is gone' });
    assert.deepEqual(nodeExecd(), []);
  });

  it('issue 32: a client that sends its request and half-closes its side still gets the answer (through the relay)', async () => {
    const boundary = 'half-b0undary';
    const body = `--${boundary}\r\nContent-Disposition: form-data; name="metadata"; filename="m"\r\n\r\n` +
      `{"path":"/workspace/native/half.txt"}\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\n` +
      `half\r\n--${boundary}--\r\n`;
    const got = await new Promise((resolve, reject) => {
      const socket = net.connect({ port: sb.port, host: '127.0.0.1', allowHalfOpen: true });
      let text = '';
      const timer = setTimeout(() => { socket.destroy(); reject(new Error(`no answer within 15 s: ${JSON.stringify(text)}`)); }, 15000);
      socket.on('data', (d) => { text += d; });
      socket.on('end', () => { clearTimeout(timer); socket.destroy(); resolve(text); });
      socket.on('error', reject);
      socket.end(`POST /files/upload HTTP/1.1\r\nHost: execd\r\n${secure}X-EXECD-ACCESS-TOKEN: ${TOKEN}\r\n` +
        `Content-Type: multipart/form-data; boundary=${boundary}\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    });
    assert.match(got, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(got, /\r\nContent-Length: 0\r\n\r\n$/);
  });

  it('issue 32: a body over 64 MiB gets its 413 while the client still writes it (through the relay)', async () => {
    // a client that writes 1 MiB of a declared 100 MB and then waits for the answer before writing on
    const t0 = Date.now();
    const got = await new Promise((resolve, reject) => {
      const socket = net.connect(sb.port, '127.0.0.1');
      let text = '';
      const timer = setTimeout(() => { socket.destroy(); reject(new Error(`no 413 within 10 s: ${JSON.stringify(text)}`)); }, 10000);
      socket.on('data', (d) => {
        text += d;
        if (/\r\n\r\n\{.*\}$/.test(text)) { clearTimeout(timer); socket.destroy(); resolve(text); }
      });
      socket.on('error', reject);
      socket.write(`POST /command HTTP/1.1\r\nHost: execd\r\n${secure}X-EXECD-ACCESS-TOKEN: ${TOKEN}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 100000000\r\n\r\n');
      socket.write(Buffer.alloc(1 << 20, 0x20));
    });
    assert.ok(Date.now() - t0 < 10000);
    assert.match(got, /^HTTP\/1\.1 413 Request Entity Too Large\r\nContent-Type: application\/json; charset=utf-8\r\nConnection: close\r\n/);
    assert.ok(got.endsWith('{"code":"INVALID_REQUEST_BODY","message":"request body larger than 67108864 bytes"}'));
  });

  it('GET /files/info and GET|HEAD /files/download are answered without Node, byte for byte', async () => {
    const headers = { ...secureHeaders, 'X-EXECD-ACCESS-TOKEN': TOKEN, 'Content-Type': 'application/json' };
    const made = await request(`http://127.0.0.1:${sb.port}/command`, {
      method: 'POST', headers,
      body: { command: "mkdir -p /workspace/native && printf 'hello <x>\\n' > /workspace/native/f.txt && touch -d '2026-01-02 03:04:05.5 UTC' /workspace/native/f.txt && stat -c '%U %G %Z' /workspace/native/f.txt" },
    });
    const [owner, group, ctime] = made.text.split('\n\n').filter(Boolean).map((e) => JSON.parse(e)).find((e) => e.type === 'stdout').text.split(' ');
    const info = await exchange(sb.port, get('/files/info?path=native/f.txt&path=%2Fworkspace%2Fnative'), { done: (t) => answers(t).length === 1 });
    const [a] = answers(info);
    assert.match(a.head, /^HTTP\/1\.1 200 OK\r\nContent-Type: application\/json; charset=utf-8\r\nDate: <date>\r\nContent-Length: \d+\r\n\r\n$/);
    const ts = (s) => new Date(Number(s) * 1000).toISOString().slice(0, 19);
    // the keys sorted byte by byte, as Go's encoding/json writes a map
    assert.match(a.body, new RegExp('^\\{"/workspace/native":\\{"path":"/workspace/native","type":"directory","size":\\d+,' +
      `"modified_at":"[^"]+","created_at":"[^"]+","owner":"${owner}","group":"${group}","mode":755\\},` +
      '"native/f.txt":\\{"path":"/workspace/native/f.txt","type":"file","size":10,' +
      `"modified_at":"2026-01-02T03:04:05.5Z","created_at":"${ts(ctime)}(\\.\\d+)?Z","owner":"${owner}","group":"${group}","mode":644\\}\\}$`));
    const missing = await exchange(sb.port, get('/files/info?path=native/nope'), { done: (t) => answers(t).length === 1 });
    assert.deepEqual(answers(missing), [{
      head: 'HTTP/1.1 404 Not Found\r\nContent-Type: application/json; charset=utf-8\r\nDate: <date>\r\nContent-Length: 138\r\n\r\n',
      body: '{"code":"FILE_NOT_FOUND","message":"file not found. file not found: native/nope: lstat /workspace/native/nope: no such file or directory"}',
    }]);
    const fileHead = 'HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename="f.txt"\r\n' +
      'Accept-Ranges: bytes\r\nLast-Modified: Fri, 02 Jan 2026 03:04:05 GMT\r\nDate: <date>\r\nContent-Length: 10\r\n\r\n';
    const got = await exchange(sb.port, get('/files/download?path=native/f.txt'), { done: (t) => answers(t).length === 1 });
    assert.deepEqual(answers(got), [{ head: fileHead, body: 'hello <x>\n' }]);
    // HEAD: the same head, no body (the next answer on the connection follows it at once)
    const head = await exchange(sb.port, get('/files/download?path=native/f.txt').replace(/^GET/, 'HEAD') + get('/ping'), { done: (t) => t.endsWith('Content-Length: 0\r\n\r\n') });
    assert.equal(head.replace(/^Date: .*$/mg, 'Date: <date>'), fileHead + PING_OK);
    const dir = await exchange(sb.port, get('/files/download?path=native'), { done: (t) => answers(t).length === 1 });
    assert.deepEqual(answers(dir).map((x) => x.body), ['{"code":"INVALID_FILE","message":"path is a directory: /workspace/native"}']);
    assert.deepEqual(nodeExecd(), []);
  });

  it('a bash session, and DELETE /command?id= of it closes it (upstream\'s Interrupt), with nothing started', async () => {
    const headers = { ...secureHeaders, 'X-EXECD-ACCESS-TOKEN': TOKEN };
    const made = await request(`http://127.0.0.1:${sb.port}/session`, { method: 'POST', headers, body: {} });
    assert.equal(made.status, 200, made.text);
    const sid = made.json.session_id;
    const run = await request(`http://127.0.0.1:${sb.port}/session/${sid}/run`, { method: 'POST', headers, body: { command: 'echo in-$((6*7))' } });
    assert.equal(run.status, 200);
    assert.match(run.text, /\{"type":"stdout","text":"in-42","timestamp":\d+\}\n\n/);
    const del = await request(`http://127.0.0.1:${sb.port}/command?id=${sid}`, { method: 'DELETE', headers });
    assert.equal(del.status, 200, del.text);
    const gone = await request(`http://127.0.0.1:${sb.port}/session/${sid}`, { method: 'DELETE', headers });
    assert.deepEqual([gone.status, gone.json], [404, { code: 'CONTEXT_NOT_FOUND', message: `session ${sid} not found` }]);
    const none = await request(`http://127.0.0.1:${sb.port}/command?id=nope`, { method: 'DELETE', headers });
    assert.deepEqual([none.status, none.json], [500, { code: 'RUNTIME_ERROR', message: 'error interruptting code context. no such session' }]);
    assert.deepEqual(nodeExecd(), []);
  });

  it('what no route takes: the real execd\'s router answers, in order on a kept-alive connection, with nothing started', async () => {
    const reqs = get('/ping') + get('/no/such/route') + get('/ping/') + `HEAD /ping HTTP/1.1\r\nHost: execd\r\n${secure}X-EXECD-ACCESS-TOKEN: ${TOKEN}\r\n\r\n`
      + `PUT /ping HTTP/1.1\r\nHost: execd\r\n${secure}X-EXECD-ACCESS-TOKEN: ${TOKEN}\r\nContent-Length: 2\r\n\r\nhi` + get('/ping');
    const text = await exchange(sb.port, reqs, { done: (t) => (t.match(/HTTP\/1\.1 /g) ?? []).length === 6 && t.endsWith('\r\n\r\n') });
    const a = answers(text);
    assert.deepEqual(a[0], { head: PING_OK, body: '' });
    assert.deepEqual(a[1], NOT_FOUND);
    assert.deepEqual(a[2], { head: 'HTTP/1.1 301 Moved Permanently\r\nContent-Type: text/html; charset=utf-8\r\nLocation: /ping\r\nDate: <date>\r\nContent-Length: 40\r\n\r\n', body: '<a href="/ping">Moved Permanently</a>.\n\n' });
    // HEAD: the head alone (answers() reads its Content-Length as a body: the next answer's first 18 bytes)
    assert.match(text, /HTTP\/1\.1 404 Not Found\r\nContent-Type: text\/plain\r\nDate: [^\r]*\r\nContent-Length: 18\r\n\r\nHTTP\/1\.1 404 Not Found\r\n[^]*\r\n\r\n404 page not foundHTTP\/1\.1 200 OK\r\n/);
    // an upgrade to a route no module has: the 404, then the connection closes (the Node execd died of a reset here)
    const up = await exchange(sb.port, get('/code/ws', 'Connection: Upgrade\r\nUpgrade: websocket\r\n'));
    assert.equal(up.replace(/Date: [^\r]*/, 'Date: <date>'), 'HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nConnection: close\r\nDate: <date>\r\nContent-Length: 18\r\n\r\n404 page not found');
    assert.deepEqual(nodeExecd(), []);
  });

  it('401 without the token and 400 for a refused target, byte for byte', async () => {
    const body401 = '{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}';
    const no = await exchange(sb.port, `POST /command HTTP/1.1\r\nHost: execd\r\n${secure}Content-Length: 5\r\n\r\nhello`, { done: (t) => answers(t).length === 1 });
    assert.deepEqual(answers(no), [{ head: `HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json; charset=utf-8\r\nDate: <date>\r\nContent-Length: ${body401.length}\r\n\r\n`, body: body401 }]);
    const wrong = await exchange(sb.port, `GET /files/info?path=/ HTTP/1.1\r\nHost: execd\r\n${secure}X-EXECD-ACCESS-TOKEN: wrong\r\n\r\n`, { done: (t) => answers(t).length === 1 });
    assert.equal(answers(wrong)[0].body, body401);
    // a malformed escape: Go's raw answer, then the connection closes
    const bad = await exchange(sb.port, get('/command/status/%zz'));
    assert.equal(bad, 'HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request');
    // a dot segment: execd's JSON refusal, Connection: close, then the connection closes (on execd's own socket: the
    // relay in front refuses such a target itself)
    const sock = fs.readdirSync(work, { recursive: true }).find((f) => f.endsWith(`${sb.id}/run/execd.sock`));
    assert.ok(sock, 'the sandbox\'s execd socket');
    const dot = await exchange(path.join(work, sock), get('/files/%2e%2e/info'));
    const dotBody = '{"code":"INVALID_REQUEST_PATH","message":"dot segment (. or ..) in request path"}';
    assert.deepEqual(answers(dot), [{ head: `HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nConnection: close\r\nDate: <date>\r\nContent-Length: ${dotBody.length}\r\n\r\n`, body: dotBody }]);
    // HTTP/1.1 without Host: Go's answer
    const noHost = await exchange(sb.port, `GET /ping HTTP/1.1\r\n${secure}X-EXECD-ACCESS-TOKEN: ${TOKEN}\r\n\r\n`);
    assert.equal(noHost, 'HTTP/1.1 400 Bad Request: missing required Host header\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request: missing required Host header');
  });

  it('bad framing is Go\'s raw 400; a head over 16 KiB a 431; a chunked body is read', async () => {
    const bad = await exchange(sb.port, `GET /ping HTTP/1.1\r\nHost: execd\r\n${secure}Content-Length: x\r\n\r\n`);
    assert.equal(bad, 'HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request');
    const big = await exchange(sb.port, `GET /ping HTTP/1.1\r\nHost: execd\r\n${secure}X-Big: ${'a'.repeat(17000)}\r\n\r\n`);
    assert.equal(big, 'HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n');
    const chunked = await exchange(sb.port, `GET /ping HTTP/1.1\r\nHost: execd\r\n${secure}X-EXECD-ACCESS-TOKEN: ${TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n${get('/ping')}`, { done: (t) => answers(t).length === 2 });
    assert.deepEqual(answers(chunked), [{ head: PING_OK, body: '' }, { head: PING_OK, body: '' }]);
  });
});

describe('the C execd standalone', function () {
  this.timeout(30000);

  it('raises its open-files soft limit to the hard one, as Node does, and its commands inherit it', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-native-fd-'));
    // started with a soft limit of 256 (as under a service manager's low default)
    const child = spawn('/bin/sh', ['-c', 'ulimit -Sn 256 && exec "$@"', 'sh', execdBinary(), '--socket', path.join(dir, 'x.sock'),
      '--workspace', dir, '--command-tail-ms', '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      let out = '';
      child.stdout.on('data', (d) => { out += d; });
      await waitFor(() => out === 'execd ready\n', { timeoutMs: 10000, message: 'execd ready' });
      const hard = (await new Promise((resolve, reject) => {
        const sh = spawn('/bin/sh', ['-c', 'ulimit -Hn'], { stdio: ['ignore', 'pipe', 'inherit'] });
        let t = '';
        sh.stdout.on('data', (d) => { t += d; });
        sh.on('exit', () => resolve(t.trim()));
        sh.on('error', reject);
      }));
      const text = await new Promise((resolve, reject) => {
        const body = JSON.stringify({ command: 'ulimit -Sn' });
        const req = http.request({ socketPath: path.join(dir, 'x.sock'), path: '/command', method: 'POST', headers: { 'Content-Length': Buffer.byteLength(body) } }, (res) => {
          let t = '';
          res.on('data', (d) => { t += d; });
          res.on('end', () => resolve(t));
        });
        req.on('error', reject);
        req.end(body);
      });
      assert.deepEqual(parseEvents(text).filter((e) => e.type === 'stdout').map((e) => e.text), [hard]);
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => (child.exitCode !== null ? r() : child.once('exit', r)));
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
